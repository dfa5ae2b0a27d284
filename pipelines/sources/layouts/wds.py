"""WebDataset shards: ROOT/<name>-NNNN.tar holding samples <key>.jpg with <key>.json / <key>.cls
beside it (timm's imagenet-w21-wds, -22k-wds, -12k-wds, -1k-wds; img2dataset's output). A sample
is the run of consecutive members sharing a key (the name up to the first dot of its base name,
as the webdataset package groups them). Images are read in place by member offset.

The class comes from the sample's ``.json`` field ``class_name`` (timm's copies; ``class_field``
to name another), else from its ``.cls`` integer through ``wnid_list`` (a file of one wnid per
line: timm's label is the line of the sorted wnid list), else the sample is refused ``no_class``.
"""
from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path, PurePosixPath
from typing import Any

from . import (
    LISTED_NOT_FOUND,
    NO_CLASS,
    LayoutError,
    Member,
    MemberRef,
    Scan,
    SourceLayout,
    container_file,
    open_regular,
    read_span,
    refuse_unopened,
    register_source_layout,
    walk_containers,
)
from ._tar import TarEntry, tar_entries

IMAGE_EXTENSIONS = ("jpg", "jpeg", "png", "webp", "ppm", "bmp", "tif", "tiff", "gif")
META_MAX_BYTES = 1 << 20  # a sample's json / cls is read at scan time: more than this is not metadata
COMPRESSED = (".tar.gz", ".tgz", ".tar.bz2", ".tar.xz", ".tar.zst")


def sample_key(name: str) -> tuple[str, str]:
    """(key, extension): ``a/b/123.seg.png`` -> (``a/b/123``, ``seg.png``)."""
    folder, _, base = name.rpartition("/")
    stem, dot, ext = base.partition(".")
    return (f"{folder}/{stem}" if folder else stem), (ext.lower() if dot else "")


def read_wnid_list(path: str) -> list[str]:
    try:
        with open(path, encoding="utf-8") as fh:
            lines = [line.strip() for line in fh]
    except (OSError, UnicodeDecodeError) as exc:
        raise LayoutError(f"--wnid-list {path}: cannot read it ({exc}); give a text file of one wnid per line") from None
    wnids = [w for w in lines if w]
    if not wnids:
        raise LayoutError(f"--wnid-list {path}: the file is empty; give one wnid per line (line N is label N)")
    return wnids


@register_source_layout
class WebDataset(SourceLayout):
    name = "wds"
    spans = True
    description = "WebDataset shards (timm's imagenet-*-wds, img2dataset): <key>.jpg + .json/.cls; read in place"
    options = {
        "class_field": "the sample .json field that names its class (default class_name, as timm's shards)",
        "wnid_list": "a file of one wnid per line: a sample's .cls integer N is line N (timm's sorted wnid list)",
    }

    def check_options(self, options: Mapping[str, Any]) -> None:
        super().check_options(options)
        if options.get("wnid_list"):
            read_wnid_list(str(options["wnid_list"]))

    def scan(self, root: Path, options: Mapping[str, Any], *, wanted: Mapping[str, str] | None = None) -> Scan:
        scan = Scan()
        field = str(options.get("class_field") or "class_name")
        wnids = read_wnid_list(str(options["wnid_list"])) if options.get("wnid_list") else None
        want_shards = {p.partition("/")[0] for p in wanted} if wanted is not None else None
        for rel, full, st in walk_containers(root, (".tar",), scan, also=COMPRESSED):
            if want_shards is not None and rel not in want_shards:
                continue
            scan.containers += 1
            try:
                meta_fh = open_regular(full)
            except OSError as exc:  # a fifo put in its place since the walk, or no permission to read it
                refuse_unopened(scan, rel, "", exc)
                continue
            with meta_fh:
                def small(e: TarEntry) -> bytes | None:
                    if e.size > META_MAX_BYTES:
                        return None
                    meta_fh.seek(e.offset)
                    return meta_fh.read(e.size)

                sample: dict[str, TarEntry] = {}
                key = None
                for e in [*tar_entries(full, rel, "", scan), None]:
                    k = sample_key(e.name)[0] if e is not None else None
                    if sample and k != key:
                        self._sample(scan, rel, st.st_mtime_ns, key or "", sample, small, field, wnids, wanted)
                        sample = {}
                    if e is not None:
                        key = k
                        sample[sample_key(e.name)[1]] = e
        if wanted is not None:
            have = {m.path for m in scan.members} | {r.rel_path for r in scan.refused}
            for path in sorted(set(wanted) - have):
                scan.refuse(path, wanted[path], LISTED_NOT_FOUND, f"{root}/{path}: named by the list but not in the shards")
        return scan.finish()

    def _sample(self, scan: Scan, rel: str, mtime_ns: int, key: str, sample: dict[str, TarEntry], small, field: str,
                wnids: list[str] | None, wanted: Mapping[str, str] | None) -> None:
        ext = next((x for x in IMAGE_EXTENSIONS if x in sample), None)
        if ext is None:
            return  # a sample without an image (img2dataset's failed downloads have none): nothing to ingest
        img = sample[ext]
        path = f"{rel}/{img.name}"
        if wanted is not None and path not in wanted:
            return
        cls, why = "", ""
        if "json" in sample:
            raw = small(sample["json"])
            try:
                meta = json.loads(raw) if raw is not None else None
            except (ValueError, UnicodeDecodeError):
                meta, why = None, f"its {key}.json is not JSON"
            if isinstance(meta, dict) and isinstance(meta.get(field), (str, int)) and str(meta.get(field)).strip():
                cls = str(meta[field]).strip()
        if not cls and wnids is not None and "cls" in sample:
            raw = small(sample["cls"])
            try:
                label = int((raw or b"").decode("ascii").strip())
                cls = wnids[label] if 0 <= label < len(wnids) else ""
                why = why or ("" if cls else f"its .cls {label} is not a line of the wnid list ({len(wnids)} lines)")
            except (ValueError, UnicodeDecodeError):
                why = why or f"its {key}.cls is not an integer"
        if wanted is not None and wanted.get(path):
            cls = wanted[path]
        if not cls:
            how = why or (f"no .json field {field!r}" + ("" if wnids is not None else " and no --wnid-list for its .cls"))
            scan.refuse(path, "", NO_CLASS, f"{os.path.basename(rel)}::{img.name}: no class ({how}); name the field with "
                                            "--class-field or give --wnid-list")
            return
        scan.members.append(Member(path, cls, img.size, mtime_ns, container=rel, offset=img.offset))

    def read(self, ref: MemberRef) -> bytes:
        return read_span(container_file(ref), ref.offset, ref.size, ref)

    def listed_path(self, entry: str) -> str:
        return str(PurePosixPath(entry))
