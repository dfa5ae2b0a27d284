"""C-OOD severity levels (Galil, Dabbah, El-Yaniv, ICLR 2023, Algorithm 1; REFERENCE.md).

For one (model, confidence function) pair: each OOD class is split into an estimation part and a
test part; a class's severity is its mean confidence over the estimation part; classes sorted by
severity (ascending) are grouped by a sliding window of |Y_ID| classes, giving
|Y_OOD| - |Y_ID| + 1 groups; level i (0..10) is the group at position floor(i/10 * groups)
(the last group for i = 10, since positions count from 0); a level's benchmark is the test
images of its group's classes, and we report AUROC against the ID test scores per level.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .metrics import ood_metrics

LEVELS = 11


@dataclass
class SeverityResult:
    levels: list[dict]  # [{"level", "auroc", "classes", "images", "severity_low", "severity_high"}]
    groups: int
    window: int


def severity_requirements(class_sizes: dict[str, int], window: int) -> str:
    """Empty when the pool supports the levels; otherwise what is missing, in words."""
    usable = sum(1 for n in class_sizes.values() if n >= 2)
    if usable < window:
        return (f"C-OOD severity levels need at least |Y_ID| = {window} OOD classes with 2 or more images each (one part to "
                f"estimate a class's severity, one to test); this OOD set has {usable} such class(es) of {len(class_sizes)}. "
                "Export a larger pool (ImageNet-21K classes, as C-OOD used) to get them.")
    return ""


def severity_levels(id_scores: np.ndarray, class_scores: dict[str, np.ndarray], *, window: int, seed: int = 0,
                    estimation_fraction: float = 0.5) -> SeverityResult:
    missing = severity_requirements({c: len(s) for c, s in class_scores.items()}, window)
    if missing:
        raise ValueError(missing)
    rng = np.random.default_rng(seed)
    severity, test_parts = {}, {}
    for cls in sorted(class_scores):
        s = np.asarray(class_scores[cls], dtype=np.float64)
        if len(s) < 2:
            continue
        perm = rng.permutation(len(s))
        cut = min(max(1, int(round(len(s) * estimation_fraction))), len(s) - 1)
        severity[cls] = float(s[perm[:cut]].mean())
        test_parts[cls] = s[perm[cut:]]
    ordered = sorted(severity, key=lambda c: (severity[c], c))
    groups = len(ordered) - window + 1
    levels = []
    for i in range(LEVELS):
        pos = min(int(np.floor(i / (LEVELS - 1) * groups)), groups - 1)
        members = ordered[pos:pos + window]
        ood = np.concatenate([test_parts[c] for c in members])
        levels.append({"level": i, "auroc": ood_metrics(id_scores, ood)["auroc"], "classes": len(members), "images": int(len(ood)),
                       "severity_low": severity[members[0]], "severity_high": severity[members[-1]]})
    return SeverityResult(levels=levels, groups=groups, window=window)
