"""pipelines.export.diff: an export's difference from the previous version, checked against
set arithmetic written here (issue 31.3)."""
from __future__ import annotations

from dataclasses import dataclass

import pytest

from pipelines.export.diff import NOT_SELECTED, PreviousMember, PreviousVersion, export_diff, summary_line


@dataclass(frozen=True)
class Item:
    image_id: int
    wnid: str
    class_name: str = ""
    source: str = "pool"
    source_path: str = ""


@dataclass
class P:
    item: Item
    problem: str = ""


def previous(ids_wnids: dict[int, str]) -> PreviousVersion:
    return PreviousVersion(version=1, label="set v1",
                           members={i: PreviousMember(wnid=w, class_name=f"class {w}", source="pool", source_path=f"{w}/{i}.jpg")
                                    for i, w in ids_wnids.items()})


def test_added_removed_kept_and_classes_are_the_set_differences():
    before = {1: "n1", 2: "n1", 3: "n2", 4: "n3", 5: "n3"}
    placed = [P(Item(1, "n1")), P(Item(3, "n2")), P(Item(6, "n4")), P(Item(7, "n4")), P(Item(4, "n3"), problem="missing: gone")]
    why_not = {2: "final_id", 5: "review_open"}
    summary, rows = export_diff(previous(before), placed, why_not=why_not, why_new=lambda p: "decided_after_v1", warn_loss=0.9)
    good = {p.item.image_id for p in placed if not p.problem}
    assert summary["images"] == {"added": len(good - set(before)), "removed": len(set(before) - good), "kept": len(good & set(before))}
    assert [c["wnid"] for c in summary["classes_removed"]] == ["n3"] and summary["classes_removed"][0]["name"] == "class n3"
    assert [c["wnid"] for c in summary["classes_added"]] == ["n4"]
    removed = {r[1]: r[6] for r in rows if r[0] == "removed"}
    # a file that failed its check says so; the selection's reason otherwise
    assert removed == {2: "final_id", 4: "missing", 5: "review_open"}
    assert {r[1] for r in rows if r[0] == "added"} == {6, 7}
    assert summary["removed_by_reason"] == {"final_id": 1, "missing": 1, "review_open": 1}
    assert summary["loss_share"] == pytest.approx(3 / 5) and summary["warning"] == ""
    assert "2 images added, 3 removed, 2 kept" in summary_line(summary)


def test_an_image_the_selection_never_saw_is_not_selected_and_a_large_loss_is_warned():
    before = {i: "n1" for i in range(1, 11)}
    placed = [P(Item(1, "n1")), P(Item(2, "n1"))]
    summary, rows = export_diff(previous(before), placed, why_not={3: "review_open:reopened"}, why_new=lambda p: "x", warn_loss=0.5)
    reasons = {r[1]: r[6] for r in rows if r[0] == "removed"}
    assert reasons[3] == "review_open:reopened" and all(reasons[i] == NOT_SELECTED for i in range(4, 11))
    assert summary["removed_by_reason"] == {NOT_SELECTED: 7, "review_open": 1}  # counted without the detail
    assert summary["loss_share"] == 0.8
    w = summary["warning"]
    assert "loses 8 of the 10 images of set v1 (80%" in w and f"{NOT_SELECTED} 7" in w and "diff.csv" in w
    # at the threshold itself nothing is said: more than the share warns
    summary, _ = export_diff(previous(before), placed, why_not={}, why_new=lambda p: "x", warn_loss=0.8)
    assert summary["warning"] == ""
    with pytest.raises(ValueError, match="share between 0 and 1"):
        export_diff(previous(before), placed, why_not={}, why_new=lambda p: "x", warn_loss=1.5)


def test_the_page_sample_is_bounded_and_sorted_by_class_then_path():
    before = {i: ("n2" if i % 2 else "n1") for i in range(1, 121)}
    summary, rows = export_diff(previous(before), [], why_not={}, why_new=lambda p: "x", warn_loss=0.2)
    assert len(rows) == 120 and len(summary["sample_removed"]) == 50
    keys = [(r[2], r[5]) for r in rows]
    assert keys == sorted(keys)
    assert summary["sample_removed"][0] == dict(zip(["change", "image_id", "wnid", "class_name", "source", "source_path", "reason"], rows[0]))


def test_every_reason_the_export_can_give_has_a_meaning():
    from pipelines.export.diff import meaning

    for code in ("review_open", "review_conflict", "final_id", "final_unclear", "image_broken", "excluded_by_curator",
                 "duplicate_near_duplicate_of:12", "class_rejected", "class_unmapped", "below_min_per_class_3", "missing",
                 "changed_since_ingest", "unsafe_path", "unreadable", NOT_SELECTED, "decided_after_v2", "admitted_by_certificate",
                 "class_not_in_previous_version", "selection_changed"):
        assert meaning(code), code
    assert meaning("something_new") == ""
    assert "new in this version" in meaning("class_not_in_previous_version") and "not kept" in meaning("class_rejected")
    assert meaning("review_open") != meaning("review_conflict") and "adjudication" in meaning("review_conflict")
