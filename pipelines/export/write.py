"""Writing, checking and streaming exports (no Django and nothing heavy: the web process streams them).

An export is a folder: ``manifest.json`` (provenance, counts, and the sha256 of every other
file), ``decisions.csv`` and one sub-folder per layout, each layout one file in
``pipelines/export/layouts/`` (NINCO's readable class folders with metadata.csv, ImageNet-OOD's wnid
folders with file_list.txt, OpenOOD's images/<wnid> with an imglist.txt of ``path -1`` lines).

Image files are hard links to the source files where the filesystem allows (same device, links
permitted) and byte copies otherwise; every layout after the first links to the export's own
first copy. Each file's sha256 is computed from the bytes placed and compared with the one
recorded at ingest: a file that changed since is left out and reported, never exported
silently. The folder is written under a temporary name and renamed into place at the end, so
an export is either complete or absent; an existing export folder is never written into.
"""
from __future__ import annotations

import errno
import gzip
import hashlib
import json
import os
import shutil
import tarfile
import zipfile
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import IO, Any, Protocol, cast

from pipelines.export.diff import DIFF_COLUMNS, DIFF_FILE, PreviousVersion, export_diff, reason_kind
from pipelines.export.layouts import LAYOUTS, PlanContext, write_csv
from pipelines.export.layouts.ninco import readable_folder
from pipelines.names import PathOutsideRoot, inside
from pipelines.sources.images import sha256_bytes, sha256_file
from pipelines.sources.layouts import MemberRef, read_member

__all__ = ["LAYOUTS", "readable_folder", "write_csv"]  # re-exported: the layouts live in pipelines/export/layouts/
MANIFEST = "manifest.json"
MANIFEST_FORMAT = "oodc-export/1"
BLOCK = 1 << 20


class ExportError(RuntimeError):
    pass


@dataclass(frozen=True)
class ExportItem:
    image_id: int
    src: Any  # the source file's absolute path, or a pipelines.sources.layouts.MemberRef for an archive member
    sha256: str  # as recorded at ingest
    wnid: str
    class_name: str  # readable class name (NINCO folder)
    file_name: str  # the original file name
    source: str = ""  # the source's name and the file's path in it (provenance columns of table layouts)
    source_path: str = ""
    synset: str = ""  # WordNet's name of the class (counts per class)


@dataclass
class Placed:
    """What happened to one item: its files in the export, or why it was left out."""

    item: ExportItem
    files: dict[str, str] = field(default_factory=dict)  # layout -> path relative to the export
    method: str = ""  # link | copy
    problem: str = ""


def listable_name(name: str, layout: str) -> str:
    """A file name that the layout's line-based listings can hold (``Layout.listable``)."""
    return LAYOUTS[layout].listable(name)


def plan_paths(items: Sequence[ExportItem], layouts: Sequence[str], *, name: str = "") -> dict[int, dict[str, str]]:
    """Relative path of every item in every layout. Two classes that would share a readable
    folder get their wnid appended; two files that would share a name in one folder get the
    image id appended (the original name stays in decisions.csv). ``name`` is the export's name
    (OpenOOD's layout names its set after it)."""
    unknown = [x for x in layouts if x not in LAYOUTS]
    if unknown or not layouts:
        raise ExportError(f"unknown layout(s) {', '.join(unknown) or '(none given)'}; choose from {', '.join(LAYOUTS)}")
    folders_by_name: dict[str, set[str]] = {}
    for it in items:
        folders_by_name.setdefault(readable_folder(it.class_name), set()).add(it.wnid)
    ctx = PlanContext(folders_by_name, name=name)
    out: dict[int, dict[str, str]] = {it.image_id: {} for it in items}
    for layout in layouts:
        if not LAYOUTS[layout].places_files:
            continue
        taken: set[str] = set()
        for it in sorted(items, key=lambda i: (i.wnid, i.file_name, i.image_id)):
            base = LAYOUTS[layout].folder(it, ctx)
            name = listable_name(PurePosixPath(it.file_name).name or f"{it.image_id}", layout)
            rel = f"{base}/{name}"
            if rel.lower() in taken:  # case-insensitive filesystems too
                p = PurePosixPath(name)
                rel = f"{base}/{p.stem}__{it.image_id}{p.suffix}"
            taken.add(rel.lower())
            out[it.image_id][layout] = rel
    return out


