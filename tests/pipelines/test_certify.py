"""Certifying a pool from a stratified sample (pipelines/review/certify.py, issue 37).

The bounds are checked against computations written here from their definitions: the
prior-posterior ratio of Waudby-Smith & Ramdas (2020) by explicit sums over the prior with exact
binomial coefficients, the hypergeometric bound from SciPy's pmf, and the strata's
intersection-union bound by enumerating every split of every total."""
from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy import special, stats

from pipelines.review import certify as C


def seq_prob(N: int, t: int, s: int, T: int) -> float:
    """P(one ordered sample of t draws without replacement has s ID images at given positions | T):
    C(N - t, T - s) / C(N, T)."""
    if T < s or N - T < t - s:
        return 0.0
    return math.comb(N - t, T - s) / math.comb(N, T)


def betabin_pmf(N: int, a: float, b: float, T: int) -> float:
    return math.comb(N, T) * math.exp(special.betaln(T + a, N - T + b) - special.betaln(a, b))


def ppr_upper_by_sum(N: int, t: int, s: int, alpha: float, a: float = 1.0, b: float = 1.0) -> int:
    prior = [betabin_pmf(N, a, b, T) for T in range(N + 1)]
    lik = [seq_prob(N, t, s, T) for T in range(N + 1)]
    m = sum(p * L for p, L in zip(prior, lik))
    # prior / posterior = m / L < 1 / alpha
    return max(T for T in range(N + 1) if lik[T] > 0 and m / lik[T] < 1 / alpha)


@pytest.mark.parametrize("N,t,s,alpha", [(40, 10, 0, 0.05), (60, 15, 2, 0.05), (80, 30, 9, 0.1), (25, 25, 3, 0.05),
                                         (50, 1, 1, 0.2)])
def test_confidence_sequence_matches_the_prior_posterior_ratio(N, t, s, alpha):
    assert C.wor_cs_upper(N, t, s, alpha) == ppr_upper_by_sum(N, t, s, alpha)
    assert C.wor_cs_upper(N, t, s, alpha, a=0.5, b=4.0) == ppr_upper_by_sum(N, t, s, alpha, 0.5, 4.0)


def test_a_census_leaves_nothing_to_bound():
    assert C.wor_cs_upper(30, 30, 4, 0.05) == 4
    assert C.hypergeom_upper(30, 30, 4, 0.05) == 4


@pytest.mark.parametrize("N,n,k,alpha", [(200, 20, 0, 0.05), (500, 60, 3, 0.05), (1000, 100, 10, 0.01)])
def test_fixed_size_bound_from_scipy_pmf(N, n, k, alpha):
    best = max(T for T in range(k, N - (n - k) + 1)
               if sum(stats.hypergeom.pmf(j, N, T, n) for j in range(k + 1)) > alpha)
    assert C.hypergeom_upper(N, n, k, alpha) == best


def test_clopper_pearson_solves_the_binomial_tail():
    ub = C.clopper_pearson_upper(300, 4, 0.05)
    assert stats.binom.cdf(4, 300, ub) == pytest.approx(0.05, abs=1e-9)
    assert C.clopper_pearson_upper(10, 10, 0.05) == 1.0


def test_the_anytime_bound_is_wider_than_the_one_look_bound():
    # the price of looking after every review
    assert C.wor_cs_upper(1000, 200, 5, 0.05) > C.hypergeom_upper(1000, 200, 5, 0.05)


def shared_prior_pmf(sizes, covariate):
    """The shared prior over splits (T_1..T_H), written out: for every curve and kappa, each
    stratum's count is binomial (kappa = inf) or beta-binomial around the curve's rate."""
    curves = C.shared_rates(np.asarray(covariate, dtype=float))
    splits = list(itertools.product(*[range(n + 1) for n in sizes]))
    pmf = np.zeros(len(splits))
    for kappa in C.SHARED_KAPPA:
        for m in curves:
            per = []
            for h, n in enumerate(sizes):
                if np.isinf(kappa):
                    per.append(stats.binom.pmf(np.arange(n + 1), n, m[h]))
                else:
                    per.append(np.array([betabin_pmf(n, kappa * m[h], kappa * (1 - m[h]), T) for T in range(n + 1)]))
            pmf += np.array([np.prod([per[h][T[h]] for h in range(len(sizes))]) for T in splits])
    return splits, pmf / (len(curves) * len(C.SHARED_KAPPA))


