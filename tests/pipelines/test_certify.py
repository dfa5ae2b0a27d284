"""Certifying a pool from a stratified sample (pipelines/certify.py, issue 37).

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

from pipelines import certify as C


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
