"""The counters the database keeps for the pages (issue 45; migration 0032_queue_counters): after
every kind of write the services make, the per-class queue counters and the per-source image
counters equal a GROUP BY over the tables, on PostgreSQL (statement-level triggers) and on SQLite
(row-level triggers); and the pages that counted the whole queue per request now read the
counters: their statements do not read curation_reviewitem / curation_image / curation_review
whole, and their number does not grow with the pool."""
from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.db.models import Count, Q, Sum
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from curation.models import (
    AnnotatorQueueCount,
    AnnotatorScope,
    Assignment,
    CandidateClass,
    Image,
    ImageEmbedding,
    QueueClassCount,
    ReviewItem,
    Source,
    SourceImageCount,
)
from curation.services.review import (
    review_adjudicate,
    review_items_set_gold,
    review_next,
    review_queue_sync,
    review_reclaim_expired,
    review_release_leases,
    review_settings_save,
    review_submit,
    review_undo,
)
from curation.services.review_stats import review_stats_current
from tests.sql_plans import plan_without_seq_scans

pytestmark = pytest.mark.django_db

S = ReviewItem.Status
FINAL = Q(status__in=[S.COMPLETE, S.ADJUDICATED])


def _pool(n: int, name: str = "pool", classes: int = 3) -> Source:
    source = Source.objects.create(name=name, root="/nonexistent")
    made = CandidateClass.objects.bulk_create([CandidateClass(source=source, folder=f"c{k}", mapping="unmapped") for k in range(classes)])
    images = Image.objects.bulk_create([Image(source=source, candidate_class=made[k % classes], relative_path=f"c/{k}.jpg",
                                              sha256=f"{source.pk:08x}{k:056x}", status="ok" if k % 11 else "broken") for k in range(n)])
    ImageEmbedding.objects.bulk_create([ImageEmbedding(image=i, model_name="m", nearest_id_similarity=(i.pk % 17) / 17) for i in images])
    return source


def _expected_queue() -> dict:
    rows = (ReviewItem.objects.values("source_id", "candidate_class_id")
            .annotate(n_open=Count("id", filter=Q(status=S.OPEN)), n_complete=Count("id", filter=Q(status=S.COMPLETE)),
                      n_conflict=Count("id", filter=Q(status=S.CONFLICT)), n_adjudicated=Count("id", filter=Q(status=S.ADJUDICATED)),
                      n_withdrawn=Count("id", filter=Q(status=S.WITHDRAWN)),
                      final_decided=Count("id", filter=FINAL & ~Q(final_decision="")),
                      final_id=Count("id", filter=FINAL & Q(final_decision="id")), final_ood=Count("id", filter=FINAL & Q(final_decision="ood")),
                      final_unclear=Count("id", filter=FINAL & Q(final_decision="unclear")),
                      final_not_target=Count("id", filter=FINAL & Q(final_decision="not_target")),
                      done_sum=Sum("done", filter=~Q(status=S.WITHDRAWN), default=0),
                      required_sum=Sum("required", filter=~Q(status=S.WITHDRAWN), default=0),
                      n_gold=Count("id", filter=Q(is_gold=True))))
    out = {(r.pop("source_id"), r.pop("candidate_class_id")): r for r in rows}
    for key in out:
        out[key]["open_free"] = 0
    for it in ReviewItem.objects.filter(status=S.OPEN).values("source_id", "candidate_class_id", "done", "leased", "required"):
        if it["done"] + it["leased"] < it["required"]:
            out[(it["source_id"], it["candidate_class_id"])]["open_free"] += 1
    return out


def _kept_queue() -> dict:
    names = [f.name for f in QueueClassCount._meta.concrete_fields if f.name not in ("id", "source", "candidate_class")]
    return {(r.pop("source_id"), r.pop("candidate_class_id")): r for r in QueueClassCount.objects.values("source_id", "candidate_class_id", *names)}


def _expected_images() -> dict:
    return {(r["source_id"], r["status"]): r["n"] for r in Image.objects.values("source_id", "status").annotate(n=Count("id"))}