def iu_upper_by_enumeration(sizes, reviewed, found, alpha, splits, prior):
    lik = np.array([np.prod([seq_prob(n, t, s, T) for n, t, s, T in zip(sizes, reviewed, found, split)]) for split in splits])
    m = float(np.sum(prior * lik))
    # a total stays in the confidence set when some split of it does: L(T) > alpha * m
    return max(sum(split) for split, L in zip(splits, lik) if L > alpha * m)


@pytest.mark.parametrize("reviewed,found", [((4, 6), (0, 1)), ((8, 9), (0, 4)), ((3, 12), (1, 2)), ((0, 5), (0, 1))])
def test_strata_bound_matches_enumerating_every_split(reviewed, found):
    sizes, cov = (10, 14), (-0.8, 0.9)
    splits, prior = shared_prior_pmf(sizes, cov)
    want = iu_upper_by_enumeration(sizes, reviewed, found, 0.1, splits, prior) if all(reviewed) else None
    got = C.stratified_upper(sizes, reviewed, found, 0.1, covariate=cov)
    if want is None:  # a stratum without a sample counts in full
        assert got.total == sizes[0] + C.stratified_upper(sizes[1:], reviewed[1:], found[1:], 0.1, covariate=cov[1:]).total
    else:
        assert got.total == want
        assert got.split.sum() == got.total


def test_product_prior_matches_enumeration_and_single_stratum():
    sizes, reviewed, found = (9, 12), (5, 7), (1, 3)
    splits = list(itertools.product(*[range(n + 1) for n in sizes]))
    prior = np.array([betabin_pmf(9, 1, 1, a) * betabin_pmf(12, 1, 1, b) for a, b in splits])
    want = iu_upper_by_enumeration(sizes, reviewed, found, 0.05, splits, prior)
    assert C.stratified_upper(sizes, reviewed, found, 0.05, prior="product").total == want
    assert C.stratified_upper([500], [80], [3], 0.05, prior="product").total == C.wor_cs_upper(500, 80, 3, 0.05)


def test_coverage_on_a_seeded_simulation_with_monitoring():
    """80 pools of 4,000 images, 4 strata, 2% ID with a score that ranks them; the curator looks
    every 100 reviews up to 1,200. The bound must cover the true count at every look in >= 95%
    of pools (at 95%); the check at every review goes through log R_t(true split)."""
    rng = np.random.default_rng(20240537)
    misses = 0
    tighter = 0
    for _pool in range(80):
        n, share = 4000, 0.02
        y = (np.arange(n) < int(share * n)).astype(np.int64)
        scores = rng.normal(0, 1, n) + 1.8 * y
        st = C.stratify(scores, 4)
        cov = C.stratum_covariate(scores, st.labels, 4)
        seqs = [y[np.flatnonzero(st.labels == h)][C.draw_order(int(st.sizes[h]), seed=_pool, stratum=h)] for h in range(4)]
        truth = np.array([int(s.sum()) for s in seqs])
        labels = C.interleave([60, 60, 120, 360])  # heavier where the ID images are
        pos = np.zeros(4, dtype=np.int64)
        xs = np.empty(len(labels), dtype=np.int64)
        for i, h in enumerate(labels):
            xs[i] = seqs[h][pos[h]]
            pos[h] += 1
        missed = False
        for look in range(100, len(labels) + 1, 100):
            t = np.bincount(labels[:look], minlength=4)
            s = np.bincount(labels[:look], weights=xs[:look], minlength=4).astype(np.int64)
            b = C.stratified_upper(st.sizes, t, s, 0.05, covariate=cov)
            missed |= b.total < truth.sum()
        tighter += b.total < C.union_hypergeom_upper(st.sizes, t, s, 0.05).total
        log_r = C.log_ratio_at(st.sizes, labels, xs, truth, covariate=cov)
        if missed:
            assert log_r.max() >= np.log(20)  # the bound can only fail where the martingale crossed
        misses += missed
    assert misses <= 4
    assert tighter >= 60  # and it is tighter than adding the strata's one-look bounds


