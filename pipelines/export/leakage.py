"""What an export would leak (the computation; curation.services.exports gathers the inputs and
records the report): an image identical to, or a near-duplicate of (feature cosine at least a
threshold and the pixel check, as in the duplicate search), an ID reference image or an image
already exported in another split. Images without features cannot be checked and are named."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from pipelines.features.near_dups import nearest, normalise


@dataclass(frozen=True)
class Entry:
    """An image taking part in the check: what the report calls it, its bytes' digest, and its
    row in the feature matrix passed alongside (None when it has no features)."""

    image_id: int
    label: str  # "source:relative/path"
    sha256: str
    row: int | None = None
    against: str = ""  # references only: "id_reference", or "export NAME-vN (split S)"


def find_leaks(items: Sequence[Entry], refs: Sequence[Entry], *, item_x: np.ndarray, ref_x: np.ndarray, threshold: float,
               looks_same: Callable[[Entry, Entry], bool], model_name: str) -> list[dict]:
    """One violation per leaking item (identical bytes first, the nearest reference otherwise),
    then one "no_features" entry per item that could not be compared by features."""
    by_sha: dict[str, Entry] = {}
    for r in refs:
        by_sha.setdefault(r.sha256, r)
    violations, unchecked = [], []
    for it in items:
        hit = by_sha.get(it.sha256)
        if hit is not None:
            kind = "same_image" if hit.image_id == it.image_id else "identical_file"
            violations.append({"image": it.image_id, "path": it.label, "kind": kind, "with": hit.label, "against": hit.against,
                               "similarity": 1.0})
        if it.row is None:
            unchecked.append({"image": it.image_id, "path": it.label, "kind": "no_features", "with": "",
                              "against": f"run the image pipeline with {model_name}", "similarity": None})
    flagged = {v["image"] for v in violations}
    queries = [(it, it.row) for it in items if it.row is not None and it.image_id not in flagged]
    reference = [(r, r.row) for r in refs if r.row is not None]
    if queries and reference:
        qx = normalise(item_x[[row for _it, row in queries]])
        rx = normalise(ref_x[[row for _r, row in reference]])
        sims, idx = nearest(qx, rx)
        for (it, _row), sim, j in zip(queries, sims, idx):
            if j < 0 or sim < threshold:
                continue
            ref = reference[int(j)][0]
            if looks_same(it, ref):
                violations.append({"image": it.image_id, "path": it.label, "kind": "near_duplicate", "with": ref.label,
                                   "against": ref.against, "similarity": round(float(sim), 4)})
    return violations + unchecked
