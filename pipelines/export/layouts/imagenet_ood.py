"""ImageNet-OOD's layout (Yang et al., ICLR 2024): wnid folders with the original file names; the
plain list as ``file_list.txt`` and under the release's own name, ``imagenetood.txt``
(princetonvisualai/imagenetood: one ``<wnid>/<file>`` per line)."""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from . import ExportItem, Layout, Placed, PlanContext, register_layout, write_list

RELEASE_LIST = "imagenetood.txt"


@register_layout
class ImageNetOOD(Layout):
    name = "imagenet-ood"
    description = "ImageNet-OOD: imagenet-ood/<wnid>/<original file name>, file_list.txt and imagenetood.txt"
    reference = "Yang et al., ICLR 2024"

    def folder(self, item: ExportItem, ctx: PlanContext) -> str:
        return f"imagenet-ood/{item.wnid}"

    def write_lists(self, root: Path, placed: Sequence[Placed], subsets: dict[str, Sequence[Placed]],
                    difficulty: dict | None = None) -> None:
        write_list(root / "imagenet-ood" / "file_list.txt", (self.inside(p) for p in placed))
        write_list(root / "imagenet-ood" / RELEASE_LIST, (self.inside(p) for p in placed))
        for sub, members in subsets.items():
            write_list(root / "imagenet-ood" / f"file_list_{sub}.txt", (self.inside(p) for p in members))

    def lists(self, export_name: str, sub: str = "") -> list[str]:
        if sub:
            return [f"imagenet-ood/file_list_{sub}.txt"]
        return ["imagenet-ood/file_list.txt", f"imagenet-ood/{RELEASE_LIST}"]

    def how_to_load(self, export_name: str) -> str:
        return """### ImageNet-OOD (`imagenet-ood/`)

The wnid is the folder (`imagenet-ood/<wnid>/<file>`); `imagenetood.txt` (the release's name) and
`file_list.txt` list `<wnid>/<file>`, one per line.

```python
from torchvision.datasets import ImageFolder
ood = ImageFolder("imagenet-ood")  # ood.classes are the wnids
```

```python
from datasets import load_dataset
ood = load_dataset("imagefolder", data_dir="imagenet-ood", split="train")  # label = wnid folder
```
"""