def test_strata_allocation_and_draw():
    st = C.stratify(np.arange(1000.0)[::-1], 4, full_top=0.1)
    assert list(st.sizes) == [225, 225, 225, 225, 100] and st.full == (False, False, False, False, True)
    assert set(np.flatnonzero(st.labels == 4)) == set(range(100))  # the highest scores are reviewed in full
    alloc = C.neyman_allocation([1000, 1000, 100], [0.001, 0.1, 0.5], 300, minimum=20)
    assert alloc.sum() == 300 and alloc.min() >= 20 and alloc[2] <= 100
    assert alloc[1] > alloc[0]
    a = C.draw_order(50, seed=3, stratum=1)
    assert np.array_equal(a, C.draw_order(50, seed=3, stratum=1)) and sorted(a) == list(range(50))
    assert not np.array_equal(a, C.draw_order(50, seed=3, stratum=2))
    order = C.interleave([2, 4])
    assert list(order) == [1, 0, 1, 1, 0, 1]


def test_bad_input_is_named():
    with pytest.raises(C.CertifyError, match="found"):
        C.wor_cs_upper(10, 5, 6, 0.05)
    with pytest.raises(C.CertifyError, match="alpha"):
        C.hypergeom_upper(10, 5, 1, 1.5)
    with pytest.raises(C.CertifyError, match="strata"):
        C.stratify([1.0, 2.0], 0)


# -- the betting method (the plans' default) ----------------------------------------------------------
#
# Written here from the definitions in pipelines/review/certify.py's notes and docs/review.md, with
# plain loops: draw i takes stratum h with probability pi_h (the base weights over the strata
# with items left), Y_i = A_{i-1} + x_i M_h(i) / pi_h, and for each candidate total t the
# wealth K_i(t) = prod (1 + b_j(t) (t - Y_j)).


def loop_path(sizes, labels, xs, bases):
    """Per draw: (A_{i-1}, Y_i, pi of every stratum, M of every stratum, per-stratum draws and
    finds before it), by a plain loop."""
    H = len(sizes)
    t = [0] * H
    s = [0] * H
    out = []
    for i, (h, x) in enumerate(zip(labels, xs)):
        base = bases[i] if np.ndim(bases) == 2 else bases
        M = [sizes[k] - t[k] for k in range(H)]
        w = [base[k] if M[k] > 0 else 0.0 for k in range(H)]
        pi = [v / sum(w) for v in w]
        A = sum(s)
        y = A + x * M[h] / pi[h]
        out.append((A, y, pi, M, list(t), list(s)))
        t[h] += 1
        s[h] += x
    return out


def loop_bet(A, pi, M, t_before, s_before, t, cap):
    """The plug-in Kelly bet for the two-point reduction of the model of Y, written out."""
    n, S = sum(t_before), sum(s_before)
    pooled = (S + 0.5) / (n + 1.0)
    r = [(s_before[k] + C.BET_SHRINK * pooled) / (t_before[k] + C.BET_SHRINK) for k in range(len(M))]
    z = [M[k] / pi[k] if M[k] > 0 else 0.0 for k in range(len(M))]
    m = sum(M[k] * r[k] for k in range(len(M)))
    m2 = sum(M[k] * r[k] * z[k] for k in range(len(M)))
    u = t - A
    if u <= 0:
        return 0.0
    zbar, q = m2 / m, m * m / m2
    b = (1 - q) / (zbar - u) - q / u if zbar > u else math.inf
    b = C.KELLY * max(b, 0.0)
    ymax = A + max(z)
    return min(b, cap / (ymax - t)) if ymax > t else min(b, cap / max(u, 1.0))


def loop_log_wealth(sizes, labels, xs, bases, grid, cap=C.BET_CAP):
    rows = loop_path(sizes, labels, xs, bases)
    lk = np.zeros((len(rows), len(grid)))
    for g, t in enumerate(grid):
        acc = 0.0
        for i, (A, y, pi, M, tb, sb) in enumerate(rows):
            b = loop_bet(A, pi, M, tb, sb, float(t), cap)
            acc += math.log(1 + b * (t - y))
            lk[i, g] = acc
    return lk


