"""Grid review (docs/review.md, "Grid review"): an annotator decides a page of one class's
images at once. Each tile is one lease and one Review with the meaning it has on the
single-image screen: the same queue, scope, leases, reviews per image, gold scoring and audit
(every decision goes through ``review_submit``). What the grid adds is leasing a page of one
class in one go, recording a page in one request, and undoing a page.
"""
from __future__ import annotations

import random
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Sequence

from django.conf import settings
from django.contrib.auth.models import User
from django.db import transaction
from django.db.models import Count, F, Q
from django.utils import timezone

from curation.audit import audit_record
from curation.models import Assignment, AuditLog, ImageEmbedding, Review, ReviewDecision, ReviewItem, SynsetText
from curation.models.review import GridPreference
from curation.selectors import annotator_scope, not_seen_by
from curation.selectors.grid import PAGE_ACTION
from curation.services.review import (
    SECONDS_CAP,
    NothingToUndo,
    ReviewError,
    clean_decision,
    finalize_item,
    gold_rate_of,
    review_reclaim_expired,
    review_undo,
)
from pipelines.numbers import whole_number

GRID_MIN, GRID_MAX = 4, 96  # tiles per page asked for (the screen asks for as many as fit its window)
PAGE_MAX = GRID_MAX + GRID_MAX // 2  # a page with its class's rest joined to it (no stub after it)
TILE_MIN, TILE_MAX, TILE_DEFAULT = 64, 400, 128  # an annotator's tile side in CSS pixels (remembered per annotator)


@dataclass
class _ClassScope:
    """The annotator's scope narrowed to one class (what the leasing helpers ask for)."""
    base: Q
    class_id: int | None

    def q(self) -> Q:
        return self.base & Q(candidate_class_id=self.class_id)


def _bounded(value: object, what: str, lo: int, hi: int) -> int:
    """A whole number from a request by the app's one rule (pipelines.numbers), within lo..hi."""
    try:
        return whole_number(value, what, lo=lo, hi=hi)
    except ValueError as exc:
        raise ReviewError(str(exc)) from None


def grid_size(value: object) -> int:
    """Tiles per page from a request: an integer between GRID_MIN and GRID_MAX."""
    return _bounded(value, "page size (tiles)", GRID_MIN, GRID_MAX)


def grid_tile(value: object) -> int:
    """A tile side from a request: whole CSS pixels between TILE_MIN and TILE_MAX."""
    return _bounded(value, "tile size (pixels)", TILE_MIN, TILE_MAX)


def grid_tile_save(*, user: User, tile: object) -> int:
    """Remember the annotator's tile side (the grid opens with it next time, in any browser).
    Writes only when it changed."""
    px = grid_tile(tile)
    pref, created = GridPreference.objects.get_or_create(annotator=user, defaults={"tile_px": px})
    if not created and pref.tile_px != px:
        GridPreference.objects.filter(pk=pref.pk).update(tile_px=px)
    return px


def _held(user: User, now):
    return Assignment.objects.filter(annotator=user, state=Assignment.State.LEASED, expires_at__gt=now)


def _lease_page(user: User, scope: _ClassScope, places: list[int], exclude: list[int], now) -> list[Assignment]:
    """Lease up to ``len(places)`` open images of the class at once: their queue rows locked
    (skipping rows another annotator is leasing), the ``leased`` counters bumped under the same
    guard as a single lease and the assignments upserted (leased at ``now`` + place µs), in one
    transaction: three statements and one commit for the page, nothing per tile."""
    want = len(places)
    if want <= 0:
        return []
    guarded = (ReviewItem.objects.filter(status=ReviewItem.Status.OPEN).alias(slots=F("done") + F("leased"))
               .filter(slots__lt=F("required")))
    with transaction.atomic():
        ids = list(ReviewItem.objects.filter(scope.q(), status=ReviewItem.Status.OPEN)
                   .alias(slots=F("done") + F("leased")).filter(slots__lt=F("required"))
                   .filter(not_seen_by(user)).exclude(pk__in=exclude).order_by("priority", "id")
                   .select_for_update(skip_locked=True, of=("self",)).values_list("id", "image_id")[:want])
        if not ids:
            return []
        if guarded.filter(pk__in=[i for i, _im in ids]).update(leased=F("leased") + 1) == len(ids):
            return _upsert_leases(user, list(zip(places, ids)), gold=False, now=now)
        transaction.set_rollback(True)  # only where rows cannot be locked (SQLite): undo and take them one by one
    ids_ok = []
    for item_id, image_id in ids:
        with transaction.atomic():
            if guarded.filter(pk=item_id).update(leased=F("leased") + 1):
                ids_ok.append((item_id, image_id))
    return _upsert_leases(user, list(zip(places, ids_ok)), gold=False, now=now)


