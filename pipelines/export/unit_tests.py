"""The 17 synthetic OOD unit tests of NINCO (Bitterwolf et al., ICML 2023, appendix G).

Every picture is a float array in [0, 1] (height x width x 3), clipped where a recipe can leave
the range. Sizes and file formats mirror random samples of ID images (NINCO mirrored ImageNet
samples); the two pixel-permutation tests shuffle the pixels of those ID images. Each picture
has its own random generator seeded by (seed, test, index), so a set is reproducible picture by
picture and can be written in any order or in parallel.

Recipes (REFERENCE.md, "OOD unit tests"; parameters in ``*_SIGMAS``/``STRIPE_COUNTS`` below):
uniform / Gaussian / Rademacher noise per channel and pixel; pixel permutation of an ID image;
black, white, grey (one value), monochrome (one colour); tricolour and primary tricolour
(three equal stripes, orientation by coin flip); horizontal / vertical stripes (a count from
STRIPE_COUNTS, a random colour each); smooth noise (uniform noise, Gaussian filter, scaled to
[0, 1] over all channels) and smooth noise+ (each channel to its own [0, 1]); smooth colour
(filtered noise scaled per channel so that c - delta / c + delta are its 2.5th / 97.5th
percentiles); smooth pixel permutation (a filtered pixel permutation); blobs (Bernoulli(0.7)
per channel and pixel, filtered, values below 0.75 set to 0).

Two conventions (``convention=``):

- ``paper`` (default) follows the paper's text (appendix G) where NINCO's published generator
  (j-cb/NINCO: ``noise_functions.py`` and ``create_unit_test_data.ipynb``) does otherwise:
  Gaussian filters reflect at the borders; stripes are as equal as the pixel count allows;
  smooth colour puts c - delta / c + delta at the 2.5th / 97.5th percentiles (the text's
  "c +- delta"); values are rounded to 8 bits; each picture mirrors an ID sample drawn with
  replacement and takes that sample's size and file format (JPEG at quality 95 without chroma
  subsampling, PNG, WebP).
- ``ninco`` reproduces each recipe as NINCO's code computes it: Gaussian filters wrap at the
  borders (``skimage.filters.gaussian(..., mode='wrap')``); stripes are ``height // n`` (or
  ``width // n``) pixels each with every leftover row/column going to the last stripe, and a
  side shorter than the stripe count is all the last colour (``noise_stripes``' empty loop);
  smooth colour maps the 2.5th-97.5th percentile range onto [c, c + 2 delta] (centred on
  c + delta) with ``scale_color_range``'s own operations; blobs are filtered and cut in float32
  (``noise_binomial``'s ``np.float32``); values are truncated to 8 bits
  (``(x * 255).astype('uint8')``); each test mirrors distinct ID samples (without replacement
  while there are enough) and the file format follows NINCO's own rule: PNG for an even
  ID-sample index, JPEG (Pillow's default quality 75) for an odd one. For the same random draws
  every 8-bit picture equals NINCO's (tests/pipelines/test_ninco_unit_tests_fidelity.py, against
  j-cb/NINCO@8f42ce7). The draws still come from our per-picture generators (NINCO's notebook
  used NumPy's global state), so the same seed gives the same files, not NINCO's files.
"""
from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image as PILImage

from pipelines.export import csv_cells

GAUSSIAN_SIGMAS = (0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5)
SMOOTH_SIGMAS = (10, 15, 25, 40, 60, 85)
SMOOTH_PERMUTATION_SIGMAS = (1, 1.5, 2, 3, 4, 6, 8)
BLOB_SIGMAS = (1.5, 2, 2.5, 3, 3.5, 4)
STRIPE_COUNTS = (4, 5, 7, 10, 15, 20)
BLOB_ONE_PROBABILITY = 0.7
BLOB_CUTOFF = 0.75
SMOOTH_COLOUR_DELTA = (0.1, 0.3)