def test_betting_draws_by_hand():
    # strata of 6 and 2 items, equal base weights: the top stratum is drawn out, then only the other
    path = C.draw_path([6, 2], np.array([1, 1, 0, 0]), np.array([1, 0, 1, 0]), np.array([0.5, 0.5]))
    assert list(path.found_before) == [0, 1, 1, 2]
    assert list(path.y) == [0 + 2 / 0.5, 1, 1 + 6 / 1.0, 2]  # 4, then 1, then (M=6, pi=1) 7, then 2
    assert list(path.y_max) == [0 + 6 / 0.5, 1 + 6 / 0.5, 1 + 6, 2 + 5]
    with pytest.raises(C.CertifyError, match="no undrawn"):
        C.draw_path([6, 2], np.array([1, 1, 1]), np.array([0, 0, 0]), np.array([0.5, 0.5]))


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_betting_wealth_and_bound_match_a_loop(seed):
    rng = np.random.default_rng(seed)
    sizes = [40, 25, 12, 6]
    truth = [rng.random(n) < p for n, p in zip(sizes, (0.02, 0.1, 0.3, 0.7))]
    bases = np.array([0.3, 0.3, 0.25, 0.15])
    labels = C.draw_strata(sizes=sizes, drawn=[0, 0, 0, 0], base=bases, n=70, seed=seed, stream=0)
    pos = [0] * 4
    xs = []
    for h in labels:
        xs.append(int(truth[h][pos[h]]))
        pos[h] += 1
    xs = np.array(xs)
    grid = C.bound_grid(sum(sizes))
    assert list(grid) == list(range(sum(sizes) + 1))  # small pools: every total is tested
    want = loop_log_wealth(sizes, labels, xs, bases, grid)
    got = C.log_wealth(C.draw_path(sizes, labels, xs, bases), grid)
    assert np.allclose(got, want, atol=1e-9)
    # the bound: the largest total whose test never reached 1/alpha, at every moment
    b = C.betting_upper(sizes, labels, xs, bases, 0.1, history_at=range(1, 71))
    for k, total in b.history:
        rejected = (np.maximum.accumulate(want[:k], axis=0) >= math.log(10)).any(axis=0)
        open_totals = [T for T in range(sum(sizes) + 1) if not rejected[T]]
        assert total == max(max(open_totals), int(xs[:k].sum()))
    # the importance-weighted draw is unbiased for the total, exactly, before every draw
    T = sum(int(v.sum()) for v in truth)
    for A, _y, pi, M, tb, sb in loop_path(sizes, labels, xs, bases):
        left = [int(truth[h][tb[h]:].sum()) for h in range(4)]  # ID images not drawn yet
        mean = A + sum(pi[h] * (left[h] / M[h]) * (M[h] / pi[h]) for h in range(4) if M[h] > 0)
        assert mean == pytest.approx(T)


def test_betting_factors_are_a_supermartingale_under_every_true_null():
    """For every t <= T: E[1 + b(t) (t - Y) | past] <= 1, by enumerating the next draw (stratum
    with pi_h, ID with probability left_h / M_h); and every possible factor stays positive."""
    rng = np.random.default_rng(5)
    sizes = [30, 10, 5]
    truth = [rng.random(n) < p for n, p in zip(sizes, (0.05, 0.3, 0.8))]
    T = sum(int(v.sum()) for v in truth)
    bases = np.array([0.5, 0.3, 0.2])
    labels = C.draw_strata(sizes=sizes, drawn=[0, 0, 0], base=bases, n=40, seed=9, stream=0)
    pos = [0] * 3
    xs = []
    for h in labels:
        xs.append(int(truth[h][pos[h]]))
        pos[h] += 1
    rows = loop_path(sizes, labels, np.array(xs), bases)
    for A, _y, pi, M, tb, sb in rows:
        left = [int(truth[h][tb[h]:].sum()) for h in range(3)]
        for t in range(A + 1, sum(sizes) + 1):
            b = loop_bet(A, pi, M, tb, sb, float(t), C.BET_CAP)
            outcomes = [(pi[h] * left[h] / M[h], A + M[h] / pi[h]) for h in range(3) if M[h] > 0]
            outcomes += [(pi[h] * (1 - left[h] / M[h]), A) for h in range(3) if M[h] > 0]
            mean = sum(p * (1 + b * (t - y)) for p, y in outcomes)
            if t <= T:
                assert mean <= 1 + 1e-12
            worst = min(1 + b * (t - y) for _p, y in outcomes)
            assert worst > 0 and worst >= 1 - C.BET_CAP - 1e-12


