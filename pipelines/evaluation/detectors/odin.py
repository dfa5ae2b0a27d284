"""ODIN (Liang, Li, Srikant, ICLR 2018): temperature-scaled softmax after a small input
perturbation that raises the top class's score. It needs the network and the images, so the
scores are computed during feature extraction (``odin_scores``) and the detector reads them.
C-OOD's benchmark used temperature 2 and epsilon 1e-5 (REFERENCE.md), our defaults.

Epsilon is a step in [0, 1] pixel space, as in the reference code (Liang et al.'s and
pytorch-ood's): the model sees normalised inputs (x - mean) / std, so the sign of the gradient
there is divided by the normalisation std of each channel before the step. Scores computed
before this was so (a step of epsilon in normalised space) were cached under another key
(``odin_t..``) and are never mixed with these (``odin-px_t..``).

The gradient is a convention (``gradient``): ``liang`` (default) is Liang et al.'s, the
cross-entropy of the temperature-scaled logits f(x)/T against the top class; ``cood`` is the
rule of C-OOD's code as restated in issue 32: the cross-entropy taken over the softmax output
(softmax(f(x)) passed where logits go) with T left out of the gradient. T = 2 and epsilon =
1e-5 are C-OOD's values; only with ``gradient=cood`` are they C-OOD's setting, and the results
say which (a note). Scores of the two gradients are cached under different keys."""
from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from . import PYTORCH_OOD, Detector, DetectorError, Head, Outputs, Param, register_detector

DEFAULT_TEMPERATURE = 2.0
DEFAULT_EPSILON = 1e-5
GRADIENTS = ("liang", "cood")


def odin_key(temperature: float, epsilon: float, gradient: str = "liang") -> str:
    """The name the scores are cached under: they depend on every parameter (Liang et al.'s
    gradient keeps the name it had before the gradient was a parameter)."""
    prefix = "odin-px" if gradient == "liang" else f"odin-{gradient}"
    return f"{prefix}_t{temperature:g}_e{epsilon:g}"


@register_detector
class ODIN(Detector):
    name = "odin"
    label = "ODIN"
    paper = "Liang, Li, Srikant, ICLR 2018"
    reference = (f"{PYTORCH_OOD} src/pytorch_ood/detector/odin.py (gradient liang; Liang et al.'s calData.py); "
                 "C-OOD's rule for gradient cood as restated in issue 32")
    parameters = (Param("temperature", float, DEFAULT_TEMPERATURE, 1e-3, 1e5, help="softmax temperature",
                        source="C-OOD's value, C-OOD's setting only with gradient cood; Liang et al.: 1000"),
                  Param("epsilon", float, DEFAULT_EPSILON, 0.0, 1.0, help="input perturbation",
                        source="C-OOD's value, C-OOD's setting only with gradient cood; Liang et al.: 0.0014"),
                  Param("gradient", str, "liang", help="the loss whose input gradient gives the step", choices=GRADIENTS,
                        source="Liang et al. (cross-entropy of f(x)/T)"))
    input_level = True

    @classmethod
    def input_key_for(cls, params: dict) -> str:
        return odin_key(float(params["temperature"]), float(params["epsilon"]), str(params.get("gradient", "liang")))

    def fit(self, fit: Outputs, head: Head | None = None) -> Detector:
        t, e, g = float(self.params["temperature"]), float(self.params["epsilon"]), self.params["gradient"]
        cood_values = t == DEFAULT_TEMPERATURE and e == DEFAULT_EPSILON
        if g == "cood" and cood_values:
            self.notes.append("ODIN: C-OOD's setting (its gradient rule, T = 2, epsilon = 1e-5)")
        elif cood_values:
            self.notes.append("ODIN: Liang et al.'s gradient with C-OOD's values T = 2, epsilon = 1e-5 (not C-OOD's setting, "
                              "which also takes its gradient rule: gradient cood)")
        else:
            self.notes.append(f"ODIN: {'C-OOD' if g == 'cood' else 'Liang et al.'}'s gradient rule, T = {t:g}, epsilon = {e:g}")
        return self

    @classmethod
    def input_scores(cls, lm: Any, paths: list, params: dict, *, batch_size: int, max_pixels: int,
                     progress: Callable[[int], None] | None = None, decoder: str | None = None) -> np.ndarray:
        return odin_scores(lm, paths, temperature=float(params["temperature"]), epsilon=float(params["epsilon"]),
                           gradient=str(params.get("gradient", "liang")), batch_size=batch_size, max_pixels=max_pixels,
                           progress=progress, decoder=decoder or "pil")

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
                gradient: str = "liang", batch_size: int = 16, max_pixels: int | None = None, progress: Callable[[int], None] | None = None,
                decoder: str = "pil") -> np.ndarray:
    """ODIN scores for image files with a loaded model (pipelines.features.classifiers.LoadedModel): with x the
    normalised input, x' = x - epsilon * sign(grad_x L) / std (per channel), L the cross-entropy
    of softmax(f(x)/T) against its own top class (``gradient="cood"``: L the cross-entropy of
    softmax(softmax(f(x))), T out of the gradient); score = max softmax(f(x')/T). This is a step of
    epsilon in [0, 1] pixel space, as the reference code takes it. NaN for a file that cannot be
    decoded. The float32 model is used (a step of 1e-5 would vanish in bfloat16 inputs), and the
    images go through ``decoder`` as the run's features do."""
    import torch

    from pipelines.features.extract import batches
    from pipelines.sources.images import DEFAULT_MAX_PIXELS

    if gradient not in GRADIENTS:
        raise DetectorError(f"ODIN: gradient {gradient!r} is not one of {', '.join(GRADIENTS)}")
    out = np.full(len(paths), np.nan)
    model = lm.model
    std = torch.tensor([float(v) for v in lm.data_config["std"]], dtype=torch.float32, device=lm.device).view(1, -1, 1, 1)
    for idx, x, bad in batches(lm, paths, decoder=decoder, batch_size=batch_size, num_workers=0 if decoder == "pil" else None,
                               max_pixels=max_pixels or DEFAULT_MAX_PIXELS):
        if x is not None:
            x = x.detach().requires_grad_(True)
            with torch.enable_grad():
                if gradient == "cood":
                    probs = model(x).softmax(dim=1)
                    loss = torch.nn.functional.cross_entropy(probs, probs.argmax(dim=1))
                else:
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
