import numpy as np

from . import OPENOOD, Detector, Outputs, logsumexp, register_detector


@register_detector
class Energy(Detector):
    """Negative free energy, log sum_c exp(o_c) (Liu et al., NeurIPS 2020; temperature 1)."""

    name = "energy"
    label = "Energy"
    paper = "Liu et al., NeurIPS 2020"
    reference = f"{OPENOOD} openood/postprocessors/ebo_postprocessor.py (temperature 1)"

    def score(self, data: Outputs) -> np.ndarray:
        return logsumexp(data.logits)
