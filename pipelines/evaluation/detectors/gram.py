"""Gram matrices (Sastry & Oore, ICML 2020, "Detecting Out-of-Distribution Examples with Gram
Matrices"), as OpenOOD's gram postprocessor computes it (powers 1..5, its gram.yml).

Per layer l with map F (channels x positions) and power p: g = rowsum((F^p)(F^p)^T), then
sign(g) |g|^(1/p), one value per channel. On the ID fit set, per class c (the label), layer and
power, the channel-wise minimum and maximum over a training part of the class's images; the
other part (10% of each class) measures the typical deviation of layer l, n_l (the mean over
those images of sum_p delta). An image predicted as class c (argmax of its logits) deviates by
  delta = sum_channels relu(min - g) / |min + 1e-6| + relu(g - max) / |max + 1e-6|,
  score = -(sum_l sum_p delta_lp / n_l) / max softmax.

It reads intermediate activations, so it is input-level with ``input_fit``, as the Mahalanobis
ensemble: while extracting, every set's Gram vectors of the declared layers (the outputs of the
last ``stages`` stages, timm's ``forward_intermediates``) are cached with their widths. OpenOOD
hooks every ReLU and Conv2d of its ResNets; timm's stages are the layers shared by all its models,
so the last ``stages`` stage outputs are used, and the results say so. OpenOOD draws each class's
10% at random (``random.sample``); here the draw is a seeded permutation per class (seed 0, classes
in increasing order), so a run is repeatable. A predicted class with no fit images adds no
deviation (OpenOOD fails there), and the results count such images."""
from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from . import OPENOOD, Detector, DetectorError, Head, Outputs, Param, register_detector, softmax, stage_rows


def gram_key(stages: int, max_power: int) -> str:
    return f"gram_s{stages}_p{max_power}"


def gram_vectors(fmap: Any, max_power: int) -> Any:
    """[B, channels * max_power]: for p = 1..max_power, sign(g) |g|^(1/p) with g the row sums of
    (F^p)(F^p)^T, F a map [B, C, H, W] or a token sequence [B, N, C] (channels x tokens)."""
    import torch

    f = fmap.transpose(1, 2) if fmap.dim() == 3 else fmap.reshape(fmap.shape[0], fmap.shape[1], -1)
    out = []
    for p in range(1, max_power + 1):
        t = f ** p
        g = t.bmm(t.transpose(1, 2)).sum(dim=2)
        out.append(g.sign() * g.abs() ** (1.0 / p))
    return torch.cat(out, dim=1)


def deviation(g: np.ndarray, low: np.ndarray, high: np.ndarray) -> np.ndarray:
    """OpenOOD's delta: how far each row of g lies outside [low, high], relative to the bounds."""
    return (np.maximum(low - g, 0.0) / np.abs(low + 1e-6)).sum(axis=1) + (np.maximum(g - high, 0.0) / np.abs(high + 1e-6)).sum(axis=1)


def validation_split(labels: np.ndarray, share: float = 0.1, seed: int = 0) -> np.ndarray:
    """True for the images that measure the typical deviation: per class (increasing order),
    int(share * count) of its images, drawn by one seeded generator."""
    rng = np.random.default_rng(seed)
    val = np.zeros(len(labels), dtype=bool)
    for c in np.unique(labels):
        idx = np.flatnonzero(labels == c)
        val[idx[rng.permutation(len(idx))[:int(share * len(idx))]]] = True
    return val


