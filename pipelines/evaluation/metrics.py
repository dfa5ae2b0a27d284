"""OOD detection metrics from one sort of each side's scores (scores are "higher = more ID").

Conventions (REFERENCE.md, Metrics; NINCO sec. 5 and OpenOOD v1.5):

- ``fpr95_id_positive`` (NINCO): ID is positive; a score >= the threshold is accepted as ID; the
  figure is the share of OOD accepted. How the threshold is taken (``fpr_method``):
  - ``exact`` (default): the highest score that still accepts at least 95% of the ID scores,
    i.e. an order statistic of the ID scores, as a ROC curve has it;
  - ``ninco-interpolated``: NumPy's default (linearly interpolated) 5% quantile of the ID
    scores, as NINCO's evaluation code does (``utils.fpr_at_tpr``: ``t = np.quantile(values_in,
    1 - tpr)``, FPR = mean(values_out >= t)). The two differ for small ID sets (a threshold
    between two ID scores); use it to reproduce NINCO's tables to the digit.
- ``fpr95_ood_positive`` (OpenOOD): OOD is positive (the detector score negated); the
  threshold is where at least 95% of OOD is caught; the figure is the share of ID flagged.
- ``auroc``: P(ID score > OOD score) + P(equal) / 2, the trapezoid under the ROC curve whose
  points are the distinct score values (so tied scores move both rates at once).
- ``aupr_in`` / ``aupr_out``: with ID resp. OOD as the positive class, by ``aupr_method``:
  - ``average-precision`` (default): the sum of precision times recall increments at the
    distinct thresholds, no interpolation, as scikit-learn's ``average_precision_score``;
  - ``openood``: the trapezoid under scikit-learn's precision-recall curve (its points at every
    distinct pooled score, plus the end point recall 0 / precision 1), as OpenOOD v1.5's
    ``auc_and_fpr_recall`` takes ``metrics.auc(recall, precision)`` (OOD positive on negated
    scores for AUPR-Out; Jingkang50/OpenOOD@3c35632ee91b openood/evaluators/metrics.py). The
    trapezoid credits straight lines between PR points, so it is higher than average precision
    wherever ranks are mixed (ID [1, 0] vs OOD [0, 0]: AUPR-In 0.875 vs 0.75).

How: each side is sorted once and reduced to its distinct values with their counts; the two
distinct lists are merged once (one stable merge of two sorted runs). Every ROC and PR point for
both directions is a cumulative count over that merge, so all five figures cost two sorts and a
few linear passes.
"""
from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import ArrayLike

TPR_LEVEL = 0.95
FPR_METHODS = ("exact", "ninco-interpolated")
AUPR_METHODS = ("average-precision", "openood")
# Outlier-aware accuracy: which rejected samples count as correct (REFERENCE-2.md, 4.4).
OAA_CONVENTIONS = ("paper", "code")
OAA_GRID = "every pooled score (each distinct score a threshold, weighted by how many samples carry it)"


def _as_scores(x, what: str) -> np.ndarray:
    a = np.asarray(x)
    if a.ndim != 1:
        raise ValueError(f"{what}: scores must be a one-dimensional array, got shape {a.shape}; pass one score per image "
                         "(e.g. scores[:, 0] or scores.ravel() if that is what you mean)")
    if a.dtype.kind != "f":
        a = a.astype(np.float64)
    if a.size == 0:
        raise ValueError(f"{what}: no scores")
    if not np.all(np.isfinite(a)):
        bad = int(np.count_nonzero(~np.isfinite(a)))
        raise ValueError(f"{what}: {bad} score(s) are NaN or infinite; a detector must give finite scores")
    return a


