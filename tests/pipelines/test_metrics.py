"""OOD metrics against scikit-learn on data full of ties, and the figures a user reads."""
import numpy as np
import pytest
from sklearn.metrics import average_precision_score, roc_auc_score, roc_curve

from pipelines.metrics import (failure_detection_auroc, mean_outlier_aware_accuracy, ood_metrics)


def _sk_fpr(y, s):
    fpr, tpr, _ = roc_curve(y, s, drop_intermediate=False)
    return fpr[np.argmax(tpr >= 0.95)]


@pytest.mark.parametrize("seed", range(40))
def test_every_metric_matches_scikit_learn_with_ties(seed):
    rng = np.random.default_rng(seed)
    levels = int(rng.integers(2, 8))  # few distinct values: most scores are tied
    ids = rng.integers(0, levels, size=int(rng.integers(1, 300))).astype(float)
    oods = rng.integers(0, levels, size=int(rng.integers(1, 300))).astype(float) - rng.integers(0, 2)
    m = ood_metrics(ids, oods)
    y = np.r_[np.ones(ids.size), np.zeros(oods.size)]
    s = np.r_[ids, oods]
    assert m["auroc"] == pytest.approx(roc_auc_score(y, s), abs=1e-12)
    assert m["aupr_in"] == pytest.approx(average_precision_score(y, s), abs=1e-12)
    assert m["aupr_out"] == pytest.approx(average_precision_score(1 - y, -s), abs=1e-12)
    assert m["fpr95_id_positive"] == pytest.approx(_sk_fpr(y, s), abs=1e-12)
    assert m["fpr95_ood_positive"] == pytest.approx(_sk_fpr(1 - y, -s), abs=1e-12)


def test_continuous_scores_match_too():
    rng = np.random.default_rng(1)
    ids, oods = rng.normal(1, 1, 5000), rng.normal(0, 1, 3000)
    m = ood_metrics(ids, oods)
    y, s = np.r_[np.ones(5000), np.zeros(3000)], np.r_[ids, oods]
    assert m["auroc"] == pytest.approx(roc_auc_score(y, s), abs=1e-12)
    assert m["fpr95_id_positive"] == pytest.approx(_sk_fpr(y, s), abs=1e-12)
    assert m["fpr95_ood_positive"] == pytest.approx(_sk_fpr(1 - y, -s), abs=1e-12)


def test_the_two_fpr_conventions_differ_and_mean_what_they_say():
    # ID: 0..99; OOD: 90..189 (OOD scores higher: a bad detector on purpose)
    ids, oods = np.arange(100.0), np.arange(90.0, 190.0)
    m = ood_metrics(ids, oods)
    # NINCO: threshold keeps 95 ID (>= 5); every OOD is >= 5 -> all accepted
    assert m["fpr95_id_positive"] == 1.0
    # OpenOOD: catch 95% of OOD (<= 184) flags every ID image
    assert m["fpr95_ood_positive"] == 1.0
    ids, oods = np.arange(100.0), np.arange(-50.0, 50.0)
    m = ood_metrics(ids, oods)
    assert m["fpr95_id_positive"] == pytest.approx(45 / 100)  # OOD 5..49 are >= the 5% ID quantile (5)
    assert m["fpr95_ood_positive"] == pytest.approx(45 / 100)  # ID 0..44 are <= 44, where 95 OOD are caught


def test_all_tied_scores_give_chance():
    m = ood_metrics(np.ones(10), np.ones(30))
    assert m["auroc"] == 0.5
    assert m["fpr95_id_positive"] == 1.0 and m["fpr95_ood_positive"] == 1.0


def test_bad_scores_are_refused_with_a_message():
    with pytest.raises(ValueError, match="NaN or infinite"):
        ood_metrics([1.0, np.nan], [0.0])
    with pytest.raises(ValueError, match="OOD scores: no scores"):
        ood_metrics([1.0], [])


def test_failure_detection_uses_correct_id_as_positive():
    ids = np.array([5.0, 4.0, 3.0, 0.5])
    correct = np.array([True, True, True, False])
    oods = np.array([1.0, 2.0])
    y = np.r_[np.ones(3), np.zeros(3)]
    assert failure_detection_auroc(ids, correct, oods) == pytest.approx(roc_auc_score(y, [5, 4, 3, 0.5, 1, 2]))


def test_moaa_by_hand():
    # thresholds at each score: 3 (ID ok), 2 (OOD), 1 (ID wrong)
    ids, correct, oods = np.array([3.0, 1.0]), np.array([True, False]), np.array([2.0])
    # t=3: accept {3}: good 1 + OOD rejected 1 -> 2/3; t=2: accept {3,2}: 1 + 0 -> 1/3; t=1: all: 1 + 0 -> 1/3
    assert mean_outlier_aware_accuracy(ids, correct, oods) == pytest.approx((2 / 3 + 1 / 3 + 1 / 3) / 3)
