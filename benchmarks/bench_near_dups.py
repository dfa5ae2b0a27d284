"""Near-duplicate search at scale: self k-NN over a million feature-like vectors.

    .venv/bin/python benchmarks/bench_near_dups.py [--n 1000000] [--dim 1280] [--pairs 5000] [--nprobe 16]

Data: ``n`` vectors with the structure of real features: 1,000 class centres (Gaussian), each
vector its class centre plus Gaussian noise (within-class cosine about 0.5, like penultimate
features of one class), L2-normalised; ``pairs`` planted near-duplicates (a vector plus small
noise, cosine about 0.985), like a resized or recompressed copy. Then, as
pipelines.features.near_dups.knn does it above its exact-search size: spherical faiss k-means into
nlist = 4 sqrt(n) cells (trained on 40 points per cell, 10 iterations), every vector assigned,
and every cell joined with the members of its ``nprobe`` nearest cells in one matrix product,
keeping each vector's k=10 nearest neighbours. Measured: the total time (all of that);
recall@10 against exact brute-force search (faiss.knn) on a random sample of queries; the share
of planted pairs found (the copy among the original's neighbours at similarity >= the default
threshold).
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def make_vectors(n: int, dim: int, n_pairs: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((1000, dim), dtype=np.float32)
    x = np.empty((n, dim), dtype=np.float32)
    step = 100_000
    for s in range(0, n, step):  # in blocks: a million 1,280-d vectors is 5 GB already
        e = min(n, s + step)
        x[s:e] = centres[rng.integers(0, 1000, size=e - s)]
        x[s:e] += rng.standard_normal((e - s, dim), dtype=np.float32)
    pairs = rng.choice(n, size=(n_pairs, 2), replace=False)
    x[pairs[:, 1]] = x[pairs[:, 0]] + 0.25 * rng.standard_normal((n_pairs, dim), dtype=np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    return x, pairs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument("--dim", type=int, default=1280)
    parser.add_argument("--pairs", type=int, default=5000)
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--nprobe", type=int, default=16)
    parser.add_argument("--sample", type=int, default=1000, help="queries checked against exact search")
    args = parser.parse_args()
    import faiss

    from pipelines.features.near_dups import DEFAULT_THRESHOLD, knn

    print(f"faiss {faiss.__version__}, {faiss.omp_get_max_threads()} threads, {os.cpu_count()} CPUs")
    t0 = time.perf_counter()
    x, pairs = make_vectors(args.n, args.dim, args.pairs)
    t_data = time.perf_counter() - t0
    print(f"data: {args.n} x {args.dim} float32 ({x.nbytes / 1e9:.1f} GB), {args.pairs} planted pairs, {t_data:.0f} s (not counted)", flush=True)

    t0 = time.perf_counter()
    sims, ids, exact_used = knn(x, x, args.k + 1, exact_below=0, nprobe=args.nprobe)  # force the approximate path
    t_total = time.perf_counter() - t0
    assert not exact_used
    print(f"self k-NN (k={args.k}, nlist {int(4 * np.sqrt(args.n))}, nprobe {args.nprobe}; k-means, assignment, cell joins): {t_total:.0f} s", flush=True)

    # recall@10 against exact search on a sample of queries
    rng = np.random.default_rng(1)
    q = rng.choice(args.n, size=args.sample, replace=False)
    t0 = time.perf_counter()
    _es, exact = faiss.knn(x[q], x, args.k + 1, metric=faiss.METRIC_INNER_PRODUCT)  # brute force, no copy
    t_exact = time.perf_counter() - t0
    recall = np.mean([len(set(exact[i, 1:]) & set(ids[qi, :])) / args.k for i, qi in enumerate(q)])
    found = np.mean([(b in ids[a]) and sims[a][list(ids[a]).index(b)] >= DEFAULT_THRESHOLD for a, b in pairs])
    print(f"\nN={args.n} d={args.dim}: total {t_total:.0f} s = {t_total / 60:.1f} min (index built and searched); goal < 15 min")
    print(f"recall@{args.k} vs exact on {args.sample} queries: {recall:.4f} (goal >= 0.95); exact search of the sample took {t_exact:.0f} s")
    print(f"planted pairs found at similarity >= {DEFAULT_THRESHOLD}: {found:.4f} (goal >= 0.99)")
    print(f"exact self k-NN of all {args.n} would take about {t_exact / args.sample * args.n / 3600:.1f} h at this rate")


if __name__ == "__main__":
    main()
