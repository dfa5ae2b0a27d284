"""CSV files a spreadsheet may open: cells that it would run as a formula are neutralised.

A cell that starts with ``=``, ``+``, ``-``, ``@``, a tab or a carriage return is read as a
formula by Excel, LibreOffice and Google Sheets (a class folder named ``=HYPERLINK(...)`` would
become a live link). Following OWASP's advice on CSV injection, such a cell gets a leading
apostrophe, which spreadsheets show as text. Plain numbers ("-0.25", "+3") are left as they are:
spreadsheets read them as numbers, not formulas. Every CSV the toolkit writes goes through here.
"""
from __future__ import annotations

import csv
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

TRIGGERS = ("=", "+", "-", "@", "\t", "\r")
_NUMBER = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?\Z")


def neutralise(value: Any) -> Any:
    if isinstance(value, str) and value.startswith(TRIGGERS) and not _NUMBER.match(value):
        return "'" + value
    return value


def safe_row(row: Iterable[Any]) -> list[Any]:
    return [neutralise(v) for v in row]


class Writer:
    """``csv.writer`` whose cells are neutralised."""

    def __init__(self, fh, **kwargs):
        self._w = csv.writer(fh, **kwargs)

    def writerow(self, row: Sequence[Any]) -> Any:
        return self._w.writerow(safe_row(row))

    def writerows(self, rows: Iterable[Sequence[Any]]) -> None:
        for row in rows:
            self.writerow(row)


class DictWriter(csv.DictWriter):
    """``csv.DictWriter`` whose values are neutralised (the header is the toolkit's own)."""

    def writerow(self, rowdict: Mapping[str, Any]) -> Any:
        return super().writerow({k: neutralise(v) for k, v in rowdict.items()})

    def writerows(self, rowdicts: Iterable[Mapping[str, Any]]) -> None:
        for row in rowdicts:
            self.writerow(row)
