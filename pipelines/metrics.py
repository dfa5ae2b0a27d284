"""OOD detection metrics from one sort of the pooled scores (scores are "higher = more ID").

Conventions (REFERENCE.md, Metrics; NINCO sec. 5 and OpenOOD v1.5):

- ``fpr95_id_positive`` (NINCO): ID is positive; the threshold is the highest score at which
  at least 95% of ID is accepted (score >= threshold); the figure is the share of OOD accepted.
- ``fpr95_ood_positive`` (OpenOOD): OOD is positive (the detector score negated); the
  threshold is where at least 95% of OOD is caught; the figure is the share of ID flagged.
- ``auroc``: P(ID score > OOD score) + P(equal) / 2, the trapezoid under the ROC curve whose
  points are the distinct score values (so tied scores move both rates at once).
- ``aupr_in`` / ``aupr_out``: average precision (sum of precision times recall increments at
  the distinct thresholds, no interpolation, as scikit-learn's ``average_precision_score``)
  with ID resp. OOD as the positive class.

Every figure comes from the same ordering: the pooled scores are sorted once, tie groups
are found once, and the cumulative ID and OOD counts at the group ends give every ROC and PR
point for both directions.
"""
from __future__ import annotations

import numpy as np

TPR_LEVEL = 0.95


def _as_scores(x, what: str) -> np.ndarray:
    a = np.asarray(x).ravel()
    if a.dtype.kind != "f":
        a = a.astype(np.float64)
    if a.size == 0:
        raise ValueError(f"{what}: no scores")
    if not np.all(np.isfinite(a)):
        bad = int(np.count_nonzero(~np.isfinite(a)))
        raise ValueError(f"{what}: {bad} score(s) are NaN or infinite; a detector must give finite scores")
    return a


def _groups(id_scores: np.ndarray, ood_scores: np.ndarray):
    """Per distinct score (ascending): how many ID and OOD scores are <= it.

    The pooled scores are sorted once, as a merge sort would: each side is sorted (numpy's
    vectorised sort), then the two sorted runs are merged by a stable argsort, which detects
    the runs and merges them in linear time. The merge order tells ID from OOD."""
    n_id = id_scores.size
    runs = np.concatenate([np.sort(id_scores), np.sort(ood_scores)])
    order = np.argsort(runs, kind="stable")
    s = runs[order]
    ends = np.flatnonzero(s[1:] != s[:-1])  # last index of every tie group but the top one
    ends = np.append(ends, s.size - 1)
    id_le = np.cumsum(order < n_id, dtype=np.int64)[ends]
    ood_le = ends + 1 - id_le
    return id_le, ood_le


def ood_metrics(id_scores, ood_scores, *, tpr_level: float = TPR_LEVEL) -> dict[str, float]:
    """AUROC, AUPR-In, AUPR-Out and FPR@95 in both conventions; see the module docstring."""
    ids = _as_scores(id_scores, "ID scores")
    oods = _as_scores(ood_scores, "OOD scores")
    n_id, n_ood = ids.size, oods.size
    id_le, ood_le = _groups(ids, oods)  # per distinct score v (ascending): #ID <= v, #OOD <= v
    id_lt = np.concatenate([[0], id_le[:-1]])  # #ID < v
    ood_lt = np.concatenate([[0], ood_le[:-1]])
    id_cnt, ood_cnt = id_le - id_lt, ood_le - ood_lt  # how many of each carry exactly v
    # AUROC = P(ID > OOD) + P(ID == OOD) / 2 (Mann-Whitney; the ROC trapezoid with tied steps)
    auroc = float(np.dot(ood_cnt, (n_id - id_le) + 0.5 * id_cnt) / (n_id * n_ood))
    # NINCO, ID positive: accept score >= v. The highest v that keeps >= 95% of ID: the
    # largest group with #ID >= v, i.e. n_id - id_lt >= need.
    need = _at_least(tpr_level, n_id)
    g = int(np.searchsorted(id_lt, n_id - need, side="right")) - 1
    fpr95_id = float((n_ood - ood_lt[g]) / n_ood)
    # OpenOOD, OOD positive: flag score <= v. The lowest v that catches >= 95% of OOD.
    g = int(np.searchsorted(ood_le, _at_least(tpr_level, n_ood), side="left"))
    fpr95_ood = float(id_le[g] / n_id)
    # Average precision (scikit-learn's step sum): every threshold adds recall gained x precision
    tp, fp = n_id - id_lt, n_ood - ood_lt  # accepted at threshold v (score >= v)
    aupr_in = float(np.dot(id_cnt / n_id, tp / (tp + fp)))
    aupr_out = float(np.dot(ood_cnt / n_ood, ood_le / (ood_le + id_le)))  # flagged at v (score <= v)
    return {"auroc": auroc, "aupr_in": aupr_in, "aupr_out": aupr_out,
            "fpr95_id_positive": fpr95_id, "fpr95_ood_positive": fpr95_ood, "n_id": n_id, "n_ood": n_ood}


def _at_least(level: float, n: int) -> int:
    """The smallest count k with k / n >= level, as the float comparison of a ROC curve has it."""
    k = max(1, int(np.ceil(level * n - 1e-9)))
    while k > 1 and (k - 1) / n >= level:
        k -= 1
    while k < n and k / n < level:
        k += 1
    return k


def failure_detection_auroc(id_scores, id_correct, ood_scores) -> float:
    """ImageNet-OOD's failure detection: correctly classified ID images are positive, misclassified
    ID images and all OOD images negative; AUROC of the detector score. NaN when a side is empty."""
    ids = _as_scores(id_scores, "ID scores")
    correct = np.asarray(id_correct, dtype=bool).ravel()
    if correct.size != ids.size:
        raise ValueError(f"id_correct has {correct.size} entries for {ids.size} ID scores")
    pos = ids[correct]
    neg = np.concatenate([ids[~correct], _as_scores(ood_scores, "OOD scores")])
    if pos.size == 0 or neg.size == 0:
        return float("nan")
    return ood_metrics(pos, neg)["auroc"]


def mean_outlier_aware_accuracy(id_scores, id_correct, ood_scores) -> float:
    """Wang, Vaze, Han (IJCV 2024): outlier-aware accuracy at threshold t is the share of all
    samples that are accepted (score >= t) and correctly classified ID, or OOD and rejected
    (score < t). mOAA averages it over the thresholds at every pooled sample score (each
    distinct score weighted by how many samples carry it; the lowest one rejects nothing)."""
    ids = _as_scores(id_scores, "ID scores")
    correct = np.asarray(id_correct, dtype=bool).ravel()
    oods = _as_scores(ood_scores, "OOD scores")
    scores = np.concatenate([ids, oods])
    order = np.argsort(scores)[::-1]
    s = scores[order]
    good = np.concatenate([correct, np.zeros(oods.size, dtype=bool)])[order]
    is_ood = order >= ids.size
    ends = np.append(np.flatnonzero(np.diff(s)), s.size - 1)
    accepted_good = np.cumsum(good)[ends]
    ood_accepted = np.cumsum(is_ood)[ends]
    oaa = (accepted_good + (oods.size - ood_accepted)) / s.size
    weights = np.diff(np.concatenate([[-1], ends]))
    return float(np.sum(oaa * weights) / s.size)
