"""Export layouts: one registered class per folder convention (NINCO, ImageNet-OOD, OpenOOD).

An export writes each chosen layout as a sub-folder of its own. A layout says where an image
goes (``folder``), which file names its listings can hold (``listable``) and which listings it
writes (``write_lists``); the export command's ``--layout`` choices, the admin form and the
export's checks come from this registry. Adding a layout is one file in this package::

    @register_layout
    class FlatList(Layout):
        name = "flat"
        description = "every image in one folder, with a plain file list"

        def folder(self, item, ctx):
            return "flat"

        def write_lists(self, root, placed, subsets):
            write_list(root / "flat" / "files.txt", (self.inside(p) for p in placed))
"""
from __future__ import annotations

import importlib
import pkgutil
import unicodedata
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, ClassVar

from pipelines.export import csv_cells

# An item (pipelines.export.write.ExportItem: wnid, class_name, file_name, sha256, image_id) and a
# placed file (pipelines.export.write.Placed: item, files = layout -> path); typed loosely here so
# this package does not import the export module that uses it.
ExportItem = Any
Placed = Any


def write_csv(path: Path, header: Sequence[str], rows: Iterable[Sequence]) -> None:
    """A new CSV file, its cells neutralised against spreadsheet formulas (pipelines/export/csv_cells.py)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "x", newline="", encoding="utf-8") as fh:
        w = csv_cells.Writer(fh)
        w.writerow(header)
        w.writerows(rows)


def write_list(path: Path, lines: Iterable[str]) -> None:
    """A new text file, one line per entry."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "x", encoding="utf-8") as fh:
        for line in lines:
            fh.write(line + "\n")


class PlanContext:
    """What a layout may need to know about the whole export while placing one item: the
    wnids that share each readable class folder name, and the export's name."""

    def __init__(self, folders_by_name: dict[str, set[str]], name: str = ""):
        self.folders_by_name = folders_by_name
        self.name = name


class Layout:
    name: ClassVar[str] = ""
    description: ClassVar[str] = ""
    reference: ClassVar[str] = ""  # whose convention it is
    places_files: ClassVar[bool] = True  # False: no image files of its own (it writes the bytes into tables)
    default: ClassVar[bool] = True  # written when an export names no layout

    def folder(self, item: ExportItem, ctx: PlanContext) -> str:
        """The folder, relative to the export, that ``item`` goes into (starting with the
        layout's name)."""
        raise NotImplementedError

    def listable(self, name: str) -> str:
        """A file name this layout's line-based listings can hold: control characters (a newline
        would split a line) become '_'."""
        return "".join("_" if unicodedata.category(c)[0] == "C" else c for c in name)

    def is_image(self, rel: str) -> bool:
        """Whether a path under this layout's folder is an image (not a listing)."""
        return rel.count("/") >= 2

    def inside(self, p: Placed) -> str:
        """``p``'s path relative to this layout's own folder."""
        return p.files[self.name].removeprefix(f"{self.name}/")

    def write_lists(self, root: Path, placed: Sequence[Placed], subsets: dict[str, Sequence[Placed]],
                    difficulty: dict | None = None) -> dict[int, str] | None:
        """The layout's listings of the placed images (sorted by class), once for all and once
        per sub-split in ``subsets`` (``easy``/``hard``...); ``difficulty`` is wnid ->
        pipelines.export.write.ClassDifficulty when the export has sub-splits. A layout without files
        of its own returns where each image's row went (image id -> file), for decisions.csv."""
        raise NotImplementedError

    def how_to_load(self, export_name: str) -> str:
        """Markdown for the export's README: how each client this layout is named after loads it
        (code that runs from the export's folder)."""
        return f"### {self.name} (`{self.name}/`)\n\n{self.description}\n"

    def lists(self, export_name: str, sub: str = "") -> list[str]:
        """The listings ``write_lists`` writes, relative to the export: those of the whole set,
        or with ``sub`` those of one sub-split (``easy``/``hard``). Named in the manifest."""
        return []

    @property
    def decisions_column(self) -> str:
        """The column of decisions.csv that says where each image is in this layout."""
        return f"{self.name.replace('-', '_')}_file"

    def located(self, p: Placed, rows: dict[int, str]) -> str:
        """That column's cell for ``p``: its file here, or for a layout without files of its own
        where ``write_lists`` put its row (``rows``: image id -> location)."""
        return p.files.get(self.name, "") or rows.get(p.item.image_id, "")

    def manifest_entry(self, export_name: str, subsplits: Sequence[str] = ()) -> dict:
        """What manifest.json says of this layout in an export."""
        return {"description": self.description, "reference": self.reference, "places_files": self.places_files,
                "decisions_column": self.decisions_column, "lists": self.lists(export_name),
                **({"subsplit_lists": {sub: self.lists(export_name, sub) for sub in subsplits}} if subsplits else {})}


LAYOUTS: dict[str, Layout] = {}  # name -> layout, in registration order


def default_layouts() -> list[str]:
    """The layouts an export writes when it names none."""
    return [name for name, layout in LAYOUTS.items() if layout.default]


def register_layout(cls: type[Layout]) -> type[Layout]:
    if not cls.name or cls.name in LAYOUTS:
        raise ValueError(f"layout name {cls.name!r} is empty or registered twice")
    LAYOUTS[cls.name] = cls()
    return cls


# NINCO, ImageNet-OOD, OpenOOD: the order exports list them in
_BUILT_IN = ("ninco", "imagenet_ood", "openood", "hf")


def _load_all() -> None:
    names = [m.name for m in pkgutil.iter_modules(__path__)]
    for mod in sorted(names, key=lambda m: (_BUILT_IN.index(m) if m in _BUILT_IN else len(_BUILT_IN), m)):
        importlib.import_module(f"{__name__}.{mod}")


_load_all()
