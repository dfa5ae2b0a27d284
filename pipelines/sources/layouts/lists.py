"""Published OOD sets as path lists over a root of any layout, so an existing benchmark can be
audited like any other source (as NINCO audited the OOD sets before it):

- ``openood``: OpenOOD's imglists, ``<path> <label>`` a line, paths relative to ``images_largescale/``;
- ``ninco``: NINCO's ``file_list.csv`` (header ``image_location,class``);
- ``paths``: one path a line (ImageNet-OOD's release: ``<wnid>/<wnid>_<n>.JPEG`` over ImageNet-21K).

Only the files (or archives) the list names are read; a listed path that is not there is recorded
as refused (``listed_not_found``), a line that cannot be a path as ``bad_list_line``. A list is
read line by line (a line of more than ``LIST_LINE_LIMIT`` bytes refuses the list at that line),
so a file that is not a list costs a line's worth of memory, never the file's.
"""
from __future__ import annotations

import codecs
import csv
import hashlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, BinaryIO

from pipelines.sources.walk import MAX_PATH_CHARS, Refusal

from . import LayoutError, NotRegularFile, Scan, open_regular, source_layout
from ._tar import unsafe_name

LIST_FORMATS = {
    "openood": "OpenOOD imglist: '<path> <label>' a line, paths relative to images_largescale/",
    "ninco": "NINCO file_list.csv: header image_location,class",
    "paths": "one path a line (ImageNet-OOD's release over ImageNet-21K)",
}
BAD_LIST_LINE = "bad_list_line"
# The longest line a list may have, in bytes: a path (at most MAX_PATH_CHARS characters, four
# bytes each at worst) and its label. A longer line is not a list's: the list is refused there.
LIST_LINE_LIMIT = 8192


@dataclass
class PathList:
    path: str
    format: str
    sha256: str
    entries: list[tuple[str, str]] = field(default_factory=list)  # (path, class name from the list or '')
    bad: list[Refusal] = field(default_factory=list)


def read_path_list(path: str | Path, fmt: str) -> PathList:
    """The entries of the published list at ``path`` in ``fmt``, read line by line (memory stays
    a line's worth whatever the file), with its sha256 and the lines that are no paths."""
    if fmt not in LIST_FORMATS:
        raise LayoutError(f"--list-format {fmt}: use one of {', '.join(LIST_FORMATS)}")
    try:
        fh = open_regular(path)
    except NotRegularFile:
        raise LayoutError(f"--list {path}: not a regular file (a fifo, socket or device); give the list as a file") from None
    except OSError as exc:
        raise LayoutError(f"--list {path}: cannot read it ({exc.strerror or exc})") from None
    digest = hashlib.sha256()
    out = PathList(str(path), fmt, "")
    name = Path(path).name
    seen: set[str] = set()
    with fh:
        lines = _text_lines(fh, str(path), fmt, digest)
        for n, entry, cls in (_ninco_rows(lines, str(path)) if fmt == "ninco" else _plain_rows(lines, fmt)):
            entry = entry.removeprefix("./")
            why = unsafe_name(entry) or ("" if entry else "empty")
            if not why and len(entry) > MAX_PATH_CHARS:
                why = f"{len(entry):,} characters long, more than the {MAX_PATH_CHARS:,} a member path may have"
            if why:
                shown = entry if len(entry) <= 120 else entry[:120] + "..."
                out.bad.append(Refusal(f"{name}#line{n}", "", BAD_LIST_LINE, f"{path}, line {n}: {shown!r} is {why}; the line is skipped"))
                continue
            if entry in seen:
                continue
            seen.add(entry)
            out.entries.append((str(PurePosixPath(entry)), cls))
    out.sha256 = digest.hexdigest()
    if not out.entries:
        raise LayoutError(f"--list {path}: no usable entries in it as a {fmt} list ({LIST_FORMATS[fmt]})")
    return out


