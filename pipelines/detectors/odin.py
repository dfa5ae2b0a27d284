"""ODIN (Liang, Li, Srikant, ICLR 2018): temperature-scaled softmax after a small input
perturbation that raises the top class's score. It needs the network and the images, so the
scores are computed during feature extraction (``odin_scores``) and the detector reads them.
C-OOD's benchmark used temperature 2 and epsilon 1e-5 (REFERENCE.md), our defaults.

Epsilon is a step in [0, 1] pixel space, as in the reference code (Liang et al.'s and
pytorch-ood's): the model sees normalised inputs (x - mean) / std, so the sign of the gradient
there is divided by the normalisation std of each channel before the step. Scores computed
before this was so (a step of epsilon in normalised space) were cached under another key
(``odin_t..``) and are never mixed with these (``odin-px_t..``)."""
from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from . import Detector, DetectorError, Outputs, Param, register_detector

DEFAULT_TEMPERATURE = 2.0
DEFAULT_EPSILON = 1e-5


def odin_key(temperature: float, epsilon: float) -> str:
    """The name the scores are cached under: they depend on both parameters."""
    return f"odin-px_t{temperature:g}_e{epsilon:g}"


@register_detector
class ODIN(Detector):
    name = "odin"
    label = "ODIN"
    paper = "Liang, Li, Srikant, ICLR 2018"
    parameters = (Param("temperature", float, DEFAULT_TEMPERATURE, 1e-3, 1e5, help="softmax temperature", source="C-OOD"),
                  Param("epsilon", float, DEFAULT_EPSILON, 0.0, 1.0, help="input perturbation", source="C-OOD"))
    input_level = True

    @classmethod
    def input_key_for(cls, params: dict) -> str:
        return odin_key(float(params["temperature"]), float(params["epsilon"]))

    @classmethod
    def input_scores(cls, lm: Any, paths: list, params: dict, *, batch_size: int, max_pixels: int,
                     progress: Callable[[int], None] | None = None, decoder: str | None = None) -> np.ndarray:
        return odin_scores(lm, paths, temperature=float(params["temperature"]), epsilon=float(params["epsilon"]),
                           batch_size=batch_size, max_pixels=max_pixels, progress=progress, decoder=decoder or "pil")

    @property
    def input_key(self) -> str:
        return self.input_key_for(self.params)

    def score(self, data: Outputs) -> np.ndarray:
        key = self.input_key
        if key not in data.extra:
            raise DetectorError(f"ODIN: no input-level scores {key} for these images; they are computed while extracting "
                                "features with the model (imported .npz outputs cannot give them)")
        return np.asarray(data.extra[key], dtype=np.float64)


def odin_scores(lm: Any, paths: Sequence[str], *, temperature: float = DEFAULT_TEMPERATURE, epsilon: float = DEFAULT_EPSILON,
                batch_size: int = 16, max_pixels: int | None = None, progress: Callable[[int], None] | None = None,
                decoder: str = "pil") -> np.ndarray:
    """ODIN scores for image files with a loaded model (pipelines.classifiers.LoadedModel): with x the
    normalised input, x' = x - epsilon * sign(grad_x L) / std (per channel), L the cross-entropy
    of softmax(f(x)/T) against its own top class; score = max softmax(f(x')/T). This is a step of
    epsilon in [0, 1] pixel space, as the reference code takes it. NaN for a file that cannot be
    decoded. The float32 model is used (a step of 1e-5 would vanish in bfloat16 inputs), and the
    images go through ``decoder`` as the run's features do."""
    import torch

    from pipelines.extract import batches
    from pipelines.images import DEFAULT_MAX_PIXELS

    out = np.full(len(paths), np.nan)
    model = lm.model
    std = torch.tensor([float(v) for v in lm.data_config["std"]], dtype=torch.float32, device=lm.device).view(1, -1, 1, 1)
    for idx, x, bad in batches(lm, paths, decoder=decoder, batch_size=batch_size, num_workers=0 if decoder == "pil" else None,
                               max_pixels=max_pixels or DEFAULT_MAX_PIXELS):
        if x is not None:
            x = x.detach().requires_grad_(True)
            with torch.enable_grad():
                logits = model(x) / temperature
                loss = torch.nn.functional.cross_entropy(logits, logits.argmax(dim=1))
                loss.backward()
            with torch.inference_mode():
                x2 = x.detach() - epsilon * torch.sign(x.grad) / std
                probs = (model(x2) / temperature).float().softmax(dim=1).max(dim=1).values.cpu().numpy()
            out[idx] = probs
        if progress:
            progress(len(idx) + len(bad))
    if np.isnan(out).all() and len(paths):
        raise DetectorError("ODIN: none of the images could be decoded")
    return out
