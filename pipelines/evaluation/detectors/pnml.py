import numpy as np

from . import Detector, DetectorError, Head, Outputs, register_detector, softmax
from .mahalanobis import spd_inverse

PNML_REFERENCE = "kobybibas/pnml_ood_detection@0533589204b0 src/score_utils.py (the authors' code)"


def pnml_features(x: np.ndarray) -> np.ndarray:
    """The reference's features: a leading 1 (the bias term), the rest divided by its norm."""
    x = x.astype(np.float64)
    return np.hstack([np.ones((len(x), 1)), x / np.linalg.norm(x, axis=1, keepdims=True)])


@register_detector
class PNML(Detector):
    """Single-layer pNML (Bibas, Feder, Hassner, NeurIPS 2021): with X the ID fit features (bias
    term prepended, normalised), P = pinv(X^T X) and P_bot = I - P X^T X; for a test feature x,
    g = max(x P_bot x, x P x / (1 + x P x)); the genie's probabilities q_c = p_c / (p_c + (1 - p_c)
    p_c^g) from the model's softmax p; the regret log(sum_c q_c) / log(C) is high out of
    distribution, and the score is minus the regret. Where p_c underflows to 0 the reference's
    q_c is 0/0; its limit, 0, is taken."""

    name = "pnml"
    label = "pNML"
    paper = "Bibas, Feder, Hassner, NeurIPS 2021"
    reference = PNML_REFERENCE
    needs_fit = True

    def fit(self, fit: Outputs, head: Head | None = None) -> Detector:
        if len(fit) == 0:
            raise DetectorError("pNML: the ID fit set is empty")
        x = pnml_features(fit.features)
        gram = x.T @ x
        # X^T X is symmetric: its inverse by Cholesky where positive definite and well conditioned (where
        # pinv is the inverse), else the pseudo-inverse by eigh instead of an SVD
        inverse = spd_inverse(gram)
        self.p_parallel = np.linalg.pinv(gram, hermitian=True) if inverse is None else inverse
        self.p_bot = np.eye(len(gram)) - self.p_parallel @ gram
        return self

    def score(self, data: Outputs) -> np.ndarray:
        x = pnml_features(data.features)
        par = np.sum((x @ self.p_parallel) * x, axis=1)
        bot = np.sum((x @ self.p_bot) * x, axis=1)
        g = np.maximum(bot, par / (1.0 + par))[:, None]
        p = softmax(data.logits)
        with np.errstate(divide="ignore", invalid="ignore"):
            q = np.where(p > 0, p / (p + (1.0 - p) * p ** g), 0.0)
        return -np.log(q.sum(axis=1)) / np.log(p.shape[1])
