"""AdaSCALE (Regmi, arXiv 2025; code github.com/sudarshanregmi/adascale): SCALE with a
percentile chosen per image. The input is nudged along the sign of the gradient of the top logit
(+0.5 on the fraction ``o`` of input values whose gradient is smallest in magnitude) and passed
through the network again; images whose strongest activations move a lot under that nudge are
treated as more OOD-like and get a lower percentile.

Per image with penultimate features x and perturbed features x' (|x - x'| the shift):
  Q = sum of relu(x') over the top k1 = int(d * k1 / 100) entries of x
      + lambda * sum of |x - x'| over the top k2 = int(d * k2 / 100) entries of x,
  p = p_min + (1 - F(Q)) (p_max - p_min), F the ECDF of Q over the ID fit set,
  s = sum(relu(x)) / (sum of the top d - round(d p / 100) entries of relu(x)),
  AdaSCALE-A: energy of the head on x * exp(s); AdaSCALE-L: energy of head(x) * s^2.
Defaults are OpenOOD's adascale_a.yml / adascale_l.yml (p in [75, 85], k1 5, k2 1, lambda 10,
o 0.05).

It needs a second, perturbed forward pass and the input gradient, so it is input-level, as ODIN,
and fitted on the ID fit set's perturbed features too (``input_fit``): while extracting, every
set's features and perturbed features are cached side by side. Where the reference leaves things
open: OpenOOD draws 5000 fit images at random for the ECDF, here every fit image counts
(deterministic); which of the activations tied at a top-k cut are taken follows ``ties`` (as
ASH); and an image whose ReLU'd features are all zero keeps scale 1 (the reference divides 0 by 0),
as our SCALE does."""
from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from . import OPENOOD, Detector, DetectorError, Head, Outputs, Param, logsumexp, register_detector, require_head
from .ash import TIE_RULES, top_k_mask


def adascale_key(o: float) -> str:
    return f"adascale_o{o:g}"


def adascale_percentiles(q: np.ndarray, fit_q: np.ndarray, low: float, high: float) -> np.ndarray:
    """p = low + (1 - F(q)) (high - low), F the right-continuous ECDF of ``fit_q`` (statsmodels' ECDF)."""
    ordered = np.sort(np.asarray(fit_q, dtype=np.float64))
    frac = np.searchsorted(ordered, np.asarray(q, dtype=np.float64), side="right") / len(ordered)
    return low + (1.0 - frac) * (high - low)


def adaptive_scale(x: np.ndarray, percentiles: np.ndarray) -> np.ndarray:
    """sum(relu(x)) / sum of the top d - round(d p / 100) entries of relu(x), per row (1 where that is 0)."""
    r = np.maximum(np.asarray(x, dtype=np.float64), 0.0)
    d = r.shape[1]
    ks = d - np.round(d * np.asarray(percentiles, dtype=np.float64) / 100.0).astype(np.int64)
    ordered = -np.sort(-r, axis=1)
    tops = np.where(np.arange(d)[None, :] < ks[:, None], ordered, 0.0).sum(axis=1)
    return np.where(tops != 0, r.sum(axis=1) / np.where(tops != 0, tops, 1.0), 1.0)


