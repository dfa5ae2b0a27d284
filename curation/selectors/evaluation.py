"""Reads of the evaluation runs: the list, a run's figures as CSV rows and JSON, its plot files."""
from __future__ import annotations

EVAL_CSV_COLUMNS = ["model", "detector", "status", "set", "group", "name", "n", "auroc", "aupr_in", "aupr_out",
                    "fpr95_id_positive", "fpr95_ood_positive", "unit_test_failed", "failure_auroc", "moaa", "id_accuracy",
                    "fpr_method", "oaa_convention", "decoder", "aupr_method", "settings"]
_METRICS = ("auroc", "aupr_in", "aupr_out", "fpr95_id_positive", "fpr95_ood_positive")


def evaluation_list():
    from curation.models import EvaluationRun

    return EvaluationRun.objects.select_related("export", "unit_tests", "job", "created_by").order_by("-created_at")


def evaluation_csv_rows(run) -> list[dict]:
    """Every figure of a run as flat rows: per (model, detector) the pooled OOD figures, the mean
    over OOD classes, each OOD class, and each unit test. ``settings`` is the detector's settings
    as the result page shows them (a CLIP detector's temperature, e.g. ``temperature=0.01``)."""
    res = run.results or {}
    names = res.get("class_names", {})
    info = res.get("detectors", {})
    rows = []
    for model, r in res.get("models", {}).items():
        for det, e in r.get("detectors", {}).items():
            conv = r.get("conventions") or {}
            base = {"model": model, "detector": det, "status": e["status"], "fpr_method": conv.get("fpr_method", "exact"),
                    "oaa_convention": conv.get("oaa_convention", "paper"), "decoder": res.get("decoder", "pil"),
                    "aupr_method": conv.get("aupr_method", "average-precision"),
                    "settings": (info.get(det) or {}).get("settings", "")}
            if e["status"] != "ok":
                rows.append({**base, "set": "ood", "group": "pooled", "name": e.get("error", "")})
                continue
            rows.append({**base, "set": "ood", "group": "pooled", "name": run.ood_label, "n": e["pooled"]["n_ood"],
                         **{k: e["pooled"][k] for k in _METRICS}, "failure_auroc": e.get("failure_auroc"), "moaa": e.get("moaa"),
                         "id_accuracy": r.get("id_accuracy")})
            rows.append({**base, "set": "ood", "group": "mean_over_classes", "name": f"{len(e['classes'])} classes",
                         "n": len(e["classes"]), **e["mean_class"]})
            for role, verdict in ((res.get("sanity") or {}).get("sets") or {}).items():
                t = verdict["detectors"].get(det)
                if t:
                    rows.append({**base, "set": "sanity_random_weights", "group": role,
                                 "name": res["sanity"]["weights"], "n": len(t["aurocs"]), "auroc": t["mean"]})
            fsx = e.get("fs_x")
            if fsx:
                for group, m in (("pooled", fsx["pooled"]), *fsx["per_source"].items()):
                    rows.append({**base, "set": "fs_x", "group": group, "name": f"ImageNet-FS-X {group}", "n": m["n_id"] + m["n_ood"],
                                 **{k: m[k] for k in _METRICS}})
            for name, views in (e.get("full_spectrum") or {}).items():
                for view in ("full_spectrum", "shift"):
                    m = views[view]
                    rows.append({**base, "set": view, "group": name, "name": f"{run.ood_label} + {name}" if view == "full_spectrum"
                                 else f"ID test vs {name}", "n": m["n_id"] + m["n_ood"], **{k: m[k] for k in _METRICS},
                                 "id_accuracy": (r.get("shifted", {}).get(name) or {}).get("accuracy") if view == "shift" else None})
            for sub, c in (e.get("subsplits") or {}).items():
                rows.append({**base, "set": "ood_subsplit", "group": sub, "name": f"{run.ood_label} {sub}", "n": c["n"],
                             **{k: c[k] for k in _METRICS}})
            for wnid, c in e["classes"].items():
                rows.append({**base, "set": "ood", "group": wnid, "name": names.get(wnid, wnid), "n": c["n"], **{k: c[k] for k in _METRICS}})
            for test, t in (e.get("unit_tests") or {}).items():
                rows.append({**base, "set": "unit_test", "group": test, "name": test, "n": t["n"],
                             **{k: t[k] for k in _METRICS}, "unit_test_failed": t["failed"]})
    return rows


def evaluation_json(run) -> str:
    import json

    return json.dumps({"id": run.pk, "export": run.export_version, "unit_tests": run.unit_tests.label if run.unit_tests else None,
                       "id_test": run.id_test, "id_fit": run.id_fit, "models": run.model_names, "methods": run.methods,
                       "config": run.config, "code_version": run.code_version, "status": run.status, "message": run.message,
                       "created_at": run.created_at.isoformat(), "results": run.results}, indent=2, sort_keys=True)


def evaluation_plot_path(run, rel: str):
    """The path of one of a run's plot files, or None when ``rel`` is not one of them."""
    from pathlib import Path

    from django.conf import settings

    allowed = set()
    for p in (run.results or {}).get("plots", {}).values():
        allowed.update(v for k, v in p.items() if k != "bars")
        allowed.update(p.get("bars", {}).values())
    if rel not in allowed:
        return None
    return Path(settings.EVAL_ROOT) / "runs" / str(run.pk) / rel
