"""The review queue's class runs and a curator's corrections of the duplicate search, on
hand-made inputs whose expected results are worked out here, not by the code under test."""
from __future__ import annotations

import pytest

from pipelines.features.near_dups import Membership, apply_overrides
from pipelines.review.order import class_runs


def served(priorities: dict[int, float]) -> list[int]:
    return sorted(priorities, key=lambda i: (priorities[i], i))


def test_class_runs_serve_each_class_in_runs_taking_turns_by_their_most_urgent_image():
    # class A: items 1-5 (urgency 0.1..0.5), class B: items 6-8 (urgency 0.05, 0.6, 0.7), class C: item 9 (0.9)
    items = {1: ("A", 0.1), 2: ("A", 0.2), 3: ("A", 0.3), 4: ("A", 0.4), 5: ("A", 0.5),
             6: ("B", 0.05), 7: ("B", 0.6), 8: ("B", 0.7), 9: ("C", 0.9)}
    order = served(class_runs(items, run=2))
    # B holds the most urgent image, so B's first run comes first, then A's, then C's; then the second runs
    assert order == [6, 7, 1, 2, 9, 8, 3, 4, 5]
    classes = [items[i][0] for i in order]
    switches = sum(a != b for a, b in zip(classes, classes[1:]))
    assert switches == 4  # B B A A C B A A A


def test_class_runs_with_run_zero_keep_the_plain_order():
    items = {1: ("A", 0.3), 2: ("B", 0.1), 3: ("A", 0.2)}
    assert served(class_runs(items, run=0)) == [2, 3, 1]
    assert class_runs({}, run=5) == {}


def groups():
    # the search: 10 keeps 11 and 12; 20 stands alone; 30 is a copy of ID image 99
    return {10: Membership(10, ""), 11: Membership(10, "near_duplicate_of:10"), 12: Membership(10, "near_duplicate_of:10"),
            20: Membership(20, ""), 30: Membership(30, "duplicate_of_id:99")}


def test_not_a_duplicate_takes_one_member_out_and_leaves_the_rest():
    out = apply_overrides(groups(), [(11, "not_duplicate")])
    assert out[11] == Membership(11, "")
    assert out[12] == Membership(10, "near_duplicate_of:10") and out[10] == Membership(10, "")
    assert apply_overrides(groups(), [(30, "not_duplicate")])[30] == Membership(30, "")


def test_keep_this_one_instead_moves_the_group_to_it():
    out = apply_overrides(groups(), [(12, "keep")])
    assert out[12] == Membership(12, "")
    assert out[10] == Membership(12, "near_duplicate_of:12") and out[11] == Membership(12, "near_duplicate_of:12")
    assert out[20] == Membership(20, "")


def test_later_corrections_win_and_a_split_member_can_be_kept_alone():
    out = apply_overrides(groups(), [(12, "keep"), (11, "not_duplicate"), (10, "keep")])
    assert out[10] == Membership(10, "") and out[12] == Membership(10, "near_duplicate_of:10") and out[11] == Membership(11, "")
    # an image that left the search (not in the result) is ignored
    assert apply_overrides(groups(), [(77, "keep")]) == groups()
    with pytest.raises(ValueError, match="unknown duplicate override"):
        apply_overrides(groups(), [(10, "merge")])


def test_confirm_changes_nothing_and_a_later_correction_still_applies():
    assert apply_overrides(groups(), [(10, "confirm")]) == groups()
    out = apply_overrides(groups(), [(10, "confirm"), (11, "not_duplicate")])
    assert out[11] == Membership(11, "") and out[12] == Membership(10, "near_duplicate_of:10")
