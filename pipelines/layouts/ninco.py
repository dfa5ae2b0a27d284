"""NINCO's layout (Bitterwolf et al., ICML 2023): one folder per OOD class, named for people,
with ``metadata.csv``; ``ninco_class_map.csv`` at the export's top maps each folder back to its
wnid, so ``add_source --class-map`` can re-ingest the export."""
from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from pathlib import Path

from . import ExportItem, Layout, Placed, PlanContext, register_layout, write_csv, write_list


def readable_folder(name: str) -> str:
    """A folder name people can read: ASCII letters, digits, ``_`` and ``-`` ("sea anemone" ->
    "sea_anemone")."""
    text = unicodedata.normalize("NFKD", name).encode("ascii", "ignore").decode()
    text = re.sub(r"[^A-Za-z0-9_-]+", "_", text).strip("_-")
    return text[:100] or "class"


@register_layout
class Ninco(Layout):
    name = "ninco"
    description = "NINCO: ninco/<readable class name>/<file>, metadata.csv"
    reference = "Bitterwolf et al., ICML 2023"

    def folder(self, item: ExportItem, ctx: PlanContext) -> str:
        folder = readable_folder(item.class_name)
        if len(ctx.folders_by_name[folder]) > 1:  # two classes would share a readable name: the wnid tells them apart
            folder = f"{folder}_{item.wnid}"
        return f"ninco/{folder}"

    def write_lists(self, root: Path, placed: Sequence[Placed], subsets: dict[str, Sequence[Placed]],
                    difficulty: dict | None = None) -> None:
        header = ["file", "class_folder", "class_name", "wnid", "original_file", "sha256", "image_id"]
        extra = ["semantic_similarity", "closest_id_wnid", "difficulty"] if difficulty else []

        def row(p):
            out = [self.inside(p), p.files["ninco"].split("/")[1], p.item.class_name, p.item.wnid, p.item.file_name,
                   p.item.sha256, p.item.image_id]
            if difficulty:
                d = difficulty.get(p.item.wnid)  # None: a class outside WordNet has no similarity and no sub-split
                out += [f"{d.similarity:.4f}", d.closest_id_wnid, d.subsplit] if d else ["", "", ""]
            return out

        write_csv(root / "ninco" / "metadata.csv", header + extra, (row(p) for p in placed))
        # folder -> wnid, the class map `add_source --class-map` reads to re-ingest the NINCO layout
        write_csv(root / "ninco_class_map.csv", ["folder", "wnid"], sorted({(p.files["ninco"].split("/")[1], p.item.wnid) for p in placed}))
        for sub, members in subsets.items():
            write_list(root / "ninco" / f"file_list_{sub}.txt", (self.inside(p) for p in members))
