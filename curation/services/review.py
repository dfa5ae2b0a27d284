"""The review queue: building it from what the automatic stages kept, leasing images to
annotators without collisions, recording decisions idempotently, undo, adjudication and gold.

Assignment rules (issue 5):
- an image is leased by locking its queue row (``SELECT ... FOR UPDATE SKIP LOCKED`` on
  PostgreSQL) and bumping its ``leased`` counter in the same transaction, so concurrent
  annotators never receive the same image unless it needs more reviews, and never the same
  annotator twice (one Assignment row per image and annotator);
- a lease lasts ``REVIEW_LEASE_SECONDS``; expired leases go back to the queue;
- a submission names its assignment: repeating it changes nothing; the decision is committed
  before the response that carries the next image.
"""
from __future__ import annotations

import hashlib
import random
import threading
import time
from array import array
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Iterable, Iterator, Sequence

import numpy as np
from django.conf import settings
from django.contrib.auth.models import User
from django.db import connection, transaction
from django.db.models import Count, F, FilteredRelation, Q
from django.db.models.functions import Greatest
from django.utils import timezone

from curation.audit import audit_record
from curation.models import (
    Assignment,
    CandidateClass,
    ClassVisualSignal,
    IdClassSet,
    Image,
    ImageEmbedding,
    Review,
    ReviewDecision,
    ReviewItem,
    ReviewSettings,
    Source,
    SynsetText,
)
from curation.selectors import Scope, annotator_scope, class_policy, not_seen_by
from curation.services.bulk import copy_columns
from curation.services.certification import certification_lease_orders, certification_quiet, certification_tick
from pipelines.review.order import class_runs_arrays

SECONDS_CAP = 300.0  # a longer gap is a break, not work on the image


class ReviewError(ValueError):
    """A request the queue refuses; the message says why and what to do."""


class NothingToUndo(ReviewError):
    pass


# -- building the queue ----------------------------------------------------------------------------

def _priority(order: str, image_id: int, nearest_similarity: float | None) -> float:
    if order == ReviewSettings.Order.RANDOM:
        # stable per image: re-building the queue does not reshuffle it
        return int.from_bytes(hashlib.sha1(f"oodc-review:{image_id}".encode()).digest()[:6], "big") / float(1 << 48)
    # closest to an ID image first: those are the likeliest to show an ID object
    return -(nearest_similarity if nearest_similarity is not None else -1.0)


def _settings_for(source: Source) -> tuple[ReviewSettings, dict[int, ReviewSettings]]:
    rows = list(ReviewSettings.objects.filter(source=source))
    base = next((r for r in rows if r.candidate_class_id is None), None) or ReviewSettings(source=source)
    return base, {r.candidate_class_id: r for r in rows if r.candidate_class_id is not None}


def synset_texts_sync(wnids: Iterable[str]) -> int:
    """Copy names, lemmas and glosses from WordNet for the synsets the screen will show."""
    wanted = set(wnids) - set(SynsetText.objects.filter(wnid__in=list(wnids)).values_list("wnid", flat=True))
    if not wanted:
        return 0
    from pipelines.classes.wordnet_graph import load_noun_graph

    graph = load_noun_graph(settings.NLTK_DATA)
    rows = []
    for wnid in sorted(wanted):
        i = graph.index_of_wnid(wnid)
        if i is None:
            continue
        rows.append(SynsetText(wnid=wnid, name=graph.names[i], label=graph.label(i),
                               lemmas=[x.replace("_", " ") for x in graph.lemmas[i]], gloss=graph.glosses[i]))
    SynsetText.objects.bulk_create(rows, ignore_conflicts=True, batch_size=2000)
    return len(rows)


@dataclass
class QueueSync:
    source: str
    eligible: int = 0
    created: int = 0
    updated: int = 0
    withdrawn: int = 0
    restored: int = 0
    finalized: int = 0
    excluded: dict = field(default_factory=dict)

    def summary(self) -> str:
        ex = ", ".join(f"{v} {k}" for k, v in sorted(self.excluded.items()) if v) or "none"
        return (f"{self.source}: {self.eligible} images to review ({self.created} new, {self.updated} re-prioritised, "
                f"{self.withdrawn} withdrawn, {self.restored} restored); not queued: {ex}")


