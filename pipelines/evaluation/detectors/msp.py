import numpy as np

from . import OPENOOD, Detector, Outputs, register_detector, softmax


@register_detector
class MSP(Detector):
    """Maximum softmax probability (Hendrycks & Gimpel, ICLR 2017)."""

    name = "msp"
    label = "MSP"
    paper = "Hendrycks & Gimpel, ICLR 2017"
    reference = f"{OPENOOD} openood/postprocessors/base_postprocessor.py (max softmax)"

    def score(self, data: Outputs) -> np.ndarray:
        return softmax(data.logits).max(axis=1)
