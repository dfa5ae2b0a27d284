"""Walking a source folder safely.

A source is ``ROOT/<class folder>/<image files>`` (files may sit in sub-folders of a class
folder). Nothing outside ``ROOT`` is ever read: symlinks that resolve outside it and relative
paths with ``..`` are refused, and refused entries are reported, not dropped silently.
"""
from __future__ import annotations

import functools
import os
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

# Refusal codes for entries that are never opened.
PATH_ESCAPES_ROOT = "path_escapes_root"
SYMLINKED_DIRECTORY = "symlinked_directory"
UNDECODABLE_NAME = "undecodable_name"
NOT_IN_CLASS_FOLDER = "not_in_class_folder"
NOT_A_REGULAR_FILE = "not_a_regular_file"
NAME_TOO_LONG = "name_too_long"

# The longest member path and class name a source may have: the database columns that hold them
# (curation/models/sources.py: Image.relative_path and Image.container, CandidateClass.folder).
# SQLite takes longer values, PostgreSQL refuses the insert; longer names are refused at scan time.
MAX_PATH_CHARS = 1024
MAX_CLASS_CHARS = 255


class UnsafePath(ValueError):
    """A path that would leave the source root."""


@dataclass(frozen=True)
class FileEntry:
    rel_path: str  # POSIX-style, relative to the root
    class_folder: str
    size: int
    mtime_ns: int


@dataclass(frozen=True)
class Refusal:
    rel_path: str
    class_folder: str
    code: str
    message: str


@dataclass
class ScanResult:
    root: Path
    class_folders: list[str] = field(default_factory=list)
    files: list[FileEntry] = field(default_factory=list)
    refused: list[Refusal] = field(default_factory=list)


def _utf8_or_none(name: str) -> str | None:
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:  # os.fsdecode left surrogates: the name is not valid UTF-8
        return None
    return name


def _inside(root_real: str, candidate_real: str) -> bool:
    return candidate_real == root_real or candidate_real.startswith(root_real.rstrip(os.sep) + os.sep)


def scan_source(root: str | os.PathLike) -> ScanResult:
    """List every file under ``root`` in a stable order, refusing what must not be read."""
    root = Path(root)
    if not root.is_dir():
        raise FileNotFoundError(f"{root}: not a folder (a source is ROOT/<class folder>/<image files>)")
    root_real = os.path.realpath(root)
    result = ScanResult(root=root)

    def refuse(rel: str, cls: str, code: str, message: str) -> None:
        result.refused.append(Refusal(rel, cls, code, message))

    def walk(dir_abs: str, rel_parts: tuple[str, ...], class_folder: str) -> None:
        try:
            entries = sorted(os.scandir(dir_abs), key=lambda e: e.name)
        except OSError as exc:
            refuse("/".join(rel_parts) or ".", class_folder, NOT_A_REGULAR_FILE, f"{dir_abs}: cannot list the folder ({exc.strerror})")
            return
        for entry in entries:
            name = _utf8_or_none(entry.name)
            shown = entry.name.encode("utf-8", "backslashreplace").decode("utf-8")
            rel = "/".join(rel_parts + (name or shown,))
            cls = class_folder or (name or shown)
            if name is None:
                refuse(rel, class_folder, UNDECODABLE_NAME, f"{os.path.join(dir_abs, shown)}: the file name is not valid UTF-8; rename it")
                continue
            full = os.path.join(dir_abs, name)
            if entry.is_symlink():
                target = os.path.realpath(full)
                if not _inside(root_real, target):
                    refuse(rel, class_folder, PATH_ESCAPES_ROOT, f"{full}: a symlink to {target}, outside the source root {root}; refused")
                    continue
                if os.path.isdir(target):
                    refuse(rel, class_folder, SYMLINKED_DIRECTORY, f"{full}: a symlinked folder; not followed (move the files into the source instead)")
                    continue
            if entry.is_dir(follow_symlinks=False):
                if not rel_parts:
                    result.class_folders.append(name)
                walk(full, rel_parts + (name,), cls)
                continue
            if entry.is_symlink() and not os.path.exists(full):
                refuse(rel, class_folder, NOT_A_REGULAR_FILE, f"{full}: a dangling symlink (its target {os.readlink(full)!r} does not "
                                                              "exist); refused")
                continue
            if not entry.is_file(follow_symlinks=True):
                refuse(rel, class_folder, NOT_A_REGULAR_FILE, f"{full}: not a regular file (device, socket or fifo); refused")
                continue
            if not rel_parts:
                refuse(rel, "", NOT_IN_CLASS_FOLDER, f"{full}: files must sit inside a class folder (ROOT/<class>/<file>)")
                continue
            st = entry.stat(follow_symlinks=True)
            result.files.append(FileEntry(rel, class_folder, st.st_size, st.st_mtime_ns))

    walk(str(root), (), "")
    return result


