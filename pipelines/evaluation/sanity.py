"""The random-weight sanity check (ImageNet-OOD, Yang et al., ICLR 2024, sec. 4.2, Fig. 4; app. F).

A network that was never trained has no in-distribution, so a detector running on it should
score ID test images against any other set at AUROC about 0.5. Where random networks *do*
separate the two sets, the sets differ in low-level statistics (resolution, compression, colour,
blur, noise) and detectors will be rewarded for the wrong thing. For a curator this checks the
dataset: an OOD set should not be separable by random networks.

**RANDOM WEIGHTS.** This module, and only this module, runs models with random weights; every
result it produces says so (``"weights": "random ..."``). Predictions never use it.

Choices where the paper is silent (shared/REFERENCE-2.md 3.1), documented in docs/evaluation.md:
- model: ResNet-18 by default for a quick check (the paper: ResNet-50, also DenseNet-121 and
  WRN-50); Kaiming-normal initialisation of every convolution and linear layer (fan-out, ReLU
  gain, as the paper's "Kaiming normal"), zero biases, unit norm-layer scales;
- five random networks (seeds 0..4), ID fit statistics from the ID fit set's features of the
  same random network, inputs preprocessed as the trained model's (timm's data config);
- a sample of at most ``sample`` images per set (seeded), to keep it quick;
- the verdict: a set is *separable by random networks* when |mean AUROC - 0.5| > ``THRESHOLD``
  (0.1) for more than half of the detectors that ran.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from pipelines.evaluation.detectors import DETECTORS, DetectorError, Head, Outputs, get_detector
from pipelines.evaluation.metrics import ood_metrics
from pipelines.sources.layouts import openable

THRESHOLD = 0.10
DEFAULT_ARCH = "resnet18"
# Input-level methods need gradients through the trained model; the check runs output/feature ones.
SKIP = {"odin": "input-level (needs the trained model's gradients at extraction)"}
RANDOM_LABEL = "RANDOM WEIGHTS (sanity check only)"


def random_weight_model(arch: str = DEFAULT_ARCH, seed: int = 0, device: str = "cpu") -> Any:
    """A timm architecture with **random** Kaiming-normal weights, wrapped like a loaded model.
    For the sanity check only: its name and weights say RANDOM WEIGHTS."""
    import timm
    import torch
    from torch import nn

    from pipelines.features.classifiers import LoadedModel, ModelUnavailable, imagenet_1k_classes

    if not timm.is_model(arch):
        raise ModelUnavailable(f"sanity check: {arch!r} is not a timm architecture")
    torch.manual_seed(seed)
    model = timm.create_model(arch, pretrained=False, num_classes=1000)
    for m in model.modules():
        if isinstance(m, (nn.Conv2d, nn.Linear)):
            nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, (nn.BatchNorm2d, nn.GroupNorm, nn.LayerNorm)) and m.weight is not None:
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)
    model = model.eval().to(device)
    data_config = timm.data.resolve_data_config({}, model=model)
    wnids, labels = imagenet_1k_classes()
    return LoadedModel(name=f"{arch} [{RANDOM_LABEL}, seed {seed}]", model=model,
                       transform=timm.data.create_transform(**data_config, is_training=False), data_config=data_config,
                       device=device, weights=f"random: Kaiming normal, seed {seed}", feature_dim=int(getattr(model, "num_features")),
                       wnids=wnids, labels=labels)


@dataclass
class SanitySets:
    """Image paths per role; ``fit_labels`` are class indices (-1 unknown) of the fit images."""

    id_test: list[str]
    fit: list[str]
    fit_labels: list[int]
    others: dict[str, list[str]] = field(default_factory=dict)  # "ood", "shifted:NAME", ... -> paths


def sample(paths: Sequence, n: int, seed: int = 0) -> list:
    """At most ``n`` of ``paths``, the same ones for the same seed."""
    if len(paths) <= n:
        return list(paths)
    idx = np.sort(np.random.default_rng(seed).choice(len(paths), n, replace=False))
    return [paths[i] for i in idx]


def random_weight_check(sets: SanitySets, detectors: list[tuple[str, dict]], *, seeds: int = 5, arch: str = DEFAULT_ARCH,
                        decoder: str = "pil", device: str = "cpu", progress: Callable[[str], None] | None = None,
                        cpu_graph_dir: str | None = None) -> dict:
    """AUROC of every detector, ID test vs each other set, under ``seeds`` random networks: the
    per-seed values, their mean and standard deviation, and the verdict per set."""
    from pipelines.features.extract import decoded, extract

    runs: dict[str, dict[str, list[float]]] = {}
    notes: list[str] = [f"{name}: skipped, {why}" for name, _ in detectors if name in SKIP for why in [SKIP[name]]]
    notes += [f"{name}: skipped, input-level (computed from the trained model while extracting)" for name, _ in detectors
              if name not in SKIP and name in DETECTORS and DETECTORS[name].input_level]
    # input-level methods (ODIN, RankFeat) are computed from the trained model while extracting
    usable = [(n, p) for n, p in detectors if n not in SKIP and not (n in DETECTORS and DETECTORS[n].input_level)]
    errors: dict[str, str] = {}
    # The images are decoded once for all the networks (one architecture, one preprocessing); on the
    # CPU each network runs through OpenVINO (pipelines.features.cpu_runtime; converting one takes a few seconds).
    inputs: dict[str, list] = {}
    for seed in range(seeds):
        lm = random_weight_model(arch, seed, device)
        if cpu_graph_dir:  # where pipelines.features.cpu_runtime keeps its converted graphs
            lm.extra["cpu_graph_dir"] = cpu_graph_dir
        outs = {}
        for role, paths in (("id_test", sets.id_test), ("fit", sets.fit), *sets.others.items()):
            if role not in inputs:
                inputs[role] = decoded(lm, paths, decoder=decoder)
            ex = extract(lm, paths, keep_logits=True, decoder=decoder, num_workers=0, prepared=inputs[role])
            notes += [n for n in ex.notes if n not in notes]
            ok = ex.row_of >= 0
            labels = np.asarray(sets.fit_labels)[ok] if role == "fit" else None
            assert ex.logits is not None  # asked for with keep_logits
            outs[role] = Outputs(features=ex.features, logits=ex.logits, labels=labels)
        classifier = lm.model.get_classifier()
        head = Head(weight=classifier.weight.detach().cpu().numpy(), bias=classifier.bias.detach().cpu().numpy())
        for name, params in usable:
            try:
                det = get_detector(name, **params).fit(outs["fit"], head)
                id_scores = det.score(outs["id_test"])
                for role in sets.others:
                    auroc = ood_metrics(id_scores, det.score(outs[role]))["auroc"]
                    runs.setdefault(name, {}).setdefault(role, []).append(float(auroc))
            except (DetectorError, ValueError, np.linalg.LinAlgError) as exc:
                errors[name] = f"{type(exc).__name__}: {exc}"
        if progress:
            progress(f"random network {seed + 1}/{seeds}")
    per_set = {}
    for role in sets.others:
        table: dict[str, dict[str, Any]] = {name: {"aurocs": [round(a, 4) for a in v[role]], "mean": float(np.mean(v[role])), "std": float(np.std(v[role]))}
                 for name, v in runs.items() if name not in errors and role in v}
        off = [name for name, t in table.items() if abs(t["mean"] - 0.5) > THRESHOLD]
        per_set[role] = {"detectors": table, "off_chance": off,
                         "separable": bool(table) and len(off) > len(table) / 2}
    return {"weights": f"{RANDOM_LABEL}: {arch}, Kaiming normal, seeds 0..{seeds - 1}", "arch": arch, "seeds": seeds,
            "threshold": THRESHOLD, "sets": per_set, "errors": errors, "notes": notes,
            "n": {"id_test": len(sets.id_test), "fit": len(sets.fit), **{k: len(v) for k, v in sets.others.items()}}}


def colourfulness(path: str) -> float | None:
    """Hasler & Süsstrunk's (2003) colourfulness of the image file at ``path`` (None if unreadable)."""
    from PIL import Image

    try:
        with Image.open(openable(path)) as im:
            return colourfulness_of(im)
    except OSError:
        return None


