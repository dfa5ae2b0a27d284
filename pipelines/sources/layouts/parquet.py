"""Parquet files as the Hugging Face hub ships image datasets (``ILSVRC/imagenet-1k`` and most
others): ROOT/**/<split>-NNNNN-of-MMMMM.parquet with a column ``image`` {bytes, path} and a
``label`` ClassLabel whose names live in the schema's ``huggingface`` metadata. A member is one
row, read in place by its row group (the last few row groups read are kept, so reading in member
order, as extraction does, reads each row group once)."""
from __future__ import annotations

import json
import threading
from bisect import bisect_right
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from pathlib import Path, PurePosixPath
from typing import Any

from . import (
    DEFAULT_MAX_BYTES,
    FILE_TOO_LARGE,
    FOREIGN_SCHEMA,
    LISTED_NOT_FOUND,
    NO_CLASS,
    NOT_AN_ARCHIVE,
    LayoutError,
    Member,
    MemberRef,
    MemberUnreadable,
    NotRegularFile,
    Scan,
    SourceLayout,
    container_file,
    not_regular,
    open_regular,
    refuse_unopened,
    register_source_layout,
    walk_containers,
)

_CACHE_GROUPS = 8  # row groups kept per process (an HF image shard's row group is ~100 rows)


def read_names_file(path: str) -> list[str]:
    try:
        with open(path, encoding="utf-8") as fh:
            names = [line.strip() for line in fh if line.strip()]
    except (OSError, UnicodeDecodeError) as exc:
        raise LayoutError(f"--names-file {path}: cannot read it ({exc}); give a text file of one class name per line") from None
    if not names:
        raise LayoutError(f"--names-file {path}: the file is empty; give one class name (or wnid) per line, line N for label N")
    return names


def classlabel_names(schema: Any, column: str) -> list[str] | None:
    """The ClassLabel names of ``column`` from the schema's ``huggingface`` metadata (as
    ``datasets`` writes it), or None."""
    meta = (schema.metadata or {}).get(b"huggingface")
    if not meta:
        return None
    try:
        feature = json.loads(meta)["info"]["features"][column]
    except (ValueError, KeyError, TypeError):
        return None
    names = feature.get("names") if isinstance(feature, dict) else None
    return [str(n) for n in names] if isinstance(names, list) else None


def _image_kind(schema: Any, column: str) -> str:
    """'struct' ({bytes, path}), 'binary', or '' when ``column`` holds no image bytes."""
    import pyarrow as pa

    if column not in schema.names:
        return ""
    t = schema.field(column).type
    if pa.types.is_struct(t) and t.get_field_index("bytes") >= 0 and _binary(t.field("bytes").type):
        return "struct"
    if _binary(t):
        return "binary"
    return ""


def _binary(t: Any) -> bool:
    import pyarrow as pa

    return bool(pa.types.is_binary(t) or pa.types.is_large_binary(t))


