"""NINCO's 17 OOD unit tests (appendix G), checked statistically on generated pictures."""
from __future__ import annotations

import csv
import json
from collections import Counter

import numpy as np
import pytest
from PIL import Image as PILImage

from pipelines.export import unit_tests as ut
from pipelines.export.unit_tests import make_picture, write_unit_tests

NAMES = ("uniform_noise gaussian_noise rademacher_noise pixel_permutation black white grey monochrome tricolour "
         "primary_tricolour horizontal_stripes vertical_stripes smooth_noise smooth_noise_plus smooth_colour "
         "smooth_pixel_permutation blobs").split()


@pytest.fixture(scope="module")
def id_samples(tmp_path_factory):
    """Three ID images of different sizes and formats, one of them a real photo."""
    from fixtures.demo import package_data_file

    root = tmp_path_factory.mktemp("id")
    PILImage.fromarray(np.random.default_rng(1).integers(0, 256, (60, 90, 3), dtype=np.uint8)).save(root / "a.png")
    ramp = np.linspace(0, 255, 80, dtype=np.uint8)[None, :, None].repeat(50, axis=0).repeat(3, axis=2)
    PILImage.fromarray(ramp).save(root / "b.jpg", quality=95)
    PILImage.open(package_data_file("skimage", "chelsea.png")).convert("RGB").resize((120, 100)).save(root / "c.webp")
    samples, refused = ut.id_samples_from_folder(root)
    assert not refused
    return samples


def pictures(test, samples, n=40, seed=0):
    return [make_picture(test, seed=seed, index=i, samples=samples) for i in range(n)]


def test_the_seventeen_tests_are_registered_in_ninco_order():
    assert list(ut.UNIT_TESTS) == NAMES


def test_black_white_grey_monochrome(id_samples):
    for arr, _s, _p in pictures("black", id_samples, 5):
        assert arr.max() == 0.0
    for arr, _s, _p in pictures("white", id_samples, 5):
        assert arr.min() == 1.0
    greys = []
    for arr, _s, p in pictures("grey", id_samples, 200):
        assert np.ptp(arr) == 0.0 and arr.flat[0] == pytest.approx(p["value"], abs=1e-6)
        greys.append(p["value"])
    assert np.mean(greys) == pytest.approx(0.5, abs=0.06) and min(greys) < 0.1 and max(greys) > 0.9  # uniform in [0, 1]
    for arr, _s, p in pictures("monochrome", id_samples, 20):
        assert np.ptp(arr.reshape(-1, 3), axis=0).max() == 0.0  # one colour everywhere
        assert np.allclose(arr[0, 0], p["colour"], atol=1e-6)
        assert np.ptp(arr[0, 0]) > 0  # a colour, not a grey


def test_noise_has_the_recipe_mean_and_spread(id_samples):
    arr = np.concatenate([a.ravel() for a, _s, _p in pictures("uniform_noise", id_samples, 10)])
    assert arr.mean() == pytest.approx(0.5, abs=0.01) and arr.std() == pytest.approx(np.sqrt(1 / 12), abs=0.01)
    assert arr.min() >= 0 and arr.max() <= 1
    arr = np.concatenate([a.ravel() for a, _s, _p in pictures("rademacher_noise", id_samples, 10)])
    assert set(np.unique(arr)) == {0.0, 1.0} and arr.mean() == pytest.approx(0.5, abs=0.01)
    sigmas = Counter()
    for a, _s, p in pictures("gaussian_noise", id_samples, 70):
        sigmas[p["sigma"]] += 1
        assert a.mean() == pytest.approx(0.5, abs=0.02)
        if p["sigma"] <= 0.15:  # clipping at 0 and 1 is negligible up to 3.3 sigma
            assert a.std() == pytest.approx(p["sigma"], rel=0.05)
        else:
            assert a.std() < p["sigma"] and a.min() >= 0 and a.max() <= 1  # clipped into [0, 1]
    assert set(sigmas) == set(ut.GAUSSIAN_SIGMAS)