def colourfulness_of(im: Any) -> float:
    """Hasler & Süsstrunk's (2003) colourfulness of an open image, on a 64-px-wide thumbnail:
    sqrt(sd_rg^2 + sd_yb^2) + 0.3 * sqrt(mean_rg^2 + mean_yb^2), rg = R - G, yb = (R + G) / 2 - B."""
    im.draft("RGB", (64, 64))
    small = im.convert("RGB")
    small.thumbnail((64, 64))
    a = np.asarray(small, dtype=np.float64)
    rg = a[..., 0] - a[..., 1]
    yb = (a[..., 0] + a[..., 1]) / 2 - a[..., 2]
    return float(np.hypot(rg.std(), yb.std()) + 0.3 * np.hypot(rg.mean(), yb.mean()))


# The IJG (libjpeg) standard luminance quantisation table at quality 50 (ITU-T T.81 Annex K, Table K.1).
_IJG_LUMA_50 = np.array([
    16, 11, 10, 16, 24, 40, 51, 61, 12, 12, 14, 19, 26, 58, 60, 55, 14, 13, 16, 24, 40, 57, 69, 56,
    14, 17, 22, 29, 51, 87, 80, 62, 18, 22, 37, 56, 68, 109, 103, 77, 24, 35, 55, 64, 81, 104, 113, 92,
    49, 64, 78, 87, 103, 121, 120, 101, 72, 92, 95, 98, 112, 100, 103, 99], dtype=np.float64)


def jpeg_quality(quantization: dict | None) -> float | None:
    """The IJG quality (1-100) a JPEG was most likely saved at, from its luminance quantisation
    table (Pillow's ``Image.quantization[0]``): libjpeg scales the Annex K table by
    S = 5000/Q (Q < 50) or 200 - 2Q (Q >= 50) percent, so Q follows from S = 100 * mean(table) / mean(K.1).
    None for files without a table (not JPEG)."""
    if not quantization or 0 not in quantization:
        return None
    table = np.asarray(quantization[0], dtype=np.float64)
    if table.size != 64:
        return None
    scale = 100.0 * table.mean() / _IJG_LUMA_50.mean()
    quality = (200.0 - scale) / 2.0 if scale <= 100.0 else 5000.0 / scale
    return float(min(max(quality, 1.0), 100.0))
