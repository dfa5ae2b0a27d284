"""Reading a plain (uncompressed) tar's headers once, without unpacking: what the tar-based
layouts share. Each regular member yields its name, data offset and size; hostile members are
refused into the scan with a reason code, and the walk goes on."""
from __future__ import annotations

import os
import re
import tarfile
import unicodedata
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any

import numpy as np

from pipelines.sources.walk import NOT_A_REGULAR_FILE

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


_PLAIN = re.compile(r"[\x20-\x7e]+")  # printable ASCII: no control characters to look for


def unsafe_name(name: str) -> str:
    """Why a member name cannot be a member path ('' when it can)."""
    if _PLAIN.fullmatch(name) and name[0] != "/" and ".." not in name.split("/"):
        return ""  # the common case, decided without a path object or a look at each character
    pure = PurePosixPath(name)
    if not name or pure.is_absolute() or name.startswith("/"):
        return "an absolute path"
    if ".." in pure.parts:
        return "a path with '..'"
    if any(unicodedata.category(c)[0] == "C" for c in name):
        return "a name with control characters"
    return ""


@dataclass(frozen=True)
class _Header:
    """One member as a header reader sees it: its name, kind, data offset, size, link target and
    the header's own offset (for naming a member whose name cannot be shown)."""

    name: str
    kind: str  # "file", "dir", "symlink", "hardlink", "other"
    offset_data: int
    size: int
    linkname: str
    offset: int


class _Cut(Exception):
    """The archive ends inside a header, or its headers stop making sense (a truncated download)."""


_KINDS = {b"0": "file", b"\0": "file", b"7": "file", b"5": "dir", b"2": "symlink", b"1": "hardlink", b"3": "other", b"4": "other",
          b"6": "other"}


_WINDOW = 32 * 1024
_ZERO_BLOCK = bytes(512)


def _octal(field: bytes) -> int:
    try:  # the usual field: octal digits ended by NUL or space
        return int(field.rstrip(b" \0") or b"0", 8)
    except ValueError:
        pass
    if field[:1] and field[0] & 0x80:  # GNU base-256 for large numbers: let tarfile read those
        raise ValueError("base-256 number")
    text = field.split(b"\0", 1)[0].strip()
    return int(text, 8) if text else 0


def _fast_headers(full: str) -> Iterator[_Header]:
    """The headers of a POSIX (ustar, pax) or GNU tar, sliced out of 32 KiB reads (a shard of
    small images needs one read for several samples; a large member's data is skipped with a
    seek). tarfile does the same in Python with far more work per header; webdataset's shards
    carry a pax header for every member. Raises ``ValueError`` on anything it does not know (the
    caller then reads the archive with tarfile), ``_Cut`` where the file ends early. (Plain reads,
    not a memory map: a file cut while mapped would kill the process with SIGBUS.)"""
    with open(full, "rb") as fh:
        window, at = b"", 0

        sums: Any = None  # the byte sums of the window's 512-byte blocks, made when a checksum is first asked

        def span(start: int, n: int) -> bytes:
            nonlocal window, at, sums
            if not (at <= start and start + n <= at + len(window)):
                fh.seek(start)
                window, at, sums = fh.read(max(n, _WINDOW)), start, None
            return window[start - at:start - at + n]

        def block_sum(start: int, block: bytes) -> int:
            """The sum of a header block's bytes: every block of the window summed at once (numpy),
            a few microseconds less per header than summing each in Python's loop."""
            nonlocal sums
            k, r = divmod(start - at, 512)
            if r:
                return sum(block)
            if sums is None:
                whole = len(window) // 512 * 512
                sums = np.frombuffer(window, dtype=np.uint8, count=whole).reshape(-1, 512).sum(axis=1, dtype=np.int64)
            return int(sums[k]) if k < len(sums) else sum(block)

        pos = 0
        pending: dict[str, str] = {}  # pax / GNU long-name records for the next member
        first: int | None = None  # where the next member's headers start (its extended headers first, as tarfile counts)
        while True:
            block = span(pos, 512)
            if not block:
                raise _Cut("the archive ends without its end-of-archive blocks")
            if len(block) < 512:
                raise _Cut(f"the archive ends inside the header at byte {pos}")
            if block == _ZERO_BLOCK:
                return  # the end-of-archive marker
            stored = _octal(block[148:156])
            if block_sum(pos, block) - sum(block[148:156]) + 8 * 32 != stored:
                raise ValueError("bad header checksum")
            size = _octal(block[124:136])
            flag = block[156:157]
            data = pos + 512
            nxt = data + (size + 511) // 512 * 512
            if flag == b"g":
                raise ValueError("a global pax header")  # rare; tarfile applies it to the members after it
            if flag in (b"x", b"L", b"K"):
                first = pos if first is None else first
                payload = span(data, size)
                if len(payload) < size:
                    raise _Cut("the archive ends inside an extended header")
                if flag == b"x":
                    if b"path=" in payload or b"size=" in payload:  # else only times and owners (webdataset's mtime)
                        pending.update(_pax_records(payload))
                elif flag == b"L":
                    pending["path"] = payload.split(b"\0", 1)[0].decode("utf-8", "surrogateescape")
                elif flag == b"K":
                    pending["linkpath"] = payload.split(b"\0", 1)[0].decode("utf-8", "surrogateescape")
                pos = nxt
                continue
            if flag not in _KINDS:
                raise ValueError(f"member type {flag!r}")
            name = block[0:100].split(b"\0", 1)[0]
            if block[257:263] == b"ustar\0" and block[345:500].strip(b"\0"):  # POSIX ustar: prefix/name
                name = block[345:500].split(b"\0", 1)[0] + b"/" + name
            text = pending.pop("path", None) or name.decode("utf-8", "surrogateescape")
            link = pending.pop("linkpath", None) or block[157:257].split(b"\0", 1)[0].decode("utf-8", "surrogateescape")
            if "size" in pending:
                size = int(pending.pop("size"))
                nxt = data + (size + 511) // 512 * 512
            pending.clear()
            kind = _KINDS[flag]
            if kind == "file" and text.endswith("/"):
                kind = "dir"
            if kind == "dir":
                text = text.rstrip("/")  # as tarfile names folders
            yield _Header(text, kind, data, size if kind == "file" else 0, link, pos if first is None else first)
            first = None
            pos = nxt


