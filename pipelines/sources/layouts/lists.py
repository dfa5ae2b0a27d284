"""Published OOD sets as path lists over a root of any layout, so an existing benchmark can be
audited like any other source (as NINCO audited the OOD sets before it):

- ``openood``: OpenOOD's imglists, ``<path> <label>`` a line, paths relative to ``images_largescale/``;
- ``ninco``: NINCO's ``file_list.csv`` (header ``image_location,class``);
- ``paths``: one path a line (ImageNet-OOD's release: ``<wnid>/<wnid>_<n>.JPEG`` over ImageNet-21K).

Only the files (or archives) the list names are read; a listed path that is not there is recorded
as refused (``listed_not_found``), a line that cannot be a path as ``bad_list_line``.
"""
from __future__ import annotations

import csv
import hashlib
import io
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from pipelines.sources.walk import Refusal

from . import LayoutError, Scan, source_layout
from ._tar import unsafe_name

LIST_FORMATS = {
    "openood": "OpenOOD imglist: '<path> <label>' a line, paths relative to images_largescale/",
    "ninco": "NINCO file_list.csv: header image_location,class",
    "paths": "one path a line (ImageNet-OOD's release over ImageNet-21K)",
}
BAD_LIST_LINE = "bad_list_line"


@dataclass
class PathList:
    path: str
    format: str
    sha256: str
    entries: list[tuple[str, str]] = field(default_factory=list)  # (path, class name from the list or '')
    bad: list[Refusal] = field(default_factory=list)


def read_path_list(path: str | Path, fmt: str) -> PathList:
    if fmt not in LIST_FORMATS:
        raise LayoutError(f"--list-format {fmt}: use one of {', '.join(LIST_FORMATS)}")
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        raise LayoutError(f"--list {path}: cannot read it ({exc.strerror or exc})") from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise LayoutError(f"--list {path}: not UTF-8 text (byte {exc.start}); give the list as its benchmark published it") from None
    out = PathList(str(path), fmt, hashlib.sha256(raw).hexdigest())
    name = Path(path).name
    if fmt == "ninco":
        rows = list(csv.reader(io.StringIO(text, newline="")))
        header = [c.strip().lower() for c in rows[0]] if rows else []
        if "image_location" not in header:
            raise LayoutError(f"--list {path}: a NINCO file_list.csv has the header image_location,class (found {','.join(header) or 'nothing'})")
        at, cls_at = header.index("image_location"), (header.index("class") if "class" in header else -1)
        lines = [(n, r[at].strip() if len(r) > at else "", r[cls_at].strip() if 0 <= cls_at < len(r) else "")
                 for n, r in enumerate(rows[1:], start=2) if any(c.strip() for c in r)]
    else:
        lines = []
        for n, line in enumerate(text.splitlines(), start=1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            entry = line.rsplit(" ", 1)[0] if fmt == "openood" and " " in line else line
            lines.append((n, entry.strip(), ""))
    seen: set[str] = set()
    for n, entry, cls in lines:
        entry = entry.removeprefix("./")
        why = unsafe_name(entry) or ("" if entry else "empty")
        if why:
            out.bad.append(Refusal(f"{name}#line{n}", "", BAD_LIST_LINE, f"{path}, line {n}: {entry!r} is {why}; the line is skipped"))
            continue
        if entry in seen:
            continue
        seen.add(entry)
        out.entries.append((str(PurePosixPath(entry)), cls))
    if not out.entries:
        raise LayoutError(f"--list {path}: no usable entries in it as a {fmt} list ({LIST_FORMATS[fmt]})")
    return out


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
