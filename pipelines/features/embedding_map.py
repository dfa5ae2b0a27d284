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
