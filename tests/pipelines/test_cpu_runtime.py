"""The CPU fast path (pipelines.features.cpu_runtime, OpenVINO) against torch on the real offline models and
real photos: the same logits, top-5 lists and features; its graph cached per weights and checked
on load; a model it cannot take runs in torch with a note saying so."""
from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from fixtures.images import DISTINCT_REAL_PHOTOS
from pipelines.features import cpu_runtime
from pipelines.features.classifiers import load_model
from pipelines.features.extract import extract
from tests.conftest import real_photo

pytestmark = pytest.mark.slow  # the real models

PHOTOS = [str(real_photo(name, pkg)) for pkg, name in DISTINCT_REAL_PHOTOS]


def _torch_only(lm):
    """The same loaded model, told to run its forward pass in torch."""
    return dataclasses.replace(lm, extra={"cpu_choice": cpu_runtime.Choice(None, "")})


def _rel(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Per row: the largest difference over the largest magnitude of the reference."""
    return np.abs(a - b).max(axis=1) / np.abs(b).max(axis=1)


@pytest.fixture(scope="module")
def lite2():
    return load_model("efficientnet_lite2", device="cpu")


@pytest.mark.parametrize("which", ["lite0", "lite2"])
def test_openvino_matches_torch_on_real_photos(which, lite0, lite2, tmp_path_factory):
    lm = dataclasses.replace(lite0 if which == "lite0" else lite2, extra={})
    choice = cpu_runtime.choose(lm)
    assert choice.graph is not None, choice.note
    assert choice.runtime.startswith("openvino")
    fast = extract(lm, PHOTOS, batch_size=8, num_workers=0, keep_logits=True)
    ref = extract(_torch_only(lm), PHOTOS, batch_size=8, num_workers=0, keep_logits=True)
    assert fast.notes == [] and (fast.row_of >= 0).all()
    assert fast.logits is not None and ref.logits is not None
    assert _rel(fast.logits, ref.logits).max() <= 1e-4
    assert _rel(fast.features, ref.features).max() <= 1e-4
    assert (fast.top_index == ref.top_index).all(), "top-5 lists differ"
    np.testing.assert_allclose(fast.top_prob, ref.top_prob, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(fast.energy, ref.energy, rtol=1e-4, atol=1e-4)
    # the review screen's predictions: cat for chelsea.png, espresso for coffee.png, from the graph
    by_name = dict(zip([n for _p, n in DISTINCT_REAL_PHOTOS], fast.results))
    assert by_name["coffee.png"].topk[0][0] == "n07920052"


def test_graph_is_cached_per_weights_and_checked_on_load(lite0, tmp_path):
    first = cpu_runtime.choose(dataclasses.replace(lite0, extra={}), cache_dir=tmp_path)
    assert first.graph is not None, first.note
    folder = first.graph.folder
    meta = json.loads((folder / "meta.json").read_text())
    assert meta["weights_sha256"] == cpu_runtime.weights_digest(lite0.model) and meta["parity"]["logits"] <= 1e-4
    assert set(meta["files"]) == {"model.xml", "model.bin"}
    # a second process loads the same folder without converting again
    _name, key = cpu_runtime._key(lite0)
    again = cpu_runtime._load(folder, key, threads=1)
    assert again is not None
    # a changed file is noticed and not used
    data = bytearray((folder / "model.bin").read_bytes())
    data[len(data) // 2] ^= 0xFF
    (folder / "model.bin").write_bytes(bytes(data))
    assert cpu_runtime._load(folder, key, threads=1) is None
    # other weights, another folder
    other = dataclasses.replace(lite0, extra={}, model=_perturbed(lite0.model))
    assert cpu_runtime._key(other)[0] != folder.name


def _perturbed(model):
    import copy

    import torch

    m = copy.deepcopy(model)
    with torch.no_grad():
        m.get_classifier().bias.add_(1.0)
    return m


def test_a_model_that_cannot_be_converted_runs_in_torch_with_a_note(lite0, tmp_path, monkeypatch):
    def refuse(*_a, **_k):
        raise RuntimeError("tracing failed on purpose")

    monkeypatch.setattr(cpu_runtime, "_convert", refuse)
    lm = dataclasses.replace(lite0, extra={"cpu_graph_dir": str(tmp_path)})
    ex = extract(lm, PHOTOS[:3], batch_size=4, num_workers=0)
    assert (ex.row_of >= 0).all()
    assert any("could not run through OpenVINO" in n and "tracing failed on purpose" in n and "torch" in n for n in ex.notes), ex.notes


def test_runtime_can_be_turned_off(lite0, monkeypatch):
    monkeypatch.setenv(cpu_runtime.ENV_RUNTIME, "torch")
    choice = cpu_runtime.choose(dataclasses.replace(lite0, extra={}))
    assert choice.graph is None and "torch" in choice.note and choice.runtime.startswith("torch")
