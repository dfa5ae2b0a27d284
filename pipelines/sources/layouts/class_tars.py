"""ROOT/<wnid>.tar, each holding that class's images: ImageNet-21K (winter21_whole, fall11) as
distributed, and the per-class tars SSB's scripts fetch. Read in place by member offset."""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from pathlib import Path, PurePosixPath
from typing import Any

from . import LISTED_NOT_FOUND, Member, MemberRef, Scan, SourceLayout, container_file, read_span, register_source_layout, walk_containers
from ._tar import tar_entries

COMPRESSED = (".tar.gz", ".tgz", ".tar.bz2", ".tar.xz", ".tar.zst")


@register_source_layout
class ClassTars(SourceLayout):
    name = "class-tars"
    spans = True
    description = "ROOT/<class>.tar (ImageNet-21K's <wnid>.tar): the class is the tar's name; members read in place"

    def scan(self, root: Path, options: Mapping[str, Any], *, wanted: Mapping[str, str] | None = None) -> Scan:
        scan = Scan()
        by_tar: dict[str, dict[str, str]] | None = None
        if wanted is not None:
            by_tar = defaultdict(dict)
            for path, cls in wanted.items():
                tar, _, member = path.partition("/")
                by_tar[tar][member] = cls
        for rel, full, st in walk_containers(root, (".tar",), scan, also=COMPRESSED):
            key = _class_of(rel)
            if by_tar is not None and rel not in by_tar:
                continue
            scan.containers += 1
            want = by_tar.pop(rel) if by_tar is not None else None
            for e in tar_entries(full, rel, key, scan):
                if want is not None and e.name not in want:
                    continue
                cls = (want.pop(e.name) or key) if want is not None else key
                scan.members.append(Member(f"{rel}/{e.name}", cls, e.size, st.st_mtime_ns, container=rel, offset=e.offset))
            for name, cls in sorted((want or {}).items()):
                scan.refuse(f"{rel}/{name}", cls or key, LISTED_NOT_FOUND, f"{root}/{rel}: has no member {name!r} (named by the list)")
        for rel, names in sorted((by_tar or {}).items()):
            for name, cls in sorted(names.items()):
                scan.refuse(f"{rel}/{name}", cls or _class_of(rel), LISTED_NOT_FOUND,
                            f"{root}/{rel}: no such archive under the root (named by the list)")
        return scan.finish()

    def read(self, ref: MemberRef) -> bytes:
        return read_span(container_file(ref), ref.offset, ref.size, ref)

    def listed_path(self, entry: str) -> str:
        """``<wnid>/<file>`` (ImageNet-OOD's release, an unpacked ImageNet-21K's path) is member
        ``<file>`` of ``<wnid>.tar``; a path already naming a tar is kept."""
        parts = PurePosixPath(entry).parts
        if len(parts) >= 2 and not parts[0].endswith(".tar"):
            return f"{parts[0]}.tar/{'/'.join(parts[1:])}"
        return entry


def _class_of(rel: str) -> str:
    name = PurePosixPath(rel).name
    for suffix in COMPRESSED + (".tar",):
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name
