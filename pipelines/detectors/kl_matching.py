import numpy as np

from . import Detector, DetectorError, Head, Outputs, register_detector, softmax


@register_detector
class KLMatching(Detector):
    """KL matching (Hendrycks et al., ICML 2022; NINCO app. C): d_c is the mean softmax vector of
    the ID fit images the model assigns to class c; score = -min_c KL(p || d_c)."""

    name = "kl_matching"
    label = "KL-Matching"
    paper = "Hendrycks et al., ICML 2022"
    needs_fit = True

    def fit(self, fit: Outputs, head: Head | None = None) -> Detector:
        p = softmax(fit.logits)
        pred = p.argmax(axis=1)
        classes, inverse = np.unique(pred, return_inverse=True)
        if len(classes) == 0:
            raise DetectorError("KL-Matching: the ID fit set is empty")
        sums = np.zeros((len(classes), p.shape[1]))
        np.add.at(sums, inverse, p)
        self.log_d = np.log(np.clip(sums / np.bincount(inverse)[:, None], 1e-12, None))
        return self

    def score(self, data: Outputs) -> np.ndarray:
        p = softmax(data.logits)
        neg_entropy = np.sum(p * np.log(np.clip(p, 1e-300, None)), axis=1)
        kl = neg_entropy[:, None] - p @ self.log_d.T  # KL(p || d_c) for every matched class
        return -kl.min(axis=1)
