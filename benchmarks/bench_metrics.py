"""All five OOD metrics (AUROC, AUPR-In, AUPR-Out, FPR@95 in both conventions) for 1,000,000 ID
and 1,000,000 OOD scores versus one numpy sort of those 2,000,000 scores, measured in the same run
(goal: at most 3x; the answers are checked against the previous implementation's formulas by the
test suite to 1e-12).

    .venv/bin/python benchmarks/bench_metrics.py [--n 1000000] [--repeats 5]

Two cases: float32 scores rounded to 3 decimals (ties are common, as detector scores often are)
and continuous float64 scores (every score its own threshold)."""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pipelines.evaluation.metrics import ood_metrics  # noqa: E402


def best(fn, repeats):
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times), float(np.median(times))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--repeats", type=int, default=5)
    a = ap.parse_args()
    rng = np.random.default_rng(0)
    cases = {
        "float32, 3 decimals (many ties)": (np.round(rng.normal(1.0, 1.0, a.n), 3).astype(np.float32),
                                            np.round(rng.normal(0.0, 1.0, a.n), 3).astype(np.float32)),
        "float64, continuous (no ties)": (rng.normal(1.0, 1.0, a.n), rng.normal(0.0, 1.0, a.n)),
    }
    print(f"{a.n:,} ID + {a.n:,} OOD scores, best of {a.repeats} (median in brackets)")
    for name, (ids, oods) in cases.items():
        pooled = np.concatenate([ids, oods])
        sort_best, sort_med = best(lambda: np.sort(pooled), a.repeats)
        met_best, met_med = best(lambda: ood_metrics(ids, oods), a.repeats)
        m = ood_metrics(ids, oods)
        print(f"  {name}")
        print(f"    one numpy sort of the pooled scores: {sort_best * 1000:7.1f} ms ({sort_med * 1000:.1f})")
        print(f"    ood_metrics (AUROC, AUPR-In/Out, both FPR@95): {met_best * 1000:7.1f} ms ({met_med * 1000:.1f})")
        print(f"    ratio: {met_best / sort_best:.2f}x (goal <= 3x); median ratio {met_med / sort_med:.2f}x;"
              f" AUROC {m['auroc']:.4f}, FPR@95 ID+ {m['fpr95_id_positive']:.4f}, OOD+ {m['fpr95_ood_positive']:.4f}")

if __name__ == "__main__":
    main()