def _copy_hashing(src: Any, dst: Path) -> str:
    if isinstance(src, MemberRef):  # an archive member: its bytes, read in place, written out
        data = read_member(src, verify=False)  # the caller compares the digest with ingest's, naming both
        with open(dst, "xb") as fo:
            fo.write(data)
        return hashlib.sha256(data).hexdigest()
    h = hashlib.sha256()
    with open(src, "rb") as fi, open(dst, "xb") as fo:
        for block in iter(lambda: fi.read(BLOCK), b""):
            h.update(block)
            fo.write(block)
    return h.hexdigest()


def place(src: Any, dst: Path, *, link: bool) -> tuple[str, str]:
    """Put ``src`` (a path, or a source member) at ``dst``: a hard link when ``link`` and the
    filesystem allow, else a copy. Returns (method, sha256 of the bytes now at ``dst``)."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    if link and not isinstance(src, MemberRef):
        try:
            os.link(src, dst)
            return "link", sha256_file(dst)
        except OSError as exc:
            if exc.errno not in (errno.EXDEV, errno.EPERM, errno.EMLINK, errno.ENOTSUP, errno.EACCES):
                raise
    return "copy", _copy_hashing(src, dst)


def place_items(root: Path, items: Sequence[ExportItem], paths: dict[int, dict[str, str]], *, link: bool = True,
                progress: Callable[[int], None] | None = None) -> list[Placed]:
    """Place every item's file(s) under ``root`` (see ``plan_paths``); never raises for one bad
    file: it is reported on its ``Placed`` and left out."""
    placed = []
    for it in items:
        p = Placed(item=it)
        targets = paths[it.image_id]
        first: Path | None = None
        try:
            if not targets:  # only table layouts: the bytes are read from the source later, checked here first
                digest = sha256_bytes(read_member(it.src, verify=False)) if isinstance(it.src, MemberRef) else sha256_file(it.src)
                if digest != it.sha256:
                    p.problem = f"changed_since_ingest: {it.src} has sha256 {digest[:12]}..., ingest recorded {it.sha256[:12]}...; re-ingest the source"
                else:
                    p.method = "read"
            for layout, rel in targets.items():
                dst = inside(root, rel)  # rel is built from sanitised parts; this is the last word
                if first is None:
                    p.method, digest = place(it.src, dst, link=link)
                    if digest != it.sha256:
                        dst.unlink()
                        p.problem = f"changed_since_ingest: {it.src} has sha256 {digest[:12]}..., ingest recorded {it.sha256[:12]}...; re-ingest the source"
                        break
                    first = dst
                else:
                    place(str(first), dst, link=True)
                p.files[layout] = rel
        except PathOutsideRoot as exc:
            p.problem = f"unsafe_path: {exc}"
        except FileNotFoundError:
            p.problem = f"missing: {it.src} no longer exists; re-ingest the source"
        except OSError as exc:
            p.problem = f"unreadable: {it.src}: {exc.strerror or exc}"
        if p.problem:
            for rel in p.files.values():
                (root / rel).unlink(missing_ok=True)
            p.files = {}
        placed.append(p)
        if progress:
            progress(1)
    return placed


@dataclass(frozen=True)
class ClassDifficulty:
    """An OOD class's place in an easy/hard sub-split (pipelines.classes.semantic.difficulty_split)."""

    similarity: float
    closest_id_wnid: str
    closest_id_name: str
    path_distance: int
    subsplit: str  # easy | hard


DIFFICULTY_COLUMNS = ["wnid", "class_name", "semantic_similarity", "closest_id_wnid", "closest_id_name", "path_distance", "difficulty", "images"]


