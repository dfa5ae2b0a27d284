import numpy as np

from . import Detector, Head, Outputs, Param, logsumexp, register_detector, require_head


def ash_keep_count(d: int, percentile: float) -> int:
    """How many activations ASH keeps per image: k = d - round(d * p / 100), as the reference
    code (``torch.topk`` with that k; NumPy's round, half to even)."""
    return int(d - np.round(d * percentile / 100.0))


def top_k_mask(x: np.ndarray, k: int) -> np.ndarray:
    """Per row, exactly the k largest entries; among values tied at the cut the lowest indices win
    (``torch.topk`` leaves the choice among ties unspecified; we fix it so results are
    deterministic)."""
    n, d = x.shape
    if k >= d:
        return np.ones_like(x, dtype=bool)
    if k <= 0:
        return np.zeros_like(x, dtype=bool)
    cut = np.partition(x, d - k, axis=1)[:, d - k:d - k + 1]  # the k-th largest value of each row
    above = x > cut
    need = k - above.sum(axis=1, keepdims=True)  # how many of the tied values at the cut to keep
    tied = x == cut
    return above | (tied & (np.cumsum(tied, axis=1) <= need))


@register_detector
class ASH(Detector):
    """ASH-S (Djurisic et al., ICLR 2023): per image keep exactly the top k = d - round(d * p / 100)
    penultimate activations (p = 90, the paper's ImageNet setting) and zero the rest, scale the
    kept ones by exp(s1 / s2) with s1, s2 the activation sums before and after pruning, recompute
    the logits, score with Energy. Ties at the cut keep the lowest feature indices."""

    name = "ash"
    label = "ASH-S + Energy"
    paper = "Djurisic et al., ICLR 2023"
    needs_head = True
    parameters = (Param("percentile", float, 90.0, 1.0, 99.9, help="pruning percentile of each activation vector", source="NINCO"),)

    def fit(self, fit: Outputs, head: Head | None = None) -> Detector:
        self.head = require_head(head, "ASH")
        return self

    def score(self, data: Outputs) -> np.ndarray:
        x = data.features.astype(np.float64)
        s1 = x.sum(axis=1)
        pruned = np.where(top_k_mask(x, ash_keep_count(x.shape[1], float(self.params["percentile"]))), x, 0.0)
        s2 = pruned.sum(axis=1)
        # exp(s1 / s2) as the reference; a zero sum (all kept activations 0) leaves the image unscaled,
        # and the exponent is capped where float64 would overflow
        scale = np.where(s2 != 0, np.exp(np.clip(s1 / np.where(s2 != 0, s2, 1.0), None, 700.0)), 1.0)
        return logsumexp(self.head.logits(pruned * scale[:, None]))