@functools.lru_cache(maxsize=64)
def root_real(root: str) -> str:
    """A source root's real path, resolved once per process (every read checks its file against it)."""
    return os.path.realpath(root)


def safe_join(root: str | os.PathLike, rel_path: str, *, root_real: str | None = None) -> Path:
    """``root/rel_path``, refusing absolute paths, ``..`` and symlinks that resolve outside root.
    ``root_real`` (the root's realpath) saves resolving the root again for every file."""
    pure = PurePosixPath(rel_path)
    if pure.is_absolute() or ".." in pure.parts or not pure.parts or "\x00" in rel_path:
        raise UnsafePath(f"{rel_path!r}: not a plain relative path inside the source")
    full = Path(root, *pure.parts)
    if not _inside(root_real or os.path.realpath(root), os.path.realpath(full)):
        raise UnsafePath(f"{full}: resolves to {os.path.realpath(full)}, outside the source root {root}")
    return full



class SafeJoiner:
    """``safe_join`` for many files under one root: each folder's real path is resolved once,
    and a file costs one ``lstat`` (its own real path is resolved only when it is a symlink).
    The same refusals as ``safe_join``."""

    def __init__(self, root: str | os.PathLike):
        self.root = str(root)
        self.root_real = os.path.realpath(self.root)
        self._dirs: dict[tuple[str, ...], bool] = {}

    def __call__(self, rel_path: str) -> str:
        parts = tuple(p for p in rel_path.split("/") if p not in ("", "."))
        if not parts or rel_path.startswith("/") or ".." in parts or "\x00" in rel_path:
            raise UnsafePath(f"{rel_path!r}: not a plain relative path inside the source")
        full = os.path.join(self.root, *parts)
        folder = parts[:-1]
        ok = self._dirs.get(folder)
        if ok is None:
            ok = self._dirs[folder] = _inside(self.root_real, os.path.realpath(os.path.join(self.root, *folder)))
        if not ok or (os.path.islink(full) and not _inside(self.root_real, os.path.realpath(full))):
            raise UnsafePath(f"{full}: resolves to {os.path.realpath(full)}, outside the source root {self.root}")
        return full

# --- class folders -> WordNet ------------------------------------------------------------

def scan_class_folders(root: str | os.PathLike) -> list[str]:
    """The class folders directly under ``root`` (not symlinks, UTF-8 names), sorted."""
    out = []
    for entry in os.scandir(os.fspath(root)):
        if entry.is_dir(follow_symlinks=False) and _utf8_or_none(entry.name) is not None:
            out.append(entry.name)
    return sorted(out)


def list_files(paths: list[str | os.PathLike]) -> tuple[list[str], list[tuple[str, str]]]:
    """Files named on a command line, folders walked recursively in sorted order (hidden
    entries skipped, symlinked folders not followed). Returns (files, problems) where a
    problem is (path, reason): missing paths and symlinks to folders."""
    files, problems = [], []
    for p in paths:
        p = str(p)
        if os.path.isfile(p):
            files.append(p)
        elif os.path.isdir(p):
            for dirpath, dirnames, filenames in os.walk(p):
                dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
                for d in dirnames:
                    if os.path.islink(os.path.join(dirpath, d)):
                        problems.append((os.path.join(dirpath, d), "a symlinked folder; not followed"))
                files.extend(os.path.join(dirpath, f) for f in sorted(filenames) if not f.startswith("."))
        else:
            problems.append((p, "no such file or folder"))
    return files, problems