def _distinct(sorted_x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(distinct values ascending, how many carry each) of a sorted array."""
    new_value = sorted_x[1:] != sorted_x[:-1]
    if new_value.all():  # no ties (continuous scores): every value is its own group
        return sorted_x, np.broadcast_to(np.int64(1), sorted_x.shape)  # counts of 1, without allocating them
    starts = np.flatnonzero(np.concatenate(([True], new_value)))
    return sorted_x[starts], np.diff(np.append(starts, sorted_x.size))


def _merge(ua: np.ndarray, ub: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each value of ``ub`` (distinct, sorted): how many values of ``ua`` (distinct, sorted)
    are <= it, and whether one equals it. One stable merge of the two runs (a stable argsort of
    two presorted runs merges them in linear time); on equal values the ``ua`` run comes first."""
    dtype = np.result_type(ua.dtype, ub.dtype)
    order = np.argsort(np.concatenate([ua.astype(dtype, copy=False), ub.astype(dtype, copy=False)]), kind="stable")
    le = np.flatnonzero(order >= ua.size) - np.arange(ub.size)  # ua values placed before ub_j
    eq = (ua[np.maximum(le - 1, 0)] == ub) & (le > 0)
    return le, eq


def _aupr_trapezoid(pos: np.ndarray, neg: np.ndarray) -> float:
    """The trapezoid under the precision-recall curve of ``pos`` (positives, higher = more
    positive) against ``neg``: a point at every distinct pooled score (all samples scoring >= it
    flagged), and the end point recall 0 / precision 1; straight lines between points."""
    s = np.concatenate([pos, neg])
    y = np.concatenate([np.ones(pos.size), np.zeros(neg.size)])
    order = np.argsort(-s, kind="stable")
    s, y = s[order], y[order]
    ends = np.append(np.flatnonzero(s[1:] != s[:-1]), s.size - 1)  # last index of each distinct value
    tp = np.cumsum(y)[ends]
    precision = tp / (ends + 1.0)
    recall = tp / pos.size
    r = np.concatenate([[0.0], recall])
    p = np.concatenate([[1.0], precision])
    return float(np.sum(np.diff(r) * (p[1:] + p[:-1]) / 2.0))


def ood_metrics(id_scores: ArrayLike, ood_scores: ArrayLike, *, tpr_level: float = TPR_LEVEL, fpr_method: str = "exact",
                aupr_method: str = "average-precision") -> dict[str, float]:
    """AUROC, AUPR-In, AUPR-Out and FPR@95 in both conventions; see the module docstring."""
    if fpr_method not in FPR_METHODS:
        raise ValueError(f"fpr_method {fpr_method!r}: use one of {', '.join(FPR_METHODS)}")
    if aupr_method not in AUPR_METHODS:
        raise ValueError(f"aupr_method {aupr_method!r}: use one of {', '.join(AUPR_METHODS)}")
    ids = _as_scores(id_scores, "ID scores")
    oods = _as_scores(ood_scores, "OOD scores")
    n_id, n_ood = ids.size, oods.size
    sa, sb = np.sort(ids), np.sort(oods)
    ua, ca = _distinct(sa)
    ub, cb = _distinct(sb)
    le, eq = _merge(ua, ub)  # per distinct OOD value v: distinct ID values <= v, and whether v is an ID value
    id_lt_a = np.concatenate([[0], np.cumsum(ca)])  # #ID < ua_i (index i), n_id at the end
    id_le_b = id_lt_a[le]  # #ID <= ub_j
    id_eq_b = eq if ca.size == n_id else ca[np.maximum(le - 1, 0)] * eq  # #ID == ub_j
    # AUROC = P(ID > OOD) + P(ID == OOD) / 2 (Mann-Whitney; the ROC trapezoid with tied steps)
    auroc = float((np.dot(cb, n_id - id_le_b) + 0.5 * np.dot(cb, id_eq_b)) / (n_id * n_ood))
    # #OOD < ua_i: ub_j < ua_i exactly when fewer than i + 1 distinct ID values are <= ub_j (le_j <= i)
    no_ood_ties = cb.size == n_ood
    per_le = np.bincount(le, minlength=ua.size + 1) if no_ood_ties else np.bincount(le, weights=cb, minlength=ua.size + 1)
    ood_lt_a = np.cumsum(per_le)[:ua.size]
    # Average precision with ID positive: a threshold at every distinct ID value (accept score >= v)
    tp, fp = n_id - id_lt_a[:-1], n_ood - ood_lt_a
    aupr_in = float(np.dot(ca, tp / (tp + fp)) / n_id)
    # Average precision with OOD positive: flag score <= v at every distinct OOD value
    ood_le_b = np.cumsum(cb)  # #OOD <= ub_j
    aupr_out = float(np.dot(cb, ood_le_b / (ood_le_b + id_le_b)) / n_ood)
    # NINCO, ID positive: accept score >= t
    if fpr_method == "exact":
        t = sa[n_id - _at_least(tpr_level, n_id)]  # the highest score that keeps >= 95% of ID
    else:
        t = np.quantile(sa, 1.0 - tpr_level)  # NINCO's code: NumPy's linear interpolation
    fpr95_id = float((n_ood - np.searchsorted(sb, t, side="left")) / n_ood)
    # OpenOOD, OOD positive: flag score <= v, the lowest v that catches >= 95% of OOD
    v = sb[_at_least(tpr_level, n_ood) - 1]
    fpr95_ood = float(np.searchsorted(sa, v, side="right") / n_id)
    if aupr_method == "openood":
        aupr_in, aupr_out = _aupr_trapezoid(ids, oods), _aupr_trapezoid(-oods, -ids)
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


def failure_detection_auroc(id_scores: ArrayLike, id_correct: ArrayLike, ood_scores: ArrayLike) -> float:
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


def mean_outlier_aware_accuracy(id_scores: ArrayLike, id_correct: ArrayLike, ood_scores: ArrayLike, *, convention: str = "paper") -> float:
    """Wang, Vaze, Han (IJCV 2024), outlier-aware accuracy at threshold t: the share of all
    samples that are accepted (score >= t) and correctly classified, plus those rejected
    (score < t) that count as correct rejections:

    - ``paper`` (default; the caption of the paper's Fig. 10): rejected OOD samples;
    - ``code`` (the authors' ``compute_oaa`` in Visual-AI/Dissect-OOD-OSR): every rejected sample
      whose prediction is wrong, misclassified ID samples included (REFERENCE-2.md, 4.4).

    mOAA averages OAA over a grid of thresholds that the paper leaves open; ours is every pooled
    sample score (each distinct score weighted by how many samples carry it; the lowest one
    rejects nothing)."""
    if convention not in OAA_CONVENTIONS:
        raise ValueError(f"OAA convention {convention!r}: use one of {', '.join(OAA_CONVENTIONS)}")
    ids = _as_scores(id_scores, "ID scores")
    correct = np.asarray(id_correct, dtype=bool).ravel()
    if correct.size != ids.size:
        raise ValueError(f"id_correct has {correct.size} entries for {ids.size} ID scores")
    oods = _as_scores(ood_scores, "OOD scores")
    scores = np.concatenate([ids, oods])
    order = np.argsort(scores)[::-1]
    s = scores[order]
    good = np.concatenate([correct, np.zeros(oods.size, dtype=bool)])[order]
    # samples whose rejection counts as correct
    if convention == "paper":
        reject_ok = np.concatenate([np.zeros(ids.size, dtype=bool), np.ones(oods.size, dtype=bool)])[order]
    else:
        reject_ok = np.concatenate([~correct, np.ones(oods.size, dtype=bool)])[order]
    ends = np.append(np.flatnonzero(np.diff(s)), s.size - 1)
    accepted_good = np.cumsum(good)[ends]
    accepted_reject_ok = np.cumsum(reject_ok)[ends]
    oaa = (accepted_good + (int(reject_ok.sum()) - accepted_reject_ok)) / s.size
    weights = np.diff(np.concatenate([[-1], ends]))
    return float(np.sum(oaa * weights) / s.size)


def full_spectrum_metrics(id_scores: ArrayLike, shifted_scores: ArrayLike, ood_scores: ArrayLike, *, tpr_level: float = TPR_LEVEL,
                          fpr_method: str = "exact", aupr_method: str = "average-precision") -> dict[str, dict[str, float]]:
    """Three views of covariate shift, each a dict with ``ood_metrics``' keys:

    - ``standard``: ID test vs OOD (the usual benchmark);
    - ``full_spectrum``: ID test *and* covariate-shifted ID images (e.g. ImageNet-V2/-R/-C copies
      of the ID classes) as positives vs OOD: ImageNet-FS-X's protocol (Noda et al., paper 004
      sec. 2.2; REFERENCE-2.md 1.2), where a detector must accept shifted ID images as ID;
    - ``shift``: ID test (positive) vs shifted ID (negative): how strongly the detector reacts to
      the shift alone (the Dissecting-OOD paper treats such shifts as something to detect).
    """
    ids = _as_scores(id_scores, "ID scores")
    shifted = _as_scores(shifted_scores, "shifted ID scores")
    kw: dict[str, Any] = {"tpr_level": tpr_level, "fpr_method": fpr_method, "aupr_method": aupr_method}
    return {
        "standard": ood_metrics(ids, ood_scores, **kw),
        "full_spectrum": ood_metrics(np.concatenate([ids, shifted]), ood_scores, **kw),
        "shift": ood_metrics(ids, shifted, **kw),
    }