def review_queue_sync(*, source: Source, model_name: str | None = None, user: User | None = None) -> QueueSync:
    """Put a candidate source's reviewable images in the queue (idempotent). An image is
    reviewable when it decoded, its class was kept by the latest class filter run (flags wait
    for a curator), its class was not rejected on the class screen, and the duplicate search
    kept it. Open images that stopped being reviewable are withdrawn; settings (reviews
    required, order) are applied to open images.

    At ImageNet-21K's size (13 million images, issue 45) the images are read as one stream and
    the reviewable ones kept in arrays, never a Python object per image; on PostgreSQL the queue
    is brought in line by a few statements against a temporary table of them, not row by row."""
    if source.role != Source.Role.CANDIDATE:
        raise ReviewError(f"{source.name} is an ID reference source; only candidate sources are reviewed")
    model_name = model_name or settings.DEFAULT_MODEL
    if not ImageEmbedding.objects.filter(image__source=source, model_name=model_name).exists():
        raise ReviewError(f"{source.name} has no predictions from {model_name} yet: run "
                          f"`python manage.py run_image_pipeline --sources {source.name}` (or the Sources admin's actions) first")
    policy = class_policy(source=source)
    base, per_class = _settings_for(source)
    report = QueueSync(source=source.name, excluded={"broken_or_duplicate_file": 0, "not_extracted": 0, "decode_failed": 0,
                                                     "dropped_by_duplicate_search": 0, "class_removed": 0, "class_flagged": 0,
                                                     "class_not_in_filter_run": 0, "excluded_by_curator": 0})
    # one rebuild of a source at a time on PostgreSQL, from its read of the images to its last batch:
    # a rebuild that read the images while another was inserting would take the other's new rows
    # for images that left the queue (its wanted state is keyed by the rows it read)
    with _queue_rebuild_lock(source):
        ids, classes, priorities, required = array("q"), array("q"), array("d"), array("h")
        items = array("q")  # the reviewable images' queue rows (0: not queued yet), beside ``ids``
        every = array("q")  # every queue row of the source: the update batches' boundaries (at most QUEUE_BATCH rows each)
        rows = (Image.objects.filter(source=source)
                .annotate(emb=FilteredRelation("embeddings", condition=Q(embeddings__model_name=model_name)))
                .order_by().values_list("id", "candidate_class_id", "status", "excluded_reason", "emb__id", "emb__ok", "emb__drop_reason",
                                        "emb__nearest_id_similarity", "review_item__id"))
        for image_id, class_id, status, excluded, emb_id, ok, drop_reason, similarity, item_id in rows.iterator(chunk_size=20000):
            if item_id is not None:
                every.append(item_id)
            if status != Image.Status.OK:
                report.excluded["broken_or_duplicate_file"] += 1
                continue
            if excluded:
                report.excluded["excluded_by_curator"] += 1
                continue
            if emb_id is None:
                # the class's verdict first: a removed class's images may never be extracted (run_image_pipeline
                # --skip-removed-classes), and "not extracted" would hide why
                standing = policy.of(class_id)
                if not standing.reviewable:
                    report.excluded[{"remove": "class_removed", "flag": "class_flagged"}.get(standing.verdict, "class_not_in_filter_run")] += 1
                else:
                    report.excluded["not_extracted"] += 1
                continue
            if not ok:
                report.excluded["decode_failed"] += 1
                continue
            if drop_reason:
                report.excluded["dropped_by_duplicate_search"] += 1
                continue
            standing = policy.of(class_id)  # the one class-eligibility policy (selectors.class_policy)
            if not standing.reviewable:
                report.excluded[{"remove": "class_removed", "flag": "class_flagged"}.get(standing.verdict, "class_not_in_filter_run")] += 1
                continue
            cfg = per_class.get(class_id, base)
            ids.append(image_id)
            items.append(item_id or 0)
            classes.append(class_id if class_id is not None else -1)
            priorities.append(_priority(cfg.order, image_id, similarity))
            required.append(cfg.reviews_required)
        report.eligible = len(ids)
        prio = np.frombuffer(priorities, dtype=np.float64) if len(priorities) else np.zeros(0)
        if base.group_classes and settings.REVIEW_CLASS_RUN > 0:  # a class's images in a row (pipelines.review.order)
            prio = class_runs_arrays(np.frombuffer(ids, dtype=np.int64), np.frombuffer(classes, dtype=np.int64), prio, settings.REVIEW_CLASS_RUN)
        if connection.vendor == "postgresql":
            # in batches, each its own transaction: a rebuild stopped half-way keeps what it wrote, and a
            # rerun changes only what is still out of line (every statement compares before it writes)
            _queue_apply_sql(source, ids, items, classes, prio, required, every, report)
            _finalize_reached_sql(source, report)  # images that already have the reviews now required
    with transaction.atomic():
        if connection.vendor != "postgresql":
            _queue_apply_rows(source, ids, classes, prio, required, report)
            # images that already have the reviews now required
            for item in ReviewItem.objects.select_for_update().filter(source=source, status=ReviewItem.Status.OPEN, done__gt=0,
                                                                      done__gte=F("required")):
                _finalize(item)
                item.save(update_fields=["status", "final_decision", "final_wnids", "decided_at"])
                report.finalized += 1
        audit_record(actor=user, action="review_queue_synced", target=source, data=report.__dict__ | {"model": model_name})
    class_wnids = CandidateClass.objects.filter(source=source).exclude(wnid="").values_list("wnid", flat=True)
    id_set = IdClassSet.objects.filter(is_default=True).first()
    synset_texts_sync(set(class_wnids) | set(id_set.wnids if id_set else []))
    return report


def _queue_apply_rows(source: Source, ids, classes, prio, required, report: QueueSync) -> None:
    """The queue brought in line with the reviewable images row by row (SQLite: the demo's and a
    laptop's queues, thousands of images)."""
    eligible = {int(i): (c if c >= 0 else None, float(p), int(r)) for i, c, p, r in zip(ids, classes, prio, required)}
    existing = {it.image_id: it for it in ReviewItem.objects.select_for_update().filter(source=source)}
    new = [ReviewItem(image_id=i, source=source, candidate_class_id=c, priority=p, required=r)
           for i, (c, p, r) in eligible.items() if i not in existing]
    ReviewItem.objects.bulk_create(new, batch_size=2000, ignore_conflicts=True)
    report.created = len(new)
    changed = []
    for image_id, item in existing.items():
        target = eligible.get(image_id)
        if target is None:
            if item.status == ReviewItem.Status.OPEN:
                item.status = ReviewItem.Status.WITHDRAWN
                changed.append(item)
                report.withdrawn += 1
            continue
        _c, priority, need = target
        if item.front_priority is not None:  # sent to the front (find similar): it stays there
            priority = item.front_priority
        need += item.extra_reviews  # a curator asked for more (image browser)
        dirty = False
        if item.status == ReviewItem.Status.WITHDRAWN:
            item.status = ReviewItem.Status.OPEN
            report.restored += 1
            dirty = True
        if item.priority != priority or item.required != need:
            item.priority, item.required = priority, need
            report.updated += 1
            dirty = True
        if item.status in (ReviewItem.Status.COMPLETE, ReviewItem.Status.CONFLICT) and item.done < item.required:
            _reopen(item)  # more reviews are now required
            dirty = True
        if dirty:
            changed.append(item)
    ReviewItem.objects.bulk_update(changed, ["status", "priority", "required", "final_decision", "final_wnids"], batch_size=2000)


QUEUE_BATCH = 50_000  # queue rows (or new images) per statement of the PostgreSQL rebuild: keyset ranges of ids
# ... when the caller holds a transaction (the admin's save, a test): the batches cannot commit, so
# they only bound a statement, and each one adds a version of every counter row its triggers touch
# that the open transaction cannot prune (QueueClassCount: a class's row read through a chain
# as long as the batches before it). At 13.2M images 184 batches of 50,000 made a settings
# change 800 s, 19 batches of 500,000 317 s.
QUEUE_BATCH_IN_TRANSACTION = 500_000
_QUEUE_LOCK = 45_0001  # pg_advisory_lock's first key for "rebuilding a source's queue" (the second: the source's id)