def test_betting_coverage_on_a_seeded_simulation():
    """200 pools of 2,000 images, 5% ID, scores with AUROC 0.9; the plan's strata and stages;
    the curator looks after every review up to 500. The bound (95%) must hold at every look in
    at least 93% of pools (95% less a binomial margin), checked both through the test at the
    true total's grid point and through the bound itself."""
    rng = np.random.default_rng(37)
    misses = 0
    tighter = 0
    for pool in range(200):
        n = 2000
        y = (np.arange(n) < 100).astype(np.int64)
        scores = rng.normal(0, 1, n) + np.sqrt(2) * stats.norm.ppf(0.9) * y
        st = C.stratify_quantiles(scores, C.tail_quantiles(6, n))
        N = st.sizes
        H = len(N)
        cov = C.stratum_covariate(scores, st.labels, H)
        seqs = [y[np.flatnonzero(st.labels == h)][C.draw_order(int(N[h]), seed=pool, stratum=h)] for h in range(H)]
        labels = np.zeros(0, dtype=np.int64)
        xs = np.zeros(0, dtype=np.int64)
        bases = np.zeros((0, H))
        for k, end in enumerate(C.stage_ends(H, n, pilot=10)):
            end = min(int(end), 500)
            if end <= len(labels):
                break
            t = np.bincount(labels, minlength=H)
            s = np.bincount(labels, weights=xs, minlength=H)
            base = C.stage_weights(N, t, s, cov, stage=k)
            lab = C.draw_strata(sizes=N, drawn=t, base=base, n=end - len(labels), seed=pool, stream=k)
            pos = t.copy()
            new = []
            for h in lab:
                new.append(seqs[h][pos[h]])
                pos[h] += 1
            labels, xs = np.concatenate([labels, lab]), np.concatenate([xs, new])
            bases = np.vstack([bases, np.tile(base, (len(lab), 1))])
        b = C.betting_upper(N, labels, xs, bases, 0.05, history_at=range(1, len(labels) + 1))
        held = all(total >= 100 for _k, total in b.history)
        g = int(np.searchsorted(b.grid, 100, side="right")) - 1
        lk = C.log_wealth(C.draw_path(N, labels, xs, bases), b.grid[g:g + 1])
        assert held == bool(lk.max() < math.log(20))  # the bound misses exactly when the test at g(T) rejects
        misses += not held
        tighter += b.total - int(xs.sum()) < 2000 - len(labels)
    assert misses <= 14
    assert tighter == 200  # and it says something: below the trivial bound in every pool


def test_strata_draws_replay_respect_sizes_and_follow_the_weights():
    sizes = [50, 30, 5]
    a = C.draw_strata(sizes=sizes, drawn=[0, 0, 0], base=[0.2, 0.3, 0.5], n=85, seed=4, stream=1)
    assert np.array_equal(a, C.draw_strata(sizes=sizes, drawn=[0, 0, 0], base=[0.2, 0.3, 0.5], n=85, seed=4, stream=1))
    assert not np.array_equal(a, C.draw_strata(sizes=sizes, drawn=[0, 0, 0], base=[0.2, 0.3, 0.5], n=85, seed=4, stream=2))
    assert list(np.bincount(a, minlength=3)) == sizes  # every item once, none over
    big = C.draw_strata(sizes=[10**6] * 3, drawn=[0, 0, 0], base=[0.2, 0.3, 0.5], n=30000, seed=1, stream=0)
    freq = np.bincount(big, minlength=3) / 30000
    assert stats.chisquare(freq * 30000, [6000, 9000, 15000]).pvalue > 1e-4
    with pytest.raises(C.CertifyError, match="positive draw weight"):
        C.draw_strata(sizes=sizes, drawn=[0, 0, 0], base=[0.0, 0.5, 0.5], n=10, seed=1, stream=0)


