"""OpenOOD's layout (Zhang et al., OpenOOD v1.5, 2023), as a drop-in for its data root.

OpenOOD's evaluator reads, for each OOD set, ``<data_root>/benchmark_imglist/imagenet/test_<name>.txt``
whose lines are ``<path> <label>`` (-1 marks OOD), the path relative to
``<data_root>/images_largescale/``. So this layout writes

- ``openood/images_largescale/<name>/<wnid>/<file>``;
- ``openood/benchmark_imglist/imagenet/test_<name>.txt``: lines ``<name>/<wnid>/<file> -1``
  (and ``test_<name>_<sub>.txt`` per easy/hard sub-split);
- ``openood/imglist.txt``: the same images relative to ``openood/`` itself
  (``images_largescale/<name>/<wnid>/<file> -1``), for loaders given one root and one list.

``<name>`` is the export's name as an OpenOOD dataset key (lower case, ``_`` for anything else).
"""
from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from . import ExportItem, Layout, Placed, PlanContext, register_layout, write_list

IMAGES = "images_largescale"
LISTS = "benchmark_imglist/imagenet"


def openood_name(export_name: str) -> str:
    """The key OpenOOD's DATA_INFO would use for this set: lower case, ``_`` for anything but
    letters and digits."""
    return re.sub(r"[^a-z0-9]+", "_", export_name.lower()).strip("_") or "ood"


@register_layout
class OpenOOD(Layout):
    name = "openood"
    description = "OpenOOD: openood/images_largescale/<name>/<wnid>/<file>, benchmark_imglist/imagenet/test_<name>.txt (label -1)"
    reference = "Zhang et al., OpenOOD v1.5, 2023"

    def folder(self, item: ExportItem, ctx: PlanContext) -> str:
        return f"openood/{IMAGES}/{openood_name(ctx.name)}/{item.wnid}"

    def is_image(self, rel: str) -> bool:
        return rel.startswith(f"openood/{IMAGES}/") and rel.count("/") >= 4

    def listable(self, name: str) -> str:
        # OpenOOD's loader splits each imglist line at its first space, and understands no
        # quoting: any whitespace in a file name becomes '_' too (the original name stays in decisions.csv)
        return re.sub(r"\s", "_", super().listable(name))

    def lists(self, export_name: str, sub: str = "") -> list[str]:
        key = openood_name(export_name)
        if sub:
            return [f"openood/{LISTS}/test_{key}_{sub}.txt", f"openood/imglist_{sub}.txt"]
        return [f"openood/{LISTS}/test_{key}.txt", "openood/imglist.txt"]

    def write_lists(self, root: Path, placed: Sequence[Placed], subsets: dict[str, Sequence[Placed]],
                    difficulty: dict | None = None) -> None:
        if not placed:
            return
        name = self.inside(placed[0]).split("/")[1]

        def lines(members):  # relative to images_largescale/
            return (self.inside(p).removeprefix(f"{IMAGES}/") + " -1" for p in members)

        write_list(root / "openood" / LISTS / f"test_{name}.txt", lines(placed))
        write_list(root / "openood" / "imglist.txt", (self.inside(p) + " -1" for p in placed))
        for sub, members in subsets.items():
            write_list(root / "openood" / LISTS / f"test_{name}_{sub}.txt", lines(members))
            write_list(root / "openood" / f"imglist_{sub}.txt", (self.inside(p) + " -1" for p in members))

    def how_to_load(self, export_name: str) -> str:
        key = openood_name(export_name)
        return f"""### OpenOOD (`openood/`)

Copy (or link) `openood/images_largescale/{key}/` and `openood/benchmark_imglist/imagenet/test_{key}.txt`
into your OpenOOD data root, then add the set to the evaluator's table before building an `Evaluator`:

```python
from openood.evaluation_api.datasets import DATA_INFO
DATA_INFO["imagenet"]["ood"]["near"]["datasets"].append("{key}")
DATA_INFO["imagenet"]["ood"]["near"]["{key}"] = {{"data_dir": "images_largescale/", "imglist_path": "benchmark_imglist/imagenet/test_{key}.txt"}}
```

```python
# pytorch-ood reads the same list
from pytorch_ood.dataset.img import ImageListDataset
ood = ImageListDataset(root="openood/images_largescale", imglist_path="openood/benchmark_imglist/imagenet/test_{key}.txt")
```

```python
from datasets import load_dataset
ood = load_dataset("imagefolder", data_dir="openood/images_largescale/{key}", split="train")  # label = wnid folder
```
"""
