"""Response helpers shared by the download views."""
from __future__ import annotations

import re
import unicodedata
from urllib.parse import quote

from django.utils.http import content_disposition_header


def attachment(filename: str) -> str:
    """A ``Content-Disposition: attachment`` value for ``filename`` (RFC 6266): a plain quoted
    ``filename`` when it is printable ASCII (quotes and backslashes escaped, by Django), else an
    ASCII fallback ``filename`` plus ``filename*=UTF-8''...`` (RFC 5987 percent-encoding), so
    CR/LF, quotes and non-ASCII characters can neither break the header nor inject another."""
    if re.fullmatch(r"[\x20-\x7e]+", filename or ""):
        return content_disposition_header(True, filename)
    fallback = unicodedata.normalize("NFKD", filename or "").encode("ascii", "ignore").decode()
    fallback = re.sub(r"[^A-Za-z0-9._-]+", "_", fallback).strip("_") or "download"
    return f"attachment; filename=\"{fallback}\"; filename*=UTF-8''{quote(filename or fallback, safe='')}"
