"""The review queue's rebuild at a pool's size (issue 45): its statements do not grow with the
images (no UPDATE with a CASE branch per row, no list of ids in a query), a settings change that
re-opens decided work re-opens exactly it, and the class runs over arrays give the priorities the
row-by-row rule gives. Checked by the statements made, not by a timing."""
from __future__ import annotations

import numpy as np
import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from curation.models import CandidateClass, Image, ImageEmbedding, ReviewItem, Source
from curation.services.review import review_queue_sync, review_settings_save
from pipelines.review.order import class_runs, class_runs_arrays

pytestmark = pytest.mark.django_db


def _pool(n: int) -> Source:
    source = Source.objects.create(name="pool", root="/nonexistent")
    classes = CandidateClass.objects.bulk_create([CandidateClass(source=source, folder=f"c{k}", mapping="unmapped") for k in range(3)])
    images = Image.objects.bulk_create([Image(source=source, candidate_class=classes[k % 3], relative_path=f"c/{k}.jpg", sha256=f"{k:064x}",
                                              status="ok" if k % 11 else "broken") for k in range(n)])
    ImageEmbedding.objects.bulk_create([ImageEmbedding(image=i, model_name="m", nearest_id_similarity=(i.pk % 17) / 17,
                                                       drop_reason="" if i.pk % 13 else f"near_duplicate_of:{i.pk - 1}") for i in images])
    return source


def _statements(fn):
    with CaptureQueriesContext(connection) as ctx:
        fn()
    return [q["sql"] for q in ctx.captured_queries]


@pytest.mark.skipif(connection.vendor != "postgresql", reason="the set-wise rebuild is PostgreSQL's (SQLite rebuilds row by row)")
def test_a_rebuild_after_a_settings_change_makes_the_same_statements_at_any_size(settings):
    settings.DEFAULT_MODEL = "m"
    source = _pool(30)
    review_queue_sync(source=source, model_name="m")
    made = []
    for size, reviews in ((30, 2), (90, 3)):
        if size > 30:  # the pool grows three-fold
            cls = CandidateClass.objects.filter(source=source).first()
            images = Image.objects.bulk_create([Image(source=source, candidate_class=cls, relative_path=f"d/{k}.jpg", sha256=f"{k + 10**6:064x}",
                                                      status="ok") for k in range(size - 30)])
            ImageEmbedding.objects.bulk_create([ImageEmbedding(image=i, model_name="m", nearest_id_similarity=0.5) for i in images])
            review_queue_sync(source=source, model_name="m")
        ReviewItem.objects.filter(source=source).update(status="complete", done=reviews - 1, final_decision="ood")
        sqls = _statements(lambda: review_settings_save(source=source, reviews_required=reviews))
        items = ReviewItem.objects.filter(source=source)
        # every decided image went back for one more review
        assert items.filter(status="open", required=reviews, final_decision="").count() == items.count() > 0
        touching = [s for s in sqls if "curation_reviewitem" in s]
        assert not [s for s in touching if s.count("WHEN") > 5], "an UPDATE with a branch per row"
        assert max(len(s) for s in sqls) < 4000, "a statement that grows with the rows"
        made.append(len(touching))
    assert made[0] == made[1]


def test_the_rebuild_counts_what_it_changed(settings):
    """Created, withdrawn, restored, re-prioritised and re-opened, as the report says them."""
    settings.DEFAULT_MODEL = "m"
    source = _pool(40)
    first = review_queue_sync(source=source, model_name="m")
    assert first.created == first.eligible == ReviewItem.objects.filter(source=source).count()
    assert first.excluded["broken_or_duplicate_file"] == 4 and first.excluded["dropped_by_duplicate_search"] > 0
    again = review_queue_sync(source=source, model_name="m")
    assert (again.created, again.updated, again.withdrawn, again.restored) == (0, 0, 0, 0)
    gone = ReviewItem.objects.filter(source=source).order_by("id").first()
    Image.objects.filter(pk=gone.image_id).update(excluded_reason="curator")
    out = review_queue_sync(source=source, model_name="m")
    assert out.withdrawn == 1 and ReviewItem.objects.get(pk=gone.pk).status == "withdrawn"
    Image.objects.filter(pk=gone.image_id).update(excluded_reason="")
    back = review_queue_sync(source=source, model_name="m")
    assert back.restored == 1 and ReviewItem.objects.get(pk=gone.pk).status == "open"


