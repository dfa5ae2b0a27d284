"""The one rule for integers and comma lists that come from users: path ids, cursors, page
numbers and list items of the web app (labeling_ui/http.py), the browser's filters and cursors
(curation/selectors/browse.py), and the comma lists of commands (curation/management/cli.py).

Why a rule of its own: ``str.isdigit()`` accepts digits that ``int()`` refuses (``'²'``), and
``int()`` accepts text nobody typed as a number (``'٣'``, ``'1_000'``, ``' 7 '``, ``'+7'``), and
databases refuse integers of 2**63 and more. Here an integer is ASCII digits, optionally after a
``-`` where negatives are allowed, within the bounds asked (by default a signed 64-bit integer).
A comma list has no empty items: ``1,,2`` is a typo, not ``1,2``.
"""
from __future__ import annotations

import re

INT64_MAX = 2**63 - 1
_INTEGER = re.compile(r"-?[0-9]{1,20}\Z", re.ASCII)


def whole_number(value: object, what: str, *, lo: int = -INT64_MAX - 1, hi: int = INT64_MAX) -> int:
    """``value`` (an int, or its decimal ASCII digits) as an int in ``lo..hi``; otherwise a
    ValueError naming ``what`` and what it takes. Floats, bools, Unicode digits, spaces,
    underscores and signs other than a leading ``-`` are refused."""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise ValueError(f"{what} must be a whole number, not {str(value)[:40]!r}")
    if isinstance(value, str):
        if not _INTEGER.match(value):
            raise ValueError(f"{what} must be a whole number written in digits 0-9, not {value[:40]!r}")
        value = int(value)
    if not lo <= value <= hi:
        raise ValueError(f"{what} must be between {lo} and {hi}, not {str(value)[:40]}")
    return value


def row_id(value: object, what: str) -> int:
    """A database row id: a whole number from 1 to 2**63 - 1."""
    try:
        return whole_number(value, what, lo=1)
    except ValueError:
        raise ValueError(f"{what} must be a positive integer id, not {str(value)[:40]!r}") from None


def comma_list(text: str | None, what: str) -> list[str]:
    """The items of a comma-separated list, stripped; an empty or missing text is an empty list,
    and an empty item (``a,,b``, ``a,``, ``,a``) is a ValueError naming ``what`` and its place."""
    if text is None or not text.strip():
        return []
    items = [part.strip() for part in text.split(",")]
    for place, item in enumerate(items, 1):
        if not item:
            raise ValueError(f"{what} {text[:80]!r}: item {place} is empty; give the items separated by single commas "
                             "(e.g. a,b,c)")
    return items
