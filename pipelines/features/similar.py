"""Find similar: the nearest stored feature vectors to one image's, for browsing (docs/browse.md,
"Find similar"). Features are L2-normalised, so inner product is cosine similarity, as in the
duplicate search (``pipelines.features.near_dups``). Below ``exact_below`` vectors the index is exact
(faiss ``IndexFlatIP``); above, it is faiss's inverted file (``IndexIVFFlat``): k-means
(spherical) cells, about 4 sqrt(n) of them as the duplicate search uses, and a query compares
itself with the members of the ``nprobe`` cells nearest it. Unlike the duplicate search's batch
join, which re-clusters for every run, this index is built once per feature set and kept on disk
(``save`` / ``load``), since it answers one query at a time from the web app.

How many cells a query probes is not a fixed guess: an inverted file's recall depends on how
clustered the features are (well-separated classes need a few cells, a diffuse cloud many). The
build measures it: a sample of stored vectors is searched exactly and through the index at a
rising ``nprobe``, and the smallest ``nprobe`` whose mean recall@k reaches ``target_recall`` is
kept with the index (and saved with it).
recall@20 against exact search and the latency over a million vectors: benchmarks/bench_grid.py.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from pipelines.features.near_dups import DEFAULT_EXACT_BELOW, normalise

DEFAULT_NPROBE = 48  # for an index saved before the build measured its own
TARGET_RECALL = 0.95
FLAT_MAX_BYTES = 1 << 30  # above this many bytes of float32 vectors the cells hold PQ codes, not the vectors
PQ_BYTES = 64  # bytes of code a vector (64 sub-quantisers of 8 bits): 0.85 GB at 13.2M
PQ_MIN_ROWS = 256 * 39  # fewer rows than this train PQ codes badly (faiss asks for 39 a centroid): vectors kept instead
RERANK_AT_LEAST = 100  # an ivf_pq search takes this many candidates (or 10 k) and re-ranks them exactly
NPROBE_LADDER = (8, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096)


@dataclass
class SimilarIndex:
    index: Any  # a faiss index over the normalised vectors
    ids: np.ndarray  # int64 image id of each row
    exact: bool
    nprobe: int = DEFAULT_NPROBE  # cells probed per query (inverted file)
    recall: float | None = None  # mean recall@k at ``nprobe`` measured when built (1.0 when exact)
    kind: str = ""  # "flat", "ivf_flat" or "ivf_pq" (codes of PQ_BYTES bytes a vector; results re-ranked)
    # rows -> their exact vectors (the feature shards), to re-rank an ivf_pq index's candidates; not saved
    rerank: Callable[[np.ndarray], np.ndarray] | None = field(default=None, repr=False)

    def __len__(self) -> int:
        return len(self.ids)


def build_index(features: np.ndarray, ids: np.ndarray, *, exact_below: int = DEFAULT_EXACT_BELOW, nlist: int | None = None,
                train_size: int | None = None, seed: int = 0, target_recall: float = TARGET_RECALL, k: int = 20,
                queries: int = 64) -> SimilarIndex:
    """An index over ``features`` (rows), whose rows are the images ``ids``; an inverted file
    measures the ``nprobe`` that gives ``target_recall`` at ``k`` on ``queries`` of its rows."""
    import faiss

    ids = np.asarray(ids, dtype=np.int64)
    if len(features) != len(ids):
        raise ValueError(f"{len(features)} feature rows but {len(ids)} image ids")
    d = features.shape[1] if features.ndim == 2 else 1
    step = 65536  # normalised a block at a time: a million vectors are not copied whole
    if len(features) < exact_below:
        flat = faiss.IndexFlatIP(d)
        for s in range(0, len(features), step):
            flat.add(normalise(features[s:s + step]))
        return SimilarIndex(flat, ids, True, nprobe=0, recall=1.0)
    nlist = nlist or int(4 * np.sqrt(len(features)))
    rng = np.random.default_rng(seed)
    sample = normalise(features[np.sort(rng.choice(len(features), size=min(len(features), train_size or nlist * 40), replace=False))])
    index = faiss.IndexIVFFlat(faiss.IndexFlatIP(d), d, nlist, faiss.METRIC_INNER_PRODUCT)
    index.cp.spherical, index.cp.niter, index.cp.seed = True, 10, seed
    index.train(sample)
    del sample
    for s in range(0, len(features), step):
        index.add(normalise(features[s:s + step]))
    idx = SimilarIndex(index, ids, False)
    idx.nprobe, idx.recall = calibrate_nprobe(index, features, target_recall=target_recall, k=k, queries=queries, seed=seed)
    return idx


def _pq_subquantisers(d: int) -> int:
    """The most sub-quantisers (at most ``PQ_BYTES``) that divide ``d``."""
    return max(m for m in range(1, min(PQ_BYTES, d) + 1) if d % m == 0)


def build_index_streamed(n: int, read: Callable[[np.ndarray], np.ndarray], ids: np.ndarray, *, exact_below: int = DEFAULT_EXACT_BELOW,
                         flat_max_bytes: int = FLAT_MAX_BYTES, nlist: int | None = None, train_size: int | None = None, seed: int = 0,
                         target_recall: float = TARGET_RECALL, k: int = 20, queries: int = 64, block: int = 65536) -> SimilarIndex:
    """An index over ``n`` rows read through ``read(positions) -> features`` a block at a time
    (never all at once), whose rows are the images ``ids``: exact below ``exact_below``; an
    inverted file of the vectors while they take at most ``flat_max_bytes``; above, an inverted
    file of product-quantisation codes (``PQ_BYTES`` bytes a vector, faiss IndexIVFPQ) whose
    candidates ``search`` re-ranks exactly from ``rerank`` (the caller sets it: the shards).
    Cells and codes are trained on a seeded sample; ``nprobe`` is measured as ``build_index`` does."""
    import faiss

    ids = np.asarray(ids, dtype=np.int64)
    if n != len(ids):
        raise ValueError(f"{n} feature rows but {len(ids)} image ids")
    if n == 0:
        return SimilarIndex(faiss.IndexFlatIP(1), ids, True, nprobe=0, recall=1.0, kind="flat")
    d = read(np.arange(1)).shape[1]

    def fill(index: Any) -> None:
        for s in range(0, n, block):
            index.add(normalise(read(np.arange(s, min(n, s + block)))))

    if n < exact_below:
        flat = faiss.IndexFlatIP(d)
        fill(flat)
        return SimilarIndex(flat, ids, True, nprobe=0, recall=1.0, kind="flat")
    nlist = nlist or int(4 * np.sqrt(n))
    pq = n * d * 4 > flat_max_bytes and n >= PQ_MIN_ROWS
    m = _pq_subquantisers(d)
    rng = np.random.default_rng(seed)
    size = min(n, train_size or max(nlist * 40, 256 * 40 if pq else 0), 262_144)
    sample = normalise(read(np.sort(rng.choice(n, size=size, replace=False))))
    quantiser = faiss.IndexFlatIP(d)
    index: Any = (faiss.IndexIVFPQ(quantiser, d, nlist, m, 8, faiss.METRIC_INNER_PRODUCT) if pq
                  else faiss.IndexIVFFlat(quantiser, d, nlist, faiss.METRIC_INNER_PRODUCT))
    index.cp.spherical, index.cp.niter, index.cp.seed = True, 10, seed
    index.train(sample)
    del sample
    fill(index)
    idx = SimilarIndex(index, ids, False, kind="ivf_pq" if pq else "ivf_flat")
    idx.rerank = lambda rows: normalise(read(np.asarray(rows, dtype=np.int64)))
    idx.nprobe, idx.recall = calibrate_streamed(idx, n, read, target_recall=target_recall, k=k, queries=queries, seed=seed, block=block)
    return idx


def exact_neighbours_streamed(n: int, read: Callable[[np.ndarray], np.ndarray], rows: np.ndarray, k: int, *,
                              block: int = 65536) -> np.ndarray:
    """``exact_neighbours`` over rows read a block at a time."""
    q = normalise(read(rows))
    best_s = np.full((len(rows), k), -np.inf, dtype=np.float32)
    best_r = np.full((len(rows), k), -1, dtype=np.int64)
    for s in range(0, n, block):
        e = min(n, s + block)
        sims = q @ normalise(read(np.arange(s, e))).T
        own = (rows >= s) & (rows < e)
        sims[np.flatnonzero(own), rows[own] - s] = -np.inf
        cand_s = np.concatenate([best_s, sims], axis=1)
        cand_r = np.concatenate([best_r, np.broadcast_to(np.arange(s, e), sims.shape)], axis=1)
        top = np.argpartition(-cand_s, k - 1, axis=1)[:, :k]
        best_s = np.take_along_axis(cand_s, top, axis=1)
        best_r = np.take_along_axis(cand_r, top, axis=1)
    return best_r


def calibrate_streamed(idx: SimilarIndex, n: int, read: Callable[[np.ndarray], np.ndarray], *, target_recall: float = TARGET_RECALL,
                       k: int = 20, queries: int = 64, seed: int = 0, block: int = 65536) -> tuple[int, float]:
    """``calibrate_nprobe`` through ``search`` itself (so an ivf_pq index is measured re-ranked, as
    it answers), with exact neighbours found a block at a time."""
    k = min(k, n - 1)
    rng = np.random.default_rng(seed + 1)
    rows = np.sort(rng.choice(n, size=min(queries, n), replace=False))
    truth = exact_neighbours_streamed(n, read, rows, k, block=block)
    q = normalise(read(rows))
    recall = 0.0
    for nprobe in [p for p in NPROBE_LADDER if p < idx.index.nlist] + [idx.index.nlist]:
        hits = []
        for v, r, want in zip(q, rows, truth):
            got = _search_rows(idx, v[None], k, nprobe=nprobe, exclude_row=int(r))
            hits.append(len(set(got) & set(want.tolist())))
        recall = float(np.mean(hits)) / k
        if recall >= target_recall:
            return nprobe, recall
    return int(idx.index.nlist), recall


def _search_rows(idx: SimilarIndex, q: np.ndarray, k: int, *, nprobe: int | None = None, exclude_row: int | None = None) -> list[int]:
    rows, _s = _search(idx, q, k + (1 if exclude_row is not None else 0), nprobe=nprobe)
    return [r for r in rows if r != exclude_row][:k]


def _search(idx: SimilarIndex, q: np.ndarray, want: int, *, nprobe: int | None = None) -> tuple[list[int], list[float]]:
    """The ``want`` best rows for one normalised query and their cosines, best first; an ivf_pq
    index's candidates re-ranked exactly where it has a ``rerank``."""
    if not idx.exact:
        idx.index.nprobe = nprobe or idx.nprobe
    if idx.kind == "ivf_pq" and idx.rerank is not None:
        sims, rows = idx.index.search(q, min(len(idx), max(RERANK_AT_LEAST, 10 * want)))
        cand = rows[0][rows[0] >= 0]
        if not len(cand):
            return [], []
        exact = idx.rerank(cand) @ q[0]
        order = np.lexsort((cand, -exact))[:want]
        return cand[order].tolist(), exact[order].astype(float).tolist()
    sims, rows = idx.index.search(q, min(len(idx), want))
    keep = rows[0] >= 0
    return rows[0][keep].tolist(), sims[0][keep].astype(float).tolist()


