"""ImageNet-OOD's layout (Yang et al., 2024): wnid folders with the original file names, and a
plain ``file_list.txt``."""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from . import ExportItem, Layout, Placed, PlanContext, register_layout, write_list


@register_layout
class ImageNetOOD(Layout):
    name = "imagenet-ood"
    description = "ImageNet-OOD: imagenet-ood/<wnid>/<original file name>, file_list.txt"
    reference = "Yang et al., ICLR 2024"

    def folder(self, item: ExportItem, ctx: PlanContext) -> str:
        return f"imagenet-ood/{item.wnid}"

    def write_lists(self, root: Path, placed: Sequence[Placed], subsets: dict[str, Sequence[Placed]],
                    difficulty: dict | None = None) -> None:
        write_list(root / "imagenet-ood" / "file_list.txt", (self.inside(p) for p in placed))
        for sub, members in subsets.items():
            write_list(root / "imagenet-ood" / f"file_list_{sub}.txt", (self.inside(p) for p in members))
