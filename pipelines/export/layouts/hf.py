"""Hugging Face Parquet shards: ``hf/data/test-NNNNN-of-NNNNN.parquet``, one row per image with its
bytes, so ``load_dataset("parquet", data_files="hf/data/*.parquet")`` gives decoded images.

Columns: ``image`` (``{bytes, path}``, Hugging Face's Image feature), ``label`` (ClassLabel over
the export's wnids, sorted), ``wnid``, ``class_name``, and provenance: ``sha256``, ``image_id``,
``source``, ``source_path``, ``original_file``; ``difficulty`` when the export has sub-splits.
The features are stored in the Parquet schema's ``huggingface`` metadata, which is where
``datasets`` looks for them, so the image column decodes and the label carries its names.

Not written unless asked for (``--layout hf``): it holds a second copy of every image's bytes,
where the folder layouts share one file through hard links. Needs pyarrow.
"""
from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path

from . import ExportItem, Layout, Placed, PlanContext, register_layout

SHARD_BYTES = 256 << 20  # image bytes per shard, before the next one starts
ROW_GROUP = 64  # rows per row group: a reader holds one group of images at a time


def _features(names: list[str], with_difficulty: bool) -> dict:
    text = {"dtype": "string", "_type": "Value"}
    out = {"image": {"_type": "Image"}, "label": {"names": names, "_type": "ClassLabel"}, "wnid": text, "class_name": text,
           "sha256": text, "image_id": {"dtype": "int64", "_type": "Value"}, "source": text, "source_path": text, "original_file": text}
    if with_difficulty:
        out["difficulty"] = text
    return out


@register_layout
class HuggingFaceParquet(Layout):
    name = "hf"
    description = "Hugging Face Parquet: hf/data/test-*.parquet (image bytes, label, wnid, provenance columns)"
    reference = "Hugging Face datasets, Parquet with Image and ClassLabel features"
    places_files = False
    default = False

    def folder(self, item: ExportItem, ctx: PlanContext) -> str:  # never called: no files of its own
        raise NotImplementedError("the hf layout writes tables, not folders")

    def is_image(self, rel: str) -> bool:
        return False

    @property
    def decisions_column(self) -> str:
        return "hf_shard"

    def lists(self, export_name: str, sub: str = "") -> list[str]:
        return [] if sub else ["hf/data/test-*.parquet"]  # a sub-split is the `difficulty` column, not a file

    def write_lists(self, root: Path, placed: Sequence[Placed], subsets: dict[str, Sequence[Placed]],
                    difficulty: dict | None = None) -> dict[int, str]:
        try:
            import pyarrow as pa
            import pyarrow.parquet as pq
        except ImportError:
            raise RuntimeError("--layout hf needs pyarrow: pip install -r requirements.txt") from None
        names = sorted({p.item.wnid for p in placed})
        index = {w: i for i, w in enumerate(names)}
        schema = pa.schema([
            ("image", pa.struct([("bytes", pa.binary()), ("path", pa.string())])), ("label", pa.int64()), ("wnid", pa.string()),
            ("class_name", pa.string()), ("sha256", pa.string()), ("image_id", pa.int64()), ("source", pa.string()),
            ("source_path", pa.string()), ("original_file", pa.string()),
            *([("difficulty", pa.string())] if difficulty else []),
        ], metadata={"huggingface": json.dumps({"info": {"features": _features(names, bool(difficulty))}})})
        shards: list[list[Placed]] = [[]]
        size = 0
        for p in placed:
            src = self._path(root, p)
            # a source member knows its size (a tar's) or is read to learn it (a Parquet row's); a file is stat'ed
            n = (src.size if src.size >= 0 else len(src.read(verify=False))) if hasattr(src, "read") else Path(src).stat().st_size
            if shards[-1] and size + n > SHARD_BYTES:
                shards.append([])
                size = 0
            shards[-1].append(p)
            size += n
        out = root / "hf" / "data"
        out.mkdir(parents=True, exist_ok=True)
        where: dict[int, str] = {}
        for k, members in enumerate(shards):
            shard = f"test-{k:05d}-of-{len(shards):05d}.parquet"
            with pq.ParquetWriter(out / shard, schema) as writer:
                for start in range(0, len(members), ROW_GROUP):
                    rows = [self._row(root, p, index, difficulty) for p in members[start:start + ROW_GROUP]]
                    writer.write_table(pa.Table.from_pylist(rows, schema=schema))
            where.update((p.item.image_id, f"hf/data/{shard}") for p in members)
        return where

    @staticmethod
    def _path(root: Path, p: Placed):
        """Where the image's bytes are: the export's own first copy, else the source file."""
        return str(root / next(iter(p.files.values()))) if p.files else p.item.src

    def _row(self, root: Path, p: Placed, index: dict[str, int], difficulty: dict | None) -> dict:
        where = self._path(root, p)
        data = where.read(verify=False) if hasattr(where, "read") else Path(where).read_bytes()  # a source member, or a file
        if hashlib.sha256(data).hexdigest() != p.item.sha256:  # placed and checked a moment ago: changed since
            raise RuntimeError(f"{self._path(root, p)} changed while the export was written (sha256 differs from ingest); export again")
        row = {"image": {"bytes": data, "path": p.item.file_name}, "label": index[p.item.wnid], "wnid": p.item.wnid,
               "class_name": p.item.class_name, "sha256": p.item.sha256, "image_id": p.item.image_id, "source": p.item.source,
               "source_path": p.item.source_path, "original_file": p.item.file_name}
        if difficulty:
            d = difficulty.get(p.item.wnid)
            row["difficulty"] = d.subsplit if d else ""
        return row

    def how_to_load(self, export_name: str) -> str:
        return """### Hugging Face Parquet (`hf/`)

```python
from datasets import load_dataset
ood = load_dataset("parquet", data_files="hf/data/*.parquet", split="train")  # image decodes to PIL; label names are wnids
```
"""