def exact_neighbours(features: np.ndarray, rows: np.ndarray, k: int, *, step: int = 65536) -> np.ndarray:
    """Row numbers of the ``k`` most similar stored vectors to each of ``rows`` (itself left
    out), by brute force over normalised blocks: the ground truth for recall."""
    q = normalise(features[rows])
    best_s = np.full((len(rows), k), -np.inf, dtype=np.float32)
    best_r = np.full((len(rows), k), -1, dtype=np.int64)
    for s in range(0, len(features), step):
        sims = q @ normalise(features[s:s + step]).T
        own = (rows >= s) & (rows < s + len(sims[0]))
        sims[np.flatnonzero(own), rows[own] - s] = -np.inf
        cand_s = np.concatenate([best_s, sims], axis=1)
        cand_r = np.concatenate([best_r, np.broadcast_to(np.arange(s, s + sims.shape[1]), sims.shape)], axis=1)
        top = np.argpartition(-cand_s, k - 1, axis=1)[:, :k]
        best_s = np.take_along_axis(cand_s, top, axis=1)
        best_r = np.take_along_axis(cand_r, top, axis=1)
    return best_r


def calibrate_nprobe(index: Any, features: np.ndarray, *, target_recall: float = TARGET_RECALL, k: int = 20, queries: int = 64,
                     seed: int = 0) -> tuple[int, float]:
    """The smallest ``nprobe`` (from NPROBE_LADDER, up to every cell) whose mean recall@k over
    ``queries`` stored vectors, against exact search, reaches ``target_recall``; with the recall
    it reached."""
    n = len(features)
    k = min(k, n - 1)
    rng = np.random.default_rng(seed + 1)
    rows = np.sort(rng.choice(n, size=min(queries, n), replace=False))
    truth = exact_neighbours(features, rows, k)
    q = normalise(features[rows])
    recall = 0.0
    for nprobe in [p for p in NPROBE_LADDER if p < index.nlist] + [index.nlist]:
        index.nprobe = nprobe
        _s, got = index.search(q, k + 1)
        hits = [len(set(g[g != r][:k].tolist()) & set(t.tolist())) for g, r, t in zip(got, rows, truth)]
        recall = float(np.mean(hits)) / k
        if recall >= target_recall:
            return nprobe, recall
    return int(index.nlist), recall


