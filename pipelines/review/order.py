"""The order a review queue serves its images in (docs/review.md).

Annotators judge a class more consistently when they see its images in a row than when the
class changes at almost every image, so a source can serve each class in runs: every class's
first ``run`` images (in the source's own order: closest to an ID image first, or random), class
by class, then every class's next ``run``, and so on. The classes take turns in the order of
their most urgent image, so the classes most likely to hold ID objects are still seen first."""
from __future__ import annotations

from collections import defaultdict
from typing import Hashable, Mapping

import numpy as np


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


def class_runs_arrays(ids: np.ndarray, classes: np.ndarray, priorities: np.ndarray, run: int) -> np.ndarray:
    """``class_runs`` over arrays (item ids, class keys as integers, priorities), for queues of
    millions of images: the same priorities, without a Python object per image."""
    ids = np.asarray(ids, dtype=np.int64)
    priorities = np.asarray(priorities, dtype=np.float64)
    if run < 1 or len(ids) == 0:
        return priorities.copy()
    classes = np.asarray(classes, dtype=np.int64)
    order = np.lexsort((ids, priorities, classes))  # by class, then priority, then id
    cls_sorted = classes[order]
    starts = np.flatnonzero(np.r_[True, cls_sorted[1:] != cls_sorted[:-1]])
    sizes = np.diff(np.r_[starts, len(order)])
    firsts = order[starts]  # each class's most urgent item
    # classes take turns in the order of their most urgent item: (priority, id); a class key breaks
    # no tie here, since ids are unique
    rank_of_group = np.empty(len(starts), dtype=np.int64)
    rank_of_group[np.lexsort((ids[firsts], priorities[firsts]))] = np.arange(len(starts))
    k = np.arange(len(order)) - np.repeat(starts, sizes)
    turn, within = np.divmod(k, run)
    out = np.empty(len(ids), dtype=np.float64)
    out[order] = (turn * len(starts) + np.repeat(rank_of_group, sizes)).astype(np.float64) + within / (run + 1)
    return out
