import numpy as np

from . import Detector, logsumexp, register_detector, require_head


@register_detector
class ReAct(Detector):
    """ReAct (Sun et al., NeurIPS 2021): clip penultimate activations at r, the 99th percentile
    of the ID fit activations (1% truncated), recompute the logits, score with Energy."""

    name = "react"
    label = "ReAct + Energy"
    paper = "Sun, Guo, Li, NeurIPS 2021"
    needs_fit = True
    needs_head = True
    defaults = {"percentile": 99.0}

    def fit(self, fit, head=None):
        self.head = require_head(head, "ReAct")
        self.threshold = float(np.percentile(fit.features, float(self.params["percentile"])))
        return self

    def score(self, data):
        clipped = np.minimum(data.features.astype(np.float64), self.threshold)
        return logsumexp(self.head.logits(clipped))
