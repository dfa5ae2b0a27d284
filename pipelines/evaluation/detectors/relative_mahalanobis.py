import numpy as np

from . import OPENOOD, Detector, Head, Outputs, register_detector
from .mahalanobis import class_gaussians, min_class_distances, min_distances, shared_precision


@register_detector
class RelativeMahalanobis(Detector):
    """Relative Mahalanobis (Ren et al., 2021): the class-conditional distance minus the distance
    to one global Gaussian fitted on all ID fit features; score = -min_c (MD_c - MD_0)."""

    name = "relative_mahalanobis"
    label = "Relative Mahalanobis"
    paper = "Ren et al., arXiv:2106.09022, 2021"
    reference = f"{OPENOOD} openood/postprocessors/rmds_postprocessor.py"
    needs_fit = True

    def fit(self, fit: Outputs, head: Head | None = None) -> Detector:
        self.means, self.precision, feats = class_gaussians(fit, "Relative Mahalanobis")
        self.global_mean = feats.mean(axis=0, keepdims=True)
        self.global_precision = shared_precision(feats, feats - self.global_mean)
        return self

    def score(self, data: Outputs) -> np.ndarray:
        x = data.features.astype(np.float64)
        md = min_class_distances(data, self.means, self.precision)
        md0 = min_distances(x, self.global_mean, self.global_precision)[:, 0]
        return -(md - md0)
