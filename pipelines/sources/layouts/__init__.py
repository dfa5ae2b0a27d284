"""Source layouts: one registered class per form a candidate pool is shipped in.

A layout enumerates a source's members (``scan``: a stable member path, its class key, its size
and where its bytes lie) and reads one member's bytes (``read``). Every reader of image bytes in
the toolkit (ingest, extraction, renditions, the pixel duplicate check, exports, unit tests,
covariate shift) goes through ``read_member`` with a ``MemberRef``, so an archive is read in
place: a tar member by the data offset recorded at ingest, a Parquet row by its row group.

The ``add_source --layout`` choices, the admin's Sources form and docs/sources.md come from this
registry. Adding a layout is one file in this package::

    @register_source_layout
    class Zip(SourceLayout):
        name = "zip"
        description = "ROOT/<class>.zip, read by member offset"

        def scan(self, root, options, *, wanted=None):
            ...
        def read(self, ref):
            ...

Nothing outside the root is read: containers are found by a walk that refuses symlinks leaving
the root, and a member's name is only ever a label (bytes are read by offset or row, never by
joining an archive's member name onto a folder).
"""
from __future__ import annotations

import hashlib
import importlib
import os
import pkgutil
import stat
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, BinaryIO, ClassVar

from pipelines.sources.walk import (
    MAX_CLASS_CHARS,
    MAX_PATH_CHARS,
    NAME_TOO_LONG,
    NOT_A_REGULAR_FILE,
    PATH_ESCAPES_ROOT,
    Refusal,
    UnsafePath,
    root_real,
    safe_join,
)

DEFAULT_MAX_BYTES = 512 * 1024 * 1024  # one member; the same limit as one file (pipelines.sources.images)

# Refusal codes of archive members and containers (stored on Image.error_code).
UNSAFE_MEMBER_NAME = "unsafe_member_name"
LINK_MEMBER = "link_member"
DUPLICATE_MEMBER = "duplicate_member"
TRUNCATED_ARCHIVE = "truncated_archive"
COMPRESSED_ARCHIVE = "compressed_archive"
NOT_AN_ARCHIVE = "not_an_archive"
FOREIGN_SCHEMA = "foreign_schema"
NO_CLASS = "no_class"
LISTED_NOT_FOUND = "listed_not_found"
FILE_TOO_LARGE = "file_too_large"
BAD_TAR_HEADER = "bad_tar_header"
BAD_PAX_RECORD = "bad_pax_record"
UNREADABLE = "unreadable"  # as pipelines.sources.images names a file it cannot read


class LayoutError(ValueError):
    """A layout cannot be used as asked (unknown name, bad option, unreadable list); the message
    names the input and the fix."""


class MemberUnreadable(OSError):
    """A member's bytes cannot be had: its container vanished or shrank, or its path left the root."""


class NotRegularFile(MemberUnreadable):
    """A container (or a list) that is a fifo, socket or device: never opened, since reading one
    could wait forever."""


class MemberOutsideRoot(MemberUnreadable):
    """A member's path (or its archive's) would leave the source root: never read."""


class MemberChanged(OSError):
    """A member's bytes no longer match the SHA-256 recorded at ingest: refused, never shown or
    exported."""


@dataclass(frozen=True)
class Member:
    """One image of a source as a layout finds it."""

    path: str  # stable id in the source (Image.relative_path): 'n01440764.tar/n01440764_10026.JPEG'
    class_key: str  # the class as the layout names it: folder, tar name, json field, ClassLabel name
    size: int  # bytes, or -1 where the layout only knows it once read (Parquet)
    mtime_ns: int  # of the file that holds it (its container for archives): change detection
    container: str = ""  # the archive holding it, relative to the root ('' for a plain file)
    offset: int = -1  # tar: the member's data offset; Parquet: the row in the file; -1: a plain file