@contextmanager
def _queue_rebuild_lock(source: Source) -> Iterator[None]:
    """PostgreSQL's advisory lock on rebuilding ``source``'s queue, held across the rebuild's
    batches' transactions: a session lock released at the end, or inside a caller's transaction
    a transaction lock released with it. Nothing on SQLite (one writer at a time anyway)."""
    if connection.vendor != "postgresql":
        yield
        return
    held_by_caller = connection.in_atomic_block
    with connection.cursor() as cur:
        cur.execute("SELECT pg_advisory_xact_lock(%s, %s)" if held_by_caller else "SELECT pg_advisory_lock(%s, %s)",
                    [_QUEUE_LOCK, source.pk])
    try:
        yield
    finally:
        if not held_by_caller:
            with connection.cursor() as cur:
                cur.execute("SELECT pg_advisory_unlock(%s, %s)", [_QUEUE_LOCK, source.pk])


def queue_batches(keys: Sequence[int] | np.ndarray, size: int) -> list[tuple[int, int]]:
    """Keyset ranges ``(lo, hi]`` holding at most ``size`` of ``keys`` each, covering every
    bigint (the first starts below the smallest, the last reaches the largest): the rebuild's
    batches, of queue row ids for its updates and of image ids for its inserts."""
    if size < 1:
        raise ValueError(f"a batch holds at least one row, not {size}")
    ordered = np.sort(np.asarray(keys, dtype=np.int64))
    highs = [int(h) for h in ordered[size - 1::size]]
    # the last batch reaches the largest bigint: the keys after the last full batch, and any
    # queue row the stream did not list
    if highs and highs[-1] == int(ordered[-1]):
        highs[-1] = 2**63 - 1
    else:
        highs.append(2**63 - 1)
    lows = [-(2**63), *highs[:-1]]
    return list(zip(lows, highs))


def _queue_apply_sql(source: Source, ids, items, classes, prio, required, every, report: QueueSync) -> None:
    """The same as ``_queue_apply_rows`` by set-wise statements against two temporary tables (COPY):
    the wanted priority and reviews of each reviewable image already queued, by its queue row's
    id, and the reviewable images not queued yet. Then in keyset batches (``QUEUE_BATCH`` each),
    each batch its own transaction (``QUEUE_BATCH_IN_TRANSACTION`` each inside a caller's
    transaction): one UPDATE per range of queue row ids, which withdraws the open
    images no longer reviewable and writes priorities, reviews required, restores and re-openings
    only where they change; one INSERT per range of the new images' ids.

    Why batches (issue 45): one UPDATE of every queue row (a rebuild after which every priority
    moves, or a change of reviews per image) with its dozen indexes took 48 s at 1M images, 524 s
    at 4M and was cancelled after 15 minutes at 13.2M: one statement's WAL, sorts and dead rows
    grow with the whole queue. A batch's work is bounded by the batch, and a rebuild killed
    half-way resumes on its rerun (what a batch wrote compares equal and is not written again;
    new images are inserted once: ``image_id`` is unique).

    Why by the queue row's id, not the image's: rows are written in id order (a first build, and
    every batch of a rebuild rewrites its rows together), so a range of ids is a run of the
    table's pages and of its primary key. A range of image ids was that only where the queue was
    built in image order; a queue in priority order (ImageNet-21K's generated pool) had each
    batch read rows from all over a 1 GB table, and the rebuild grew 20x from 1M to 13.2M images."""
    S = ReviewItem.Status
    item_ids = np.frombuffer(items, dtype=np.int64) if len(items) else np.zeros(0, dtype=np.int64)
    image_ids = np.frombuffer(ids, dtype=np.int64) if len(ids) else np.zeros(0, dtype=np.int64)
    class_ids = np.frombuffer(classes, dtype=np.int64) if len(classes) else np.zeros(0, dtype=np.int64)
    need = np.frombuffer(required, dtype=np.int16) if len(required) else np.zeros(0, dtype=np.int16)
    queued = item_ids > 0
    old = np.flatnonzero(queued)[np.argsort(item_ids[queued], kind="stable")]  # in queue row order: the table's heap
    new = np.flatnonzero(~queued)  # the stream's image order
    size = QUEUE_BATCH_IN_TRANSACTION if connection.in_atomic_block else QUEUE_BATCH
    update_batches = queue_batches(every, size)
    insert_batches = queue_batches(image_ids[new], size) if len(new) else []
    with connection.cursor() as cur:
        try:
            cur.execute("DROP TABLE IF EXISTS oodc_queue_target")
            cur.execute("DROP TABLE IF EXISTS oodc_queue_new")
            cur.execute("CREATE TEMP TABLE oodc_queue_target (item_id bigint PRIMARY KEY, priority double precision, required smallint)")
            cur.execute("CREATE TEMP TABLE oodc_queue_new (image_id bigint PRIMARY KEY, class_id bigint, "
                        "priority double precision, required smallint)")
            copy_columns(cur, "oodc_queue_target", ("item_id", "priority", "required"), (item_ids[old], prio[old], need[old]))
            copy_columns(cur, "oodc_queue_new", ("image_id", "class_id", "priority", "required"),
                          (image_ids[new], class_ids[new], prio[new], need[new]))
            cur.execute("ANALYZE oodc_queue_target")
            cur.execute("ANALYZE oodc_queue_new")
            for lo, hi in update_batches:
                withdrawn, restored, moved = _queue_apply_batch(cur, source.pk, lo, hi, S)
                report.withdrawn += withdrawn
                report.restored += restored
                report.updated += moved
            for lo, hi in insert_batches:
                report.created += _queue_insert_batch(cur, source.pk, lo, hi, S)
        finally:
            if not (connection.in_atomic_block and connection.needs_rollback):  # else the caller's rollback drops them
                cur.execute("DROP TABLE IF EXISTS oodc_queue_target")
                cur.execute("DROP TABLE IF EXISTS oodc_queue_new")


