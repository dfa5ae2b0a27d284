"""Predictions and features from the real offline model on real photos (scikit-image and
scikit-learn ship them); bad files come back with their reason; weights are never random."""
from __future__ import annotations

import numpy as np
import pytest

from fixtures.images import broken_files, decompression_bomb_png
from pipelines.features.classifiers import MODELS, ModelUnavailable, load_model
from pipelines.features.extract import extract
from tests.conftest import real_photo

pytestmark = pytest.mark.slow  # the real model

TABBY, TIGER_CAT, EGYPTIAN_CAT = "n02123045", "n02123159", "n02124075"
EXPECTED_TOP1 = {  # photo -> acceptable top-1 wnids
    "chelsea.png": {TABBY, TIGER_CAT, EGYPTIAN_CAT},
    "coffee.png": {"n07920052"},  # espresso
    "camera.png": {"n04485082"},  # tripod
    "rocket.jpg": {"n03773504", "n04008634", "n04266014"},  # missile, projectile, space shuttle
    "motorcycle_left.png": {"n03785016", "n03791053"},  # moped, motor scooter
}


def test_offline_model_names_real_photos(lite0):
    paths = [str(real_photo(n)) for n in EXPECTED_TOP1]
    ex = extract(lite0, paths, batch_size=4, num_workers=0)
    correct = [n for n, r in zip(EXPECTED_TOP1, ex.results) if r.topk[0][0] in EXPECTED_TOP1[n]]
    assert len(correct) >= 3, [(n, r.topk[:2]) for n, r in zip(EXPECTED_TOP1, ex.results)]
    assert {"chelsea.png", "coffee.png", "camera.png"} <= set(correct)
    r = ex.results[1]  # coffee
    probs = [p for _w, p in r.topk]
    assert len(r.topk) == 5 and probs == sorted(probs, reverse=True) and 0.5 < probs[0] <= 1
    assert r.max_softmax == pytest.approx(probs[0]) and r.energy >= r.max_logit  # logsumexp >= max
    assert ex.features.dtype == np.float16 and ex.features.shape == (5, 1280)
    assert lite0.weights.endswith("efficientnet-lite0-57934424.pth")


def test_batching_and_loader_workers_do_not_change_results(lite0):
    paths = [str(real_photo(n)) for n in ("chelsea.png", "coffee.png", "camera.png")] + [str(real_photo("china.jpg", "sklearn"))]
    a = extract(lite0, paths, batch_size=4, num_workers=0)
    b = extract(lite0, paths, batch_size=1, num_workers=2)
    assert [r.topk[0][0] for r in a.results] == [r.topk[0][0] for r in b.results]
    assert np.allclose(a.features.astype(np.float32), b.features.astype(np.float32), atol=2e-2)


def test_bad_files_are_skipped_with_their_reason_and_the_rest_is_predicted(lite0, tmp_path):
    rng = np.random.default_rng(0)
    paths = [str(real_photo("coffee.png"))]
    for name, (data, _code) in broken_files(rng).items():
        (tmp_path / name).write_bytes(data)
        paths.append(str(tmp_path / name))
    (tmp_path / "bomb.png").write_bytes(decompression_bomb_png())
    paths.append(str(tmp_path / "bomb.png"))
    ex = extract(lite0, paths, batch_size=3, num_workers=1)
    assert ex.results[0].ok and ex.results[0].topk[0][0] == "n07920052"
    for path, r in zip(paths[1:], ex.results[1:]):
        assert not r.ok and r.error.startswith(path) and "cannot decode" in r.error
    assert "decompression bomb" in ex.results[-1].error
    assert ex.features.shape[0] == 1 and ex.results[0].row == 0


def test_a_timm_name_with_a_weights_file(lite0, tmp_path):
    import torch

    ckpt = tmp_path / "lite0_timm_naming.pth"
    torch.save(lite0.model.state_dict(), ckpt)
    lm = load_model("efficientnet_lite0.ra_in1k", weights=ckpt, device="cpu")
    assert lm.weights == str(ckpt)
    r = extract(lm, [str(real_photo("camera.png"))], num_workers=0).results[0]
    assert r.topk[0][0] == "n04485082"


def test_unavailable_weights_are_an_error_never_random_weights(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelUnavailable, match="--weights FILE"):
        load_model("resnet18.a1_in1k", device="cpu")
    with pytest.raises(ModelUnavailable, match="unknown model 'no_such_net'"):
        load_model("no_such_net", device="cpu")
    with pytest.raises(ModelUnavailable, match="no such file"):
        load_model("resnet18", weights="/nonexistent.pth", device="cpu")


@pytest.mark.parametrize("name", list(MODELS))
def test_every_registered_model_builds_with_an_imagenet_head(name):
    lm = load_model(name, device="cpu")
    assert len(lm.wnids) == 1000 and lm.feature_dim > 0 and lm.model.num_classes == 1000
    assert lm.data_config["input_size"][0] == 3 and lm.resize_side >= lm.data_config["input_size"][-1]
