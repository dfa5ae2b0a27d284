"""ASH (Djurisic et al., ICLR 2023): activation shaping of the penultimate features, then Energy.
Per image the top k = d - round(d * p / 100) activations are kept (the reference code's
``torch.topk`` with that k) and the rest zeroed; ASH-S rescales the kept ones by exp(s1 / s2),
ASH-P leaves them, ASH-B sets each to s1 / k (s1, s2: the activation sums before and after
pruning). The three variants are three detectors (``ash``, ``ash_p``, ``ash_b``).

Which activations are kept when values tie at the cut is a convention (``ties``): the authors'
code keeps what ``torch.topk`` returns, and ``torch-topk`` (the default) asks torch.topk on the
CPU for exactly that; ``lowest-index`` keeps the lowest feature indices among the tied values
(deterministic across libraries). They differ only where values tie at the cut, which bf16
features do often; the choice is named on the results with the other settings."""
import numpy as np

from . import OPENOOD, Detector, Head, Outputs, Param, logsumexp, register_detector, require_head

TIE_RULES = ("torch-topk", "lowest-index")
ASH_REFERENCE = f"{OPENOOD} openood/networks/ash_net.py (ash_s, ash_p, ash_b; the authors' code)"


def ash_keep_count(d: int, percentile: float) -> int:
    """How many activations ASH keeps per image: k = d - round(d * p / 100), as the reference
    code (``torch.topk`` with that k; NumPy's round, half to even)."""
    return int(d - np.round(d * percentile / 100.0))


def top_k_mask(x: np.ndarray, k: int, ties: str = "lowest-index") -> np.ndarray:
    """Per row, exactly the k largest entries. Among values tied at the cut: ``lowest-index`` keeps
    the lowest indices; ``torch-topk`` keeps the ones torch.topk returns on the CPU (the authors'
    code; torch leaves the choice unspecified, so it is asked, on float64 copies of the values)."""
    n, d = x.shape
    if k >= d:
        return np.ones_like(x, dtype=bool)
    if k <= 0:
        return np.zeros_like(x, dtype=bool)
    if ties == "torch-topk":
        import torch

        index = torch.topk(torch.from_numpy(np.ascontiguousarray(x, dtype=np.float64)), k, dim=1).indices.numpy()
        mask = np.zeros_like(x, dtype=bool)
        np.put_along_axis(mask, index, True, axis=1)
        return mask
    cut = np.partition(x, d - k, axis=1)[:, d - k:d - k + 1]  # the k-th largest value of each row
    above = x > cut
    need = k - above.sum(axis=1, keepdims=True)  # how many of the tied values at the cut to keep
    tied = x == cut
    return above | (tied & (np.cumsum(tied, axis=1) <= need))


def _params(default_percentile: float, source: str) -> tuple[Param, ...]:
    return (Param("percentile", float, default_percentile, 1.0, 99.9, help="pruning percentile of each activation vector", source=source),
            Param("ties", str, "torch-topk", help="which of the values tied at the cut are kept",
                  source="the authors' code (torch.topk on the CPU)", choices=TIE_RULES))


class _ASHBase(Detector):
    needs_head = True
    reference = ASH_REFERENCE

    def fit(self, fit: Outputs, head: Head | None = None) -> Detector:
        self.head = require_head(head, self.label)
        return self

    def shaped(self, x: np.ndarray, keep: np.ndarray, k: int) -> np.ndarray:
        raise NotImplementedError

    def score(self, data: Outputs) -> np.ndarray:
        x = data.features.astype(np.float64)
        k = ash_keep_count(x.shape[1], float(self.params["percentile"]))
        keep = top_k_mask(x, k, str(self.params["ties"]))
        return logsumexp(self.head.logits(self.shaped(x, keep, k)))


@register_detector
class ASH(_ASHBase):
    """ASH-S: prune to the top k and scale the kept activations by exp(s1 / s2) (p = 90, the
    paper's ImageNet setting). A zero sum after pruning leaves the image unscaled; the exponent is
    capped where float64 would overflow."""

    name = "ash"
    label = "ASH-S + Energy"
    paper = "Djurisic et al., ICLR 2023"
    parameters = _params(90.0, "NINCO")

    def shaped(self, x: np.ndarray, keep: np.ndarray, k: int) -> np.ndarray:
        pruned = np.where(keep, x, 0.0)
        s1, s2 = x.sum(axis=1), pruned.sum(axis=1)
        scale = np.where(s2 != 0, np.exp(np.clip(s1 / np.where(s2 != 0, s2, 1.0), None, 700.0)), 1.0)
        return pruned * scale[:, None]


@register_detector
class ASHP(_ASHBase):
    """ASH-P: prune to the top k, keep their values (p = 90, OpenOOD's ash setting)."""

    name = "ash_p"
    label = "ASH-P + Energy"
    paper = "Djurisic et al., ICLR 2023"
    parameters = _params(90.0, "OpenOOD's ash.yml")

    def shaped(self, x: np.ndarray, keep: np.ndarray, k: int) -> np.ndarray:
        return np.where(keep, x, 0.0)


@register_detector
class ASHB(_ASHBase):
    """ASH-B: prune to the top k and set each kept activation to s1 / k (p = 65, the default of
    the reference ``ash_b``)."""

    name = "ash_b"
    label = "ASH-B + Energy"
    paper = "Djurisic et al., ICLR 2023"
    parameters = _params(65.0, "the reference code's ash_b default")

    def shaped(self, x: np.ndarray, keep: np.ndarray, k: int) -> np.ndarray:
        fill = x.sum(axis=1) / max(k, 1)
        return np.where(keep, fill[:, None], 0.0)