def _queue_apply_batch(cur, source_id: int, lo: int, hi: int, S) -> tuple[int, int, int]:
    """One update batch of ``_queue_apply_sql``: the source's queue rows with an id in ``(lo, hi]``
    against their wanted state, in one transaction. Returns (withdrawn, restored, re-prioritised)."""
    with transaction.atomic():
        cur.execute(
            "WITH c AS ("
            " SELECT r.id, t.item_id IS NULL AS gone, t.item_id IS NOT NULL AND r.status = %(withdrawn)s AS restored,"
            " (r.priority IS DISTINCT FROM COALESCE(r.front_priority, t.priority) OR r.required <> t.required + r.extra_reviews) AS moved,"
            " (r.status IN (%(complete)s, %(conflict)s) AND r.done < t.required + r.extra_reviews) AS reopen,"
            " CASE WHEN t.item_id IS NULL THEN %(withdrawn)s"
            " WHEN r.status = %(withdrawn)s OR (r.status IN (%(complete)s, %(conflict)s) AND r.done < t.required + r.extra_reviews)"
            " THEN %(open)s ELSE r.status END AS status,"
            " CASE WHEN t.item_id IS NULL THEN r.priority ELSE COALESCE(r.front_priority, t.priority) END AS priority,"
            " COALESCE(t.required + r.extra_reviews, r.required) AS required"
            " FROM curation_reviewitem r LEFT JOIN oodc_queue_target t"
            " ON t.item_id = r.id AND t.item_id > %(lo)s AND t.item_id <= %(hi)s"
            " WHERE r.source_id = %(source)s AND r.id > %(lo)s AND r.id <= %(hi)s"
            "), u AS ("
            # a withdrawn image is never complete or in conflict: re-opening clears a decision, restoring has none
            " UPDATE curation_reviewitem r SET status = c.status, priority = c.priority, required = c.required,"
            " final_decision = CASE WHEN c.reopen THEN '' ELSE r.final_decision END,"
            " final_wnids = CASE WHEN c.reopen THEN '[]'::jsonb ELSE r.final_wnids END"
            # the batch's range on both sides: else the planner joins c to the whole queue by a scan per batch
            " FROM c WHERE r.id = c.id AND r.id > %(lo)s AND r.id <= %(hi)s"
            " AND ((c.gone AND r.status = %(open)s) OR (NOT c.gone AND (c.restored OR c.moved OR c.reopen)))"
            " RETURNING c.gone, c.restored, NOT c.gone AND c.moved AS moved"
            ") SELECT count(*) FILTER (WHERE gone), count(*) FILTER (WHERE restored), count(*) FILTER (WHERE moved) FROM u",
            {"withdrawn": S.WITHDRAWN, "open": S.OPEN, "complete": S.COMPLETE, "conflict": S.CONFLICT, "lo": lo, "hi": hi,
             "source": source_id})
        withdrawn, restored, moved = cur.fetchone()
    return withdrawn, restored, moved


def _queue_insert_batch(cur, source_id: int, lo: int, hi: int, S) -> int:
    """One insert batch of ``_queue_apply_sql``: the new reviewable images with an id in ``(lo, hi]``
    queued, in one transaction (``image_id`` is unique: a rerun, or a rebuild beside this one,
    inserts nothing twice). Returns how many were queued."""
    with transaction.atomic():
        cur.execute("INSERT INTO curation_reviewitem (image_id, source_id, candidate_class_id, priority, required, extra_reviews, done, "
                    "leased, status, final_decision, final_wnids, final_note, is_gold, created_at) "
                    "SELECT t.image_id, %s, t.class_id, t.priority, t.required, 0, 0, 0, %s, '', '[]', '', false, now() "
                    "FROM oodc_queue_new t WHERE t.image_id > %s AND t.image_id <= %s ORDER BY t.image_id "
                    "ON CONFLICT DO NOTHING", [source_id, S.OPEN, lo, hi])
        return cur.rowcount


def _finalize_reached_sql(source: Source, report: QueueSync) -> None:
    """Open images that already have the reviews now required (reviews per image lowered)
    decided as ``_finalize`` decides one: the reviews agree -> complete with their decision and
    the union of their ID classes, else conflict. Set-wise, in keyset batches of ``QUEUE_BATCH``
    items by id, each its own transaction (a lowered setting on a 13M-image pool decides
    millions: two statements per image before)."""
    S = ReviewItem.Status
    last = 0
    with connection.cursor() as cur:
        while True:
            with transaction.atomic():
                cur.execute(
                    "WITH batch AS (SELECT id FROM curation_reviewitem WHERE source_id = %(source)s AND status = %(open)s"
                    " AND done > 0 AND done >= required AND id > %(last)s ORDER BY id LIMIT %(size)s FOR UPDATE),"
                    " agg AS (SELECT b.id, count(DISTINCT v.decision) AS kinds, min(v.decision) AS decision,"
                    " COALESCE((SELECT jsonb_agg(DISTINCT w ORDER BY w) FROM curation_review v2, jsonb_array_elements_text(v2.id_wnids) w"
                    " WHERE v2.item_id = b.id AND NOT v2.is_gold), '[]'::jsonb) AS wnids"
                    " FROM batch b LEFT JOIN curation_review v ON v.item_id = b.id AND NOT v.is_gold GROUP BY b.id),"
                    " u AS (UPDATE curation_reviewitem r SET status = CASE WHEN a.kinds = 1 THEN %(complete)s ELSE %(conflict)s END,"
                    " final_decision = CASE WHEN a.kinds = 1 THEN a.decision ELSE '' END,"
                    " final_wnids = CASE WHEN a.kinds = 1 THEN a.wnids ELSE '[]'::jsonb END, decided_at = now()"
                    " FROM agg a WHERE r.id = a.id RETURNING r.id)"
                    " SELECT count(*), max(id) FROM u",
                    {"source": source.pk, "open": S.OPEN, "complete": S.COMPLETE, "conflict": S.CONFLICT, "last": last,
                     "size": QUEUE_BATCH})
                n, top = cur.fetchone()
            if not n:
                return
            report.finalized += n
            last = top


@dataclass
class SettingsImpact:
    """What a change of reviews per image does to work already decided (issue 31.2)."""
    before: int
    after: int
    reopen: int  # decided images (complete) that go back to the queue for more reviews
    decide: int  # open images that already have the reviews now required: decided at once
    conflicts: int = 0  # images in conflict, waiting for a curator, that go back for more reviews instead

    @property
    def changes_decided_work(self) -> bool:
        return bool(self.reopen or self.decide or self.conflicts)

    @property
    def token(self) -> str:
        """What a confirmation must send back: the counts it was shown."""
        return f"{self.before}-{self.after}-{self.reopen}-{self.decide}-{self.conflicts}"

    def summary(self) -> str:
        parts = []
        if self.reopen:
            parts.append(f"re-opens {self.reopen} decided image{'s' if self.reopen != 1 else ''} (each goes back to the queue for "
                         f"{'more reviews' if self.after - self.before > 1 else 'one more review'}, and leaves the next export "
                         "until it is decided again)")
        if self.conflicts:
            parts.append(f"sends {self.conflicts} image{'s' if self.conflicts != 1 else ''} in conflict back for more reviews "
                         "instead of adjudication")
        if self.decide:
            parts.append(f"decides {self.decide} open image{'s' if self.decide != 1 else ''} at once from the reviews "
                         "they already have")
        what = " and ".join(parts) if parts else "changes no decided image"
        return f"Reviews per image {self.before} -> {self.after} {what}."