def _upsert_leases(user: User, placed: list[tuple[int, tuple[int, int]]], *, gold: bool, now) -> list[Assignment]:
    """One upsert for a page's leases ``[(place, (item id, image id)), ...]`` (new, or the
    annotator's own expired lease on the image handed back, as ``review.lease_one`` does for one
    image); the rows come back with their ids (PostgreSQL returns them), in place order, each
    with its ``image_id`` (the screen names the next page's images from it)."""
    rows = []
    for k, (item_id, image_id) in placed:
        a = Assignment(item_id=item_id, annotator=user, state=Assignment.State.LEASED, is_gold=gold,
                       leased_at=now + timedelta(microseconds=1 + k), expires_at=now + timedelta(seconds=settings.REVIEW_LEASE_SECONDS),
                       finished_at=None)
        a.image_id = image_id
        rows.append(a)
    if not rows:
        return []
    Assignment.objects.bulk_create(rows, update_conflicts=True, unique_fields=["item", "annotator"],
                                   update_fields=["state", "is_gold", "leased_at", "expires_at", "finished_at"])
    if any(a.pk is None for a in rows):  # a database that does not return ids from an upsert
        by_item = dict(Assignment.objects.filter(annotator=user, item_id__in=[a.item_id for a in rows]).values_list("item_id", "id"))
        for a in rows:
            a.pk = by_item[a.item_id]
    return sorted(rows, key=lambda a: (a.leased_at, a.pk))


def _lease_gold_of_class(user: User, scope: _ClassScope, places: list[int], exclude: list[int], now, rng) -> list[Assignment]:
    """Up to ``len(places)`` gold images of the page's class the annotator has not seen (a gold
    tile must not stand out by its class), leased at ``now`` + place µs."""
    n = len(places)
    if n <= 0:
        return []
    ids = list(ReviewItem.objects.filter(scope.q(), is_gold=True, status__in=ReviewItem.FINAL).filter(not_seen_by(user))
               .exclude(pk__in=exclude).values_list("id", "image_id")[:200])
    rng.shuffle(ids)
    return _upsert_leases(user, list(zip(places, ids[:n])), gold=True, now=now)


HELD_READ = 4 * GRID_MAX  # more live leases than two pages and the single screen's prefetch hold


def _held_by_class(user: User, now) -> list[Assignment]:
    """The annotator's live leases, oldest first, each with its image's class as ``class_id`` and
    its image as ``image_id`` (one query: the page's class and its held tiles both come from it)."""
    return list(_held(user, now).annotate(class_id=F("item__candidate_class_id"), image_id=F("item__image_id"))
                .order_by("leased_at", "id")[:HELD_READ])


_EARLIEST = datetime.min.replace(tzinfo=UTC)  # a finished assignment without its time (none is written so) sorts first


def _last_class(user: User) -> list[int | None]:
    """``[class]`` of the annotator's last finished tile (``[]`` before their first): the newest
    lease among their decided tiles and among their skipped ones, each the last row of the
    (annotator, state, leased_at) index, whichever finished later. A page's tiles are leased and
    finished together, so the newest lease finished is of the last page. Ordering all their
    finished assignments by ``finished_at`` (no index) sorted every one of them on each new class:
    about 170,000 per annotator at 13.2M images (issue 45)."""
    newest = []
    for state in (Assignment.State.DONE, Assignment.State.SKIPPED):
        newest += list(Assignment.objects.filter(annotator=user, state=state).order_by("-leased_at")
                       .values_list("finished_at", "id", "item__candidate_class_id")[:1])
    if not newest:
        return []
    return [max(newest, key=lambda row: (row[0] or _EARLIEST, row[1]))[2]]


def _pick_class(user: User, base: Q, now, held: list[Assignment] | None = None) -> int | None | bool:
    """The class the page shows: that of the annotator's oldest live lease; else the class of
    their last page while it still has images for them (one class at a time, to its end, though
    the queue itself serves classes in turns); else that of the most urgent open image they could
    get. ``False`` when nothing is left."""
    if held is None:
        held = _held_by_class(user, now)
    if held:
        return held[0].class_id
    waiting = (ReviewItem.objects.filter(base, status=ReviewItem.Status.OPEN).alias(slots=F("done") + F("leased"))
               .filter(slots__lt=F("required")).filter(not_seen_by(user)))
    last = _last_class(user)
    if last and waiting.filter(candidate_class_id=last[0]).exists():
        return last[0]
    row = list(waiting.order_by("priority", "id").values_list("candidate_class_id", flat=True)[:1])
    return row[0] if row else False


