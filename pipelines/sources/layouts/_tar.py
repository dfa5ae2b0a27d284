"""Reading a plain (uncompressed) tar's headers once, without unpacking: what the tar-based
layouts share. Each regular member yields its name, data offset and size; hostile members are
refused into the scan with a reason code, and the walk goes on. Nothing is lost without a row:
a member whose pax records lie is refused (``bad_pax_record``), and after a header that does not
add up, the archive's tail is refused as one item with the bytes it holds (``bad_tar_header``)."""
from __future__ import annotations

import os
import re
import tarfile
import unicodedata
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any, BinaryIO

import numpy as np

from pipelines.sources.walk import NOT_A_REGULAR_FILE

from . import (
    BAD_PAX_RECORD,
    BAD_TAR_HEADER,
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
    open_regular,
    refuse_unopened,
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


@dataclass(frozen=True)
class _Refused:
    """What a header reader could not read: one member (``tail`` False; ``name`` as far as its
    header gave it) or everything from ``offset`` to the end of the archive (``tail`` True)."""

    offset: int  # the header's offset in the tar
    code: str
    why: str
    name: str = ""
    tail: bool = False


class _Cut(Exception):
    """The archive ends inside a header, or its headers stop making sense (a truncated download)."""


class _Tail(ValueError):
    """A header at ``offset`` that cannot be read (a bad checksum, a size that is no number): where
    the next member starts cannot be known, so the rest of the archive is unreadable."""

    def __init__(self, offset: int, why: str):
        super().__init__(why)
        self.offset, self.why = offset, why


class _Unknown(ValueError):
    """A form the fast reader leaves to tarfile (GNU base-256 numbers, a global pax header)."""


_KINDS = {b"0": "file", b"\0": "file", b"7": "file", b"5": "dir", b"2": "symlink", b"1": "hardlink", b"3": "other", b"4": "other",
          b"6": "other"}


_WINDOW = 32 * 1024
_EXTENDED_MAX = 1 << 20  # a pax or GNU long-name header: records and a name, never more than this
_ZERO_BLOCK = bytes(512)


def _octal(field: bytes) -> int:
    try:  # the usual field: octal digits ended by NUL or space
        return int(field.rstrip(b" \0") or b"0", 8)
    except ValueError:
        pass
    if field[:1] and field[0] & 0x80:  # GNU base-256 for large numbers: let tarfile read those
        raise _Unknown("base-256 number")
    text = field.split(b"\0", 1)[0].strip()
    return int(text, 8) if text else 0


def _signed_sum(block: bytes) -> int:
    """The header's checksum as some old tars compute it (bytes as signed), as tarfile accepts."""
    return sum(b - 256 if b > 127 else b for b in block[:148] + block[156:]) + 8 * 32


def _fast_headers(full: str) -> Iterator[_Header | _Refused]:
    """The headers of a POSIX (ustar, pax) or GNU tar, sliced out of 32 KiB reads (a shard of
    small images needs one read for several samples; a large member's data is skipped with a
    seek). tarfile does the same in Python with far more work per header; webdataset's shards
    carry a pax header for every member. A member whose pax records are malformed (a size that is
    no number, a path that is not UTF-8) is yielded as ``_Refused`` and the reader goes on past it
    by its ustar size. Raises ``_Tail`` at a header that does not add up (bad checksum, fields that
    are no numbers), ``ValueError`` on anything else it does not know (the caller then reads the
    archive with tarfile), ``_Cut`` where the file ends early. (Plain reads, not a memory map: a
    file cut while mapped would kill the process with SIGBUS.)"""
    with open_regular(full) as fh:
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
        bad: list[str] = []  # what was wrong with the next member's pax records
        first: int | None = None  # where the next member's headers start (its extended headers first, as tarfile counts)
        while True:
            block = span(pos, 512)
            if not block:
                raise _Cut("the archive ends without its end-of-archive blocks")
            if len(block) < 512:
                raise _Cut(f"the archive ends inside the header at byte {pos}")
            if block == _ZERO_BLOCK:
                return  # the end-of-archive marker
            try:
                stored = _octal(block[148:156])
            except _Unknown:
                raise
            except ValueError:
                raise _Tail(pos, "a header whose checksum is not a number") from None
            if block_sum(pos, block) - sum(block[148:156]) + 8 * 32 != stored:
                if _signed_sum(block) == stored:
                    raise _Unknown("a signed header checksum")
                raise _Tail(pos, "bad header checksum")
            try:
                size = _octal(block[124:136])
            except _Unknown:
                raise
            except ValueError:
                raise _Tail(pos, "a header whose size is not a number") from None
            flag = block[156:157]
            data = pos + 512
            nxt = data + (size + 511) // 512 * 512
            if flag == b"g":
                raise ValueError("a global pax header")  # rare; tarfile applies it to the members after it
            if flag in (b"x", b"L", b"K"):
                first = pos if first is None else first
                if size > _EXTENDED_MAX:  # never read into memory: the member it describes is refused
                    bad.append(f"its extended header has {size:,} bytes, more than the {_EXTENDED_MAX:,} one may have")
                    pos = nxt
                    continue
                payload = span(data, size)
                if len(payload) < size:
                    raise _Cut("the archive ends inside an extended header")
                if flag == b"x":
                    if b"path=" in payload or b"size=" in payload:  # else only times and owners (webdataset's mtime)
                        records, wrong = _pax_records(payload)
                        pending.update(records)
                        bad.extend(wrong)
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
            if bad:  # the member is refused; the next header is where its size (pax, else ustar) puts it
                yield _Refused(pos if first is None else first, BAD_PAX_RECORD, "; ".join(bad), text)
                bad = []
                first = None
                pos = nxt
                continue
            kind = _KINDS[flag]
            if kind == "file" and text.endswith("/"):
                kind = "dir"
            if kind == "dir":
                text = text.rstrip("/")  # as tarfile names folders
            yield _Header(text, kind, data, size if kind == "file" else 0, link, pos if first is None else first)
            first = None
            pos = nxt


_PAX_SIZE = re.compile(rb"[0-9]{1,20}")


def _pax_records(payload: bytes) -> tuple[dict[str, str], list[str]]:
    """The ``"<length> <key>=<value>\\n"`` records of a pax extended header (POSIX.1-2001), and
    what is wrong with them: a record whose length does not fit, a ``size`` that is not a number
    of bytes, a ``path`` or ``linkpath`` that is not UTF-8 or holds a NUL (those are left out)."""
    out: dict[str, str] = {}
    bad: list[str] = []
    at = 0
    while at < len(payload):
        if payload[at] == 0 and not payload[at:].strip(b"\0"):
            break  # padding after the last record
        space = payload.find(b" ", at, at + 21)
        digits = payload[at:space] if space > at else b""
        if not digits.isdigit():
            bad.append(f"its pax header has a record with no length at byte {at}")
            break
        length, end = int(digits), at + int(digits)
        if length <= space - at + 2 or end > len(payload) or payload[end - 1:end] != b"\n":
            bad.append(f"its pax header has a record of length {length} at byte {at} that does not fit ({len(payload)} bytes)")
            break
        key, eq, value = payload[space + 1:end - 1].partition(b"=")
        at = end
        name = key.decode("utf-8", "replace")
        if not eq or not key:
            bad.append(f"its pax header has a record without key=value ({name[:40]!r})")
        elif name == "size":
            if _PAX_SIZE.fullmatch(value):
                out["size"] = value.decode("ascii")
            else:
                bad.append(f"its pax size record {value[:40].decode('utf-8', 'replace')!r} is not a number of bytes")
        elif name in ("path", "linkpath"):
            try:
                text = value.decode("utf-8")
            except UnicodeDecodeError:
                bad.append(f"its pax {name} record is not UTF-8")
                continue
            if "\0" in text:
                bad.append(f"its pax {name} record holds a NUL")
            else:
                out[name] = text
        else:
            out[name] = value.decode("utf-8", "surrogateescape")
    return out, bad


def _pax_problem(pax: Mapping[str, str]) -> str:
    """What tarfile's reading of a member's pax records let through (it takes a bad size as 0)."""
    size = pax.get("size")
    if size is not None and not _PAX_SIZE.fullmatch(size.encode("utf-8", "surrogateescape")):
        return f"its pax size record {size[:40]!r} is not a number of bytes"
    for key in ("path", "linkpath"):
        value = pax.get(key, "")
        if "\0" in value or any("\udc80" <= c <= "\udcff" for c in value):
            return f"its pax {key} record is not UTF-8 or holds a NUL"
    return ""


def _after_end(fh: BinaryIO, pos: int) -> None:
    """Where tarfile stopped (``pos``): the end-of-archive blocks or the end of the file, else
    raises what is there (tarfile ends silently at a header it cannot read, past the first)."""
    fh.seek(pos)
    block = fh.read(512)
    if not block or block == _ZERO_BLOCK:
        return
    if len(block) < 512:
        raise _Cut(f"the archive ends inside the header at byte {pos}")
    try:
        stored = _octal(block[148:156])
    except ValueError:
        stored = -1
    if stored not in (sum(block) - sum(block[148:156]) + 8 * 32, _signed_sum(block)):
        raise _Tail(pos, "bad header checksum")
    raise _Tail(pos, "a header tarfile cannot read")


def _tarfile_headers(full: str) -> Iterator[_Header | _Refused]:
    """The same as ``_fast_headers``, read by tarfile (every format it knows)."""
    with open_regular(full) as fh, tarfile.open(fileobj=fh, mode="r:") as tf:
        while True:
            try:
                info = tf.next()
            except (tarfile.ReadError, EOFError, OSError) as exc:
                raise _Cut(str(exc)) from None
            if info is None:
                _after_end(fh, tf.offset)
                return
            why = _pax_problem(info.pax_headers)
            if why:
                yield _Refused(info.offset, BAD_PAX_RECORD, why, info.name)
                continue
            kind = ("file" if info.isfile() else "dir" if info.isdir() else "symlink" if info.issym() else "hardlink" if info.islnk()
                    else "other")
            yield _Header(info.name, kind, info.offset_data, info.size if kind == "file" else 0, info.linkname, info.offset)


def tar_headers(full: str) -> Iterator[_Header | _Refused]:
    """Every member header of the tar at ``full``, and what could not be read (a member, or the
    archive's tail after a broken header): the fast reader, and tarfile for the archives it does
    not know (from the start, so nothing is yielded twice)."""
    got: list[_Header | _Refused] = []
    try:
        for h in _fast_headers(full):
            got.append(h)
    except _Tail as exc:
        yield from got
        yield _Refused(exc.offset, BAD_TAR_HEADER, exc.why, tail=True)
        return
    except _Cut:
        pass  # tarfile reads up to the cut and says where
    except (ValueError, UnicodeDecodeError):
        pass  # a form the fast reader does not know
    else:
        yield from got
        return
    try:
        yield from _tarfile_headers(full)
    except _Tail as exc:
        yield _Refused(exc.offset, BAD_TAR_HEADER, exc.why, tail=True)


def tar_entries(full: str, rel: str, class_key: str, scan: Scan, *, max_bytes: int | None = None) -> Iterator[TarEntry]:
    """The regular members of the tar at ``full`` (``rel`` under the root), in archive order.
    Refused, with the batch going on: links, devices, unsafe or repeated names, members over
    ``max_bytes``, members cut off by a truncated file; a compressed or non-tar file as a whole."""
    from . import DEFAULT_MAX_BYTES as limit  # read at call time, so a test may lower it

    max_bytes = max_bytes or limit
    try:
        kind = compression_of(full)
        if kind:
            scan.refuse(rel, class_key, COMPRESSED_ARCHIVE, compressed_refusal(rel, kind))
            return
        file_size = os.path.getsize(full)
        with open_regular(full) as fh:
            tarfile.open(fileobj=fh, mode="r:").close()
    except tarfile.ReadError as exc:
        scan.refuse(rel, class_key, NOT_AN_ARCHIVE, f"{full}: not a tar archive ({exc}); refused")
        return
    except OSError as exc:  # a fifo put in its place since the walk, or no permission to read it
        refuse_unopened(scan, rel, class_key, exc)
        return
    seen: dict[str, int] = {}
    read = 0  # members whose headers were read
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
        except OSError as exc:
            refuse_unopened(scan, rel, class_key, exc)
            return
        read += 1
        if isinstance(info, _Refused):
            if info.tail:
                scan.refuse(f"{rel}#tail", class_key, info.code,
                            f"{full}: the archive's tail after byte {info.offset} is unreadable ({info.why}); about "
                            f"{max(0, file_size - info.offset):,} bytes not read (the {read - 1} member header(s) before it "
                            "were read)")
                return
            shown = info.name.encode("unicode_escape").decode("ascii")
            shown = shown if len(shown) <= 120 else shown[:120] + "..."
            scan.refuse(f"{rel}#{info.offset}", class_key, info.code,
                        f"{full}: member {shown!r} (header at byte {info.offset}): {info.why}; refused")
            continue
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
