"""The sanity check's low-level side (pipelines/evaluation/low_level.py): each set's statistics and how
every non-ID set differs from the ID test set, on real files."""
from __future__ import annotations

import numpy as np
from PIL import Image

from pipelines.evaluation.low_level import low_level_report


def _files(folder, n: int, size: int, fmt: str) -> list[str]:
    folder.mkdir()
    rng = np.random.default_rng(n + size)
    out = []
    for i in range(n):
        path = folder / f"{i}.{fmt.lower()}"
        Image.fromarray(rng.integers(0, 255, (size, size, 3), dtype=np.uint8)).save(path, fmt)
        out.append(str(path))
    return out


def test_the_report_compares_every_other_set_with_the_id_test_set(tmp_path):
    paths = {"id_test": _files(tmp_path / "t", 3, 64, "PNG"), "id_fit": _files(tmp_path / "f", 2, 64, "JPEG"),
             "ood": _files(tmp_path / "o", 4, 160, "JPEG")}
    stats, differs = low_level_report(paths)
    assert list(stats) == ["id_test", "id_fit", "ood"] and stats["ood"]["n"] == 4
    assert stats["id_test"]["jpeg_share"] == 0.0 and stats["ood"]["jpeg_share"] == 1.0
    assert stats["ood"]["megapixels"] == 160 * 160 / 1e6
    assert list(differs) == ["ood"]  # the ID sets are the reference, not compared
    assert any(d.startswith("share of JPEG files: ID 0% vs 100%") for d in differs["ood"])
    assert any(d.startswith("resolution (megapixels)") for d in differs["ood"])
