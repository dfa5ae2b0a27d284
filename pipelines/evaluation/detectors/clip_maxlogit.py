import numpy as np

from . import Detector, Head, Outputs, register_detector, require_text

# MCM's max-logit branch arrives in 640657ea67cb ("add support for max-logit"): at 006fb40c23b6,
# the commit the other MCM scores cite, the option is accepted by eval_ood_detection.py but
# get_ood_scores_clip has no branch for it and returns no score
MAXLOGIT_REF = "deeplearning-wisc/MCM@640657ea67cb utils/detection_util.py (get_ood_scores_clip, score max-logit)"


@register_detector
class ClipMaxLogit(Detector):
    """Maximum logit of a zero-shot CLIP head (Hendrycks et al., ICML 2022, as MCM's and
    ImageNet-X's code compute it): the largest cosine similarity between the image and an ID
    class's text. Any temperature (CLIP's logit scale 100, or ImageNet-X's 0.01) rescales it
    without changing any ranking, so none is applied: the score is on the cosine scale."""

    name = "clip_maxlogit"
    label = "MaxLogit (zero-shot CLIP)"
    paper = "Hendrycks et al., ICML 2022; on CLIP as Ming et al., NeurIPS 2022"
    reference = MAXLOGIT_REF
    needs_text = True

    def fit(self, fit: Outputs, head: Head | None = None) -> Detector:
        text = require_text(self.text, "MaxLogit (zero-shot)")
        self.notes.append(f"maximum cosine similarity (CLIP logit / {text.logit_scale:g}; no temperature: rankings do not depend on it)")
        return self

    def score(self, data: Outputs) -> np.ndarray:
        return require_text(self.text, "MaxLogit (zero-shot)").cosines(data.features).max(axis=1)