def _kept_images() -> dict:
    return {(r["source_id"], r["status"]): r["n"] for r in SourceImageCount.objects.values("source_id", "status", "n")}


def _expected_seen() -> dict:
    out: dict = {}
    for a in Assignment.objects.filter(item__status=S.OPEN).values("annotator_id", "item__source_id", "item__candidate_class_id", "state",
                                                                   "item__done", "item__leased", "item__required"):
        row = out.setdefault((a["annotator_id"], a["item__source_id"], a["item__candidate_class_id"]), {"seen_open": 0, "seen_free": 0})
        row["seen_open"] += a["state"] != "expired"
        row["seen_free"] += a["state"] in ("done", "skipped") and a["item__done"] + a["item__leased"] < a["item__required"]
    return {k: v for k, v in out.items() if v["seen_open"] or v["seen_free"]}


def _kept_seen() -> dict:
    return {(r.pop("annotator_id"), r.pop("source_id"), r.pop("candidate_class_id")): r
            for r in AnnotatorQueueCount.objects.values("annotator_id", "source_id", "candidate_class_id", "seen_open", "seen_free")}


def _agree(step: str) -> None:
    assert _kept_queue() == _expected_queue(), f"queue counters after {step}"
    assert _kept_seen() == _expected_seen(), f"annotators' counters after {step}"
    assert _kept_images() == _expected_images(), f"image counters after {step}"


def test_the_counters_equal_a_group_by_after_every_kind_of_write(settings, django_user_model):
    settings.DEFAULT_MODEL = "m"
    source = _pool(45)
    _agree("ingest (bulk insert)")
    review_settings_save(source=source, reviews_required=2)
    review_queue_sync(source=source, model_name="m")
    assert ReviewItem.objects.filter(source=source).exists()
    _agree("queue build")
    a, b, c = (django_user_model.objects.create(username=n) for n in ("a", "b", "c"))
    leases_a = review_next(user=a, want=6)
    _agree("lease")
    for lease in leases_a:
        review_submit(user=a, assignment_id=lease.pk, decision="ood", seconds=3.0)
    _agree("submit")
    assert _expected_seen(), "reviewed once of two: the images are a's, still open"
    leases_b = review_next(user=b, want=6)
    for k, lease in enumerate(leases_b):  # agreeing with a, disagreeing, or skipping
        review_submit(user=b, assignment_id=lease.pk, decision=("ood", "unclear", "skip")[k % 3], seconds=2.0)
    assert ReviewItem.objects.filter(status=S.CONFLICT).exists() and ReviewItem.objects.filter(status=S.COMPLETE).exists()
    _agree("agreement, conflict and skip")
    review_undo(user=b)
    _agree("undo")
    conflict = ReviewItem.objects.filter(status=S.CONFLICT).first()
    if conflict is not None:
        review_adjudicate(item_id=conflict.pk, decision="not_target")
    _agree("adjudication")
    review_items_set_gold(item_ids=list(ReviewItem.objects.filter(status=S.COMPLETE).values_list("pk", flat=True)[:2]), gold=True)
    _agree("gold")
    held = review_next(user=c, want=4)
    review_release_leases(item_ids=[held[0].item_id])
    Assignment.objects.filter(annotator=c, state=Assignment.State.LEASED).update(expires_at=timezone.now() - timedelta(minutes=1))
    review_reclaim_expired(force=True)
    _agree("released and expired leases")
    review_settings_save(source=source, reviews_required=3)  # re-opens decided work
    _agree("settings change (re-open)")
    gone = ReviewItem.objects.filter(source=source).order_by("pk").first()
    Image.objects.filter(pk=gone.image_id).update(excluded_reason="curator")
    review_queue_sync(source=source, model_name="m")
    assert ReviewItem.objects.get(pk=gone.pk).status == S.WITHDRAWN
    _agree("withdraw")
    ReviewItem.objects.filter(source=source, status=S.OPEN).update(status=S.COMPLETE, final_decision="id")  # a bulk UPDATE
    _agree("bulk update")
    Image.objects.filter(source=source, status="broken").update(status="missing")
    _agree("image status update")
    other = _pool(12, name="other")
    review_queue_sync(source=other, model_name="m")
    ReviewItem.objects.filter(source=source, candidate_class__folder="c0").delete()
    _agree("delete")
    Image.objects.filter(source=source).delete()  # with their queue items (the classes protect their images)
    source.delete()  # and its classes: nothing of it is left in the counters
    _agree("source deleted")
    assert not QueueClassCount.objects.filter(source_id=source.pk).exists() and not SourceImageCount.objects.filter(source_id=source.pk).exists()
    assert QueueClassCount.objects.filter(source=other).exists()


