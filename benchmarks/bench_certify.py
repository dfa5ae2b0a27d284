"""Certifying a pool from a sample (issue 37): validity and efficiency of the betting bound in
pipelines/certify.py (the plans' default method) on simulated pools, against simple random
sampling monitored the same way, and its cost at 1M images.

    .venv/bin/python benchmarks/bench_certify.py [--pools 1000] [--size 100000] [--workers 2] [--minutes M]

Each pool: ``size`` images, a share of them ID (0.5%, 2%, 5%); scores normal with unit
variance, the ID images shifted so the score's AUROC between ID and OOD images is 0.8, 0.9 or
0.95. Stratified ("strat."): the plan's default strata (``pipelines.certify.tail_quantiles``), a
pilot of ``PILOT_PER_STRATUM`` draws per stratum with stratum probabilities in proportion to size
(a simple random sample of the pool), then stages (``stage_ends``: each adds ``STAGE_GROWTH`` - 1
times the draws made), with probabilities from ``bet_allocation`` on the rates fitted to every
draw before the stage. SRS:
the same martingale with one stratum (pi = 1). The curator looks after every review.

Per pool, the martingale K_i(t) is computed for the grid points from g(T) (the largest grid
point <= the true total T) to the first one >= 1.6T:

- Validity: the bound held at every review up to the stop iff K_i(g(T)) never reached 1/alpha
  (the proof in docs/review.md needs nothing else). For the first ``--verify`` pools of every
  setting the bound is also recomputed at the stop on the whole grid by
  ``pipelines.certify.betting_upper`` and must be >= T and give the same stop.
- Efficiency: the stop is the first review i with bound_i - A_i <= 1.5 (T - A_i) (the bound on
  the unreviewed remainder's ID count within 1.5x of the truth); grid points above 1.6T are
  taken as rejected once 1.6T is (checked on the verified pools). Median reviews to stop, strat. vs SRS,
  beside the ceiling (classic Neyman allocation over ten equal-count strata with the true rates,
  normal approximation: the issue's 0.72/0.48/0.32), the existing prior-posterior confidence
  sequence on SRS (Waudby-Smith & Ramdas 2020, on ``--ref`` pools) and a fixed-size
  Clopper-Pearson SRS plan.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from multiprocessing import Pool
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")  # one thread per worker process
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402
from scipy import stats  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pipelines import certify as C  # noqa: E402

ALPHA = 0.05
SHARES = (0.005, 0.02, 0.05)
AUROCS = (0.8, 0.9, 0.95)
RATIO = 1.5
CHUNK = 2048
BAND = 1.6  # grid points from g(T) to the first >= BAND x T are computed; those above are taken as rejected once it is
LIMIT = 0.6  # give up at 60% of the pool


def make_pool(rng: np.random.Generator, size: int, share: float, auroc: float) -> tuple[np.ndarray, np.ndarray]:
    n_id = int(round(share * size))
    d = np.sqrt(2) * stats.norm.ppf(auroc)
    y = np.zeros(size, dtype=np.int64)
    y[:n_id] = 1
    scores = rng.normal(0.0, 1.0, size) + d * y
    return scores, y


class Sampler:
    """The plan's draws on a simulated pool, stage by stage (as the service makes them)."""

    def __init__(self, scores: np.ndarray, y: np.ndarray, seed: int, stratified: bool) -> None:
        st = C.stratify_quantiles(scores, C.tail_quantiles(C.DEFAULT_STRATA, len(scores))) if stratified else C.stratify(scores, 1)
        self.N = st.sizes
        H = len(self.N)
        self.cov = C.stratum_covariate(scores, st.labels, H)
        seqs = [y[np.flatnonzero(st.labels == h)][C.draw_order(int(self.N[h]), seed=seed, stratum=h)] for h in range(H)]
        self.offset = np.concatenate([[0], np.cumsum(self.N)[:-1]])
        self.seq = np.concatenate(seqs)
        self.seed = seed
        self.ends = C.stage_ends(H, int(self.N.sum()))
        self.labels = np.zeros(0, dtype=np.int64)
        self.xs = np.zeros(0, dtype=np.int64)
        self.bases = np.zeros((0, H))
        self.path: C.DrawPath | None = None

    def extend(self, upto: int) -> None:
        H = len(self.N)
        while len(self.labels) < upto:
            k = int(np.searchsorted(self.ends, len(self.labels), side="right"))
            if k >= len(self.ends):
                return
            t = np.bincount(self.labels, minlength=H)
            s = np.bincount(self.labels, weights=self.xs, minlength=H)
            base = C.stage_weights(self.N, t, s, self.cov, stage=k)
            lab = C.draw_strata(sizes=self.N, drawn=t, base=base, n=int(self.ends[k]) - len(self.labels), seed=self.seed, stream=k)
            onehot = np.zeros((len(lab), H), dtype=np.int64)
            onehot[np.arange(len(lab)), lab] = 1
            rank = (np.cumsum(onehot, axis=0) - 1)[np.arange(len(lab)), lab] + t[lab]
            self.labels = np.concatenate([self.labels, lab])
            self.xs = np.concatenate([self.xs, self.seq[self.offset[lab] + rank]])
            self.bases = np.vstack([self.bases, np.tile(base, (len(lab), 1))])


