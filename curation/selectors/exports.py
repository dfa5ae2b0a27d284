"""Reads of the exports (docs/exports.md)."""
from __future__ import annotations


def export_list(*, limit: int = 100):
    """Exports, newest first; each carries ``sanity``: the random-weight sanity check of its most
    recent evaluation that ran one (the OOD set's verdict and what differs), or None."""
    from curation.models import EvaluationRun, Export

    exports = list(Export.objects.select_related("created_by", "job").order_by("-created_at")[:limit])
    latest: dict[int, dict] = {}
    for run in (EvaluationRun.objects.filter(export__in=exports, status=EvaluationRun.Status.DONE, results__has_key="sanity")
                .order_by("-finished_at").only("pk", "export_id", "results")):
        sanity = run.results.get("sanity") or {}
        if run.export_id in latest or sanity.get("status") != "done" or "ood" not in sanity.get("sets", {}):
            continue
        verdict = sanity["sets"]["ood"]
        latest[run.export_id] = {"run": run.pk, "separable": verdict["separable"], "off_chance": verdict["off_chance"],
                                 "detectors": len(verdict["detectors"]), "differs": sanity.get("differs", {}).get("ood", []),
                                 "weights": sanity.get("weights", "")}
    for e in exports:
        e.sanity = latest.get(e.pk)
    return exports
