"""NINCO's layout (Bitterwolf et al., ICML 2023), laid out as NINCO's release unpacks.

``ninco/`` is the folder one would have unpacked ``NINCO_all.tar.gz`` into:

- ``ninco/NINCO/NINCO_OOD_classes/<class>/<file>``: one folder per OOD class, named for people,
  and nothing else inside ``NINCO_OOD_classes`` (pytorch-ood's ``NINCO`` lists every entry
  there as a class folder);
- ``ninco/NINCO/file_list.csv``: the two-column list NINCO's own code reads (header
  ``image_location,class``; locations relative to ``ninco/NINCO``, as NINCO's
  ``data/NINCO_OOD_classes.csv``), and ``file_list_<sub>.csv`` per easy/hard sub-split beside it;
- ``ninco/metadata.csv``: our columns, outside the image tree, with a ``file_name`` column
  relative to ``ninco/``, which is what Hugging Face ``datasets`` imagefolder expects of a
  file of that name;
- ``ninco_class_map.csv`` at the export's top maps each class folder back to its wnid, so
  ``add_source --class-map`` can re-ingest ``ninco/NINCO/NINCO_OOD_classes``.
"""
from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from pathlib import Path, PurePosixPath

from . import ExportItem, Layout, Placed, PlanContext, register_layout, write_csv

RELEASE = "NINCO"  # the release's top folder
CLASSES = "NINCO_OOD_classes"  # its class tree
IMAGES = f"ninco/{RELEASE}/{CLASSES}"


def readable_folder(name: str) -> str:
    """A folder name people can read: ASCII letters, digits, ``_`` and ``-`` ("sea anemone" ->
    "sea_anemone")."""
    text = unicodedata.normalize("NFKD", name).encode("ascii", "ignore").decode()
    text = re.sub(r"[^A-Za-z0-9_-]+", "_", text).strip("_-")
    return text[:100] or "class"


@register_layout
class Ninco(Layout):
    name = "ninco"
    description = "NINCO: ninco/NINCO/NINCO_OOD_classes/<class>/<file>, NINCO/file_list.csv, metadata.csv"
    reference = "Bitterwolf et al., ICML 2023"

    def folder(self, item: ExportItem, ctx: PlanContext) -> str:
        folder = readable_folder(item.class_name)
        if len(ctx.folders_by_name[folder]) > 1:  # two classes would share a readable name: the wnid tells them apart
            folder = f"{folder}_{item.wnid}"
        return f"{IMAGES}/{folder}"

    def is_image(self, rel: str) -> bool:
        return rel.startswith(f"{IMAGES}/") and rel.count("/") >= 4

    @staticmethod
    def class_folder(p: Placed) -> str:
        return PurePosixPath(p.files["ninco"]).parent.name

    def write_lists(self, root: Path, placed: Sequence[Placed], subsets: dict[str, Sequence[Placed]],
                    difficulty: dict | None = None) -> None:
        header = ["file_name", "class", "class_name", "wnid", "original_file", "sha256", "image_id"]
        extra = ["semantic_similarity", "closest_id_wnid", "difficulty"] if difficulty else []

        def row(p):
            out = [self.inside(p), self.class_folder(p), p.item.class_name, p.item.wnid, p.item.file_name, p.item.sha256, p.item.image_id]
            if difficulty:
                d = difficulty.get(p.item.wnid)  # None: a class outside WordNet has no similarity and no sub-split
                out += [f"{d.similarity:.4f}", d.closest_id_wnid, d.subsplit] if d else ["", "", ""]
            return out

        def release_rows(members):  # NINCO's list: location relative to the release folder, then the class folder
            return ([self.inside(p).removeprefix(f"{RELEASE}/"), self.class_folder(p)] for p in members)

        write_csv(root / "ninco" / "metadata.csv", header + extra, (row(p) for p in placed))
        write_csv(root / "ninco" / RELEASE / "file_list.csv", ["image_location", "class"], release_rows(placed))
        # folder -> wnid, the class map `add_source --class-map` reads to re-ingest the NINCO layout
        write_csv(root / "ninco_class_map.csv", ["folder", "wnid"], sorted({(self.class_folder(p), p.item.wnid) for p in placed}))
        for sub, members in subsets.items():
            write_csv(root / "ninco" / RELEASE / f"file_list_{sub}.csv", ["image_location", "class"], release_rows(members))

    def lists(self, export_name: str, sub: str = "") -> list[str]:
        if sub:
            return [f"ninco/{RELEASE}/file_list_{sub}.csv"]
        return ["ninco/metadata.csv", f"ninco/{RELEASE}/file_list.csv", "ninco_class_map.csv"]

    def how_to_load(self, export_name: str) -> str:
        return """### NINCO (`ninco/`)

`ninco/` is laid out as NINCO's release unpacks (`NINCO/NINCO_OOD_classes/<class>/<file>`), with
`NINCO/file_list.csv` in the two-column form NINCO's `evaluate.py` reads.

```python
# NINCO's own code (github.com/j-cb/NINCO, datasets.py): the list and the folder it is relative to
from datasets import ImageCSVDataset  # NINCO's datasets.py, not Hugging Face's
ood = ImageCSVDataset("ninco/NINCO/file_list.csv", paths_prefix="ninco/NINCO")
```

```python
# pytorch-ood: the class checks for NINCO's downloaded archive; this export has none, so skip that check
from pytorch_ood.dataset.img import NINCO
NINCO._check_integrity = lambda self: True
ood = NINCO(root="ninco")
```

```python
# torchvision: one class per folder
from torchvision.datasets import ImageFolder
ood = ImageFolder("ninco/NINCO/NINCO_OOD_classes")
```

```python
# Hugging Face datasets: ninco/metadata.csv gives each file its class, wnid and sha256
from datasets import load_dataset
ood = load_dataset("imagefolder", data_dir="ninco", split="train")
```
"""
