"""OOD metrics against scikit-learn on data full of ties, and the figures a user reads."""
import numpy as np
import pytest
from sklearn.metrics import average_precision_score, roc_auc_score, roc_curve

from pipelines.evaluation.metrics import failure_detection_auroc, mean_outlier_aware_accuracy, ood_metrics


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


# -- conventions from the reference codes (issue: numbers researchers can cite) ------------------------


def _ninco_fpr(values_in, values_out, tpr=0.95):
    # NINCO's utils.fpr_at_tpr, restated: t = np.quantile(values_in, 1 - tpr); FPR = mean(values_out >= t)
    t = np.quantile(values_in, 1 - tpr)
    return float((np.asarray(values_out) >= t).mean())


@pytest.mark.parametrize("seed", range(30))
def test_ninco_interpolated_fpr_reproduces_nincos_code_on_small_tied_sets(seed):
    rng = np.random.default_rng(seed)
    ids = np.round(rng.normal(1, 1, int(rng.integers(5, 40))), 1)  # small ID sets with ties: where the two differ
    oods = np.round(rng.normal(0, 1, int(rng.integers(5, 200))), 1)
    m = ood_metrics(ids, oods, fpr_method="ninco-interpolated")
    assert m["fpr95_id_positive"] == pytest.approx(_ninco_fpr(ids, oods), abs=1e-12)
    # every other figure is the same in both
    exact = ood_metrics(ids, oods)
    assert {k: v for k, v in m.items() if k != "fpr95_id_positive"} == {k: v for k, v in exact.items() if k != "fpr95_id_positive"}


def test_exact_and_interpolated_thresholds_differ_at_30_id_images():
    ids = np.arange(30.0)  # 5% quantile interpolated: 1.45 (accepts >= 1.45); exact: 1 (the highest keeping >= 95%, 29 of 30)
    oods = np.array([1.2] * 10 + [-5.0] * 10)
    assert ood_metrics(ids, oods)["fpr95_id_positive"] == 0.5  # 1.2 >= 1 accepted
    assert ood_metrics(ids, oods, fpr_method="ninco-interpolated")["fpr95_id_positive"] == 0.0  # 1.2 < 1.45
    with pytest.raises(ValueError, match="fpr_method"):
        ood_metrics(ids, oods, fpr_method="nope")


def test_two_dimensional_scores_are_refused_naming_the_shape():
    with pytest.raises(ValueError, match=r"shape \(3, 2\)"):
        ood_metrics(np.ones((3, 2)), np.ones(4))
    with pytest.raises(ValueError, match=r"OOD scores.*shape \(4, 1\)"):
        ood_metrics(np.ones(3), np.ones((4, 1)))


def _oaa_brute_force(ids, correct, oods, code):
    # Wang et al.: OAA(t) = (#accepted with a right prediction + #rejected that count) / N, averaged over
    # thresholds at every pooled score (accept score >= t), one term per sample.
    scores = np.r_[ids, oods]
    n = scores.size
    right = np.r_[correct, np.zeros(oods.size, dtype=bool)]
    counted_if_rejected = np.r_[~correct if code else np.zeros(ids.size, dtype=bool), np.ones(oods.size, dtype=bool)]
    total = 0.0
    for t in scores:
        accepted = scores >= t
        total += (np.sum(accepted & right) + np.sum(~accepted & counted_if_rejected)) / n
    return total / n


@pytest.mark.parametrize("seed", range(15))
def test_moaa_both_conventions_equal_a_brute_force_loop(seed):
    rng = np.random.default_rng(seed)
    ids = np.round(rng.normal(1, 1, 60), 1)
    oods = np.round(rng.normal(0, 1, 40), 1)
    correct = rng.uniform(size=60) < 0.7
    for convention, code in (("paper", False), ("code", True)):
        got = mean_outlier_aware_accuracy(ids, correct, oods, convention=convention)
        assert got == pytest.approx(_oaa_brute_force(ids, correct, oods, code), abs=1e-12)
    # the code's convention also rewards rejecting misclassified ID images: never lower
    assert mean_outlier_aware_accuracy(ids, correct, oods, convention="code") >= mean_outlier_aware_accuracy(ids, correct, oods)
    with pytest.raises(ValueError, match="convention"):
        mean_outlier_aware_accuracy(ids, correct, oods, convention="x")


def test_large_continuous_and_float32_scores_still_match_scikit_learn():
    rng = np.random.default_rng(7)
    for ids, oods in ((rng.normal(1, 1, 20000), rng.normal(0, 1, 15000)),
                      (np.round(rng.normal(1, 1, 20000), 2).astype(np.float32), np.round(rng.normal(0, 1, 15000), 2).astype(np.float32))):
        m = ood_metrics(ids, oods)
        y, s = np.r_[np.ones(ids.size), np.zeros(oods.size)], np.r_[ids, oods].astype(np.float64)
        assert m["auroc"] == pytest.approx(roc_auc_score(y, s), abs=1e-12)
        assert m["aupr_in"] == pytest.approx(average_precision_score(y, s), abs=1e-12)
        assert m["aupr_out"] == pytest.approx(average_precision_score(1 - y, -s), abs=1e-12)
        assert m["fpr95_id_positive"] == pytest.approx(_sk_fpr(y, s), abs=1e-12)
        assert m["fpr95_ood_positive"] == pytest.approx(_sk_fpr(1 - y, -s), abs=1e-12)


def test_full_spectrum_counts_shifted_id_as_positive_and_shift_as_negative():
    """ImageNet-FS-X (paper 004 sec. 2.2): shifted ID images are ID. Checked with scikit-learn on
    the concatenated positives, not with our own helpers."""
    from pipelines.evaluation.metrics import full_spectrum_metrics

    rng = np.random.default_rng(3)
    id_s = rng.normal(2.0, 1.0, 400)
    shifted = rng.normal(0.8, 1.0, 300)  # the shift lowers the scores: a detector reacting to it
    ood = rng.normal(0.0, 1.0, 500)
    r = full_spectrum_metrics(id_s, shifted, ood)
    assert set(r) == {"standard", "full_spectrum", "shift"}

    def auroc(pos, neg):
        return roc_auc_score(np.r_[np.ones(len(pos)), np.zeros(len(neg))], np.r_[pos, neg])

    assert r["standard"]["auroc"] == pytest.approx(auroc(id_s, ood))
    assert r["full_spectrum"]["auroc"] == pytest.approx(auroc(np.r_[id_s, shifted], ood))
    assert r["shift"]["auroc"] == pytest.approx(auroc(id_s, shifted))
    pos = np.r_[id_s, shifted]
    assert r["full_spectrum"]["aupr_in"] == pytest.approx(
        average_precision_score(np.r_[np.ones(len(pos)), np.zeros(len(ood))], np.r_[pos, ood]))
    assert r["full_spectrum"]["n_id"] == 700 and r["shift"]["n_ood"] == 300
    # every method loses AUROC under full-spectrum evaluation when the shift lowers its scores
    assert r["full_spectrum"]["auroc"] < r["standard"]["auroc"] and r["shift"]["auroc"] > 0.75