def review_settings_impact(*, source: Source, reviews_required: int) -> SettingsImpact:
    """Counts, before saving, of the images a new source-wide ``reviews_required`` would re-open
    or decide, as the queue rebuild would (classes with their own setting are not affected;
    adjudicated images stay decided)."""
    base = ReviewSettings.objects.filter(source=source, candidate_class__isnull=True).first()
    before = base.reviews_required if base else ReviewSettings._meta.get_field("reviews_required").default
    own = ReviewSettings.objects.filter(source=source, candidate_class__isnull=False).values_list("candidate_class_id", flat=True)
    items = ReviewItem.objects.filter(source=source).exclude(candidate_class_id__in=list(own))
    if reviews_required == before or not ReviewItem.objects.filter(source=source).exists():  # no queue: nothing to apply to
        return SettingsImpact(before, reviews_required, 0, 0)
    need = reviews_required + F("extra_reviews")
    S = ReviewItem.Status
    # the three exact counts in one pass over the queue (13.2M images: 9.2M rows; three passes before)
    n = items.aggregate(reopen=Count("id", filter=Q(status=S.COMPLETE, done__lt=need)),
                        conflicts=Count("id", filter=Q(status=S.CONFLICT, done__lt=need)),
                        decide=Count("id", filter=Q(status=S.OPEN, done__gt=0, done__gte=need)))
    return SettingsImpact(before, reviews_required, n["reopen"], n["decide"], n["conflicts"])


def review_settings_save(*, source: Source, candidate_class: CandidateClass | None = None, reviews_required: int | None = None,
                         order: str | None = None, gold_rate: float | None = None, group_classes: bool | None = None,
                         user: User | None = None, impact: SettingsImpact | None = None) -> ReviewSettings:
    """Set how a source (or one class) is reviewed and apply it to the open queue. ``impact``:
    the counts the curator confirmed (``review_settings_impact``), recorded in the audit."""
    if reviews_required is not None and not 1 <= reviews_required <= 9:
        raise ReviewError(f"reviews required must be between 1 and 9, not {reviews_required}")
    if order is not None and order not in ReviewSettings.Order.values:
        raise ReviewError(f"queue order must be one of {', '.join(ReviewSettings.Order.values)}, not {order!r}")
    if gold_rate is not None and not 0 <= gold_rate <= 0.5:
        raise ReviewError(f"gold rate must be between 0 and 0.5, not {gold_rate}")
    obj, _ = ReviewSettings.objects.get_or_create(source=source, candidate_class=candidate_class)
    for name, value in (("reviews_required", reviews_required), ("order", order), ("gold_rate", gold_rate),
                        ("group_classes", group_classes)):
        if value is not None:
            setattr(obj, name, value)
    obj.updated_by = user if getattr(user, "pk", None) else None
    obj.save()
    review_cache_clear()
    audit_record(actor=user, action="review_settings_changed", target=obj,
                 data={"source": source.name, "class": candidate_class.folder if candidate_class else None,
                       "reviews_required": obj.reviews_required, "order": obj.order, "gold_rate": obj.gold_rate,
                       "group_classes": obj.group_classes,
                       **({"confirmed": {"reviews_required": [impact.before, impact.after], "reopened": impact.reopen,
                                         "conflicts_reopened": impact.conflicts, "decided": impact.decide}} if impact is not None else {})})
    review_queue_refresh_if_built(source=source, user=user)
    return obj


# -- final decisions -------------------------------------------------------------------------------

def _reopen(item: ReviewItem) -> None:
    item.status, item.final_decision, item.final_wnids = ReviewItem.Status.OPEN, "", []


def _finalize(item: ReviewItem, decisions: list[tuple[str, list]] | None = None) -> None:
    """Reviews agree -> complete with their decision; any disagreement (``id`` against ``ood``
    included) -> conflict, for a curator to adjudicate."""
    if decisions is None:
        decisions = list(item.reviews.filter(is_gold=False).values_list("decision", "id_wnids"))
    labels = {d for d, _w in decisions}
    if len(labels) == 1:
        item.status, item.final_decision = ReviewItem.Status.COMPLETE, labels.pop()
        item.final_wnids = sorted({w for _d, ws in decisions for w in ws})
    else:
        item.status, item.final_decision, item.final_wnids = ReviewItem.Status.CONFLICT, "", []
    item.decided_at = timezone.now()


# -- leasing ---------------------------------------------------------------------------------------

_reclaim_lock = threading.Lock()
_last_reclaim = 0.0


def review_reclaim_expired(*, force: bool = False) -> int:
    """Expired leases go back to the queue (run at most every few seconds per process)."""
    global _last_reclaim
    now_mono = time.monotonic()
    with _reclaim_lock:
        if not force and now_mono - _last_reclaim < settings.REVIEW_RECLAIM_EVERY:
            return 0
        _last_reclaim = now_mono
    now = timezone.now()
    with transaction.atomic():
        return _expire(Assignment.objects.select_for_update(skip_locked=True)
                       .filter(state=Assignment.State.LEASED, expires_at__lte=now), now)


def _expire(leases, now) -> int:
    """End the given leased assignments (in the caller's transaction): their images go back to
    the queue."""
    rows = list(leases.values_list("id", "item_id", "is_gold")[:5000])
    if not rows:
        return 0
    Assignment.objects.filter(id__in=[r[0] for r in rows]).update(state=Assignment.State.EXPIRED, finished_at=now)
    per_item: dict[int, int] = {}
    for _id, item_id, gold in rows:
        if not gold:
            per_item[item_id] = per_item.get(item_id, 0) + 1
    by_count: dict[int, list[int]] = {}  # one UPDATE per number of leases ended on an item (almost always 1), not one per item
    for item_id, n in per_item.items():
        by_count.setdefault(n, []).append(item_id)
    for n, ids in by_count.items():
        for start in range(0, len(ids), 1000):
            ReviewItem.objects.filter(pk__in=ids[start:start + 1000]).update(leased=Greatest(F("leased") - n, 0))
    return len(rows)


