import numpy as np

from . import Detector, logsumexp, register_detector, require_head


@register_detector
class ASH(Detector):
    """ASH-S (Djurisic et al., ICLR 2023): per image, zero the penultimate activations below their
    p-th percentile (p = 90, the paper's ImageNet setting), scale the rest by exp(s1 / s2) with
    s1, s2 the activation sums before and after pruning, recompute the logits, score with Energy."""

    name = "ash"
    label = "ASH-S + Energy"
    paper = "Djurisic et al., ICLR 2023"
    needs_head = True
    defaults = {"percentile": 90.0}

    def fit(self, fit, head=None):
        self.head = require_head(head, "ASH")
        return self

    def score(self, data):
        x = data.features.astype(np.float64)
        s1 = x.sum(axis=1)
        cut = np.percentile(x, float(self.params["percentile"]), axis=1, keepdims=True)
        pruned = np.where(x >= cut, x, 0.0)
        s2 = pruned.sum(axis=1)
        scale = np.where(s2 > 0, np.exp(np.clip(s1 / np.where(s2 > 0, s2, 1.0), None, 50.0)), 1.0)
        return logsumexp(self.head.logits(pruned * scale[:, None]))
