import numpy as np

from . import OPENOOD, Detector, Head, Outputs, class_means, register_detector, shared


def shared_precision(features: np.ndarray, centred: np.ndarray) -> np.ndarray:
    """Pseudo-inverse of the covariance of already centred features (pinv copes with d > n)."""
    cov = centred.T @ centred / max(len(features), 1)
    return np.linalg.pinv(cov, hermitian=True)


def min_distances(x: np.ndarray, means: np.ndarray, precision: np.ndarray) -> np.ndarray:
    """[n, K] squared Mahalanobis distances (x - mu_k)^T P (x - mu_k), without an n*K*d tensor."""
    xp = x @ precision
    return (np.sum(xp * x, axis=1)[:, None] - 2.0 * xp @ means.T + np.sum((means @ precision) * means, axis=1)[None, :])


def min_class_distances(data: Outputs, means: np.ndarray, precision: np.ndarray) -> np.ndarray:
    """[n] the smallest squared class distance of each image of ``data``, computed once per set and
    class Gaussians (Mahalanobis and Relative Mahalanobis score with the same ones)."""
    return shared(data, ("min_class_distances", id(means), id(precision)),
                  lambda: min_distances(data.features.astype(np.float64), means, precision).min(axis=1), means, precision)


def class_gaussians(fit: Outputs, what: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(class means, shared precision, labelled fit features): Lee et al.'s tied-covariance model,
    computed once per fit set for every detector that uses it."""
    return shared(fit, ("class_gaussians",), lambda: _class_gaussians(fit, what))


def _class_gaussians(fit: Outputs, what: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    classes, means = class_means(fit, what)  # (it checks that the fit set has labels)
    assert fit.labels is not None
    keep = fit.labels >= 0
    feats = fit.features[keep].astype(np.float64)
    index = np.searchsorted(classes, fit.labels[keep])
    return means, shared_precision(feats, feats - means[index]), feats


@register_detector
class Mahalanobis(Detector):
    """Mahalanobis distance to the closest class mean under one shared covariance (Lee et al.,
    NeurIPS 2018; NINCO app. C, on the penultimate features, no input preprocessing)."""

    name = "mahalanobis"
    label = "Mahalanobis"
    paper = "Lee et al., NeurIPS 2018"
    reference = f"{OPENOOD} openood/postprocessors/mds_postprocessor.py"
    needs_fit = True

    def fit(self, fit: Outputs, head: Head | None = None) -> Detector:
        self.means, self.precision, _ = class_gaussians(fit, "Mahalanobis")
        return self

    def score(self, data: Outputs) -> np.ndarray:
        return -min_class_distances(data, self.means, self.precision)
