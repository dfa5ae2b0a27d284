"""The embedding map (docs/browse.md, "Embedding map"): a 2-D picture of a source's stored
features, where images the classifier sees alike lie close together, so a curator can box or
lasso a cluster and look at it.

Features are L2-normalised (cosine geometry, as everywhere else here), reduced to at most 50
dimensions with PCA (scikit-learn), then laid out with UMAP (umap-learn; McInnes, Healy and
Melville 2018, "UMAP: Uniform Manifold Approximation and Projection for Dimension Reduction") or,
with ``method="pca"``, the first two principal components (much faster: UMAP took 84 s for 5,000
vectors on the 2-core VM, numba's compiling included). Coordinates are scaled into [0, 1] on both axes.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from pipelines.features.near_dups import normalise

METHODS = ("umap", "pca")


def project(features: np.ndarray, *, method: str = "umap", seed: int = 0, n_neighbors: int = 15, min_dist: float = 0.1,
            pca_dims: int = 50) -> np.ndarray:
    """[n, 2] float32 coordinates in [0, 1] for the rows of ``features``."""
    if method not in METHODS:
        raise ValueError(f"unknown map method {method!r}: use one of {', '.join(METHODS)}")
    n = len(features)
    if n == 0:
        return np.zeros((0, 2), dtype=np.float32)
    if n < 3:
        return np.full((n, 2), 0.5, dtype=np.float32)
    from sklearn.decomposition import PCA

    x = normalise(features)
    dims = max(2, min(pca_dims, x.shape[1], n - 1))
    reduced = PCA(n_components=dims, random_state=seed).fit_transform(x)
    if method == "pca" or n <= n_neighbors + 1:
        xy = reduced[:, :2]
    else:
        import umap

        xy = umap.UMAP(n_components=2, n_neighbors=n_neighbors, min_dist=min_dist, random_state=seed).fit_transform(reduced)
    xy = np.asarray(xy, dtype=np.float64)
    lo, hi = xy.min(axis=0), xy.max(axis=0)
    span = np.where(hi - lo > 0, hi - lo, 1.0)
    return ((xy - lo) / span).astype(np.float32)


# -- a map of any size (issue 56) --------------------------------------------------------------------

FIT_MAX = 50_000  # points the layout is fitted on (the page draws at most as many)
PLACE_NEIGHBOURS = 10
BLOCK = 65_536


def stratified_sample(n: int, size: int, strata: np.ndarray | None, *, seed: int = 0) -> np.ndarray:
    """``size`` of ``n`` rows (sorted positions), seeded: one row of every stratum (class) first
    where there is room, the rest drawn uniformly from the others, so a small class still appears."""
    rng = np.random.default_rng(seed)
    if size >= n:
        return np.arange(n)
    order = rng.permutation(n)
    chosen = np.zeros(n, dtype=bool)
    if strata is not None and len(strata) == n:
        _u, first = np.unique(strata[order], return_index=True)  # each stratum's first row in the random order
        chosen[order[np.sort(first)[:size]]] = True
    rest = order[~chosen[order]][:size - int(chosen.sum())]
    chosen[rest] = True
    return np.flatnonzero(chosen)


def project_streamed(n: int, read: Callable[[np.ndarray], np.ndarray], *, method: str = "umap", seed: int = 0, fit_max: int = FIT_MAX,
                     strata: np.ndarray | None = None, block: int = BLOCK) -> tuple[np.ndarray, dict]:
    """[n, 2] coordinates in [0, 1] for ``n`` rows read through ``read(positions) -> features``,
    at a memory that does not grow with ``n``: up to ``fit_max`` rows are laid out as ``project``
    does; above it the layout is fitted on a stratified sample of ``fit_max`` rows (PCA, then UMAP
    or the first two components), and every other row, read a block at a time, is reduced with
    the fitted PCA and placed at the inverse-distance mean of its ``PLACE_NEIGHBOURS`` nearest
    fitted rows in that space (PCA maps take the components themselves). Returns the coordinates
    and how they were made."""
    if method not in METHODS:
        raise ValueError(f"unknown map method {method!r}: use one of {', '.join(METHODS)}")
    if n <= fit_max:
        xy = project(read(np.arange(n)), method=method, seed=seed) if n else np.zeros((0, 2), dtype=np.float32)
        return xy, {"fitted": n, "placed": 0, "how": f"{method} of all {n} images"}
    from sklearn.decomposition import PCA

    fit = stratified_sample(n, fit_max, strata, seed=seed)
    x = normalise(read(fit))
    dims = max(2, min(50, x.shape[1], len(fit) - 1))
    pca = PCA(n_components=dims, random_state=seed).fit(x)
    reduced = pca.transform(x).astype(np.float32)
    del x
    if method == "pca":
        fitted_xy = reduced[:, :2]
    else:
        import umap

        fitted_xy = umap.UMAP(n_components=2, n_neighbors=15, min_dist=0.1, random_state=seed).fit_transform(reduced)
    fitted_xy = np.asarray(fitted_xy, dtype=np.float32)
    xy = np.empty((n, 2), dtype=np.float32)
    xy[fit] = fitted_xy
    others = np.setdiff1d(np.arange(n), fit, assume_unique=True)
    index = None
    if method != "pca":
        import faiss

        index = faiss.IndexFlatL2(reduced.shape[1])
        index.add(np.ascontiguousarray(reduced))
    for s in range(0, len(others), block):
        pos = others[s:s + block]
        r = pca.transform(normalise(read(pos))).astype(np.float32)
        if index is None:
            xy[pos] = r[:, :2]
            continue
        d2, nn = index.search(np.ascontiguousarray(r), PLACE_NEIGHBOURS)
        w = 1.0 / (np.sqrt(np.maximum(d2, 0)) + 1e-6)
        xy[pos] = (fitted_xy[nn] * w[:, :, None]).sum(axis=1) / w.sum(axis=1, keepdims=True)
    lo, hi = xy.min(axis=0), xy.max(axis=0)
    span = np.where(hi - lo > 0, hi - lo, 1.0)
    placement = ("the first two principal components of the fitted PCA" if method == "pca"
                 else f"the inverse-distance mean of its {PLACE_NEIGHBOURS} nearest fitted images in the fitted PCA space")
    how = (f"{method} fitted on a class-stratified sample of {len(fit)} of the {n} images; each of the other {len(others)} "
           f"placed at {placement}")
    return ((xy - lo) / span).astype(np.float32), {"fitted": int(len(fit)), "placed": int(len(others)), "how": how}
