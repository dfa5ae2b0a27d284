"""The files of a semantic split (pipelines/classes/semantic_split.py) as the ImageNet-X authors
ship theirs: ``id_classes.txt`` and ``ood_classes.txt`` (one wnid a line, in group order),
``parents.csv`` (its cells neutralised, csv_cells.py) and ``summary.json``. Written by the
semantic_split command through curation/services/id_classes.py."""
from __future__ import annotations

import io
import json
from pathlib import Path
from typing import BinaryIO, Callable

from pipelines.classes.semantic_split import SemanticSplit
from pipelines.export import csv_cells
from pipelines.names import atomic_write

SPLIT_FILES = ("id_classes.txt", "ood_classes.txt", "parents.csv", "summary.json")


def write_split(split: SemanticSplit, out_dir: Path, *, names: dict[str, str] | None = None) -> list[Path]:
    """Write ``id_classes.txt`` / ``ood_classes.txt`` (one wnid a line, in group order, as the
    authors' lists), ``parents.csv`` (parent_wnid,parent_name,child_wnid,child_name,side) and
    ``summary.json`` into ``out_dir``; each file atomically, all inside ``out_dir``."""
    names = names or {}
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)

    def text(lines: list[str]) -> Callable[[BinaryIO], object]:
        return lambda fh: fh.write(("\n".join(lines) + "\n").encode("utf-8"))

    def parents_csv(fh: BinaryIO) -> None:
        buf = io.StringIO()
        writer = csv_cells.Writer(buf)
        writer.writerow(["parent_wnid", "parent_name", "child_wnid", "child_name", "side"])
        for g in split.groups:
            for child, side in zip(g.children, g.sides):
                writer.writerow([g.parent, g.parent_name, child, names.get(child, ""), side])
        fh.write(buf.getvalue().encode("utf-8"))

    summary = {**split.summary(), "parent_choices": {w: {"parent": p, "why": why} for w, (p, why) in split.parent_choices.items()}}
    writers = {
        "id_classes.txt": text(split.id_wnids), "ood_classes.txt": text(split.ood_wnids), "parents.csv": parents_csv,
        "summary.json": lambda fh: fh.write((json.dumps(summary, indent=2) + "\n").encode("utf-8")),
    }
    out = []
    for name in SPLIT_FILES:
        path = out_dir / name
        atomic_write(path, writers[name], root=out_dir)
        out.append(path)
    return out