def test_grid_bound_and_expected_reviews():
    grid = np.array([0, 1, 2, 3, 5, 8, 12])
    assert C.grid_upper(grid, np.array([0, 0, 0, 1, 1, 1, 1], dtype=bool), 20) == 2
    assert C.grid_upper(grid, np.array([0, 0, 0, 0, 1, 0, 1], dtype=bool), 20) == 11  # 8..11 still open
    assert C.grid_upper(grid, np.zeros(7, dtype=bool), 20) == 20
    assert list(C.tail_quantiles(13, 10**6)[:2]) == [0.0, pytest.approx(1 - 0.002 ** (1 / 12))]
    st = C.stratify_quantiles(np.arange(1000.0), C.tail_quantiles(4, 1000))
    assert list(st.sizes) == [785, 154, 31, 30][: len(st.sizes)] or st.sizes.sum() == 1000
    # a pool with 2% ID after 2,000 draws of a simple random sample: more reviews are expected
    rng = np.random.default_rng(3)
    xs = (rng.random(2000) < 0.02).astype(np.int64)
    lab = np.zeros(2000, dtype=np.int64)
    b = C.betting_upper([100_000], lab, xs, np.ones(1), 0.05)
    goal = 0.025 * (100_000 - 2000) + xs.sum()
    more = C.betting_expected([100_000], lab, xs, [1.0], b, goal)
    assert more is not None and 100 < more < 50_000
    assert C.betting_expected([100_000], lab, xs, [1.0], b, b.total + 10) == 0


def test_stage_schedule_and_draw_weights_follow_the_plan_rule():
    """oodc-certify/3: a pilot of 5 draws per stratum in proportion to size, then stages that each
    add half the draws made so far (rounded up), and after the pilot pi_h = 0.4 x N_h sqrt(r_h) /
    sum + 0.6 x N_h / sum. Written here from that rule (docs/review.md), not from the helpers."""
    assert C.PILOT_PER_STRATUM == 5 and C.STAGE_GROWTH == 1.5 and C.NEYMAN_MIX == 0.4
    assert C.CODE_VERSION == "oodc-certify/3"
    ends = [13 * 5]
    while ends[-1] < 100_000:
        ends.append(min(100_000, math.ceil(ends[-1] * 1.5)))
    assert list(C.stage_ends(13, 100_000)) == ends
    assert ends[:6] == [65, 98, 147, 221, 332, 498]
    assert list(C.stage_ends(3, 20, pilot=4)) == [12, 18, 20]
    sizes = [700, 200, 80, 20]
    rates = [0.001, 0.01, 0.1, 0.6]
    ney = [n * math.sqrt(r) for n, r in zip(sizes, rates)]
    want = [0.4 * a / sum(ney) + 0.6 * n / sum(sizes) for a, n in zip(ney, sizes)]
    got = C.bet_allocation(sizes, [5] * 4, [0, 0, 1, 3], rates=np.array(rates))
    assert got == pytest.approx(want, rel=1e-12)
    assert C.stage_weights(sizes, None, None, None, stage=0) == pytest.approx([n / 1000 for n in sizes])


def test_the_remainders_bound_never_says_more_than_its_size():
    """Early on, the bound on the total (on the betting grid: steps of 0.5% past 200) can exceed
    the images left; the remainder's bound is then its size (a share of 100%), never more."""
    sizes = np.array([400, 300])
    b = C.Bound(total=720, split=np.zeros(2, dtype=np.int64), mle=np.zeros(2, dtype=np.int64), found=np.array([1, 0]),
                reviewed=np.array([2, 1]), sizes=sizes, alpha=0.05, method=C.BETTING)
    cert = C.Certificate(alpha=0.05, target=0.25, bound=b, full_found=0, full_open=0, remainder_size=697)
    assert b.remainder == 719 and cert.remainder_bound == 697 and cert.remainder_share == 1.0 and not cert.certified
    # open images of a stratum reviewed in full still count on top, and a smaller bound is kept as it is
    assert C.Certificate(alpha=0.05, target=0.25, bound=b, full_found=0, full_open=3, remainder_size=697).remainder_bound == 700
    low = C.Bound(total=100, split=b.split, mle=b.mle, found=b.found, reviewed=b.reviewed, sizes=sizes, alpha=0.05, method=C.BETTING)
    assert C.Certificate(alpha=0.05, target=0.25, bound=low, full_found=0, full_open=0, remainder_size=697).remainder_bound == 99
