"""WeiPer + KLD (Granz, Heurich, Landgraf, NeurIPS 2024, "WeiPer: OOD Detection using Weight
Perturbations of Class Projections").

The last layer's class projections are perturbed r times: every row w_c of the head becomes
w_c + delta |w_c| u, u a random unit vector (a fresh one per row and repeat), which gives r x C
"perturbed logits" per image. Per image, two histograms over its own values are taken: of its
d penultimate features and of its r C perturbed logits, each on `bins` equal bins spanning the
ID fit set's smallest to largest value (+1e-8); values outside fall in two outer bins that are
dropped. The ID fit set's mean histogram is the reference density p; an image's histogram q is
smoothed by a box filter of `smoothing` bins (replicated ends), both get epsilon added and are
normalised, and the symmetric KL divergence KL(p||q) + KL(q||p) is taken. The score (higher =
more ID) is

    -(KLsym(features) + lambda_1 KLsym(perturbed logits) - lambda_2 mean_r MSP(perturbed logits)).

Reference: the authors' OpenOOD integration, Weiper/OpenOOD/openood/postprocessors/weiper_kldiv/
utils.py and weiper_kldiv_postprocessor.py, as committed by M. Granz in the fork
omah03/weiper@f3cdf25c5c03 (the authors' own repository, mgranz/weiper_icml, could not be read
here); defaults from that README's ImageNet-1K (ResNet50) row; epsilons the function defaults.

Where this departs from the reference, by necessity or as a declared convention:
- the perturbations are drawn from a seeded NumPy generator (``seed``): repeat i's Gaussian
  matrix is the i-th ``standard_normal((C, d))`` draw of ``numpy.random.default_rng(seed)``, so
  runs are reproducible; the reference draws them from torch's unseeded global generator;
- float64 throughout (the reference computes in float32, where +1e-8 is lost on the top edge);
- the fit set's reference density is the mean over all its images at once (the reference
  averages the means of its loader's batches, which weights a short last batch more);
- ``histogram``: ``reference`` (default) reproduces the reference's histogram code, which
  averages the histograms of consecutive chunks of 1,000 values, so when an image's value
  count is not a multiple of 1,000 (d = 1,280) the values of the last, shorter chunk weigh
  more; ``pooled`` counts every value once.
The perturbed logits are never held whole (r C per image): they are computed block by block,
twice on the fit set (its smallest and largest value first, then the histograms), once per set
scored, so WeiPer costs about 4 x r times a head product. The r perturbed heads are drawn once
and kept while they take at most 2 GiB (``KEEP_HEADS_BYTES``), else drawn again on each pass.
"""
from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from . import Detector, DetectorError, Head, Outputs, Param, register_detector, require_head

HISTOGRAM_RULES = ("reference", "pooled")
CHUNK = 1000  # the reference histogram's chunk of values
ROWS = 2048  # images per block product
# the perturbed heads are kept between passes when they take at most this much (float64): r = 100
# heads of 1,000 x 1,280 (EfficientNet) take 1.0 GB, of 1,000 x 2,048 (ResNet-50) 1.6 GB. Drawing
# them again took 24 of WeiPer's 35 s in the demo's evaluation (13 passes), for the same values
KEEP_HEADS_BYTES = 2 * 2**30


def perturbed_heads(head: Head, r: int, delta: float, seed: int, per_block: int) -> Iterator[tuple[int, np.ndarray, np.ndarray]]:
    """(first repeat, weights [m C, d], bias [m C]) for blocks of ``per_block`` repeats: row c of
    repeat i is w_c + delta |w_c| g / |g|, g the i-th standard_normal((C, d)) draw's row c."""
    rng = np.random.default_rng(seed)
    w, b = head.weight, head.bias
    row_norm = np.linalg.norm(w, axis=1, keepdims=True)
    for start in range(0, r, per_block):
        m = min(per_block, r - start)
        block = np.empty((m, *w.shape))
        for j in range(m):
            g = rng.standard_normal(w.shape)
            g /= np.maximum(np.linalg.norm(g, axis=1, keepdims=True), 1e-12)
            block[j] = w + delta * g * row_norm
        yield start, block.reshape(m * w.shape[0], w.shape[1]), np.tile(b, m)


def bin_edges(lo: float, hi: float, bins: int) -> np.ndarray:
    """The reference's bins: ``bins`` + 1 equally spaced edges from lo to hi + 1e-8."""
    return lo + (np.arange(bins + 1, dtype=np.float64) / bins) * ((hi + 1e-8) - lo)