# File formats the pictures are written in: an ID sample's format where it is one of these,
# PNG otherwise (GIF's palette or TIFF's variety would change the recipe's pixels).
WRITE_FORMATS = {"JPEG": ".jpg", "PNG": ".png", "WEBP": ".webp"}
JPEG_QUALITY = 95


@dataclass(frozen=True)
class IdSample:
    """An ID image whose size and format a unit-test picture mirrors."""

    path: str  # readable file (absolute)
    name: str  # how the manifest names it (relative to its root)
    width: int
    height: int
    format: str


CONVENTIONS = ("paper", "ninco")


@dataclass(frozen=True)
class Recipe:
    name: str
    make: Callable[..., tuple[np.ndarray, dict]]
    needs_id_pixels: bool = False


RECIPES: dict[str, Recipe] = {}


def recipe(name: str, *, needs_id_pixels: bool = False) -> Callable[[Callable], Callable]:
    """Register a unit-test recipe: ``make(rng, height, width, id_pixels) -> (array, params)``."""

    def register(fn):
        if name in RECIPES:
            raise ValueError(f"unit test {name!r} registered twice")
        RECIPES[name] = Recipe(name=name, make=fn, needs_id_pixels=needs_id_pixels)
        return fn

    return register


def blur(x: np.ndarray, sigma: float, convention: str = "paper") -> np.ndarray:
    """Gaussian filter of standard deviation ``sigma`` pixels over height and width, each
    channel on its own: reflecting at the borders (``paper``, scipy.ndimage) or wrapping
    around them as NINCO's code does (``ninco``, skimage.filters.gaussian with mode='wrap')."""
    if convention == "ninco":
        from skimage.filters import gaussian

        return gaussian(x, sigma=sigma, channel_axis=2, mode="wrap", preserve_range=True)
    from scipy.ndimage import gaussian_filter

    return gaussian_filter(x, sigma=(sigma, sigma, 0), mode="reflect")


def _colour(rng) -> np.ndarray:
    return rng.uniform(0.0, 1.0, size=3)


