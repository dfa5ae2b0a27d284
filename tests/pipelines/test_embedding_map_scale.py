"""The embedding map at any size (issue 56): fitted on a class-stratified sample, the rest placed a
block at a time, so memory does not grow with the pool; up to the sample size it is the map of
every image, as before."""
from __future__ import annotations

import numpy as np

from pipelines.features.embedding_map import project, project_streamed, stratified_sample


def _clusters(n=3000, k=5, dim=24, seed=0):
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(k, dim)) * 4
    label = rng.integers(0, k, n)
    return (centres[label] + rng.normal(size=(n, dim))).astype(np.float32), label


def test_the_sample_holds_every_class_and_is_the_same_for_the_same_seed():
    strata = np.repeat(np.arange(40), [1] + [99] * 39)  # class 0 has one image
    s = stratified_sample(len(strata), 50, strata, seed=3)
    assert len(s) == 50 and np.all(np.diff(s) > 0) and set(strata[s]) == set(range(40))
    assert np.array_equal(s, stratified_sample(len(strata), 50, strata, seed=3))
    assert np.array_equal(stratified_sample(10, 50, None), np.arange(10))


def test_up_to_the_sample_size_it_is_the_map_of_every_image():
    x, _label = _clusters(n=200)
    xy, made = project_streamed(len(x), lambda pos: x[pos], method="pca", fit_max=500)
    assert np.array_equal(xy, project(x, method="pca")) and made["placed"] == 0


def test_above_it_the_rest_is_read_in_blocks_and_lands_with_its_class():
    x, label = _clusters()
    asked = []

    def read(pos):
        asked.append(len(pos))
        return x[pos]

    for method in ("pca", "umap"):
        asked.clear()
        xy, made = project_streamed(len(x), read, method=method, fit_max=300, strata=label, block=500)
        assert made["fitted"] == 300 and made["placed"] == len(x) - 300 and "stratified sample of 300" in made["how"]
        assert max(asked) <= 500  # never the whole pool at once
        assert xy.shape == (len(x), 2) and xy.min() >= 0 and xy.max() <= 1
        fit = stratified_sample(len(x), 300, label)
        placed = np.setdiff1d(np.arange(len(x)), fit)
        centre = {c: xy[fit][label[fit] == c].mean(axis=0) for c in np.unique(label)}
        nearest = np.array([min(centre, key=lambda c: np.linalg.norm(xy[i] - centre[c])) for i in placed])
        assert (nearest == label[placed]).mean() >= 0.95, method  # a placed image sits with its class's fitted images