def review_scope_apply(*, annotator: User, user: User | None = None) -> int:
    """After an annotator's scope changed: the images they hold leased outside it go back to the
    queue at once (not when the lease runs out). Returns how many."""
    scope = annotator_scope(annotator)
    if scope.unrestricted:
        return 0
    with transaction.atomic():
        held = (Assignment.objects.select_for_update().filter(annotator=annotator, state=Assignment.State.LEASED)
                .exclude(item__in=ReviewItem.objects.filter(scope.q())))
        n = _expire(held, timezone.now())
        if n:
            audit_record(actor=user, action="review_scope_applied", target=annotator, data={"released": n})
    return n


def review_release_leases(*, item_ids: Sequence[int], user: User | None = None, why: str = "") -> int:
    """End every lease held on the given images at once (a curator's call: an image a person
    leased and left holds what waits for it, such as a certification's bound, until the lease
    runs out). A decision sent later on a released lease still counts. Returns how many leases."""
    with transaction.atomic():
        held = Assignment.objects.select_for_update().filter(item_id__in=list(item_ids), state=Assignment.State.LEASED)
        who = sorted(set(held.values_list("annotator__username", flat=True)))
        n = _expire(held, timezone.now())
        if n:
            audit_record(actor=user, action="review_leases_released", target=None,
                         data={"images": sorted(int(i) for i in item_ids)[:200], "leases": n, "held_by": who, "why": why})
    return n


def _lease(user, item_id: int, *, gold: bool, now) -> Assignment:
    """One upsert: a new lease, or this annotator's own expired lease on the image handed back."""
    a = Assignment(item_id=item_id, annotator=user, state=Assignment.State.LEASED, is_gold=gold, leased_at=now,
                   expires_at=now + timedelta(seconds=settings.REVIEW_LEASE_SECONDS), finished_at=None)
    Assignment.objects.bulk_create([a], update_conflicts=True, unique_fields=["item", "annotator"],
                                   update_fields=["state", "is_gold", "leased_at", "expires_at", "finished_at"])
    return a


def _lease_regular(user, scope: Scope, exclude: list[int], now) -> Assignment | None:
    for _attempt in range(5):
        with transaction.atomic():
            qs = (ReviewItem.objects.filter(scope.q(), status=ReviewItem.Status.OPEN)
                  .alias(slots=F("done") + F("leased")).filter(slots__lt=F("required"))
                  .filter(not_seen_by(user)).exclude(pk__in=exclude))
            item_id = None
            for ordered in certification_lease_orders(qs):  # a certification's sample first
                item_id = ordered.select_for_update(skip_locked=True, of=("self",)).values_list("id", flat=True).first()
                if item_id is not None:
                    break
            if item_id is None:
                return None
            # the guard also holds where row locks do not exist (SQLite serialises writers)
            taken = (ReviewItem.objects.filter(pk=item_id, status=ReviewItem.Status.OPEN)
                     .alias(slots=F("done") + F("leased")).filter(slots__lt=F("required")).update(leased=F("leased") + 1))
            if taken:
                return _lease(user, item_id, gold=False, now=now)
    return None


def _lease_gold(user, scope: Scope, exclude: list[int], now) -> Assignment | None:
    item_id = (ReviewItem.objects.filter(scope.q(), is_gold=True, status__in=ReviewItem.FINAL).filter(not_seen_by(user))
               .exclude(pk__in=exclude).order_by("?").values_list("id", flat=True).first())
    return _lease(user, item_id, gold=True, now=now) if item_id else None


_gold_cache: tuple[float, dict[int, float]] = (-1e9, {})


def _gold_rate(scope: Scope) -> float:
    """The highest gold rate among the annotator's sources (source-level settings, cached for
    a few seconds per process: they change rarely and this is asked on every fetch)."""
    global _gold_cache
    now = time.monotonic()
    if now - _gold_cache[0] > settings.REVIEW_RECLAIM_EVERY:
        rates = dict(ReviewSettings.objects.filter(candidate_class__isnull=True, gold_rate__gt=0).values_list("source_id", "gold_rate"))
        _gold_cache = (now, rates)
    rates = _gold_cache[1]
    if not rates:
        return 0.0
    if scope.unrestricted:
        return max(rates.values())
    sources = scope.sources | set(CandidateClass.objects.filter(pk__in=scope.classes).values_list("source_id", flat=True))
    return max((r for s, r in rates.items() if s in sources), default=0.0)


def review_cache_clear() -> None:
    """Forget the per-process caches (after settings change in this process; tests)."""
    from curation.selectors import review_reads_cache_clear

    global _gold_cache, _last_reclaim
    _gold_cache, _last_reclaim = (-1e9, {}), 0.0
    _id_wnids_cache.clear()
    review_reads_cache_clear()
    certification_quiet()


def review_next(*, user: User, want: int | None = None, rng: random.Random | None = None) -> list[Assignment]:
    """The annotator's current image and the next ones (prefetch), oldest lease first. Leases
    they already hold come back (a closed browser loses nothing); new ones fill the rest."""
    want = want or settings.REVIEW_PREFETCH
    review_reclaim_expired()
    certification_tick()
    now = timezone.now()
    held = list(Assignment.objects.filter(annotator=user, state=Assignment.State.LEASED, expires_at__gt=now)
                .order_by("leased_at", "id")[:want])
    half = now + timedelta(seconds=settings.REVIEW_LEASE_SECONDS / 2)
    if any(a.expires_at < half for a in held):  # still working on them: keep the leases alive
        Assignment.objects.filter(pk__in=[a.pk for a in held]).update(expires_at=now + timedelta(seconds=settings.REVIEW_LEASE_SECONDS))
    if len(held) >= want:
        return held
    scope = annotator_scope(user)
    rate = _gold_rate(scope)
    rng = rng or random
    retried = False
    while len(held) < want:
        exclude = [a.item_id for a in held]
        a = None
        if rate and rng.random() < rate:
            a = _lease_gold(user, scope, exclude, now)
        if a is None:
            a = _lease_regular(user, scope, exclude, now)
        if a is None and not retried:
            retried = True  # the queue looks empty: give expired leases back and look once more
            if review_reclaim_expired(force=True):
                continue
        if a is None:
            break
        held.append(a)
    return held


