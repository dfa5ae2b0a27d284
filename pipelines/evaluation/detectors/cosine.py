import numpy as np

from . import Detector, Head, Outputs, class_means, register_detector


def cosines(features: np.ndarray, means: np.ndarray) -> np.ndarray:
    x = features.astype(np.float64)
    x = x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)
    m = means / np.maximum(np.linalg.norm(means, axis=1, keepdims=True), 1e-12)
    return x @ m.T


@register_detector
class Cosine(Detector):
    """Cosine similarity to the closest ID class mean (NINCO app. C): max_c cos(h, mu_c)."""

    name = "cosine"
    label = "Cosine"
    paper = "Bitterwolf et al., ICML 2023 (app. C)"
    reference = "NINCO app. C (formula; no library implementation)"
    needs_fit = True

    def fit(self, fit: Outputs, head: Head | None = None) -> Detector:
        _, self.means = class_means(fit, "Cosine")
        return self

    def score(self, data: Outputs) -> np.ndarray:
        return cosines(data.features, self.means).max(axis=1)

