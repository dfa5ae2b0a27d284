"""Vision-language models as evaluation models (issue 46): loading refuses what it cannot load in
one line, the image side gives CLIP's global embedding and GL-MCM's local tokens, the zero-shot
head is open_clip's and follows the ID set in force. The model here is built inside the tests
with RANDOM WEIGHTS (tests/vlm_model.py): formula fidelity only."""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from pipelines.evaluation.detectors import Outputs
from pipelines.evaluation.run import EvalInputs, restrict_to_classes
from pipelines.evaluation.vlm import ClipModel, TextEncoder, class_names, encode_images, load_clip, resolve_weights, templates, zero_shot_head
from pipelines.features.classifiers import ModelUnavailable, imagenet_1k_classes, load_model
from tests.vlm_model import TINY_ARCH, tiny_clip_file, tiny_clip_model

WNIDS = imagenet_1k_classes()[0]


@pytest.fixture(scope="module")
def cm(tmp_path_factory) -> ClipModel:
    return tiny_clip_model(tmp_path_factory.mktemp("tiny"))


def _photos() -> list[str]:
    import skimage

    d = Path(skimage.__file__).parent / "data"
    return [str(d / f) for f in ("chelsea.png", "coffee.png", "astronaut.png", "rocket.jpg", "camera.png")]


