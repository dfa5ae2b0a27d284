import numpy as np

from . import PYTORCH_OOD, Detector, Outputs, register_detector, softmax


@register_detector
class Entropy(Detector):
    """Negative predictive entropy, sum_c p_c log p_c (the entropy confidence of C-OOD, Galil et al., ICLR 2023)."""

    name = "entropy"
    label = "Entropy"
    paper = "Galil et al., ICLR 2023"
    reference = f"{PYTORCH_OOD} src/pytorch_ood/detector/entropy.py"

    def score(self, data: Outputs) -> np.ndarray:
        p = softmax(data.logits)
        return np.sum(p * np.log(np.clip(p, 1e-300, None)), axis=1)
