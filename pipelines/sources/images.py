"""Image file checks and decoding: plain Python over Pillow, no Django.

``inspect_image`` decides whether a file is a usable image and records what a curator needs to
know about it (hash, oriented size, format, mode); it never raises for bad input, it returns
the problem as a stable reason code plus a message that names the file.
``load_rgb`` turns any accepted image (CMYK, 16-bit, palette, alpha, EXIF-rotated) into the
RGB picture a model or a reviewer should see.
"""
from __future__ import annotations

import hashlib
import io
import os
import re
import struct
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image, ImageOps, UnidentifiedImageError

# Stable reason codes (stored on Image.error_code); the message adds the detail.
EMPTY_FILE = "empty_file"
FILE_TOO_LARGE = "file_too_large"
NOT_AN_IMAGE = "not_an_image"
DECOMPRESSION_BOMB = "decompression_bomb"
TRUNCATED = "truncated"
CORRUPT = "corrupt"
UNREADABLE = "unreadable"

EXIF_ORIENTATION_TAG = 0x0112
# EXIF orientations 5-8 rotate by 90 degrees: the displayed width is the stored height.
_TRANSPOSING_ORIENTATIONS = {5, 6, 7, 8}

DEFAULT_MAX_PIXELS = 89_478_485  # Pillow's own default decompression-bomb limit
DEFAULT_MAX_BYTES = 512 * 1024 * 1024


@dataclass(frozen=True)
class Inspection:
    """What one file turned out to be. ``error_code`` is empty for a good image."""

    bytes: int
    sha256: str = ""
    format: str = ""
    mode: str = ""
    width: int = 0  # after EXIF orientation, as a viewer shows it
    height: int = 0
    orientation: int = 1
    error_code: str = ""
    error: str = ""

    @property
    def ok(self) -> bool:
        return not self.error_code


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: str | os.PathLike) -> str:
    """SHA-256 of a file, read in 1 MiB blocks (for files not otherwise read into memory)."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def inspect_image(
    path: str | os.PathLike,
    *,
    max_pixels: int = DEFAULT_MAX_PIXELS,
    max_bytes: int = DEFAULT_MAX_BYTES,
) -> Inspection:
    """Read ``path`` once, hash it, and check that it decodes. Never raises for bad files."""
    path = Path(path)
    try:
        size = path.stat().st_size
        if size == 0:
            return Inspection(bytes=0, error_code=EMPTY_FILE, error=f"{path}: the file is empty (0 bytes)")
        if size > max_bytes:
            return Inspection(
                bytes=size,
                error_code=FILE_TOO_LARGE,
                error=f"{path}: {size} bytes is more than the {max_bytes}-byte limit for one image",
            )
        with open(path, "rb") as fh:
            data = fh.read()
    except OSError as exc:
        return Inspection(bytes=0, error_code=UNREADABLE, error=f"{path}: cannot read the file ({exc.strerror or exc})")
    return inspect_image_bytes(data, name=str(path), max_pixels=max_pixels)


def inspect_image_bytes(data: bytes, *, name: str, max_pixels: int = DEFAULT_MAX_PIXELS) -> Inspection:
    try:
        return _inspect_bytes(data, name=name, max_pixels=max_pixels)
    except Exception as exc:  # a decoder bug must cost one file, never the batch
        return Inspection(bytes=len(data), sha256=sha256_bytes(data), error_code=CORRUPT,
                          error=f"{name}: the decoder failed ({type(exc).__name__}: {exc})")


_SIGNATURES = ((b"\x89PNG\r\n\x1a\n", "PNG"), (b"\xff\xd8\xff", "JPEG"), (b"GIF87a", "GIF"), (b"GIF89a", "GIF"),
               (b"II*\x00", "TIFF"), (b"MM\x00*", "TIFF"))


def _signature(data: bytes) -> str:
    """The image format a file's first bytes announce (its magic number), or ''."""
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "WebP"
    return next((kind for magic, kind in _SIGNATURES if data.startswith(magic)), "")