# -- decisions -------------------------------------------------------------------------------------

_id_wnids_cache: dict[int, frozenset] = {}


def id_class_wnids() -> frozenset:
    id_set = IdClassSet.objects.filter(is_default=True).only("pk", "wnids").first()
    if id_set is None:
        raise ReviewError("no ID class set is chosen: run `python manage.py set_id_classes imagenet-1k`")
    if id_set.pk not in _id_wnids_cache:
        _id_wnids_cache[id_set.pk] = frozenset(id_set.wnids)
    return _id_wnids_cache[id_set.pk]


def _clean_decision(decision: str, wnids, note: str) -> tuple[str, list[str], str]:
    if decision not in ReviewDecision.values:
        raise ReviewError(f"unknown decision {decision!r}: use one of {', '.join(ReviewDecision.values)}")
    wnids = [str(w) for w in (wnids or [])]
    if decision == ReviewDecision.ID:
        if not wnids:
            raise ReviewError("an `id` decision needs the ID class(es) seen: pick one from the top-5 or the search")
        unknown = sorted(set(wnids) - id_class_wnids())
        if unknown:
            raise ReviewError(f"not ID classes: {', '.join(u[:40] for u in unknown[:5])}; choose ID classes from the top-5 (I, then 1-5) "
                              f"or the ID-class search (I, then /)")
        wnids = sorted(set(wnids))
    elif wnids:
        raise ReviewError(f"ID classes are recorded only with an `id` decision, not {decision!r}")
    note = (note or "").strip()
    if len(note) > 2000:
        raise ReviewError("the note is longer than 2000 characters")
    return decision, wnids, note


@dataclass
class Submitted:
    assignment: Assignment
    review: Review | None
    replay: bool  # the same submission again: nothing changed


def review_submit(*, user: User, assignment_id: int, decision: str, wnids: Sequence[str] | None = None, note: str = "",
                  seconds: float | None = None) -> Submitted:
    """Record an annotator's decision on a leased image (``skip`` releases it). Repeating a
    submission is harmless; a decision on an expired lease still counts (nothing is lost)."""
    decision, wnids, note = _clean_decision(decision, wnids, note)
    now = timezone.now()
    with transaction.atomic():
        a = (Assignment.objects.select_for_update(of=("self", "item")).select_related("item")
             .filter(pk=assignment_id, annotator=user).first())
        if a is None:
            raise ReviewError(f"assignment {assignment_id} is not one of yours")
        if a.state == Assignment.State.DONE:
            return Submitted(a, Review.objects.filter(assignment=a).first(), replay=True)
        if a.state == Assignment.State.SKIPPED:
            if decision == ReviewDecision.SKIP:
                return Submitted(a, None, replay=True)
            raise ReviewError("this image was skipped; it is not yours to decide any more")
        was_leased = a.state == Assignment.State.LEASED
        item = a.item
        a.finished_at = now
        if decision == ReviewDecision.SKIP:
            a.state = Assignment.State.SKIPPED
            a.save(update_fields=["state", "finished_at"])
            if was_leased and not a.is_gold:
                ReviewItem.objects.filter(pk=item.pk).update(leased=Greatest(F("leased") - 1, 0))
            return Submitted(a, None, replay=False)
        if seconds is None or not 0 < seconds < SECONDS_CAP:
            seconds = min((now - a.leased_at).total_seconds(), SECONDS_CAP)
        review = Review(item=item, annotator=user, assignment=a, decision=decision, id_wnids=wnids, note=note,
                        seconds=round(seconds, 3), is_gold=a.is_gold)
        if a.is_gold:
            review.gold_correct = decision == item.final_decision and (decision != ReviewDecision.ID or bool(set(wnids) & set(item.final_wnids)))
        review.save()
        a.state = Assignment.State.DONE
        a.save(update_fields=["state", "finished_at"])
        if not a.is_gold:
            item.done += 1
            if was_leased:
                item.leased = max(item.leased - 1, 0)
            fields = ["done", "leased"]
            if item.status == ReviewItem.Status.OPEN and item.done >= item.required:
                _finalize(item, [(decision, wnids)] if item.done == 1 else None)
                fields += ["status", "final_decision", "final_wnids", "decided_at"]
            item.save(update_fields=fields)
        audit_record(actor=user, action="review_decided", target=review,
                     data={"image": item.image_id, "decision": decision, "wnids": wnids, "note": note, "gold": a.is_gold})
    return Submitted(a, review, replay=False)


def review_undo(*, user: User) -> Assignment:
    """Take back the annotator's last decision: the image is leased to them again and shown
    first; counters and final decisions go back to what they were before it."""
    now = timezone.now()
    with transaction.atomic():
        review = (Review.objects.select_for_update(of=("self",)).select_related("assignment")
                  .filter(annotator=user).order_by("-created_at", "-id").first())
        if review is None:
            raise NothingToUndo("there is no decision of yours to undo")
        item = ReviewItem.objects.select_for_update().get(pk=review.item_id)
        if item.status == ReviewItem.Status.ADJUDICATED:
            raise ReviewError("a curator has already adjudicated this image; it cannot be undone here")
        a = review.assignment
        first = (Assignment.objects.filter(annotator=user, state=Assignment.State.LEASED).order_by("leased_at").values_list("leased_at", flat=True).first())
        a.state, a.finished_at = Assignment.State.LEASED, None
        a.leased_at = min(now, first - timedelta(microseconds=1)) if first else now  # shown before the prefetched one
        a.expires_at = now + timedelta(seconds=settings.REVIEW_LEASE_SECONDS)
        a.save(update_fields=["state", "finished_at", "leased_at", "expires_at"])
        old = {"decision": review.decision, "wnids": review.id_wnids, "note": review.note, "at": review.created_at.isoformat()}
        review.delete()
        if not review.is_gold:
            item.done = max(item.done - 1, 0)
            item.leased += 1
            if item.status in (ReviewItem.Status.COMPLETE, ReviewItem.Status.CONFLICT):
                _reopen(item)
            item.save(update_fields=["done", "leased", "status", "final_decision", "final_wnids"])
        audit_record(actor=user, action="review_undone", target=item, data={"image": item.image_id, "undone": old})
    return a


# -- curators --------------------------------------------------------------------------------------

