"""Vision-language models (open_clip) as evaluation models, and their zero-shot heads.

A CLIP model is named ``clip:ARCH:PRETRAINED``: an open_clip architecture and either one of its
pretrained tags (``clip:ViT-B-16-quickgelu:openai``, the OpenAI ViT-B/16 that ImageNet-X's paper
runs, Noda et al. app. A.1) or a local weights file (``clip:ViT-B-16-quickgelu:/models/vit-b-16.bin``).
Weights come from that file, from a local cache (the Hugging Face cache, open_clip's URL cache),
or from the hub where it can be reached; otherwise ``ModelUnavailable`` says, in one line, how to
supply the file. Random weights are never used here: the tests build their own small random
model and wrap it with ``ClipModel.wrap`` (labelled "formula fidelity only").

What one image gives (``encode_images``):

- the global image embedding (``encode_image``, not normalised), the features of every CLIP
  detector;
- GL-MCM's local embeddings (Miyai et al., "GL-MCM", IJCV 2025; their code AtsuMiyai/GL-MCM,
  ``clip/model.py``): for each patch token, the *value* path of the last transformer block (the
  block's input through ln_1, the value projection and the attention's output projection, plus
  the residual and the block's MLP), then ``ln_post`` and ``proj``. They are kept as float16.

The zero-shot head (``zero_shot_head``) is one text embedding per class: each template filled
with the class's name, encoded, L2-normalised, averaged over the templates and normalised again
(open_clip's ``build_zero_shot_classifier``; one template is the plain case). Class names are
open_clip's curated ImageNet-1K names for ImageNet-1K wnids, WordNet's first lemma otherwise.
Text embeddings are cached on disk per model weights, template and class list.

torch and open_clip are imported inside the functions: web code imports this module.
"""
from __future__ import annotations

import hashlib
import json
import os
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from pipelines.features.classifiers import ModelUnavailable, hub_timeout, unreachable

CLIP_PREFIX = "clip:"

# Prompt templates by key. "imagenet-x": the ImageNet-X benchmark's code (hoshi23/OOD-X-Banchmarks,
# its "MCM" prompt); "mcm": MCM's and GL-MCM's code ("a photo of a {c}", no full stop);
# "neglabel": NegLabel's config (prompt_templates[85], for ID names and negatives alike);
# "openai-80": the 80 prompts of CLIP's ImageNet evaluation as open_clip ships them.
TEMPLATE_KEYS = ("imagenet-x", "mcm", "neglabel", "openai-80")
DEFAULT_TEMPLATE = "imagenet-x"
TEMPLATE_SOURCES = {
    "imagenet-x": "ImageNet-X's code (hoshi23/OOD-X-Banchmarks, prompt key MCM)",
    "mcm": "MCM's and GL-MCM's code (deeplearning-wisc/MCM, AtsuMiyai/GL-MCM)",
    "neglabel": "NegLabel's config (XueJiang16/NegLabel, prompt index 85)",
    "openai-80": "CLIP's 80-prompt ImageNet ensemble (open_clip.OPENAI_IMAGENET_TEMPLATES)",
}


def templates(key: str) -> list[str]:
    """The template strings (``{}`` for the name) of a template key."""
    if key == "imagenet-x":
        return ["this is a photo of a {}."]
    if key == "mcm":
        return ["a photo of a {}"]
    if key == "neglabel":
        return ["the nice {}"]
    if key == "openai-80":
        from open_clip import OPENAI_IMAGENET_TEMPLATES

        return [t("{}") for t in OPENAI_IMAGENET_TEMPLATES]
    raise ValueError(f"prompt template {key!r}: choose one of {', '.join(TEMPLATE_KEYS)}")


def describe_template(key: str) -> str:
    ts = templates(key)
    return f"{key}: {ts[0]!r}" if len(ts) == 1 else f"{key}: {len(ts)} templates averaged ({TEMPLATE_SOURCES[key]})"