@dataclass
class GridLease:
    assignments: list[Assignment]  # the page: one class
    class_id: int | None  # the page's class (None: images without a class folder, or nothing left)
    upcoming: list[Assignment] = field(default_factory=list)  # leased for the next page (prefetch)
    busy: bool = False  # no page although images are waiting: others were leasing them at this instant


def _waiting(user: User, base: Q):
    """Open queue rows with a free slot that this annotator could still be given."""
    return (ReviewItem.objects.filter(base, status=ReviewItem.Status.OPEN).alias(slots=F("done") + F("leased"))
            .filter(slots__lt=F("required")).filter(not_seen_by(user)))


WAITING_CAP = 4 * GRID_MAX  # more waiting images of a class than any page decision compares with


def _waiting_in_class(user: User, base: Q, class_id: int | None) -> int:
    """How many of the class's open images the annotator could still be given, counted up to
    ``WAITING_CAP``: whether a page leaves a stub, and how far a page stretches, compare this with
    at most a page and a half after a page and a half (a capped count decides them as the full
    one would). The full count read every waiting row of the class on each page: up to 3,000
    per class at 13.2M images, each with a probe of the annotator's assignments (issue 45)."""
    return _waiting(user, base).filter(candidate_class_id=class_id)[:WAITING_CAP].count()


def _next_class(user: User, base: Q, after: int | None) -> int | None | bool:
    """The class of the page after a class's last one: the most urgent other class with
    images for the annotator (what ``_pick_class`` will choose once that class is done)."""
    waiting = _waiting(user, base)
    waiting = waiting.exclude(candidate_class_id__isnull=True) if after is None else waiting.exclude(candidate_class_id=after)
    row = list(waiting.order_by("priority", "id").values_list("candidate_class_id", flat=True)[:1])
    return row[0] if row else False


def _fill_class(user: User, scope, base: Q, class_id: int | None, held: list[Assignment], size: int, now, rng,
                first_place: int = 0, exclude: Sequence[int] = ()) -> list[Assignment]:
    """``held`` (the annotator's live leases of the class) topped up with new leases of the
    class to ``size``: gold tiles at the source's gold rate among them, at drawn places."""
    narrowed = _ClassScope(base, class_id)
    missing = size - len(held)
    if missing <= 0:
        return held
    rate = gold_rate_of(scope)
    n_gold = sum(1 for _ in range(missing) if rate and rng.random() < rate)
    exclude = [*exclude, *(a.item_id for a in held)]
    # gold tiles among the others, not all at the end: their places on the page are drawn
    # first, and every lease's time follows its place (the page keeps its order when fetched again)
    places = list(range(first_place, first_place + missing))
    gold_places = sorted(rng.sample(places, n_gold))
    gold = _lease_gold_of_class(user, narrowed, gold_places, exclude, now, rng)
    used = set(gold_places[:len(gold)])
    fresh = _lease_page(user, narrowed, [p for p in places if p not in used][:missing - len(gold)],
                        exclude + [a.item_id for a in gold], now)
    return held + sorted(fresh + gold, key=lambda a: (a.leased_at, a.pk or 0))


def _real(tiles: Sequence[Assignment]) -> int:
    return sum(1 for a in tiles if not a.is_gold)


def _no_stub(user: User, base: Q, class_id: int | None, page: list[Assignment], beyond: list[Assignment], size: int,
             total_real: int, now, first_place: int) -> tuple[list[Assignment], list[Assignment]]:
    """A page that would leave fewer than half a page of its class behind takes that rest too
    (at most half a page more), so no page after it is a stub of a few tiles: from the leases
    held beyond the page first, then new ones. Returns the page and what is still held beyond it."""
    left = total_real - _real(page)
    if left <= 0 or 2 * left >= size:
        return page, beyond
    extra, beyond = list(beyond), []
    take: list[Assignment] = []
    while extra and _real(take) < left:
        take.append(extra.pop(0))
    need = left - _real(take)
    if need > 0:
        exclude = [a.item_id for a in page + take + extra]
        take += _lease_page(user, _ClassScope(base, class_id), list(range(first_place, first_place + need)), exclude, now)
    return page + take, extra