@dataclass
class Scan:
    class_keys: list[str] = field(default_factory=list)
    members: list[Member] = field(default_factory=list)
    refused: list[Refusal] = field(default_factory=list)
    containers: int = 0  # archives read (0 for folders)

    def refuse(self, rel: str, class_key: str, code: str, message: str) -> None:
        self.refused.append(Refusal(rel, class_key, code, message))

    def finish(self) -> Scan:
        """Sorts the class keys, after refusing the members whose path or class is longer than
        the database holds (``name_too_long``, whatever the layout)."""
        if any(len(m.path) > MAX_PATH_CHARS or len(m.class_key) > MAX_CLASS_CHARS for m in self.members):
            kept = []
            for m in self.members:
                if len(m.path) > MAX_PATH_CHARS:
                    self.refuse(fitted_path(m.path), m.class_key, NAME_TOO_LONG,
                                f"{_shown(m.path)}: the member path has {len(m.path):,} characters, more than the {MAX_PATH_CHARS:,} "
                                "a member path may have (the database column that holds it); refused: give it a shorter name "
                                "(in its archive) or move it to a shallower folder")
                elif len(m.class_key) > MAX_CLASS_CHARS:
                    self.refuse(m.path, "", NAME_TOO_LONG,
                                f"{m.path}: its class {_shown(m.class_key)} has {len(m.class_key):,} characters, more than the "
                                f"{MAX_CLASS_CHARS:,} a class name may have; refused: give the class a shorter name")
                else:
                    kept.append(m)
            self.members = kept
        for i, r in enumerate(self.refused):  # a refusal's own row must fit too (a listed path, a member's #offset)
            if len(r.rel_path) > MAX_PATH_CHARS or len(r.class_folder) > MAX_CLASS_CHARS:
                cls = r.class_folder if len(r.class_folder) <= MAX_CLASS_CHARS else ""
                self.refused[i] = Refusal(fitted_path(r.rel_path), cls, r.code, r.message)
        keys = {m.class_key for m in self.members} | {r.class_folder for r in self.refused if r.class_folder}
        self.class_keys = sorted(keys)
        return self


def fitted_path(path: str) -> str:
    """``path`` as a row of the database can hold it: itself when it fits, else its first
    characters and a digest of the whole (the same path gives the same row on every scan)."""
    if len(path) <= MAX_PATH_CHARS:
        return path
    digest = hashlib.sha256(path.encode("utf-8", "surrogateescape")).hexdigest()[:16]
    return f"{path[:MAX_PATH_CHARS - 17]}#{digest}"


def _shown(name: str, keep: int = 80) -> str:
    return repr(name if len(name) <= keep else name[:keep] + "...")


@dataclass(frozen=True)
class MemberRef:
    """Everything a reader needs to get one member's bytes (picklable: DataLoader workers and
    thread pools get these, not open files). ``sha256``, when set, is checked on every read."""

    layout: str
    root: str
    path: str
    container: str = ""
    offset: int = -1
    size: int = -1
    sha256: str = ""
    column: str = ""  # Parquet: the column holding the image (the source's image_column option)

    def __str__(self) -> str:  # what messages show: the archive and the member
        if self.container:
            return f"{self.root}/{self.container}::{self.path[len(self.container) + 1:]}"
        return f"{self.root}/{self.path}"

    @property
    def name(self) -> str:
        """The member's own file name (the last part of its path)."""
        return PurePosixPath(self.path).name

    def read(self, *, verify: bool = True) -> bytes:
        return read_member(self, verify=verify)


