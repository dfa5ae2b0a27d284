"""Near-duplicate search over image features with faiss.

Features are L2-normalised, so inner product is cosine similarity. Below ``exact_below``
vectors the search is exact (``IndexFlatIP``); above it, an inverted-file index (``IndexIVFFlat``
with ``nlist`` about 4 * sqrt(n) cells, ``nprobe`` probed per query) trades a little recall for
orders of magnitude in time; benchmarks/bench_near_dups.py measures that recall against exact
search. Grouping joins every pair at or above the similarity threshold (union-find), so a chain
of near-copies forms one group.

Default thresholds were calibrated on efficientnet_lite0 features of real photos and their
transformed copies (resize, JPEG recompression, crop, mirror) against distinct photos:
benchmarks/calibrate_near_dups.py, figures in docs/benchmarks.md.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

DEFAULT_THRESHOLD = 0.80  # cosine; calibrated (see the module docstring and docs/benchmarks.md)
DEFAULT_EXACT_BELOW = 50_000


def normalise(x: np.ndarray) -> np.ndarray:
    x = np.ascontiguousarray(x, dtype=np.float32)
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return x / norms


@dataclass
class SearchIndex:
    index: object  # a faiss index over normalised vectors
    exact: bool
    n: int

    def search(self, queries: np.ndarray, k: int, *, nprobe: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(similarities, indices), each [n_queries, k], best first; -1 where fewer exist."""
        import faiss

        if not self.exact and nprobe is not None:
            faiss.extract_index_ivf(self.index).nprobe = nprobe
        k = max(1, min(k, self.n))
        return self.index.search(normalise(queries), k)


def build_index(vectors: np.ndarray, *, exact_below: int = DEFAULT_EXACT_BELOW, nlist: int | None = None,
                nprobe: int = 32, train_size: int = 100_000, seed: int = 0) -> SearchIndex:
    """An index over ``vectors`` (normalised here): exact below ``exact_below`` rows, IVF above."""
    import faiss

    x = normalise(vectors)
    n, d = x.shape
    if n < exact_below:
        index = faiss.IndexFlatIP(d)
        index.add(x)
        return SearchIndex(index=index, exact=True, n=n)
    nlist = nlist or int(4 * np.sqrt(n))
    quantizer = faiss.IndexFlatIP(d)
    index = faiss.IndexIVFFlat(quantizer, d, nlist, faiss.METRIC_INNER_PRODUCT)
    rng = np.random.default_rng(seed)
    sample = x[rng.choice(n, size=min(n, max(train_size, nlist * 39)), replace=False)]
    index.train(sample)
    index.add(x)
    index.nprobe = nprobe
    return SearchIndex(index=index, exact=False, n=n)


class _UnionFind:
    def __init__(self, n: int):
        self.parent = list(range(n))

    def find(self, a: int) -> int:
        while self.parent[a] != a:
            self.parent[a] = self.parent[self.parent[a]]
            a = self.parent[a]
        return a

    def union(self, a: int, b: int) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[max(ra, rb)] = min(ra, rb)


@dataclass
class Grouping:
    group_of: list[int]  # item -> group number (0..n_groups-1, numbered by first member)
    representative: list[int]  # group -> the item kept
    similarity: list[float]  # item -> its similarity to the group's representative (1.0 for it)


def group_near_duplicates(
    vectors: np.ndarray, *, threshold: float = DEFAULT_THRESHOLD, k: int = 10, priority: Sequence[tuple] | None = None,
    exact_below: int = DEFAULT_EXACT_BELOW, nprobe: int = 32, same: Sequence[tuple[int, int]] = (),
) -> Grouping:
    """Group items whose features are at least ``threshold`` similar (each item's ``k``
    nearest neighbours are examined). ``same`` adds pairs known to be duplicates (same bytes).
    The representative of a group is the item with the smallest ``priority`` key (callers pass
    e.g. ``(-pixels, id)``: the largest image, then the oldest)."""
    n = len(vectors)
    uf = _UnionFind(n)
    for a, b in same:
        uf.union(a, b)
    x = normalise(vectors) if n else np.zeros((0, 1), dtype=np.float32)
    if n > 1:
        index = build_index(x, exact_below=exact_below, nprobe=nprobe)
        step = 8192
        for start in range(0, n, step):
            sims, idx = index.search(x[start:start + step], k + 1)
            rows, cols = np.nonzero((sims >= threshold) & (idx >= 0))
            for r, c in zip(rows.tolist(), cols.tolist()):
                j = int(idx[r, c])
                if j != start + r:
                    uf.union(start + r, j)
    roots = [uf.find(i) for i in range(n)]
    priority = list(priority) if priority is not None else [(i,) for i in range(n)]
    members: dict[int, list[int]] = {}
    for i, r in enumerate(roots):
        members.setdefault(r, []).append(i)
    group_of = [0] * n
    representative = []
    similarity = [1.0] * n
    for g, root in enumerate(sorted(members, key=lambda r: min(members[r]))):
        items = members[root]
        rep = min(items, key=lambda i: priority[i])
        representative.append(rep)
        for i in items:
            group_of[i] = g
            if i != rep:
                similarity[i] = float(np.dot(x[i], x[rep]))
    return Grouping(group_of=group_of, representative=representative, similarity=similarity)


def nearest(queries: np.ndarray, reference: np.ndarray, *, exact_below: int = DEFAULT_EXACT_BELOW, nprobe: int = 32) -> tuple[np.ndarray, np.ndarray]:
    """For each query, the most similar reference item: (similarity, index) arrays; -1 / -inf
    when there is no reference at all."""
    if len(reference) == 0 or len(queries) == 0:
        return np.full(len(queries), -np.inf, dtype=np.float32), np.full(len(queries), -1, dtype=np.int64)
    index = build_index(reference, exact_below=exact_below, nprobe=nprobe)
    sims, idx = index.search(queries, 1)
    return sims[:, 0], idx[:, 0]
