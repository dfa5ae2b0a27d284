"""Display copies of source images for the browser: a thumbnail, a screen-sized view and, for
files a browser cannot show as they are (16-bit, CMYK, TIFF...), a full-size PNG. Each is made
once, keyed by the SHA-256 ingest recorded for the member (its file name), and written atomically.

A member is shown only while its bytes are the ones ingest hashed (docs/sources.md): a rendition
is made from bytes read through ``Image.ref()``, which checks them against that hash, and a
rendition already made is served only after ``_unchanged`` has checked the member again (see
there). A member whose bytes changed is refused with ``RenditionChanged`` (the layout's
``MemberChanged`` message: re-run add_source), never served from the cache."""
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
from pipelines.sources.layouts import MemberChanged, MemberRef
from pipelines.sources.walk import UnsafePath, safe_join

SIZES = {"thumb": 224, "view": 1400}
VARIANTS = (*SIZES, "full")
BROWSER_FORMATS = {"JPEG", "PNG", "GIF", "WEBP"}
BROWSER_MODES = {"RGB", "RGBA", "L", "LA", "P", "1"}


class RenditionError(RuntimeError):
    pass


class RenditionChanged(RenditionError):
    """The member's bytes no longer match the SHA-256 recorded at ingest (``MemberChanged``):
    refused, whatever was made from its old bytes (the web app answers 409)."""


# Statuses whose file is readable: an exact duplicate is a readable file with the same bytes as
# another of its source (kept out of review and exports, but shown as it is).
READABLE = (Image.Status.OK, Image.Status.DUPLICATE)


def source_member(image: Image) -> MemberRef:
    """The image's bytes through its source's layout (paths escaping the root are refused)."""
    try:
        return image.ref()
    except UnsafePath as exc:
        raise RenditionError(str(exc)) from exc


def _read(ref: MemberRef) -> bytes:
    """The member's bytes, checked against the ingest hash (a change is ``RenditionChanged``)."""
    try:
        return ref.read()
    except MemberChanged as exc:
        raise RenditionChanged(str(exc)) from exc
    except OSError as exc:
        raise RenditionError(str(exc)) from exc


def _holder_as_ingested(image: Image) -> bool:
    """Whether the file that holds the member (its archive, or the file itself) still has the
    modification time ingest recorded (and, for a plain file, the size): one ``stat``."""
    if not image.mtime_ns:
        return False
    try:
        st = os.stat(safe_join(image.source.root, image.container or image.relative_path))
    except (OSError, UnsafePath):
        return False
    return st.st_mtime_ns == image.mtime_ns and (bool(image.container) or st.st_size == image.bytes)


def _unchanged(image: Image, ref: MemberRef) -> None:
    """Checks a member before a rendition made earlier from its bytes is served. Fast path: the
    file holding it is as ingest recorded it (same mtime, and same size for a plain file: the
    test add_source's rescan uses to decide what to hash again), so nothing has rewritten it.
    Otherwise (touched, rewritten, copied back, or no time recorded) its bytes are read and
    hashed again: the same bytes are served, other bytes raise ``RenditionChanged``. A rewrite
    that also restores the mtime (and size) passes the fast path, as it passes the rescan; the
    rendition's name is the ingest hash, so what is served is always what ingest verified."""
    if not _holder_as_ingested(image):
        _read(ref)


def _full_copy(image: Image, ref: MemberRef, ctype: str) -> tuple[Path, str]:
    """A browser-ready file as it was ingested: written once from its checked bytes, keyed by its
    SHA-256 (an archive member has no file of its own to serve; a changed file is never shown)."""
    ext = {"JPEG": "jpg", "PNG": "png", "GIF": "gif", "WEBP": "webp"}.get(image.format, "bin")
    out = Path(settings.THUMBNAIL_DIR) / "orig" / image.sha256[:2] / f"{image.sha256}.{ext}"
    if out.is_file():
        _unchanged(image, ref)
    else:
        data = _read(ref)
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
    when a browser can show it (it applies EXIF orientation on its own). Only an image whose file
    is readable has one (``READABLE``: an exact duplicate too); a member changed since ingest
    raises ``RenditionChanged``, though a rendition of its old bytes exists."""
    if variant not in VARIANTS:
        raise RenditionError(f"unknown image variant {variant!r}: use one of {', '.join(VARIANTS)}")
    if image.status not in READABLE or not image.sha256:
        raise RenditionError(f"{image}: not a readable image ({image.get_status_display()})")
    src = source_member(image)
    if variant == "full" and image.format in BROWSER_FORMATS and image.mode in BROWSER_MODES:
        return _full_copy(image, src, PILImage.MIME.get(image.format, "application/octet-stream"))
    ext, fmt, ctype = ("png", "PNG", "image/png") if variant == "full" else ("jpg", "JPEG", "image/jpeg")
    out = Path(settings.THUMBNAIL_DIR) / variant / image.sha256[:2] / f"{image.sha256}.{ext}"
    if out.is_file():
        _unchanged(image, src)
        return out, ctype
    data = _read(src)  # read through the layout, checked against the ingest hash
    try:
        with PILImage.open(io.BytesIO(data)) as im:
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