RACE_WAITS = (0.02, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.5)  # seconds between tries while others hold the rows (3 s in all)


def review_grid_next(*, user: User, size: int, prefetch: int = 0, rng: random.Random | None = None) -> GridLease:
    """A page of one class for grid review: the annotator's live leases of that class first
    (oldest first: a closed browser or an undone page comes back), then new leases of the same
    class up to ``size``; gold tiles at the source's gold rate, from the same class. A page
    never leaves a stub behind: when fewer than half a page of the class would be left after
    it, they join it (so a page holds between half a page and one and a half pages, unless it
    is its class's only one). With ``prefetch``, the next page is leased too, as the
    single-image screen holds the next image, so its thumbnails load while this page is
    decided: more of this class, or, when this page is the class's last, the first page of the
    class that comes next (its leases are younger, so the next call shows them once this page
    is sent).

    Two annotators asking at the same instant may pick the same class, and one of them finds
    its rows locked by the other's lease (they are skipped, not waited for). An empty page is
    only answered when nothing is left for the annotator: while images are waiting, the lease is
    tried again a few times over about three seconds, and if the rows are still held the answer
    says ``busy`` (the screen asks again), never "finished"."""
    size = grid_size(size)
    if not 0 <= prefetch <= GRID_MAX:
        raise ReviewError(f"prefetch must be between 0 and {GRID_MAX} tiles, not {prefetch}")
    rng = rng or random
    review_reclaim_expired()
    lease = _grid_next_once(user, size, prefetch, rng)
    for wait in RACE_WAITS:
        if not lease.busy:
            return lease
        time.sleep(wait * (0.5 + rng.random()))  # spread out, so racing annotators do not meet again
        lease = _grid_next_once(user, size, prefetch, rng)
    return lease


def _grid_next_once(user: User, size: int, prefetch: int, rng) -> GridLease:
    now = timezone.now()
    scope = annotator_scope(user)
    base = scope.q()
    live = _held_by_class(user, now)
    class_id = _pick_class(user, base, now, live)
    if class_id is False:
        if review_reclaim_expired(force=True):
            class_id = _pick_class(user, base, now)
        if class_id is False:
            return GridLease([], None)
    held = [a for a in live if a.class_id == class_id]
    half = now + timedelta(seconds=settings.REVIEW_LEASE_SECONDS / 2)
    if any(a.expires_at < half for a in held):  # still working on them: keep the leases alive (as review_next does)
        expires = now + timedelta(seconds=settings.REVIEW_LEASE_SECONDS)
        Assignment.objects.filter(pk__in=[a.pk for a in held]).update(expires_at=expires)
        for a in held:
            a.expires_at = expires
    total_real = _real(held) + _waiting_in_class(user, base, class_id)
    page = _fill_class(user, scope, base, class_id, held[:size], size, now, rng)
    if not page:
        # images are waiting, yet none could be leased: another annotator's lease holds them
        # locked at this instant (or took the last free slots); busy, not finished
        return GridLease([], class_id, busy=_waiting(user, base).exists())
    page, beyond = _no_stub(user, base, class_id, page, held[size:], size, total_real, now, first_place=size)
    upcoming: list[Assignment] = []
    if prefetch:
        place = len(page) + size
        left = total_real - _real(page)
        if left > 0 or beyond:
            upcoming = _fill_class(user, scope, base, class_id, beyond[:prefetch], _stretched(prefetch, left), now, rng,
                                   first_place=place, exclude=[a.item_id for a in page])
        else:
            nxt = _next_class(user, base, class_id)
            if nxt is not False:
                ahead = [a for a in live if a.class_id == nxt]
                nxt_total = _real(ahead) + _waiting_in_class(user, base, nxt)
                want = _stretched(prefetch, nxt_total)
                upcoming = _fill_class(user, scope, base, nxt, ahead[:want], want, now, rng, first_place=place)
    return GridLease(page, class_id, upcoming)


def _stretched(size: int, available: int) -> int:
    """How many tiles a page of ``size`` of a class with ``available`` images for the annotator
    takes: all of them when fewer than half a page would be left after it (as ``_no_stub``)."""
    rest = available - size
    return available if 0 < rest and 2 * rest < size else size


@dataclass
class PageSaved:
    reviews: list[int]
    skipped: int
    replays: int