def test_class_runs_over_arrays_give_the_row_by_row_priorities():
    rng = np.random.default_rng(3)
    for n, run in ((1, 20), (200, 3), (5000, 20), (300, 1), (50, 0)):
        ids = rng.permutation(10 * n)[:n] + 1
        cls = rng.integers(0, max(1, n // 10), n)
        pr = np.round(rng.random(n), 2)  # ties broken by id, as the rows' way breaks them
        rows = class_runs({int(i): (int(c), float(p)) for i, c, p in zip(ids, cls, pr)}, run)
        arrays = class_runs_arrays(ids, cls, pr, run)
        assert [rows[int(i)] for i in ids] == arrays.tolist()


def test_the_dashboards_agreement_is_summed_by_the_database_and_equals_the_per_image_figures(django_user_model):
    """Fleiss' kappa and every pair's Cohen kappa from the database's sums equal the same figures
    from the reviews one by one, and no statement of the dashboard reads reviews row by row
    (1M images: 15 s, most of it the pairs looped over every image in Python)."""
    from curation import selectors
    from curation.models import Assignment, Review
    from pipelines.review.agreement import cohen_kappa, fleiss_kappa

    source = _pool(60)
    cls = CandidateClass.objects.filter(source=source).first()
    people = [django_user_model.objects.create(username=f"a{k}") for k in range(4)]
    rng = np.random.default_rng(5)
    decisions = ("ood", "id", "unclear")
    by_item: dict[int, dict[str, str]] = {}
    for k, image in enumerate(Image.objects.filter(source=source, status="ok").order_by("id")):
        who = [people[j] for j in rng.choice(4, 2 + k % 3, replace=False)]
        item = ReviewItem.objects.create(image=image, source=source, candidate_class=cls, done=len(who), required=2, status="complete")
        for p in who:
            d = decisions[int(rng.integers(0, 3))] if rng.random() < 0.4 else "ood"
            a = Assignment.objects.create(item=item, annotator=p, state="done", leased_at="2026-01-01T00:00:00Z", expires_at="2026-01-01T00:00:00Z")
            Review.objects.create(item=item, annotator=p, assignment=a, decision=d, seconds=2.0)
            by_item.setdefault(item.pk, {})[p.username] = d
    from curation.selectors.review import agreement_figures
    from curation.services.review_stats import review_stats_current

    d = selectors.review_dashboard(snap=review_stats_current())
    with CaptureQueriesContext(connection) as ctx:  # the agreement's own statements (the snapshot also sums pace medians, off the request)
        assert agreement_figures() == (d["fleiss"], d["multi_reviewed"], d["pairs"])
    assert d["multi_reviewed"] == len(by_item)
    assert d["fleiss"] == pytest.approx(fleiss_kappa(list(v.values()) for v in by_item.values()))
    names = sorted(p.username for p in people)
    for pair in d["pairs"]:
        shared = [(v[pair["a"]], v[pair["b"]]) for v in by_item.values() if pair["a"] in v and pair["b"] in v]
        assert pair["n"] == len(shared) and pair["kappa"] == pytest.approx(cohen_kappa(*zip(*shared)))
    assert len(d["pairs"]) == len(names) * (len(names) - 1) // 2
    for q in ctx.captured_queries:
        sql = q["sql"].upper()
        if '"CURATION_REVIEW"' in sql.replace(" ", "") or "FROM CURATION_REVIEW " in sql:
            assert "GROUP BY" in sql or "COUNT(" in sql, f"reads reviews one by one: {q['sql'][:200]}"


def test_expired_leases_go_back_in_as_many_statements_for_40_as_for_4(django_user_model):
    """The request that finds expired leases reclaims them with one UPDATE per number of leases an
    item loses, not one per item (a 4M-image run: 319 queries in one review/next)."""
    from datetime import timedelta

    from django.utils import timezone

    from curation.models import Assignment
    from curation.services.review import review_reclaim_expired

    source = _pool(60)
    cls = CandidateClass.objects.filter(source=source).first()
    people = [django_user_model.objects.create(username=f"a{k}") for k in range(2)]
    images = list(Image.objects.filter(source=source, status="ok").order_by("id"))
    past = timezone.now() - timedelta(hours=1)
    statements = []
    for start, size in ((0, 4), (4, 40)):
        batch = images[start:start + size]
        for image in batch:
            item = ReviewItem.objects.create(image=image, source=source, candidate_class=cls, leased=2 if image.pk % 3 == 0 else 1)
            for p in people[:item.leased]:
                Assignment.objects.create(item=item, annotator=p, state="leased", leased_at=past, expires_at=past)
        with CaptureQueriesContext(connection) as ctx:
            ended = review_reclaim_expired(force=True)
        assert ended == Assignment.objects.filter(state="expired", item__image__in=batch).count() > size
        assert not ReviewItem.objects.filter(leased__gt=0).exists()
        statements.append(len(ctx.captured_queries))
    assert statements[0] == statements[1]