def is_clip(name: str) -> bool:
    return str(name).startswith(CLIP_PREFIX)


def parse_clip_name(name: str) -> tuple[str, str]:
    """(open_clip architecture, pretrained tag or weights path) of ``clip:ARCH:PRETRAINED``."""
    arch, _, pretrained = str(name)[len(CLIP_PREFIX):].partition(":")
    if not is_clip(name) or not arch or not pretrained:
        raise ModelUnavailable(f"model {name!r}: a vision-language model is named clip:ARCH:TAG or clip:ARCH:/path/to/weights "
                               "(e.g. clip:ViT-B-16-quickgelu:openai)")
    return arch, pretrained


def _looks_like_path(text: str) -> bool:
    return os.sep in text or "/" in text or text.endswith((".bin", ".pt", ".pth", ".safetensors", ".npz"))


_FILE_DIGESTS: dict[tuple, str] = {}


def file_digest(path: Path) -> str:
    """sha256 of a weights file (remembered per path, size and modification time in this process)."""
    st = path.stat()
    key = (str(path.resolve()), st.st_size, st.st_mtime_ns)
    if key not in _FILE_DIGESTS:
        h = hashlib.sha256()
        with open(path, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 22), b""):
                h.update(block)
        _FILE_DIGESTS[key] = h.hexdigest()
    return _FILE_DIGESTS[key]


@dataclass(frozen=True)
class ClipWeights:
    arch: str
    file: Path  # the checkpoint open_clip loads
    source: str  # where it came from, for the run's record
    identity: str  # what the text cache is keyed by: the file's sha256


def _cached_tag_file(cfg: dict) -> Path | None:
    """The checkpoint of an open_clip pretrained config where an earlier download left it."""
    if cfg.get("file") and Path(cfg["file"]).is_file():
        return Path(cfg["file"])
    if cfg.get("hf_hub"):
        from huggingface_hub import try_to_load_from_cache

        model_id, filename = os.path.split(cfg["hf_hub"])
        for fname in ([filename] if filename else ["open_clip_pytorch_model.bin", "open_clip_model.safetensors"]):
            found = try_to_load_from_cache(model_id, fname)
            if isinstance(found, str) and Path(found).is_file():
                return Path(found)
    if cfg.get("url"):
        from urllib.parse import urlparse

        found = Path(os.path.expanduser("~/.cache/clip")) / os.path.basename(urlparse(cfg["url"]).path)
        if found.is_file():
            return found
    return None


def _short(text: str, limit: int = 120) -> str:
    """A user-named path or model name cut for a one-line message."""
    text = str(text)
    return text if len(text) <= limit else f"{text[:limit - 3]}..."