def _bomb_message(name: str, exc: Exception, max_pixels: int) -> str:
    """Pillow's own guard fired (it warns above Image.MAX_IMAGE_PIXELS and raises above twice
    that, naming its limit, not ours): the refusal in our terms, with our limit."""
    found = re.search(r"\((\d+) pixels\)", str(exc))
    size = f"{int(found.group(1)):,} pixels" if found else "its size"
    return f"{name}: refused as a decompression bomb: {size} is more than the limit of {max_pixels:,} (OODC_MAX_IMAGE_PIXELS)"


def _inspect_bytes(data: bytes, *, name: str, max_pixels: int) -> Inspection:
    if Image.MAX_IMAGE_PIXELS is not None and Image.MAX_IMAGE_PIXELS < max_pixels:
        Image.MAX_IMAGE_PIXELS = max_pixels  # Pillow's guard must not refuse what our (raised) limit allows
    digest = sha256_bytes(data)
    base: dict[str, Any] = {"bytes": len(data), "sha256": digest}
    if not data:
        return Inspection(**base, error_code=EMPTY_FILE, error=f"{name}: the file is empty (0 bytes)")
    with warnings.catch_warnings():
        # Pillow warns above MAX_IMAGE_PIXELS and raises above twice that; both are refusals here.
        warnings.simplefilter("error", Image.DecompressionBombWarning)
        try:
            im = Image.open(io.BytesIO(data))
        except (Image.DecompressionBombError, Image.DecompressionBombWarning) as exc:
            return Inspection(**base, error_code=DECOMPRESSION_BOMB, error=_bomb_message(name, exc, max_pixels))
        except UnidentifiedImageError:
            kind = _signature(data)
            if kind:  # an image by its magic number whose header Pillow rejects (e.g. a PNG chunk with a bad CRC)
                return Inspection(**base, error_code=CORRUPT, error=f"{name}: a {kind} file whose header is corrupt")
            return Inspection(**base, error_code=NOT_AN_IMAGE, error=f"{name}: not an image file Pillow can read")
        except (OSError, SyntaxError, ValueError) as exc:
            return Inspection(**base, error_code=CORRUPT, error=f"{name}: the image header is corrupt ({exc})")

        with im:
            width, height = im.size
            fmt = im.format or ""
            mode = im.mode
            if width * height > max_pixels:
                return Inspection(
                    **base, format=fmt, mode=mode, width=width, height=height,
                    error_code=DECOMPRESSION_BOMB,
                    error=f"{name}: refused as a decompression bomb: {width}x{height} = {width * height:,} pixels is more than "
                          f"the limit of {max_pixels:,} (OODC_MAX_IMAGE_PIXELS)",
                )
            orientation = _orientation(im, fmt)
            try:
                _check_decodes(im, fmt)
            except (Image.DecompressionBombError, Image.DecompressionBombWarning) as exc:
                return Inspection(**base, format=fmt, mode=mode, error_code=DECOMPRESSION_BOMB, error=_bomb_message(name, exc, max_pixels))
            except OSError as exc:
                text = str(exc)
                code = TRUNCATED if "truncated" in text.lower() or "end of file" in text.lower() else CORRUPT
                what = "the file is truncated" if code == TRUNCATED else "the image data is corrupt"
                return Inspection(**base, format=fmt, mode=mode, error_code=code, error=f"{name}: {what} ({text})")
            except (SyntaxError, ValueError, EOFError, IndexError, RuntimeError, struct.error) as exc:
                return Inspection(**base, format=fmt, mode=mode, error_code=CORRUPT, error=f"{name}: the image data is corrupt ({exc})")
    if orientation in _TRANSPOSING_ORIENTATIONS:
        width, height = height, width
    return Inspection(**base, format=fmt, mode=mode, width=width, height=height, orientation=orientation)


