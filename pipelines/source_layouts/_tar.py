"""Reading a plain (uncompressed) tar's headers once, without unpacking: what the tar-based
layouts share. Each regular member yields its name, data offset and size; hostile members are
refused into the scan with a reason code, and the walk goes on."""
from __future__ import annotations

import os
import tarfile
import unicodedata
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import PurePosixPath

from pipelines.sources import NOT_A_REGULAR_FILE

from . import (
    COMPRESSED_ARCHIVE,
    DUPLICATE_MEMBER,
    FILE_TOO_LARGE,
    LINK_MEMBER,
    NOT_AN_ARCHIVE,
    TRUNCATED_ARCHIVE,
    UNSAFE_MEMBER_NAME,
    Scan,
    compressed_refusal,
    compression_of,
)


@dataclass(frozen=True)
class TarEntry:
    name: str
    offset: int  # where the member's data starts in the tar
    size: int


def unsafe_name(name: str) -> str:
    """Why a member name cannot be a member path ('' when it can)."""
    pure = PurePosixPath(name)
    if not name or pure.is_absolute() or name.startswith("/"):
        return "an absolute path"
    if ".." in pure.parts:
        return "a path with '..'"
    if any(unicodedata.category(c)[0] == "C" for c in name):
        return "a name with control characters"
    return ""


def tar_entries(full: str, rel: str, class_key: str, scan: Scan, *, max_bytes: int | None = None) -> Iterator[TarEntry]:
    """The regular members of the tar at ``full`` (``rel`` under the root), in archive order.
    Refused, with the batch going on: links, devices, unsafe or repeated names, members over
    ``max_bytes``, members cut off by a truncated file; a compressed or non-tar file as a whole."""
    from . import DEFAULT_MAX_BYTES as limit  # read at call time, so a test may lower it

    max_bytes = max_bytes or limit
    kind = compression_of(full)
    if kind:
        scan.refuse(rel, class_key, COMPRESSED_ARCHIVE, compressed_refusal(rel, kind))
        return
    file_size = os.path.getsize(full)
    seen: dict[str, int] = {}
    try:
        tf = tarfile.open(full, mode="r:")
    except tarfile.ReadError as exc:
        scan.refuse(rel, class_key, NOT_AN_ARCHIVE, f"{full}: not a tar archive ({exc}); refused")
        return
    with tf:
        while True:
            try:
                info = tf.next()
            except (tarfile.ReadError, EOFError, OSError) as exc:
                scan.refuse(f"{rel}#end", class_key, TRUNCATED_ARCHIVE,
                            f"{full}: the archive is cut off after {len(seen)} members ({exc}); the members before it were kept")
                return
            if info is None:
                return
            name = info.name
            where = f"{rel}/{name}"
            why = unsafe_name(name)
            if why:
                shown = name.encode("unicode_escape").decode("ascii")
                scan.refuse(f"{rel}#{info.offset}", class_key, UNSAFE_MEMBER_NAME,
                            f"{full}: member {shown!r} is {why}; refused (nothing is ever unpacked)")
                continue
            if info.isdir():
                continue
            if info.issym() or info.islnk():
                scan.refuse(where, class_key, LINK_MEMBER, f"{full}: member {name!r} is a {'symbolic' if info.issym() else 'hard'} "
                                                           f"link (to {info.linkname!r}); links are refused")
                continue
            if not info.isfile():
                scan.refuse(where, class_key, NOT_A_REGULAR_FILE, f"{full}: member {name!r} is not a regular file (device or fifo); refused")
                continue
            if name in seen:
                seen[name] += 1
                scan.refuse(f"{where}#{seen[name]}", class_key, DUPLICATE_MEMBER,
                            f"{full}: member {name!r} appears {seen[name]} times; only the first is read")
                continue
            seen[name] = 1
            if info.size > max_bytes:
                scan.refuse(where, class_key, FILE_TOO_LARGE, f"{full}: member {name!r} has {info.size} bytes, more than the "
                                                              f"{max_bytes}-byte limit for one image")
                continue
            if info.offset_data + info.size > file_size:
                scan.refuse(where, class_key, TRUNCATED_ARCHIVE, f"{full}: member {name!r} is cut off by the end of the archive "
                                                                 "(a truncated download?); refused")
                continue
            yield TarEntry(name, info.offset_data, info.size)