@register_detector
class AdaSCALE(Detector):
    name = "adascale"
    label = "AdaSCALE + Energy"
    paper = "Regmi, arXiv 2025 (sudarshanregmi/adascale)"
    reference = (f"{OPENOOD} openood/postprocessors/adascale_postprocessor.py with openood/networks/adascale_net.py "
                 "(AdaScaleANet / AdaScaleLNet)")
    needs_fit = True
    needs_head = True
    input_level = True
    input_fit = True
    layers = ("penultimate features of the image and of the image nudged along the top logit's input gradient",)
    parameters = (
        Param("p_min", float, 75.0, 0.1, 99.9, help="lowest percentile (for the most shifted images)", source="OpenOOD's adascale_a.yml"),
        Param("p_max", float, 85.0, 0.1, 99.9, help="highest percentile (for the least shifted images)", source="OpenOOD's adascale_a.yml"),
        Param("k1", float, 5.0, 0.0, 100.0, help="percent of the strongest activations whose perturbed values count",
              source="OpenOOD's adascale_a.yml"),
        Param("k2", float, 1.0, 0.0, 100.0, help="percent of the strongest activations whose shift counts", source="OpenOOD's adascale_a.yml"),
        Param("lmbda", float, 10.0, 0.0, 1000.0, help="weight lambda of the shift", source="OpenOOD's adascale_a.yml"),
        Param("o", float, 0.05, 0.0, 1.0, help="fraction of input values nudged (those with the smallest gradient)",
              source="OpenOOD's adascale_a.yml"),
        Param("scaling", str, "activation", help="AdaSCALE-A scales the activations by exp(s), AdaSCALE-L the logits by s^2",
              source="AdaSCALE-A", choices=("activation", "logit")),
        Param("ties", str, "torch-topk", help="which of the activations tied at a top-k cut are taken",
              source="the reference code (torch.topk)", choices=TIE_RULES),
    )

    @classmethod
    def input_key_for(cls, params: dict) -> str:
        return adascale_key(float(params["o"]))

    @classmethod
    def input_scores(cls, lm: Any, paths: list, params: dict, *, batch_size: int, max_pixels: int,
                     progress: Callable[[int], None] | None = None, decoder: str | None = None) -> Any:
        return perturbed_features(lm, paths, o=float(params["o"]), batch_size=batch_size, max_pixels=max_pixels,
                                  progress=progress, decoder=decoder or "pil")

    def _pair(self, data: Outputs, what: str) -> tuple[np.ndarray, np.ndarray]:
        key = self.input_key_for(self.params)
        if key not in data.extra:
            raise DetectorError(f"AdaSCALE: no perturbed features {key} for the {what}; they are computed while extracting "
                                "features with the model (imported .npz outputs cannot give them)")
        both = np.asarray(data.extra[key], dtype=np.float64)
        d = both.shape[1] // 2
        return both[:, :d], both[:, d:]

    def _q(self, x: np.ndarray, xp: np.ndarray) -> np.ndarray:
        d = x.shape[1]
        ties = str(self.params["ties"])
        m1 = top_k_mask(x, int(d * float(self.params["k1"]) / 100), ties)
        m2 = top_k_mask(x, int(d * float(self.params["k2"]) / 100), ties)
        return (np.where(m1, np.maximum(xp, 0.0), 0.0).sum(axis=1)
                + float(self.params["lmbda"]) * np.where(m2, np.abs(x - xp), 0.0).sum(axis=1))

    def fit(self, fit: Outputs, head: Head | None = None) -> Detector:
        if float(self.params["p_min"]) > float(self.params["p_max"]):
            raise DetectorError(f"--adascale-p-min {self.params['p_min']:g} must not exceed --adascale-p-max {self.params['p_max']:g}")
        self.head = require_head(head, "AdaSCALE")
        x, xp = self._pair(fit, "ID fit set")
        ok = np.all(np.isfinite(x), axis=1) & np.all(np.isfinite(xp), axis=1)
        if not ok.any():
            raise DetectorError("AdaSCALE: no ID fit image has perturbed features")
        self.fit_q = self._q(x[ok], xp[ok])
        self.notes.append(f"AdaSCALE: the ECDF is over all {int(ok.sum())} fit images (OpenOOD draws 5000 at random)")
        return self

    def score(self, data: Outputs) -> np.ndarray:
        x, xp = self._pair(data, "images")
        p = adascale_percentiles(self._q(x, xp), self.fit_q, float(self.params["p_min"]), float(self.params["p_max"]))
        s = adaptive_scale(x, p)
        if self.params["scaling"] == "logit":
            return logsumexp(self.head.logits(x) * (s ** 2)[:, None])
        return logsumexp(self.head.logits(x * np.exp(np.clip(s, None, 700.0))[:, None]))


def perturb(x: Any, grad: Any, o: float) -> Any:
    """x + 0.5 sign(grad) on the int(o * values) input values of each image with the smallest |grad|."""
    import torch

    b = x.shape[0]
    flat = grad.abs().reshape(b, -1)
    n = int(flat.shape[1] * o)
    mask = torch.zeros_like(flat)
    if n > 0:
        mask.scatter_(1, torch.topk(flat, n, dim=1, largest=False).indices, 1.0)
    return x + grad.sign() * mask.reshape(x.shape) * 0.5


def perturbed_features(lm: Any, paths: Sequence[str], *, o: float, batch_size: int = 16, max_pixels: int | None = None,
                       progress: Callable[[int], None] | None = None, decoder: str = "pil") -> dict[str, np.ndarray]:
    """{"scores": [n, 2d] penultimate features then perturbed features (NaN rows for files that
    cannot be decoded), "widths": [d, d]} with a loaded timm-style model (forward_features,
    forward_head(pre_logits=True), get_classifier)."""
    import torch

    from pipelines.features.extract import batches
    from pipelines.sources.images import DEFAULT_MAX_PIXELS

    model = lm.model
    if not all(hasattr(model, a) for a in ("forward_features", "forward_head", "get_classifier")):
        raise DetectorError(f"AdaSCALE: {lm.name} has no forward_features / forward_head / get_classifier (timm's split of body and head)")

    def features(x):
        return model.forward_head(model.forward_features(x), pre_logits=True)

    rows: np.ndarray | None = None
    for idx, x, bad in batches(lm, paths, decoder=decoder, batch_size=batch_size, num_workers=0 if decoder == "pil" else None,
                               max_pixels=max_pixels or DEFAULT_MAX_PIXELS):
        if x is not None:
            x = x.detach().clone().requires_grad_(True)
            with torch.enable_grad():
                feat = features(x)
                logits = model.get_classifier()(feat)
                logits.gather(1, logits.detach().argmax(dim=1, keepdim=True)).sum().backward()
            grad = x.grad.detach()
            with torch.inference_mode():
                feat_p = features(perturb(x.detach(), grad, o))
            both = torch.cat([feat.detach(), feat_p], dim=1).double().cpu().numpy()
            if rows is None:
                rows = np.full((len(paths), both.shape[1]), np.nan)
            rows[idx] = both
            model.zero_grad(set_to_none=True)
        if progress:
            progress(len(idx) + len(bad))
    if rows is None:
        if len(paths):
            raise DetectorError("AdaSCALE: none of the images could be decoded")
        return {"scores": np.zeros((0, 0)), "widths": np.zeros(0, dtype=np.int64)}
    d = rows.shape[1] // 2
    return {"scores": rows, "widths": np.array([d, d], dtype=np.int64)}
