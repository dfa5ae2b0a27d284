"""Issue 50: the certification sampler draws each stratum with the probability the betting bound
assumes for that draw, also after a stratum runs out in the middle of a stage.

The proof (docs/review.md, "Why the bound holds"; pipelines/review/certify.py) needs one fact of the
sampler: given everything before draw i, stratum h is picked with probability

    pi_h = w_h [M_h > 0] / sum_g w_g [M_g > 0]

(w: the stage's base weights, M_h: items of stratum h not drawn yet), so that
Y_i = A_{i-1} + x_i M_h / pi_h has conditional mean T. The expected values below are written
from those definitions; the project's sampler is only asked which strata it draws.
"""
from __future__ import annotations

import itertools
from collections import defaultdict
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from pipelines.review import certify as C


def stated_pi(base, left):
    """The proof's pi: the base weights of the strata with items left, normalised."""
    w = [b if m > 0 else 0 for b, m in zip(base, left)]
    tot = sum(w)
    return [x / tot for x in w]


def test_the_draw_after_a_stratum_runs_out_follows_the_stated_probabilities():
    """The issue's reproduction: sizes [50, 50, 2], base [0.2, 0.2, 0.6], 8 draws, stream 1. Once
    the small stratum is empty, pi = (0.5, 0.5) for the next draw; the shipped sampler drew
    stratum 0 / 1 with frequency 0.300 / 0.700. A two-sided binomial test over a fixed list of
    30,000 seeds (so the outcome never changes from run to run)."""
    sizes, base = [50, 50, 2], [0.2, 0.2, 0.6]
    zero = one = 0
    for seed in range(30_000):
        lab = C.draw_strata(sizes=sizes, drawn=[0, 0, 0], base=base, n=8, seed=seed, stream=1)
        assert np.all(np.bincount(lab, minlength=3) <= sizes)
        small = np.flatnonzero(lab == 2)
        if len(small) == 2 and small[1] < 7:  # the small stratum ran out with draws of the stage left
            nxt = int(lab[small[1] + 1])
            assert nxt in (0, 1)
            zero += nxt == 0
            one += nxt == 1
    assert zero + one > 25_000
    test = stats.binomtest(zero, zero + one, 0.5)
    assert test.pvalue > 1e-3, (zero / (zero + one), test.pvalue)


def test_every_draw_of_whole_pools_follows_the_stated_probabilities():
    """Pools drawn to the end, strata running out one after another: for every stratum, the
    count of draws that picked it minus the sum of its stated pi over those draws is a
    martingale with variance sum pi (1 - pi); over 3,000 fixed seeds each z stays within 4.
    The shipped sampler gave z of 15 to 18 here (strata 0 and 2)."""
    sizes, base = [12, 6, 3, 1], [0.1, 0.2, 0.3, 0.4]
    obs = np.zeros(4)
    exp = np.zeros(4)
    var = np.zeros(4)
    after_obs = np.zeros(4)
    after_exp = np.zeros(4)
    after_var = np.zeros(4)
    for seed in range(3_000):
        lab = C.draw_strata(sizes=sizes, drawn=[0, 0, 0, 0], base=base, n=sum(sizes), seed=seed, stream=2)
        left = list(sizes)
        emptied = False
        for h in lab:
            pi = np.array(stated_pi(base, left))
            assert left[h] > 0  # never a draw from an empty stratum
            hit = np.eye(4)[h]
            obs += hit
            exp += pi
            var += pi * (1 - pi)
            if emptied:
                after_obs += hit
                after_exp += pi
                after_var += pi * (1 - pi)
            left[h] -= 1
            emptied = left[h] == 0
        assert left == [0, 0, 0, 0]
    live = var > 0
    assert np.all(np.abs(obs - exp)[live] / np.sqrt(var[live]) < 4), (obs, exp)
    live = after_var > 0
    assert np.all(np.abs(after_obs - after_exp)[live] / np.sqrt(after_var[live]) < 4), (after_obs, after_exp)


