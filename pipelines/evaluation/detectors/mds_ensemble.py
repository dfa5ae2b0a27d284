"""Mahalanobis ensemble over layers (Lee et al., NeurIPS 2018, sec. 2.2 "feature ensemble"), as
OpenOOD's mds_ensemble postprocessor computes it with its mds_ensemble.yml (feature type "mean":
each layer's map averaged over positions; no dimension reduction; alpha 1 for every layer): per
layer l, class means and one shared covariance of the ID fit set's pooled maps; score = sum_l
max_c -(x_l - mu_lc)^T P_l (x_l - mu_lc).

It reads intermediate activations, so it is input-level, as ODIN, and it also needs them for the
ID fit set (``input_fit``): while extracting, every set's pooled maps of the declared layers are
cached (the outputs of the last ``stages`` stages, timm's ``forward_intermediates``). OpenOOD's
config also perturbs the input (noise 0.0014, ODIN-style, per layer); that is not done here: the
score is the ensemble without input preprocessing (noise 0), and the results say so."""
from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from . import OPENOOD, Detector, DetectorError, Head, Outputs, Param, register_detector, stage_rows
from .mahalanobis import min_distances, shared_precision


def mds_key(stages: int) -> str:
    return f"mds-layers_s{stages}"


def split_layers(x: np.ndarray, widths: np.ndarray) -> list[np.ndarray]:
    """The pooled maps of each layer, from the cached concatenation and the layers' widths."""
    return np.split(np.asarray(x, dtype=np.float64), np.cumsum(np.asarray(widths, dtype=np.int64))[:-1], axis=1)


@register_detector
class MahalanobisEnsemble(Detector):
    name = "mds_ensemble"
    label = "Mahalanobis ensemble (layers)"
    paper = "Lee et al., NeurIPS 2018"
    reference = f"{OPENOOD} openood/postprocessors/mds_ensemble_postprocessor.py (feature type mean, alpha 1, noise 0)"
    needs_fit = True
    input_level = True
    input_fit = True
    layers = ("the last `stages` stages' outputs, averaged over positions (timm forward_intermediates)",)
    parameters = (Param("stages", int, 3, 1, 8, help="how many of the network's last stages are layers of the ensemble",
                        source="ours (OpenOOD takes every block of its ResNets)"),)

    @classmethod
    def input_key_for(cls, params: dict) -> str:
        return mds_key(int(params["stages"]))

    @classmethod
    def input_scores(cls, lm: Any, paths: list, params: dict, *, batch_size: int, max_pixels: int,
                     progress: Callable[[int], None] | None = None, decoder: str | None = None) -> Any:
        return pooled_layers(lm, paths, stages=int(params["stages"]), batch_size=batch_size, max_pixels=max_pixels,
                             progress=progress, decoder=decoder or "pil")

    def _layers(self, data: Outputs, what: str) -> list[np.ndarray]:
        key = self.input_key_for(self.params)
        if key not in data.extra or f"{key}:widths" not in data.extra:
            raise DetectorError(f"Mahalanobis ensemble: no pooled layer outputs {key} for the {what}; they are computed while "
                                "extracting features with the model (imported .npz outputs cannot give them)")
        return split_layers(data.extra[key], data.extra[f"{key}:widths"])

    def fit(self, fit: Outputs, head: Head | None = None) -> Detector:
        if fit.labels is None or not np.any(fit.labels >= 0):
            raise DetectorError("Mahalanobis ensemble needs class labels on the ID fit set (images in wnid folders of ID classes)")
        layers = self._layers(fit, "ID fit set")
        keep = (fit.labels >= 0) & np.all(np.isfinite(np.hstack(layers)), axis=1)
        classes, inverse = np.unique(fit.labels[keep], return_inverse=True)
        self.gaussians = []
        for x in layers:
            x = x[keep]
            sums = np.zeros((len(classes), x.shape[1]))
            np.add.at(sums, inverse, x)
            means = sums / np.bincount(inverse)[:, None]
            self.gaussians.append((means, shared_precision(x, x - means[inverse])))
        self.notes.append(f"Mahalanobis ensemble: {len(layers)} layers, no input preprocessing (OpenOOD's config adds noise 0.0014)")
        return self

    def score(self, data: Outputs) -> np.ndarray:
        total = np.zeros(len(data))
        for x, (means, precision) in zip(self._layers(data, "images"), self.gaussians):
            total += -min_distances(x, means, precision).min(axis=1)
        return total


def pooled_layers(lm: Any, paths: Sequence[str], *, stages: int, batch_size: int = 16, max_pixels: int | None = None,
                  progress: Callable[[int], None] | None = None, decoder: str = "pil") -> dict[str, np.ndarray]:
    """{"scores": [n, sum of widths] the last ``stages`` stage outputs averaged over positions and
    concatenated (NaN rows for files that cannot be decoded), "widths": each layer's width}."""
    return stage_rows(lm, paths, stages=stages, per_map=_position_mean, what="Mahalanobis ensemble", batch_size=batch_size,
                      max_pixels=max_pixels, progress=progress, decoder=decoder)


def _position_mean(m: Any) -> Any:
    """A stage output averaged over its positions: [b, c, h, w] (CNN) or [b, tokens, c] (ViT) -> [b, c]."""
    return m.mean(dim=(2, 3)) if m.dim() == 4 else m.mean(dim=1)
