"""Pages' reads at a pool's size (issue 45), checked by their plans and statements, not timings:
the duplicate groups are read through the partial index of the dropped members, never by a pass
over every prediction."""
from __future__ import annotations

import pytest
from django.db import connection

from curation.models import CandidateClass, Image, ImageEmbedding, Source
from curation.selectors.duplicates import _grouped, duplicate_group_counts, duplicate_group_list
from tests.sql_plans import plan_without_seq_scans

pytestmark = pytest.mark.django_db


def _pool(n: int, group_every: int = 10) -> Source:
    source = Source.objects.create(name="pool", root="/nonexistent")
    cls = CandidateClass.objects.create(source=source, folder="c", mapping="unmapped")
    images = Image.objects.bulk_create([Image(source=source, candidate_class=cls, relative_path=f"c/{k}.jpg", sha256=f"{k:064x}", status="ok")
                                        for k in range(n)])
    rows = []
    for k, image in enumerate(images):
        rep = images[k - 1].pk if k % group_every == 1 else image.pk  # every tenth image a near-duplicate of the one before
        drop = f"near_duplicate_of:{rep}" if rep != image.pk else ""
        rows.append(ImageEmbedding(image=image, model_name="m", search_group=rep, dup_group=rep, search_drop=drop, drop_reason=drop))
    ImageEmbedding.objects.bulk_create(rows)
    return source


def test_the_groups_and_their_counts_are_the_groups_of_more_than_one():
    _pool(100)
    counts = duplicate_group_counts(model_name="m")
    assert counts == {"total": 10, "open": 10, "decided": 0}
    rows, nxt = duplicate_group_list(model_name="m", limit=4)
    assert [r.size for r in rows] == [2, 2, 2, 2] and nxt is not None


@pytest.mark.skipif(connection.vendor != "postgresql", reason="the plan is PostgreSQL's")
def test_the_groups_are_read_through_the_dropped_members_index():
    _pool(300)
    with connection.cursor() as cur:
        cur.execute("ANALYZE curation_imageembedding")
    sql, params = _grouped("m", None).query.sql_with_params()
    plan = plan_without_seq_scans(sql, params)
    assert "emb_dup_members" in plan, plan


def test_the_class_search_index_is_built_from_plain_rows_in_one_query():
    """A pool's 20,000 classes: the index the browser's class filter searches is built from one
    query's plain rows (1M-image pool: 4.5 of 6.3 s were 40,000 model instances made per request)."""
    from django.test.utils import CaptureQueriesContext

    from curation.models import Image as ImageRow
    from curation.selectors.browse import _candidate_class_index, class_ids_for_name

    source = Source.objects.create(name="pool", root="/nonexistent")
    made = CandidateClass.objects.bulk_create([CandidateClass(source=source, folder=f"n{k:08d}", wnid=f"n{k:08d}", synset_name=f"thing_{k}.n.01",
                                                              lemmas=[f"thing_{k}"], mapping="wnid_folder") for k in range(50)])
    with CaptureQueriesContext(connection) as ctx:
        index = _candidate_class_index()
    assert len(ctx.captured_queries) == 1 and len(index) == 50
    hit = index.search("thing 7", limit=1)[0].entry.ref
    assert (hit.pk, hit.source.name, hit.folder) == (made[7].pk, "pool", "n00000007") and hit.label == made[7].label
    assert class_ids_for_name("thing 7") == [made[7].pk]
    assert not isinstance(hit, (CandidateClass, ImageRow))


def test_ingest_finalize_matches_the_scan_against_the_images_in_the_database():
    """The images no chunk of a scan saw become missing, without the pool's paths coming to
    Python: no statement of the finalize reads every image's path (4M images: 1.6 GB resident)."""
    from django.test.utils import CaptureQueriesContext

    from curation.models import Job, JobChunk
    from curation.services.ingest import ingest_finalize

    source = Source.objects.create(name="pool", root="/nonexistent")
    cls = CandidateClass.objects.create(source=source, folder="c", mapping="unmapped")
    Image.objects.bulk_create([Image(source=source, candidate_class=cls, relative_path=f"c/{k}.jpg", sha256=f"{k:064x}", status="ok")
                               for k in range(30)])
    job = Job.objects.create(kind="ingest", source=source, status="running", total=2, result={"refused_paths": ["c/29.jpg"]})
    seen = [[f"c/{k}.jpg", "c", 1, 1, "", -1] for k in range(30) if k not in (3, 17, 29)]
    JobChunk.objects.create(job=job, index=0, payload=seen[:10], done=True, stats={"unchanged": 10})
    JobChunk.objects.create(job=job, index=1, payload=seen[10:], done=True, stats={"unchanged": len(seen) - 10})
    JobChunk.objects.create(job=job, index=2, payload={}, done=True, stats={})  # a chunk that planned nothing
    with CaptureQueriesContext(connection) as ctx:
        job = ingest_finalize(job_id=job.pk)
    assert job.result["newly_missing"] == 2 and job.result["unchanged"] == 27
    assert sorted(Image.objects.filter(status="missing").values_list("relative_path", flat=True)) == ["c/17.jpg", "c/3.jpg"]
    if connection.vendor == "postgresql":
        for q in ctx.captured_queries:
            sql = q["sql"]
            assert not (sql.startswith("SELECT") and '"curation_image"."relative_path"' in sql and "WHERE" in sql
                        and "sha256" not in sql), f"every image's path read: {sql[:200]}"