def review_grid_submit(*, user: User, marks: Sequence[dict], seconds: float | None = None) -> PageSaved:
    """Record a page: ``marks`` = [{assignment, decision, wnids?, note?}, ...], one per tile
    (the screen fills unmarked tiles with ``ood`` when the annotator sends the page). Each mark
    means what ``review.review_submit`` makes of one decision (the same checks, replay rule,
    counters, final decision, gold scoring and ``review_decided`` audit entry; the grid test checks
    them in the database), done for the page at once: the page's assignments and items locked in
    one query, the rows written in bulk (a 96-tile page in a handful of statements instead of
    ~800), all in one transaction, so a page is recorded whole or not at all. ``seconds``: the
    page's time, shared out over its tiles. The page is audited as one entry so that undo can
    take it back."""
    if not isinstance(marks, (list, tuple)) or not marks:
        raise ReviewError("a page submit needs marks: a list of {assignment, decision} for the page's tiles")
    if len(marks) > PAGE_MAX:
        raise ReviewError(f"a page holds at most {PAGE_MAX} tiles, not {len(marks)}")
    per_tile = seconds / len(marks) if seconds is not None and seconds > 0 else None
    ids, seen, saved, skipped, replays = [], set(), [], 0, 0
    for m in marks:
        if not isinstance(m, dict):
            raise ReviewError("each mark must be an object {assignment, decision, wnids}")
        a = m.get("assignment")
        if isinstance(a, bool) or not isinstance(a, int) or not 0 < a < 2**63:
            raise ReviewError(f"assignment must be a positive integer id, not {str(a)[:40]!r}")
        if a in seen:
            raise ReviewError(f"assignment {a} is marked twice on this page")
        seen.add(a)
        ids.append(a)
    cleaned = []
    for m in marks:
        wnids = m.get("wnids") or []
        if not isinstance(wnids, list):
            raise ReviewError("wnids must be a list of ID class wnids")
        cleaned.append((m["assignment"], *clean_decision(str(m.get("decision", "")), wnids, str(m.get("note") or ""))))
    now = timezone.now()
    with transaction.atomic():
        held = {a.pk: a for a in Assignment.objects.select_for_update(of=("self", "item")).select_related("item")
                .filter(pk__in=ids, annotator=user)}
        for a_id in ids:
            if a_id not in held:
                raise ReviewError(f"assignment {a_id} is not one of yours")
        # the reviews the items already have, for those a decision here may finalise (more than one review required)
        earlier: dict[int, list[tuple[str, list]]] = {}
        needs = [a.item_id for a in held.values() if not a.is_gold and a.item.done + 1 >= a.item.required > 1]
        for item_id, d, w in Review.objects.filter(item_id__in=needs, is_gold=False).values_list("item_id", "decision", "id_wnids"):
            earlier.setdefault(item_id, []).append((d, w))
        reviews, touched_a, touched_items, audits = [], [], {}, []
        for a_id, decision, wnids, note in cleaned:
            a = held[a_id]
            if a.state == Assignment.State.DONE:
                replays += 1
                continue
            if a.state == Assignment.State.SKIPPED:
                if decision == ReviewDecision.SKIP:
                    replays += 1
                    continue
                raise ReviewError(f"the image of assignment {a_id} was skipped; it is not yours to decide any more")
            was_leased = a.state == Assignment.State.LEASED
            item = a.item
            a.finished_at = now
            touched_a.append(a)
            if decision == ReviewDecision.SKIP:
                a.state = Assignment.State.SKIPPED
                if was_leased and not a.is_gold:
                    item.leased = max(item.leased - 1, 0)
                    touched_items[item.pk] = item
                skipped += 1
                continue
            secs = per_tile if per_tile is not None and 0 < per_tile < SECONDS_CAP else min((now - a.leased_at).total_seconds(), SECONDS_CAP)
            review = Review(item=item, annotator=user, assignment=a, decision=decision, id_wnids=wnids, note=note,
                            seconds=round(secs, 3), is_gold=a.is_gold)
            if a.is_gold:
                review.gold_correct = decision == item.final_decision and (decision != ReviewDecision.ID or bool(set(wnids) & set(item.final_wnids)))
            reviews.append(review)
            a.state = Assignment.State.DONE
            if not a.is_gold:
                item.done += 1
                if was_leased:
                    item.leased = max(item.leased - 1, 0)
                if item.status == ReviewItem.Status.OPEN and item.done >= item.required:
                    finalize_item(item, earlier.get(item.pk, []) + [(decision, wnids)])
                    item.decided_at = now  # the page's moment (rows alike are then updated together)
                touched_items[item.pk] = item
        Review.objects.bulk_create(reviews)
        # rows that end with the same values are updated together: a page is a few UPDATEs (Django's
        # bulk_update builds a CASE per row and field, most of a page's time)
        by_state: dict[str, list[int]] = {}
        for a in touched_a:
            by_state.setdefault(a.state, []).append(a.pk)
        for state, pks in by_state.items():
            Assignment.objects.filter(pk__in=pks).update(state=state, finished_at=now)
        same: dict[tuple, list[int]] = {}
        for it in touched_items.values():
            same.setdefault((it.done, it.leased, it.status, it.final_decision, tuple(it.final_wnids), it.decided_at), []).append(it.pk)
        for (done, leased, status, final, wnids_, decided_at), pks in same.items():
            ReviewItem.objects.filter(pk__in=pks).update(done=done, leased=leased, status=status, final_decision=final,
                                                          final_wnids=list(wnids_), decided_at=decided_at)
        for r in reviews:  # one audit entry per decision, as the single-image screen writes
            audits.append(AuditLog(actor=user, action="review_decided", target_type=Review._meta.label_lower, target_id=str(r.pk),
                                   data={"image": r.item.image_id, "decision": r.decision, "wnids": r.id_wnids, "note": r.note,
                                         "gold": r.is_gold, "grid": True}))
        saved = [r.pk for r in reviews]
        if saved:  # the page's own entry (what undo takes back), last, in the same insert
            audits.append(AuditLog(actor=user, action=PAGE_ACTION, target_type="", target_id="",
                                   data={"reviews": saved, "skipped": skipped, "tiles": len(marks),
                                         "decisions": {d: sum(1 for m in marks if m.get("decision") == d) for d in ReviewDecision.values}}))
        AuditLog.objects.bulk_create(audits)
    return PageSaved(reviews=saved, skipped=skipped, replays=replays)


