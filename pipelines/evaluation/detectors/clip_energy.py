import numpy as np

from . import Detector, Head, Outputs, Param, logsumexp, register_detector, require_text
from .clip_mcm import MCM_REF


@register_detector
class ClipEnergy(Detector):
    """Energy on a zero-shot CLIP head (Liu et al., NeurIPS 2020, as MCM's code computes it):
    T * log sum_i exp(cos(image, class i) / T), higher = more ID. ImageNet-X's benchmark runs it at
    T = 0.01, i.e. on CLIP's logits (100 x cosine) scaled back by 0.01."""

    name = "clip_energy"
    label = "Energy (zero-shot CLIP)"
    paper = "Liu et al., NeurIPS 2020; on CLIP as Ming et al., NeurIPS 2022"
    reference = MCM_REF.replace("score MCM", "score energy")
    needs_text = True
    parameters = (Param("temperature", float, 0.01, 1e-4, 100.0, help="temperature on cosine similarities",
                        source="ImageNet-X's code (0.01: CLIP's logit scale)"),)

    def fit(self, fit: Outputs, head: Head | None = None) -> Detector:
        text = require_text(self.text, "Energy (zero-shot)")
        self.notes.append(f"temperature {self.params['temperature']:g} on cosine similarities (CLIP logits / {text.logit_scale:g}); "
                          "score T x logsumexp(cos / T)")
        return self

    def score(self, data: Outputs) -> np.ndarray:
        t = self.params["temperature"]
        return t * logsumexp(require_text(self.text, "Energy (zero-shot)").cosines(data.features) / t)