def _text_lines(fh: BinaryIO, path: str, fmt: str, digest: Any) -> Iterator[str]:
    """The list's lines as text with their line ends, each read with a bound (``LIST_LINE_LIMIT``),
    every byte added to ``digest``. Refuses the list at a line over the bound or not UTF-8."""
    at, n = 0, 0
    while True:
        raw = fh.readline(LIST_LINE_LIMIT + 1)
        if not raw:
            return
        n += 1
        if len(raw) > LIST_LINE_LIMIT and not raw.endswith(b"\n"):  # (readline gave the bound + 1 bytes, no line end)
            raise LayoutError(f"--list {path}: line {n} is longer than {LIST_LINE_LIMIT:,} bytes, which no list line is "
                              f"({LIST_FORMATS[fmt]}); check that the file is the list the benchmark published (not an image "
                              "or an archive) and that its lines end with newlines")
        digest.update(raw)
        body = raw[len(codecs.BOM_UTF8):] if n == 1 and raw.startswith(codecs.BOM_UTF8) else raw
        try:
            text = body.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise LayoutError(f"--list {path}: not UTF-8 text (byte {at + len(raw) - len(body) + exc.start}, line {n}); "
                              "give the list as its benchmark published it") from None
        at += len(raw)
        yield text


def _plain_rows(lines: Iterator[str], fmt: str) -> Iterator[tuple[int, str, str]]:
    """(line number, path, '') of an OpenOOD imglist or a path list; comments and blank lines skipped."""
    n = 0
    for text in lines:
        for line in text.splitlines():  # as the whole text's splitlines() counts lines (\r, \x0b, ... end one too)
            n += 1
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            entry = line.rsplit(" ", 1)[0] if fmt == "openood" and " " in line else line
            yield n, entry.strip(), ""


def _ninco_rows(lines: Iterator[str], path: str) -> Iterator[tuple[int, str, str]]:
    """(row number, path, class) of NINCO's file_list.csv, checked for its header."""
    reader = csv.reader(lines)
    try:
        header = [c.strip().lower() for c in next(reader, [])]
        if "image_location" not in header:
            raise LayoutError(f"--list {path}: a NINCO file_list.csv has the header image_location,class "
                              f"(found {','.join(header) or 'nothing'})")
        at, cls_at = header.index("image_location"), (header.index("class") if "class" in header else -1)
        for n, r in enumerate(reader, start=2):
            if any(c.strip() for c in r):
                yield n, r[at].strip() if len(r) > at else "", r[cls_at].strip() if 0 <= cls_at < len(r) else ""
    except csv.Error as exc:
        raise LayoutError(f"--list {path}: not a CSV file NINCO's way (near line {reader.line_num}: {exc}); give its "
                          "file_list.csv as published") from None


def scan_listed(layout_name: str, root: Path, options: Mapping[str, Any], listing: PathList) -> Scan:
    """The members of ``root`` that ``listing`` names. Over plain folders a listed file's class is
    its list class (NINCO) or its folder's name (OpenOOD's ``ninco/ninco_ood_classes/<class>/x.jpg``)."""
    layout = source_layout(layout_name)
    wanted: dict[str, str] = {}
    for entry, cls in listing.entries:
        member = layout.listed_path(entry)
        if not cls and layout_name == "folder":
            parts = PurePosixPath(entry).parts
            cls = parts[-2] if len(parts) >= 2 else ""
        wanted[member] = cls
    scan = layout.scan(root, options, wanted=wanted)
    scan.refused.extend(listing.bad)
    return scan


def scan_layout(layout_name: str, root: Path, options: Mapping[str, Any]) -> Scan:
    """A source's scan: the whole root, or the members its list names (``options['list']``)."""
    listed = options.get("list")
    if listed:
        return scan_listed(layout_name, root, options, read_path_list(listed["path"], listed["format"]))
    return source_layout(layout_name).scan(root, options)