def test_an_item_without_a_class_is_counted_under_no_class():
    source = _pool(4, classes=1)
    image = Image.objects.filter(source=source).first()
    ReviewItem.objects.create(image=image, source=source, candidate_class=None)
    ReviewItem.objects.create(image=Image.objects.filter(source=source).last(), source=source, candidate_class=None, status=S.COMPLETE,
                              final_decision="ood")
    row = QueueClassCount.objects.get(source=source, candidate_class=None)
    assert (row.n_open, row.n_complete, row.final_ood, row.total) == (1, 1, 1, 2)
    ReviewItem.objects.filter(source=source).delete()
    assert not QueueClassCount.objects.filter(source=source).exists()


def _reviewed_pool(n: int, django_user_model, name: str = "pool", classes: int = 3) -> Source:
    """A queued pool with two annotators' reviews on its first items (agreements and conflicts)."""
    source = _pool(n, name=name, classes=classes)
    review_settings_save(source=source, reviews_required=2)
    review_queue_sync(source=source, model_name="m")
    for who in ("a", "b"):
        user, _ = django_user_model.objects.get_or_create(username=who)
        for k, lease in enumerate(review_next(user=user, want=4)):
            review_submit(user=user, assignment_id=lease.pk, decision="ood" if who == "a" or k % 2 else "unclear", seconds=2.0)
    return source


def _page_statements(fn) -> list[str]:
    with CaptureQueriesContext(connection) as ctx:
        fn()
    return [q["sql"] for q in ctx.captured_queries]


def _reads(sqls: list[str], table: str) -> list[str]:
    return [s for s in sqls if f'"{table}"' in s or f" {table} " in s]


def test_the_pages_read_the_counters_not_the_queue_and_make_as_many_queries_at_any_size(settings, django_user_model):
    """The annotator's queue, the review progress page (its snapshot current), the review
    screen's bearings and the home page's source summaries: no statement reads queue items or
    images (only an annotator's own rows, through their index), and the same number of statements
    for a pool three times the size with three times the classes (13.2M images: 16 s, 40 s,
    2.5 s and 2.2 s a request when they counted the whole queue)."""
    from curation import selectors
    from curation.services.review_stats import review_stats_compute

    settings.DEFAULT_MODEL = "m"
    made = []
    for size, classes in ((30, 3), (90, 9)):
        _reviewed_pool(size, django_user_model, name=f"pool{size}", classes=classes)
        snap = review_stats_compute()
        user = django_user_model.objects.get(username="a")
        counts = []
        for name, fn in (("queue", lambda: selectors.annotator_queue(user=user)), ("dashboard", lambda: selectors.review_dashboard(snap=snap)),
                         ("progress", lambda: selectors.annotator_progress(user)), ("home", selectors.source_summaries)):
            sqls = _page_statements(fn)
            assert not _reads(sqls, "curation_reviewitem") or name == "progress", f"{name} reads queue items: {sqls}"
            assert not _reads(sqls, "curation_image"), f"{name} reads images: {sqls}"
            if name != "progress":  # the bearings read this annotator's own assignments and reviews (their index)
                assert not [s for s in _every_review(sqls) if '"annotator_id" =' not in s], f"{name} reads every review: {sqls}"
            counts.append(len(sqls))
        made.append(counts)
    assert made[0] == made[1]


def _dashboard(**kw) -> dict:
    """What the progress page's view does: the snapshot asked for (recomputed if stale), then
    the page's figures over it."""
    from curation import selectors

    return selectors.review_dashboard(snap=review_stats_current(), **kw)