def review_grid_undo(*, user: User) -> int:
    """Take back the annotator's last page: its reviews are undone one by one, newest first, as
    the single-image undo does (each audited as ``review_undone``), and their images are leased
    to the annotator again, shown first. Refused when they decided other images since (undo
    those first). Returns how many decisions were taken back."""
    with transaction.atomic():
        for entry in AuditLog.objects.filter(actor=user, action=PAGE_ACTION).order_by("-id")[:20]:
            page = set(entry.data.get("reviews", []))
            alive = set(Review.objects.filter(pk__in=page, annotator=user).values_list("pk", flat=True))
            if not alive:
                continue
            latest = list(Review.objects.filter(annotator=user).order_by("-created_at", "-id").values_list("pk", flat=True)[:len(alive)])
            if set(latest) != alive:
                raise ReviewError("you decided other images after that page: undo those first (Z on the single-image screen)")
            for _ in alive:
                review_undo(user=user)
            audit_record(actor=user, action="review_grid_page_undone", target=None, data={"page": entry.pk, "reviews": sorted(alive)})
            return len(alive)
    raise NothingToUndo("there is no page of yours to undo")


# -- what the page shows beside the tiles ---------------------------------------------------------

_closest_cache: dict[tuple[int, str], tuple[float, list[dict]]] = {}


def grid_closest_id_classes(*, class_id: int | None, model_name: str, limit: int = 5) -> list[dict]:
    """The ID classes the classifier sees most often in this class (top-1 over its images): the
    ones to watch for on the page. Counted at most every few minutes per class and process."""
    if class_id is None:
        return []
    key = (class_id, model_name)
    now = time.monotonic()
    hit = _closest_cache.get(key)
    if hit is None or now - hit[0] > 300:
        rows = list(ImageEmbedding.objects.filter(image__candidate_class_id=class_id, model_name=model_name, ok=True)
                    .exclude(top1_wnid="").values("top1_wnid").annotate(n=Count("id")).order_by("-n", "top1_wnid")
                    .values_list("top1_wnid", "n")[:limit])
        total = sum(n for _w, n in rows) or 1
        texts = {t.wnid: t for t in SynsetText.objects.filter(wnid__in=[w for w, _n in rows])}
        if len(_closest_cache) > 5000:
            _closest_cache.clear()
        hit = _closest_cache[key] = (now, [{"wnid": w, "label": texts[w].label if w in texts else w,
                                            "gloss": texts[w].gloss if w in texts else "", "count": n, "share": round(n / total, 3)}
                                           for w, n in rows])
    return [dict(row) for row in hit[1]]


def grid_cache_clear() -> None:
    _closest_cache.clear()
