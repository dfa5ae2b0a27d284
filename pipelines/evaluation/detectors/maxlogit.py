import numpy as np

from . import OPENOOD, Detector, Outputs, register_detector


@register_detector
class MaxLogit(Detector):
    """Maximum logit (Hendrycks et al., "Scaling out-of-distribution detection", ICML 2022)."""

    name = "maxlogit"
    label = "MaxLogit"
    paper = "Hendrycks et al., ICML 2022"
    reference = f"{OPENOOD} openood/postprocessors/maxlogit_postprocessor.py"

    def score(self, data: Outputs) -> np.ndarray:
        return data.logits.astype("float64").max(axis=1)
