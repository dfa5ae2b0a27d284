"""OpenOOD's layout (Zhang et al., 2023): ``openood/images/<wnid>/<file>`` and ``imglist.txt``
lines ``images/... -1``: its evaluator reads ``<path> <label>`` lists, -1 marking OOD."""
from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from . import ExportItem, Layout, Placed, PlanContext, register_layout, write_list


@register_layout
class OpenOOD(Layout):
    name = "openood"
    description = "OpenOOD: openood/images/<wnid>/<file>, imglist.txt with label -1"
    reference = "Zhang et al., OpenOOD v1.5, 2023"

    def folder(self, item: ExportItem, ctx: PlanContext) -> str:
        return f"openood/images/{item.wnid}"

    def listable(self, name: str) -> str:
        # OpenOOD's loader splits each imglist line on spaces, and understands no quoting: any
        # whitespace in a file name becomes '_' too (the original name stays in decisions.csv)
        return re.sub(r"\s", "_", super().listable(name))

    def write_lists(self, root: Path, placed: Sequence[Placed], subsets: dict[str, Sequence[Placed]],
                    difficulty: dict | None = None) -> None:
        write_list(root / "openood" / "imglist.txt", (self.inside(p) + " -1" for p in placed))
        for sub, members in subsets.items():
            write_list(root / "openood" / f"imglist_{sub}.txt", (self.inside(p) + " -1" for p in members))
