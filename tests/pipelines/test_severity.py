"""C-OOD severity levels (Galil et al., ICLR 2023, Algorithm 1) against a computation written here
from the paper: classes of constant confidence, so a class's severity and its test images do not
depend on which images the seeded split picks, and every level's AUROC is known."""
import numpy as np
import pytest
from sklearn.metrics import roc_auc_score

from pipelines.evaluation.severity import severity_levels, severity_requirements


def _constant_classes(n_classes, rng, sizes=None):
    """Class k has every confidence equal to c_k (distinct, shuffled order)."""
    values = rng.permutation(np.linspace(0.0, 10.0, n_classes))
    sizes = sizes or [200] * n_classes
    return {f"c{k:03d}": np.full(n, values[k]) for k, n in enumerate(sizes)}, values


def _reference_levels(id_scores, classes, window, per_class=200, estimation=150):
    # C-OOD: keep classes with >= per_class images; severity = mean confidence (constant here);
    # sort ascending; |Y_OOD| - |Y_ID| + 1 windows; level i at floor(i/10 * groups), done in integers
    kept = {c: s for c, s in classes.items() if len(s) >= per_class}
    ordered = sorted(kept, key=lambda c: (kept[c][0], c))
    groups = len(ordered) - window + 1
    out = []
    for i in range(11):
        pos = min((i * groups) // 10, groups - 1)
        test = np.concatenate([np.full(per_class - estimation, kept[c][0]) for c in ordered[pos:pos + window]])
        y = np.r_[np.ones(len(id_scores)), np.zeros(len(test))]
        out.append((pos, roc_auc_score(y, np.r_[id_scores, test])))
    return groups, out


@pytest.mark.parametrize("groups", [90, 30, 70, 11])
def test_levels_equal_the_papers_algorithm_with_integer_positions(groups):
    # 90 groups: a float position floor(0.7 * 90) is 62 (0.7 * 90 = 62.99999...), the paper's level 7 is 63
    window = 3
    rng = np.random.default_rng(groups)
    sizes = [200] * (groups + window - 2) + [199, 150, 260]  # two too small (dropped), one sampled down to 200
    classes, _ = _constant_classes(len(sizes), rng, sizes)
    id_scores = rng.uniform(0.0, 10.0, 300)
    res = severity_levels(id_scores, classes, window=window, seed=0)
    ref_groups, ref = _reference_levels(id_scores, classes, window)
    assert res.groups == ref_groups == groups and res.classes_dropped == 2 and res.protocol == "c-ood"
    for lv, (pos, auroc) in zip(res.levels, ref):
        assert lv["group"] == pos
        assert lv["auroc"] == pytest.approx(auroc, abs=1e-12)
        assert lv["classes"] == window and lv["images"] == window * 50  # 50 test images per class
    if groups == 90:
        assert res.levels[7]["group"] == 63
    assert any("150 estimate" in n for n in res.notes) and any("|Y_OOD| - |Y_ID| + 1" in n for n in res.notes)


def test_estimation_and_test_images_are_disjoint_and_the_sample_is_seeded():
    rng = np.random.default_rng(0)
    # each class's images carry their own index as score: the estimation mean and test images reveal the split
    classes = {f"c{k}": np.arange(300.0) + 1000 * k for k in range(6)}
    a = severity_levels(rng.uniform(size=50), classes, window=2, seed=5)
    b = severity_levels(rng.uniform(size=50), classes, window=2, seed=5)
    c = severity_levels(rng.uniform(size=50), classes, window=2, seed=6)
    assert [lv["severity_low"] for lv in a.levels] == [lv["severity_low"] for lv in b.levels]
    assert [lv["severity_low"] for lv in a.levels] != [lv["severity_low"] for lv in c.levels]
    assert all(lv["images"] == 2 * 50 for lv in a.levels)


def test_pools_that_cannot_meet_the_protocol_say_so_and_small_data_is_labelled():
    rng = np.random.default_rng(1)
    classes = {f"c{k}": rng.normal(k, 0.5, 40) for k in range(12)}  # 40 images per class: below C-OOD's 200
    msg = severity_requirements({c: len(s) for c, s in classes.items()}, 4)
    assert "200 or more images" in msg and "has 0 such class" in msg and "small-data" in msg
    with pytest.raises(ValueError, match="need at least"):
        severity_levels(np.ones(5), classes, window=4)
    res = severity_levels(np.ones(5) * 5, classes, window=4, seed=3, protocol="small-data")
    assert res.protocol == "small-data" and "NOT C-OOD's protocol" in res.notes[0]
    assert res.groups == 12 - 4 + 1 and all(lv["images"] == 4 * 20 for lv in res.levels)
    again = severity_levels(np.ones(5) * 5, classes, window=4, seed=3, protocol="small-data")
    assert res.levels == again.levels
    with pytest.raises(ValueError, match="estimation images"):
        severity_levels(np.ones(5), classes, window=4, per_class=100, estimation=100)
    with pytest.raises(ValueError, match="protocol"):
        severity_requirements({"x": 3}, 1, protocol="nope")