@register_detector
class Gram(Detector):
    name = "gram"
    label = "Gram matrices"
    paper = "Sastry & Oore, ICML 2020"
    reference = f"{OPENOOD} openood/postprocessors/gram_postprocessor.py (powers 1-5; stage outputs, not every ReLU/Conv2d)"
    needs_fit = True
    input_level = True
    input_fit = True
    layers = ("the last `stages` stages' outputs, their Gram row sums for powers 1..`max_power` (timm forward_intermediates)",)
    parameters = (Param("stages", int, 2, 1, 8, help="how many of the network's last stages are layers",
                        source="ours (OpenOOD hooks every ReLU and Conv2d of its ResNets)"),
                  Param("max_power", int, 5, 1, 10, help="powers 1 to this", source="OpenOOD's gram.yml"))

    @classmethod
    def input_key_for(cls, params: dict) -> str:
        return gram_key(int(params["stages"]), int(params["max_power"]))

    @classmethod
    def input_scores(cls, lm: Any, paths: list, params: dict, *, batch_size: int, max_pixels: int,
                     progress: Callable[[int], None] | None = None, decoder: str | None = None) -> Any:
        return gram_layers(lm, paths, stages=int(params["stages"]), max_power=int(params["max_power"]), batch_size=batch_size,
                           max_pixels=max_pixels, progress=progress, decoder=decoder or "pil")

    def _blocks(self, data: Outputs, what: str) -> list[list[np.ndarray]]:
        """Per layer, per power, the [n, channels] Gram vectors."""
        key = self.input_key_for(self.params)
        if key not in data.extra or f"{key}:widths" not in data.extra:
            raise DetectorError(f"Gram: no Gram vectors {key} for the {what}; they are computed while extracting features with "
                                "the model (imported .npz outputs cannot give them)")
        x = np.asarray(data.extra[key], dtype=np.float64)
        widths = np.asarray(data.extra[f"{key}:widths"], dtype=np.int64)
        powers = int(self.params["max_power"])
        layers = np.split(x, np.cumsum(widths)[:-1], axis=1)
        return [np.split(layer, powers, axis=1) for layer in layers]

    def fit(self, fit: Outputs, head: Head | None = None) -> Detector:
        if fit.labels is None or not np.any(fit.labels >= 0):
            raise DetectorError("Gram needs class labels on the ID fit set (images in wnid folders of ID classes)")
        blocks = self._blocks(fit, "ID fit set")
        keep = (fit.labels >= 0) & np.all(np.isfinite(np.asarray(fit.extra[self.input_key_for(self.params)])), axis=1)
        labels = fit.labels[keep]
        val = validation_split(labels)
        if not val.any():
            raise DetectorError("Gram: no class has 10 or more fit images, so none is left to measure the typical deviation; "
                                "use a larger ID fit set")
        self.classes = np.unique(labels)
        self.bounds: list[list[tuple[np.ndarray, np.ndarray]]] = []  # per layer, per power: [classes, ch] min, max
        self.norms = []
        for layer in blocks:
            per_power, total = [], np.zeros(len(labels))
            for g in layer:
                g = g[keep]
                low = np.stack([g[(labels == c) & ~val].min(axis=0) for c in self.classes])
                high = np.stack([g[(labels == c) & ~val].max(axis=0) for c in self.classes])
                row = np.searchsorted(self.classes, labels)
                total[val] += deviation(g[val], low[row[val]], high[row[val]])
                per_power.append((low, high))
            norm = float(total[val].mean())
            if not norm > 0:
                raise DetectorError("Gram: the held-out fit images never leave the training part's ranges (typical deviation 0); "
                                    "use a larger or more varied ID fit set")
            self.bounds.append(per_power)
            self.norms.append(norm)
        self.notes.append(f"Gram: {len(blocks)} stage outputs, powers 1-{int(self.params['max_power'])} (OpenOOD hooks every ReLU "
                          "and Conv2d); held-out 10% per class by a seeded draw")
        return self

    def score(self, data: Outputs) -> np.ndarray:
        logits = np.asarray(data.logits, dtype=np.float64)
        pred = logits.argmax(axis=1)
        conf = softmax(logits).max(axis=1)
        pos = np.searchsorted(self.classes, pred)
        known = (pos < len(self.classes)) & (self.classes[np.minimum(pos, len(self.classes) - 1)] == pred)
        row = np.where(known, pos, 0)
        total = np.zeros(len(data))
        for layer, bounds, norm in zip(self._blocks(data, "images"), self.bounds, self.norms):
            for g, (low, high) in zip(layer, bounds):
                total += np.where(known, deviation(g, low[row], high[row]), 0.0) / norm
        note = f"Gram: {int((~known).sum())} images predicted as classes without fit images add no deviation"
        if not known.all() and note not in self.notes:
            self.notes.append(note)
        return -total / conf


def gram_layers(lm: Any, paths: Sequence[str], *, stages: int, max_power: int, batch_size: int = 16, max_pixels: int | None = None,
                progress: Callable[[int], None] | None = None, decoder: str = "pil") -> dict[str, np.ndarray]:
    """{"scores": [n, sum of widths] the Gram vectors of the last ``stages`` stage outputs (NaN rows
    for files that cannot be decoded), "widths": channels * max_power per layer}."""
    return stage_rows(lm, paths, stages=stages, per_map=lambda m: gram_vectors(m, max_power), what="Gram", batch_size=batch_size,
                      max_pixels=max_pixels, progress=progress, decoder=decoder)
