"""The duplicate search cut into work units any worker can take (docs/image_pipeline.md,
"How the duplicate search scales").

The single-process search (``near_dups.find_duplicates``) holds every feature of the pool as one
float32 array: about 5 KB a candidate at 1,280 dimensions, 67.6 GB at 13.2M. Here the features
stay in their float16 shards, memory-mapped, and each step reads the rows it needs in blocks:

1. **Cells** (the plan): a coarse quantizer, faiss k-means (spherical, as the search is cosine)
   trained on a seeded sample of at most ``TRAIN_MAX`` vectors, cuts the space into ``nlist``
   cells (about 4 sqrt(n), as faiss's guidelines for IVF; one cell below ``exact_below``, where
   the search is exact).
2. **Assignment** (chunks of rows): each row's nearest centroid.
3. **Join** (chunks of the cell-sorted candidates): each candidate is compared with every
   candidate and every ID image in the ``nprobe`` cells nearest its own cell's centroid; pairs at
   or above the threshold are kept, and the most similar ID image with its similarity. ``nprobe``
   is measured, not guessed (``calibrate_probes``): the fewest cells that meet 99% of synthetic
   copies at cosine 0.90 of sampled images (16 probed cells met 90% of planted 0.90-0.99 copies at
   a million 256-d vectors in 4,000 cells, all of them at 200,000 in 1,788).
4. **Grouping** (the finalize step): union-find over the kept pairs, which are few.

Every chunk's work depends only on the plan (the sample, the cells, the chunk boundaries), never
on which worker runs it or how many run, so two workers give one worker's result pair for pair,
and a chunk computed again gives the same bytes.
"""
from __future__ import annotations

import os
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

TRAIN_MAX = 131_072  # vectors the quantizer is trained on, at most (0.67 GB at 1,280-d float32)
TRAIN_PER_CELL = 40  # and at least this many per cell where the pool has them (faiss warns below 39)
QUERY_BLOCK = 2048  # query rows per matrix product
BASE_BLOCK = 16_384  # base rows per matrix product: a 2,048 x 16,384 float32 score block is 128 MB
CELL_CACHE_BYTES = 512 * 1024 * 1024  # the cells' vectors a join chunk keeps while it works


def cells_for(n: int, exact_below: int) -> int:
    """How many cells ``n`` vectors get: one (exact search) below ``exact_below``, else about
    4 sqrt(n) (faiss's rule of thumb for inverted files, as ``near_dups.knn``)."""
    if n < max(1, exact_below):
        return 1
    return max(1, int(4 * np.sqrt(n)))


def normalised(x: np.ndarray) -> np.ndarray:
    """Rows of ``x`` as float32 of unit length (zero rows stay zero)."""
    x = np.asarray(x, dtype=np.float32)
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return np.ascontiguousarray(x / norms)


class FeatureReader:
    """Rows of the float16 feature shards, memory-mapped (never loaded whole), as unit-length
    float32 vectors. ``paths[k]`` is shard number ``k``; at most ``keep_open`` maps stay open."""

    def __init__(self, paths: Sequence[str | os.PathLike], *, keep_open: int = 256):
        self.paths = [Path(p) for p in paths]
        self.keep_open = keep_open
        self._maps: OrderedDict[int, np.ndarray] = OrderedDict()

    def _map(self, k: int) -> np.ndarray:
        m = self._maps.get(k)
        if m is None:
            try:
                m = np.load(self.paths[k], mmap_mode="r")
            except (OSError, ValueError) as exc:
                raise FeatureShardUnreadable(f"feature shard {self.paths[k]} cannot be read ({exc}); "
                                             "re-run extraction for its source") from None
            self._maps[k] = m
            while len(self._maps) > self.keep_open:
                self._maps.popitem(last=False)
        else:
            self._maps.move_to_end(k)
        return m

    def dim(self) -> int:
        return int(self._map(0).shape[1]) if self.paths else 0

    def vectors(self, shard: np.ndarray, row: np.ndarray) -> np.ndarray:
        """The vectors of (shard, row) pairs, in the order given."""
        n = len(shard)
        if n == 0:
            return np.zeros((0, self.dim()), dtype=np.float32)
        order = np.lexsort((row, shard))  # each shard's rows front to back
        s_sorted, r_sorted = shard[order], row[order]
        bounds = np.flatnonzero(np.diff(s_sorted)) + 1
        out: np.ndarray | None = None
        for seg in np.split(np.arange(n), bounds):
            k = int(s_sorted[seg[0]])
            block = np.asarray(self._map(k)[r_sorted[seg]], dtype=np.float32)
            if out is None:
                out = np.empty((n, block.shape[1]), dtype=np.float32)
            out[order[seg]] = block
        assert out is not None
        return normalised(out)


