"""Certifying a pool from a stratified sample (issue 37): validity and efficiency of the bound in
pipelines/certify.py on simulated pools, and its cost at 1M images.

    .venv/bin/python benchmarks/bench_certify.py [--pools 1000] [--size 100000] [--workers 2]

Each pool: ``size`` images, a share of them ID (0.5%, 2%, 5%); scores normal with unit variance,
ID images shifted so the score's AUROC between ID and OOD images is 0.8, 0.9 or 0.95. Ten
equal-count score strata; a pilot of 20 reviews per stratum, then reviews in Neyman proportions
from the pilot (each stratum at least 2% of the reviews), in the plan's interleaved order.
Simple random sampling (SRS) draws from the whole pool and is bounded by the same confidence
sequence with one stratum. The curator looks after every review.

- Validity: the share of pools whose bound held at every review up to the stop (checked at
  every review through log R_t(true split) < log(1/alpha), which implies it, and directly at
  every bound computed).
- Efficiency: reviews until the bound on the unreviewed remainder falls to <= 1.5x the
  remainder's true contamination (median over pools), stratified vs SRS, beside the ceiling
  (Neyman with the true stratum rates, normal approximation) and a fixed-size Clopper-Pearson
  plan for SRS.
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
H = 10
PILOT = 30
VILLE_POOLS = 5  # pools per setting checked at every review through log R_t (the rest at every bound computed)
FLOOR = 0.02
RATIO = 1.5


def make_pool(rng: np.random.Generator, size: int, share: float, auroc: float) -> tuple[np.ndarray, np.ndarray]:
    n_id = int(round(share * size))
    d = np.sqrt(2) * stats.norm.ppf(auroc)
    y = np.zeros(size, dtype=np.int64)
    y[:n_id] = 1
    scores = rng.normal(0.0, 1.0, size) + d * y
    return scores, y


def stratified_run(rng: np.random.Generator, scores: np.ndarray, y: np.ndarray, seed: int, ville: bool) -> dict:
    st = C.stratify(scores, H)
    sizes = st.sizes
    cov = C.stratum_covariate(scores, st.labels, H)
    members = [np.flatnonzero(st.labels == h) for h in range(H)]
    seqs = [y[m][C.draw_order(len(m), seed=seed, stratum=h)] for h, m in enumerate(members)]
    true_counts = np.array([int(s.sum()) for s in seqs], dtype=np.int64)
    # pilot, then Neyman proportions from it
    pilot = C.interleave([PILOT] * H)
    found = np.array([int(seqs[h][:PILOT].sum()) for h in range(H)])
    rates = C.fitted_rates([PILOT] * H, found, cov)
    w = sizes * np.sqrt(rates * (1 - rates))
    w = np.maximum(w / w.sum(), FLOOR)
    w = w / w.sum()
    rest = C.interleave(np.minimum(sizes - PILOT, np.ceil(w * 60 * sizes.sum() / 100).astype(np.int64)).tolist())
    labels = np.concatenate([pilot, rest])
    pos = np.zeros(H, dtype=np.int64)
    xs = np.empty(len(labels), dtype=np.int64)
    for i, h in enumerate(labels):
        xs[i] = seqs[h][pos[h]]
        pos[h] += 1
    ceiling = neyman_ratio(sizes, true_counts)
    return _stop_and_check(sizes, labels, xs, true_counts, cov, ville) | {"ceiling": ceiling}


def srs_run(rng: np.random.Generator, y: np.ndarray, seed: int, ville: bool) -> dict:
    order = C.draw_order(len(y), seed=seed, stratum=99)
    xs = y[order][: int(0.6 * len(y))]
    labels = np.zeros(len(xs), dtype=np.int64)
    return _stop_and_check(np.array([len(y)]), labels, xs, np.array([int(y.sum())]), np.zeros(1), ville)


def _bound(sizes, labels, xs, n, cov) -> tuple[int, int]:
    t = np.bincount(labels[:n], minlength=len(sizes))
    s = np.bincount(labels[:n], weights=xs[:n], minlength=len(sizes)).astype(np.int64)
    b = C.stratified_upper(sizes, t, s, ALPHA, covariate=cov)
    return b.total, int(s.sum())


def _stop_and_check(sizes, labels, xs, true_counts, cov, ville_check: bool) -> dict:
    total = int(true_counts.sum())
    held = True

    def certified(n: int) -> bool:
        nonlocal held
        ub, found = _bound(sizes, labels, xs, n, cov)
        held = held and ub >= total
        return ub - found <= RATIO * (total - found)

    grid = sorted({int(x) for x in np.geomspace(50, len(xs), 14)})
    prev, stop = 0, None
    for n in grid:
        if certified(n):
            stop = n
            break
        prev = n
    if stop is not None:
        lo, hi = prev, stop
        while hi - lo > max(1, lo // 200):  # to 0.5%
            mid = (lo + hi) // 2
            if certified(mid):
                hi = mid
            else:
                lo = mid
        stop = hi
    ville = True
    if ville_check:
        horizon = stop if stop is not None else len(xs)
        log_r = C.log_ratio_at(sizes, labels[:horizon], xs[:horizon], true_counts, covariate=cov)
        ville = bool(np.max(log_r) < np.log(1 / ALPHA))
    return {"stop": stop, "held": held and ville}


def neyman_ratio(sizes: np.ndarray, counts: np.ndarray) -> float:
    W = sizes / sizes.sum()
    p_h = counts / sizes
    p = counts.sum() / sizes.sum()
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


def one(args: tuple[int, int, float, float]) -> dict:
    pool, size, share, auroc = args
    seed = 1_000_003 * pool + int(share * 1e4) * 101 + int(auroc * 100)
    rng = np.random.default_rng(seed)
    scores, y = make_pool(rng, size, share, auroc)
    a = stratified_run(rng, scores, y, seed, pool < VILLE_POOLS)
    b = srs_run(rng, y, seed, pool < VILLE_POOLS)
    return {"share": share, "auroc": auroc, "strat": a["stop"], "strat_held": a["held"], "srs": b["stop"],
            "srs_held": b["held"], "ceiling": a["ceiling"]}


def timing_1m() -> tuple[float, float]:
    rng = np.random.default_rng(7)
    scores, y = make_pool(rng, 1_000_000, 0.02, 0.9)
    t0 = time.perf_counter()
    st = C.stratify(scores, H)
    sizes = st.sizes
    orders = [C.draw_order(int(n), seed=7, stratum=h) for h, n in enumerate(sizes)]
    rates = C.pilot_rates([0, 0, 1, 1, 2, 3, 5, 8, 12, 18], [PILOT] * H)
    alloc = C.neyman_allocation(sizes, rates, 20_000, minimum=PILOT)
    C.interleave(alloc.tolist())
    plan_s = time.perf_counter() - t0
    assert len(orders) == H
    t0 = time.perf_counter()
    found = np.array([int(y[np.flatnonzero(st.labels == h)][orders[h][: alloc[h]]].sum()) for h in range(H)])
    C.stratified_upper(sizes, alloc, found, ALPHA)
    bound_s = time.perf_counter() - t0
    return plan_s, bound_s


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pools", type=int, default=1000)
    ap.add_argument("--size", type=int, default=100_000)
    ap.add_argument("--workers", type=int, default=2)
    a = ap.parse_args()
    t0 = time.perf_counter()
    jobs = [(p, a.size, s, r) for s in SHARES for r in AUROCS for p in range(a.pools)]
    with Pool(a.workers) as pool:
        rows = pool.map(one, jobs, chunksize=8)
    print(f"{a.pools} pools of {a.size:,} images per setting, alpha {ALPHA}, stop at bound <= {RATIO}x the remainder's "
          f"true contamination ({time.perf_counter() - t0:.0f} s)\n")
    print("| ID share | AUROC | coverage strat. | coverage SRS | reviews strat. (median) | reviews SRS (median) | "
          "SRS / strat. | strat. / SRS | Neyman ceiling | fixed-size CP (SRS) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for s in SHARES:
        for r in AUROCS:
            sel = [x for x in rows if x["share"] == s and x["auroc"] == r]
            cov_a = np.mean([x["strat_held"] for x in sel])
            cov_b = np.mean([x["srs_held"] for x in sel])
            big = 10 ** 9
            na = float(np.median([x["strat"] if x["strat"] is not None else big for x in sel]))
            nb = float(np.median([x["srs"] if x["srs"] is not None else big for x in sel]))
            ceil = float(np.mean([x["ceiling"] for x in sel]))
            print(f"| {s:.1%} | {r} | {cov_a:.3f} | {cov_b:.3f} | {na:,.0f} | {nb:,.0f} | {nb / na:.2f}x | {na / nb:.2f} | "
                  f"{ceil:.2f} | {cp_fixed(a.size, s):,} |")
    plan_s, bound_s = timing_1m()
    print(f"\n1M-image source: plan (strata, draw, allocation) {plan_s:.2f} s, bound {bound_s:.3f} s")


if __name__ == "__main__":
    main()
