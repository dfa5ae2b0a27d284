import numpy as np

from . import Detector, Head, Outputs, register_detector
from .mahalanobis import class_gaussians, min_distances


def l2_normalised(outputs: Outputs) -> Outputs:
    x = outputs.features.astype(np.float64)
    return Outputs(features=x / np.linalg.norm(x, axis=1, keepdims=True), logits=outputs.logits, labels=outputs.labels)


@register_detector
class MahalanobisPP(Detector):
    """Mahalanobis++ (Mueller & Hein, ICML 2025): Lee et al.'s Mahalanobis score (class means, one
    shared covariance, minimum over classes) on L2-normalised penultimate features."""

    name = "mahalanobis_pp"
    label = "Mahalanobis++"
    paper = "Mueller & Hein, ICML 2025"
    reference = "mueller-mp/maha-norm (the paper's code: x / |x|_2, then Mahalanobis as OpenOOD's mds_postprocessor.py)"
    needs_fit = True

    def fit(self, fit: Outputs, head: Head | None = None) -> Detector:
        self.means, self.precision, _ = class_gaussians(l2_normalised(fit), "Mahalanobis++")
        return self

    def score(self, data: Outputs) -> np.ndarray:
        x = l2_normalised(data).features.astype(np.float64)
        return -min_distances(x, self.means, self.precision).min(axis=1)