def test_an_annotators_today_is_a_range_on_the_review_time(django_user_model):
    """The review screen's bearings count today's reviews by a range the (annotator, created_at)
    index answers, not by casting every review's time to a date (13.2M images: 0.47 s a call)."""
    from django.test.utils import CaptureQueriesContext
    from django.utils import timezone

    from curation.models import Assignment, Review, ReviewItem
    from curation.selectors.review import annotator_progress

    source = Source.objects.create(name="pool", root="/nonexistent")
    cls = CandidateClass.objects.create(source=source, folder="c", mapping="unmapped")
    user = django_user_model.objects.create(username="a")
    for k in range(3):
        image = Image.objects.create(source=source, candidate_class=cls, relative_path=f"c/{k}.jpg", sha256=f"{k:064x}", status="ok")
        item = ReviewItem.objects.create(image=image, source=source, candidate_class=cls, done=1, status="complete")
        a = Assignment.objects.create(item=item, annotator=user, state="done", leased_at=timezone.now(), expires_at=timezone.now())
        r = Review.objects.create(item=item, annotator=user, assignment=a, decision="ood", seconds=2.0 + k)
        if k == 0:  # yesterday's
            Review.objects.filter(pk=r.pk).update(created_at=timezone.now() - timezone.timedelta(days=1, hours=1))
    with CaptureQueriesContext(connection) as ctx:
        p = annotator_progress(user)
    assert p["done_today"] == 2 and p["median_seconds"] == 3.5
    assert not [q["sql"] for q in ctx.captured_queries if "::date" in q["sql"] or "AT TIME ZONE" in q["sql"]]


def test_the_group_counts_equal_the_grouped_rows_and_read_only_the_members_index(admin_user):
    """The counts on the duplicate page come from the partial index of dropped members (an ID copy
    alone is no group; a corrected member decides its group) and equal the groups of more than one
    (4M images: 9 s, a heap read per member of every group, before)."""
    from django.test.utils import CaptureQueriesContext

    from curation.models import DuplicateOverride

    _pool(100)
    alone = ImageEmbedding.objects.filter(search_drop="").order_by("id").last()
    ImageEmbedding.objects.filter(pk=alone.pk).update(search_drop="duplicate_of_id:1", drop_reason="duplicate_of_id:1")  # its own group
    member = ImageEmbedding.objects.exclude(search_drop="").exclude(pk=alone.pk).order_by("id").first()
    DuplicateOverride.objects.create(image_id=member.image_id, model_name="m", action="not_duplicate", created_by=admin_user)
    rows = list(_grouped("m", None))
    expected = {"total": len(rows), "decided": sum(1 for r in rows if r["decided"])}
    with CaptureQueriesContext(connection) as ctx:
        counts = duplicate_group_counts(model_name="m")
    assert counts == {**expected, "open": expected["total"] - expected["decided"]} == {"total": 10, "decided": 1, "open": 9}
    if connection.vendor == "postgresql":
        with connection.cursor() as cur:
            cur.execute("ANALYZE curation_imageembedding")
        plan = plan_without_seq_scans(ctx.captured_queries[0]["sql"])
        assert "emb_dup_members" in plan and "Seq Scan" not in plan, plan


def test_id_examples_read_the_id_sources_classes_not_every_class_of_the_same_wnid():
    """The review screens' ID examples (up to 4 ID reference images per predicted wnid) select
    the ID sources' classes of those wnids first, then their images: joined by wnid alone the
    statement weighed the candidate pool's classes of the same wnids too (ImageNet-1K's classes
    are among ImageNet-21K's). The same images either way; pool images are never examples."""
    from django.test.utils import CaptureQueriesContext

    from curation.selectors import review as review_selectors

    review_selectors._examples_cache.clear()
    id_source = Source.objects.create(name="ref", root="/nonexistent", role=Source.Role.ID)
    pool = Source.objects.create(name="pool", root="/nonexistent")
    want = {}
    for k, wnid in enumerate(("n01440764", "n01443537")):
        ref_cls = CandidateClass.objects.create(source=id_source, folder=wnid, wnid=wnid)
        pool_cls = CandidateClass.objects.create(source=pool, folder=wnid, wnid=wnid)
        for j in range(6):
            Image.objects.create(source=pool, candidate_class=pool_cls, relative_path=f"{wnid}/p{j}.jpg", status=Image.Status.OK)
        ids = [Image.objects.create(source=id_source, candidate_class=ref_cls, relative_path=f"{wnid}/r{j}.jpg", status=Image.Status.OK).pk
               for j in range(5)]
        want[wnid] = ids[:4]
    with CaptureQueriesContext(connection) as ctx:
        got = review_selectors.id_examples(["n01440764", "n01443537"])
    assert got == want
    sql = next(q["sql"] for q in ctx.captured_queries if "ROW_NUMBER" in q["sql"])
    assert '"curation_image"."candidate_class_id" IN (SELECT' in sql and "\"role\" = 'id'" in sql.split("IN (SELECT", 1)[1], sql
    review_selectors._examples_cache.clear()