class FeatureShardUnreadable(OSError):
    """A feature shard is missing or damaged; the message names it and the fix."""


def train_cells(sample: np.ndarray, nlist: int, *, seed: int = 0) -> np.ndarray:
    """``nlist`` unit-length centroids from ``sample`` (spherical k-means, faiss, seeded; 10
    iterations as ``near_dups.knn``). One cell: the mean direction (any centroid would do)."""
    d = sample.shape[1]
    if nlist <= 1 or len(sample) <= nlist:
        c = sample.mean(axis=0, keepdims=True) if nlist <= 1 and len(sample) else sample[:max(1, nlist)]
        return normalised(c.reshape(-1, d) if len(c) else np.ones((1, d), dtype=np.float32))
    import faiss

    # every sampled vector is used (faiss would subsample above 256 a cell) and none is refused as too few
    km = faiss.Kmeans(d, nlist, niter=10, spherical=True, seed=seed, verbose=False, min_points_per_centroid=1,
                      max_points_per_centroid=1 << 30)
    km.train(np.ascontiguousarray(sample, dtype=np.float32))
    assert km.centroids is not None
    return normalised(km.centroids)


def assign_cells(x: np.ndarray, centroids: np.ndarray) -> np.ndarray:
    """Each row's nearest centroid (int32)."""
    if len(centroids) == 1:
        return np.zeros(len(x), dtype=np.int32)
    import faiss

    index = faiss.IndexFlatIP(centroids.shape[1])
    index.add(np.ascontiguousarray(centroids, dtype=np.float32))
    out = np.empty(len(x), dtype=np.int32)
    for s in range(0, len(x), 65_536):
        out[s:s + 65_536] = index.search(np.ascontiguousarray(x[s:s + 65_536]), 1)[1][:, 0]
    return out


def probe_table(centroids: np.ndarray, nprobe: int) -> np.ndarray:
    """For each cell, the ``nprobe`` cells whose centroids are nearest its own, itself first."""
    nlist = len(centroids)
    k = max(1, min(nprobe, nlist))
    if nlist == 1:
        return np.zeros((1, 1), dtype=np.int32)
    import faiss

    index = faiss.IndexFlatIP(centroids.shape[1])
    index.add(np.ascontiguousarray(centroids, dtype=np.float32))
    probe = index.search(np.ascontiguousarray(centroids, dtype=np.float32), k)[1].astype(np.int32)
    for c in range(nlist):  # itself first, whatever ties the search broke
        row = [c, *(int(p) for p in probe[c] if p != c and p >= 0)]
        probe[c] = np.array((row + [c] * k)[:k], dtype=np.int32)
    return probe


PROBE_LADDER = (16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512)
CALIBRATION_COSINE = 0.90  # the copies the probes must reach: a resized or recompressed copy is 0.95 and more
CALIBRATION_TARGET = 0.99


def calibrate_probes(centroids: np.ndarray, sample: np.ndarray, *, at_least: int = 16, cosine: float = CALIBRATION_COSINE,
                     target: float = CALIBRATION_TARGET, pairs: int = 2000, seed: int = 0) -> tuple[int, float]:
    """How many cells each cell must be compared with so that a copy at ``cosine`` of an image is
    met: for ``pairs`` sampled vectors, a partner at exactly that cosine in a random direction; the
    pair is met when either's cell is among the other cell's nearest ``nprobe`` (the join looks
    from both sides). The smallest ``nprobe`` of ``PROBE_LADDER`` (at least ``at_least``) whose
    share of met pairs reaches ``target``, with that share. Where none does, the largest of the
    ladder and the share it meets (probing every cell of a large pool would make the join
    quadratic: the job's result says the share, and the curator decides); every cell where the
    ladder does not reach the cells' count, or ``at_least`` asks for them all."""
    nlist = len(centroids)
    if nlist == 1 or len(sample) == 0:
        return 1, 1.0
    import faiss

    rng = np.random.default_rng(seed + 7)
    v = sample[rng.choice(len(sample), size=min(pairs, len(sample)), replace=False)]
    r = rng.standard_normal(v.shape).astype(np.float32)
    r -= (r * v).sum(axis=1, keepdims=True) * v
    r /= np.linalg.norm(r, axis=1, keepdims=True)
    w = normalised(cosine * v + np.sqrt(1 - cosine ** 2) * r)
    cv, cw = assign_cells(v, centroids), assign_cells(w, centroids)
    ladder = [p for p in PROBE_LADDER if at_least <= p < nlist] or [nlist]
    index = faiss.IndexFlatIP(centroids.shape[1])
    index.add(np.ascontiguousarray(centroids, dtype=np.float32))
    order = index.search(np.ascontiguousarray(centroids, dtype=np.float32), min(nlist, max(ladder)))[1]
    rank = np.full((2, len(v)), nlist, dtype=np.int64)  # where the other's cell stands in a cell's probe order
    for side, (a, b) in enumerate(((cv, cw), (cw, cv))):
        hit = order[a] == b[:, None]
        found = hit.any(axis=1)
        rank[side, found] = hit[found].argmax(axis=1)
        rank[side, a == b] = 0
    met = rank.min(axis=0)
    share = 0.0
    for nprobe in ladder:
        share = float((met < nprobe).mean())
        if share >= target:
            return nprobe, share
    return ladder[-1], share