def _stripes(colours: np.ndarray, h: int, w: int, *, vertical: bool, convention: str = "paper") -> np.ndarray:
    """Stripes, one colour each: as equal as the pixel count allows (``paper``), or
    ``length // n`` pixels each with the leftover going to the last stripe (``ninco``).

    Where the side is shorter than the stripe count, ``length // n`` is 0 and NINCO's
    ``noise_stripes`` paints the whole picture with the last colour (its loop's slices are all
    empty, the line after the loop fills from 0 to the end): ``ninco`` does the same. ``paper``
    keeps a stripe per pixel there (as many of the colours as fit): a stripe picture, where
    NINCO's is a monochrome one, which the monochrome test already covers."""
    n = len(colours)
    length = w if vertical else h
    if convention == "ninco":
        side = length // n
        band = np.full(length, n - 1) if side == 0 else np.minimum(np.arange(length) // side, n - 1)
    else:
        band = np.minimum((np.arange(length) * n) // length, n - 1)
    line = colours[band]  # (length, 3)
    return np.broadcast_to(line[None, :, :] if vertical else line[:, None, :], (h, w, 3)).copy()


def _permuted(rng, id_pixels: np.ndarray) -> np.ndarray:
    h, w, _ = id_pixels.shape
    flat = id_pixels.reshape(h * w, 3)
    return flat[rng.permutation(h * w)].reshape(h, w, 3)


@recipe("uniform_noise")
def _uniform_noise(rng, h, w, id_pixels=None, conv="paper"):
    return rng.uniform(0.0, 1.0, size=(h, w, 3)), {}


@recipe("gaussian_noise")
def _gaussian_noise(rng, h, w, id_pixels=None, conv="paper"):
    sigma = float(rng.choice(GAUSSIAN_SIGMAS))
    return np.clip(rng.normal(0.5, sigma, size=(h, w, 3)), 0.0, 1.0), {"sigma": sigma}


@recipe("rademacher_noise")
def _rademacher_noise(rng, h, w, id_pixels=None, conv="paper"):
    return rng.integers(0, 2, size=(h, w, 3)).astype(np.float64), {}


@recipe("pixel_permutation", needs_id_pixels=True)
def _pixel_permutation(rng, h, w, id_pixels=None, conv="paper"):
    return _permuted(rng, id_pixels), {}


@recipe("black")
def _black(rng, h, w, id_pixels=None, conv="paper"):
    return np.zeros((h, w, 3)), {}


@recipe("white")
def _white(rng, h, w, id_pixels=None, conv="paper"):
    return np.ones((h, w, 3)), {}


@recipe("grey")
def _grey(rng, h, w, id_pixels=None, conv="paper"):
    value = float(rng.uniform(0.0, 1.0))
    return np.full((h, w, 3), value), {"value": round(value, 6)}


@recipe("monochrome")
def _monochrome(rng, h, w, id_pixels=None, conv="paper"):
    c = _colour(rng)
    return np.broadcast_to(c, (h, w, 3)).copy(), {"colour": [round(float(v), 6) for v in c]}


@recipe("tricolour")
def _tricolour(rng, h, w, id_pixels=None, conv="paper"):
    vertical = bool(rng.integers(0, 2))
    colours = rng.uniform(0.0, 1.0, size=(3, 3))
    return _stripes(colours, h, w, vertical=vertical, convention=conv), {"vertical": vertical, "colours": np.round(colours, 6).tolist()}


@recipe("primary_tricolour")
def _primary_tricolour(rng, h, w, id_pixels=None, conv="paper"):
    vertical = bool(rng.integers(0, 2))
    colours = rng.integers(0, 2, size=(3, 3)).astype(np.float64)
    return _stripes(colours, h, w, vertical=vertical, convention=conv), {"vertical": vertical, "colours": colours.astype(int).tolist()}


@recipe("horizontal_stripes")
def _horizontal_stripes(rng, h, w, id_pixels=None, conv="paper"):
    n = int(rng.choice(STRIPE_COUNTS))
    return _stripes(rng.uniform(0.0, 1.0, size=(n, 3)), h, w, vertical=False, convention=conv), {"stripes": n}


@recipe("vertical_stripes")
def _vertical_stripes(rng, h, w, id_pixels=None, conv="paper"):
    n = int(rng.choice(STRIPE_COUNTS))
    return _stripes(rng.uniform(0.0, 1.0, size=(n, 3)), h, w, vertical=True, convention=conv), {"stripes": n}


def _rescale(x: np.ndarray, axis=None) -> np.ndarray:
    lo = x.min(axis=axis, keepdims=axis is not None)
    hi = x.max(axis=axis, keepdims=axis is not None)
    return (x - lo) / np.maximum(hi - lo, 1e-12)


@recipe("smooth_noise")
def _smooth_noise(rng, h, w, id_pixels=None, conv="paper"):
    sigma = float(rng.choice(SMOOTH_SIGMAS))
    return _rescale(blur(rng.uniform(0.0, 1.0, size=(h, w, 3)), sigma, conv)), {"sigma": sigma}


@recipe("smooth_noise_plus")
def _smooth_noise_plus(rng, h, w, id_pixels=None, conv="paper"):
    sigma = float(rng.choice(SMOOTH_SIGMAS))
    return _rescale(blur(rng.uniform(0.0, 1.0, size=(h, w, 3)), sigma, conv), axis=(0, 1)), {"sigma": sigma}


@recipe("smooth_colour")
def _smooth_colour(rng, h, w, id_pixels=None, conv="paper"):
    sigma = float(rng.choice(SMOOTH_SIGMAS))
    delta = float(rng.uniform(*SMOOTH_COLOUR_DELTA))
    c = _colour(rng)
    x = blur(rng.uniform(0.0, 1.0, size=(h, w, 3)), sigma, conv)
    params = {"sigma": sigma, "delta": round(delta, 6), "colour": [round(float(v), 6) for v in c]}
    if conv == "ninco":
        # NINCO's scale_color_range, operation for operation (its floating-point rounding too): the
        # quantiles (1 - 0.95) / 2 and 0.5 + 0.95 / 2, the upper one of the shifted picture, then
        # 2 x delta + c: the percentile range lands on [c, c + 2 delta]
        shifted = x - np.quantile(x, (1 - 0.95) / 2, axis=(0, 1))
        return np.clip(2 * (shifted / np.quantile(shifted, 0.5 + 0.95 / 2, axis=(0, 1))) * delta + c, 0.0, 1.0), params
    # the paper: [2.5th, 97.5th] percentile -> [c - delta, c + delta]
    lo, hi = np.percentile(x, [2.5, 97.5], axis=(0, 1))
    x = c - delta + (x - lo) * (2 * delta) / np.maximum(hi - lo, 1e-12)
    return np.clip(x, 0.0, 1.0), params


@recipe("smooth_pixel_permutation", needs_id_pixels=True)
def _smooth_pixel_permutation(rng, h, w, id_pixels=None, conv="paper"):
    sigma = float(rng.choice(SMOOTH_PERMUTATION_SIGMAS))
    return np.clip(blur(_permuted(rng, id_pixels), sigma, conv), 0.0, 1.0), {"sigma": sigma}


@recipe("blobs")
def _blobs(rng, h, w, id_pixels=None, conv="paper"):
    sigma = float(rng.choice(BLOB_SIGMAS))
    # NINCO's noise_binomial makes the draws float32, so its filter, cut-off and 8-bit truncation
    # run in float32 (``ninco``); float64 (``paper``) is the exact blur, rounded once at the end
    dtype = np.float32 if conv == "ninco" else np.float64
    x = blur((rng.uniform(0.0, 1.0, size=(h, w, 3)) < BLOB_ONE_PROBABILITY).astype(dtype), sigma, conv)
    x[x < BLOB_CUTOFF] = 0.0
    return np.clip(x, 0.0, 1.0), {"sigma": sigma}


UNIT_TESTS: tuple[str, ...] = tuple(RECIPES)


def rng_for(seed: int, test: str, index: int) -> np.random.Generator:
    """The generator of one picture: independent of every other picture and of the order."""
    return np.random.default_rng([seed, UNIT_TESTS.index(test), index])


def id_pixels_of(path: str) -> np.ndarray:
    """An ID image as a float RGB array in [0, 1] (EXIF orientation applied)."""
    from pipelines.sources.images import load_rgb

    return np.asarray(load_rgb(path), dtype=np.float64) / 255.0


def ninco_sample_index(seed: int, test: str, index: int, n_samples: int, per_test: int) -> int:
    """NINCO's code draws each test's ID images without replacement (``rs.choice(len(val), 400,
    replace=False)``): the index-th of a seeded permutation while there are enough samples."""
    if per_test <= n_samples and index < n_samples:
        order = np.random.default_rng([seed, UNIT_TESTS.index(test), 2**31]).permutation(n_samples)
        return int(order[index])
    return int(rng_for(seed, test, index).integers(n_samples))


def make_picture(test: str, *, seed: int, index: int, samples: Sequence[IdSample], convention: str = "paper",
                 per_test: int = 0) -> tuple[np.ndarray, IdSample, dict]:
    """One picture of ``test``: (array, the ID sample it mirrors, the recipe's parameters).
    With ``convention="ninco"``, ``params["sample_index"]`` is the mirrored sample's index (its
    parity picks the file format, as NINCO's code)."""
    if test not in RECIPES:
        raise KeyError(f"unknown unit test {test!r}; known: {', '.join(UNIT_TESTS)}")
    if convention not in CONVENTIONS:
        raise ValueError(f"unit-test convention {convention!r}: use one of {', '.join(CONVENTIONS)}")
    if not samples:
        raise ValueError("unit tests need at least one ID image to mirror (sizes, formats, pixel permutations)")
    rng = rng_for(seed, test, index)
    pick = int(rng.integers(len(samples)))
    if convention == "ninco":
        pick = ninco_sample_index(seed, test, index, len(samples), per_test or len(samples))
    sample = samples[pick]
    r = RECIPES[test]
    id_pixels = id_pixels_of(sample.path) if r.needs_id_pixels else None
    h, w = (id_pixels.shape[:2] if id_pixels is not None else (sample.height, sample.width))
    array, params = r.make(rng, h, w, id_pixels, conv=convention)
    if convention == "ninco":
        params = {**params, "sample_index": pick}
    return array, sample, params


def to_uint8(array: np.ndarray, convention: str = "paper") -> np.ndarray:
    """8-bit pixels: rounded (``paper``) or truncated as NINCO's ``(x * 255).astype('uint8')``,
    in the array's own precision (float32 for NINCO's blobs)."""
    scaled = np.clip(array, 0.0, 1.0) * 255.0
    return (scaled if convention == "ninco" else np.round(scaled)).astype(np.uint8)


def ninco_format(sample_index: int) -> str:
    """NINCO's file format rule: PNG for an even ImageNet index, JPEG for an odd one."""
    return "PNG" if sample_index % 2 == 0 else "JPEG"


def save_picture(array: np.ndarray, path_stem: Path, fmt: str, convention: str = "paper") -> Path:
    """Write ``array`` in ``fmt`` (``paper``: JPEG quality 95 without chroma subsampling, lossless
    PNG or WebP, anything else as PNG; ``ninco``: Pillow's defaults, as NINCO's code saves).
    Returns the file written."""
    fmt = fmt.upper() if fmt.upper() in WRITE_FORMATS else "PNG"
    path = path_stem.with_suffix(WRITE_FORMATS[fmt])
    im = PILImage.fromarray(to_uint8(array, convention), mode="RGB")
    by_format: dict[str, dict[str, Any]] = {"JPEG": {"quality": JPEG_QUALITY, "subsampling": 0}, "WEBP": {"lossless": True}, "PNG": {}}
    options = by_format[fmt]
    if convention == "ninco":
        options = {}
    tmp = path.with_name(path.name + ".part")
    im.save(tmp, format=fmt, **options)
    os.replace(tmp, path)
    return path


@dataclass
class UnitTestRow:
    file: str
    test: str
    index: int
    width: int
    height: int
    format: str
    id_sample: str
    params: dict = field(default_factory=dict)


def _write_one(args) -> UnitTestRow:
    test, index, seed, samples, out, convention, per_test = args
    array, sample, params = make_picture(test, seed=seed, index=index, samples=samples, convention=convention, per_test=per_test)
    folder = Path(out) / test
    fmt = ninco_format(params["sample_index"]) if convention == "ninco" else sample.format
    path = save_picture(array, folder / f"{test}_{index:04d}", fmt, convention)
    return UnitTestRow(file=f"{test}/{path.name}", test=test, index=index, width=array.shape[1], height=array.shape[0],
                       format=path.suffix.lstrip(".").upper().replace("JPG", "JPEG"), id_sample=sample.name, params=params)


def write_unit_tests(out: Path, *, samples: Sequence[IdSample], per_test: int = 400, seed: int = 0,
                     tests: Sequence[str] | None = None, workers: int = 1,
                     progress: Callable[[int], None] | None = None, convention: str = "paper") -> list[UnitTestRow]:
    """Write ``per_test`` pictures of each test into ``out/<test>/`` and ``out/unit_tests.csv``
    (file, test, index, size, format, the ID sample mirrored, the recipe's parameters).
    Pictures already written are written again identically (same seed, same bytes)."""
    tests = list(tests or UNIT_TESTS)
    unknown = [t for t in tests if t not in RECIPES]
    if unknown:
        raise KeyError(f"unknown unit test(s) {', '.join(unknown)}; known: {', '.join(UNIT_TESTS)}")
    if per_test < 1:
        raise ValueError(f"--per-test must be at least 1 (got {per_test})")
    if convention not in CONVENTIONS:
        raise ValueError(f"unit-test convention {convention!r}: use one of {', '.join(CONVENTIONS)}")
    if not samples:
        raise ValueError("unit tests need at least one ID image to mirror (sizes, formats, pixel permutations)")
    out = Path(out)
    for t in tests:
        (out / t).mkdir(parents=True, exist_ok=True)
    jobs = [(t, i, seed, list(samples), str(out), convention, per_test) for t in tests for i in range(per_test)]
    rows: list[UnitTestRow] = []
    if workers > 1:
        with ProcessPoolExecutor(max_workers=workers) as pool:
            for row in pool.map(_write_one, jobs, chunksize=8):
                rows.append(row)
                if progress:
                    progress(1)
    else:
        for job in jobs:
            rows.append(_write_one(job))
            if progress:
                progress(1)
    with open(out / "unit_tests.csv", "w", newline="", encoding="utf-8") as fh:
        w = csv_cells.Writer(fh)
        w.writerow(["file", "test", "index", "width", "height", "format", "id_sample", "params"])
        for r in rows:
            w.writerow([r.file, r.test, r.index, r.width, r.height, r.format, r.id_sample, json.dumps(r.params, sort_keys=True)])
    write_ninco_lists(out, rows)
    return rows


# Our test names -> the names NINCO's release gives the same tests (j-cb/NINCO,
# data/NINCO_class_names.csv, rows with benchmark status "unit test"; the class column of its
# data/NINCO_OOD_unit_tests.csv)
NINCO_NAMES: dict[str, str] = {
    "uniform_noise": "uni", "gaussian_noise": "Gaussian", "rademacher_noise": "Rademacher", "pixel_permutation": "pixel_perm",
    "black": "black", "white": "white", "grey": "grey", "monochrome": "monochrome", "tricolour": "tricolour",
    "primary_tricolour": "tricolour_primary", "horizontal_stripes": "horizontal_stripes", "vertical_stripes": "vertical_stripes",
    "smooth_noise": "low_freq", "smooth_noise_plus": "low_freq_channelfullscale", "smooth_colour": "low_freq_colorrange",
    "smooth_pixel_permutation": "low_freq_pixel_perm", "blobs": "blobs",
}


def write_ninco_lists(out: Path, rows: Sequence[UnitTestRow]) -> None:
    """``file_list.csv``: the two-column list NINCO's code reads (``image_location,class``,
    locations relative to ``out``, classes under NINCO's names), and ``ninco_names.csv``, our
    test names beside NINCO's."""
    with open(out / "file_list.csv", "w", newline="", encoding="utf-8") as fh:
        w = csv_cells.Writer(fh)
        w.writerow(["image_location", "class"])
        w.writerows([r.file, NINCO_NAMES.get(r.test, r.test)] for r in rows)
    with open(out / "ninco_names.csv", "w", newline="", encoding="utf-8") as fh:
        w = csv_cells.Writer(fh)
        w.writerow(["test", "ninco_name"])
        w.writerows([t, NINCO_NAMES.get(t, t)] for t in dict.fromkeys(r.test for r in rows))


def id_samples_from_folder(root: Path, *, max_pixels: int | None = None) -> tuple[list[IdSample], list[tuple[str, str]]]:
    """Every readable image under ``root`` (recursively, symlinks escaping it refused) as ID
    samples, sorted by path; plus (file, problem) for the files that were refused."""
    from pipelines.sources.images import DEFAULT_MAX_PIXELS, inspect_image
    from pipelines.sources.walk import UnsafePath, safe_join

    root = Path(root).resolve()
    if not root.is_dir():
        raise FileNotFoundError(f"--id-images {root}: not a folder")
    samples, refused = [], []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for fn in sorted(filenames):
            rel = os.path.relpath(os.path.join(dirpath, fn), root)
            try:
                path = safe_join(str(root), rel)
            except UnsafePath as exc:
                refused.append((rel, str(exc)))
                continue
            info = inspect_image(path, max_pixels=max_pixels or DEFAULT_MAX_PIXELS)
            if not info.ok:
                refused.append((rel, f"{info.error_code}: {info.error}"))
                continue
            samples.append(IdSample(path=str(path), name=rel, width=info.width, height=info.height, format=info.format))
    return samples, refused