def write_layout_lists(root: Path, placed: Sequence[Placed], layouts: Sequence[str],
                       difficulty: dict[str, ClassDifficulty] | None = None) -> dict[str, dict[int, str]]:
    """The per-layout listings: NINCO's metadata.csv, ImageNet-OOD's file list, OpenOOD's imglist.
    With ``difficulty`` (wnid -> its sub-split), each listing also comes once per sub-split
    (``file_list_hard.txt``, ``imglist_easy.txt``...), NINCO's metadata.csv gains the similarity
    columns, and ``difficulty.csv`` lists the classes."""
    first = next((x for x in layouts if LAYOUTS[x].places_files), None)
    ok = sorted((p for p in placed if not p.problem),
                key=lambda p: (p.item.wnid, p.files.get(first, "") if first else p.item.file_name, p.item.image_id))
    subsplits = sorted({d.subsplit for d in difficulty.values()}) if difficulty else []

    def of(sub: str) -> list[Placed]:
        return [p for p in ok if difficulty and p.item.wnid in difficulty and difficulty[p.item.wnid].subsplit == sub]

    rows: dict[str, dict[int, str]] = {}  # layout -> image id -> where its row is (layouts without files of their own)
    for layout in layouts:
        rows[layout] = LAYOUTS[layout].write_lists(root, ok, {sub: of(sub) for sub in subsplits}, difficulty) or {}
    if difficulty:
        per_class: dict[str, list[Placed]] = {}
        for p in ok:
            if p.item.wnid in difficulty:
                per_class.setdefault(p.item.wnid, []).append(p)
        write_csv(root / "difficulty.csv", DIFFICULTY_COLUMNS,
                  ([w, ps[0].item.class_name, f"{difficulty[w].similarity:.4f}", difficulty[w].closest_id_wnid,
                    difficulty[w].closest_id_name, difficulty[w].path_distance, difficulty[w].subsplit, len(ps)]
                   for w, ps in sorted(per_class.items(), key=lambda kv: (-difficulty[kv[0]].similarity, kv[0]))))
    return rows


def hash_tree(root: Path, *, known: dict[str, str] | None = None) -> dict[str, str]:
    """sha256 of every regular file under ``root`` but the manifest (POSIX relative paths,
    sorted); ``known`` digests are trusted instead of re-reading those files."""
    known = known or {}
    return {rel: known.get(rel) or sha256_file(root / rel) for rel in sorted(hash_tree_names(root))}


def write_readme(root: Path, lines: Sequence[str]) -> None:
    """``README.md``: what a reader of the export should know first (a certificate's sentence)."""
    with open(root / "README.md", "x", encoding="utf-8") as fh:
        fh.write("\n\n".join(lines) + "\n")


def write_datasheet(root: Path, facts: dict) -> None:
    """``README.md``: the export's datasheet with a Hugging Face dataset-card header
    (pipelines.export.datasheet), rendered from the recorded ``facts``."""
    from pipelines.export.datasheet import render

    with open(root / "README.md", "x", encoding="utf-8") as fh:
        fh.write(render(facts))


def write_manifest(root: Path, manifest: dict) -> str:
    """Write ``manifest.json`` (sorted keys, UTF-8) and return its own sha256."""
    data = json.dumps(manifest, indent=2, sort_keys=True, ensure_ascii=False).encode("utf-8") + b"\n"
    with open(root / MANIFEST, "xb") as fh:
        fh.write(data)
    return hashlib.sha256(data).hexdigest()


def finish(tmp: Path, final: Path) -> None:
    """Move a completed temporary export folder into place; never over an existing one."""
    if final.exists():
        raise ExportError(f"{final} already exists; exports are never rewritten (a new export gets a new version)")
    final.parent.mkdir(parents=True, exist_ok=True)
    os.rename(tmp, final)


def clear_partial(tmp: Path) -> None:
    if tmp.exists():
        shutil.rmtree(tmp)


# -- the recipe --------------------------------------------------------------------------------

DECISIONS = "decisions.csv"


