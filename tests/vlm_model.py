"""A small open_clip model with RANDOM WEIGHTS, built inside the tests: formula fidelity only.

It lets the tests run every vision-language path (image and text encoders, GL-MCM's local
tokens, the zero-shot head, the detectors, the presets) where the real weights cannot be had.
Its scores mean nothing; the product's paths never make random weights (pipelines.evaluation.vlm loads a
file or refuses)."""
from __future__ import annotations

import json
from pathlib import Path

TINY_ARCH = "ViT-T-oodc-test"  # registered with open_clip by tiny_clip_file, in this process only
TINY_CONFIG = {
    "embed_dim": 32,
    "quick_gelu": True,
    "vision_cfg": {"image_size": 32, "layers": 2, "width": 64, "head_width": 32, "patch_size": 8},
    "text_cfg": {"context_length": 77, "vocab_size": 49408, "width": 64, "heads": 2, "layers": 2},
}


def register_tiny_arch(folder: Path) -> str:
    import open_clip

    if TINY_ARCH not in open_clip.list_models():
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"{TINY_ARCH}.json"
        path.write_text(json.dumps(TINY_CONFIG), encoding="utf-8")
        open_clip.add_model_config(path)
    return TINY_ARCH


def tiny_clip_module(folder: Path, seed: int = 0):
    """(model, eval transform, tokenizer) of the tiny architecture with RANDOM WEIGHTS (seeded)."""
    import open_clip
    import torch

    register_tiny_arch(folder)
    torch.manual_seed(seed)
    model, _, preprocess = open_clip.create_model_and_transforms(TINY_ARCH, pretrained=None)  # RANDOM WEIGHTS: tests only
    with torch.no_grad():  # spread the (random) logit scale to CLIP's 100 so scores use the real scale
        model.logit_scale.fill_(float(torch.log(torch.tensor(100.0))))
    return model.eval(), preprocess, open_clip.get_tokenizer(TINY_ARCH)


def tiny_clip_file(folder: Path, seed: int = 0) -> Path:
    """A weights file of the tiny architecture (RANDOM WEIGHTS), for clip:ViT-T-oodc-test:FILE."""
    import torch

    model, _, _ = tiny_clip_module(folder, seed)
    path = folder / f"tiny-clip-random-{seed}.bin"
    torch.save(model.state_dict(), path)
    return path


def tiny_clip_model(folder: Path, seed: int = 0):
    """A pipelines.evaluation.vlm.ClipModel around the tiny random model, its weights labelled as random."""
    from pipelines.evaluation.vlm import ClipModel

    model, preprocess, tokenizer = tiny_clip_module(folder, seed)
    return ClipModel.wrap(f"clip:{TINY_ARCH}:random", model, preprocess, tokenizer,
                          weights="RANDOM WEIGHTS (tests: formula fidelity only)", identity=f"random-seed-{seed}")
