"""ImageNet-C's corruptions through the pinned implementation: deterministic under a seed, and as
strong per severity as Hendrycks & Dietterich (2019) define them (their parameter tables, written
out here)."""
from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from pipelines.evaluation.corruptions import BENCHMARK, CORRUPTIONS, EXTRA, CorruptionError, corrupt_array, parse_corruptions, parse_severities, plan, run_task

# ImageNet-C (make_imagenet_c.py): Gaussian noise adds N(0, c^2) in [0, 1] units; contrast scales
# the deviations from the image mean by c.
GAUSSIAN_NOISE_STD = [0.08, 0.12, 0.18, 0.26, 0.38]
CONTRAST_FACTOR = [0.4, 0.3, 0.2, 0.1, 0.05]


def test_nineteen_corruptions_and_parsing():
    assert len(BENCHMARK) == 15 and len(EXTRA) == 4 and len(CORRUPTIONS) == 19
    assert parse_corruptions("benchmark") == list(BENCHMARK) and parse_corruptions("extra,fog") == [*EXTRA, "fog"]
    assert parse_severities("5,1,3") == [1, 3, 5]
    with pytest.raises(CorruptionError, match="unknown corruption 'blurry'"):
        parse_corruptions("fog,blurry")
    with pytest.raises(CorruptionError, match="give a comma-separated list of 1..5"):
        parse_severities("0,6")


@pytest.mark.parametrize("severity", [1, 2, 3, 4, 5])
def test_gaussian_noise_has_the_papers_standard_deviation(severity):
    grey = np.full((224, 224, 3), 128, dtype=np.uint8)
    out = corrupt_array(grey, "gaussian_noise", severity, seed=1).astype(np.float64)
    # the paper's definition, simulated here: clip(x + N(0, c^2), 0, 1) * 255, stored as uint8
    c = GAUSSIAN_NOISE_STD[severity - 1]
    sim = np.uint8(np.clip(128 / 255 + np.random.default_rng(9).normal(0, c, grey.shape), 0, 1) * 255).astype(np.float64)
    assert out.std() == pytest.approx(sim.std(), rel=0.03)
    assert out.mean() == pytest.approx(sim.mean(), abs=1.5)


@pytest.mark.parametrize("severity", [1, 3, 5])
def test_contrast_scales_deviations_by_the_papers_factor(severity):
    rng = np.random.default_rng(0)
    img = rng.integers(60, 196, (224, 224, 3), dtype=np.uint8)
    out = corrupt_array(img, "contrast", severity, seed=0).astype(np.float64)
    ratio = (out - out.mean()).std() / (img - img.mean()).std()
    assert ratio == pytest.approx(CONTRAST_FACTOR[severity - 1], abs=0.02)


@pytest.mark.parametrize("name", ["gaussian_noise", "impulse_noise", "glass_blur", "spatter", "frost"])
def test_the_same_seed_gives_the_same_pixels(name):
    rng = np.random.default_rng(2)
    img = rng.integers(0, 255, (224, 224, 3), dtype=np.uint8)
    a, b = corrupt_array(img, name, 3, seed=7), corrupt_array(img, name, 3, seed=7)
    assert np.array_equal(a, b)
    if name != "frost":  # frost picks one of six frost pictures: two seeds may pick the same one
        assert not np.array_equal(a, corrupt_array(img, name, 3, seed=8))


def test_stronger_severity_moves_further_from_the_original(tmp_path):
    rng = np.random.default_rng(3)
    img = rng.integers(0, 255, (224, 224, 3), dtype=np.uint8)
    for name in ("gaussian_noise", "defocus_blur", "pixelate", "jpeg_compression"):
        diffs = [np.abs(corrupt_array(img, name, s, seed=0).astype(float) - img).mean() for s in (1, 3, 5)]
        assert 0 < diffs[0] < diffs[1] < diffs[2], (name, diffs)


def test_files_follow_imagenet_c_layout_and_geometry(tmp_path):
    src = tmp_path / "in" / "n01440764"
    src.mkdir(parents=True)
    Image.fromarray(np.random.default_rng(4).integers(0, 255, (300, 400, 3), dtype=np.uint8)).save(src / "fish.JPEG")
    tasks = plan([(src / "fish.JPEG", "n01440764/fish.JPEG")], ["fog"], [2], seed=0)
    assert [t.rel_out for t in tasks] == ["fog/2/n01440764/fish.jpeg"]
    path = run_task(tasks[0], tmp_path / "out")
    with Image.open(path) as im:
        assert im.size == (224, 224) and im.format == "JPEG"  # resized to 256, centre-cropped to 224
    assert path.read_bytes() == run_task(tasks[0], tmp_path / "again").read_bytes()