def _every_review(sqls: list[str]) -> list[str]:
    """Statements that read reviews, less the snapshot's staleness probe (the newest review's
    id: one entry of the primary key's index)."""
    return [s for s in _reads(sqls, "curation_review") if 'MAX("curation_review"."id")' not in s]


def test_the_review_pages_show_pace_gold_and_screens_from_the_snapshot_not_every_review(settings, django_user_model):
    """/review/ (the annotator's pace and gold accuracy) and /curate/reviews/ (every annotator's,
    with the flags, and gold accuracy by screen) read no review row and no grid page's audit
    entry once the snapshot is current: both summed every review on each request (all their
    seconds for the medians; 1.3M reviews at 13.2M images). A gold answer, which moves no queue
    counter, makes the snapshot stale."""
    from django.test import Client

    from curation.models import AuditLog
    from curation.roles import ANNOTATOR, CURATOR
    from curation.services.review_stats import review_stats_compute
    from curation.services.users import user_create_with_role

    settings.DEFAULT_MODEL = "m"
    _reviewed_pool(30, django_user_model)
    ann = user_create_with_role(username="a", password="pw-a", role=ANNOTATOR)[0]  # the pool's reviewer "a", in the role
    cur = user_create_with_role(username="cur", password="pw-cur", role=CURATOR)[0]
    AuditLog.objects.create(action="review_grid_page", data={"reviews": [1, 2]})
    review_stats_compute()
    for who, url in ((ann, "/review/"), (cur, "/curate/reviews/")):
        c = Client()
        c.force_login(who)
        with CaptureQueriesContext(connection) as ctx:
            r = c.get(url)
        assert r.status_code == 200
        sqls = [q["sql"] for q in ctx.captured_queries]
        assert not [s for s in _every_review(sqls) if '"annotator_id" =' not in s], f"{url} reads every review: {sqls}"
        assert not _reads(sqls, "curation_auditlog"), f"{url} reads the audit log: {sqls}"
    page = Client()
    page.force_login(ann)
    assert b'id="my-figures-at"' in page.get("/review/").content


def test_the_progress_open_count_is_the_counters_and_exact(settings, django_user_model):
    """The review screen's open count is exact and current (it was a per-process cache, a few
    seconds old, of a count over the whole queue)."""
    from curation.selectors.review import _open_with_free_slots, annotator_scope

    settings.DEFAULT_MODEL = "m"
    _reviewed_pool(30, django_user_model)
    user = django_user_model.objects.get(username="a")

    def expected() -> int:
        return sum(1 for it in ReviewItem.objects.filter(status=S.OPEN) if it.done + it.leased < it.required)

    before = expected()
    assert _open_with_free_slots(annotator_scope(user))[0] == before
    for who in ("c", "d"):  # two more leases fill some items' last slot
        review_next(user=django_user_model.objects.create(username=who), want=3)
    assert _open_with_free_slots(annotator_scope(user))[0] == expected() < before


def test_the_dashboard_shows_a_page_of_classes_and_pages_on(settings, django_user_model):
    from curation import selectors
    from curation.services.review_stats import review_stats_compute

    settings.DEFAULT_MODEL = "m"
    _reviewed_pool(40, django_user_model, classes=7)
    review_stats_compute()
    seen, after = [], None
    while True:
        d = selectors.review_dashboard(snap=review_stats_current(), after=after, limit=3)
        seen += [r["candidate_class__folder"] for r in d["classes"]]
        assert d["classes_count"] == 7 and len(d["classes"]) <= 3
        if d["classes_next"] is None:
            break
        after = d["classes_next"]
    assert seen == sorted(seen) == [f"c{k}" for k in range(7)]
    assert d["totals"]["total"] == ReviewItem.objects.exclude(status=S.WITHDRAWN).count()


