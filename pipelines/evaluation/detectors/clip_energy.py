import numpy as np

from . import Detector, Head, Outputs, Param, logsumexp, register_detector, require_text
from .clip_mcm import MCM_REF


@register_detector
class ClipEnergy(Detector):
    """Energy on a zero-shot CLIP head (Liu et al., NeurIPS 2020, as MCM's code computes it):
    T * log sum_i exp(cos(image, class i) / T), higher = more ID. ImageNet-X's benchmark runs it at
    T = 0.01, i.e. on CLIP's logits (100 x cosine) scaled back by 0.01, the default here; MCM's own
    command line runs it at T = 1 on cosines (eval_ood_detection.py's ``--T``, default 1, which
    its scripts/eval_mcm.sh does not set): ``temperature`` 1 gives that. The temperature changes
    the ranking, so every result names it (its settings and its note)."""

    name = "clip_energy"
    label = "Energy (zero-shot CLIP)"
    paper = "Liu et al., NeurIPS 2020; on CLIP as Ming et al., NeurIPS 2022"
    reference = MCM_REF.replace("score MCM", "score energy")
    needs_text = True
    parameters = (Param("temperature", float, 0.01, 1e-4, 100.0, help="temperature on cosine similarities",
                        source="ImageNet-X's code (0.01: CLIP's logit scale); MCM's command line: 1"),)

    def fit(self, fit: Outputs, head: Head | None = None) -> Detector:
        text = require_text(self.text, "Energy (zero-shot)")
        t = self.params["temperature"]
        whose = {0.01: "ImageNet-X's setting", 1.0: "MCM's setting"}.get(t, "neither ImageNet-X's 0.01 nor MCM's 1")
        self.notes.append(f"temperature {t:g} on cosine similarities (CLIP logits / {text.logit_scale:g}), {whose}; "
                          "score T x logsumexp(cos / T)")
        return self

    def score(self, data: Outputs) -> np.ndarray:
        t = self.params["temperature"]
        return t * logsumexp(require_text(self.text, "Energy (zero-shot)").cosines(data.features) / t)
