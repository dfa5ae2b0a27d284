"""ImageNet-C's corruptions (Hendrycks & Dietterich, ICLR 2019) for users without ImageNet-C:
covariate-shifted copies of an ID image set, deterministic under a seed.

The corruptions themselves come from ``imagecorruptions`` (the maintained ``imagecorruptions-imaug``
fork, pinned in requirements.txt), which implements the paper's 15 benchmark corruptions and its
4 extra ("validation") ones at 5 severities. What this module adds:

- ImageNet-C's geometry: each image is resized so its shorter side is 256 px and centre-cropped
  to 224 x 224 before it is corrupted, as ImageNet-C's images are; the corruption parameters
  were chosen for that size (``imagenet_c_crop=False`` corrupts the full image instead).
- Determinism: every image gets its own seed, derived from the run's seed, the corruption, the
  severity and the image's path; NumPy's global generator is seeded with it and the two
  corruptions that take their own seed (impulse noise, glass blur) receive it.
- ImageNet-C's layout: ``<out>/<corruption>/<severity>/<class folder>/<original file stem>.<ext>``,
  JPEG files written at quality 85 (ImageNet-C's) and PNG losslessly.
"""
from __future__ import annotations

import io
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from pipelines.names import atomic_write
from pipelines.numbers import comma_list, whole_number

# Hendrycks & Dietterich (2019): the 15 benchmark corruptions, in the paper's order, then the 4
# held-out ones.
BENCHMARK = ("gaussian_noise", "shot_noise", "impulse_noise", "defocus_blur", "glass_blur", "motion_blur", "zoom_blur",
             "snow", "frost", "fog", "brightness", "contrast", "elastic_transform", "pixelate", "jpeg_compression")
EXTRA = ("speckle_noise", "gaussian_blur", "spatter", "saturate")
CORRUPTIONS = BENCHMARK + EXTRA
SEVERITIES = (1, 2, 3, 4, 5)
_OWN_SEED = ("impulse_noise", "glass_blur")  # these take a seed argument instead of NumPy's global state
JPEG_QUALITY = 85


class CorruptionError(ValueError):
    pass


def parse_corruptions(text: str) -> list[str]:
    """``gaussian_noise,defocus_blur``, ``benchmark`` (the 15), ``extra`` (the 4) or ``all``."""
    names: list[str] = []
    try:
        parts = comma_list(text, "corruptions")
    except ValueError as exc:
        raise CorruptionError(str(exc)) from None
    for part in parts:
        group = {"benchmark": BENCHMARK, "extra": EXTRA, "all": CORRUPTIONS}.get(part)
        if group:
            names += group
        elif part in CORRUPTIONS:
            names.append(part)
        else:
            raise CorruptionError(f"unknown corruption {part!r}; use benchmark, extra, all or names from: {', '.join(CORRUPTIONS)}")
    if not names:
        raise CorruptionError(f"no corruption given; use benchmark, extra, all or names from: {', '.join(CORRUPTIONS)}")
    return list(dict.fromkeys(names))


def parse_severities(text: str) -> list[int]:
    try:  # the one rule for comma lists and integers: "1,,2" and "٣" are refused, not read as 1,2 and 3
        values = sorted({whole_number(p, "severity") for p in comma_list(text, "severities")})
    except ValueError:
        values = []
    if not values or any(v not in SEVERITIES for v in values):
        raise CorruptionError(f"severities {text!r}: give a comma-separated list of 1..5 (e.g. 1,3,5)")
    return values


def image_seed(seed: int, corruption: str, severity: int, key: str) -> int:
    """A 32-bit seed for one image, stable across runs, machines and Python versions."""
    return zlib.crc32(f"{seed}\x1f{corruption}\x1f{severity}\x1f{key}".encode("utf-8")) & 0x7FFFFFFF


def imagenet_c_geometry(img: Any) -> Any:
    """Resize the shorter side to 256 (bilinear) and centre-crop 224 x 224, as ImageNet-C's
    images were prepared, with torchvision's transforms."""
    from torchvision.transforms import v2

    return v2.CenterCrop(224)(v2.Resize(256, interpolation=v2.InterpolationMode.BILINEAR)(img))


def corrupt_array(rgb: np.ndarray, corruption: str, severity: int, seed: int) -> np.ndarray:
    """One corruption at one severity on an RGB uint8 array (H x W x 3, both sides >= 32)."""
    from imagecorruptions import corrupt

    if corruption not in CORRUPTIONS:
        raise CorruptionError(f"unknown corruption {corruption!r}")
    np.random.seed(seed)
    kwargs = {"seed": seed} if corruption in _OWN_SEED else {}
    return corrupt(rgb, corruption_name=corruption, severity=severity, **kwargs)


@dataclass(frozen=True)
class CorruptionTask:
    """One output file: which original, which corruption and severity, where it goes."""

    src: Any  # the original: a path, or a pipelines.sources.layouts.MemberRef
    key: str  # the original's path inside its source ("<class folder>/<file>")
    rel_out: str  # "<corruption>/<severity>/<class folder>/<stem>.<ext>"
    corruption: str
    severity: int
    seed: int


def plan(originals: list[tuple[Path, str]], corruptions: list[str], severities: list[int], seed: int) -> list[CorruptionTask]:
    """``originals``: (absolute path, "<class folder>/<file>") pairs. One job per original,
    corruption and severity, in that nesting."""
    jobs = []
    for corruption in corruptions:
        for severity in severities:
            for src, key in originals:
                folder, _, name = key.rpartition("/")
                stem, dot, ext = name.rpartition(".")
                ext = ext.lower() if dot and ext.lower() in ("jpg", "jpeg", "png") else "png"
                rel = f"{corruption}/{severity}/{folder + '/' if folder else ''}{stem or name}.{ext}"
                jobs.append(CorruptionTask(src=src, key=key, rel_out=rel, corruption=corruption, severity=severity,
                                seed=image_seed(seed, corruption, severity, key)))
    return jobs


def run_task(job: CorruptionTask, out_root: Path, *, imagenet_c_crop: bool = True) -> Path:
    """Corrupt one original into ``out_root / job.rel_out`` (atomically, inside ``out_root``)."""
    from PIL import Image

    from pipelines.sources.layouts import MemberRef

    # a source member is read through its layout (checked against its ingest hash), a path opened
    with Image.open(io.BytesIO(job.src.read()) if isinstance(job.src, MemberRef) else job.src) as im:
        img = im.convert("RGB")
    if imagenet_c_crop:
        img = imagenet_c_geometry(img)
    if min(img.size) < 32:
        raise CorruptionError(f"{job.key}: {img.size[0]}x{img.size[1]} px; ImageNet-C's corruptions need at least 32 px a side")
    out = corrupt_array(np.asarray(img, dtype=np.uint8), job.corruption, job.severity, job.seed)
    buf = io.BytesIO()
    if job.rel_out.endswith(".png"):
        Image.fromarray(out).save(buf, format="PNG")
    else:
        Image.fromarray(out).save(buf, format="JPEG", quality=JPEG_QUALITY, optimize=True)
    path = out_root / job.rel_out
    atomic_write(path, lambda fh: fh.write(buf.getvalue()), root=out_root)
    return path