def resolve_weights(name: str) -> ClipWeights:
    """Where the weights of ``name`` come from, without loading them: a file, the local cache, or
    a download where the hub answers. ModelUnavailable (one line: the model and the fix) otherwise."""
    import open_clip

    arch, pretrained = parse_clip_name(name)
    if arch not in open_clip.list_models():
        import difflib

        close = difflib.get_close_matches(arch, open_clip.list_models(), n=3)
        raise ModelUnavailable(f"model {name!r}: {arch!r} is not an open_clip architecture"
                               + (f" (close: {', '.join(close)})" if close else "") + "; open_clip.list_models() lists them")
    try:  # a path the user named: any OSError (too long, a loop, no permission) is one line, not a traceback
        if _looks_like_path(pretrained) or Path(pretrained).is_file():
            path = Path(pretrained).expanduser()
            if not path.is_file():
                raise ModelUnavailable(f"model {_short(name)!r}: no weights file {_short(str(path))}; pass the path of the "
                                       f"checkpoint (e.g. open_clip_pytorch_model.bin of {arch})")
            return ClipWeights(arch=arch, file=path, source=str(path), identity=f"sha256:{file_digest(path)}")
    except (OSError, RuntimeError) as exc:  # RuntimeError: expanduser of an unknown ~user
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise ModelUnavailable(f"model {_short(name)!r}: cannot read the weights file {_short(pretrained)} ({why}); "
                               f"pass a readable path of {arch}'s checkpoint (e.g. open_clip_pytorch_model.bin)") from None
    cfg = open_clip.get_pretrained_cfg(arch, pretrained)
    if not cfg:
        tags = open_clip.list_pretrained_tags_by_model(arch)
        raise ModelUnavailable(f"model {name!r}: open_clip has no pretrained tag {pretrained!r} for {arch} "
                               f"(tags: {', '.join(tags) or 'none'}); or pass clip:{arch}:/path/to/weights")
    cached = _cached_tag_file(cfg)
    where = f"hf.co/{os.path.split(cfg['hf_hub'])[0]}" if cfg.get("hf_hub") else cfg.get("url", "")
    if cached is None:
        if cfg.get("hf_hub"):
            from huggingface_hub import constants

            address = constants.ENDPOINT
        else:
            address = cfg.get("url", "")
        problem = unreachable(address) if address else "no download address"
        if problem:
            raise ModelUnavailable(
                f"model {name!r}: its weights are not in the local cache and {address} is unreachable ({problem}, tried once "
                f"with a {hub_timeout():g} s timeout). Download them where the hub is reachable ({where}: "
                f"open_clip_pytorch_model.bin) and pass clip:{arch}:/path/to/open_clip_pytorch_model.bin")
        from open_clip.pretrained import download_pretrained

        try:
            cached = Path(download_pretrained(cfg))
        except Exception as exc:  # hub errors come in many types
            raise ModelUnavailable(f"model {name!r}: could not download its weights from {where} ({type(exc).__name__}: "
                                   f"{str(exc)[:160]}); pass clip:{arch}:/path/to/weights") from None
    return ClipWeights(arch=arch, file=cached, source=f"{arch} pretrained={pretrained} ({where}; file {cached})",
                       identity=f"sha256:{file_digest(cached)}")


def check_weights_file(name: str, w: ClipWeights) -> None:
    """The checkpoint ``w.file`` opens with the loader open_clip would use for it, without building
    the model: a safetensors header (keys and shapes), a torch.save file under ``weights_only=True``
    (memory-mapped where the format allows: no tensor is read), or a big_vision .npz/.npy, which
    open_clip loads only into a SigLIP-style architecture (a timm image tower). ModelUnavailable in
    one line naming the file and the fix otherwise (a pickle, a zip, a truncated or corrupt file)."""
    fix = f"pass {w.arch}'s open_clip checkpoint (open_clip_pytorch_model.bin or open_clip_model.safetensors)"
    where = f"model {_short(name)!r}: {_short(str(w.file))}"
    suffix = w.file.suffix.lower()
    with warnings.catch_warnings():  # a loader's warning would be a second line on the command line
        warnings.simplefilter("ignore")
        _open_checkpoint(w, where, fix, suffix)


