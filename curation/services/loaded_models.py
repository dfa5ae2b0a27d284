"""The models a process predicts with: one loaded model kept per worker process (loading takes
seconds; chunks come by the hundred), and the check of a model name a user gave. Shared by
extraction, evaluation and the commands."""
from __future__ import annotations

from typing import Any

from django.conf import settings

_CACHE: dict[tuple, object] = {}


class ModelNameError(ValueError):
    """A model name that is neither a registered model nor a timm name; the message says so."""


def check_model_name(model_name: str) -> None:
    from pipelines.features.classifiers import MODELS

    if not model_name or len(model_name) > 200:
        raise ModelNameError("a model name is required")
    if model_name not in MODELS and "/" in model_name:
        raise ModelNameError(f"{model_name!r}: model names are registered names or timm names, not paths")


def loaded_model(name: str, weights: str = "") -> Any:
    """``pipelines.features.classifiers.load_model(name, weights)``, loaded once per process (one model at a
    time in memory)."""
    from pipelines.features.classifiers import load_model

    key = (name, weights or "")
    if key not in _CACHE:
        if settings.TORCH_THREADS:
            from pipelines.features.classifiers import set_torch_threads

            set_torch_threads(settings.TORCH_THREADS)  # several workers on one machine share its cores
        _CACHE.clear()
        lm = load_model(name, weights=weights or None)
        # on the CPU the forward pass runs through OpenVINO (pipelines.features.cpu_runtime), its graph
        # converted once per model and weights and kept under the data folder
        lm.extra["cpu_graph_dir"] = str(settings.DATA_DIR / "cpu_graphs")
        _CACHE[key] = lm
    return _CACHE[key]
