"""The review figures that sum over every review (issue 45): Fleiss' kappa, each pair of
annotators' Cohen kappa and agreement, each annotator's reviews, time and gold accuracy. At
ImageNet-21K's size that is millions of reviews, seconds to sum; the review progress page shows
them from a snapshot (``ReviewStatsSnapshot``) labelled with its time and its number of reviews,
recomputed off the request when the reviews have changed.

Where it is recomputed: with a broker, by a Celery task (``curation.review_stats.refresh``);
without one (the demo), on the web process's background thread (``curation.jobs.background``'s
rule: a request never waits for the work it asked for), or in the request itself where that
thread is off (``JOBS_IN_BACKGROUND = False``: tests, which then see current figures)."""
from __future__ import annotations

import logging
import threading
from datetime import timedelta

from django.conf import settings
from django.db import connections, transaction
from django.db.models import Count, Max, Q, Sum
from django.utils import timezone

from curation.models import QueueClassCount, Review, ReviewStatsSnapshot

log = logging.getLogger("curation.review_stats")

# A page asks for a recomputation at most this often (seconds), however many pages are read
# while one runs; a recomputation over 1.8M reviews takes seconds.
REQUEST_EVERY_S = 60
# Figures older than this are recomputed even if the queue's reviews done did not move (a gold
# review or a review's edit moves no counter).
MAX_AGE = timedelta(hours=1)

REFRESH_TASK = "curation.review_stats.refresh"  # curation.tasks.review_stats_refresh_task
_running = threading.Lock()  # one background recomputation per process at a time


def _done_sum() -> int:
    """The queue's reviews done, from the counters (one row per class): the reviews moved when
    this did."""
    return int(QueueClassCount.objects.aggregate(n=Sum("done_sum", default=0))["n"])


def review_stats_compute() -> ReviewStatsSnapshot:
    """Sum the figures over every review now and keep them as the snapshot."""
    from dataclasses import asdict

    from curation.selectors.adjudication import quality_rows
    from curation.selectors.grid import gold_accuracy_by_screen
    from curation.selectors.review import agreement_figures

    done_sum = _done_sum()  # read first: reviews made while summing make the next page ask again
    last_review = _last_review()
    fleiss, multi_reviewed, pairs = agreement_figures()
    annotators = []
    for row in (Review.objects.values("annotator__username")
                .annotate(n=Count("id", filter=Q(is_gold=False)), seconds=Sum("seconds", filter=Q(is_gold=False)),
                          gold=Count("id", filter=Q(is_gold=True)), gold_ok=Count("id", filter=Q(is_gold=True, gold_correct=True)),
                          last=Max("created_at"))
                .order_by("annotator__username")):
        row["last"] = row["last"].isoformat() if row["last"] else None
        annotators.append(row)
    now = timezone.now()
    figures = {"fleiss": fleiss, "multi_reviewed": multi_reviewed, "pairs": pairs, "annotators": annotators,
               # pace and gold accuracy with their flags (every timed review's seconds for the medians), and gold
               # accuracy by screen (every grid page's audit entry): both read every review, so both are summed here
               "quality": [asdict(q) for q in quality_rows()], "gold_by_screen": gold_accuracy_by_screen(),
               "last_review": last_review}
    with transaction.atomic():
        snap = _snapshot_row(lock=True)
        snap.computed_at, snap.done_sum, snap.figures = now, done_sum, figures
        snap.reviews = sum(a["n"] for a in annotators)
        snap.save()
    return snap


def _snapshot_row(*, lock: bool = False) -> ReviewStatsSnapshot:
    qs = ReviewStatsSnapshot.objects.select_for_update() if lock else ReviewStatsSnapshot.objects
    snap = qs.order_by("pk").first()
    if snap is None:
        snap, _ = ReviewStatsSnapshot.objects.get_or_create(pk=1)
    return snap


def _last_review() -> int:
    """The newest review's id (the primary key's index, one row): a gold answer moves it and no
    queue counter."""
    return int(Review.objects.aggregate(n=Max("id", default=0))["n"])


def _stale(snap: ReviewStatsSnapshot) -> bool:
    if snap.computed_at is None or timezone.now() - snap.computed_at > MAX_AGE:
        return True
    return snap.done_sum != _done_sum() or snap.figures.get("last_review") != _last_review()


def review_stats_current() -> ReviewStatsSnapshot:
    """The snapshot to show, after asking for a recomputation if the reviews moved since it was
    made (off the request, except where background work is off: then here, current)."""
    snap = _snapshot_row()
    if not _stale(snap):
        return snap
    if settings.CELERY_TASK_ALWAYS_EAGER and not settings.JOBS_IN_BACKGROUND:
        return review_stats_compute()
    now = timezone.now()
    # one request per REQUEST_EVERY_S, claimed by the row's update (two pages at once queue one)
    claimed = (ReviewStatsSnapshot.objects.filter(pk=snap.pk)
               .filter(Q(requested_at__isnull=True) | Q(requested_at__lt=now - timedelta(seconds=REQUEST_EVERY_S)))
               .update(requested_at=now))
    if claimed:
        if settings.CELERY_TASK_ALWAYS_EAGER:
            threading.Thread(target=_compute_in_background, name="oodc-review-stats", daemon=True).start()
        else:
            from curation.celery import app  # by the task's name: services sit below curation.tasks

            transaction.on_commit(lambda: app.send_task(REFRESH_TASK))
    return snap


def _compute_in_background() -> None:
    if not _running.acquire(blocking=False):
        return
    try:
        review_stats_compute()
    except Exception:  # the page keeps the previous figures; the next page asks again after REQUEST_EVERY_S
        log.exception("recomputing the review figures failed")
    finally:
        _running.release()
        connections.close_all()  # this thread's own connection
