"""ROOT/<class folder>/<image files>: the layout sources have always had (the default)."""
from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pipelines.sources.walk import NOT_A_REGULAR_FILE, UnsafePath, root_real, safe_join, scan_source

from . import (
    DEFAULT_MAX_BYTES,
    FILE_TOO_LARGE,
    LISTED_NOT_FOUND,
    Member,
    MemberOutsideRoot,
    MemberRef,
    MemberUnreadable,
    Scan,
    SourceLayout,
    open_regular,
    register_source_layout,
)


@register_source_layout
class Folder(SourceLayout):
    name = "folder"
    description = "ROOT/<class folder>/<image files> (files may sit in sub-folders of a class folder)"
    reads_in_place = False

    def scan(self, root: Path, options: Mapping[str, Any], *, wanted: Mapping[str, str] | None = None) -> Scan:
        if wanted is None:
            found = scan_source(root)
            scan = Scan(refused=list(found.refused))
            scan.members = [Member(f.rel_path, f.class_folder, f.size, f.mtime_ns) for f in found.files]
            scan.finish()
            scan.class_keys = sorted(set(scan.class_keys) | set(found.class_folders))
            return scan
        # a published list: only the files it names are looked at (never a walk of the whole root)
        scan = Scan()
        root_real = os.path.realpath(root)
        for rel in sorted(wanted):
            cls = wanted[rel] or rel.split("/", 1)[0]
            try:
                full = safe_join(root, rel, root_real=root_real)
                st = os.stat(full)
            except UnsafePath as exc:
                scan.refuse(rel, cls, "path_escapes_root", str(exc))
                continue
            except OSError:
                scan.refuse(rel, cls, LISTED_NOT_FOUND, f"{root}/{rel}: named by the list but not found under the root")
                continue
            if not os.path.isfile(full):
                scan.refuse(rel, cls, NOT_A_REGULAR_FILE, f"{full}: not a regular file; refused")
                continue
            scan.members.append(Member(rel, cls, st.st_size, st.st_mtime_ns))
        return scan.finish()

    def read(self, ref: MemberRef) -> bytes:
        try:
            path = safe_join(ref.root, ref.path, root_real=root_real(ref.root))
        except UnsafePath as exc:
            raise MemberOutsideRoot(str(exc)) from None
        try:
            with open_regular(path) as fh:  # a fifo put in the file's place is refused, not waited on
                size = os.fstat(fh.fileno()).st_size
                if size > DEFAULT_MAX_BYTES:
                    raise MemberUnreadable(f"{path}: {size} bytes is more than the {DEFAULT_MAX_BYTES}-byte limit ({FILE_TOO_LARGE})")
                return fh.read()
        except FileNotFoundError:
            raise MemberUnreadable(f"{path}: no longer exists; re-run add_source") from None