class Histograms:
    """Per image, the share of its values in each bin (outer bins included), accumulated over
    blocks of its values; ``total`` values per image, numbered in the order the blocks come."""

    def __init__(self, n: int, total: int, edges: np.ndarray, rule: str):
        self.edges, self.nb = edges, len(edges) - 1
        self.total = total
        # the reference: chunks of 1,000 values, each chunk's histogram weighted equally
        self.chunks = -(-total // CHUNK) if rule == "reference" else 1
        self.split = CHUNK * (self.chunks - 1)  # values at or after this position are in the last chunk
        self.head_counts = np.zeros((n, self.nb + 2))
        self.tail_counts = np.zeros((n, self.nb + 2))

    def bin_index(self, values: np.ndarray) -> np.ndarray:
        """Per value its bin: 0 below the first edge, i for edges[i - 1] <= v < edges[i], nb + 1 at or
        above the last edge; exactly as comparisons with the edges (np.searchsorted) decide, found by
        arithmetic and settled by the comparisons for values within rounding distance of an edge."""
        lo, hi = float(self.edges[0]), float(self.edges[-1])
        scale = self.nb / (hi - lo) if hi > lo else 0.0
        if scale == 0.0 or not np.isfinite(scale):
            return np.searchsorted(self.edges, values, side="right")
        t = values - lo
        t *= scale
        # rounding in t and in the edges is a few ulps of the largest magnitude involved, in bin units
        tol = 1e-6 + 64 * np.finfo(np.float64).eps * (max(abs(lo), abs(hi)) * scale + self.nb + 2)
        near = np.abs(t - np.rint(t)) < tol
        np.clip(t, -1.0, float(self.nb), out=t)
        idx = np.floor(t).astype(np.intp)
        idx += 1
        if near.any():
            idx[near] = np.searchsorted(self.edges, values[near], side="right")
        return idx

    def _count(self, values: np.ndarray) -> np.ndarray:
        m = len(values)
        idx = self.bin_index(values)
        idx += (np.arange(m) * (self.nb + 2))[:, None]
        return np.bincount(idx.ravel(), minlength=m * (self.nb + 2)).reshape(m, self.nb + 2)

    def add(self, rows: slice, first: int, values: np.ndarray) -> None:
        """``values`` [images, k]: the values first .. first + k - 1 of the images ``rows``."""
        cut = min(max(self.split - first, 0), values.shape[1])
        if cut:
            self.head_counts[rows] += self._count(values[:, :cut])
        if cut < values.shape[1]:
            self.tail_counts[rows] += self._count(values[:, cut:])

    def densities(self) -> np.ndarray:
        """[n, bins]: the interior bins' shares."""
        if self.chunks == 1:
            shares = self.tail_counts / self.total
        else:
            last = self.total - self.split
            shares = (self.head_counts / CHUNK + self.tail_counts / last) / self.chunks
        return shares[:, 1:-1]


def box_smooth(q: np.ndarray, size: int) -> np.ndarray:
    """Per row, the mean of ``size`` neighbouring bins, ends replicated, aligned as a
    'same'-padded convolution (left pad (size - 1) // 2)."""
    if size <= 1:
        return q.copy()
    left = (size - 1) // 2
    padded = np.concatenate([np.repeat(q[:, :1], left, axis=1), q, np.repeat(q[:, -1:], size - 1 - left, axis=1)], axis=1)
    c = np.cumsum(np.concatenate([np.zeros((len(q), 1)), padded], axis=1), axis=1)
    return (c[:, size:] - c[:, :-size]) / size


def symmetric_kl(p: np.ndarray, q: np.ndarray, smoothing: int, eps: float) -> np.ndarray:
    """KL(p||q') + KL(q'||p') per image: p the fit density [bins], q [n, bins] smoothed; eps added
    to both before normalising."""
    qs = box_smooth(q, smoothing) + eps
    qs /= qs.sum(axis=1, keepdims=True)
    ps = p + eps
    ps = ps / ps.sum()
    return ((ps[None, :] - qs) * (np.log(ps)[None, :] - np.log(qs))).sum(axis=1)


@register_detector
class WeiPer(Detector):
    """WeiPer + KLD: symmetric KL divergences of each image's feature histogram and perturbed-logit
    histogram from the ID fit set's, and the mean MSP over r randomly perturbed heads (module
    docstring: the formula, the reference and where it departs)."""

    name = "weiper"
    label = "WeiPer + KLD"
    paper = "Granz, Heurich, Landgraf, NeurIPS 2024"
    reference = ("omah03/weiper@f3cdf25c5c03 (a fork; the authors' commit of their OpenOOD integration) "
                 "Weiper/OpenOOD/openood/postprocessors/weiper_kldiv/utils.py, weiper_kldiv_postprocessor.py")
    needs_fit = True
    needs_head = True
    # docs/benchmarks.md, issue 32: 149 s wall on an idle 2-core machine for 10,000 fit / 20,000
    # scored images of 1,000 classes, where the 32 other output- and feature-level detectors take 44 s
    costly = ("computes r x C = 100,000 perturbed logits per image (about 4r head products): alone it costs about "
              "3x the other output- and feature-level detectors together")
    _src = "the authors' README, ImageNet-1K ResNet50"
    parameters = (
        Param("r", int, 100, 1, 1000, help="r, the number of perturbed heads", source=_src),
        Param("delta", float, 2.4, 0.0, 100.0, help="delta, each perturbation's length relative to its class row's", source=_src),
        Param("bins", int, 100, 2, 10_000, help="histogram bins between the ID fit set's extremes", source=_src),
        Param("smoothing", int, 40, 1, 1000, help="s1, box filter width (bins) on an image's feature histogram", source=_src),
        Param("smoothing_perturbed", int, 15, 1, 1000, help="s2, box filter width (bins) on an image's perturbed-logit histogram",
              source=_src),
        Param("lambda_1", float, 2.5, 0.0, 1000.0, help="weight of the perturbed logits' KL divergence", source=_src),
        Param("lambda_2", float, 0.25, 0.0, 1000.0, help="weight of the perturbed heads' mean MSP", source=_src),
        Param("epsilon", float, 0.01, 1e-12, 1.0, help="added to the feature densities before the KL divergence",
              source="the reference function's default"),
        Param("epsilon_perturbed", float, 0.025, 1e-12, 1.0, help="added to the perturbed-logit densities before the KL divergence",
              source="the reference function's default"),
        Param("seed", int, 0, 0, 2**32 - 1, help="seed of the random perturbations (NumPy default_rng)",
              source="ours (the reference is unseeded)"),
        Param("histogram", str, "reference", help="how an image's values are pooled into its histogram",
              source="the reference's chunks of 1,000 values, each weighted equally", choices=HISTOGRAM_RULES),
    )

    r: int
    _kept: list[tuple[int, np.ndarray, np.ndarray]] | None = None

    def _blocks(self) -> Iterator[tuple[int, np.ndarray, np.ndarray]]:
        classes = self.head.weight.shape[0]
        per_block = max(1, min(self.r, 4096 // max(classes, 1)))
        heads = perturbed_heads(self.head, self.r, float(self.params["delta"]), int(self.params["seed"]), per_block)
        if self.r * self.head.weight.size * 8 > KEEP_HEADS_BYTES:
            return heads  # drawn again on each pass: the same seed gives the same heads
        if self._kept is None:
            self._kept = list(heads)
        return iter(self._kept)

    def _pass(self, x: np.ndarray, hist: Histograms | None, msp_too: bool = True) -> tuple[float, float, np.ndarray]:
        """One pass over the perturbed heads: (smallest value, largest value, mean MSP per image, if
        asked); the perturbed logits are added to ``hist`` when given."""
        classes = self.head.weight.shape[0]
        lo, hi = np.inf, -np.inf
        msp = np.zeros(len(x))
        for first, w, b in self._blocks():
            m = len(b) // classes
            for s in range(0, len(x), ROWS):
                z = x[s:s + ROWS] @ w.T
                z += b
                if hist is None:
                    lo, hi = min(lo, float(z.min())), max(hi, float(z.max()))
                else:
                    hist.add(slice(s, s + ROWS), first * classes, z)
                if not msp_too:
                    continue
                zz = z.reshape(len(z), m, classes)
                top = zz.max(axis=2, keepdims=True)
                msp[s:s + ROWS] += (1.0 / np.exp(zz - top).sum(axis=2)).sum(axis=1)
        return lo, hi, msp / self.r

    def fit(self, fit: Outputs, head: Head | None = None) -> Detector:
        self.head = require_head(head, "WeiPer")
        self._kept = None
        if len(fit) == 0:
            raise DetectorError("WeiPer: the ID fit set is empty")
        if self.head.weight.shape[1] != fit.features.shape[1]:
            raise DetectorError(f"WeiPer: the head takes {self.head.weight.shape[1]}-d features, the ID fit set has "
                                f"{fit.features.shape[1]}-d")
        self.r, self.bins = int(self.params["r"]), int(self.params["bins"])
        x = fit.features.astype(np.float64)
        self.feature_edges = bin_edges(float(x.min()), float(x.max()), self.bins)
        lo, hi, _ = self._pass(x, None, msp_too=False)
        self.perturbed_edges = bin_edges(lo, hi, self.bins)
        feats, pert, _ = self._densities(x, msp_too=False)
        self.fit_density, self.fit_density_perturbed = feats.mean(axis=0), pert.mean(axis=0)
        return self

    def _densities(self, x: np.ndarray, msp_too: bool = True) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per image: its feature histogram, its perturbed-logit histogram, its mean MSP."""
        if not np.all(np.isfinite(x)):
            raise DetectorError("WeiPer: some features are NaN or infinite; re-extract the set (a histogram needs finite values)")
        rule = str(self.params["histogram"])
        feats = Histograms(len(x), x.shape[1], self.feature_edges, rule)
        feats.add(slice(0, len(x)), 0, x)
        pert = Histograms(len(x), self.r * self.head.weight.shape[0], self.perturbed_edges, rule)
        _, _, msp = self._pass(x, pert, msp_too)
        return feats.densities(), pert.densities(), msp

    def score(self, data: Outputs) -> np.ndarray:
        x = data.features.astype(np.float64)
        feats, pert, msp = self._densities(x)
        kl = symmetric_kl(self.fit_density, feats, int(self.params["smoothing"]), float(self.params["epsilon"]))
        kl_pert = symmetric_kl(self.fit_density_perturbed, pert, int(self.params["smoothing_perturbed"]),
                               float(self.params["epsilon_perturbed"]))
        return -(kl + float(self.params["lambda_1"]) * kl_pert - float(self.params["lambda_2"]) * msp)