def search(idx: SimilarIndex, query: np.ndarray, k: int, *, nprobe: int | None = None,
           exclude: int | None = None) -> list[tuple[int, float]]:
    """The ``k`` most similar images to ``query`` (one feature vector): [(image id, cosine)],
    best first; ``exclude``: an image id left out (the query image itself). ``nprobe``: cells
    probed (default: the index's own, measured when it was built)."""
    if len(idx) == 0 or k <= 0:
        return []
    q = normalise(np.asarray(query, dtype=np.float32).reshape(1, -1))
    want = min(len(idx), k + (1 if exclude is not None else 0))
    rows, sims = _search(idx, q, want, nprobe=nprobe)
    out = []
    for s, r in zip(sims, rows):
        image_id = int(idx.ids[r])
        if image_id == exclude:
            continue
        out.append((image_id, float(s)))
    return out[:k]


def save(idx: SimilarIndex, path: str | os.PathLike) -> None:
    """Write the index next to its ids (``path`` and ``path``.ids.npy), each atomically."""
    import faiss

    path = str(path)
    tmp = f"{path}.tmp"
    faiss.write_index(idx.index, tmp)
    os.replace(tmp, path)
    with open(f"{path}.ids.npy.tmp", "wb") as fh:
        np.save(fh, idx.ids)
    os.replace(f"{path}.ids.npy.tmp", f"{path}.ids.npy")
    with open(f"{path}.json.tmp", "w") as fh:
        json.dump({"nprobe": idx.nprobe, "recall": idx.recall, "kind": idx.kind}, fh)
    os.replace(f"{path}.json.tmp", f"{path}.json")


def load(path: str | os.PathLike) -> SimilarIndex:
    import faiss

    path = str(path)
    index = faiss.read_index(path)
    ids = np.load(f"{path}.ids.npy")
    exact = isinstance(index, faiss.IndexFlat)
    nprobe, recall = (0, 1.0) if exact else (DEFAULT_NPROBE, None)
    if os.path.exists(f"{path}.json"):  # saved with its measured nprobe
        with open(f"{path}.json") as fh:
            meta = json.load(fh)
        nprobe, recall = int(meta["nprobe"]), meta["recall"]
        kind = meta.get("kind", "")
    else:
        kind = ""
    kind = kind or ("flat" if exact else "ivf_pq" if isinstance(index, faiss.IndexIVFPQ) else "ivf_flat")
    return SimilarIndex(index, ids, exact=exact, nprobe=nprobe, recall=recall, kind=kind)
