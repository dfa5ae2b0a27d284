"""The order a review queue serves its images in (docs/review.md).

Annotators judge a class more consistently when they see its images in a row than when the
class changes at almost every image, so a source can serve each class in runs: every class's
first ``run`` images (in the source's own order: closest to an ID image first, or random), class
by class, then every class's next ``run``, and so on. The classes take turns in the order of
their most urgent image, so the classes most likely to hold ID objects are still seen first."""
from __future__ import annotations

from collections import defaultdict
from typing import Hashable, Mapping


def class_runs(items: Mapping[int, tuple[Hashable, float]], run: int) -> dict[int, float]:
    """``items``: item id -> (class key, priority, lower served first). Returns item id -> new
    priority such that ordering by it (then by id) serves runs of ``run`` images per class.
    A ``run`` below 1 leaves the priorities as they are."""
    if run < 1 or not items:
        return {i: p for i, (_c, p) in items.items()}
    by_class: dict[Hashable, list[tuple[float, int]]] = defaultdict(list)
    for item, (cls, priority) in items.items():
        by_class[cls].append((priority, item))
    for members in by_class.values():
        members.sort()
    classes = sorted(by_class, key=lambda c: (by_class[c][0], str(c)))
    n = len(classes)
    out: dict[int, float] = {}
    for rank, cls in enumerate(classes):
        for k, (_p, item) in enumerate(by_class[cls]):
            turn, within = divmod(k, run)
            out[item] = float(turn * n + rank) + within / (run + 1)
    return out
