"""Certifying a pool without reviewing all of it (issue 37; docs/review.md, "Review in full or
certify").

The accepted images that no review has decided yet (the population U) are split into strata by
an ID-likeness score (higher = more ID-like). Reviews are drawn at random from the strata; the
reviewers' decisions give an upper confidence bound on the number of ID images U holds, valid at
every moment the curator looks (a confidence sequence), so the curator can stop as soon as the
bound reaches the target.

The default method, ``betting`` (the section "one betting martingale for the total" below; the
proof in docs/review.md), in one paragraph:

- Draw i picks stratum h with probability pi_h, fixed before the draw (the plan's seed and the
  weights of the stage in force, over the strata with images left: recomputed right after the
  draw that empties a stratum, ``strata_for_uniforms``, issue 50), and reviews the next image of
  that stratum's seeded order.
  Y_i = A_{i-1} + x_i M_h(i) / pi_h (A: ID images found before, M_h(i): images of h not drawn
  yet, x_i = 1 for ID) has conditional mean exactly T, U's ID total.
- For a candidate total t, K_i(t) = prod (1 + b_j(t) (t - Y_j)) with a predictable bet
  0 <= b_j(t) < 1 / (Ymax_j - t) is a non-negative supermartingale under every T >= t; by
  Ville's inequality it ever reaches 1/alpha with probability at most alpha.
- A fixed grid of t is tested; grid point g stands for the totals up to the next grid point,
  excluded once K(g) reached 1/alpha. The bound is the largest total not excluded. It fails only
  if the test at g(T) (the largest grid point <= T), whose null "T >= g(T)" is true, rejected:
  probability <= alpha, with no correction for the grid, the strata or the stages. That is the
  guarantee: P(the bound is below T after some draw) <= alpha, at every look together.

The earlier methods, kept by name (``wor-cs/shared``, ``wor-cs/product``):

- For a finite population of N images of which T show an ID object, the probability of one
  ordered sample without replacement of t images holding S ID images is
  ``L_t(T) = [T]_S [N-T]_{t-S} / [N]_t`` (falling factorials). With strata sampled on a
  schedule that depends only on what was seen before, the likelihood of everything seen is the
  product of the strata's L's.
- Waudby-Smith & Ramdas (2020, "Confidence sequences for sampling without replacement",
  NeurIPS, sec. 3, the prior-posterior ratio): for any prior pi over the unknown counts, the
  ratio ``R_t(T) = m_t / L_t(T)``, with ``m_t = sum_T' pi(T') L_t(T')`` the prior's predictive
  probability of the data, is a non-negative martingale with mean 1 under the true counts, so
  by Ville's inequality it ever reaches 1/alpha with probability at most alpha.
- Strata are combined by an intersection-union test (as stratified election audits do:
  Stark 2023, ALPHA; Spertus & Stark 2022, SUITE): a total tau is rejected only when *every*
  split of tau over the strata is rejected, i.e. when ``m_t / max_{sum T_h = tau} L_t(T) >=
  1/alpha``. If the true total were rejected, its true split would be too, which happens with
  probability <= alpha at any time. The maximum over splits is a sum of concave functions
  under one linear constraint, solved exactly by taking the cheapest unit steps first. Paying
  for every split is what made these methods need more reviews than a simple random sample.
- The prior decides the power, never the validity. ``shared`` lets the strata share one
  two-parameter family, stratum rate = expit(a + b * position), mixed over a grid of (a, b)
  (``fitted_rates`` still uses it to set the betting stages' draw probabilities); ``product``
  gives each stratum its own beta-binomial prior.

Fixed-size alternatives, named as such: the exact hypergeometric upper bound per stratum
(valid for one look at a sample size fixed in advance; strata added with a union bound) and
Clopper-Pearson for a simple random sample.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Sequence

import numpy as np
from numpy.typing import NDArray

# scipy.special and scipy.stats are imported in the functions that use them: at import they added
# over a second to the start of every command, worker and web process (the admin imports this).

Prior = Literal["shared", "product"]
PRIORS: tuple[str, ...] = ("shared", "product")
CODE_VERSION = "oodc-certify/3"

IntArray = NDArray[np.int64]
Counts = Sequence[int] | NDArray[np.integer]
FloatArray = NDArray[np.float64]


class CertifyError(ValueError):
    """Inputs the certification cannot use; the message names the input and the fix."""


# -- strata, allocation, draw -----------------------------------------------------------------------

@dataclass(frozen=True)
class Stratification:
    """``labels[i]``: stratum of item i (0 = least ID-like). ``edges``: the score where each
    stratum starts. ``full``: strata reviewed in full rather than sampled."""

    labels: IntArray
    edges: FloatArray
    full: tuple[bool, ...]

    @property
    def sizes(self) -> IntArray:
        return np.bincount(self.labels, minlength=len(self.full)).astype(np.int64)


def stratify(scores: Sequence[float] | FloatArray, n_strata: int, *, full_top: float = 0.0) -> Stratification:
    """Equal-count strata by score (ties broken by position, so the split is deterministic).
    ``full_top`` (a share of the items, 0 to 0.5) puts the most ID-like items in one more
    stratum, reviewed in full."""
    s = np.asarray(scores, dtype=np.float64)
    if s.ndim != 1 or len(s) == 0:
        raise CertifyError("no scores to stratify: the plan needs at least one unreviewed image with a score")
    if not np.all(np.isfinite(s)):
        raise CertifyError("some scores are not finite: re-run the image pipeline for the source")
    if not 1 <= n_strata <= 100:
        raise CertifyError(f"strata must be between 1 and 100, not {n_strata}")
    if not 0.0 <= full_top <= 0.5:
        raise CertifyError(f"the share reviewed in full must be between 0 and 0.5, not {full_top}")
    order = np.argsort(s, kind="stable")
    n = len(s)
    n_full = int(round(full_top * n))
    n_sampled = n - n_full
    labels = np.empty(n, dtype=np.int64)
    k = max(1, min(n_strata, n_sampled)) if n_sampled else 0
    bounds = [(n_sampled * j) // k for j in range(k + 1)] if k else [0]
    for j in range(k):
        labels[order[bounds[j]:bounds[j + 1]]] = j
    full = [False] * k
    if n_full:
        labels[order[n_sampled:]] = k
        full.append(True)
    starts = [bounds[j] for j in range(k)] + ([n_sampled] if n_full else [])
    edges = np.array([s[order[i]] for i in starts], dtype=np.float64)
    return Stratification(labels=labels, edges=edges, full=tuple(full))


def pilot_rates(found: Sequence[int], reviewed: Sequence[int]) -> FloatArray:
    """Rates for allocation from a pilot, pulled off zero so a stratum where the pilot found
    nothing still gets reviews: (found + 1/2) / (reviewed + 1) (Jeffreys' centre)."""
    f = np.asarray(found, dtype=np.float64)
    r = np.asarray(reviewed, dtype=np.float64)
    return (f + 0.5) / (r + 1.0)


def neyman_allocation(sizes: Sequence[int], rates: Sequence[float], total: int, *, minimum: int = 0) -> IntArray:
    """Split ``total`` reviews over strata in proportion to N_h * sqrt(p_h (1 - p_h)) (Neyman
    1934), each stratum at least ``minimum`` and at most its size; rounded by largest remainder."""
    n_h = np.asarray(sizes, dtype=np.int64)
    p = np.clip(np.asarray(rates, dtype=np.float64), 0.0, 1.0)
    if n_h.shape != p.shape:
        raise CertifyError("sizes and rates must name the same strata")
    total = int(min(total, int(n_h.sum())))
    floor = np.minimum(n_h, minimum)
    out = floor.copy()
    left = total - int(floor.sum())
    if left <= 0:
        return out
    weight = n_h * np.sqrt(p * (1 - p))
    if weight.sum() <= 0:
        weight = n_h.astype(np.float64)
    for _ in range(len(n_h) + 1):  # strata that fill up hand their share to the others
        room = n_h - out
        w = np.where(room > 0, weight, 0.0)
        if left <= 0 or w.sum() <= 0:
            break
        share = left * w / w.sum()
        add = np.minimum(np.floor(share).astype(np.int64), room)
        rest = left - int(add.sum())
        frac = np.where(room - add > 0, share - np.floor(share), -1.0)
        for j in np.argsort(-frac, kind="stable")[:rest]:
            if frac[j] >= 0:
                add[j] += 1
        out += add
        left = total - int(out.sum())
    return out


# -- the plan's random streams (issue 50) -------------------------------------------------------------
#
# Sampler 1 (plans made before issue 50) seeded stratum h's order with default_rng([seed, h]) and
# stage k's stratum draws with default_rng([seed, k, 7919]). numpy pads a seed list with zeros,
# so default_rng(seed) IS default_rng([seed, 0]): data generated from the plan's seed and
# stratum 0's order were the same random numbers. Sampler 2 takes every stream as a child of
# SeedSequence(seed) (numpy's spawn keys: SeedSequence(seed).spawn(...) gives the same children),
# which no plain seed or seed list of up to four words reproduces; orders under key
# (ORDER_KEY, h), stage draws under (STRATA_KEY, k). Sampler 2 also recomputes the stratum
# probabilities right after the draw that empties a stratum (``strata_for_uniforms``).

SAMPLER = 2  # what new plans use; a plan stores the sampler that drew it (and each stage its own)
SAMPLERS: tuple[int, ...] = (1, 2)
ORDER_KEY = 0
STRATA_KEY = 1


def _check_sampler(sampler: int) -> None:
    if sampler not in SAMPLERS:
        raise CertifyError(f"unknown sampler {sampler!r}: this code knows samplers {', '.join(map(str, SAMPLERS))}")


def plan_stream(seed: int, *key: int) -> np.random.Generator:
    """The generator of the plan's stream ``key`` (sampler 2): PCG64 seeded by the child of
    SeedSequence(seed) with spawn key ``key``, independent of every other key and of
    ``default_rng(seed)`` itself."""
    return np.random.default_rng(np.random.SeedSequence(int(seed), spawn_key=tuple(int(k) for k in key)))


def draw_order(size: int, *, seed: int, stratum: int, sampler: int = SAMPLER) -> IntArray:
    """A seeded simple random sample without replacement of a stratum's items, as an order:
    position k is the k-th image drawn. Replays exactly from (seed, stratum, sampler)."""
    _check_sampler(sampler)
    rng = np.random.default_rng([int(seed), int(stratum)]) if sampler == 1 else plan_stream(seed, ORDER_KEY, stratum)
    return rng.permutation(int(size)).astype(np.int64)


def interleave(counts: Sequence[int], *, offset: Sequence[int] | None = None) -> IntArray:
    """Stratum of each review in serving order when stratum h gets ``counts[h]`` reviews: the
    strata advance at the same relative pace (review j of stratum h comes at (j + 1/2) / n_h),
    so the sample is balanced whenever the curator looks. ``offset`` numbers the draws already
    made (the pilot) so the result continues each stratum's order."""
    keys: list[FloatArray] = []
    labs: list[IntArray] = []
    for h, n in enumerate(counts):
        if n > 0:
            keys.append((np.arange(n, dtype=np.float64) + 0.5) / n)
            labs.append(np.full(n, h, dtype=np.int64))
    if not keys:
        return np.zeros(0, dtype=np.int64)
    k = np.concatenate(keys)
    lab = np.concatenate(labs)
    return lab[np.lexsort((lab, k))]


# -- one stratum ------------------------------------------------------------------------------------

def log_sample_likelihood(n_pop: int, t: int, s: int, counts: IntArray | Sequence[int]) -> FloatArray:
    """log P(one ordered sample of t images, s of them ID | N, T) for each T in ``counts``:
    log([T]_s [N-T]_{t-s} / [N]_t); -inf where T cannot have produced it."""
    from scipy import special
    T = np.asarray(counts, dtype=np.float64)
    ok = (T >= s) & (n_pop - T >= t - s)
    Tc = np.where(ok, T, float(s))
    gl = special.gammaln
    v = (gl(Tc + 1) - gl(Tc - s + 1) + gl(n_pop - Tc + 1) - gl(n_pop - Tc - (t - s) + 1)
         - gl(n_pop + 1.0) + gl(n_pop - t + 1.0))
    return np.where(ok, v, -np.inf)


def wor_cs_upper(n_pop: int, t: int, s: int, alpha: float, *, a: float = 1.0, b: float = 1.0) -> int:
    """Upper end of Waudby-Smith & Ramdas' (2020) prior-posterior-ratio confidence sequence for
    the number of ID images T in a population of N, after t draws without replacement holding s,
    with a beta-binomial(N, a, b) prior: the largest T with L_t(T) > alpha * m_t, where
    m_t = B(a + s, b + t - s) / B(a, b) is the prior's predictive probability of the sequence."""
    from scipy import special
    _check_counts(n_pop, t, s, alpha)
    log_m = special.betaln(a + s, b + t - s) - special.betaln(a, b)
    T = np.arange(s, n_pop - (t - s) + 1)
    keep = log_sample_likelihood(n_pop, t, s, T) > np.log(alpha) + log_m
    return int(T[keep].max())


def hypergeom_upper(n_pop: int, n: int, k: int, alpha: float) -> int:
    """Exact upper bound for a sample of size n fixed in advance and looked at once: the largest
    T for which seeing k or fewer ID images has probability above alpha."""
    from scipy import stats
    _check_counts(n_pop, n, k, alpha)
    T = np.arange(k, n_pop - (n - k) + 1)
    keep = stats.hypergeom.cdf(k, n_pop, T, n) > alpha
    return int(T[keep].max())


def clopper_pearson_upper(n: int, k: int, alpha: float) -> float:
    """One-sided Clopper-Pearson upper bound on a rate (k of n, an infinite population)."""
    from scipy import stats
    if n <= 0 or not 0 <= k <= n:
        raise CertifyError(f"Clopper-Pearson needs 0 <= found <= reviewed and reviewed > 0, not {k} of {n}")
    return 1.0 if k >= n else float(stats.beta.ppf(1 - alpha, k + 1, n - k))


def _check_counts(n_pop: int, t: int, s: int, alpha: float) -> None:
    if not 0 <= s <= t <= n_pop:
        raise CertifyError(f"need 0 <= found ({s}) <= reviewed ({t}) <= stratum size ({n_pop})")
    if not 0 < alpha < 1:
        raise CertifyError(f"alpha must be between 0 and 1, not {alpha}")


# -- strata together --------------------------------------------------------------------------------

SHARED_A = np.arange(-10.0, 0.0001, 0.125)  # logit of the rate at covariate 0 (the pool's mean score)
SHARED_B = np.arange(0.0, 4.0001, 0.25)  # logit change per unit of covariate (higher score, more ID)


def default_covariate(n_strata: int) -> FloatArray:
    """Stratum positions when no scores are given: evenly spaced in [-1, 1]."""
    return np.zeros(1) if n_strata == 1 else np.linspace(-1.0, 1.0, n_strata)


def stratum_covariate(scores: Sequence[float] | FloatArray, labels: IntArray, n_strata: int) -> FloatArray:
    """Each stratum's mean score in units of the pool's standard deviation around its mean:
    with normal scores of equal spread the log-odds of ID is linear in it."""
    s = np.asarray(scores, dtype=np.float64)
    z = (s - s.mean()) / (s.std() or 1.0)
    sums = np.bincount(labels, weights=z, minlength=n_strata)
    counts = np.maximum(np.bincount(labels, minlength=n_strata), 1)
    return np.asarray(sums / counts, dtype=np.float64)


SHARED_KAPPA = (10.0, 100.0, 1000.0, np.inf)  # how closely strata follow the curve (inf: exactly)


def shared_rates(covariate: FloatArray) -> FloatArray:
    """The curves of the ``shared`` prior: one row of stratum rates expit(a + b * covariate) per
    (a, b) on the grid (one stratum: a alone)."""
    from scipy import special
    x = np.asarray(covariate, dtype=np.float64)
    bs = SHARED_B if len(x) > 1 else SHARED_B[:1]
    a, b = np.meshgrid(SHARED_A, bs, indexing="ij")
    return np.asarray(special.expit(a.reshape(-1, 1) + b.reshape(-1, 1) * x[None, :]), dtype=np.float64)


def _shared_loglik(t: FloatArray, s: FloatArray, covariate: FloatArray) -> tuple[FloatArray, FloatArray]:
    """Per prior point (curve x kappa, equal weights): log of the predictive probability of the
    samples seen. Given a curve, stratum h's rate is Beta(kappa m_h, kappa (1 - m_h)) around the
    curve's m_h (a beta-Bernoulli likelihood), or exactly m_h for kappa = inf, so a stratum may
    leave the curve at a price."""
    from scipy import special
    m = shared_rates(covariate)
    out = []
    for k in SHARED_KAPPA:
        if np.isinf(k):
            out.append(np.log(m) @ s + np.log1p(-m) @ (t - s))
        else:
            a, b = k * m, k * (1 - m)
            out.append(np.sum(special.betaln(a + s, b + t - s) - special.betaln(a, b), axis=1))
    return np.tile(m, (len(SHARED_KAPPA), 1)), np.concatenate(out)


def log_predictive(t: IntArray, s: IntArray, *, prior: Prior = "shared", covariate: FloatArray | None = None,
                   beta_a: float = 1.0, beta_b: float = 1.0) -> float:
    """log m_t: the prior's predictive probability of the ordered samples seen (strata
    together). A population whose items are ID with probability p, sampled without replacement,
    gives independent Bernoulli(p) draws, so for a mixture of such populations m_t is the same
    mixture of Bernoulli (or beta-Bernoulli) likelihoods."""
    from scipy import special
    tf = np.asarray(t, dtype=np.float64)
    sf = np.asarray(s, dtype=np.float64)
    if prior == "product":
        return float(np.sum(special.betaln(beta_a + sf, beta_b + tf - sf) - special.betaln(beta_a, beta_b)))
    if prior != "shared":
        raise CertifyError(f"unknown prior {prior!r}; choose from {', '.join(PRIORS)}")
    x = default_covariate(len(tf)) if covariate is None else np.asarray(covariate, dtype=np.float64)
    _p, ll = _shared_loglik(tf, sf, x)
    return float(special.logsumexp(ll) - np.log(len(ll)))


def fitted_rates(reviewed: Counts, found: Counts, covariate: FloatArray | None = None) -> FloatArray:
    """Posterior-mean stratum rates under the shared prior: strata borrow strength from each
    other, so a small pilot still ranks them (used to allocate, never to bound)."""
    tf = np.asarray(reviewed, dtype=np.float64)
    sf = np.asarray(found, dtype=np.float64)
    x = default_covariate(len(tf)) if covariate is None else np.asarray(covariate, dtype=np.float64)
    p, ll = _shared_loglik(tf, sf, x)
    w = np.exp(ll - ll.max())
    return np.asarray((w @ p) / w.sum(), dtype=np.float64)


@dataclass
class Bound:
    """An upper confidence bound on the number of ID images in sampled strata."""

    total: int  # bound on ID images in the strata's populations (found ones included)
    split: IntArray  # the split of ``total`` over strata that is hardest to reject
    mle: IntArray  # most likely count per stratum
    found: IntArray
    reviewed: IntArray
    sizes: IntArray
    alpha: float
    method: str
    extra: dict = field(default_factory=dict)

    @property
    def remainder(self) -> int:
        """Bound on the ID images among the images nobody reviewed."""
        return int(self.total - self.found.sum())


def _stratum_steps(n_pop: int, t: int, s: int, budget: float) -> tuple[int, FloatArray]:
    """Most likely T and the log-likelihood cost of each unit step up from it while the cost so
    far stays within ``budget`` (the costs rise: log L_t is concave in T)."""
    hi = n_pop - (t - s)
    if t == 0:
        return 0, np.zeros(0)
    guess = int(min(max(s, np.floor(s * (n_pop + 1) / t)), hi))
    cand = np.arange(max(s, guess - 2), min(hi, guess + 2) + 1)
    ll = log_sample_likelihood(n_pop, t, s, cand)
    mode = int(cand[int(np.argmax(ll))])
    top = float(ll.max())
    lo_, hi_ = mode, hi  # largest T whose drop from the top is within the budget
    while lo_ < hi_:
        mid = (lo_ + hi_ + 1) // 2
        if top - float(log_sample_likelihood(n_pop, t, s, [mid])[0]) <= budget:
            lo_ = mid
        else:
            hi_ = mid - 1
    last = min(lo_ + 1, hi)
    vals = log_sample_likelihood(n_pop, t, s, np.arange(mode, last + 1))
    return mode, -np.diff(vals)


def stratified_upper(sizes: Counts, reviewed: Counts, found: Counts, alpha: float, *,
                     prior: Prior = "shared", covariate: Sequence[float] | FloatArray | None = None) -> Bound:
    """Anytime-valid upper bound on the total number of ID images over the strata (the module's
    docstring; docs/review.md). ``reviewed[h]`` must be the first draws of stratum h's seeded
    order, all decided; strata without reviews are bounded by their size."""
    N = np.asarray(sizes, dtype=np.int64)
    t = np.asarray(reviewed, dtype=np.int64)
    s = np.asarray(found, dtype=np.int64)
    if not (N.shape == t.shape == s.shape) or N.ndim != 1:
        raise CertifyError("sizes, reviewed and found must name the same strata")
    for h in range(len(N)):
        _check_counts(int(N[h]), int(t[h]), int(s[h]), alpha)
    sampled = t > 0
    # a stratum without a sample cannot be bounded: count all of it
    fixed = int(N[~sampled].sum())
    x = default_covariate(len(N)) if covariate is None else np.asarray(covariate, dtype=np.float64)
    log_m = log_predictive(t[sampled], s[sampled], prior=prior, covariate=x[sampled]) if sampled.any() else 0.0
    modes = np.where(sampled, 0, N).astype(np.int64)
    tops = 0.0
    for h in (int(i) for i in np.flatnonzero(sampled)):
        m, _ = _stratum_steps(int(N[h]), int(t[h]), int(s[h]), 0.0)
        modes[h] = m
        tops += float(log_sample_likelihood(int(N[h]), int(t[h]), int(s[h]), [m])[0])
    budget = tops - log_m - float(np.log(alpha))  # >= log(1/alpha) > 0, since m_t <= max L_t
    steps: list[FloatArray] = []
    owner: list[IntArray] = []
    for h in (int(i) for i in np.flatnonzero(sampled)):
        _m, inc = _stratum_steps(int(N[h]), int(t[h]), int(s[h]), budget)
        steps.append(inc)
        owner.append(np.full(len(inc), h, dtype=np.int64))
    split = modes.copy()
    extra_steps = 0
    if steps:
        inc = np.concatenate(steps)
        who = np.concatenate(owner)
        order = np.argsort(inc, kind="stable")
        cum = np.cumsum(inc[order])
        extra_steps = int(np.searchsorted(cum, budget, side="left"))  # steps with cost so far < budget
        np.add.at(split, who[order[:extra_steps]], 1)
    total = int(modes[sampled].sum()) + extra_steps + fixed
    return Bound(total=total, split=split, mle=modes, found=s, reviewed=t, sizes=N, alpha=alpha,
                 method=f"wor-cs/{prior}", extra={"log_predictive": log_m, "budget": budget})


def union_hypergeom_upper(sizes: Sequence[int], reviewed: Sequence[int], found: Sequence[int], alpha: float) -> Bound:
    """The fixed-size alternative: each stratum's exact hypergeometric bound at alpha / H,
    added (a union bound; valid for one look at sample sizes fixed in advance)."""
    N = np.asarray(sizes, dtype=np.int64)
    t = np.asarray(reviewed, dtype=np.int64)
    s = np.asarray(found, dtype=np.int64)
    a = alpha / max(1, int((t > 0).sum()))
    split = np.array([hypergeom_upper(int(N[h]), int(t[h]), int(s[h]), a) if t[h] > 0 else int(N[h]) for h in range(len(N))],
                     dtype=np.int64)
    return Bound(total=int(split.sum()), split=split, mle=split, found=s, reviewed=t, sizes=N, alpha=alpha,
                 method="hypergeometric-fixed-n/union")


def log_ratio_at(sizes: IntArray, labels_seen: IntArray, x_seen: IntArray, true_counts: IntArray, *,
                 prior: Prior = "shared", covariate: FloatArray | None = None) -> FloatArray:
    """log R_t(T) after every review t = 1..n, for a given split T (benchmarks and tests: if it
    stays below log(1/alpha) at every t, the bound held at every t)."""
    from scipy import special
    H = len(sizes)
    n = len(labels_seen)
    onehot = np.zeros((n, H))
    onehot[np.arange(n), labels_seen] = 1.0
    t_cum = np.cumsum(onehot, axis=0)
    s_cum = np.cumsum(onehot * x_seen[:, None], axis=0)
    # log L_t(T) increments: draw t of stratum h given t_h-1 draws and s_h-1 found before
    t_prev = (t_cum - onehot)[np.arange(n), labels_seen]
    s_prev = (s_cum - onehot * x_seen[:, None])[np.arange(n), labels_seen]
    Nh = sizes[labels_seen].astype(np.float64)
    Th = true_counts[labels_seen].astype(np.float64)
    with np.errstate(divide="ignore"):
        step = np.where(x_seen == 1, np.log(Th - s_prev) - np.log(Nh - t_prev),
                        np.log(Nh - Th - (t_prev - s_prev)) - np.log(Nh - t_prev))
    log_l = np.cumsum(step)
    if prior == "product":
        log_m = np.sum(special.betaln(1 + s_cum, 1 + t_cum - s_cum) - special.betaln(1, 1), axis=1)
    else:
        log_m = _shared_log_m_path(labels_seen, x_seen, default_covariate(H) if covariate is None else covariate, H)
    return np.asarray(log_m - log_l, dtype=np.float64)


def _shared_log_m_path(labels_seen: IntArray, x_seen: IntArray, covariate: FloatArray, n_strata: int) -> FloatArray:
    """log m_t of the shared prior after every review, updated one draw at a time."""
    from scipy import special
    m = shared_rates(np.asarray(covariate, dtype=np.float64))
    parts = []
    for k in SHARED_KAPPA:
        parts.append((k, m))
    G = m.shape[0] * len(SHARED_KAPPA)
    ll = np.zeros(G)
    t = np.zeros(n_strata)
    s = np.zeros(n_strata)
    out = np.empty(len(labels_seen))
    logG = np.log(G)
    for i, (h, x) in enumerate(zip(labels_seen, x_seen)):
        pieces = []
        for k, mm in parts:
            mh = mm[:, h]
            if np.isinf(k):
                pieces.append(np.log(mh) if x else np.log1p(-mh))
            else:
                num = k * mh + s[h] if x else k * (1 - mh) + t[h] - s[h]
                pieces.append(np.log(num) - np.log(k + t[h]))
        ll += np.concatenate(pieces)
        t[h] += 1
        s[h] += x
        out[i] = special.logsumexp(ll) - logG
    return out


# -- a plan's numbers -------------------------------------------------------------------------------

@dataclass
class Certificate:
    """What a curator reads and an export records."""

    alpha: float
    target: float  # the bound the remainder's contamination must reach (a share, e.g. 0.005)
    bound: Bound
    full_found: int  # ID images found in strata reviewed in full
    full_open: int  # images of those strata not decided yet (counted as ID until they are)
    remainder_size: int  # images nobody reviewed (sampled strata, outside the sample)
    # images of the sampled strata decided outside the sample (the queue served them anyway): if
    # the strata hold at most U ID images, the ones nobody decided hold at most U minus every ID
    # image found, sample or not
    outside_found: int = 0

    @property
    def remainder_bound(self) -> int:
        # the unreviewed images hold at most as many ID images as there are of them: early on, the
        # bound on the total (on its grid) can say more than that, which is no information
        return min(max(0, self.bound.remainder - self.outside_found), self.remainder_size) + self.full_open

    @property
    def remainder_share(self) -> float:
        return self.remainder_bound / self.remainder_size if self.remainder_size else 0.0

    @property
    def estimate(self) -> float:
        """Stratified point estimate of the remainder's ID share."""
        N, t, s = self.bound.sizes, self.bound.reviewed, self.bound.found
        rate = np.where(t > 0, s / np.maximum(t, 1), 1.0)
        ids = float(np.sum(rate * (N - t))) - self.outside_found
        return max(0.0, ids) / self.remainder_size if self.remainder_size else 0.0

    @property
    def certified(self) -> bool:
        return self.full_open == 0 and self.remainder_share <= self.target


def certificate(*, sizes: Counts, reviewed: Counts, found: Counts, alpha: float, target: float,
                full_found: int = 0, full_open: int = 0, prior: Prior = "shared",
                covariate: Sequence[float] | FloatArray | None = None, outside_reviewed: int = 0,
                outside_found: int = 0) -> Certificate:
    b = stratified_upper(sizes, reviewed, found, alpha, prior=prior, covariate=covariate)
    rem = int(np.sum(np.asarray(sizes) - np.asarray(reviewed))) - outside_reviewed
    return Certificate(alpha=alpha, target=target, bound=b, full_found=full_found, full_open=full_open, remainder_size=rem,
                       outside_found=outside_found)


def reviews_expected(*, sizes: Sequence[int], rates: Sequence[float], weights: Sequence[float], reviewed: Sequence[int],
                     alpha: float, target: float, prior: Prior = "shared", limit: int | None = None,
                     covariate: Sequence[float] | FloatArray | None = None) -> int | None:
    """Reviews still expected before the bound reaches ``target``, if the strata's rates are
    ``rates`` and reviews go on in proportion to ``weights``: the bound is computed on the
    expected counts at growing sample sizes. None when it cannot get there (the whole pool)."""
    N = np.asarray(sizes, dtype=np.int64)
    p = np.asarray(rates, dtype=np.float64)
    w = np.asarray(weights, dtype=np.float64)
    t0 = np.asarray(reviewed, dtype=np.int64)
    w = w / w.sum() if w.sum() > 0 else np.ones_like(w) / len(w)
    room = int((N - t0).sum())
    limit = room if limit is None else min(limit, room)

    def ok(extra: int) -> bool:
        t = np.minimum(N, t0 + np.ceil(w * extra).astype(np.int64))
        s = np.minimum(t, np.round(p * t).astype(np.int64))
        c = certificate(sizes=N, reviewed=t, found=s, alpha=alpha, target=target, prior=prior, covariate=covariate)
        return c.certified

    if ok(0):
        return 0
    if not ok(limit):
        return None
    lo, hi = 0, limit
    while hi - lo > max(1, hi // 100):
        mid = (lo + hi) // 2
        if ok(mid):
            hi = mid
        else:
            lo = mid
    return hi


# -- one betting martingale for the total (the default method, "betting") ---------------------------
#
# Draw i picks stratum h_i with probability pi_h (fixed before the draw: from the plan's seed and
# the base weights in force, renormalised over the strata that still have undrawn items) and
# reviews the next undrawn item of that stratum's seeded order. With M_h(i) the items of stratum
# h not drawn before draw i, A_{i-1} the ID images found in draws 1..i-1 and x_i = 1 when draw i
# is ID, Y_i = A_{i-1} + x_i M_{h_i}(i) / pi_{h_i} has E[Y_i | past] = T, the population's ID
# total, exactly (importance weighting; drawing without replacement inside a stratum is what
# M_h(i) accounts for). For the null "T >= t", K_i(t) = prod_{j<=i} (1 + b_j(t) (t - Y_j)) with a
# predictable b_j(t) in [0, 1 / (Ymax_j - t)) is a non-negative supermartingale under every
# T >= t (each factor has conditional mean 1 + b_j (t - T) <= 1), so by Ville's inequality it
# ever reaches 1/alpha with probability at most alpha. The bound tests a fixed grid of t and
# excludes every total T whose grid point g(T) (the largest grid point <= T) was rejected at any
# time: the true T is excluded only if the one test at g(T), whose null is true, rejected, so the
# bound holds with probability >= 1 - alpha at all times together, with no price for the grid.

METHODS: tuple[str, ...] = ("betting", "wor-cs/shared", "wor-cs/product")
BETTING = "betting"
BET_CAP = 0.8  # the bet keeps every factor >= 1 - BET_CAP, whatever the draw turns up
KELLY = 0.7  # fraction of the model's Kelly bet (the model is fitted to few draws early on)
BET_SHRINK = 2.0  # stratum rates in the bet's model: (s_h + BET_SHRINK p) / (n_h + BET_SHRINK), p pooled
# after the pilot: pi = NEYMAN_MIX * (M_h sqrt(r_h)) + (1 - NEYMAN_MIX) * (M_h), each normalised. Below
# one half: the proportional part bounds every z_h = M_h / pi_h, so the cap on the bet (BET_CAP /
# (Ymax - t)) binds less; measured (docs/benchmarks.md, issue 37), 0.4 needs fewer reviews than 0.5
# where the scores separate well (AUROC 0.95) and 0.65-0.8 needs more there
NEYMAN_MIX = 0.4
TAIL_MIN = 0.002  # the top stratum's share of the items (strata by default: geometric tails down to it)
GRID_STEP = 0.005  # the bound's grid: every integer up to GRID_EXACT, then steps of 0.5%
GRID_EXACT = 200


def tail_quantiles(n_strata: int, n_items: int, *, smallest: float = TAIL_MIN, min_items: int = 10) -> FloatArray:
    """Where the strata start, as quantiles of the score: the share of items above each start
    falls geometrically from 1 to ``smallest`` (or to ``min_items`` items on small pools), so
    the strata are fine where the ID images are (the most ID-like scores) and coarse below."""
    if not 1 <= n_strata <= 100:
        raise CertifyError(f"strata must be between 1 and 100, not {n_strata}")
    last = min(0.5, max(smallest, min_items / max(n_items, 1)))
    if n_strata == 1:
        return np.zeros(1)
    tails = np.exp(np.linspace(0.0, np.log(last), n_strata))
    return np.asarray(1.0 - tails, dtype=np.float64)


def stratify_quantiles(scores: Sequence[float] | FloatArray, quantiles: Sequence[float] | FloatArray, *,
                       full_top: float = 0.0) -> Stratification:
    """Strata starting at the given score quantiles (0 first; ties broken by position), empty ones
    dropped; ``full_top`` as in ``stratify``."""
    s = np.asarray(scores, dtype=np.float64)
    if s.ndim != 1 or len(s) == 0:
        raise CertifyError("no scores to stratify: the plan needs at least one unreviewed image with a score")
    if not np.all(np.isfinite(s)):
        raise CertifyError("some scores are not finite: re-run the image pipeline for the source")
    if not 0.0 <= full_top <= 0.5:
        raise CertifyError(f"the share reviewed in full must be between 0 and 0.5, not {full_top}")
    q = np.asarray(quantiles, dtype=np.float64)
    if q.ndim != 1 or len(q) == 0 or q[0] != 0 or np.any(np.diff(q) <= 0) or q[-1] >= 1:
        raise CertifyError("stratum quantiles must start at 0 and rise below 1")
    order = np.argsort(s, kind="stable")
    n = len(s)
    n_full = int(round(full_top * n))
    n_sampled = n - n_full
    starts = sorted({int(round(x * n_sampled)) for x in q} - {n_sampled}) if n_sampled else []
    bounds = starts + [n_sampled]
    labels = np.empty(n, dtype=np.int64)
    for j in range(len(starts)):
        labels[order[bounds[j]:bounds[j + 1]]] = j
    full = [False] * len(starts)
    if n_full:
        labels[order[n_sampled:]] = len(starts)
        full.append(True)
        starts.append(n_sampled)
    edges = np.array([s[order[i]] for i in starts], dtype=np.float64)
    return Stratification(labels=labels, edges=edges, full=tuple(full))


def draw_probabilities(base: FloatArray, remaining: FloatArray) -> FloatArray:
    """pi: the base weights over the strata that still have undrawn items, normalised (rows)."""
    w = np.where(remaining > 0, base, 0.0)
    tot = w.sum(axis=-1, keepdims=True)
    return np.asarray(np.divide(w, tot, out=np.zeros_like(w), where=tot > 0), dtype=np.float64)


def draw_strata(*, sizes: Counts, drawn: Counts, base: Sequence[float] | FloatArray, n: int, seed: int,
                stream: int, sampler: int = SAMPLER) -> IntArray:
    """The strata of the next ``n`` draws (fewer if the strata run out): draw j picks stratum h
    with probability pi_h (``draw_probabilities`` of ``base`` given what was drawn before it),
    one uniform per draw from the plan's stream for ``stream`` (the stage), so the sequence
    replays. ``sampler`` 1 replays plans drawn before issue 50 (``strata_for_uniforms``)."""
    _check_sampler(sampler)
    N = np.asarray(sizes, dtype=np.int64)
    taken = np.asarray(drawn, dtype=np.int64).copy()
    w = np.asarray(base, dtype=np.float64)
    if np.any(w[N - taken > 0] <= 0):
        raise CertifyError("every stratum with undrawn images needs a positive draw weight")
    n = int(min(n, int((N - taken).sum())))
    rng = np.random.default_rng([int(seed), int(stream), 7919]) if sampler == 1 else plan_stream(seed, STRATA_KEY, stream)
    u = rng.random(n)
    return strata_for_uniforms(sizes=N, drawn=taken, base=w, u=u, sampler=sampler)


def strata_for_uniforms(*, sizes: Counts, drawn: Counts, base: Sequence[float] | FloatArray, u: FloatArray,
                        sampler: int = SAMPLER) -> IntArray:
    """The strata of draws j = 0, 1, ... from their uniforms u_j in [0, 1): draw j picks the
    stratum whose slice of [0, 1) holds u_j, the slices being pi (``draw_probabilities``) given
    the draws before j, so P(stratum h | past) = pi_h, as the bound's Y = A + x M_h / pi_h needs.

    Sampler 2: pi is recomputed right after a draw that takes a stratum's last item (between
    such draws the strata left and so pi do not change, so the draws in between go in one
    vectorised batch). Sampler 1 (before issue 50) kept the old pi until a draw overflowed an
    empty stratum and then mapped that draw's same uniform, already known to lie in the empty
    stratum's slice, with the new pi: on sizes [50, 50, 2] and base [0.2, 0.2, 0.6] the draw
    after the small stratum emptied picked strata 0 / 1 with probability 0.3 / 0.7, not the
    0.5 / 0.5 the bound assumed. Kept only to replay plans stored before the fix."""
    _check_sampler(sampler)
    N = np.asarray(sizes, dtype=np.int64)
    taken = np.asarray(drawn, dtype=np.int64).copy()
    w = np.asarray(base, dtype=np.float64)
    uu = np.asarray(u, dtype=np.float64)
    n = len(uu)
    if n > int((N - taken).sum()):
        raise CertifyError("more draws asked for than undrawn images left")
    out = np.empty(n, dtype=np.int64)
    pos = 0
    if sampler == 1:
        while pos < n:
            p = draw_probabilities(w, (N - taken).astype(np.float64))
            cum = np.cumsum(p)
            cum[-1] = np.inf
            lab = np.searchsorted(cum, uu[pos:], side="right")
            lab = np.minimum(lab, len(N) - 1)
            onehot = np.zeros((n - pos, len(N)), dtype=np.int64)
            onehot[np.arange(n - pos), lab] = 1
            over = (np.cumsum(onehot, axis=0) + taken > N).any(axis=1)
            stop = int(np.argmax(over)) if over.any() else n - pos
            out[pos:pos + stop] = lab[:stop]
            taken += onehot[:stop].sum(axis=0)
            pos += stop
        return out
    while pos < n:
        left = N - taken
        live = np.flatnonzero(left > 0)
        p = draw_probabilities(w, left.astype(np.float64))[live]
        cum = np.cumsum(p)
        cum[-1] = np.inf  # rounding: u below 1 always lands in a stratum with items left
        lab = live[np.searchsorted(cum, uu[pos:], side="right")]
        # the batch ends with the first draw that takes some stratum's last item
        stop = n - pos
        for h in live:
            at = np.flatnonzero(lab == h)
            if len(at) >= left[h]:
                stop = min(stop, int(at[left[h] - 1]) + 1)
        out[pos:pos + stop] = lab[:stop]
        taken += np.bincount(lab[:stop], minlength=len(N))
        pos += stop
    return out


def bet_allocation(sizes: Counts, reviewed: Counts, found: Counts, *, mix: float | None = None,
                   rates: FloatArray | None = None) -> FloatArray:
    """Base weights after the pilot: ``mix`` of pi_h ~ N_h sqrt(r_h) (the weights that minimise
    the variance of Y, sum_h N_h^2 r_h / pi_h) and the rest in proportion to N_h, which keeps
    every z_h = M_h / pi_h within a bounded multiple of the pool and so the bets large; r_h is the
    bet's model rate (``model_rates``)."""
    N = np.asarray(sizes, dtype=np.float64)
    r = rates if rates is not None else model_rates(np.asarray(reviewed, dtype=np.float64)[None, :],
                                                    np.asarray(found, dtype=np.float64)[None, :])[0]
    ney = N * np.sqrt(r)
    ney = ney / ney.sum() if ney.sum() > 0 else N / N.sum()
    mix = NEYMAN_MIX if mix is None else mix
    return np.asarray(mix * ney + (1 - mix) * N / N.sum(), dtype=np.float64)


def model_rates(reviewed: FloatArray, found: FloatArray) -> FloatArray:
    """The bet's model of each stratum's ID rate from the draws so far (rows: moments): the
    stratum's count shrunk to the pooled rate, which is Jeffreys-smoothed."""
    n = reviewed.sum(axis=-1, keepdims=True)
    s = found.sum(axis=-1, keepdims=True)
    pooled = (s + 0.5) / (n + 1.0)
    return np.asarray((found + BET_SHRINK * pooled) / (reviewed + BET_SHRINK), dtype=np.float64)


def bound_grid(n_max: int) -> IntArray:
    """The totals the bound tests (fixed before any draw): every integer up to GRID_EXACT, then
    steps of GRID_STEP, up to ``n_max``."""
    lo = np.arange(0, min(n_max, GRID_EXACT) + 1, dtype=np.int64)
    if n_max <= GRID_EXACT:
        return lo
    k = int(np.ceil(np.log(n_max / GRID_EXACT) / np.log1p(GRID_STEP)))
    hi = np.ceil(GRID_EXACT * np.exp(np.arange(1, k + 1) * np.log1p(GRID_STEP))).astype(np.int64)
    return np.unique(np.concatenate([lo, np.minimum(hi, n_max)]))


@dataclass
class DrawPath:
    """Per draw i (rows): what the test needs, all fixed before the draw's outcome except ``y``."""

    found_before: FloatArray  # A_{i-1}
    y: FloatArray  # Y_i
    y_max: FloatArray  # A_{i-1} + max_h M_h(i) / pi_h
    mu: FloatArray  # the bet's model of E[Y_i] = A_{i-1} + m_i
    m2: FloatArray  # and of E[(Y_i - A_{i-1})^2]


def draw_path(sizes: Counts, labels: IntArray, xs: IntArray, bases: FloatArray) -> DrawPath:
    """Y_i and the bet's inputs for draws (``labels``, ``xs``) under base weights ``bases`` (one
    row per draw, or one row for all)."""
    N = np.asarray(sizes, dtype=np.float64)
    lab = np.asarray(labels, dtype=np.int64)
    x = np.asarray(xs, dtype=np.float64)
    n, H = len(lab), len(N)
    onehot = np.zeros((n, H))
    onehot[np.arange(n), lab] = 1.0
    t_before = np.cumsum(onehot, axis=0) - onehot
    s_before = np.cumsum(onehot * x[:, None], axis=0) - onehot * x[:, None]
    M = N[None, :] - t_before
    if np.any(M[np.arange(n), lab] <= 0):
        raise CertifyError("a draw from a stratum with no undrawn images left: the draws do not match the strata")
    base = np.broadcast_to(np.asarray(bases, dtype=np.float64), (n, H))
    pi = draw_probabilities(base, M)
    A = s_before.sum(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        z = np.where(M > 0, M / pi, 0.0)
    r = model_rates(t_before, s_before)
    y = A + x * z[np.arange(n), lab]
    return DrawPath(found_before=A, y=y, y_max=A + z.max(axis=1), mu=A + (M * r).sum(axis=1), m2=(M * r * z).sum(axis=1))


def log_wealth(path: DrawPath, grid: Sequence[float] | NDArray[np.number], *, start: FloatArray | None = None,
               cap: float | None = None) -> FloatArray:
    """log K_i(t) for every draw (rows) and grid point (columns). The bet is Kelly's for the
    bet's model of Y_i reduced to two points with the same first two moments: Y = A_{i-1} with
    probability 1 - q, A_{i-1} + zbar with probability q (zbar = m2 / m, q = m^2 / m2; exact for
    one stratum). With u = t - A_{i-1} that is b = (1 - q) / (zbar - u) - q / u, kept >= 0 and
    <= cap / (Ymax - t), so every factor stays >= 1 - cap. ``start`` adds a running log K from
    earlier draws (chunked computation)."""
    t = np.asarray(grid, dtype=np.float64)[None, :]
    b = bets(path, grid, cap=cap)
    lk = np.cumsum(np.log1p(b * (t - path.y[:, None])), axis=0)
    return lk if start is None else lk + start[None, :]


def bets(path: DrawPath, grid: Sequence[float] | NDArray[np.number], *, cap: float | None = None) -> FloatArray:
    """The bet b_i(t) of ``log_wealth`` (rows: draws, columns: grid points)."""
    c = BET_CAP if cap is None else cap
    t = np.asarray(grid, dtype=np.float64)[None, :]
    A = path.found_before[:, None]
    m = (path.mu - path.found_before)[:, None]
    m2 = path.m2[:, None]
    u = t - A
    with np.errstate(divide="ignore", invalid="ignore"):
        zbar = np.where(m > 0, m2 / m, np.inf)
        q = np.where(m2 > 0, m * m / m2, 0.0)
        b = np.where((u > 0) & (zbar > u), (1 - q) / (zbar - u) - q / u, np.inf)
        b = np.where(u > 0, KELLY * np.maximum(b, 0.0), 0.0)
        room = path.y_max[:, None] - t
        b = np.minimum(b, np.where(room > 0, c / room, c / np.maximum(u, 1.0)))
    return np.asarray(b, dtype=np.float64)


def grid_upper(grid: IntArray, rejected: NDArray[np.bool_], cap: int) -> int:
    """Largest total not excluded: grid point g covers the totals g .. (next grid point - 1); the
    totals of a rejected grid point are excluded."""
    keep = np.flatnonzero(~rejected)
    if len(keep) == 0:
        return -1  # every total excluded (probability <= alpha under any truth)
    k = int(keep[-1])
    return int(min(cap, grid[k + 1] - 1)) if k + 1 < len(grid) else int(cap)


@dataclass
class BetBound:
    """The betting bound on the total after the draws, and along the way."""

    total: int  # upper bound on the ID images in the population (found ones included)
    found: int
    draws: int
    size: int
    history: list[tuple[int, int]]  # (draws, bound on the total)
    log_wealth: FloatArray  # running max of log K(t) over the draws, per grid point
    grid: IntArray
    log_wealth_now: FloatArray  # log K(t) after the last draw, per grid point
    alpha: float = 0.05
    path: DrawPath | None = None

    @property
    def remainder(self) -> int:
        return max(0, self.total - self.found)


def betting_upper(sizes: Counts, labels: IntArray, xs: IntArray, bases: FloatArray, alpha: float, *,
                  history_at: Sequence[int] = (), chunk: int = 4096, block: int = 64) -> BetBound:
    """Anytime-valid upper bound on the total ID images over the strata after the draws
    (``labels``, ``xs``) made with base weights ``bases`` (rows per draw, or one row): the module's
    notes above and docs/review.md. ``history_at``: draw counts at which to report the bound too.

    Only the grid points that can decide the bound are computed: from the top down, in blocks,
    each dropped at its first rejection (a rejection stays one), until a block holds a point
    never rejected; the bound at any earlier moment lies above that point, so the points below
    it matter to no bound reported (their log-wealth is NaN in the result)."""
    if not 0 < alpha < 1:
        raise CertifyError(f"alpha must be between 0 and 1, not {alpha}")
    N = np.asarray(sizes, dtype=np.int64)
    lab = np.asarray(labels, dtype=np.int64)
    x = np.asarray(xs, dtype=np.int64)
    if len(lab) != len(x) or (len(lab) and (lab.min() < 0 or lab.max() >= len(N))):
        raise CertifyError("draws must name strata of the plan and come with one outcome each")
    size = int(N.sum())
    n = len(lab)
    grid = bound_grid(size)
    G = len(grid)
    level = float(np.log(1 / alpha))
    path = draw_path(N, lab, x, np.asarray(bases, dtype=np.float64))
    first_rej = np.full(G, n + 1, dtype=np.int64)  # draws after which grid point g was first rejected (n + 1: never)
    best = np.full(G, np.nan)  # running max of log K (at the first rejection for rejected points)
    now = np.full(G, np.nan)
    if n == 0:
        best[:] = 0.0
        now[:] = 0.0
    hi = G
    while n and hi > 0:
        lo = max(0, hi - block)
        active = np.arange(lo, hi)
        c_now = np.zeros(len(active))
        c_best = np.zeros(len(active))
        for start in range(0, n, chunk):
            if len(active) == 0:
                break
            end = min(n, start + chunk)
            sub = DrawPath(*(getattr(path, f)[start:end] for f in ("found_before", "y", "y_max", "mu", "m2")))
            lk = log_wealth(sub, grid[active], start=c_now)
            run = np.maximum.accumulate(np.vstack([c_best[None, :], lk]), axis=0)[1:]
            rej = run >= level
            hit = rej.any(axis=0)
            first_rej[active[hit]] = start + np.argmax(rej[:, hit], axis=0) + 1
            c_now, c_best = lk[-1], run[-1]
            best[active], now[active] = c_best, c_now
            active, c_now, c_best = active[~hit], c_now[~hit], c_best[~hit]
        if (first_rej[lo:hi] > n).any():
            break
        hi = lo
    found = np.concatenate([[0], np.cumsum(x)])

    def upper_after(k: int) -> int:
        open_ = np.flatnonzero(first_rej > k)
        return max(grid_upper(grid, first_rej <= k, size) if len(open_) else -1, int(found[k]))

    history = [(int(h), upper_after(int(h))) for h in sorted({int(h) for h in history_at if 0 <= int(h) <= n})]
    return BetBound(total=upper_after(n), found=int(x.sum()), draws=n, size=size, history=history, log_wealth=best, grid=grid,
                    log_wealth_now=now, alpha=alpha, path=path)


DEFAULT_STRATA = 13
# the pilot: draws per stratum, in proportion to size. 5 is enough for the shared logistic curve
# (``fitted_rates``) to rank the strata, and leaves more of a small sample to the adapted stages
PILOT_PER_STRATUM = 5
STAGE_GROWTH = 1.5  # each stage after the pilot is half as long as all the draws before it


def stage_ends(n_strata: int, size: int, *, pilot: int | None = None) -> IntArray:
    """Where the plan's stages end (draw counts): the pilot of ``pilot`` per stratum, then stages
    that add half the draws made (``STAGE_GROWTH``), up to the whole pool. The draws of a stage
    get their probabilities from draws before the stage."""
    pilot = PILOT_PER_STRATUM if pilot is None else pilot
    ends = [min(size, max(1, pilot * n_strata))]
    while ends[-1] < size:
        ends.append(min(size, int(np.ceil(ends[-1] * STAGE_GROWTH))))
    return np.asarray(ends, dtype=np.int64)


def stage_weights(sizes: Counts, reviewed: Counts | None, found: Counts | None, covariate: FloatArray | None, *,
                  stage: int, mix: float | None = None) -> FloatArray:
    """Base weights of a stage: in proportion to size for the pilot (stage 0), else
    ``bet_allocation`` on the rates the strata's shared logistic curve fits to the draws so far
    (``fitted_rates``: a pilot that found little still ranks the strata by score)."""
    N = np.asarray(sizes, dtype=np.float64)
    if stage == 0 or len(N) == 1 or reviewed is None or found is None:
        return N / N.sum()
    x = default_covariate(len(N)) if covariate is None else covariate
    r = fitted_rates(reviewed, found, x)
    return bet_allocation(np.asarray(sizes, dtype=np.int64), reviewed, found, mix=mix, rates=r)


def stage_bases(stages: Sequence[dict], n: int, n_strata: int) -> FloatArray:
    """Per draw (rows), the base weights of the stage it belongs to (``stages``: the plan's
    [{start, end, weights}])."""
    out = np.zeros((n, n_strata))
    for st in stages:
        lo, hi = int(st["start"]), min(n, int(st["end"]))
        if hi > lo:
            out[lo:hi] = np.asarray(st["weights"], dtype=np.float64)[None, :]
    if n and not np.all(out.sum(axis=1) > 0):
        raise CertifyError("some draws belong to no stage of the plan: the plan's stages do not cover its serving order")
    return out


def betting_expected(sizes: Counts, labels: IntArray, xs: IntArray, base: Sequence[float] | FloatArray, bound: BetBound,
                     goal_total: float) -> int | None:
    """Draws still expected before the bound reaches ``goal_total``, if the strata's rates are the
    bet's model rates and the draws go on with base weights ``base``: the log-wealth the test at
    the smallest grid point that must still be rejected lacks, over its expected growth per draw.
    None when the model expects the total above the goal or the pool to run out first."""
    N = np.asarray(sizes, dtype=np.float64)
    lab = np.asarray(labels, dtype=np.int64)
    x = np.asarray(xs, dtype=np.float64)
    H = len(N)
    level = float(np.log(1 / bound.alpha))
    nxt = np.append(bound.grid[1:], bound.size + 1)
    need = nxt - 1 > goal_total
    todo = need & np.isnan(bound.log_wealth)
    if todo.any() and bound.path is not None:  # grid points the bound did not need: compute them now
        lk = log_wealth(bound.path, bound.grid[todo])
        bound.log_wealth[todo] = np.maximum(0.0, lk.max(axis=0)) if len(lk) else 0.0
        bound.log_wealth_now[todo] = lk[-1] if len(lk) else 0.0
    open_ = need & ~(bound.log_wealth >= level)
    if not open_.any():
        return 0
    k = int(np.argmax(open_))
    t_h = np.bincount(lab, minlength=H).astype(np.float64)
    s_h = np.bincount(lab, weights=x, minlength=H).astype(np.float64)
    M = N - t_h
    room = int(M.sum())
    if room <= 0:
        return None
    r = model_rates(t_h[None, :], s_h[None, :])[0]
    pi = draw_probabilities(np.asarray(base, dtype=np.float64), M)
    z = np.where(M > 0, M / np.where(pi > 0, pi, 1.0), 0.0)
    A = float(s_h.sum())
    one = DrawPath(found_before=np.array([A]), y=np.array([A]), y_max=np.array([A + z.max()]),
                   mu=np.array([A + float((M * r).sum())]), m2=np.array([float((M * r * z).sum())]))
    g = float(bound.grid[k])
    b = float(bets(one, [g])[0, 0])
    q = pi * r
    u = g - A
    growth = float((1 - q.sum()) * np.log1p(b * u) + np.sum(q * np.log1p(np.maximum(b * (u - z), -1 + 1e-12))))
    if growth <= 0:
        return None
    more = int(np.ceil((level - float(bound.log_wealth_now[k])) / growth))
    return more if more <= room else None
