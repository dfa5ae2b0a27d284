"""What an export changed against the previous version of the same name: the images and classes
added and removed, each with its reason, and a warning when it loses a large share.

A curator who raised the reviews per image from 1 to 2 re-opened every decided image; the next
export then held 7 images where the previous one held 115, and nothing said so. This module
compares a new export's placed images with the previous version's members and writes
``diff.csv`` (one row per image added or removed); the summary goes into the manifest, the
export's page and the command's output.
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

DIFF_FILE = "diff.csv"
DIFF_COLUMNS = ["change", "image_id", "wnid", "class_name", "source", "source_path", "reason"]
NOT_SELECTED = "not_selected"  # the image's source or class is not in this export's selection
SAMPLE = 50  # images of each change that the export's page lists (diff.csv has them all)

Placed = Any  # pipelines.export.write.Placed (typed loosely: that module imports this one)

# What the reasons' prefixes mean, for people reading a difference (the exact codes are those of
# decisions.csv's excluded_reason and of the placement checks)
MEANINGS = {  # the first prefix that matches gives the meaning: the longer codes come first
    "class_not_in_previous_version": "its class is new in this version",
    "review_open": "not decided: waiting for (more) reviews (raising the reviews per image re-opens decided images)",
    "review_conflict": "its reviews disagree: waiting for a curator's adjudication",
    "review_withdrawn": "taken out of the review queue (its class was rejected or flagged, or it stopped being reviewable)",
    "review_": "not decided",
    "final_": "decided, but the final label is not ood",
    "image_": "the image file is not usable",
    "excluded_by_curator": "a curator excluded the image",
    "duplicate_": "a near-duplicate of another candidate that is kept",
    "class_": "its class is not kept (class filter, or unmapped)",
    "below_min_per_class": "its class has too few clean images",
    "missing": "the file no longer exists",
    "changed_since_ingest": "the file's bytes changed since ingest",
    "unsafe_path": "the file is now a link out of its source",
    "unreadable": "the file could not be read",
    NOT_SELECTED: "its source or class was not chosen for this export",
    "decided_after_v": "decided after the previous version was written",
    "admitted_by_certificate": "admitted by a met certificate, not a review",
    "selection_changed": "the selection's rules now admit it (class filter, overrides, minimum per class)",
}


def meaning(reason: str) -> str:
    """What a reason code means, in words ('' for a code this table does not know)."""
    kind = reason_kind(reason)
    return next((text for prefix, text in MEANINGS.items() if kind.startswith(prefix)), "")


@dataclass(frozen=True)
class PreviousMember:
    """An image of the previous version, as its members recorded it."""

    wnid: str
    class_name: str = ""
    source: str = ""
    source_path: str = ""


@dataclass(frozen=True)
class PreviousVersion:
    version: int
    label: str
    members: Mapping[int, PreviousMember]  # image id -> member
    written_at: datetime | None = None  # when it was written (an image decided after it is "decided after vN")

    @property
    def wnids(self) -> set[str]:
        return {m.wnid for m in self.members.values()}


def reason_kind(reason: str) -> str:
    """The reason without its detail (``duplicate_near_duplicate_of:12`` -> ``duplicate_near_duplicate_of``)."""
    return reason.split(":")[0]


def export_diff(previous: PreviousVersion, placed: Sequence[Placed], *, why_not: Mapping[int, str],
                why_new: Callable[[Placed], str], warn_loss: float) -> tuple[dict, list[list]]:
    """(summary, rows of diff.csv) for an export whose placed images are ``placed`` (those with a
    ``problem`` were left out) against ``previous``. ``why_not``: image id -> why the selection
    left it out (images it did not consider at all were not selected); ``why_new(p)``: why an
    image is new; ``warn_loss``: the share of the previous images whose loss is warned about."""
    if not 0 <= warn_loss <= 1:
        raise ValueError(f"warn_loss {warn_loss} is not a share between 0 and 1")
    good = {p.item.image_id: p for p in placed if not p.problem}
    problems = {p.item.image_id: reason_kind(p.problem) for p in placed if p.problem}
    before = previous.members
    removed = sorted(set(before) - set(good), key=lambda i: (before[i].wnid, before[i].source_path, i))
    added = sorted(set(good) - set(before), key=lambda i: (good[i].item.wnid, good[i].item.source_path, i))
    rows: list[list] = []
    for i in removed:
        m = before[i]
        rows.append(["removed", i, m.wnid, m.class_name, m.source, m.source_path, problems.get(i) or why_not.get(i) or NOT_SELECTED])
    for i in added:
        it = good[i].item
        rows.append(["added", i, it.wnid, it.class_name, it.source, it.source_path, why_new(good[i])])
    classes_before = previous.wnids
    classes_now = {p.item.wnid for p in good.values()}
    names = {m.wnid: m.class_name for m in before.values()} | {p.item.wnid: p.item.class_name for p in good.values()}
    loss = len(removed) / len(before) if before else 0.0

    def sample(change: str) -> list[dict]:
        return [dict(zip(DIFF_COLUMNS, r, strict=True)) for r in rows if r[0] == change][:SAMPLE]

    summary: dict = {
        "previous": {"version": previous.version, "label": previous.label, "images": len(before), "classes": len(classes_before)},
        "images": {"added": len(added), "removed": len(removed), "kept": len(set(good) & set(before))},
        "classes_added": [{"wnid": w, "name": names.get(w, "")} for w in sorted(classes_now - classes_before)],
        "classes_removed": [{"wnid": w, "name": names.get(w, "")} for w in sorted(classes_before - classes_now)],
        "removed_by_reason": dict(Counter(reason_kind(r[6]) for r in rows if r[0] == "removed").most_common()),
        "added_by_reason": dict(Counter(reason_kind(r[6]) for r in rows if r[0] == "added").most_common()),
        "loss_share": round(loss, 4), "warn_loss": warn_loss, "file": DIFF_FILE,
        "warning": loss_warning(previous, len(removed), loss, warn_loss, rows),
        "sample_removed": sample("removed"), "sample_added": sample("added"),
    }
    return summary, rows


def loss_warning(previous: PreviousVersion, removed: int, loss: float, warn_loss: float, rows: Sequence[Sequence]) -> str:
    """One line when the export loses more than ``warn_loss`` of the previous version, naming
    the main reasons; '' otherwise."""
    if not previous.members or loss <= warn_loss:
        return ""
    reasons = Counter(reason_kind(r[6]) for r in rows if r[0] == "removed").most_common(3)
    return (f"this export loses {removed} of the {len(previous.members)} images of {previous.label} ({100 * loss:.0f}%, "
            f"more than the {100 * warn_loss:.0f}% that is warned about); main reasons: "
            + ", ".join(f"{k} {n}" for k, n in reasons) + f". Every image is listed in {DIFF_FILE}")


def summary_line(diff: Mapping) -> str:
    """The diff in one line, for the command's output and the export's page."""
    prev, im = diff["previous"], diff["images"]
    parts = [f"against {prev['label']}: {im['added']} images added, {im['removed']} removed, {im['kept']} kept"]
    if diff["classes_added"] or diff["classes_removed"]:
        parts.append(f"classes +{len(diff['classes_added'])} / -{len(diff['classes_removed'])}")
    if diff["removed_by_reason"]:
        parts.append("removed because " + ", ".join(f"{k} {n}" for k, n in diff["removed_by_reason"].items()))
    return "; ".join(parts)