def _pax_records(payload: bytes) -> dict[str, str]:
    """``"<length> <key>=<value>\\n"`` records (POSIX.1-2001 pax extended headers)."""
    out, at = {}, 0
    while at < len(payload):
        space = payload.index(b" ", at)
        length = int(payload[at:space])
        if length <= 0:
            raise ValueError("bad pax record")
        key, _, value = payload[space + 1:at + length - 1].partition(b"=")
        out[key.decode("utf-8")] = value.decode("utf-8", "surrogateescape")
        at += length
    return out


def _tarfile_headers(full: str) -> Iterator[_Header]:
    """The same as ``_fast_headers``, read by tarfile (every format it knows)."""
    with tarfile.open(full, mode="r:") as tf:
        while True:
            try:
                info = tf.next()
            except (tarfile.ReadError, EOFError, OSError) as exc:
                raise _Cut(str(exc)) from None
            if info is None:
                return
            kind = ("file" if info.isfile() else "dir" if info.isdir() else "symlink" if info.issym() else "hardlink" if info.islnk()
                    else "other")
            yield _Header(info.name, kind, info.offset_data, info.size if kind == "file" else 0, info.linkname, info.offset)


def tar_headers(full: str) -> Iterator[_Header]:
    """Every member header of the tar at ``full``: the fast reader, and tarfile for the archives
    it does not know (from the start, so nothing is yielded twice)."""
    try:
        headers = list(_fast_headers(full))
    except _Cut:
        headers = None  # tarfile reads up to the cut and says where
    except (ValueError, UnicodeDecodeError):
        headers = None
    if headers is not None:
        yield from headers
        return
    yield from _tarfile_headers(full)


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
        tarfile.open(full, mode="r:").close()
    except tarfile.ReadError as exc:
        scan.refuse(rel, class_key, NOT_AN_ARCHIVE, f"{full}: not a tar archive ({exc}); refused")
        return
    headers = tar_headers(full)
    while True:
        try:
            info = next(headers)
        except StopIteration:
            return
        except _Cut as exc:
            scan.refuse(f"{rel}#end", class_key, TRUNCATED_ARCHIVE,
                        f"{full}: the archive is cut off after {len(seen)} members ({exc}); the members before it were kept")
            return
        name = info.name
        where = f"{rel}/{name}"
        why = unsafe_name(name)
        if why:
            shown = name.encode("unicode_escape").decode("ascii")
            scan.refuse(f"{rel}#{info.offset}", class_key, UNSAFE_MEMBER_NAME,
                        f"{full}: member {shown!r} is {why}; refused (nothing is ever unpacked)")
            continue
        if info.kind == "dir":
            continue
        if info.kind in ("symlink", "hardlink"):
            scan.refuse(where, class_key, LINK_MEMBER, f"{full}: member {name!r} is a {'symbolic' if info.kind == 'symlink' else 'hard'} "
                                                       f"link (to {info.linkname!r}); links are refused")
            continue
        if info.kind != "file":
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
