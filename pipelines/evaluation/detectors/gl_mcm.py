import numpy as np

from . import Detector, DetectorError, Head, Outputs, Param, register_detector, require_text, softmax

GLMCM_REF = ("AtsuMiyai/GL-MCM@796b9ba7d824 utils/detection_util.py (get_ood_scores_clip, score GL-MCM); local tokens as its "
             "clip/model.py@b4a47bb63f34 takes them")


def local_mcm(local: np.ndarray, text_embeddings: np.ndarray, temperature: float, block: int = 256) -> np.ndarray:
    """max over patches and classes of the softmax over classes of cos(patch, class) / T, per image
    (blockwise over images: the patches x classes table of many images does not fit in memory)."""
    out = np.empty(len(local))
    for s in range(0, len(local), block):
        part = np.asarray(local[s:s + block], dtype=np.float64)
        part = part / np.linalg.norm(part, axis=-1, keepdims=True)
        cos = part @ text_embeddings.T  # [b, P, C]
        b, p, c = cos.shape
        out[s:s + block] = softmax(cos.reshape(b * p, c) / temperature).reshape(b, p, c).max(axis=(1, 2))
    return out


@register_detector
class GLMCM(Detector):
    """Global-Local MCM (Miyai et al., "GL-MCM: Global and local maximum concept matching for
    zero-shot out-of-distribution detection", IJCV 2025): MCM on the global image embedding plus
    lambda times the largest softmax probability over all patch tokens and classes, the local
    tokens being the last block's value path through ln_post and the projection
    (pipelines.evaluation.vlm). T = 1 and lambda = 1 as the authors' code and ImageNet-X's."""

    name = "gl_mcm"
    label = "GL-MCM (zero-shot CLIP)"
    paper = "Miyai et al., IJCV 2025"
    reference = GLMCM_REF
    needs_text = True
    needs_local = True
    parameters = (
        Param("temperature", float, 1.0, 1e-4, 100.0, help="softmax temperature on cosine similarities, global and local",
              source="GL-MCM's and ImageNet-X's code"),
        Param("lambda_local", float, 1.0, 0.0, 100.0, help="weight of the local score", source="GL-MCM's and ImageNet-X's code"),
    )

    def fit(self, fit: Outputs, head: Head | None = None) -> Detector:
        text = require_text(self.text, "GL-MCM")
        self.notes.append(f"temperature {self.params['temperature']:g} on cosine similarities (CLIP logits / {text.logit_scale:g}), "
                          f"local weight {self.params['lambda_local']:g}; prompt {text.template_text}")
        return self

    def score(self, data: Outputs) -> np.ndarray:
        text = require_text(self.text, "GL-MCM")
        if data.local is None:
            raise DetectorError("GL-MCM needs the model's local (patch) embeddings; they come with clip:... models' outputs")
        t = self.params["temperature"]
        glob = softmax(text.cosines(data.features) / t).max(axis=1)
        return glob + self.params["lambda_local"] * local_mcm(data.local, text.embeddings, t)