def _open_checkpoint(w: ClipWeights, where: str, fix: str, suffix: str) -> None:
    import open_clip

    try:
        if suffix in (".npz", ".npy"):  # open_clip.factory.load_checkpoint: big_vision (SigLIP) weights
            cfg = open_clip.get_model_config(w.arch) or {}
            if not (cfg.get("vision_cfg") or {}).get("timm_model_name"):
                raise ModelUnavailable(f"{where} is big_vision (.npz) weights, which open_clip loads only into a SigLIP "
                                       f"architecture with a timm image tower, not {w.arch}; {fix}")
            with np.load(w.file, allow_pickle=False) as npz:
                keys = list(getattr(npz, "files", []))
            if not any(k.startswith("params/img/") for k in keys):
                raise ModelUnavailable(f"{where} holds no big_vision image-tower weights (no params/img/...); {fix}")
            return
        if str(w.file).endswith(".safetensors"):  # open_clip.factory.load_state_dict: safetensors.torch.load_file
            from safetensors import safe_open

            with safe_open(str(w.file), framework="pt") as fh:
                if not list(fh.keys()):
                    raise ModelUnavailable(f"{where} holds no tensors; {fix}")
            return
        import torch

        try:
            state = torch.load(w.file, map_location="cpu", weights_only=True, mmap=True)
        except RuntimeError as exc:
            if "mmap" not in str(exc):
                raise
            state = torch.load(w.file, map_location="cpu", weights_only=True)  # the legacy format: read once
        if isinstance(state, dict) and "state_dict" in state:
            state = state["state_dict"]
        if not isinstance(state, dict) or not state or not all(isinstance(v, torch.Tensor) for v in state.values()):
            raise ModelUnavailable(f"{where} is not a state dict of tensors ({type(state).__name__}); {fix}")
    except ModelUnavailable:
        raise
    except Exception as exc:  # the loaders' errors come in many types: UnpicklingError, RuntimeError, SafetensorError, ...
        if type(exc).__name__ == "UnpicklingError":  # torch's own text advises weights_only=False: never for a user's file
            first = "a pickle that is not a torch.save state dict of tensors"
        else:
            first = (str(exc).strip().splitlines() or [""])[0][:160]
        raise ModelUnavailable(f"{where} is not a checkpoint open_clip can load ({type(exc).__name__}: {first}); {fix}") from None


# -- the model -------------------------------------------------------------------------------------


@dataclass
class ClipModel:
    """A loaded open_clip model with what the evaluation's image loading needs (the fields of
    pipelines.features.classifiers.LoadedModel that ``pipelines.features.extract.batches`` reads)."""

    name: str
    model: Any  # open_clip CLIP in eval mode on ``device``
    transform: Any  # open_clip's eval preprocessing
    tokenizer: Any
    data_config: dict
    device: str
    weights: str  # where the weights came from, for the run's record
    identity: str  # the weights' sha256 (keys the text-embedding cache)
    feature_dim: int
    logit_scale: float
    extra: dict = field(default_factory=dict)
    kind: str = "clip"

    @property
    def resize_side(self) -> int:
        return int(self.data_config["input_size"][-1])

    @classmethod
    def wrap(cls, name: str, model: Any, transform: Any, tokenizer: Any, *, weights: str, identity: str,
             device: str = "cpu") -> "ClipModel":
        """A ClipModel around an open_clip module already built (the loader below; the tests' own
        random-weight model, whose ``weights`` they label as such)."""
        from open_clip import get_model_preprocess_cfg

        pre = get_model_preprocess_cfg(model)  # what open_clip's own eval transform does: resize the short side, centre crop
        size = pre["size"] if isinstance(pre["size"], (tuple, list)) else (pre["size"], pre["size"])
        data_config = {"input_size": (3, int(size[0]), int(size[1])), "interpolation": pre.get("interpolation", "bicubic"),
                       "mean": tuple(pre["mean"]), "std": tuple(pre["std"]), "crop_pct": 1.0, "crop_mode": "center"}
        dim = getattr(model.visual, "output_dim", None) or int(model.text_projection.shape[-1])
        return cls(name=name, model=model.eval().to(device), transform=transform, tokenizer=tokenizer, data_config=data_config,
                   device=device, weights=weights, identity=identity, feature_dim=int(dim),
                   logit_scale=float(model.logit_scale.detach().exp().item()))


def load_clip(name: str, *, device: str | None = None) -> ClipModel:
    """The vision-language model ``name`` with its real weights (``resolve_weights``), in eval mode."""
    import open_clip
    import torch

    w = resolve_weights(name)
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    try:
        model, _, preprocess = open_clip.create_model_and_transforms(w.arch, pretrained=str(w.file), device=device)
    except Exception as exc:  # a file that is not these weights: missing keys, wrong shapes, not a checkpoint
        first = (str(exc).strip().splitlines() or [""])[0][:200]
        raise ModelUnavailable(f"model {name!r}: {w.file} is not a checkpoint open_clip can load into {w.arch} "
                               f"({type(exc).__name__}: {first}); pass that architecture's open_clip_pytorch_model.bin") from None
    return ClipModel.wrap(name, model, preprocess, open_clip.get_tokenizer(w.arch), weights=w.source, identity=w.identity,
                          device=device)


