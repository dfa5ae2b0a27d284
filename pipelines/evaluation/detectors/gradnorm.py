import numpy as np

from . import OPENOOD, Detector, Head, Outputs, register_detector, require_head, softmax


@register_detector
class GradNorm(Detector):
    """GradNorm (Huang, Geng, Li, NeurIPS 2021): the L1 norm of the gradient, with respect to the
    last layer's weight, of the cross-entropy between the softmax and all-ones targets, as
    OpenOOD's code takes it (targets = ones, loss = -sum_c log p_c). For a linear last layer the
    gradient is the outer product (C p - 1) h^T, so the score is sum_c |C p_c - 1| * sum_i |h_i|
    (the paper's uniform targets 1/C divide every score by C: the same ranking)."""

    name = "gradnorm"
    label = "GradNorm"
    paper = "Huang, Geng, Li, NeurIPS 2021"
    reference = f"{OPENOOD} openood/postprocessors/gradnorm_postprocessor.py"
    needs_head = True

    def fit(self, fit: Outputs, head: Head | None = None) -> Detector:
        self.head = require_head(head, "GradNorm")
        return self

    def score(self, data: Outputs) -> np.ndarray:
        h = data.features.astype(np.float64)
        p = softmax(self.head.logits(h))  # OpenOOD recomputes the logits from the features with the fc layer
        return np.abs(p.shape[1] * p - 1.0).sum(axis=1) * np.abs(h).sum(axis=1)
