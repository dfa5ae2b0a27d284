"""Writing many rows at once. On PostgreSQL: COPY into a temporary table, then one
``INSERT ... SELECT ... ON CONFLICT DO NOTHING`` (a redelivered task's rows are skipped, as
``bulk_create(ignore_conflicts=True)`` skips them), several times faster than ``bulk_create``
for the tens of thousands of rows an extraction writes a second. Elsewhere (SQLite for the
demo): ``bulk_create``."""
from __future__ import annotations

import csv
import io
import json
from typing import Any, Iterable, Sequence

import numpy as np
from django.db import connection, transaction
from django.db.models import Model


def insert_rows(model: type[Model], fields: Sequence[str], rows: Iterable[tuple], *, batch_size: int = 2000) -> None:
    """Insert ``rows`` (tuples of values for ``fields``, attribute names such as ``image_id``)
    into ``model``'s table; rows that collide with a unique constraint are skipped."""
    rows = list(rows)
    if not rows:
        return
    if connection.vendor != "postgresql":
        model.objects.bulk_create([model(**dict(zip(fields, r))) for r in rows], batch_size=batch_size, ignore_conflicts=True)
        return
    opts = model._meta
    by_attname = {f.attname: f for f in opts.concrete_fields}
    missing = [f for f in fields if f not in by_attname]
    if missing:
        raise ValueError(f"{opts.label} has no column for {', '.join(missing)}")
    json_at = [i for i, f in enumerate(fields) if by_attname[f].get_internal_type() == "JSONField"]
    columns = [by_attname[f].column for f in fields]
    buf = io.StringIO()
    # Strings are quoted (so "" stays an empty string), numbers are not; None is written as "",
    # which FORCE_NULL turns into NULL for every column that is not text.
    out = csv.writer(buf, quoting=csv.QUOTE_NONNUMERIC, lineterminator="\n")
    nullable = [by_attname[f].column for f in fields if by_attname[f].get_internal_type() not in ("CharField", "TextField", "SlugField")]
    for r in rows:
        if json_at:
            r = list(r)
            for i in json_at:
                r[i] = json.dumps(r[i])
        out.writerow(r)
    buf.seek(0)
    table = connection.ops.quote_name(opts.db_table)
    cols = ", ".join(connection.ops.quote_name(c) for c in columns)
    with transaction.atomic(), connection.cursor() as cur:
        cur.execute(f"CREATE TEMP TABLE IF NOT EXISTS oodc_copy_{opts.model_name} ON COMMIT DROP AS SELECT {cols} FROM {table} WITH NO DATA")
        cur.execute(f"TRUNCATE oodc_copy_{opts.model_name}")
        force_null = f", FORCE_NULL ({', '.join(connection.ops.quote_name(c) for c in nullable)})" if nullable else ""
        cur.cursor.copy_expert(f"COPY oodc_copy_{opts.model_name} ({cols}) FROM STDIN WITH (FORMAT csv{force_null})", buf)
        cur.execute(f"INSERT INTO {table} ({cols}) SELECT {cols} FROM oodc_copy_{opts.model_name} ON CONFLICT DO NOTHING")


def copy_columns(cur: Any, table: str, names: Sequence[str], columns: Sequence[np.ndarray], chunk: int = 200_000) -> None:
    """Columns of equal length (numpy arrays) into ``table`` on PostgreSQL (the queue rebuild's
    temporary tables; ``cur``: a Django cursor), a chunk of rows per COPY, each chunk's values
    made Python numbers only while it is written (13.2M images: the whole columns as lists held
    about 0.7 GB more). A negative value in an integer column is SQL's NULL (a class id of
    -1: no class); floats keep every digit (``repr``)."""
    n = len(columns[0]) if columns else 0
    for start in range(0, n, chunk):
        parts = []
        for col in columns:
            values = col[start:start + chunk].tolist()
            if col.dtype.kind == "f":
                parts.append([repr(v) for v in values])
            else:
                parts.append(["\\N" if v < 0 else str(v) for v in values])
        buf = io.StringIO()
        buf.writelines("\t".join(row) + "\n" for row in zip(*parts))
        buf.seek(0)
        cur.cursor.copy_expert(f"COPY {table} ({', '.join(names)}) FROM STDIN", buf)


def copy_text_columns(cur: Any, table: str, names: Sequence[str], columns: Sequence[np.ndarray], chunk: int = 200_000) -> None:
    """Columns of equal length, already text (numpy string arrays; ``\\N`` is NULL), into
    ``table`` on PostgreSQL, a chunk of rows per COPY. The values must hold no tab, newline or
    backslash other than ``\\N`` (ids, numbers and reason slugs do not)."""
    n = len(columns[0]) if columns else 0
    for start in range(0, n, chunk):
        parts = [col[start:start + chunk].tolist() for col in columns]
        buf = io.StringIO()
        buf.writelines("\t".join(row) + "\n" for row in zip(*parts))
        buf.seek(0)
        cur.cursor.copy_expert(f"COPY {table} ({', '.join(names)}) FROM STDIN", buf)


def columns_of(rows: Iterable[Sequence[Any]], dtypes: Sequence[Any], *, block: int = 200_000, null: int = -1) -> list[np.ndarray]:
    """The columns of ``rows`` (a streamed ``values_list(...).iterator()``) as numpy arrays of
    ``dtypes``, built a block of rows at a time, so 13.2M rows never exist as Python tuples at
    once (a list of them is about 150 bytes a row). None becomes ``null``. A dtype may instead be a
    function from a block's values (a list) to their array."""
    parts: list[list[np.ndarray]] = [[] for _ in dtypes]
    buf: list[Sequence[Any]] = []

    def flush() -> None:
        if not buf:
            return
        for k, dt in enumerate(dtypes):
            col = [r[k] for r in buf]
            if callable(dt) and not isinstance(dt, type):  # a converter: list -> array (e.g. hex digits -> uint64)
                parts[k].append(dt(col))
                continue
            if any(v is None for v in col):
                col = [null if v is None else v for v in col]
            parts[k].append(np.asarray(col, dtype=dt))
        buf.clear()

    for r in rows:
        buf.append(r)
        if len(buf) == block:
            flush()
    flush()
    return [np.concatenate(p) if p else (dt([]) if callable(dt) and not isinstance(dt, type) else np.zeros(0, dtype=dt))
            for p, dt in zip(parts, dtypes)]
