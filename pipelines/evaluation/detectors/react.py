import numpy as np

from . import OPENOOD, Detector, Head, Outputs, Param, logsumexp, register_detector, require_head


@register_detector
class ReAct(Detector):
    """ReAct (Sun et al., NeurIPS 2021): clip penultimate activations at r, a percentile of the ID
    fit activations, recompute the logits, score with Energy. Default: the 99th percentile (1%
    truncated), NINCO's setting; Sun et al. used the 90th for ImageNet (``percentile=90``)."""

    name = "react"
    label = "ReAct + Energy"
    paper = "Sun, Guo, Li, NeurIPS 2021"
    reference = f"{OPENOOD} openood/postprocessors/react_postprocessor.py"
    needs_fit = True
    needs_head = True
    parameters = (Param("percentile", float, 99.0, 50.0, 100.0, help="clipping percentile of ID fit activations", source="NINCO"),)

    def fit(self, fit: Outputs, head: Head | None = None) -> Detector:
        self.head = require_head(head, "ReAct")
        p = float(self.params["percentile"])
        self.threshold = float(np.percentile(fit.features.astype(np.float64), p))
        source = {99.0: "NINCO's setting", 90.0: "Sun et al.'s ImageNet setting"}.get(p, "user-chosen")
        self.notes.append(f"clipped at the {p:g}th percentile of ID fit activations ({source}), r = {self.threshold:.4g}")
        return self

    def score(self, data: Outputs) -> np.ndarray:
        clipped = np.minimum(data.features.astype(np.float64), self.threshold)
        return logsumexp(self.head.logits(clipped))
