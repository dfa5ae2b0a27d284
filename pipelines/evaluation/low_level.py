"""Cheap low-level statistics of image files (resolution, format, JPEG quality, compression,
colourfulness), shown beside ImageNet-OOD's random-weight sanity check: when random networks
separate two sets, these say which low-level property may be why. Moved here from the
evaluation service (issue 32): the service reads the sampled files' paths and records the result."""
from __future__ import annotations

import os

import numpy as np

from pipelines.sources.layouts import MemberRef, openable

LOW_LEVEL = {"megapixels": "resolution (megapixels)", "jpeg_share": "share of JPEG files",
             "jpeg_quality": "JPEG quality (estimated from the quantisation tables)",
             "bytes_per_pixel": "file bytes per pixel (compression)", "colourfulness": "colourfulness (Hasler & Süsstrunk)"}


def low_level_statistics(paths: list[str]) -> dict:
    """Cheap statistics of a set's sampled files: header size and format, file size, colourfulness."""
    from PIL import Image as PILImage

    from pipelines.evaluation.sanity import colourfulness_of, jpeg_quality

    mp, jpeg, quality, bpp, colour = [], [], [], [], []
    for p in paths:
        try:
            with PILImage.open(openable(p)) as im:  # one open per file: header, quantisation tables, then a thumbnail
                w, h, fmt = im.width, im.height, im.format
                q = jpeg_quality(getattr(im, "quantization", None)) if fmt == "JPEG" else None
                c = colourfulness_of(im)
            # a member's size was recorded at ingest; a plain path is stat'ed
            size = (p.size if p.size >= 0 else len(p.read())) if isinstance(p, MemberRef) else os.path.getsize(p)
        except OSError:
            continue
        mp.append(w * h / 1e6)
        jpeg.append(fmt == "JPEG")
        if q is not None:
            quality.append(q)
        bpp.append(size / max(w * h, 1))
        colour.append(c)
    mean = lambda v: float(np.mean(v)) if v else None  # noqa: E731
    return {"n": len(mp), "megapixels": mean(mp), "jpeg_share": mean(jpeg), "jpeg_quality": mean(quality),
            "bytes_per_pixel": mean(bpp), "colourfulness": mean(colour)}


def differences(a: dict, b: dict, *, ratio: float = 1.25) -> list[str]:
    """The statistics in which two sets differ by more than ``ratio`` (or, for the JPEG share,
    by more than 0.25), in words."""
    out = []
    for key, words in LOW_LEVEL.items():
        x, y = a.get(key), b.get(key)
        if x is None or y is None:
            continue
        if key == "jpeg_share":
            if abs(x - y) > 0.25:
                out.append(f"{words}: ID {x:.0%} vs {y:.0%}")
        elif key == "jpeg_quality":
            if abs(x - y) > 10:
                out.append(f"{words}: ID {x:.0f} vs {y:.0f}")
        elif min(x, y) > 0 and max(x, y) / min(x, y) > ratio:
            out.append(f"{words}: ID {x:.3g} vs {y:.3g}")
    return out


def low_level_report(paths: dict[str, list[str]], *, id_sets: tuple[str, ...] = ("id_test", "id_fit")
                     ) -> tuple[dict[str, dict], dict[str, list[str]]]:
    """The sanity check's low-level side: each set's statistics (``low_level_statistics`` of its
    sampled files), and how every set but the ID ones differs from the first ID set (the ID test set)."""
    stats = {role: low_level_statistics(files) for role, files in paths.items()}
    differs = {role: differences(stats[id_sets[0]], stats[role]) for role in paths if role not in id_sets}
    return stats, differs