def review_adjudicate(*, item_id: int, decision: str, wnids: Sequence[str] | None = None, note: str = "", make_gold: bool = False,
                      user: User | None = None) -> ReviewItem:
    """A curator's final word on an image whose reviews disagree (or any reviewed image)."""
    decision, wnids, note = _clean_decision(decision, wnids, note)
    if decision == ReviewDecision.SKIP:
        raise ReviewError("adjudication needs a decision; skip is not one")
    with transaction.atomic():
        item = ReviewItem.objects.select_for_update().filter(pk=item_id).first()
        if item is None:
            raise ReviewError(f"no review item {item_id}")
        if item.done == 0:
            raise ReviewError("nobody has reviewed this image yet")
        # the whole previous state, so that an undo (curation/services/adjudication.py) restores it exactly
        before = {"status": item.status, "decision": item.final_decision, "wnids": item.final_wnids, "note": item.final_note,
                  "decided_by": item.decided_by_id, "decided_at": item.decided_at.isoformat() if item.decided_at else None,
                  "gold": item.is_gold}
        item.status, item.final_decision, item.final_wnids, item.final_note = ReviewItem.Status.ADJUDICATED, decision, wnids, note
        item.decided_by, item.decided_at = (user if getattr(user, "pk", None) else None), timezone.now()
        item.is_gold = item.is_gold or make_gold
        item.save(update_fields=["status", "final_decision", "final_wnids", "final_note", "decided_by", "decided_at", "is_gold"])
        audit_record(actor=user, action="review_adjudicated", target=item,
                     data={"image": item.image_id, "decision": decision, "wnids": wnids, "note": note, "gold": item.is_gold, "before": before})
    return item


def review_items_set_gold(*, item_ids: Iterable[int], gold: bool, user: User | None = None) -> int:
    """Use finished images (complete or adjudicated) as gold: their final decision is the
    known answer annotators are checked against."""
    with transaction.atomic():
        qs = ReviewItem.objects.select_for_update().filter(pk__in=list(item_ids))
        if gold:
            qs = qs.filter(status__in=ReviewItem.FINAL)
        ids = list(qs.values_list("pk", flat=True))
        ReviewItem.objects.filter(pk__in=ids).update(is_gold=gold)
        for pk in ids:
            audit_record(actor=user, action="gold_set" if gold else "gold_unset", target=ReviewItem(pk=pk))
    return len(ids)


@dataclass
class RejectionImpact:
    """What rejecting a class does to work already done on its images (issue 31.2)."""
    class_label: str
    images: int  # its images in the review queue
    decided_ood: int  # decided clean: no later export carries them
    decided_other: int  # decided id/unclear, or in conflict
    open_reviewed: int  # open, with reviews already given: withdrawn with them
    reviews: int  # reviews recorded on its images (kept, no longer counted)
    exported: int  # its images in finished exports (those stay as written)

    @property
    def changes_decided_work(self) -> bool:
        return bool(self.decided_ood or self.decided_other or self.open_reviewed)

    @property
    def token(self) -> str:
        """What a confirmation must send back: the counts it was shown."""
        return f"{self.images}-{self.decided_ood}-{self.decided_other}-{self.open_reviewed}"

    def summary(self) -> str:
        return (f"Rejecting {self.class_label} takes its {self.images} images out of review and export: {self.decided_ood} decided "
                f"clean are no longer exportable, {self.open_reviewed} open images with reviews leave the queue, and "
                f"{self.decided_other} decided id/unclear or in conflict no longer count ({self.reviews} reviews stay on record).")

    def as_dict(self) -> dict:
        return {"images": self.images, "decided_ood": self.decided_ood, "decided_other": self.decided_other,
                "open_reviewed": self.open_reviewed, "reviews": self.reviews, "exported": self.exported}


def class_rejection_impact(*, candidate_class: CandidateClass) -> RejectionImpact:
    """Counts, before a curator rejects ``candidate_class``, of the decided and reviewed work on
    its images that the rejection withdraws."""
    from curation.models import ExportMember, Review

    items = ReviewItem.objects.filter(candidate_class=candidate_class)
    final = items.filter(status__in=ReviewItem.FINAL)
    return RejectionImpact(
        class_label=candidate_class.label,
        images=items.count(), decided_ood=final.filter(final_decision=ReviewDecision.OOD).count(),
        decided_other=final.exclude(final_decision=ReviewDecision.OOD).count() + items.filter(status=ReviewItem.Status.CONFLICT).count(),
        open_reviewed=items.filter(status=ReviewItem.Status.OPEN, done__gt=0).count(),
        reviews=Review.objects.filter(item__candidate_class=candidate_class, is_gold=False).count(),
        exported=ExportMember.objects.filter(image__review_item__candidate_class=candidate_class).values("image_id").distinct().count())


def class_signal_resolve(*, signal_id: int, resolution: str, note: str = "", user: User | None = None,
                         impact: RejectionImpact | None = None) -> ClassVisualSignal:
    """Accept or reject a class flagged as visually ambiguous; rejecting withdraws its images
    from the review queue."""
    if resolution not in ("accept", "reject"):
        raise ReviewError(f"resolution must be accept or reject, not {resolution!r}")
    with transaction.atomic():
        sig = ClassVisualSignal.objects.select_for_update().select_related("candidate_class__source").get(pk=signal_id)
        sig.resolution, sig.resolution_note, sig.resolved_at = resolution, note, timezone.now()
        sig.resolved_by = user if getattr(user, "pk", None) else None
        sig.save(update_fields=["resolution", "resolution_note", "resolved_by", "resolved_at"])
        audit_record(actor=user, action=f"class_signal_{resolution}", target=sig,
                     data={"class": str(sig.candidate_class), "reason": sig.reason, "note": note,
                           **({"confirmed_impact": impact.as_dict()} if impact else {})})
    return sig


def review_queue_refresh_if_built(*, source: Source, user: User | None = None) -> QueueSync | None:
    """Re-apply the queue rules after a class-level decision, where a queue exists."""
    if ReviewItem.objects.filter(source=source).exists():
        return review_queue_sync(source=source, user=user)
    return None


# -- the rules grid review (curation/services/review_grid.py) applies to a page: the same ones,
# not a copy of them ---------------------------------------------------------------------------------

clean_decision = _clean_decision
finalize_item = _finalize
lease_one = _lease
gold_rate_of = _gold_rate
