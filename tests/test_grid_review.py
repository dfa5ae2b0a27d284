"""Grid review's services on PostgreSQL (issue 30): a page leases one class, a page submit means
what single-image submits mean (counters, final decisions, conflicts, gold, replays, skips,
audit), refused pages change nothing, undo takes a page back."""
from __future__ import annotations

import pytest
from django.contrib.auth.models import User

from curation.models import Assignment, AuditLog, Review, ReviewItem
from curation.roles import ANNOTATOR
from curation.services.review import ReviewError, review_cache_clear, review_settings_save
from curation.services.review_grid import grid_size, review_grid_next, review_grid_submit, review_grid_undo
from curation.services.users import user_create_with_role
from tests.review_data import queue_with_rows

pytestmark = pytest.mark.django_db


@pytest.fixture
def pool(tmp_path, settings):
    review_cache_clear()
    source = queue_with_rows(tmp_path, n=24)
    users = [user_create_with_role(username=f"g{k}", password="x-pw-12345", role=ANNOTATOR)[0] for k in range(3)]
    return source, users


def _page(user: User, decisions: dict[int, str] | None = None, size: int = 12):
    lease = review_grid_next(user=user, size=size)
    marks = [{"assignment": a.pk, "decision": (decisions or {}).get(k, "ood"),
              **({"wnids": ["n02123045"]} if (decisions or {}).get(k) == "id" else {})} for k, a in enumerate(lease.assignments)]
    return lease, marks


def test_a_page_is_one_class_and_each_tile_a_review(pool):
    source, (u1, _u2, _u3) = pool
    lease, marks = _page(u1, {0: "id", 1: "unclear", 2: "skip"})
    classes = {a.item.candidate_class_id for a in Assignment.objects.filter(pk__in=[a.pk for a in lease.assignments]).select_related("item")}
    assert classes == {lease.class_id} and len(lease.assignments) == 8  # 24 images over 3 classes
    saved = review_grid_submit(user=u1, marks=marks, seconds=16)
    assert (len(saved.reviews), saved.skipped, saved.replays) == (7, 1, 0)
    items = {it.image_id: it for it in ReviewItem.objects.filter(assignments__in=[a.pk for a in lease.assignments])}
    first = lease.assignments[0].item
    assert ReviewItem.objects.get(pk=first.pk).final_decision == "id"
    assert ReviewItem.objects.get(pk=first.pk).final_wnids == ["n02123045"]
    skipped = ReviewItem.objects.get(pk=lease.assignments[2].item_id)
    assert (skipped.status, skipped.done, skipped.leased) == ("open", 0, 0)
    assert sum(it.done for it in items.values()) == 7 and all(it.leased == 0 for it in items.values())
    assert Review.objects.filter(annotator=u1).count() == 7
    assert all(abs(r.seconds - 2.0) < 1e-6 for r in Review.objects.filter(annotator=u1))
    assert AuditLog.objects.filter(action="review_decided", actor=u1).count() == 7
    # the same page again: nothing changes (a repeated request)
    again = review_grid_submit(user=u1, marks=marks, seconds=16)
    assert (again.reviews, again.replays) == ([], 8)
    assert Review.objects.filter(annotator=u1).count() == 7


def test_two_reviews_required_disagreement_is_a_conflict_like_on_the_single_screen(pool):
    source, (u1, u2, _u3) = pool
    review_settings_save(source=source, reviews_required=2)
    l1, m1 = _page(u1, {0: "id"})
    review_grid_submit(user=u1, marks=m1)
    assert not ReviewItem.objects.exclude(status="open").exists()
    l2, m2 = _page(u2)  # the same class: its images still need a second review
    assert {a.item_id for a in l2.assignments} == {a.item_id for a in l1.assignments}
    review_grid_submit(user=u2, marks=m2)
    first = l1.assignments[0].item_id
    assert ReviewItem.objects.get(pk=first).status == "conflict"
    assert ReviewItem.objects.filter(status="complete", final_decision="ood").count() == 7


def test_refused_pages_change_nothing(pool):
    _source, (u1, u2, _u3) = pool
    lease, marks = _page(u1)
    _other, other_marks = _page(u2)
    before = (Review.objects.count(), AuditLog.objects.count(), list(ReviewItem.objects.values_list("done", "leased").order_by("id")))
    for bad in ([*marks, other_marks[0]],                                          # not theirs
                [{**marks[0], "decision": "id"}, *marks[1:]],                      # id without its class
                [{**marks[0], "decision": "maybe"}, *marks[1:]],                   # not a decision
                [marks[0], marks[0]],                                              # twice
                [{"assignment": 2**63, "decision": "ood"}], [], "x"):
        with pytest.raises(ReviewError):
            review_grid_submit(user=u1, marks=bad)
    assert before == (Review.objects.count(), AuditLog.objects.count(), list(ReviewItem.objects.values_list("done", "leased").order_by("id")))
    for bad in ("3", "97", "1e2", "²", "-24", True, None):
        with pytest.raises(ReviewError):
            grid_size(bad)