def _last_block_values(cm: ClipModel, block_input: Any) -> Any:
    """GL-MCM's local tokens from the last block's input ``x`` [N, L, W] (batch first): the value
    projection of ln_1(x) through the attention's output projection, added to x, then the block's
    MLP on that (with its residual), then ln_post and proj; the class token dropped."""
    import torch.nn.functional as F

    visual = cm.model.visual
    block = visual.transformer.resblocks[-1]
    width = block_input.shape[-1]
    attn = block.attn
    y = block.ln_1(block_input)
    v = F.linear(y, attn.in_proj_weight[2 * width:], attn.in_proj_bias[2 * width:] if attn.in_proj_bias is not None else None)
    v = attn.out_proj(v)
    v = block_input + block.ls_1(v)
    v = v + block.ls_2(block.mlp(block.ln_2(v)))
    v = visual.ln_post(v)
    return v[:, 1:] @ visual.proj


def check_local_path(cm: ClipModel) -> None:
    """GL-MCM's local tokens need a ViT with a class token, nn.MultiheadAttention blocks and a
    projection (CLIP's ViTs in open_clip); a clear error for others."""
    visual = cm.model.visual
    blocks = getattr(getattr(visual, "transformer", None), "resblocks", None)
    ok = (blocks is not None and len(blocks) and hasattr(blocks[-1], "attn") and hasattr(blocks[-1].attn, "in_proj_weight")
          and getattr(visual, "proj", None) is not None and getattr(visual, "pool_type", "tok") == "tok"
          and getattr(visual, "attn_pool", None) is None)
    if not ok:
        raise ModelUnavailable(f"{cm.name}: GL-MCM's local tokens need an open_clip ViT with a class token and a projection; "
                               "this architecture has none")


@dataclass
class ImageEmbeddings:
    row_of: np.ndarray  # int64 [n_inputs]: row in the arrays below, -1 for a file that failed
    errors: dict[int, str]
    features: np.ndarray  # float32 [n_ok, D]: global image embeddings (not normalised)
    local: np.ndarray  # float16 [n_ok, P, D]: GL-MCM's local embeddings (not normalised)
    runtime: str = ""


def encode_images(cm: ClipModel, paths: Sequence[Any], *, batch_size: int = 32, decoder: str = "pil",
                  num_workers: int | None = None, max_pixels: int | None = None,
                  progress: Callable[[int], None] | None = None, local: bool = True) -> ImageEmbeddings:
    """Global and local embeddings of the images at ``paths`` (one forward pass each; files that
    cannot be decoded are reported in ``errors``)."""
    import torch

    from pipelines.features.extract import batches
    from pipelines.sources.images import DEFAULT_MAX_PIXELS

    if local:
        check_local_path(cm)
    captured: dict[str, Any] = {}
    transformer = cm.model.visual.transformer
    hook = None
    if local:
        def keep_input(_module, args):
            captured["x"] = args[0]
        hook = transformer.resblocks[-1].register_forward_pre_hook(keep_input)
    feats: list[np.ndarray] = []
    locs: list[np.ndarray] = []
    inputs: list[int] = []
    errors: dict[int, str] = {}
    try:
        with torch.inference_mode():
            for idx, x, bad in batches(cm, paths, decoder=decoder, batch_size=batch_size, num_workers=num_workers,  # type: ignore[arg-type]
                                       max_pixels=max_pixels or DEFAULT_MAX_PIXELS):
                for i, err in bad:
                    errors[i] = err
                if x is not None:
                    g = cm.model.encode_image(x.to(cm.device))
                    feats.append(g.float().cpu().numpy())
                    if local:
                        xin = captured.pop("x")
                        if not getattr(transformer, "batch_first", True):
                            xin = xin.transpose(0, 1)
                        locs.append(_last_block_values(cm, xin).float().cpu().numpy().astype(np.float16))
                    inputs.extend(idx)
                if progress:
                    progress(len(idx) + len(bad))
    finally:
        if hook is not None:
            hook.remove()
    order = np.asarray(inputs, dtype=np.int64)
    perm = np.argsort(order, kind="stable")
    row_of = np.full(len(paths), -1, dtype=np.int64)
    row_of[order[perm]] = np.arange(len(perm))
    d = cm.feature_dim
    f = np.concatenate(feats)[perm] if feats else np.zeros((0, d), dtype=np.float32)
    loc = np.concatenate(locs)[perm] if locs else np.zeros((0, 0, d), dtype=np.float16)
    return ImageEmbeddings(row_of=row_of, errors=errors, features=f, local=loc,
                           runtime=f"open_clip torch {cm.device} float32")