def run(sampler: Sampler, T: int, limit: int) -> dict:
    """Stop and coverage from the band of grid points [g(T), first >= BAND x T]."""
    grid = C.bound_grid(int(sampler.N.sum()))
    lo = int(np.searchsorted(grid, T, side="right")) - 1
    hi = min(len(grid) - 1, int(np.searchsorted(grid, BAND * T, side="left")))
    band = grid[lo:hi + 1]
    nxt = np.append(grid[lo + 1:hi + 2], grid[-1] + 1)[: len(band)]  # next grid point of each band point
    level = np.log(1 / ALPHA)
    cur = np.zeros(len(band))
    best = np.zeros(len(band))
    missed = False
    done = 0
    while done < limit:
        sampler.extend(min(limit, done + CHUNK))
        n = min(limit, len(sampler.labels))
        if n <= done:
            break
        if sampler.path is None or len(sampler.path.y) < n:
            sampler.path = C.draw_path(sampler.N, sampler.labels, sampler.xs, sampler.bases)
        sub = C.DrawPath(*(getattr(sampler.path, f)[done:n] for f in ("found_before", "y", "y_max", "mu", "m2")))
        lk = C.log_wealth(sub, band, start=cur)
        run_max = np.maximum.accumulate(np.vstack([best[None, :], lk]), axis=0)[1:]
        rej = run_max >= level
        A = np.cumsum(sampler.xs[:n])[done:n]
        # the bound from the band: the next grid point after the largest one not rejected, minus 1
        last_open = len(band) - 1 - np.argmax(~rej[:, ::-1], axis=1)
        all_rej = rej.all(axis=1)
        ub = np.where(all_rej, band[0] - 1, nxt[last_open] - 1)
        ub = np.maximum(ub, A)
        stop_rows = np.flatnonzero(ub - A <= RATIO * (T - A))
        if stop_rows.size:
            i = int(stop_rows[0])
            missed = missed or bool(rej[: i + 1, 0].any())
            return {"stop": done + i + 1, "held": not missed}
        missed = missed or bool(rej[:, 0].any())
        cur, best = lk[-1], run_max[-1]
        done = n
    return {"stop": None, "held": not missed}


def verify(sampler: Sampler, stop: int | None, T: int) -> bool:
    """The whole-grid bound at the stop (and one review before it) agrees with the band."""
    n = stop or len(sampler.labels)
    b = C.betting_upper(sampler.N, sampler.labels[:n], sampler.xs[:n], sampler.bases[:n], ALPHA, history_at=[n - 1])
    A = int(sampler.xs[:n].sum())
    ok = b.total >= T
    if stop is not None:
        ok = ok and b.total - A <= RATIO * (T - A)
        ub_prev = b.history[0][1]
        a_prev = A - int(sampler.xs[n - 1])
        ok = ok and (n == 1 or ub_prev - a_prev > RATIO * (T - a_prev))
    return bool(ok)


