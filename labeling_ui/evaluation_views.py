"""Evaluation results for people: the list of runs, one run's page (models x detectors, per-class
table, unit tests, plots drawn by the worker), CSV/JSON downloads. Researchers and curators."""
from __future__ import annotations

import io

from django.http import Http404, HttpResponse
from django.shortcuts import get_object_or_404, render
from django.views.decorators.http import require_GET

from curation import selectors
from curation.models import EvaluationRun
from curation.roles import CURATOR, RESEARCHER
from labeling_ui.http import attachment
from labeling_ui.review_views import role_required
from pipelines.evaluation.run import LEADERBOARD_CSV_COLUMNS, leaderboard, leaderboard_rows
from pipelines.export import csv_cells


@require_GET
@role_required(CURATOR, RESEARCHER)
def evaluations(request):
    return render(request, "labeling_ui/evaluations.html", {"runs": selectors.evaluation_list()})


def _pct(x):
    return "" if x is None else f"{100 * x:.1f}"


@require_GET
@role_required(CURATOR, RESEARCHER)
def evaluation(request, run_id: int):
    run = get_object_or_404(selectors.evaluation_list(), pk=run_id)
    res = run.results or {}
    info = res.get("detectors", {})
    names = res.get("class_names", {})
    models = []
    for model, r in res.get("models", {}).items():
        rows, classes, units, subsplits = [], {}, {}, {}
        for det, e in r["detectors"].items():
            label = info.get(det, {}).get("label", det)
            row = {"det": det, "label": label, "paper": info.get(det, {}).get("paper", ""), "e": e,
                   "reference": info.get(det, {}).get("reference", ""),
                   "settings": info.get(det, {}).get("settings", "")}
            if e["status"] == "ok":
                row.update(auroc=_pct(e["pooled"]["auroc"]), fpr_id=_pct(e["pooled"]["fpr95_id_positive"]),
                           fpr_ood=_pct(e["pooled"]["fpr95_ood_positive"]), mean_fpr=_pct(e["mean_class"]["fpr95_id_positive"]),
                           aupr_in=_pct(e["pooled"]["aupr_in"]), aupr_out=_pct(e["pooled"]["aupr_out"]),
                           failure=_pct(e.get("failure_auroc")), moaa=_pct(e.get("moaa")),
                           unit_failed=e.get("unit_tests_failed"), unit_total=len(e.get("unit_tests") or {}))
                for wnid, c in e["classes"].items():
                    classes.setdefault(wnid, {"wnid": wnid, "name": names.get(wnid, wnid), "n": c["n"], "fpr": {}, "auroc": {}})
                    classes[wnid]["fpr"][det] = _pct(c["fpr95_id_positive"])
                    classes[wnid]["auroc"][det] = _pct(c["auroc"])
                for sub, c in (e.get("subsplits") or {}).items():
                    subsplits.setdefault(sub, {"name": sub, "n": c["n"], "auroc": {}, "fpr": {}})
                    subsplits[sub]["auroc"][det] = _pct(c["auroc"])
                    subsplits[sub]["fpr"][det] = _pct(c["fpr95_id_positive"])
                for test, t in (e.get("unit_tests") or {}).items():
                    units.setdefault(test, {"name": test, "n": t["n"], "fpr": {}, "failed": {}})
                    units[test]["fpr"][det] = _pct(t["fpr95_id_positive"])
                    units[test]["failed"][det] = t["failed"]
            rows.append(row)
        ok = [row for row in rows if row["e"]["status"] == "ok"]
        fsx_rows = [{"label": row["label"], "det": row["det"], "pooled": _pct(row["e"]["fs_x"]["pooled"]["auroc"]),
                     "fpr": _pct(row["e"]["fs_x"]["pooled"]["fpr95_id_positive"]),
                     "sources": [_pct(m["auroc"]) for m in row["e"]["fs_x"]["per_source"].values()]}
                    for row in ok if row["e"].get("fs_x")]
        fsx_sources = list(ok[0]["e"]["fs_x"]["per_source"]) if fsx_rows else []
        shifted = []
        for name in (ok[0]["e"].get("full_spectrum") or {}) if ok else []:
            acc = (r.get("shifted") or {}).get(name) or {}
            shifted.append({"name": name, "n": acc.get("n"), "accuracy": _pct(acc.get("accuracy")), "rows": [
                {"label": row["label"], "det": row["det"],
                 **{view: _pct(row["e"]["full_spectrum"][name][view]["auroc"]) for view in ("standard", "full_spectrum", "shift")},
                 "fpr_full": _pct(row["e"]["full_spectrum"][name]["full_spectrum"]["fpr95_id_positive"])}
                for row in ok if row["e"].get("full_spectrum")]})
        severity = [{"label": row["label"], "levels": [_pct(lv["auroc"]) for lv in row["e"]["severity"]]} for row in ok if row["e"].get("severity")]
        plots = res.get("plots", {}).get(model, {})
        models.append({"name": model, "r": r, "rows": rows, "ok": ok, "accuracy": _pct(r.get("id_accuracy")),
                       "classes": sorted(classes.values(), key=lambda c: c["name"].lower()),
                       "units": sorted(units.values(), key=lambda u: u["name"]), "severity": severity, "plots": plots,
                       "subsplits": [subsplits[k] for k in ("hard", "easy") if k in subsplits], "shifted": shifted,
                       "fsx_rows": fsx_rows, "fsx_sources": fsx_sources,
                       "bars": [(row["label"], plots.get("bars", {}).get(row["det"])) for row in ok if plots.get("bars", {}).get(row["det"])]})
    board = leaderboard(res) if len(res.get("models", {})) > 1 else None
    if board:
        for d in board["detectors"]:
            for x in d["rows"]:
                x["auroc_pct"], x["fpr_pct"], x["accuracy_pct"] = _pct(x["auroc"]), _pct(x["fpr95"]), _pct(x["accuracy"])
        for x in board["models"]:
            x["accuracy_pct"] = _pct(x["accuracy"])
            x["head_kind"] = ((res["models"].get(x["model"]) or {}).get("head_used") or {}).get("kind", "")  # zero-shot or classifier
    return render(request, "labeling_ui/evaluation.html", {"run": run, "models": models, "sanity": _sanity_view(res, info),
                                                           "board": board})