def test_the_agreement_is_a_snapshot_recomputed_when_the_reviews_move(settings, django_user_model):
    """Off the request where there is a broker (a task queued on commit) or a background thread;
    in the request only where background work is off (tests, so the figures are current)."""
    from unittest import mock

    from curation.models import ReviewStatsSnapshot

    settings.DEFAULT_MODEL = "m"
    _reviewed_pool(30, django_user_model)
    first = _dashboard()  # background work off: computed here
    assert first["stats_at"] is not None and first["stats_reviews"] == 8 and [a["n"] for a in first["annotators"]] == [4, 4]
    again = _page_statements(_dashboard)
    assert not _every_review(again), "the snapshot was current: nothing to recompute"
    lease = review_next(user=django_user_model.objects.get(username="a"), want=1)[0]
    review_submit(user=lease.annotator, assignment_id=lease.pk, decision="ood", seconds=2.0)
    settings.CELERY_TASK_ALWAYS_EAGER = False  # a broker: the page queues the task and shows the figures it has
    with mock.patch("curation.celery.app.send_task") as delay:
        with CaptureQueriesContext(connection) as ctx, mock.patch("django.db.transaction.on_commit", side_effect=lambda f: f()):
            d = _dashboard()
            _dashboard()  # a second page within a minute queues nothing more
    assert delay.call_count == 1 and delay.call_args.args == ("curation.review_stats.refresh",) and d["stats_reviews"] == 8
    assert not _every_review([q["sql"] for q in ctx.captured_queries])
    settings.CELERY_TASK_ALWAYS_EAGER = True
    ReviewStatsSnapshot.objects.update(requested_at=None)
    assert _dashboard()["stats_reviews"] == 9


def test_the_contamination_sample_is_the_seeded_sample_of_the_finished_items_without_reading_their_ids(settings, django_user_model):
    """The same images as ``random.Random(seed).sample`` over the pool's ids in order, picked by
    position in the database: no statement returns every finished item's id (13.2M: ~900,000)."""
    import random

    from curation import selectors

    settings.DEFAULT_MODEL = "m"
    source = _pool(60)
    review_queue_sync(source=source, model_name="m")
    ReviewItem.objects.filter(source=source, pk__in=list(ReviewItem.objects.filter(source=source).values_list("pk", flat=True)[::2])).update(
        status=S.COMPLETE, final_decision="id")
    pool = list(ReviewItem.objects.filter(source=source, status__in=[S.COMPLETE, S.ADJUDICATED]).exclude(final_decision="")
                .order_by("pk").values_list("pk", flat=True))
    for sample, seed in ((7, 3), (400, 0)):
        chosen = sorted(random.Random(seed).sample(pool, min(sample, len(pool))))
        with CaptureQueriesContext(connection) as ctx:
            r = selectors.contamination_report(source=source, sample=sample, seed=seed)
        assert r["reviewed"] == len(pool) and r["n"] == len(chosen) == r["n_id"]
        got = sorted(ReviewItem.objects.filter(pk__in=chosen).values_list("pk", flat=True))
        assert got == chosen
        assert not [q for q in ctx.captured_queries if '"curation_reviewitem"."id" AS "pk"' in q["sql"] and "ROW_NUMBER" not in q["sql"].upper()]


def test_the_annotators_figures_from_their_counters_equal_their_rows_counted(settings, django_user_model):
    """"Waiting for you" per class and the review screen's "left" from the per-annotator counters
    equal the counts over their assignments that they replace (13.2M images: 0.74 s a request)."""
    from curation import selectors
    from curation.selectors.review import not_seen_by

    settings.DEFAULT_MODEL = "m"
    _reviewed_pool(45, django_user_model)
    a = django_user_model.objects.get(username="a")
    review_next(user=a, want=3)  # held leases too
    held = Assignment.objects.filter(annotator=a, state=Assignment.State.LEASED).first()
    review_submit(user=a, assignment_id=held.pk, decision="skip")
    q = selectors.annotator_queue(user=a)
    for row in q["rows"]:
        expected = ReviewItem.objects.filter(status=S.OPEN, candidate_class__folder=row["candidate_class__folder"]).filter(not_seen_by(a)).count()
        assert row["waiting"] == expected
    assert sum(r["waiting"] for r in q["rows"]) < sum(r["open"] for r in q["rows"])

    def left(in_scope: Q) -> int:
        mine = Assignment.objects.filter(in_scope, annotator=a, item__status=S.OPEN).select_related("item")
        seen = sum(1 for x in mine if x.state in ("done", "skipped") and x.item.done < x.item.required - x.item.leased)
        held_n = sum(1 for x in mine if x.state == "leased" and x.expires_at > timezone.now() and x.item.done >= x.item.required - x.item.leased)
        free = sum(1 for it in ReviewItem.objects.filter(status=S.OPEN).filter(**{k.removeprefix("item__"): v for k, v in in_scope.children})
                   if it.done + it.leased < it.required)
        return max(0, free - seen) + held_n

    assert selectors.annotator_progress(a)["left"] == left(Q())
    one = CandidateClass.objects.get(folder="c1")
    AnnotatorScope.objects.create(annotator=a, source=one.source, candidate_class=one)  # restricted to one class
    assert selectors.annotator_progress(a)["left"] == left(Q(item__candidate_class_id=one.pk))