def ppr_srs_stop(y: np.ndarray, seed: int, limit: int) -> int | None:
    """The existing prior-posterior confidence sequence on the same kind of SRS (reference)."""
    size = len(y)
    seq = y[C.draw_order(size, seed=seed, stratum=77)][:limit]
    cum = np.concatenate([[0], np.cumsum(seq)])
    T = int(y.sum())

    def ok(n: int) -> bool:
        ub = C.wor_cs_upper(size, n, int(cum[n]), ALPHA)
        return ub - int(cum[n]) <= RATIO * (T - int(cum[n]))

    grid = sorted({int(x) for x in np.geomspace(20, limit, 40)})
    prev = 0
    for n in grid:
        if ok(n):
            lo, hi = prev, n
            while hi - lo > max(1, lo // 200):
                mid = (lo + hi) // 2
                if ok(mid):
                    hi = mid
                else:
                    lo = mid
            return hi
        prev = n
    return None


def neyman_ratio(scores: np.ndarray, y: np.ndarray) -> float:
    """Classic Neyman allocation over ten equal-count strata with the true rates, against SRS
    (variance of the estimate, normal approximation: the issue's ceiling)."""
    st = C.stratify(scores, 10)
    W = st.sizes / st.sizes.sum()
    p_h = np.bincount(st.labels, weights=y, minlength=10) / st.sizes
    p = y.mean()
    return float(np.sum(W * np.sqrt(p_h * (1 - p_h))) ** 2 / (p * (1 - p)))


def cp_fixed(size: int, share: float) -> int:
    """Smallest SRS size whose Clopper-Pearson bound at the expected count is <= 1.5x the share."""
    lo, hi = 1, size
    while hi - lo > 1:
        mid = (lo + hi) // 2
        k = int(round(share * mid))
        if C.clopper_pearson_upper(mid, k, ALPHA) <= RATIO * share:
            hi = mid
        else:
            lo = mid
    return hi


def one(args: tuple[int, int, float, float, bool, bool]) -> dict:
    pool, size, share, auroc, check, ref = args
    seed = 1_000_003 * pool + int(share * 1e4) * 101 + int(auroc * 100)
    rng = np.random.default_rng(seed)
    scores, y = make_pool(rng, size, share, auroc)
    T = int(y.sum())
    limit = int(LIMIT * size)
    out = {"share": share, "auroc": auroc, "ceiling": neyman_ratio(scores, y)}
    for name, stratified in (("strat", True), ("srs", False)):
        s = Sampler(scores, y, seed, stratified)
        r = run(s, T, limit)
        out[name], out[f"{name}_held"] = r["stop"], r["held"]
        if check:
            out[f"{name}_verified"] = verify(s, r["stop"], T)
    if ref:
        out["ppr"] = ppr_srs_stop(y, seed, limit)
    return out


def timing_1m() -> tuple[float, float]:
    """Planning a 1M-image source (strata, seeded orders, the pilot's draws) and the bound after
    20,000 draws."""
    rng = np.random.default_rng(7)
    scores, y = make_pool(rng, 1_000_000, 0.02, 0.9)
    t0 = time.perf_counter()
    st = C.stratify_quantiles(scores, C.tail_quantiles(C.DEFAULT_STRATA, len(scores)))
    N = st.sizes
    orders = [C.draw_order(int(n), seed=7, stratum=h) for h, n in enumerate(N)]
    C.draw_strata(sizes=N, drawn=np.zeros(len(N)), base=C.stage_weights(N, None, None, None, stage=0),
                  n=int(C.stage_ends(len(N), int(N.sum()))[0]), seed=7, stream=0)
    plan_s = time.perf_counter() - t0
    s = Sampler(scores, y, 7, True)
    del orders
    s.extend(20_000)
    t0 = time.perf_counter()
    C.betting_upper(s.N, s.labels[:20_000], s.xs[:20_000], s.bases[:20_000], ALPHA)
    bound_s = time.perf_counter() - t0
    return plan_s, bound_s


def fmt(x: float) -> str:
    return "never" if x >= 1e9 else f"{x:,.0f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pools", type=int, default=1000)
    ap.add_argument("--size", type=int, default=100_000)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--verify", type=int, default=5, help="pools per setting whose bound is recomputed on the whole grid")
    ap.add_argument("--ref", type=int, default=50, help="pools per setting for the prior-posterior SRS reference")
    ap.add_argument("--settings", default="", help="e.g. 0.02:0.9,0.005:0.95 (default: all nine)")
    ap.add_argument("--no-timing", action="store_true")
    ap.add_argument("--minutes", type=float, default=0, help="stop after this long and report the pools done (0: no limit)")
    a = ap.parse_args()
    settings = [(s, r) for s in SHARES for r in AUROCS]
    if a.settings:
        settings = [(float(x.split(":")[0]), float(x.split(":")[1])) for x in a.settings.split(",")]
    t0 = time.perf_counter()
    # pool by pool across the settings, so that a time limit leaves every setting the same pools
    jobs = [(p, a.size, s, r, p < a.verify, p < a.ref) for p in range(a.pools) for s, r in settings]
    rows = []
    with Pool(a.workers) as pool:
        for row in pool.imap(one, jobs, chunksize=1):
            rows.append(row)
            if a.minutes and time.perf_counter() - t0 > 60 * a.minutes:
                pool.terminate()
                break
    done = len(rows) // len(settings)
    rows = rows[: done * len(settings)]
    note = f" (time limit of {a.minutes:g} min: {done} of the {a.pools} pools asked for)" if done < a.pools else ""
    print(f"{done} pools of {a.size:,} images per setting{note}, alpha {ALPHA}, stop at bound <= {RATIO}x the remainder's "
          f"true contamination; {time.perf_counter() - t0:.0f} s\n")
    print("| ID share | AUROC | coverage strat. | coverage SRS | reviews strat. (median) | reviews SRS (median) | "
          "SRS / strat. | Neyman ceiling | SRS, prior-posterior CS (median) | fixed-size CP (SRS) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    big = 10 ** 9
    verified = [x[k] for x in rows for k in ("strat_verified", "srs_verified") if k in x]
    headline = []
    for s, r in settings:
        sel = [x for x in rows if x["share"] == s and x["auroc"] == r]
        cov_a = np.mean([x["strat_held"] for x in sel])
        cov_b = np.mean([x["srs_held"] for x in sel])
        na = float(np.median([x["strat"] if x["strat"] is not None else big for x in sel]))
        nb = float(np.median([x["srs"] if x["srs"] is not None else big for x in sel]))
        refs = [x["ppr"] if x["ppr"] is not None else big for x in sel if "ppr" in x]
        nr = float(np.median(refs)) if refs else float("nan")
        ceil = float(np.mean([x["ceiling"] for x in sel]))
        gain = nb / na if na < big else float("nan")
        print(f"| {s:.1%} | {r} | {cov_a:.3f} | {cov_b:.3f} | {fmt(na)} | {fmt(nb)} | {gain:.2f}x | {1 / ceil:.2f}x ({ceil:.2f}) | "
              f"{fmt(nr) if refs else '-'} ({len(refs)} pools) | {cp_fixed(a.size, s):,} |")
        headline.append((s, r, na))
    print(f"\nwhole-grid recomputation at the stop agreed with the band in {sum(verified)} of {len(verified)} runs")
    worst = max(headline, key=lambda h: h[2])
    print(f"headline: certifying a {a.size:,}-image pool to within {RATIO}x takes a median of {fmt(worst[2])} reviews in the hardest "
          f"setting ({worst[0]:.1%} ID, AUROC {worst[1]}), {100 * worst[2] / a.size:.1f}% of a full review")
    if not a.no_timing:
        plan_s, bound_s = timing_1m()
        print(f"\n1M-image source: plan (strata, seeded orders, pilot draws) {plan_s:.2f} s; bound after 20,000 draws {bound_s:.2f} s")


if __name__ == "__main__":
    main()