@dataclass(frozen=True)
class Layout:
    """The rows of the search sorted by cell: ``cand`` / ``ref`` hold positions (into the search's
    rows) of the candidates / ID images, cell by cell; ``cand_start[c]:cand_start[c + 1]`` is cell
    ``c``'s part of ``cand`` (likewise ``ref_start``)."""

    cand: np.ndarray
    cand_start: np.ndarray
    ref: np.ndarray
    ref_start: np.ndarray
    probe: np.ndarray

    def cand_of(self, c: int) -> np.ndarray:
        return self.cand[self.cand_start[c]:self.cand_start[c + 1]]

    def ref_of(self, c: int) -> np.ndarray:
        return self.ref[self.ref_start[c]:self.ref_start[c + 1]]


def layout(cells: np.ndarray, is_ref: np.ndarray, probe: np.ndarray) -> Layout:
    """The cell-sorted layout of the rows (stable: within a cell, rows keep their order)."""
    nlist = len(probe)
    out = {}
    for name, mask in (("cand", ~is_ref), ("ref", is_ref)):
        pos = np.flatnonzero(mask)
        order = pos[np.argsort(cells[pos], kind="stable")]
        out[name] = order
        out[name + "_start"] = np.searchsorted(cells[order], np.arange(nlist + 1)).astype(np.int64)
    return Layout(cand=out["cand"], cand_start=out["cand_start"], ref=out["ref"], ref_start=out["ref_start"], probe=probe)


def join_ranges(lay: Layout, rows_per_chunk: int) -> list[tuple[int, int]]:
    """The join's work units: ranges of ``lay.cand`` of about ``rows_per_chunk`` queries each
    (a large cell may span several units; each query row is in exactly one)."""
    n = len(lay.cand)
    step = max(1, rows_per_chunk)
    return [(s, min(n, s + step)) for s in range(0, n, step)]


@dataclass
class JoinResult:
    """What one join unit found, as positions into the search's rows: pairs ``a < b`` at or above
    the threshold with their similarity, and for each query its most similar ID image among the
    probed cells (-1 and -inf where those cells hold none)."""

    pair_a: np.ndarray
    pair_b: np.ndarray
    pair_sim: np.ndarray
    query: np.ndarray
    nearest_ref: np.ndarray
    nearest_sim: np.ndarray


class _CellCache:
    def __init__(self, read: Callable[[np.ndarray], np.ndarray], limit: int):
        self.read, self.limit, self.bytes = read, limit, 0
        self.items: OrderedDict[tuple[str, int], np.ndarray] = OrderedDict()

    def get(self, key: tuple[str, int], positions: np.ndarray) -> np.ndarray:
        hit = self.items.get(key)
        if hit is not None:
            self.items.move_to_end(key)
            return hit
        v = self.read(positions)
        self.items[key] = v
        self.bytes += v.nbytes
        while self.bytes > self.limit and len(self.items) > 1:
            _k, old = self.items.popitem(last=False)
            self.bytes -= old.nbytes
        return v