class SourceLayout:
    name: ClassVar[str] = ""
    description: ClassVar[str] = ""
    reads_in_place: ClassVar[bool] = True  # False: plain files (nothing to read in place)
    # True: a member is the bytes [offset, offset + size) of its container file (tars), so members
    # next to each other can be read together (``prefetch_members``)
    spans: ClassVar[bool] = False
    # option name -> help; add_source's flags and the admin form offer these
    options: ClassVar[dict[str, str]] = {}

    def check_options(self, options: Mapping[str, Any]) -> None:
        unknown = set(options) - set(self.options) - {"list"}
        if unknown:
            raise LayoutError(f"layout {self.name}: unknown option(s) {', '.join(sorted(unknown))} "
                              f"(it takes {', '.join(sorted(self.options)) or 'none'})")

    def scan(self, root: Path, options: Mapping[str, Any], *, wanted: Mapping[str, str] | None = None) -> Scan:
        """Every member under ``root``, in a stable order, and what was refused with its reason.
        ``wanted``: only these member paths (a published list), each mapped to the class key the
        list gives it ('' to keep the layout's own); the layout reads only the containers they name."""
        raise NotImplementedError

    def read(self, ref: MemberRef) -> bytes:
        raise NotImplementedError

    def read_many(self, refs: Sequence[tuple[int, MemberRef]]) -> dict[int, bytes | OSError]:
        """Several members at once, by their position: a layout that can read a batch cheaper
        than one by one says so here (Parquet: a row group's rows in one take). {} = read each."""
        return {}

    def listed_path(self, entry: str) -> str:
        """The member path a published list's entry names (a list path is relative to the root
        as the benchmark shipped it: ImageNet-OOD's ``<wnid>/<wnid>_<n>.JPEG``)."""
        return entry


SOURCE_LAYOUTS: dict[str, SourceLayout] = {}  # name -> layout, in registration order
DEFAULT_LAYOUT = "folder"


def register_source_layout(cls: type[SourceLayout]) -> type[SourceLayout]:
    if not cls.name or cls.name in SOURCE_LAYOUTS:
        raise ValueError(f"source layout name {cls.name!r} is empty or registered twice")
    SOURCE_LAYOUTS[cls.name] = cls()
    return cls


def source_layout(name: str) -> SourceLayout:
    try:
        return SOURCE_LAYOUTS[name or DEFAULT_LAYOUT]
    except KeyError:
        raise LayoutError(f"--layout {name}: no such source layout (use one of {', '.join(SOURCE_LAYOUTS)})") from None


def read_member(ref: MemberRef, *, verify: bool = True) -> bytes:
    """One member's bytes, checked against the SHA-256 recorded at ingest when ``verify``."""
    data = source_layout(ref.layout).read(ref)
    if verify and ref.sha256:
        got = hashlib.sha256(data).hexdigest()
        if got != ref.sha256:
            raise MemberChanged(f"{ref}: its bytes changed since ingest (sha256 {got[:12]}..., ingest recorded "
                                f"{ref.sha256[:12]}...); refused: re-run add_source to take the new bytes in")
    return data


SPAN_GAP = 64 * 1024  # members this close are read in one go (a tar's headers and small metadata between them)
SPAN_MAX = 16 * 1024 * 1024  # the most one read takes


def prefetch_members(refs: Sequence[MemberRef]) -> dict[int, bytes | OSError]:
    """The bytes of the members whose layout keeps them as spans of a container file (tars),
    read with one open per container and one read per run of neighbouring members (a shard's
    500 small JPEGs: one read instead of 500 opens), and of those whose layout reads a batch
    cheaper (``SourceLayout.read_many``: Parquet's rows of one row group at once), by position
    in ``refs``; a member that cannot be read this way maps to the error reading it alone gives.
    Members of other layouts (folders) are left out (read them with ``read_member``, which a
    thread pool can overlap). Not checked against the ingest hash (``read_member(verify=True)`` is)."""
    out: dict[int, bytes | OSError] = {}
    groups: dict[tuple[str, str], list[int]] = {}
    batched: dict[str, list[tuple[int, MemberRef]]] = {}
    for i, ref in enumerate(refs):
        if ref.container and ref.offset >= 0 and 0 <= ref.size <= SPAN_MAX and source_layout(ref.layout).spans:
            groups.setdefault((str(ref.root), ref.container), []).append(i)
        elif type(source_layout(ref.layout)).read_many is not SourceLayout.read_many:
            batched.setdefault(ref.layout, []).append((i, ref))
    for name, items in batched.items():
        out.update(source_layout(name).read_many(items))
    for idx in groups.values():
        idx.sort(key=lambda i: refs[i].offset)
        try:
            path = container_file(refs[idx[0]])
            fh = open_regular(path)
        except OSError:
            for i in idx:
                out[i] = _alone(refs[i])
            continue
        with fh:
            run: list[int] = []
            for nxt in [*idx, None]:
                r = refs[nxt] if nxt is not None else None
                if run and (r is None or r.offset > refs[run[-1]].offset + refs[run[-1]].size + SPAN_GAP
                            or r.offset + r.size - refs[run[0]].offset > SPAN_MAX):
                    start = refs[run[0]].offset
                    fh.seek(start)
                    block = fh.read(max(refs[j].offset + refs[j].size for j in run) - start)
                    for j in run:
                        a = refs[j].offset - start
                        piece = block[a:a + refs[j].size]
                        out[j] = piece if len(piece) == refs[j].size else _alone(refs[j])
                    run = []
                if nxt is not None:
                    run.append(nxt)
    return out