def test_undo_takes_the_last_page_back_and_not_past_later_work(pool):
    _source, (u1, _u2, _u3) = pool
    lease, marks = _page(u1, {3: "unclear"})
    review_grid_submit(user=u1, marks=marks)
    assert review_grid_undo(user=u1) == 8
    assert not Review.objects.filter(annotator=u1).exists()
    back = review_grid_next(user=u1, size=12)
    assert [a.item_id for a in back.assignments] == [a.item_id for a in lease.assignments]
    review_grid_submit(user=u1, marks=marks)
    assert Review.objects.filter(annotator=u1).count() == 8
    assert ReviewItem.objects.get(pk=lease.assignments[3].item_id).final_decision == "unclear"


def test_gold_accuracy_is_reported_per_screen(pool, client):
    from curation.roles import CURATOR
    from curation.selectors.grid import gold_accuracy_by_screen
    from curation.services.review import review_items_set_gold, review_next, review_submit

    source, (u1, u2, u3) = pool
    lease, marks = _page(u1, {4: "skip", 5: "skip", 6: "skip", 7: "skip"})  # four of a class decided ood: made gold
    review_grid_submit(user=u1, marks=marks)
    assert review_items_set_gold(item_ids=[a.item_id for a in lease.assignments], gold=True) == 4
    review_settings_save(source=source, gold_rate=0.5)
    review_cache_clear()
    # u2 answers gold tiles on the grid (one wrong), u3 on the single-image screen (all right)
    g_lease = review_grid_next(user=u2, size=24)  # the class's four open images, and gold tiles of the class
    gold = [a for a in g_lease.assignments if a.is_gold]
    assert gold, "gold tiles at a 0.5 gold rate"
    wrong = gold[0].pk
    review_grid_submit(user=u2, marks=[{"assignment": a.pk, "decision": "unclear" if a.pk == wrong else "ood"} for a in g_lease.assignments])
    singles = 0
    while singles < 30:
        held = review_next(user=u3, want=1)
        if not held:
            break
        review_submit(user=u3, assignment_id=held[0].pk, decision="ood")
        singles += 1
    rows = {r["annotator"]: r for r in gold_accuracy_by_screen()}
    assert rows["g1"]["grid_n"] == len(gold) and rows["g1"]["grid_ok"] == len(gold) - 1 and rows["g1"]["single_n"] == 0
    n3 = Review.objects.filter(annotator=u3, is_gold=True).count()
    assert n3 and rows["g2"]["single_n"] == n3 == rows["g2"]["single_ok"] and rows["g2"]["grid_n"] == 0
    user_create_with_role(username="c", password="c-pw-12345", role=CURATOR)
    client.login(username="c", password="c-pw-12345")
    html = client.get("/curate/reviews/").content.decode()
    assert "Gold accuracy by screen" in html and f"{len(gold) - 1}/{len(gold)} =" in html


def test_prefetch_leases_the_next_class_when_the_page_ends_its_class(pool):
    """A page that is its class's last brings the next class's first page as its prefetch (so
    the screen loads those thumbnails meanwhile); the next call shows exactly those."""
    _source, (u1, _u2, _u3) = pool
    lease = review_grid_next(user=u1, size=12, prefetch=12)  # 24 images over 3 classes: 8 a class
    assert len(lease.assignments) == 8 and len(lease.upcoming) == 8
    items = ReviewItem.objects.in_bulk([a.item_id for a in lease.assignments + lease.upcoming])
    this = {items[a.item_id].candidate_class_id for a in lease.assignments}
    nxt = {items[a.item_id].candidate_class_id for a in lease.upcoming}
    assert this == {lease.class_id} and len(nxt) == 1 and nxt != this
    review_grid_submit(user=u1, marks=[{"assignment": a.pk, "decision": "ood"} for a in lease.assignments])
    second = review_grid_next(user=u1, size=12, prefetch=12)
    assert [a.pk for a in second.assignments] == [a.pk for a in lease.upcoming]
    assert second.class_id in nxt and len(second.upcoming) == 8
    # without prefetch nothing beyond the page is leased
    third = review_grid_next(user=_u2, size=12)
    assert third.upcoming == [] and Assignment.objects.filter(annotator=_u2, state="leased").count() == len(third.assignments)


def test_front_of_the_queue_survives_a_rebuild(pool):
    """Images sent to the front keep their place when the queue is built again (settings
    saved, new images): the rebuild re-applies the source's order to the others only."""
    from curation.services.review import review_queue_sync
    from curation.services.similar import images_to_front

    source, (u1, *_rest) = pool
    last = list(ReviewItem.objects.filter(status="open").order_by("-priority", "-id").values_list("image_id", flat=True)[:3])
    moved, skipped = images_to_front(image_ids=last, user=u1)
    assert moved == 3 and not skipped
    front = lambda: list(ReviewItem.objects.filter(status="open").order_by("priority", "id").values_list("image_id", flat=True)[:3])  # noqa: E731
    assert front() == last
    review_settings_save(source=source, reviews_required=2)  # re-applies the order: a rebuild
    review_queue_sync(source=source)
    assert front() == last