def test_the_progress_pages_classes_table_pages_on_by_its_link(settings, django_user_model, monkeypatch):
    """/curate/reviews/ shows a page of classes and a link to the next (keyset by source and
    folder), to the last class; a malformed key is a 400."""
    import functools
    import re

    from django.test import Client

    from curation import selectors
    from curation.roles import CURATOR
    from curation.services.users import user_create_with_role

    settings.DEFAULT_MODEL = "m"
    _reviewed_pool(40, django_user_model, classes=7)
    monkeypatch.setattr(selectors, "review_dashboard", functools.partial(selectors.review_dashboard, limit=3))
    c = Client()
    c.force_login(user_create_with_role(username="cur", password="pw-cur", role=CURATOR)[0])
    url, pages = "/curate/reviews/", []
    while url and len(pages) < 5:
        html = c.get(url).content.decode()
        pages.append(html.count('<tr data-class'))
        nxt = re.search(r'href="(\?after_source=[^"]+)" id="classes-next"', html)
        url = "/curate/reviews/" + nxt.group(1).replace("&amp;", "&") if nxt else ""
    assert pages == [3, 3, 1]
    assert c.get("/curate/reviews/?after_source=" + "x" * 300).status_code == 400


@pytest.mark.skipif(connection.vendor != "postgresql", reason="EXPLAIN's wording and partial indexes' use are PostgreSQL's")
def test_the_contamination_sample_and_an_annotators_own_count_read_their_indexes(settings, django_user_model):
    """The contamination report numbers the decided items from ``review_item_final_by_id`` (the
    decided 10% of the queue, by id), not the queue's heap (0.5 s cold at 4M images); the
    annotator's own review count has ``review_annotator_gold_time`` (their non-gold reviews from
    the index, not their gold ones filtered out of the heap)."""
    from curation import selectors
    from curation.selectors.review import contamination_report

    settings.DEFAULT_MODEL = "m"
    source = _reviewed_pool(30, django_user_model)
    user = django_user_model.objects.get(username="a")
    sqls = _page_statements(lambda: contamination_report(source=source)) + _page_statements(lambda: selectors.annotator_queue(user=user))
    numbered = [s for s in sqls if "ROW_NUMBER" in s]
    assert numbered and all("review_item_final_by_id" in plan_without_seq_scans(s) for s in numbered), numbered
    # all their reviews (today's have the (annotator, created_at) index too). Which of three usable
    # indexes the planner takes for a few rows depends on the table statistics other tests leave
    # (ANALYZE's row estimate outlives a rolled-back test), so the index is pinned by its columns:
    # the statement's two equalities lead it, and the count needs no other column
    counts = [s for s in sqls if 'COUNT(*) AS "__count" FROM "curation_review"' in s and "is_gold" in s and "created_at" not in s]
    assert counts and all('"annotator_id" =' in s for s in counts), counts
    with connection.cursor() as c:
        c.execute("SELECT indexdef FROM pg_indexes WHERE indexname = 'review_annotator_gold_time'")
        (definition,) = c.fetchone()
    assert "(annotator_id, is_gold, created_at)" in definition and " WHERE " not in definition, definition