def test_pixel_permutations_keep_the_id_images_colours(id_samples):
    for arr, sample, _p in pictures("pixel_permutation", id_samples, 6):
        original = ut.id_pixels_of(sample.path)
        assert arr.shape == original.shape
        assert not np.array_equal(arr, original) or len(np.unique(original.reshape(-1, 3), axis=0)) == 1
        # the same pixels (whole colours), only moved
        a = np.sort(arr.reshape(-1, 3).view([("r", float), ("g", float), ("b", float)]), axis=0)
        b = np.sort(original.reshape(-1, 3).view([("r", float), ("g", float), ("b", float)]), axis=0)
        assert np.array_equal(a, b)
    for arr, sample, p in pictures("smooth_pixel_permutation", id_samples, 14):
        original = ut.id_pixels_of(sample.path)
        assert arr.shape == original.shape and p["sigma"] in ut.SMOOTH_PERMUTATION_SIGMAS
        assert arr.mean() == pytest.approx(original.mean(), abs=0.02)  # blurring keeps the mean
        assert np.abs(np.diff(arr, axis=1)).mean() < np.abs(np.diff(ut._permuted(np.random.default_rng(0), original), axis=1)).mean()


def _stripe_count(line: np.ndarray) -> int:
    return 1 + int(np.any(np.diff(line, axis=0) != 0, axis=1).sum())


def test_stripes_are_stripes(id_samples):
    counts = Counter()
    for arr, _s, p in pictures("horizontal_stripes", id_samples, 60):
        assert np.ptp(arr, axis=1).max() == 0.0  # every row one colour
        assert _stripe_count(arr[:, 0]) == p["stripes"]
        counts[p["stripes"]] += 1
    assert set(counts) == set(ut.STRIPE_COUNTS)
    for arr, _s, p in pictures("vertical_stripes", id_samples, 20):
        assert np.ptp(arr, axis=0).max() == 0.0
        assert _stripe_count(arr[0, :]) == p["stripes"]
    orientations = Counter()
    for test in ("tricolour", "primary_tricolour"):
        for arr, _s, p in pictures(test, id_samples, 40):
            line = arr[0, :] if p["vertical"] else arr[:, 0]
            assert np.ptp(arr, axis=0 if p["vertical"] else 1).max() == 0.0
            bands = np.array_split(np.arange(len(line)), 3)  # three equal stripes
            for band, colour in zip(bands, p["colours"]):
                assert np.allclose(line[band], colour, atol=1e-6)
            if test == "primary_tricolour":
                assert set(np.unique(arr)) <= {0.0, 1.0}
            orientations[p["vertical"]] += 1
    assert orientations[True] > 20 and orientations[False] > 20


def test_smooth_noise_scalings(id_samples):
    for arr, _s, p in pictures("smooth_noise", id_samples, 12):
        assert p["sigma"] in ut.SMOOTH_SIGMAS
        assert arr.min() == pytest.approx(0.0, abs=1e-9) and arr.max() == pytest.approx(1.0, abs=1e-9)
        # one scaling for all channels: not every channel reaches both ends
        ends = [(arr[..., c].min() < 1e-9, arr[..., c].max() > 1 - 1e-9) for c in range(3)]
        assert sum(lo for lo, _ in ends) >= 1 and sum(hi for _, hi in ends) >= 1
    for arr, _s, _p in pictures("smooth_noise_plus", id_samples, 12):
        for c in range(3):
            assert arr[..., c].min() == pytest.approx(0.0, abs=1e-9) and arr[..., c].max() == pytest.approx(1.0, abs=1e-9)
    rough = np.abs(np.diff(np.random.default_rng(0).uniform(size=(100, 100)), axis=0)).mean()
    arr, _s, _p = make_picture("smooth_noise", seed=0, index=0, samples=id_samples)
    assert np.abs(np.diff(arr, axis=0)).mean() < rough / 5  # smooth