def join(lay: Layout, lo: int, hi: int, read: Callable[[np.ndarray], np.ndarray], *, threshold: float, cache_bytes: int = CELL_CACHE_BYTES) -> JoinResult:
    """The join over ``lay.cand[lo:hi]``: ``read(positions) -> float32 [n, d]`` gives unit-length
    vectors of rows. Each query is compared with the candidates and ID images of its cell's
    probed cells, in blocks (``QUERY_BLOCK`` x ``BASE_BLOCK`` products)."""
    cache = _CellCache(read, cache_bytes)
    pa: list[np.ndarray] = []
    pb: list[np.ndarray] = []
    ps: list[np.ndarray] = []
    queries = lay.cand[lo:hi]
    best_sim = np.full(len(queries), -np.inf, dtype=np.float32)
    best_ref = np.full(len(queries), -1, dtype=np.int64)
    # the cells the range covers, each with its slice of the range
    first = int(np.searchsorted(lay.cand_start, lo, side="right")) - 1
    c = first
    while c < len(lay.probe) and lay.cand_start[c] < hi:
        s, e = max(lo, int(lay.cand_start[c])), min(hi, int(lay.cand_start[c + 1]))
        if s < e:
            q_pos = lay.cand[s:e]
            q_all = cache.get(("cand", c), lay.cand_of(c))
            q = q_all[s - int(lay.cand_start[c]):e - int(lay.cand_start[c])]
            off = s - lo
            for p in lay.probe[c]:
                p = int(p)
                b_pos = lay.cand_of(p)
                if len(b_pos):
                    b = cache.get(("cand", p), b_pos)
                    for qs in range(0, len(q), QUERY_BLOCK):
                        qb, qp = q[qs:qs + QUERY_BLOCK], q_pos[qs:qs + QUERY_BLOCK]
                        for bs in range(0, len(b), BASE_BLOCK):
                            scores = qb @ b[bs:bs + BASE_BLOCK].T
                            r, k = np.nonzero(scores >= threshold)
                            if len(r):
                                a_, b_ = qp[r], b_pos[bs + k]
                                keep = a_ != b_
                                a_, b_, sim = a_[keep], b_[keep], scores[r[keep], k[keep]]
                                pa.append(np.minimum(a_, b_))
                                pb.append(np.maximum(a_, b_))
                                ps.append(sim.astype(np.float32))
                r_pos = lay.ref_of(p)
                if len(r_pos):
                    rv = cache.get(("ref", p), r_pos)
                    for qs in range(0, len(q), QUERY_BLOCK):
                        qb = q[qs:qs + QUERY_BLOCK]
                        for bs in range(0, len(rv), BASE_BLOCK):
                            scores = qb @ rv[bs:bs + BASE_BLOCK].T
                            j = np.argmax(scores, axis=1)
                            sim = scores[np.arange(len(j)), j]
                            slot = slice(off + qs, off + qs + len(qb))
                            better = sim > best_sim[slot]
                            best_sim[slot] = np.where(better, sim, best_sim[slot])
                            best_ref[slot] = np.where(better, r_pos[bs + j], best_ref[slot])
        c += 1
    if pa:
        pair_a, pair_b, pair_sim = unique_pairs(np.concatenate(pa), np.concatenate(pb), np.concatenate(ps))
    else:
        pair_a = pair_b = np.zeros(0, dtype=np.int64)
        pair_sim = np.zeros(0, dtype=np.float32)
    return JoinResult(pair_a=pair_a, pair_b=pair_b, pair_sim=pair_sim, query=queries.astype(np.int64), nearest_ref=best_ref, nearest_sim=best_sim)


def unique_pairs(a: np.ndarray, b: np.ndarray, sim: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Pairs (a, b) once each, sorted, with the largest similarity any unit found for them (a pair
    is met from both of its sides where the cells probe each other)."""
    if not len(a):
        return a.astype(np.int64), b.astype(np.int64), sim.astype(np.float32)
    order = np.lexsort((-sim, b, a))
    a, b, sim = a[order], b[order], sim[order]
    first = np.ones(len(a), dtype=bool)
    first[1:] = (a[1:] != a[:-1]) | (b[1:] != b[:-1])
    return a[first].astype(np.int64), b[first].astype(np.int64), sim[first].astype(np.float32)


def components(n_nodes: int, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Connected components of the graph on ``n_nodes`` nodes with edges (a, b): a label per node
    (union-find's result; scipy's connected_components over the sparse edge list)."""
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    if n_nodes == 0:
        return np.zeros(0, dtype=np.int64)
    g = coo_matrix((np.ones(len(a), dtype=np.int8), (a, b)), shape=(n_nodes, n_nodes))
    return connected_components(g, directed=False)[1].astype(np.int64)
