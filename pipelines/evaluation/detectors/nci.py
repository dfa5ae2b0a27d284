import numpy as np

from . import OPENOOD, Detector, Head, Outputs, Param, register_detector, require_head


@register_detector
class NCI(Detector):
    """NCI (Liu & Qin, CVPR 2025, "Detecting out-of-distribution through the lens of neural
    collapse"): w_pred . (h - mu) / |h - mu| + alpha |h|_1, mu the mean ID fit feature and w_pred
    the last layer's row of the predicted class (alpha = 1e-4, OpenOOD's nci.yml)."""

    name = "nci"
    label = "NCI"
    paper = "Liu & Qin, CVPR 2025"
    reference = f"{OPENOOD} openood/postprocessors/nci_postprocessor.py"
    needs_fit = True
    needs_head = True
    parameters = (Param("alpha", float, 1e-4, 0.0, 10.0, help="weight of the feature's L1 norm", source="OpenOOD's nci.yml"),)

    def fit(self, fit: Outputs, head: Head | None = None) -> Detector:
        self.head = require_head(head, "NCI")
        self.train_mean = fit.features.astype(np.float64).mean(axis=0)
        return self

    def score(self, data: Outputs) -> np.ndarray:
        x = data.features.astype(np.float64)
        pred = data.logits.argmax(axis=1)
        c = x - self.train_mean
        return (np.sum(self.head.weight[pred] * c, axis=1) / np.linalg.norm(c, axis=1)
                + float(self.params["alpha"]) * np.abs(x).sum(axis=1))