def test_smooth_colour_centres_on_its_colour(id_samples):
    for arr, _s, p in pictures("smooth_colour", id_samples, 25):
        c, d = np.array(p["colour"]), p["delta"]
        assert 0.1 <= d <= 0.3
        for ch in range(3):
            lo, hi = np.percentile(arr[..., ch], [2.5, 97.5])
            # the percentiles land on c -/+ delta unless clipping to [0, 1] moved them
            if c[ch] - d > 0.01:
                assert lo == pytest.approx(c[ch] - d, abs=0.01)
            if c[ch] + d < 0.99:
                assert hi == pytest.approx(c[ch] + d, abs=0.01)


def test_blobs(id_samples):
    fractions = []
    for arr, _s, p in pictures("blobs", id_samples, 24):
        assert p["sigma"] in ut.BLOB_SIGMAS
        nonzero = arr[arr > 0]
        assert nonzero.min() >= ut.BLOB_CUTOFF and arr.max() <= 1.0
        fractions.append((arr > 0).mean())
    # Bernoulli(0.7) blurred: the blurred value is >= 0.75 on a minority of pixels, but not none
    assert 0.05 < np.mean(fractions) < 0.6


def test_sizes_follow_the_id_sample_and_the_set_is_deterministic(id_samples, tmp_path):
    rows = write_unit_tests(tmp_path / "a", samples=id_samples, per_test=6, seed=3)
    assert len(rows) == 17 * 6
    by_name = {s.name: s for s in id_samples}
    used = Counter()
    for r in rows:
        sample = by_name[r.id_sample]
        used[sample.name] += 1
        with PILImage.open(tmp_path / "a" / r.file) as im:
            assert im.size == (sample.width, sample.height)
            assert im.format == sample.format  # PNG, JPEG and WEBP are mirrored as they are
            assert im.mode == "RGB"
    assert len(used) == 3  # every sample mirrored by some picture
    # black and white stay exact after encoding, whatever the format
    for r in rows:
        if r.test in ("black", "white"):
            with PILImage.open(tmp_path / "a" / r.file) as im:
                px = np.asarray(im)
            assert np.all(px == (0 if r.test == "black" else 255)), r.file
    listing = list(csv.DictReader(open(tmp_path / "a" / "unit_tests.csv")))
    assert len(listing) == 102 and json.loads(listing[1]["params"]) == rows[1].params
    # same seed: the same bytes, also when written by two processes; another seed: different
    write_unit_tests(tmp_path / "b", samples=id_samples, per_test=6, seed=3, workers=2)
    rows_c = {(r.test, r.index): r.file for r in write_unit_tests(tmp_path / "c", samples=id_samples, per_test=6, seed=4)}
    for r in rows:
        a = (tmp_path / "a" / r.file).read_bytes()
        assert a == (tmp_path / "b" / r.file).read_bytes(), r.file
    differing = sum((tmp_path / "a" / r.file).read_bytes() != (tmp_path / "c" / rows_c[r.test, r.index]).read_bytes() for r in rows)
    assert differing > 80  # only black/white (and coincidences) agree across seeds


def test_bad_requests_are_named(id_samples, tmp_path):
    with pytest.raises(KeyError, match="unknown unit test"):
        write_unit_tests(tmp_path, samples=id_samples, per_test=1, tests=["plaid"])
    with pytest.raises(ValueError, match="at least one ID image"):
        write_unit_tests(tmp_path, samples=[], per_test=1)
    (tmp_path / "ids").mkdir()
    (tmp_path / "ids" / "empty.jpg").write_bytes(b"")
    samples, refused = ut.id_samples_from_folder(tmp_path / "ids")
    assert samples == [] and refused[0][0] == "empty.jpg" and "empty" in refused[0][1]


# -- NINCO compatibility mode: each recipe as NINCO's published generator computes it ---------------
# The references below are written in the test from j-cb/NINCO's noise_functions.py and
# create_unit_test_data.ipynb (not by calling our helpers).