def _alone(ref: MemberRef) -> bytes | OSError:
    try:
        return read_member(ref, verify=False)
    except OSError as exc:
        return exc


def read_bytes(src: MemberRef | str | os.PathLike) -> bytes:
    """The bytes of a member or of a plain file path (tests and tools still hand paths)."""
    if isinstance(src, MemberRef):
        return read_member(src)
    with open(src, "rb") as fh:
        return fh.read()


def openable(src: Any) -> Any:
    """What ``PIL.Image.open`` takes for ``src``: a member's checked bytes, or the path itself."""
    if isinstance(src, MemberRef):
        import io

        return io.BytesIO(read_member(src))
    return src


# --- helpers the layouts share ------------------------------------------------------------

_COMPRESSED_MAGIC = ((b"\x1f\x8b", "gzip"), (b"BZh", "bzip2"), (b"\xfd7zXZ\x00", "xz"), (b"\x28\xb5\x2f\xfd", "zstd"))


def _file_kind(mode: int) -> str:
    return ("a fifo" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode) else "a character device" if stat.S_ISCHR(mode)
            else "a block device" if stat.S_ISBLK(mode) else "a folder" if stat.S_ISDIR(mode) else "not a plain file")


def not_regular(path: str | os.PathLike, mode: int) -> str:
    """The refusal message of a file (a container, a list) that is not a regular file."""
    return (f"{os.fspath(path)}: not a regular file ({_file_kind(mode)}); only regular files are read (reading a fifo or "
            "device could wait forever): refused, put the file itself in its place")


def _nonblocking(path: str, flags: int) -> int:
    return os.open(path, flags | getattr(os, "O_NONBLOCK", 0))