class FixedUniforms:
    """Stands in for numpy's generator: ``random(n)`` returns the uniforms given."""

    def __init__(self, u):
        self.u = np.asarray(u, dtype=np.float64)

    def random(self, n):
        assert n <= len(self.u)
        return self.u[:n].copy()


def sampler_law(monkeypatch, sizes, base, n):
    """The exact law of the label sequence the project's sampler draws (its uniforms integrated
    out): each draw consumes one uniform, compared with cumulative sums of some pi; the cells
    between every such sum any reachable state could give are enumerated with their lengths."""
    cuts = {0.0, 1.0}
    for left in itertools.product(*(range(m + 1) for m in sizes)):
        if sum(left) == 0:
            continue
        cuts.update(float(c) for c in np.cumsum(stated_pi([float(b) for b in base], left)))
    # sums that differ by rounding only (0.9999999999999999 and 1) are one cut: the cells
    # between them carry no probability
    edges = [0.0]
    for c in sorted(c for c in cuts if 0.0 < c <= 1.0):
        if c - edges[-1] > 1e-9:
            edges.append(c)
    edges[-1] = 1.0
    cells = [((lo + hi) / 2, hi - lo) for lo, hi in zip(edges, edges[1:])]
    law: dict[tuple[int, ...], float] = defaultdict(float)
    for combo in itertools.product(cells, repeat=n):
        u = [m for m, _w in combo]
        monkeypatch.setattr(np.random, "default_rng", lambda *a, _u=u, **k: FixedUniforms(_u))
        lab = C.draw_strata(sizes=sizes, drawn=[0] * len(sizes), base=[float(b) for b in base], n=n, seed=0, stream=1)
        law[tuple(int(h) for h in lab)] += float(np.prod([w for _m, w in combo]))
    monkeypatch.undo()
    return law


def test_the_importance_weighted_draw_has_mean_T_given_any_past_across_a_stratum_running_out(monkeypatch):
    """Enumeration on a tiny pool: strata of 2, 2 and 1 images holding 1, 1 and 1 ID images
    (T = 3), base weights (1/5, 1/5, 3/5), four draws. The small stratum usually empties at the
    first draw, a stratum of two often within the four. For every past (strata drawn so far and
    every possible count of ID images found in each), the next Y = A + x M_h / pi_h averaged over
    the sampler's exact law of the next stratum and the uniform order inside it must be T."""
    sizes, truth = [2, 2, 1], [1, 1, 1]
    base = [Fraction(1, 5), Fraction(1, 5), Fraction(3, 5)]
    T = sum(truth)
    n = 4
    law = sampler_law(monkeypatch, sizes, base, n)
    assert sum(law.values()) == pytest.approx(1.0, abs=1e-12)
    prefix: dict[tuple[int, ...], float] = defaultdict(float)
    for seq, p in law.items():
        for k in range(n + 1):
            prefix[seq[:k]] += p
    checked = crossed = 0
    for past, p_past in prefix.items():
        if len(past) == n or p_past < 1e-15:
            continue
        drawn = [past.count(h) for h in range(3)]
        left = [sizes[h] - drawn[h] for h in range(3)]
        pi = stated_pi(base, left)
        nxt = {h: prefix.get(past + (h,), 0.0) / p_past for h in range(3)}
        assert all(nxt[h] == 0 for h in range(3) if left[h] == 0)  # never an empty stratum
        # every count of ID images the past draws may have found in each stratum
        for found in itertools.product(*(range(min(drawn[h], truth[h]) + 1) for h in range(3))):
            if any(drawn[h] - found[h] > sizes[h] - truth[h] for h in range(3)):
                continue
            A = sum(found)
            mean = 0.0
            for h in range(3):
                if left[h] == 0:
                    continue
                q = (truth[h] - found[h]) / left[h]  # the next of stratum h's uniform order is ID
                y_id = A + float(left[h] / pi[h])
                mean += nxt[h] * (q * y_id + (1 - q) * A)
            assert mean == pytest.approx(T, abs=1e-9), (past, found, nxt, pi)
            checked += 1
            crossed += any(m == 0 for m in left)
    assert checked > 20 and crossed > 10  # many of the pasts follow a stratum running out


