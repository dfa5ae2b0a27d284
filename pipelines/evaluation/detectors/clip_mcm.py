import numpy as np

from . import Detector, Head, Outputs, Param, register_detector, require_text, softmax

MCM_REF = "deeplearning-wisc/MCM@006fb40c23b6 utils/detection_util.py (get_ood_scores_clip, score MCM)"


@register_detector
class ClipMCM(Detector):
    """Maximum Concept Matching, zero-shot (Ming et al., "Delving into out-of-distribution detection
    with vision-language representations", NeurIPS 2022): the largest softmax probability over
    the cosine similarities between the image embedding and the ID classes' text embeddings,
    divided by a temperature. The paper and ImageNet-X's code use T = 1 on raw cosines (CLIP's
    logits / 100); pytorch-ood's MCM defaults to 0.01. Not the ``mcm`` detector, which is NINCO's
    class-mean variant for classifiers (RCos)."""

    name = "clip_mcm"
    label = "MCM (zero-shot CLIP)"
    paper = "Ming et al., NeurIPS 2022"
    reference = MCM_REF
    needs_text = True
    parameters = (Param("temperature", float, 1.0, 1e-4, 100.0, help="softmax temperature on cosine similarities",
                        source="the MCM paper and ImageNet-X's code; pytorch-ood's default is 0.01"),)

    def fit(self, fit: Outputs, head: Head | None = None) -> Detector:
        text = require_text(self.text, "MCM (zero-shot)")
        self.notes.append(f"temperature {self.params['temperature']:g} on cosine similarities (CLIP logits / {text.logit_scale:g}); "
                          f"prompt {text.template_text}; {len(text.wnids)} ID class names")
        return self

    def score(self, data: Outputs) -> np.ndarray:
        text = require_text(self.text, "MCM (zero-shot)")
        return softmax(text.cosines(data.features) / self.params["temperature"]).max(axis=1)