def open_regular(path: str | os.PathLike) -> BinaryIO:
    """``path`` opened for reading when it is a regular file, else ``NotRegularFile``: checked
    with stat before the open (a device is never opened), opened without blocking (a fifo put in
    its place meanwhile cannot make the open wait) and checked again on the open file."""
    st = os.stat(path)
    if not stat.S_ISREG(st.st_mode):
        raise NotRegularFile(not_regular(path, st.st_mode))
    fh = open(path, "rb", opener=_nonblocking)
    try:
        st = os.fstat(fh.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise NotRegularFile(not_regular(path, st.st_mode))
        os.set_blocking(fh.fileno(), True)
    except BaseException:
        fh.close()
        raise
    return fh


def compression_of(path: str | os.PathLike) -> str:
    """'gzip', 'bzip2', 'xz' or 'zstd' when the file starts with that compressor's magic, else ''.
    Raises ``NotRegularFile`` for a fifo or device (``open_regular``)."""
    with open_regular(path) as fh:
        head = fh.read(6)
    return next((kind for magic, kind in _COMPRESSED_MAGIC if head.startswith(magic)), "")


def compressed_refusal(rel: str, kind: str) -> str:
    plain = rel.removesuffix(".gz").removesuffix(".bz2").removesuffix(".xz").removesuffix(".zst")
    if not plain.endswith(".tar"):
        plain = PurePosixPath(plain).stem + ".tar"
    return (f"{rel}: a {kind}-compressed archive cannot be read at random (every read would decompress it from the "
            f"start); decompress the outer layer once (e.g. '{_unpack_hint(kind)} {rel}' gives {plain}) and run add_source again")


def _unpack_hint(kind: str) -> str:
    return {"gzip": "gunzip -k", "bzip2": "bunzip2 -k", "xz": "unxz -k", "zstd": "unzstd"}.get(kind, "decompress")


def walk_containers(root: Path, suffixes: tuple[str, ...], scan: Scan, *, also: tuple[str, ...] = ()) -> Iterator[tuple[str, str, os.stat_result]]:
    """(relative path, absolute path, stat) of each file under ``root`` whose name ends with one of
    ``suffixes``, sorted, recursively; symlinks leaving the root, and what is not a regular file (a
    fifo named ``x.tar``), are refused into ``scan``. Files ending with one of ``also`` (compressed
    archives) are yielded too, for the layout to refuse."""
    root_real = os.path.realpath(root)
    found: list[tuple[str, str]] = []
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        dirnames.sort()
        for name in sorted(filenames):
            if name.startswith(".") or not name.endswith(suffixes + also):
                continue
            full = os.path.join(dirpath, name)
            rel = os.path.relpath(full, root).replace(os.sep, "/")
            try:
                rel.encode("utf-8")
            except UnicodeEncodeError:
                continue
            if os.path.islink(full):
                target = os.path.realpath(full)
                if not (target == root_real or target.startswith(root_real.rstrip(os.sep) + os.sep)):
                    scan.refuse(rel, "", PATH_ESCAPES_ROOT, f"{full}: a symlink to {target}, outside the source root {root}; refused")
                    continue
            found.append((rel, full))
    for rel, full in sorted(found):
        try:
            st = os.stat(full)
        except OSError as exc:
            scan.refuse(rel, "", NOT_A_REGULAR_FILE, f"{full}: cannot read it ({exc.strerror or exc})")
            continue
        if not stat.S_ISREG(st.st_mode):
            scan.refuse(rel, "", NOT_A_REGULAR_FILE, not_regular(full, st.st_mode))
            continue
        yield rel, full, st


def refuse_unopened(scan: Scan, rel: str, class_key: str, exc: OSError) -> None:
    """A container that could not be opened, refused into ``scan`` with its reason code."""
    if isinstance(exc, NotRegularFile):
        scan.refuse(rel, class_key, NOT_A_REGULAR_FILE, str(exc))
    else:
        scan.refuse(rel, class_key, UNREADABLE, f"{exc.filename or rel}: cannot read it ({exc.strerror or exc}); refused")


def container_file(ref: MemberRef) -> Path:
    """The container's absolute path, refused when it would leave the root."""
    try:
        return safe_join(ref.root, ref.container, root_real=root_real(ref.root))
    except UnsafePath as exc:
        raise MemberOutsideRoot(str(exc)) from None


def read_span(path: Path, offset: int, size: int, ref: MemberRef) -> bytes:
    """``size`` bytes at ``offset`` of ``path``: one seek and one read, no temporary copy."""
    try:
        with open_regular(path) as fh:
            fh.seek(offset)
            data = fh.read(size)
    except NotRegularFile as exc:
        raise NotRegularFile(f"{ref}: {exc}") from None
    except FileNotFoundError:
        raise MemberUnreadable(f"{ref}: its archive {path} no longer exists; re-run add_source") from None
    if len(data) != size:
        raise MemberUnreadable(f"{ref}: its archive ends {size - len(data)} bytes short of the member (truncated or "
                               "rewritten since ingest); re-run add_source")
    return data


def _load_all() -> None:
    order = ("folder", "class_tars", "wds", "parquet")
    names = [m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_")]
    for mod in sorted(names, key=lambda m: (order.index(m) if m in order else len(order), m)):
        importlib.import_module(f"{__name__}.{mod}")


_load_all()
