"""ImageNet-OOD's random-weight sanity check on synthetic data: the paper's direction (blurred ID
images are told apart from ID by untrained networks; a random split of ID images is not)."""
from __future__ import annotations

import numpy as np
import pytest
from PIL import Image, ImageFilter

from fixtures.images import pattern_image
from pipelines.evaluation.sanity import RANDOM_LABEL, SanitySets, colourfulness, jpeg_quality, random_weight_check, random_weight_model, sample

KINDS = ("dots", "stripes", "checker", "blobs", "gradient")


def _images(root, name, n, rng):
    (root / name).mkdir(parents=True)
    out = []
    for i in range(n):
        palette = [tuple(int(c) for c in rng.integers(0, 255, 3)) for _ in range(3)]
        path = root / name / f"{i}.png"
        pattern_image(rng, KINDS[i % len(KINDS)], palette, (160, 160)).save(path)
        out.append(str(path))
    return out


@pytest.fixture(scope="module")
def check(tmp_path_factory):
    root = tmp_path_factory.mktemp("sanity")
    rng = np.random.default_rng(0)
    id_test, fit, split = _images(root, "id", 32, rng), _images(root, "fit", 32, rng), _images(root, "split", 32, rng)
    (root / "blur").mkdir()
    blurred = []
    for i, p in enumerate(id_test):
        q = root / "blur" / f"{i}.png"
        Image.open(p).filter(ImageFilter.GaussianBlur(4)).save(q)
        blurred.append(str(q))
    return random_weight_check(SanitySets(id_test=id_test, fit=fit, fit_labels=[-1] * len(fit),
                                          others={"blurred ID": blurred, "random split of ID": split}),
                               [("msp", {}), ("maxlogit", {}), ("energy", {}), ("knn", {"k": 5}), ("react", {}), ("odin", {}), ("rankfeat", {})],
                               seeds=2)


def test_blurred_id_images_are_separable_by_random_networks_a_random_split_is_not(check):
    blurred, split = check["sets"]["blurred ID"], check["sets"]["random split of ID"]
    assert blurred["separable"] and not split["separable"]
    assert all(abs(t["mean"] - 0.5) > 0.1 for d, t in blurred["detectors"].items() if d != "knn")
    assert all(abs(t["mean"] - 0.5) < 0.1 for t in split["detectors"].values())
    assert all(len(t["aurocs"]) == 2 for t in blurred["detectors"].values())  # one AUROC per random network


def test_results_say_random_weights_and_what_was_skipped(check):
    assert check["weights"].startswith(RANDOM_LABEL) and check["seeds"] == 2 and check["threshold"] == 0.1
    assert any("odin: skipped" in n for n in check["notes"]) and any("rankfeat: skipped" in n for n in check["notes"])
    assert "rankfeat" not in check.get("errors", {})
    lm = random_weight_model("resnet18", seed=3)
    assert "RANDOM WEIGHTS" in lm.name and lm.weights == "random: Kaiming normal, seed 3"
    w1 = random_weight_model("resnet18", seed=3).model.fc.weight.detach().numpy()
    assert np.array_equal(lm.model.fc.weight.detach().numpy(), w1)  # seeded: the same network again
    # Kaiming normal, fan-out, ReLU gain: std = sqrt(2 / fan_out) for the last layer (fan_out = 1000)
    assert w1.std() == pytest.approx(np.sqrt(2 / 1000), rel=0.05)


def test_sampling_and_colourfulness(tmp_path):
    assert sample(list(range(10)), 20) == list(range(10))
    assert sample(list(range(100)), 5, seed=1) == sample(list(range(100)), 5, seed=1) and len(sample(list(range(100)), 5)) == 5
    grey, red = tmp_path / "g.png", tmp_path / "r.png"
    Image.new("RGB", (50, 50), (128, 128, 128)).save(grey)
    Image.new("RGB", (50, 50), (255, 0, 0)).save(red)
    assert colourfulness(str(grey)) == pytest.approx(0.0)
    # a flat red image: rg = 255, yb = 127.5, no spread: 0.3 * hypot(255, 127.5)
    assert colourfulness(str(red)) == pytest.approx(0.3 * np.hypot(255, 127.5))


@pytest.mark.parametrize("quality", [30, 50, 75, 90])
def test_jpeg_quality_is_read_back_from_the_quantisation_tables(tmp_path, quality):
    path = tmp_path / f"q{quality}.jpg"
    Image.fromarray(np.random.default_rng(0).integers(0, 255, (64, 64, 3), dtype=np.uint8)).save(path, quality=quality)
    with Image.open(path) as im:
        assert jpeg_quality(im.quantization) == pytest.approx(quality, abs=2)
    assert jpeg_quality(None) is None