class ExportHooks(Protocol):
    """What the caller knows that the writer does not (the database's part of an export)."""

    def difficulty(self, good: Sequence[Placed]) -> tuple[dict[str, ClassDifficulty] | None, dict | None]:
        """The easy/hard sub-split of the exported classes and what the manifest says of it, or (None, None)."""

    def decision_rows(self, placed: Mapping[int, Placed]) -> Iterable[tuple[int, list]]:
        """(image id, cells) for every image the selection considered, exported or not, in the
        order of decisions.csv; the layouts' columns are appended to the cells."""

    def added_reason(self, p: Placed) -> str:
        """Why an image that the previous version did not hold is in this one."""

    def describe(self, root: Path, written: Written) -> tuple[dict, dict]:
        """(the manifest's entries beyond the writer's, the datasheet's facts), once the images,
        lists, decisions.csv and diff.csv are in ``root``. May add entries to ``written.counts``."""


@dataclass
class Written:
    """What ``write_export`` did."""

    placed: list[Placed]
    good: list[Placed]
    counts: dict
    diff: dict | None = None
    difficulty: dict | None = None  # what the manifest says of the sub-splits
    manifest_sha256: str = ""


def export_counts(placed: Sequence[Placed], layouts: Sequence[str], excluded: Mapping[str, int]) -> dict:
    """The counts an export records: images and classes exported, per class, what was left out
    (the selection's reasons and the files that failed their checks) and how files were placed."""
    good = [p for p in placed if not p.problem]
    per_class: dict[str, dict] = {}
    for p in sorted(good, key=lambda p: p.item.wnid):
        entry = per_class.setdefault(p.item.wnid, {"name": p.item.class_name, "synset": p.item.synset, "images": 0})
        entry["images"] += 1
    left_out = Counter(dict(excluded)) + Counter(reason_kind(p.problem) for p in placed if p.problem)
    counts = {
        "images": len(good), "classes": len(per_class), "per_class": per_class, "excluded": dict(sorted(left_out.items())),
        "files_per_layout": {x: len(good) for x in layouts if LAYOUTS[x].places_files},
        "placed_by": dict(Counter(p.method for p in good)),
    }
    if any(not LAYOUTS[x].places_files for x in layouts):
        counts["rows_per_layout"] = {x: len(good) for x in layouts if not LAYOUTS[x].places_files}
    return counts


def write_export(tmp: Path, final: Path, *, name: str, layouts: Sequence[str], items: Sequence[ExportItem],
                 refused: Sequence[Placed] = (), link: bool = True, excluded: Mapping[str, int], decision_columns: Sequence[str],
                 hooks: ExportHooks, previous: PreviousVersion | None = None, why_not: Mapping[int, str] | None = None,
                 warn_loss: float = 0.2, progress: Callable[[int], None] | None = None) -> Written:
    """Write a dataset export into the empty folder ``tmp`` and move it to ``final``: plan every
    item's path in every layout, place the files (checked against their ingest digests), the
    layouts' lists, decisions.csv (``decision_columns`` then one column per layout), diff.csv
    and the diff against ``previous`` (``why_not``: image id -> why the selection left it out),
    the datasheet (README.md), and manifest.json with the sha256 of every file. ``refused``
    items never reached the file system (their ``problem`` says why)."""
    paths = plan_paths(items, layouts, name=name)
    placed = place_items(tmp, items, paths, link=link, progress=progress) + list(refused)
    good = [p for p in placed if not p.problem]
    difficulty, difficulty_info = hooks.difficulty(good)
    rows = write_layout_lists(tmp, placed, layouts, difficulty=difficulty)
    by_image = {p.item.image_id: p for p in placed}

    def decision_rows() -> Iterator[list]:
        for image_id, cells in hooks.decision_rows(by_image):
            p = by_image.get(image_id)
            exported = p is not None and not p.problem
            yield cells + [LAYOUTS[x].located(p, rows[x]) if exported else "" for x in layouts]

    write_csv(tmp / DECISIONS, [*decision_columns, *(LAYOUTS[x].decisions_column for x in layouts)], decision_rows())
    counts = export_counts(placed, layouts, excluded)
    if difficulty_info:
        counts["difficulty"] = {**difficulty_info["counts"], "rule": difficulty_info["rule"], "cut": difficulty_info["cut"],
                                "classes": difficulty_info["classes"]}
    written = Written(placed=placed, good=good, counts=counts, difficulty=difficulty_info)
    if previous is not None:
        written.diff, diff_rows = export_diff(previous, placed, why_not=why_not or {}, why_new=hooks.added_reason, warn_loss=warn_loss)
        write_csv(tmp / DIFF_FILE, DIFF_COLUMNS, diff_rows)
        counts["diff"] = written.diff
    extra, facts = hooks.describe(tmp, written)
    write_datasheet(tmp, facts)
    known = {rel: p.item.sha256 for p in good for rel in p.files.values()}
    subsplits = sorted({d.subsplit for d in difficulty.values()}) if difficulty else []
    manifest = {
        **extra, "counts": counts, "datasheet": facts,
        **({"difficulty": difficulty_info} if difficulty_info else {}),
        **({"diff": {k: v for k, v in written.diff.items() if not k.startswith("sample_")}} if written.diff else {}),
        "layouts": {x: LAYOUTS[x].manifest_entry(name, subsplits) for x in layouts},
        "files": hash_tree(tmp, known=known),
    }
    written.manifest_sha256 = write_manifest(tmp, manifest)
    finish(tmp, final)
    return written