@require_GET
@role_required(CURATOR, RESEARCHER)
def evaluation_leaderboard_csv(request, run_id: int):
    """The models ranked per detector (pipelines.evaluation.run.leaderboard), as CSV."""
    run = get_object_or_404(selectors.evaluation_list(), pk=run_id)
    buf = io.StringIO()
    writer = csv_cells.DictWriter(buf, fieldnames=LEADERBOARD_CSV_COLUMNS, extrasaction="ignore")
    writer.writeheader()
    for row in leaderboard_rows(leaderboard(run.results or {})):
        writer.writerow(row)
    response = HttpResponse(buf.getvalue(), content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = attachment(f"evaluation-{run.pk}-leaderboard.csv")
    return response


def _sanity_view(res: dict, info: dict) -> dict | None:
    """The random-weight sanity check as rows: per set, detector, mean and spread of AUROC (%)."""
    sanity = res.get("sanity")
    if not sanity:
        return None
    if sanity.get("status") != "done":
        return {"status": sanity.get("status"), "note": sanity.get("note", "")}
    sets = []
    for role, verdict in sanity["sets"].items():
        sets.append({"role": role, "separable": verdict["separable"], "differs": sanity.get("differs", {}).get(role, []),
                     "rows": [{"label": info.get(d, {}).get("label", d), "det": d, "mean": _pct(t["mean"]), "std": _pct(t["std"]),
                               "off": d in verdict["off_chance"], "aurocs": ", ".join(_pct(a) for a in t["aurocs"])}
                              for d, t in verdict["detectors"].items()]})
    return {"status": "done", "weights": sanity["weights"], "threshold": _pct(sanity["threshold"]), "sets": sets,
            "notes": sanity.get("notes", []), "errors": sanity.get("errors", {}), "n": sanity.get("n", {}),
            "low_level": sanity.get("low_level", {})}


@require_GET
@role_required(CURATOR, RESEARCHER)
def evaluation_csv(request, run_id: int):
    run = get_object_or_404(selectors.evaluation_list(), pk=run_id)
    buf = io.StringIO()
    writer = csv_cells.DictWriter(buf, fieldnames=selectors.EVAL_CSV_COLUMNS, extrasaction="ignore")
    writer.writeheader()
    for row in selectors.evaluation_csv_rows(run):
        writer.writerow(row)
    response = HttpResponse(buf.getvalue(), content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = attachment(f"evaluation-{run.pk}.csv")
    return response


@require_GET
@role_required(CURATOR, RESEARCHER)
def evaluation_json(request, run_id: int):
    run = get_object_or_404(selectors.evaluation_list(), pk=run_id)
    response = HttpResponse(selectors.evaluation_json(run), content_type="application/json")
    response["Content-Disposition"] = attachment(f"evaluation-{run.pk}.json")
    return response


@require_GET
@role_required(CURATOR, RESEARCHER)
def evaluation_plot(request, run_id: int, rel: str):
    from curation.services.evaluation import evaluation_plot_file

    run = get_object_or_404(EvaluationRun, pk=run_id)
    path = evaluation_plot_file(run=run, rel=rel)  # per-detector plots are drawn when first asked for
    if path is None or not path.is_file():
        raise Http404("no such plot in this run")
    response = HttpResponse(path.read_bytes(), content_type="image/svg+xml")
    response["Cache-Control"] = "private, max-age=3600"
    response["Content-Security-Policy"] = "default-src 'none'; style-src 'unsafe-inline'"
    return response
