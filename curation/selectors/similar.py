"""Reads for the find-similar page (docs/browse.md): what each neighbour's tile shows."""
from __future__ import annotations

from curation.models import Image
from pipelines.names import class_label


def neighbour_rows(neighbours) -> list[dict]:
    """Tile facts for ``neighbours`` (objects with ``image_id`` and ``similarity``), in order: one
    query whatever their number."""
    ids = [n.image_id for n in neighbours]
    rows = {r["id"]: r for r in Image.objects.filter(pk__in=ids).values(
        "id", "relative_path", "source__name", "excluded_reason", "candidate_class__wnid", "candidate_class__synset_name",
        "candidate_class__folder", "review_item__status", "review_item__final_decision")}
    out = []
    for n in neighbours:
        r = rows.get(n.image_id)
        if r is None:
            continue
        out.append({**r, "similarity": n.similarity,
                    "class_label": class_label(r["candidate_class__wnid"], r["candidate_class__synset_name"], r["candidate_class__folder"])
                    if r["candidate_class__folder"] else "(no class)"})
    return out
