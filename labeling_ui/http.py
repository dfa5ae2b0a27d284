"""Request and response helpers shared by the views: the one rule for a row id from a request,
and Content-Disposition for downloads."""
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


def object_id(value, what: str) -> int:
    """A row id from a request: a positive integer (or its digits), not a float, bool or infinity."""
    if isinstance(value, bool) or not isinstance(value, (int, str)) or not str(value).isdigit() or not 0 < int(value) < 2**63:
        raise ValueError(f"{what} must be a positive integer id, not {str(value)[:40]!r}")
    return int(value)