@register_source_layout
class Parquet(SourceLayout):
    name = "parquet"
    description = "Parquet files (the Hugging Face hub's image datasets): column image {bytes, path}, label a ClassLabel"
    options = {
        "image_column": "the column holding the image (default image: {bytes, path} or plain bytes)",
        "label_column": "the column holding the class (default label: a ClassLabel index, or a name)",
        "names_file": "class names for an integer label, one per line (default: the ClassLabel names in the file's metadata)",
    }

    def check_options(self, options: Mapping[str, Any]) -> None:
        super().check_options(options)
        if options.get("names_file"):
            read_names_file(str(options["names_file"]))

    def scan(self, root: Path, options: Mapping[str, Any], *, wanted: Mapping[str, str] | None = None) -> Scan:
        scan = Scan()
        image_col = str(options.get("image_column") or "image")
        label_col = str(options.get("label_column") or "label")
        names_override = read_names_file(str(options["names_file"])) if options.get("names_file") else None
        want_files = {p.partition(".parquet/")[0] + ".parquet" for p in wanted} if wanted is not None else None
        for rel, full, st in walk_containers(root, (".parquet",), scan):
            if want_files is not None and rel not in want_files:
                continue
            scan.containers += 1
            try:
                fh = open_regular(full)  # read through this file object: a fifo put in its place is never waited on
            except OSError as exc:
                refuse_unopened(scan, rel, "", exc)
                continue
            with fh:
                self._scan_file(scan, rel, full, st.st_mtime_ns, fh, image_col, label_col, names_override, wanted)
        if wanted is not None:
            have = {m.path for m in scan.members} | {r.rel_path for r in scan.refused}
            for path in sorted(set(wanted) - have):
                scan.refuse(path, wanted[path], LISTED_NOT_FOUND, f"{root}/{path}: named by the list but not in the Parquet files")
        return scan.finish()

    def _scan_file(self, scan: Scan, rel: str, full: str, mtime_ns: int, fh: Any, image_col: str, label_col: str,
                   names_override: list[str] | None, wanted: Mapping[str, str] | None) -> None:
        """The members of one Parquet file (``rel``), read through ``fh``."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        try:
            pf = pq.ParquetFile(fh)
            schema = pf.schema_arrow
        except (pa.ArrowException, OSError) as exc:
            scan.refuse(rel, "", NOT_AN_ARCHIVE, f"{full}: not a readable Parquet file ({exc}); refused")
            return
        kind = _image_kind(schema, image_col)
        if not kind or label_col not in schema.names:
            missing = [c for c, ok in ((image_col, bool(kind)), (label_col, label_col in schema.names)) if not ok]
            scan.refuse(rel, "", FOREIGN_SCHEMA, f"{full}: no image column {image_col!r} of bytes or no label column "
                        f"{label_col!r} (missing: {', '.join(missing)}; it has {', '.join(schema.names)}); name them "
                        "with --image-column / --label-column")
            return
        names = names_override or classlabel_names(schema, label_col)
        cols = [label_col] + ([f"{image_col}.path"] if kind == "struct" and schema.field(image_col).type.get_field_index("path") >= 0 else [])
        try:
            table = pf.read(columns=cols)
        except (pa.ArrowException, OSError) as exc:
            scan.refuse(rel, "", NOT_AN_ARCHIVE, f"{full}: cannot read its rows ({exc}); refused")
            return
        labels = table.column(0).to_pylist()
        paths = table.column(1).to_pylist() if table.num_columns > 1 else [None] * len(labels)
        if paths and isinstance(paths[0], dict):
            paths = [p.get("path") if isinstance(p, dict) else p for p in paths]
        for row, (label, name) in enumerate(zip(labels, paths)):
            base = PurePosixPath(str(name)).name if name else ""
            path = f"{rel}/{row:07d}" + (f"/{base}" if base and base not in (".", "..") else "")
            if wanted is not None and path not in wanted:
                continue
            cls = _class(label, names)
            if wanted is not None and wanted.get(path):
                cls = wanted[path]
            if not cls:
                scan.refuse(path, "", NO_CLASS, f"{full}: row {row} has label {label!r}, which names no class "
                                                f"({len(names or [])} ClassLabel names); give --names-file")
                continue
            scan.members.append(Member(path, cls, -1, mtime_ns, container=rel, offset=row))

    def read(self, ref: MemberRef) -> bytes:
        full = container_file(ref)
        return _checked(ref, _ROWS.get(str(full), ref))

    def read_many(self, refs: Sequence[tuple[int, MemberRef]]) -> dict[int, bytes | OSError]:
        """The rows of a chunk taken out of their row groups at once (one ``take`` and one
        conversion per group, not a scalar conversion per row); a row that cannot be read so gets
        the error reading it alone gives."""
        out: dict[int, bytes | OSError] = {}
        groups: dict[int, tuple[Any, list[tuple[int, int, MemberRef]]]] = {}
        for k, ref in refs:
            try:
                values, i = _ROWS.column(str(container_file(ref)), ref)
            except OSError as exc:
                out[k] = exc
                continue
            groups.setdefault(id(values), (values, []))[1].append((k, i, ref))
        for values, rows in groups.values():
            picked = values.take([i for _k, i, _r in rows]).to_pylist()
            for (k, _i, ref), value in zip(rows, picked):
                try:
                    out[k] = _checked(ref, value.get("bytes") if isinstance(value, dict) else value)
                except OSError as exc:
                    out[k] = exc
        return out


def _checked(ref: MemberRef, data: bytes | None) -> bytes:
    if data is None:
        raise MemberUnreadable(f"{ref}: the row holds no image bytes")
    if len(data) > DEFAULT_MAX_BYTES:
        raise MemberUnreadable(f"{ref}: {len(data)} bytes is more than the {DEFAULT_MAX_BYTES}-byte limit ({FILE_TOO_LARGE})")
    return data


def _class(label: Any, names: list[str] | None) -> str:
    if isinstance(label, str):
        return label.strip()
    if isinstance(label, int) and not isinstance(label, bool):
        if names is not None:
            return names[label] if 0 <= label < len(names) else ""
        return str(label) if label >= 0 else ""
    return ""


class _RowGroups:
    """The image column of the row groups read last, per file (keyed by path, mtime and size, so
    a rewritten file is read again)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._groups: OrderedDict[tuple, Any] = OrderedDict()
        self._meta: dict[tuple, tuple[list[int], int]] = {}
        self._loading: dict[tuple, threading.Lock] = {}

    def get(self, full: str, ref: MemberRef) -> bytes | None:
        values, i = self.column(full, ref)
        value = values[i].as_py()
        return value.get("bytes") if isinstance(value, dict) else value

    def column(self, full: str, ref: MemberRef) -> tuple[Any, int]:
        """The image column of ``ref``'s row group (cached) and the row's place in it."""
        import os
        import stat

        import pyarrow as pa
        import pyarrow.parquet as pq

        try:
            st = os.stat(full)
        except FileNotFoundError:
            raise MemberUnreadable(f"{ref}: its file {full} no longer exists; re-run add_source") from None
        if not stat.S_ISREG(st.st_mode):
            raise NotRegularFile(f"{ref}: {not_regular(full, st.st_mode)}")
        ident = (full, st.st_mtime_ns, st.st_size)
        try:
            with self._lock:
                meta = self._meta.get(ident)
            if meta is None:
                pf = pq.ParquetFile(full)
                starts, total = [], 0
                for g in range(pf.metadata.num_row_groups):
                    starts.append(total)
                    total += pf.metadata.row_group(g).num_rows
                meta = (starts, total)
                with self._lock:
                    self._meta[ident] = meta
            starts, total = meta
            column = ref.column or "image"
            if not 0 <= ref.offset < total:
                raise MemberUnreadable(f"{ref}: the file has {total} rows, not row {ref.offset} (rewritten since ingest?); re-run add_source")
            group = bisect_right(starts, ref.offset) - 1
            key = ident + (group, column)
            with self._lock:
                values = self._groups.get(key)
                if values is not None:
                    self._groups.move_to_end(key)
            if values is None:
                with self._lock:
                    loading = self._loading.setdefault(key, threading.Lock())
                with loading:  # one thread reads a row group; the others asking for it meanwhile wait for it
                    with self._lock:
                        values = self._groups.get(key)
                    if values is None:
                        values = pq.ParquetFile(full).read_row_group(group, columns=[column]).column(0)
                        with self._lock:
                            self._groups[key] = values
                            while len(self._groups) > _CACHE_GROUPS:
                                self._groups.popitem(last=False)
                            self._loading.pop(key, None)
        except (pa.ArrowException, OSError) as exc:
            if isinstance(exc, MemberUnreadable):
                raise
            raise MemberUnreadable(f"{ref}: cannot read the row ({exc})") from None
        return values, ref.offset - starts[group]


_ROWS = _RowGroups()