def _glmcm_local_reference(model, x: torch.Tensor) -> torch.Tensor:
    """GL-MCM's local tokens as AtsuMiyai/GL-MCM@b4a47bb63f34 clip/model.py computes them, written
    here from that code: every block runs as usual; in the last one, ln_1's output goes through the
    fused in-projection, the three thirds (q, k, v) each through the attention's out-projection,
    v gets the block's input added and then the MLP residual; ln_post, drop the class token, proj."""
    visual = model.visual
    tokens = visual.conv1(x).flatten(2).transpose(1, 2)
    cls = visual.class_embedding.expand(tokens.shape[0], 1, -1)
    h = visual.ln_pre(torch.cat([cls, tokens], dim=1) + visual.positional_embedding)
    blocks = list(visual.transformer.resblocks)
    for blk in blocks[:-1]:
        h = blk(h)
    last = blocks[-1]
    y = F.linear(last.ln_1(h), last.attn.in_proj_weight, last.attn.in_proj_bias)
    n, length, three_c = y.shape
    thirds = y.view(n, length, 3, three_c // 3).permute(2, 0, 1, 3)
    v = F.linear(thirds[2], last.attn.out_proj.weight, last.attn.out_proj.bias)
    v = v + h
    v = v + last.mlp(last.ln_2(v))
    return visual.ln_post(v)[:, 1:] @ visual.proj


def test_images_give_the_global_embedding_and_glmcm_local_tokens(cm):
    paths = _photos() + ["/no/such/file.jpg"]
    emb = encode_images(cm, paths, num_workers=0, batch_size=2)
    assert emb.row_of.tolist() == [0, 1, 2, 3, 4, -1] and "no/such/file.jpg" in emb.errors[5]
    from pipelines.sources.images import DEFAULT_MAX_PIXELS, load_rgb_for_model

    # the images as every model of the toolkit reads them (a JPEG decoded at reduced size where it is large)
    x = torch.stack([cm.transform(load_rgb_for_model(p, min_side=cm.resize_side, max_pixels=DEFAULT_MAX_PIXELS)) for p in paths[:5]])
    with torch.no_grad():
        glob = cm.model.encode_image(x).numpy()
        local = _glmcm_local_reference(cm.model, x).numpy()
    np.testing.assert_allclose(emb.features, glob, rtol=1e-4, atol=1e-5)
    assert emb.local.dtype == np.float16 and emb.local.shape == (5, 16, 32)
    np.testing.assert_allclose(emb.local.astype(np.float32), local, rtol=2e-3, atol=2e-3)  # kept as float16


def test_the_zero_shot_head_is_open_clips_and_names_come_from_open_clip_or_wordnet(cm, tmp_path):
    import open_clip

    names, source = class_names([WNIDS[0], WNIDS[251], "n00015388"])  # tench, dalmatian, animal (not ImageNet-1K)
    assert names == ["tench", "Dalmatian", "animal"] and "WordNet's first lemma for 1" in source
    head = zero_shot_head(cm, WNIDS[:6], template="openai-80", cache_dir=tmp_path / "text")
    with torch.no_grad():
        ref = open_clip.build_zero_shot_classifier(cm.model, cm.tokenizer, [open_clip.IMAGENET_CLASSNAMES[i] for i in range(6)],
                                                   open_clip.OPENAI_IMAGENET_TEMPLATES, num_classes_per_batch=3).T.numpy()
    np.testing.assert_allclose(head.embeddings, ref, rtol=1e-5, atol=1e-6)
    assert len(templates("openai-80")) == 80 and templates("imagenet-x") == ["this is a photo of a {}."]
    assert templates("mcm") == ["a photo of a {}"]
    # cached on disk per weights and prompts: a second encoder reads the file, no forward pass
    files = list((tmp_path / "text").rglob("*.npy"))
    assert len(files) == 80
    again = TextEncoder(cm, tmp_path / "text")
    again._encode = lambda texts: pytest.fail("encoded again")  # type: ignore[method-assign]
    np.testing.assert_array_equal(zero_shot_head(cm, WNIDS[:6], template="openai-80", encoder=again).embeddings, head.embeddings)


def test_text_is_encoded_over_the_longest_prompt_as_over_the_full_context(cm):
    """The causal text tower pools at the end-of-text token: trimming the padding changes nothing
    but float rounding (and saves most of the cost of short prompts)."""
    from pipelines.evaluation.vlm import encode_text_trimmed

    texts = ["the nice tench", "This is a striped photo", "this is a photo of a great white shark, also called white pointer."]
    tokens = cm.tokenizer(texts)
    with torch.no_grad():
        full, trimmed = cm.model.encode_text(tokens), encode_text_trimmed(cm.model, tokens)
    np.testing.assert_allclose(trimmed.numpy(), full.numpy(), rtol=1e-4, atol=1e-5)


def test_the_head_is_restricted_to_the_id_half_in_force(cm, tmp_path):
    """ImageNet-X prompts the ID names only: the 1,000-class head restricted to an ID half equals the
    head made from that half's names, and the logits follow."""
    encoder = TextEncoder(cm, tmp_path / "text")
    id_half = [WNIDS[i] for i in (251, 0, 7)]
    full = zero_shot_head(cm, WNIDS[:260], encoder=encoder)
    own = zero_shot_head(cm, id_half, encoder=encoder)
    rng = np.random.default_rng(0)
    feats = rng.normal(size=(5, cm.feature_dim))
    logits = (full.logit_scale * full.cosines(feats)).astype(np.float32)
    o = Outputs(features=feats, logits=logits, labels=np.array([251, 0, 7, 1, -1]))
    inputs = EvalInputs(fit=o, id_test=o, ood=o, ood_groups=np.array(["a"] * 5), text=full)
    restricted, record = restrict_to_classes(inputs, id_half, set_name="x-id")
    assert restricted.text is not None and restricted.text.wnids == tuple(id_half)
    np.testing.assert_allclose(restricted.text.embeddings, own.embeddings, rtol=1e-4, atol=1e-6)  # float32 text encoder, other batches
    np.testing.assert_allclose(restricted.id_test.logits, own.logit_scale * own.cosines(feats), rtol=1e-5)
    assert restricted.id_test.labels.tolist() == [0, 1, 2, -1, -1]
    assert "zero-shot head over the 3 class names of x-id only" in record["note"]


def test_weights_come_from_a_file_or_stop_with_one_line(tmp_path, monkeypatch):
    weights = tiny_clip_file(tmp_path)
    lm = load_clip(f"clip:{TINY_ARCH}:{weights}", device="cpu")
    assert lm.kind == "clip" and lm.weights == str(weights) and lm.identity.startswith("sha256:")
    assert abs(lm.logit_scale - 100) < 1e-3
    cases = [
        ("clip:ViT-B-16-quickgelu", "clip:ARCH:TAG or clip:ARCH:/path/to/weights"),
        ("clip:NoSuchArch:openai", "'NoSuchArch' is not an open_clip architecture"),
        ("clip:ViT-B-16-quickgelu:nosuchtag", "no pretrained tag 'nosuchtag'"),
        (f"clip:ViT-B-16-quickgelu:{tmp_path}/missing.bin", "no weights file"),
    ]
    for name, message in cases:
        with pytest.raises(ModelUnavailable, match=message) as info:
            load_clip(name)
        assert len(str(info.value).splitlines()) == 1
    # a file that is not the architecture's weights is refused, never filled with random values
    torch.save({"visual.proj": torch.zeros(3, 3)}, tmp_path / "partial.bin")
    with pytest.raises(ModelUnavailable, match="is not a checkpoint open_clip can load"):
        load_clip(f"clip:{TINY_ARCH}:{tmp_path / 'partial.bin'}")
    # the paper's weights by tag: not cached here and the hub unreachable -> one line with the fix
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf" / "hub"))
    import huggingface_hub.constants as hc

    monkeypatch.setattr(hc, "HF_HUB_CACHE", str(tmp_path / "hf" / "hub"))
    monkeypatch.setattr("pipelines.evaluation.vlm.unreachable", lambda url: "ConnectionRefusedError: refused")
    monkeypatch.setattr("os.path.expanduser", lambda p: str(tmp_path / p.lstrip("~/")) if p.startswith("~") else p)
    with pytest.raises(ModelUnavailable) as info:
        resolve_weights("clip:ViT-B-16-quickgelu:openai")
    msg = str(info.value)
    assert len(msg.splitlines()) == 1 and "not in the local cache" in msg
    assert "pass clip:ViT-B-16-quickgelu:/path/to/open_clip_pytorch_model.bin" in msg and "timm/vit_base_patch16_clip_224.openai" in msg
    # the classifiers' loader (predictions for the review screen) refuses it in one line
    with pytest.raises(ModelUnavailable, match="is a vision-language model"):
        load_model(f"clip:{TINY_ARCH}:{weights}")
    assert os.path.basename(str(weights)).startswith("tiny-clip-random")  # the tests' file says what it holds