def test_the_bound_uses_the_stated_probabilities_after_a_stratum_runs_out():
    """The bound's Y (pipelines.review.certify.draw_path) on a sampled path that empties two strata is
    A + x M_h / pi_h with the stated pi, draw by draw."""
    sizes, base = [6, 3, 1], np.array([0.2, 0.3, 0.5])
    lab = C.draw_strata(sizes=sizes, drawn=[0, 0, 0], base=base, n=10, seed=5, stream=0)
    xs = np.array([1, 0] * 5)
    path = C.draw_path(sizes, lab, xs, base)
    left = list(sizes)
    A = 0
    for i, h in enumerate(lab):
        pi = stated_pi(list(base), left)
        assert path.y[i] == pytest.approx(A + xs[i] * left[h] / pi[h])
        A += int(xs[i])
        left[h] -= 1


def test_plans_made_before_the_fix_replay_with_their_own_sampler():
    """Sampler 1 is the shipped one, kept to replay stored plans: on the reproduction it still
    gives 0.3 / 0.7 after the small stratum runs out; sampler 2 gives 0.5 / 0.5. Both replay
    from (seed, stream) and never overfill a stratum."""
    sizes, base = [50, 50, 2], [0.2, 0.2, 0.6]
    counts = {1: [0, 0], 2: [0, 0]}
    for sampler in (1, 2):
        for seed in range(4_000):
            lab = C.draw_strata(sizes=sizes, drawn=[0, 0, 0], base=base, n=8, seed=seed, stream=1, sampler=sampler)
            assert np.array_equal(lab, C.draw_strata(sizes=sizes, drawn=[0, 0, 0], base=base, n=8, seed=seed, stream=1,
                                                     sampler=sampler))
            small = np.flatnonzero(lab == 2)
            if len(small) == 2 and small[1] < 7:
                counts[sampler][int(lab[small[1] + 1])] += 1
    share = {k: v[0] / sum(v) for k, v in counts.items()}
    assert share[1] == pytest.approx(0.3, abs=0.03) and share[2] == pytest.approx(0.5, abs=0.03)
    with pytest.raises(C.CertifyError, match="unknown sampler"):
        C.draw_strata(sizes=sizes, drawn=[0, 0, 0], base=base, n=8, seed=1, stream=1, sampler=3)


def test_the_plan_streams_are_independent_of_a_generator_seeded_the_same_way():
    """numpy pads a seed list with zeros, so default_rng(s) and default_rng([s, 0]) are one
    stream: sampler 1's stratum-0 order was the same random numbers as data generated from the
    plan's seed. Sampler 2's streams are SeedSequence children (spawn keys)."""
    s = 12345
    assert np.array_equal(np.random.default_rng(s).permutation(50), C.draw_order(50, seed=s, stratum=0, sampler=1))
    assert not np.array_equal(np.random.default_rng(s).permutation(50), C.draw_order(50, seed=s, stratum=0))
    child = np.random.SeedSequence(s).spawn(1)[0].spawn(1)[0]  # spawn key (0, 0): the order of stratum 0
    assert np.array_equal(np.random.default_rng(child).permutation(50), C.draw_order(50, seed=s, stratum=0))
    a = C.plan_stream(s, C.STRATA_KEY, 0).random(20)
    assert not np.allclose(a, C.plan_stream(s, C.STRATA_KEY, 1).random(20))
    assert not np.allclose(a, C.plan_stream(s, C.ORDER_KEY, 0).random(20))
    assert not np.allclose(a, np.random.default_rng(s).random(20))
