import numpy as np

from . import OPENOOD, Detector, Head, Outputs, class_means, register_detector, softmax
from .cosine import cosines


@register_detector
class MCM(Detector):
    """MCM / RCos (Ming et al., NeurIPS 2022; NINCO app. C): the maximum of the softmax over the
    cosines to the class means (temperature 1)."""

    name = "mcm"
    label = "MCM / RCos"
    paper = "Ming et al., NeurIPS 2022"
    reference = f"{OPENOOD} openood/postprocessors/mcm_postprocessor.py (temperature 1)"
    needs_fit = True

    def fit(self, fit: Outputs, head: Head | None = None) -> Detector:
        _, self.means = class_means(fit, "MCM")
        return self

    def score(self, data: Outputs) -> np.ndarray:
        return softmax(cosines(data.features, self.means)).max(axis=1)
