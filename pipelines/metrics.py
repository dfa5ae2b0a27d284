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


def _curves(id_scores: np.ndarray, ood_scores: np.ndarray):
    """Cumulative ID / OOD counts at each distinct score, from the highest score down.

    The pooled scores are sorted once, as a merge sort would: each side is sorted (numpy's
    vectorised sort), then the two sorted runs are merged by a stable argsort, which detects
    the runs and merges them in linear time. The merge order tells ID from OOD."""
    n_id, n_ood = id_scores.size, ood_scores.size
    runs = np.concatenate([np.sort(id_scores), np.sort(ood_scores)])
    order = np.argsort(runs, kind="stable")
    s = runs[order][::-1]
    is_id = (order < n_id)[::-1]
    # last index of every tie group in descending order
    ends = np.flatnonzero(s[1:] != s[:-1])
    ends = np.append(ends, s.size - 1)
    tp = np.cumsum(is_id, dtype=np.int64)[ends]  # ID accepted at threshold s[end]
    fp = (ends + 1) - tp  # OOD accepted
    return tp.astype(np.float64), fp.astype(np.float64), n_id, n_ood


def _average_precision(pos: np.ndarray, neg: np.ndarray, n_pos: int) -> float:
    """AP from cumulative positive/negative counts at descending thresholds (sklearn's step sum)."""
    if n_pos == 0:
        return float("nan")
    precision = pos / np.maximum(pos + neg, 1)
    recall = pos / n_pos
    return float(np.sum(np.diff(np.concatenate([[0.0], recall])) * precision))


def ood_metrics(id_scores, ood_scores, *, tpr_level: float = TPR_LEVEL) -> dict[str, float]:
    """AUROC, AUPR-In, AUPR-Out and FPR@95 in both conventions; see the module docstring."""
    ids = _as_scores(id_scores, "ID scores")
    oods = _as_scores(ood_scores, "OOD scores")
    tp, fp, n_id, n_ood = _curves(ids, oods)
    tpr = tp / n_id
    fpr = fp / n_ood
    # ROC with ID positive (the curve from (0,0) to (1,1)); the trapezoid counts ties as halves
    x = np.concatenate([[0.0], fpr])
    y = np.concatenate([[0.0], tpr])
    auroc = float(np.sum(np.diff(x) * (y[1:] + y[:-1]) / 2.0))
    # NINCO: first threshold (from the top) that keeps >= 95% of ID; share of OOD accepted there
    i = int(np.argmax(tpr >= tpr_level - 1e-12))
    fpr95_id = float(fpr[i])
    # OpenOOD: OOD positive means thresholds from the lowest score up: the same groups reversed.
    # At the group ending at index k (descending), "flagged" = everything strictly below it.
    ood_caught = np.concatenate([[float(n_ood)], n_ood - fp[:-1]])[::-1] / n_ood  # flagged = score <= group value
    id_flagged = np.concatenate([[float(n_id)], n_id - tp[:-1]])[::-1] / n_id
    j = int(np.argmax(ood_caught >= tpr_level - 1e-12))
    fpr95_ood = float(id_flagged[j])
    aupr_in = _average_precision(tp, fp, n_id)
    # OOD-positive counts at ascending thresholds: cumulative from the lowest group up
    ood_pos = ood_caught * n_ood
    id_neg = id_flagged * n_id
    aupr_out = _average_precision(ood_pos, id_neg, n_ood)
    return {"auroc": auroc, "aupr_in": aupr_in, "aupr_out": aupr_out,
            "fpr95_id_positive": fpr95_id, "fpr95_ood_positive": fpr95_ood, "n_id": n_id, "n_ood": n_ood}


def fpr_at_id_tpr(id_scores, ood_scores, *, tpr_level: float = TPR_LEVEL) -> float:
    """NINCO's FPR alone: the share of OOD accepted at the threshold that keeps 95% of ID."""
    return ood_metrics(id_scores, ood_scores, tpr_level=tpr_level)["fpr95_id_positive"]


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