# -- verification ------------------------------------------------------------------------------


@dataclass
class Verification:
    path: Path
    manifest: dict | None = None
    checked: int = 0
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def read_manifest(root: Path) -> dict:
    path = Path(root) / MANIFEST
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ExportError(f"{path}: no manifest.json; is {root} an export folder?") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ExportError(f"{path}: not valid JSON ({exc})") from None
    if not isinstance(data, dict) or data.get("format") != MANIFEST_FORMAT or not isinstance(data.get("files"), dict):
        raise ExportError(f"{path}: not an export manifest (expected format {MANIFEST_FORMAT!r} with a 'files' table)")
    return data


def safe_member(name: str) -> bool:
    p = PurePosixPath(name)
    return bool(p.parts) and not p.is_absolute() and ".." not in p.parts and "\x00" not in name and name != MANIFEST


def verify_export(root: str | os.PathLike, *, progress: Callable[[int], None] | None = None) -> Verification:
    """Re-hash every file the manifest lists; report changed, missing and unlisted files, and
    counts that disagree with the listing. Never raises for a damaged export."""
    root = Path(root)
    v = Verification(path=root)
    try:
        v.manifest = read_manifest(root)
    except ExportError as exc:
        v.problems.append(str(exc))
        return v
    files: dict[str, str] = v.manifest["files"]
    for name, expected in sorted(files.items()):
        if not safe_member(name):
            v.problems.append(f"{name}: the manifest names a path outside the export")
            continue
        path = root / name
        try:
            if path.is_symlink() or not path.is_file():
                v.problems.append(f"{name}: missing (or not a regular file)")
                continue
            actual = sha256_file(path)
        except OSError as exc:
            v.problems.append(f"{name}: unreadable ({exc.strerror or exc})")
            continue
        v.checked += 1
        if actual != expected:
            v.problems.append(f"{name}: sha256 {actual} does not match the manifest's {expected}")
        if progress:
            progress(1)
    for name in hash_tree_names(root):
        if name not in files:
            v.problems.append(f"{name}: not listed in the manifest")
    counted = v.manifest.get("counts", {}).get("images")
    if counted is not None:
        per_layout = v.manifest.get("counts", {}).get("files_per_layout", {})
        for layout, n in per_layout.items():
            images = sum(1 for name in files if name.startswith(f"{layout}/") and layout in LAYOUTS and LAYOUTS[layout].is_image(name))
            if images != n:
                v.problems.append(f"{layout}/: {images} image files listed, the manifest counts {n}")
    return v


def hash_tree_names(root: Path) -> list[str]:
    names = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for fn in sorted(filenames):
            rel = Path(dirpath, fn).relative_to(root).as_posix()
            if rel != MANIFEST:
                names.append(rel)
    return names


# -- streaming archives ------------------------------------------------------------------------


