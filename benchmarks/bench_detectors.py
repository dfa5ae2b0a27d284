"""Every output- and feature-level OOD detector on cached outputs of ImageNet size: 10,000 ID fit,
10,000 ID test and 10,000 OOD images, 1,280-d penultimate features (efficientnet_b0's width),
1,000 classes. Per detector the time to fit and to score both test sets, and the whole set's
total (goal: <= 60 s on 2 cores). Wall-clock seconds depend on what else the machine runs; the
process's CPU seconds (all its threads) do not, so both are printed: on an idle 2-core machine
the wall time lies between CPU / 2 (both threads busy) and CPU (one thread busy). The baseline measured in the same run: recomputing the 30,000
images' logits from their features once (one float64 product, the cost every head-based
detector pays at least once), so each detector's time is also given as a multiple of it.

    .venv/bin/python benchmarks/bench_detectors.py [--threads 2] [--n 10000] [--only msp,knn] [--skip weiper]

The last lines are the totals: ``TOTAL all N detectors`` and ``TOTAL without WeiPer`` (WeiPer
computes r = 100 perturbed heads' logits, about 4 r head products by design, so it is reported
beside the set as well as in it).

The outputs are synthetic but shaped like a ReLU network's: non-negative, sparse features with a
class structure, logits from a linear head of them; OOD images share the generic part and carry
a part of no ID class. The AUROC column shows the detectors run on sensible data, not a benchmark of
their quality. Threads are fixed before numpy loads (OMP/OpenBLAS/MKL and torch).
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--n", type=int, default=10_000)
    ap.add_argument("--dim", type=int, default=1280)
    ap.add_argument("--classes", type=int, default=1000)
    ap.add_argument("--only", default="", help="comma-separated detector names (default: every output/feature-level one)")
    ap.add_argument("--skip", default="", help="comma-separated detector names to leave out")
    a = ap.parse_args()
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS"):
        os.environ[var] = str(a.threads)
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    import numpy as np
    import torch

    torch.set_num_threads(a.threads)
    from pipelines.evaluation.detectors import DETECTORS, Head, Outputs, detector_names, get_detector
    from pipelines.evaluation.metrics import ood_metrics

    rng = np.random.default_rng(0)
    C, d, n = a.classes, a.dim, a.n
    proto = np.maximum(rng.normal(0, 1, (C, d)), 0) * (rng.random((C, d)) < 0.08) * 3.0  # sparse class parts
    unseen = np.maximum(rng.normal(0, 1, (200, d)), 0) * (rng.random((200, d)) < 0.08) * 3.0  # parts of no ID class
    generic = np.abs(rng.normal(0.3, 0.2, d))
    w = rng.normal(0, 0.02, (C, d)) + proto / np.linalg.norm(proto, axis=1, keepdims=True) * 0.6
    b = rng.normal(0, 0.05, C)
    head = Head(weight=w, bias=b)

    def make(ood: bool):
        labels = rng.integers(0, C, n)
        x = np.maximum(generic + rng.normal(0, 0.35, (n, d)), 0)
        if ood:
            x += unseen[rng.integers(0, len(unseen), n)]
        else:
            x += proto[labels]
        x = x.astype(np.float32)
        return Outputs(features=x, logits=head.logits(x).astype(np.float32), labels=None if ood else labels)

    t = time.perf_counter()
    fit, test, ood = make(False), make(False), make(True)
    print(f"synthetic outputs: {n:,} fit / {n:,} ID test / {n:,} OOD, {d}-d features, {C} classes "
          f"({time.perf_counter() - t:.1f} s to make); {a.threads} threads; load average {os.getloadavg()[0]:.1f} "
          f"on {os.cpu_count()} cores (the machine is shared with other agents)")
    c, t = time.process_time(), time.perf_counter()
    for o in (fit, test, ood):
        head.logits(o.features)
    base = time.perf_counter() - t
    print(f"baseline: logits of the 30,000 images from their features (float64 product): {base:.2f} s wall, "
          f"{time.process_time() - c:.2f} s CPU\n")
    skip = {x for x in a.skip.split(",") if x}
    names = [x for x in (a.only.split(",") if a.only else detector_names()) if x and not DETECTORS[x].input_level and x not in skip]
    params = {"knn": {"k": 1000}}
    print(f"{'detector':<22} {'fit s':>7} {'score s':>8} {'total s':>8} {'CPU s':>7} {'x base':>7} {'AUROC':>6}")
    rows = []
    for name in names:
        det = get_detector(name, **params.get(name, {}))
        c0 = time.process_time()
        t0 = time.perf_counter()
        det.fit(fit, head)
        t1 = time.perf_counter()
        s_id, s_ood = det.score(test), det.score(ood)
        t2 = time.perf_counter()
        cpu = time.process_time() - c0
        auroc = ood_metrics(s_id, s_ood)["auroc"]
        rows.append((name, t2 - t0, cpu))
        print(f"{name:<22} {t1 - t0:7.2f} {t2 - t1:8.2f} {t2 - t0:8.2f} {cpu:7.2f} {(t2 - t0) / base:7.1f} {auroc:6.3f}", flush=True)
    print(f"\nload average now {os.getloadavg()[0]:.1f}; goal <= 60 s wall on 2 cores (idle, the wall time lies between "
          f"CPU / {a.threads} and CPU)")
    for label, keep in (("all detectors", rows), ("without WeiPer", [r for r in rows if r[0] != "weiper"])):
        if keep is not rows and len(keep) == len(rows):
            continue
        wall, cpu = sum(r[1] for r in keep), sum(r[2] for r in keep)
        print(f"TOTAL {label} ({len(keep)}): {wall:.1f} s wall, {cpu:.1f} s CPU; {wall / base:.0f}x the baseline")


if __name__ == "__main__":
    main()