# -- the text side ---------------------------------------------------------------------------------


def imagenet_1k_names() -> dict[str, str]:
    """wnid -> open_clip's curated ImageNet-1K class name (its list follows the sorted wnids)."""
    from open_clip import IMAGENET_CLASSNAMES

    from pipelines.features.classifiers import imagenet_1k_classes

    wnids = imagenet_1k_classes()[0]
    if len(wnids) != len(IMAGENET_CLASSNAMES):
        raise ValueError(f"open_clip lists {len(IMAGENET_CLASSNAMES)} ImageNet class names for {len(wnids)} ImageNet-1K classes")
    return dict(zip(wnids, IMAGENET_CLASSNAMES))


def class_names(wnids: Sequence[str]) -> tuple[list[str], str]:
    """The prompt name of each wnid, and where the names come from: open_clip's curated ImageNet
    names for ImageNet-1K classes, WordNet's first lemma (underscores as spaces) for others."""
    curated = imagenet_1k_names()
    lemmas: dict[str, str] | None = None
    out = []
    other = 0
    for w in wnids:
        if w in curated:
            out.append(curated[w])
            continue
        if lemmas is None:
            from pipelines.classes.imagenet import imagenet_lemmas

            lemmas = imagenet_lemmas()
        lemma = (lemmas.get(w) or "").split(",")[0].strip()
        if not lemma:
            raise ValueError(f"class {w}: no name for its prompt (neither an ImageNet-1K class nor an ImageNet-21K lemma)")
        out.append(lemma.replace("_", " "))
        other += 1
    source = ("open_clip's curated ImageNet-1K names" if not other else
              f"open_clip's curated ImageNet-1K names, WordNet's first lemma for {other} other class(es)")
    return out, source


class TextEncoder:
    """Text embeddings of prompts through one CLIP model: unit vectors (calling it) or the
    encoder's raw outputs (``raw``, for methods that average before normalising, as CSP), cached
    on disk under ``cache_dir`` (one file per model weights and list of prompts) and in memory."""

    def __init__(self, cm: ClipModel, cache_dir: Path | None = None, batch_size: int = 256):
        self.cm, self.batch_size = cm, batch_size
        self.cache_dir = Path(cache_dir) / hashlib.sha256(cm.identity.encode()).hexdigest()[:16] if cache_dir else None
        self._memory: dict[str, np.ndarray] = {}

    def key(self, texts: Sequence[str]) -> str:
        h = hashlib.sha256(("raw:" + self.cm.identity).encode())
        for t in texts:
            h.update(b"\x00" + t.encode("utf-8"))
        return h.hexdigest()

    def __call__(self, texts: Sequence[str]) -> np.ndarray:
        """float64 [len(texts), D], each row of unit length."""
        emb = self.raw(texts)
        return emb / np.linalg.norm(emb, axis=1, keepdims=True)

    def raw(self, texts: Sequence[str]) -> np.ndarray:
        """float64 [len(texts), D]: the text encoder's outputs as they are."""
        texts = list(texts)
        key = self.key(texts)
        if key in self._memory:
            return self._memory[key]
        path = self.cache_dir / f"{key[:32]}.npy" if self.cache_dir else None
        if path is not None and path.is_file():
            emb = np.load(path, allow_pickle=False)
        else:
            emb = self._encode(texts)
            if path is not None:
                from pipelines.names import atomic_write

                path.parent.mkdir(parents=True, exist_ok=True)
                atomic_write(path, lambda fh: np.save(fh, emb), root=path.parent)
                meta = path.with_suffix(".json")
                atomic_write(meta, lambda fh: fh.write(json.dumps({"model": self.cm.name, "weights": self.cm.identity,
                                                                  "n": len(texts), "first": texts[:3]}).encode()), root=path.parent)
        self._memory[key] = emb
        return emb

    def _encode(self, texts: list[str]) -> np.ndarray:
        import torch

        out = []
        with torch.inference_mode():
            for start in range(0, len(texts), self.batch_size):
                tokens = self.cm.tokenizer(texts[start:start + self.batch_size]).to(self.cm.device)
                out.append(encode_text_trimmed(self.cm.model, tokens).float().cpu().numpy().astype(np.float64))
        return np.concatenate(out) if out else np.zeros((0, self.cm.feature_dim))