class _Sink:
    """A write-only buffer the archive writers fill and the generator drains."""

    def __init__(self):
        self.parts: list[bytes] = []

    def write(self, data) -> int:
        self.parts.append(bytes(data))
        return len(data)

    def flush(self) -> None:
        pass

    def drain(self) -> bytes:
        data = b"".join(self.parts)
        self.parts.clear()
        return data


def archive_members(root: Path, manifest: dict, *, layout: str | None = None) -> list[str]:
    """The files a download carries, manifest first: every listed file, or one layout's files
    with the manifest and decisions.csv."""
    names = [n for n in sorted(manifest["files"]) if safe_member(n)]
    if layout:
        names = [n for n in names if n.startswith(f"{layout}/") or "/" not in n]
    return [MANIFEST, *names]


class DownloadAborted(RuntimeError):
    """A file of an export no longer matches its manifest (or is gone) while it is streamed."""


class _Hashing:
    """A read-only file wrapper that hashes what is read through it."""

    def __init__(self, fh):
        self.fh, self.h, self.n = fh, hashlib.sha256(), 0

    def read(self, size: int = -1) -> bytes:
        data = self.fh.read(size)
        self.h.update(data)
        self.n += len(data)
        return data


def _open_member(root: Path, name: str):
    try:
        return open(root / name, "rb")
    except FileNotFoundError:
        raise DownloadAborted(f"{name}: missing from {root}; the download was stopped "
                              f"(check the export with `python manage.py verify_export {root}`)") from None


def _check_member(root: Path, name: str, got: _Hashing, expected: dict[str, str] | None) -> None:
    want = (expected or {}).get(name)
    if want is not None and got.h.hexdigest() != want:
        raise DownloadAborted(f"{name}: its bytes changed since the export was written (sha256 {got.h.hexdigest()[:12]}..., "
                              f"manifest {want[:12]}...); the download was stopped (check the export with "
                              f"`python manage.py verify_export {root}`)")


def iter_tar_gz(root: Path, members: Sequence[str], *, prefix: str, level: int = 1,
                expected: dict[str, str] | None = None, extra: Mapping[str, bytes] | None = None) -> Iterator[bytes]:
    """Stream ``members`` of ``root`` as a .tar.gz, one file at a time (gzip level 1 by default:
    photos do not compress, so a higher level only costs time). With ``expected`` (name ->
    sha256, the manifest's table) every file is re-hashed as it is read, and a file that
    differs or is missing stops the stream with ``DownloadAborted`` before its bytes are sent.
    ``extra`` (name -> bytes, e.g. ``SHA256SUMS``) are written first, from memory."""
    import io

    sink = _Sink()
    gz = gzip.GzipFile(fileobj=sink, mode="wb", compresslevel=level, mtime=0)
    with tarfile.open(fileobj=gz, mode="w|", format=tarfile.PAX_FORMAT) as tar:
        for name, data in (extra or {}).items():
            info = tarfile.TarInfo(f"{prefix}/{name}")
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
        for name in members:
            with _open_member(root, name) as fh:
                st = os.fstat(fh.fileno())
                # built by hand: TarInfo from gettarinfo looks up user and group names per file
                info = tarfile.TarInfo(f"{prefix}/{name}")
                info.size, info.mtime, info.mode = st.st_size, int(st.st_mtime), 0o644
                reader = _Hashing(fh)
                try:
                    tar.addfile(info, reader)
                except OSError as exc:  # shorter than its size: cut while being read
                    raise DownloadAborted(f"{name}: {exc}; the download was stopped") from None
            _check_member(root, name, reader, expected)
            data = sink.drain()
            if data:
                yield data
    gz.close()
    yield sink.drain()


