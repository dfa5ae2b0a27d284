"""Naming a source's class folders as WordNet 3.0 noun synsets: a class map's ``folder,wnid``
rows first, then a folder named by its wnid, then a folder named by one unambiguous lemma; every
other folder is unmapped, with why. The sources service (curation/services/sources.py) drives it
after the source's layout has listed the folders (pipelines/sources/)."""
from __future__ import annotations

import csv
import io
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipelines.classes.wordnet import is_wnid, lookup_lemma, synset_info

METHOD_WNID = "wnid_folder"
METHOD_CLASS_MAP = "class_map"
METHOD_LEMMA = "lemma"
METHOD_UNMAPPED = "unmapped"


@dataclass(frozen=True)
class ClassMapping:
    folder: str
    wnid: str  # "" when unmapped
    method: str
    name: str = ""
    lemmas: tuple[str, ...] = ()
    gloss: str = ""
    note: str = ""  # why a folder is unmapped, or which lemma matched


class ClassMapError(ValueError):
    """The class-map CSV is unusable; the message names the file and line."""


def read_class_map(path: str | os.PathLike, wn: Any) -> dict[str, str]:
    """``folder,wnid`` rows (a header row ``folder,wnid`` is allowed). Every wnid must exist."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ClassMapError(f"{path}: cannot open the class map ({exc.strerror})") from None
    if b"\x00" in raw:
        raise ClassMapError(f"{path}: the class map holds NUL bytes (a binary or UTF-16 file?); save it as UTF-8 CSV text")
    try:
        text = raw.decode("utf-8-sig")  # a byte-order mark (as spreadsheets write) is dropped
    except UnicodeDecodeError as exc:
        raise ClassMapError(f"{path}: the class map is not UTF-8 (byte {exc.start}: {raw[exc.start:exc.start + 1]!r}); "
                            "save it as UTF-8 CSV") from None
    out: dict[str, str] = {}
    for lineno, row in enumerate(csv.reader(io.StringIO(text, newline="")), start=1):
        if not row or not "".join(row).strip() or row[0].startswith("#"):
            continue
        if lineno == 1 and [c.strip().lower() for c in row[:2]] == ["folder", "wnid"]:
            continue
        if len(row) < 2:
            raise ClassMapError(f"{path}, line {lineno}: expected 'folder,wnid', got {','.join(row)!r}")
        folder, wnid = row[0].strip(), row[1].strip()
        if not is_wnid(wnid) or synset_info(wn, wnid) is None:
            raise ClassMapError(f"{path}, line {lineno}: {wnid!r} is not a WordNet 3.0 noun id")
        if folder in out and out[folder] != wnid:
            raise ClassMapError(f"{path}, line {lineno}: folder {folder!r} is mapped twice ({out[folder]} and {wnid})")
        out[folder] = wnid
    return out


def map_class_folders(folders: list[str], wn: Any, class_map: dict[str, str] | None = None) -> list[ClassMapping]:
    """Map each folder: the class map first, then a wnid-shaped name, then an unambiguous lemma."""
    class_map = class_map or {}
    out = []
    for folder in folders:
        if folder in class_map:
            info = synset_info(wn, class_map[folder])
            if info is None:  # read_class_map checked every wnid; a map given by other code may not have
                out.append(ClassMapping(folder, "", METHOD_UNMAPPED, note=f"the class map's {class_map[folder]} is not a WordNet noun"))
                continue
            out.append(ClassMapping(folder, info.wnid, METHOD_CLASS_MAP, info.name, info.lemmas, info.gloss))
            continue
        if is_wnid(folder):
            info = synset_info(wn, folder)
            if info is None:
                out.append(ClassMapping(folder, "", METHOD_UNMAPPED, note=f"{folder} is not a WordNet 3.0 noun synset"))
            else:
                out.append(ClassMapping(folder, info.wnid, METHOD_WNID, info.name, info.lemmas, info.gloss))
            continue
        found = lookup_lemma(wn, folder)
        if len(found) == 1:
            info = found[0]
            out.append(ClassMapping(folder, info.wnid, METHOD_LEMMA, info.name, info.lemmas, info.gloss, note=f"lemma {folder!r}"))
        elif found:
            options = "; ".join(f"{i.wnid} {i.name} ({i.gloss[:60]})" for i in found[:6])
            out.append(ClassMapping(folder, "", METHOD_UNMAPPED, note=f"ambiguous lemma, {len(found)} noun senses: {options}"))
        else:
            out.append(ClassMapping(folder, "", METHOD_UNMAPPED, note="no WordNet noun has this name"))
    return out
