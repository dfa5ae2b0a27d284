"""Agreement and interval statistics, checked against published values and reference libraries."""
import random

import pytest
from scipy.stats import binomtest
from sklearn.metrics import cohen_kappa_score

from pipelines.review.agreement import cohen_kappa, fleiss_kappa, wilson_interval


def test_fleiss_kappa_matches_fleiss_1971_worked_example():
    # 10 subjects, 14 raters, 5 categories (the table reproduced on Wikipedia's "Fleiss' kappa"):
    # P_bar = 0.378, P_e = 0.213, kappa = 0.210
    table = [[0, 0, 0, 0, 14], [0, 2, 6, 4, 2], [0, 0, 3, 5, 6], [0, 3, 9, 2, 0], [2, 2, 8, 1, 1],
             [7, 7, 0, 0, 0], [3, 2, 6, 3, 0], [2, 5, 3, 2, 2], [6, 5, 2, 1, 0], [0, 2, 2, 3, 7]]
    items = [[cat for cat, n in enumerate(row) for _ in range(n)] for row in table]
    assert fleiss_kappa(items) == pytest.approx(0.210, abs=5e-4)
    assert fleiss_kappa([["ood", "ood"], ["id", "id"]]) == pytest.approx(1.0)
    assert fleiss_kappa([["ood"], []]) is None and fleiss_kappa([["ood", "ood"]]) is None


def test_cohen_kappa_matches_scikit_learn():
    rng = random.Random(3)
    labels = ["ood", "id", "unclear", "not_target"]
    for _ in range(20):
        a = [rng.choice(labels) for _ in range(50)]
        b = [x if rng.random() < 0.7 else rng.choice(labels) for x in a]
        assert cohen_kappa(a, b) == pytest.approx(cohen_kappa_score(a, b))
    assert cohen_kappa([], []) is None and cohen_kappa(["ood"] * 3, ["ood"] * 3) is None
    with pytest.raises(ValueError, match="paired"):
        cohen_kappa(["ood"], [])


@pytest.mark.parametrize("k,n", [(0, 10), (1, 10), (5, 10), (10, 10), (3, 250), (97, 100), (0, 1)])
def test_wilson_interval_matches_scipy(k, n):
    ref = binomtest(k, n).proportion_ci(confidence_level=0.95, method="wilson")
    lo, hi = wilson_interval(k, n)
    assert lo == pytest.approx(ref.low, abs=1e-9) and hi == pytest.approx(ref.high, abs=1e-9)
    assert wilson_interval(0, 0) is None
