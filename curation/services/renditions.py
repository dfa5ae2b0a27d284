"""Display copies of source images for the browser: a thumbnail, a screen-sized view and, for
files a browser cannot show as they are (16-bit, CMYK, TIFF...), a full-size PNG. Each is made
once, keyed by the file's SHA-256, and written atomically."""
from __future__ import annotations

import base64
import io
import os
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from django.conf import settings
from PIL import Image as PILImage
from PIL import ImageOps

from curation.models import Image
from pipelines.sources.images import to_rgb
from pipelines.sources.layouts import MemberRef
from pipelines.sources.walk import UnsafePath

SIZES = {"thumb": 224, "view": 1400}
VARIANTS = (*SIZES, "full")
BROWSER_FORMATS = {"JPEG", "PNG", "GIF", "WEBP"}
BROWSER_MODES = {"RGB", "RGBA", "L", "LA", "P", "1"}


class RenditionError(RuntimeError):
    pass


def source_member(image: Image) -> MemberRef:
    """The image's bytes through its source's layout (paths escaping the root are refused)."""
    try:
        return image.ref()
    except UnsafePath as exc:
        raise RenditionError(str(exc)) from exc


def _full_copy(image: Image, ref: MemberRef, ctype: str) -> tuple[Path, str]:
    """A browser-ready file as it was ingested: written once from its checked bytes, keyed by its
    SHA-256 (an archive member has no file of its own to serve; a changed file is never shown)."""
    ext = {"JPEG": "jpg", "PNG": "png", "GIF": "gif", "WEBP": "webp"}.get(image.format, "bin")
    out = Path(settings.THUMBNAIL_DIR) / "orig" / image.sha256[:2] / f"{image.sha256}.{ext}"
    if not out.is_file():
        try:
            data = ref.read()
        except OSError as exc:
            raise RenditionError(str(exc)) from exc
        out.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=out.parent, suffix=".part")
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, out)
    return out, ctype


def _write_atomic(path: Path, im: PILImage.Image, fmt: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".part")
    try:
        with os.fdopen(fd, "wb") as fh:
            if fmt == "JPEG":
                im.save(fh, "JPEG", quality=88, optimize=True)
            else:
                im.save(fh, fmt)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def rendition(image: Image, variant: str) -> tuple[Path, str]:
    """(path, content type) of the variant, made on first use. ``full`` is the file itself
    when a browser can show it (it applies EXIF orientation on its own)."""
    if variant not in VARIANTS:
        raise RenditionError(f"unknown image variant {variant!r}: use one of {', '.join(VARIANTS)}")
    if image.status != Image.Status.OK or not image.sha256:
        raise RenditionError(f"{image}: not a readable image ({image.get_status_display()})")
    src = source_member(image)
    if variant == "full" and image.format in BROWSER_FORMATS and image.mode in BROWSER_MODES:
        return _full_copy(image, src, PILImage.MIME.get(image.format, "application/octet-stream"))
    ext, fmt, ctype = ("png", "PNG", "image/png") if variant == "full" else ("jpg", "JPEG", "image/jpeg")
    out = Path(settings.THUMBNAIL_DIR) / variant / image.sha256[:2] / f"{image.sha256}.{ext}"
    if out.is_file():
        return out, ctype
    try:
        with PILImage.open(io.BytesIO(src.read())) as im:  # read through the layout, checked against the ingest hash
            if im.width * im.height > settings.MAX_IMAGE_PIXELS:
                raise RenditionError(f"{src}: {im.width}x{im.height} pixels is over the limit (decompression bomb)")
            if variant in SIZES and im.format == "JPEG":
                im.draft("RGB", (SIZES[variant], SIZES[variant]))
            im.load()
            rgb = to_rgb(ImageOps.exif_transpose(im))
    except (OSError, ValueError, PILImage.DecompressionBombError) as exc:
        raise RenditionError(f"{src}: cannot decode it ({exc})") from exc
    if variant in SIZES:
        rgb.thumbnail((SIZES[variant], SIZES[variant]), PILImage.Resampling.LANCZOS)
    _write_atomic(out, rgb, fmt)
    return out, ctype


THUMB_THREADS = 4


def thumbnail_data_urls(images: list[Image], missing: dict[str, str]) -> dict[str, str]:
    """``{image id: data URL}`` of the images' thumbnails, made side by side where not made yet
    (decoding and resizing release the GIL); an image that cannot be shown is added to
    ``missing`` with the reason instead."""
    def one(image: Image) -> tuple[Image, bytes | None, str]:
        try:
            path, _ctype = rendition(image, "thumb")
            return image, path.read_bytes(), ""
        except (RenditionError, OSError) as exc:
            return image, None, str(exc)

    out: dict[str, str] = {}
    if not images:
        return out
    with ThreadPoolExecutor(max_workers=min(THUMB_THREADS, len(images))) as pool:
        for image, data, why in pool.map(one, images):
            if data is None:
                missing[str(image.pk)] = why
            else:
                out[str(image.pk)] = "data:image/jpeg;base64," + base64.b64encode(data).decode("ascii")
    return out
