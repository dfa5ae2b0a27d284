import numpy as np

from . import Detector, DetectorError, Head, Outputs, register_detector
from .mahalanobis import min_distances, shared_precision


def l2_normalised(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


@register_detector
class MahalanobisPP(Detector):
    """Mahalanobis++ (Mueller & Hein, ICML 2025): Lee et al.'s Mahalanobis score (class means, one
    shared covariance, minimum over classes) on L2-normalised penultimate features (normalised
    in float64)."""

    name = "mahalanobis_pp"
    label = "Mahalanobis++"
    paper = "Mueller & Hein, ICML 2025"
    reference = "mueller-mp/maha-norm (the paper's code: x / |x|_2, then Mahalanobis as OpenOOD's mds_postprocessor.py)"
    needs_fit = True

    def fit(self, fit: Outputs, head: Head | None = None) -> Detector:
        if fit.labels is None or not np.any(fit.labels >= 0):
            raise DetectorError("Mahalanobis++ needs class labels on the ID fit set (images in wnid folders of ID classes)")
        keep = fit.labels >= 0
        x = l2_normalised(fit.features[keep])
        classes, inverse = np.unique(fit.labels[keep], return_inverse=True)
        sums = np.zeros((len(classes), x.shape[1]))
        np.add.at(sums, inverse, x)
        self.means = sums / np.bincount(inverse)[:, None]
        self.precision = shared_precision(x, x - self.means[inverse])
        return self

    def score(self, data: Outputs) -> np.ndarray:
        return -min_distances(l2_normalised(data.features), self.means, self.precision).min(axis=1)
