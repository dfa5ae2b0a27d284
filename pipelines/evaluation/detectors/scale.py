import numpy as np

from . import OPENOOD, Detector, Head, Outputs, Param, logsumexp, register_detector, require_head
from .ash import ash_keep_count


@register_detector
class SCALE(Detector):
    """SCALE (Xu et al., ICLR 2024): ASH-S's scale without its pruning: every activation is
    multiplied by exp(s1 / s2), s1 the sum of all activations and s2 the sum of the top k = d -
    round(d * p / 100), then Energy (p = 85, OpenOOD's scale.yml). A sum of the top k does not
    depend on which tied values are taken, so there is no tie convention."""

    name = "scale"
    label = "SCALE + Energy"
    paper = "Xu et al., ICLR 2024"
    reference = f"{OPENOOD} openood/networks/scale_net.py (scale) with openood/postprocessors/scale_postprocessor.py"
    needs_head = True
    parameters = (Param("percentile", float, 85.0, 1.0, 99.9, help="percentile p: the top k = d - round(d p / 100) give s2",
                        source="OpenOOD's scale.yml"),)

    def fit(self, fit: Outputs, head: Head | None = None) -> Detector:
        self.head = require_head(head, "SCALE")
        return self

    def score(self, data: Outputs) -> np.ndarray:
        x = data.features.astype(np.float64)
        d = x.shape[1]
        k = ash_keep_count(d, float(self.params["percentile"]))
        s1 = x.sum(axis=1)
        s2 = np.partition(x, d - k, axis=1)[:, d - k:].sum(axis=1) if 0 < k < d else (x.sum(axis=1) if k >= d else np.zeros(len(x)))
        scale = np.where(s2 != 0, np.exp(np.clip(s1 / np.where(s2 != 0, s2, 1.0), None, 700.0)), 1.0)
        return logsumexp(self.head.logits(x * scale[:, None]))