def encode_text_trimmed(model: Any, tokens: Any) -> Any:
    """``model.encode_text(tokens)``, computed over the batch's longest prompt instead of the full
    77-token context where that cannot change the result: CLIP's text transformer is causal (a
    position never sees the padding after it) and pools at the end-of-text token (the largest
    token id). Short prompts ("the nice {}") then cost a fraction of the full context (NegLabel
    encodes 140,000 of them). Other text towers take open_clip's own path."""
    import torch
    from open_clip.model import CLIP
    from open_clip.transformer import text_global_pool

    length = int((tokens != 0).sum(dim=1).max()) if tokens.numel() else 0
    if (type(model) is not CLIP or getattr(model, "text_pool_type", "") != "argmax" or model.attn_mask is None
            or not 0 < length < tokens.shape[1] or not bool((tokens[:, length:] == 0).all())):
        return model.encode_text(tokens)
    t = tokens[:, :length]
    cast = model.transformer.get_cast_dtype()
    x = model.token_embedding(t).to(cast) + model.positional_embedding[:length].to(cast)
    x = model.transformer(x, attn_mask=model.attn_mask[:length, :length])
    x = text_global_pool(model.ln_final(x), t, "argmax")
    proj = model.text_projection
    if proj is None:
        return x
    return proj(x) if isinstance(proj, torch.nn.Linear) else x @ proj


def class_embeddings(encode: Callable[[Sequence[str]], np.ndarray], names: Sequence[str], template_strings: Sequence[str]) -> np.ndarray:
    """One unit vector per class: each template's normalised prompt embedding, averaged over the
    templates and normalised (open_clip's build_zero_shot_classifier; float64 here)."""
    total = None
    for t in template_strings:
        emb = encode([t.format(n) for n in names])
        total = emb if total is None else total + emb
    assert total is not None
    mean = total / len(template_strings)
    return mean / np.linalg.norm(mean, axis=1, keepdims=True)


def zero_shot_head(cm: ClipModel, wnids: Sequence[str], *, template: str = DEFAULT_TEMPLATE, cache_dir: Path | None = None,
                   encoder: TextEncoder | None = None) -> Any:
    """The zero-shot head of ``cm`` over the classes ``wnids`` (pipelines.evaluation.detectors.TextHead)."""
    from pipelines.evaluation.detectors import TextHead

    names, source = class_names(wnids)
    encode = encoder or TextEncoder(cm, cache_dir)
    emb = class_embeddings(encode, names, templates(template))
    return TextHead(wnids=tuple(wnids), names=tuple(names), embeddings=emb, template=template,
                    template_text=describe_template(template), names_source=source, logit_scale=cm.logit_scale,
                    encode=encode, model=cm.name)