def _orientation(im: Image.Image, fmt: str) -> int:
    """The EXIF orientation tag, read without decoding pixels (PNG's ``getexif()`` would load
    the whole image to look for an eXIf chunk after the pixel data; the header's is enough)."""
    try:
        if fmt == "PNG":
            raw = im.info.get("exif")
            if not raw:
                return 1
            exif = Image.Exif()
            exif.load(raw)
        else:
            exif = im.getexif()
        value = int(exif.get(EXIF_ORIENTATION_TAG, 1) or 1)
    except Exception:  # a broken EXIF block must not hide a good picture
        return 1
    return value if value in range(1, 9) else 1


def _check_decodes(im: Image.Image, fmt: str) -> None:
    """Prove the pixel data is intact at the least cost that still catches real damage.

    PNG: ``verify()`` walks every chunk and checks its CRC (catches truncation and bit rot)
    without inflating the pixels. JPEG: decode at 1/8 scale via ``draft()``; libjpeg still reads
    every entropy-coded segment, so truncation and corrupt scans raise, at a fraction of a full
    decode. Everything else: a full ``load()`` of the first frame.
    """
    if fmt == "PNG":
        im.verify()  # valid here: nothing has loaded pixel data since open()
        return
    if fmt in {"JPEG", "MPO"}:
        im.draft("RGB", (max(1, im.size[0] // 8), max(1, im.size[1] // 8)))
    im.load()


def load_rgb(path: str | os.PathLike, *, background: tuple[int, int, int] = (255, 255, 255)) -> Image.Image:
    """Open an image as an upright 8-bit RGB picture.

    EXIF orientation is applied; alpha (RGBA, LA, palette transparency) is composited on
    ``background``; 16/32-bit greyscale is scaled to 8 bits by its bit depth; CMYK and other
    modes go through Pillow's conversion.
    """
    from pipelines.sources.layouts import openable

    with Image.open(openable(path)) as im:  # a source member (MemberRef) is read through its layout
        im.load()
        return to_rgb(ImageOps.exif_transpose(im), background=background)


def load_rgb_for_model(path: str | os.PathLike, *, min_side: int, max_pixels: int = DEFAULT_MAX_PIXELS,
                       data: bytes | None = None) -> Image.Image:
    """``load_rgb`` for a model's input: a JPEG is decoded at the smallest power-of-two scale
    that keeps both sides at least ``min_side`` (Pillow's ``draft``: the DCT does the
    downscaling, several times faster than a full decode for photo-sized files). Raises
    ``ValueError`` for an image over ``max_pixels`` (a decompression bomb). ``data``: the
    file's bytes when the caller has already read them (``path`` then only names it)."""
    with Image.open(io.BytesIO(data) if data is not None else path) as im:
        w, h = im.size
        if w * h > max_pixels:
            raise ValueError(f"{path}: {w}x{h} pixels is over the limit of {max_pixels} (decompression bomb)")
        if im.format == "JPEG":
            # The request is square, so it holds whether or not EXIF orientation swaps the sides.
            im.draft("RGB", (min_side, min_side))
        im.load()
        return to_rgb(ImageOps.exif_transpose(im))


def to_rgb(im: Image.Image, *, background: tuple[int, int, int] = (255, 255, 255)) -> Image.Image:
    if im.mode == "RGB":
        return im
    if im.mode in {"I;16", "I;16B", "I;16L", "I;16N", "I", "F"}:
        arr = np.asarray(im, dtype=np.float64)
        if im.mode.startswith("I;16"):
            scale = 65535.0
        elif im.mode == "F":
            scale = max(float(arr.max()), 1.0) if arr.size else 1.0
        else:
            scale = 65535.0 if arr.size and arr.max() > 255 else 255.0
        grey = np.clip(np.rint(arr / scale * 255.0), 0, 255).astype(np.uint8)
        return Image.fromarray(grey, mode="L").convert("RGB")
    if im.mode == "P" and "transparency" in im.info:
        im = im.convert("RGBA")
    if im.mode in {"RGBA", "LA", "PA", "RGBa", "La"}:
        rgba = im.convert("RGBA")
        canvas = Image.new("RGBA", rgba.size, background + (255,))
        canvas.alpha_composite(rgba)
        return canvas.convert("RGB")
    return im.convert("RGB")
