"""Request and response helpers shared by the views: the one rule for integers from a request
(path ids, cursors, page numbers, list items: ``pipelines.numbers``), its companion for numbers
with a fraction (shares, percentages, confidences), and Content-Disposition for downloads."""
from __future__ import annotations

import math
import re
import unicodedata
from urllib.parse import quote

from django.utils.http import content_disposition_header

from pipelines.numbers import row_id, whole_number

__all__ = ["attachment", "decimal_number", "object_id", "whole_number"]

# an HTML number input's value (a "valid floating-point number", HTML Living Standard 2.3.4.3):
# ASCII digits, at most one point with digits after it, an optional leading "-" and exponent
_DECIMAL = re.compile(r"-?(?:[0-9]+(?:\.[0-9]+)?|\.[0-9]+)(?:[eE][-+]?[0-9]+)?\Z", re.ASCII)


def decimal_number(value: object, what: str, *, lo: float, hi: float) -> float:
    """A number that may have a fraction, from a request: an int or float, or its text as an
    HTML number input sends it, finite and within ``lo..hi``; otherwise a ValueError naming
    ``what``. Like ``whole_number``, it refuses what ``float()`` would take but nobody typed as a
    number: Unicode digits, underscores, spaces, ``inf``, ``nan``, a leading ``+``."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ValueError(f"{what} must be a number, not {str(value)[:40]!r}")
    if isinstance(value, str):
        if not _DECIMAL.match(value):
            raise ValueError(f"{what} must be a number written in digits 0-9 (with a point for a fraction), not {value[:40]!r}")
        value = float(value)
    v = float(value)
    if not math.isfinite(v) or not lo <= v <= hi:
        raise ValueError(f"{what} must be between {lo:g} and {hi:g}, not {str(value)[:40]}")
    return v


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
    """A row id from a request: ASCII digits (or an int) from 1 to 2**63 - 1; not a float, bool,
    Unicode digits, a sign or infinity (ValueError naming ``what``)."""
    return row_id(value, what)


RETRY_AFTER_S = 15


def _is_outage(exc: BaseException | None) -> bool:
    from curation.outages import is_outage

    return is_outage(exc)


def server_error(request, *args, **kwargs):
    """handler500: an outage of the database or the broker (PostgreSQL or Redis restarting)
    answers 503 with Retry-After, in JSON for the API, so browsers and the review screen retry;
    anything else is the plain 500 it is."""
    import sys

    from django.http import HttpResponse, JsonResponse
    from django.views.defaults import server_error as django_server_error

    if not _is_outage(sys.exc_info()[1]):
        return django_server_error(request, *args, **kwargs)
    message = f"the service is restarting (database or queue unreachable); try again in {RETRY_AFTER_S} s"
    if request.path.startswith("/api/"):
        response: HttpResponse = JsonResponse({"error": message, "retry_after": RETRY_AFTER_S}, status=503)
    else:
        response = HttpResponse(f"<!doctype html><title>503 Service Unavailable</title><h1>Back soon</h1><p>{message}.</p>"
                                "<p>Send it again when this page loads.</p>",
                                status=503, content_type="text/html; charset=utf-8")
    response["Retry-After"] = str(RETRY_AFTER_S)
    return response
