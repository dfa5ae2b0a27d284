"""C-OOD severity levels (Galil, Dabbah, El-Yaniv, ICLR 2023, sec. 4 and Algorithm 1; REFERENCE.md).

For one (model, confidence function) pair:

- **Protocol** (``protocol="c-ood"``, the default): every OOD class contributes exactly
  ``per_class`` = 200 images (classes with fewer are dropped; larger ones are sampled down to
  200 with the seed), ``estimation`` = 150 of them to estimate the class's severity and the
  other 50 to test. ``protocol="small-data"`` is our own variant for pools that cannot meet
  that (any class with >= 2 images, split in half); its results are labelled as not C-OOD's.
- A class's severity is its mean confidence over its estimation images; classes are sorted by
  severity (ascending) and grouped by a sliding window of |Y_ID| classes.
- **Group count**: the paper's text says the window gives |Y_OOD| - |Y_ID| + 1 groups, while
  its Algorithm 1 loops to |Y_OOD| - |Y_ID|. We use the text's count (every window position,
  so the hardest window is included): ``groups = |Y_OOD| - |Y_ID| + 1``.
- Level i (0..10) is the group at position ``i * groups // 10`` (integer arithmetic: a float
  ``floor(i / 10 * groups)`` gives 62 for i = 7 and 90 groups), the last group for i = 10;
  a level's benchmark is the test images of its group's classes, and we report AUROC against
  the ID test scores per level.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from pipelines.evaluation.metrics import ood_metrics

LEVELS = 11
PROTOCOLS = ("c-ood", "small-data")
PER_CLASS = 200  # C-OOD: images per OOD class
ESTIMATION = 150  # of which used to estimate the class's severity (the other 50 test)
GROUP_RULE = "|Y_OOD| - |Y_ID| + 1 windows (the paper's text; its Algorithm 1 loops to |Y_OOD| - |Y_ID|)"


@dataclass
class SeverityResult:
    levels: list[dict]  # [{"level", "auroc", "classes", "images", "severity_low", "severity_high"}]
    groups: int
    window: int
    protocol: str = "c-ood"
    per_class: int = PER_CLASS
    estimation: int = ESTIMATION
    classes_used: int = 0
    classes_dropped: int = 0
    notes: list[str] = field(default_factory=list)


def level_position(level: int, groups: int) -> int:
    """The group index of severity level ``level`` (0..10) among ``groups`` groups."""
    return min(level * groups // (LEVELS - 1), groups - 1)


def check_protocol(protocol: str, per_class: int, estimation: int) -> None:
    """Raise ValueError naming what is wrong with a protocol and its counts."""
    if protocol not in PROTOCOLS:
        raise ValueError(f"severity-protocol: {protocol!r} is not one of {', '.join(PROTOCOLS)}")
    if protocol == "c-ood" and not (1 <= estimation < per_class <= 10**6):
        raise ValueError(f"severity: estimation images ({estimation}) must be at least 1 and fewer than the images per class "
                         f"({per_class}, at most 1,000,000); C-OOD used 150 of 200")


def severity_requirements(class_sizes: dict[str, int], window: int, *, protocol: str = "c-ood",
                          per_class: int = PER_CLASS, estimation: int = ESTIMATION) -> str:
    """Empty when the pool supports the levels; otherwise what is missing, in words."""
    check_protocol(protocol, per_class, estimation)
    need = per_class if protocol == "c-ood" else 2
    usable = sum(1 for n in class_sizes.values() if n >= need)
    if usable < window:
        if protocol == "c-ood":
            return (f"C-OOD severity levels need at least |Y_ID| = {window} OOD classes with {per_class} or more images each "
                    f"(C-OOD's protocol: {estimation} to estimate a class's severity, {per_class - estimation} to test); this OOD set "
                    f"has {usable} such class(es) of {len(class_sizes)}. Export a larger pool (ImageNet-21K classes, as C-OOD used), "
                    "or run with the small-data variant (--severity-protocol small-data), whose levels are not C-OOD's.")
        return (f"severity levels (small-data variant) need at least |Y_ID| = {window} OOD classes with 2 or more images each; "
                f"this OOD set has {usable} such class(es) of {len(class_sizes)}.")
    return ""


def severity_levels(id_scores: np.ndarray, class_scores: dict[str, np.ndarray], *, window: int, seed: int = 0,
                    protocol: str = "c-ood", per_class: int = PER_CLASS, estimation: int = ESTIMATION) -> SeverityResult:
    missing = severity_requirements({c: len(s) for c, s in class_scores.items()}, window, protocol=protocol,
                                    per_class=per_class, estimation=estimation)
    if missing:
        raise ValueError(missing)
    rng = np.random.default_rng(seed)
    severity, test_parts = {}, {}
    dropped = 0
    for cls in sorted(class_scores):
        s = np.asarray(class_scores[cls], dtype=np.float64)
        perm = rng.permutation(len(s))
        if protocol == "c-ood":
            if len(s) < per_class:
                dropped += 1
                continue
            chosen = perm[:per_class]  # sampled down to per_class with the seed
            est, test = chosen[:estimation], chosen[estimation:]
        else:
            if len(s) < 2:
                dropped += 1
                continue
            cut = min(max(1, int(round(len(s) * 0.5))), len(s) - 1)
            est, test = perm[:cut], perm[cut:]
        severity[cls] = float(s[est].mean())
        test_parts[cls] = s[test]
    ordered = sorted(severity, key=lambda c: (severity[c], c))
    groups = len(ordered) - window + 1
    levels = []
    for i in range(LEVELS):
        pos = level_position(i, groups)
        members = ordered[pos:pos + window]
        ood = np.concatenate([test_parts[c] for c in members])
        levels.append({"level": i, "group": pos, "auroc": ood_metrics(id_scores, ood)["auroc"], "classes": len(members),
                       "images": int(len(ood)), "severity_low": severity[members[0]], "severity_high": severity[members[-1]]})
    notes = [f"groups: {groups} = {GROUP_RULE}"]
    if protocol == "c-ood":
        notes.insert(0, f"C-OOD's protocol: {per_class} images per OOD class ({estimation} estimate severity, "
                        f"{per_class - estimation} test); {dropped} class(es) with fewer dropped")
    else:
        notes.insert(0, "small-data variant, NOT C-OOD's protocol: every class with >= 2 images, split in half "
                        f"(estimation / test); {dropped} class(es) dropped")
    return SeverityResult(levels=levels, groups=groups, window=window, protocol=protocol, per_class=per_class,
                          estimation=estimation, classes_used=len(ordered), classes_dropped=dropped, notes=notes)
