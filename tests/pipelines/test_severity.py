"""C-OOD severity levels (Algorithm 1) on classes whose difficulty is known."""
import numpy as np
import pytest

from pipelines.severity import severity_levels, severity_requirements


def _classes(rng, n_classes=30, per_class=40):
    # class i's confidences centre on i / 3: higher classes look more like ID (harder)
    return {f"c{i:02d}": rng.normal(i / 3, 0.5, per_class) for i in range(n_classes)}


def test_levels_follow_the_algorithm_and_get_harder():
    rng = np.random.default_rng(0)
    classes = _classes(rng)
    id_scores = rng.normal(10, 1, 500)
    res = severity_levels(id_scores, classes, window=10, seed=0)
    assert res.groups == 30 - 10 + 1 and len(res.levels) == 11
    aurocs = [lv["auroc"] for lv in res.levels]
    assert aurocs[0] > 0.99 and aurocs[-1] < aurocs[0]
    assert all(a >= b - 0.02 for a, b in zip(aurocs, aurocs[1:]))  # harder with each level (noise aside)
    assert all(lv["classes"] == 10 and lv["images"] == 10 * 20 for lv in res.levels)  # test halves only
    lows = [lv["severity_low"] for lv in res.levels]
    assert lows == sorted(lows)
    assert res.levels[0]["severity_low"] < 0.5 and res.levels[-1]["severity_high"] > 9.0


def test_same_seed_same_levels_and_message_when_too_few_classes():
    rng = np.random.default_rng(1)
    classes = _classes(rng, n_classes=12)
    a = severity_levels(np.ones(5) * 5, classes, window=4, seed=3)
    b = severity_levels(np.ones(5) * 5, classes, window=4, seed=3)
    assert a.levels == b.levels
    msg = severity_requirements({"x": 10, "y": 1}, 1000)
    assert "1000 OOD classes" in msg and "has 1 such class" in msg
    with pytest.raises(ValueError, match="need at least"):
        severity_levels(np.ones(3), {"x": np.ones(4)}, window=1000)
