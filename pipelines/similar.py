"""Find similar: the nearest stored feature vectors to one image's, for browsing (docs/browse.md,
"Find similar"). Features are L2-normalised, so inner product is cosine similarity, as in the
duplicate search (``pipelines.near_dups``). Below ``exact_below`` vectors the index is exact
(faiss ``IndexFlatIP``); above, it is faiss's inverted file (``IndexIVFFlat``): k-means
(spherical) cells, about 4 sqrt(n) of them as the duplicate search uses, and a query compares
itself with the members of the ``nprobe`` cells nearest it. Unlike the duplicate search's batch
join, which re-clusters for every run, this index is built once per feature set and kept on disk
(``save`` / ``load``), since it answers one query at a time from the web app.
recall@20 against exact search and the latency over a million vectors: benchmarks/bench_grid.py.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import numpy as np

from .near_dups import DEFAULT_EXACT_BELOW, normalise

DEFAULT_NPROBE = 48


@dataclass
class SimilarIndex:
    index: Any  # a faiss index over the normalised vectors
    ids: np.ndarray  # int64 image id of each row
    exact: bool

    def __len__(self) -> int:
        return len(self.ids)


def build_index(features: np.ndarray, ids: np.ndarray, *, exact_below: int = DEFAULT_EXACT_BELOW, nlist: int | None = None,
                train_size: int | None = None, seed: int = 0) -> SimilarIndex:
    """An index over ``features`` (rows), whose rows are the images ``ids``."""
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
        return SimilarIndex(flat, ids, True)
    nlist = nlist or int(4 * np.sqrt(len(features)))
    rng = np.random.default_rng(seed)
    sample = normalise(features[np.sort(rng.choice(len(features), size=min(len(features), train_size or nlist * 40), replace=False))])
    index = faiss.IndexIVFFlat(faiss.IndexFlatIP(d), d, nlist, faiss.METRIC_INNER_PRODUCT)
    index.cp.spherical, index.cp.niter, index.cp.seed = True, 10, seed
    index.train(sample)
    del sample
    for s in range(0, len(features), step):
        index.add(normalise(features[s:s + step]))
    return SimilarIndex(index, ids, False)


def search(idx: SimilarIndex, query: np.ndarray, k: int, *, nprobe: int = DEFAULT_NPROBE,
           exclude: int | None = None) -> list[tuple[int, float]]:
    """The ``k`` most similar images to ``query`` (one feature vector): [(image id, cosine)],
    best first; ``exclude``: an image id left out (the query image itself)."""
    if len(idx) == 0 or k <= 0:
        return []
    q = normalise(np.asarray(query, dtype=np.float32).reshape(1, -1))
    if not idx.exact:
        idx.index.nprobe = nprobe
    want = min(len(idx), k + (1 if exclude is not None else 0))
    sims, rows = idx.index.search(q, want)
    out = []
    for s, r in zip(sims[0], rows[0]):
        if r < 0:
            continue
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


def load(path: str | os.PathLike) -> SimilarIndex:
    import faiss

    path = str(path)
    index = faiss.read_index(path)
    ids = np.load(f"{path}.ids.npy")
    return SimilarIndex(index, ids, exact=isinstance(index, faiss.IndexFlat))