def iter_zip(root: Path, members: Sequence[str], *, prefix: str, expected: dict[str, str] | None = None,
             extra: Mapping[str, bytes] | None = None) -> Iterator[bytes]:
    """Stream ``members`` of ``root`` as a .zip (stored, not deflated; ZIP64 where needed),
    written block by block into an unseekable stream. With ``expected`` every file is
    re-hashed as it is streamed; one that differs or is missing stops the stream with
    ``DownloadAborted`` before the archive's directory is written (the .zip is then invalid).
    ``extra`` (name -> bytes) are written first, from memory."""
    sink = _Sink()
    with zipfile.ZipFile(cast(IO[bytes], sink), mode="w", compression=zipfile.ZIP_STORED, allowZip64=True) as zf:
        for name, data in (extra or {}).items():
            zf.writestr(zipfile.ZipInfo(f"{prefix}/{name}", date_time=(1980, 1, 1, 0, 0, 0)), data)
        for name in members:
            with _open_member(root, name) as raw:
                info = zipfile.ZipInfo.from_file(root / name, arcname=f"{prefix}/{name}")
                info.compress_type = zipfile.ZIP_STORED
                fi = _Hashing(raw)
                with zf.open(info, "w", force_zip64=info.file_size > 0x7FFF0000) as fo:
                    for block in iter(lambda: fi.read(BLOCK), b""):
                        fo.write(block)
                        data = sink.drain()
                        if data:
                            yield data
            _check_member(root, name, fi, expected)
            data = sink.drain()
            if data:
                yield data
    yield sink.drain()


# -- checks before a download starts -----------------------------------------------------------------


SUMS_FILE = "SHA256SUMS"  # in every download: `sha256sum -c SHA256SUMS` inside the unpacked folder checks it offline


def sha256sums(members: Sequence[str], expected: Mapping[str, str], manifest_sha256: str) -> bytes:
    """``sha256sum``'s check file for a download's members: the manifest's recorded digest for
    each listed file and the manifest's own (as recorded when the export was written). Names
    holding a backslash or a newline are escaped as GNU coreutils does."""
    lines = []
    for name in members:
        digest = manifest_sha256 if name == MANIFEST else expected.get(name)
        if not digest:
            continue
        if "\\" in name or "\n" in name:
            lines.append("\\" + f"{digest}  " + name.replace("\\", "\\\\").replace("\n", "\\n"))
        else:
            lines.append(f"{digest}  {name}")
    return ("\n".join(lines) + "\n").encode("utf-8")


_VERIFIED: dict[str, dict[str, tuple[int, int, int, int]]] = {}  # export folder -> name -> the stat of a file whose bytes matched
_VERIFIED_FOLDERS = 16


def _stamp(st: os.stat_result) -> tuple[int, int, int, int]:
    # ctime cannot be set from user space: a write, truncate, rename or chmod moves it
    return st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino


def first_changed_member(root: Path, members: Sequence[str], expected: Mapping[str, str]) -> str | None:
    """Before a download's first byte: the first of ``members`` that is missing or whose bytes
    are not the ``expected`` sha256, as a sentence naming it; None when every file matches.

    Each file is hashed once per process; after that, while its size, mtime, ctime and inode
    stay the same (no write can leave ctime unchanged), a stat stands for the hash. A first
    download of a 100K-image export hashes ~11 GB (about 24 s at the ~470 MB/s measured on the
    development VM); later ones stat 100K files (well under a second). The stream still re-hashes
    every file as it sends it, for a change made during the download."""
    seen = _VERIFIED.pop(str(root), {})
    try:
        for name in members:
            want = expected.get(name)
            if want is None:  # the manifest: checked against the digest recorded in the database
                continue
            path = root / name
            try:
                st = os.stat(path)
            except OSError as exc:
                seen.pop(name, None)
                return f"{name} is missing or unreadable ({exc.strerror or exc})"
            if seen.get(name) == _stamp(st):
                continue
            try:
                digest = sha256_file(path)
            except OSError as exc:
                seen.pop(name, None)
                return f"{name} is unreadable ({exc.strerror or exc})"
            if digest != want:
                seen.pop(name, None)
                return f"{name} changed since the export was written (sha256 {digest[:12]}..., manifest {want[:12]}...)"
            seen[name] = _stamp(st)
        return None
    finally:
        _VERIFIED[str(root)] = seen  # most recently used last
        while len(_VERIFIED) > _VERIFIED_FOLDERS:
            _VERIFIED.pop(next(iter(_VERIFIED)))