def _ninco_stripes_reference(colours, h, w, vertical):
    # noise_stripes: stripe = length // n; stripe i gets [i*s, (i+1)*s); the rest goes to the last colour
    img = np.zeros((h, w, 3))
    n = len(colours)
    s = (w if vertical else h) // n
    for i, c in enumerate(colours):
        if vertical:
            img[:, i * s:(i + 1) * s, :] += c
        else:
            img[i * s:(i + 1) * s, :, :] += c
    if vertical:
        img[:, n * s:, :] += colours[-1]
    else:
        img[n * s:, :, :] += colours[-1]
    return img


def test_ninco_stripes_give_the_leftover_to_the_last_stripe():
    h, w = 23, 37  # 37 // 7 = 5: the last of 7 vertical stripes is 7 px wide; 23 // 3 = 7: the last horizontal one 9 px
    colours = np.random.default_rng(0).uniform(size=(7, 3))
    got = ut._stripes(colours, h, w, vertical=True, convention="ninco")
    np.testing.assert_array_equal(got, _ninco_stripes_reference(colours, h, w, True))
    assert (got[0, :, 0] == colours[-1, 0]).sum() == 37 - 6 * 5
    tri = colours[:3]
    np.testing.assert_array_equal(ut._stripes(tri, h, w, vertical=False, convention="ninco"), _ninco_stripes_reference(tri, h, w, False))
    # the paper's convention spreads the leftover: no stripe is more than one pixel wider than another
    paper = ut._stripes(colours, h, w, vertical=True)
    widths = [(paper[0, :, 0] == c).sum() for c in colours[:, 0]]
    assert max(widths) - min(widths) <= 1


def test_ninco_filter_wraps_around_the_borders():
    from scipy.ndimage import gaussian_filter

    x = np.random.default_rng(1).uniform(size=(40, 50, 3))
    ref = np.stack([gaussian_filter(x[..., c], sigma=3.0, mode="wrap", truncate=4.0) for c in range(3)], axis=2)
    np.testing.assert_allclose(ut.blur(x, 3.0, "ninco"), ref, atol=1e-12)
    # wrapping: the left edge is smoothed with the right one; reflecting does not do that
    assert not np.allclose(ut.blur(x, 3.0, "paper"), ref, atol=1e-3)


def test_ninco_smooth_colour_maps_the_percentile_range_onto_c_to_c_plus_two_delta(id_samples):
    hits = 0
    for i in range(30):
        arr, _s, p = make_picture("smooth_colour", seed=0, index=i, samples=id_samples, convention="ninco")
        c, d = np.array(p["colour"]), p["delta"]
        for ch in range(3):
            lo, hi = np.quantile(arr[..., ch], [0.025, 0.975])
            if c[ch] + 2 * d < 0.99:  # not clipped: scale_color_range puts q2.5 at c and q97.5 at c + 2 delta
                assert lo == pytest.approx(c[ch], abs=0.01) and hi == pytest.approx(c[ch] + 2 * d, abs=0.01)
                hits += 1
    assert hits > 20


def test_ninco_files_truncate_to_8_bits_and_pick_png_or_jpeg_by_sample_parity(id_samples, tmp_path):
    rows = write_unit_tests(tmp_path, samples=id_samples, per_test=3, seed=0, tests=["grey", "uniform_noise"], convention="ninco")
    for r in rows:
        expect = "PNG" if r.params["sample_index"] % 2 == 0 else "JPEG"
        assert r.format == expect, r
    # per test, distinct ID samples (NINCO draws them without replacement)
    for test in ("grey", "uniform_noise"):
        assert len({r.params["sample_index"] for r in rows if r.test == test}) == 3
    # (x * 255).astype('uint8') truncates: 0.999 -> 254 where rounding gives 255
    x = np.full((2, 2, 3), 0.999)
    assert ut.to_uint8(x, "ninco").max() == 254 and ut.to_uint8(x).max() == 255
    grey = [r for r in rows if r.test == "grey" and r.format == "PNG"]
    if grey:
        pix = np.asarray(PILImage.open(tmp_path / grey[0].file))
        assert pix.min() == pix.max() == int(grey[0].params["value"] * 255)
    with pytest.raises(ValueError, match="convention"):
        write_unit_tests(tmp_path / "x", samples=id_samples, per_test=1, convention="nope")
