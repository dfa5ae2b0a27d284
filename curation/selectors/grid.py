"""Reads for grid review: gold accuracy per annotator on each screen (issue 30: does speed cost
accuracy?)."""
from __future__ import annotations

from curation.models import AuditLog, Review
from curation.models.review import GridPreference
from pipelines.review.agreement import wilson_interval

PAGE_ACTION = "review_grid_page"  # the audit entry of a grid page (curation.services.review_grid)


def grid_tile_of(user, default: int) -> int:
    """The tile side the annotator chose last (``default`` until they choose one)."""
    return GridPreference.objects.filter(annotator=user).values_list("tile_px", flat=True).first() or default


def gold_accuracy_by_screen() -> list[dict]:
    """Per annotator with gold reviews: how many gold images they answered on the grid and on
    the single-image screen, how many right, the accuracy and its Wilson 95% interval. A review
    is the grid's when a grid page's audit entry lists it."""
    grid_ids: set[int] = set()
    for reviews in AuditLog.objects.filter(action=PAGE_ACTION).values_list("data__reviews", flat=True).iterator():
        grid_ids.update(reviews or [])
    rows: dict[str, dict] = {}
    for pk, name, ok in Review.objects.filter(is_gold=True).values_list("pk", "annotator__username", "gold_correct").iterator():
        r = rows.setdefault(name, {"annotator": name, "grid_n": 0, "grid_ok": 0, "single_n": 0, "single_ok": 0})
        screen = "grid" if pk in grid_ids else "single"
        r[f"{screen}_n"] += 1
        r[f"{screen}_ok"] += 1 if ok else 0
    for r in rows.values():
        for screen in ("grid", "single"):
            n, k = r[f"{screen}_n"], r[f"{screen}_ok"]
            r[f"{screen}_acc"] = k / n if n else None
            r[f"{screen}_ci"] = wilson_interval(k, n) if n else None
    return sorted(rows.values(), key=lambda r: r["annotator"])
