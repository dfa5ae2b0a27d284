"""One model's evaluation: every requested detector fitted on the ID fit set and scored on the ID
test set, the OOD set (pooled and per OOD class) and the OOD unit tests, with the figures the
papers report. Plain data in, a JSON-ready dict out (NaN becomes None).

What is reported per detector (REFERENCE.md, Metrics):
- pooled AUROC, AUPR-In/Out, FPR@95 in NINCO's (ID positive) and OpenOOD's (OOD positive) conventions;
- per OOD class the same figures, and their mean over classes (NINCO's headline FPR);
- per unit test NINCO's FPR and whether it is above 10% (failed);
- failure-detection AUROC (ImageNet-OOD) and mean outlier-aware accuracy (Wang et al.),
  both from the ID test set's labels;
- C-OOD severity levels when the OOD set has enough classes (pipelines.severity).
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Callable

import numpy as np

from .detectors import DETECTORS, Detector, DetectorError, Head, Outputs, get_detector
from .metrics import failure_detection_auroc, mean_outlier_aware_accuracy, ood_metrics
from .severity import severity_levels, severity_requirements

UNIT_TEST_FPR_LIMIT = 0.10  # NINCO: a detector fails a unit test when its FPR there is above 10%


@dataclass
class EvalInputs:
    fit: Outputs
    id_test: Outputs  # labels: ImageNet-1K class index, -1 where the ID class is not one of the model's
    ood: Outputs
    ood_groups: np.ndarray  # OOD class (wnid) per OOD image
    unit_tests: Outputs | None = None
    unit_groups: np.ndarray | None = None  # unit test name per image
    head: Head | None = None


def clean(value):
    """NaN/inf -> None, numpy scalars -> Python, recursively (JSON and PostgreSQL jsonb refuse NaN)."""
    if isinstance(value, dict):
        return {k: clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [clean(v) for v in value]
    if isinstance(value, (np.floating, float)):
        v = float(value)
        return v if math.isfinite(v) else None
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.bool_):
        return bool(value)
    return value


def _group_metrics(id_scores: np.ndarray, scores: np.ndarray, groups: np.ndarray) -> dict[str, dict]:
    out = {}
    for g in sorted(set(groups.tolist())):
        sel = scores[groups == g]
        m = ood_metrics(id_scores, sel)
        out[g] = {"n": int(len(sel)), **{k: m[k] for k in ("auroc", "aupr_in", "aupr_out", "fpr95_id_positive", "fpr95_ood_positive")}}
    return out


def evaluate_model(inputs: EvalInputs, methods: list[tuple[str, dict]], *, severity_window: int = 1000, seed: int = 0,
                   progress: Callable[[str], None] | None = None) -> dict:
    """Evaluate every (detector name, params) in ``methods``. A detector that cannot be fitted or
    scored is reported as failed with its error; the others go on."""
    labels = inputs.id_test.labels if inputs.id_test.labels is not None else np.full(len(inputs.id_test), -1)
    labelled = labels >= 0
    pred = inputs.id_test.logits.argmax(axis=1)
    correct = pred == labels
    result: dict = {
        "n_fit": len(inputs.fit), "n_id_test": len(inputs.id_test), "n_ood": len(inputs.ood),
        "n_unit_tests": len(inputs.unit_tests) if inputs.unit_tests is not None else 0,
        "id_labelled": int(labelled.sum()),
        "id_accuracy": float(correct[labelled].mean()) if labelled.any() else None,
        "ood_classes": int(len(set(inputs.ood_groups.tolist()))),
        "detectors": {},
    }
    class_sizes = {g: int(n) for g, n in zip(*np.unique(inputs.ood_groups, return_counts=True))}
    result["severity_message"] = severity_requirements(class_sizes, severity_window)
    for name, params in methods:
        started = time.perf_counter()
        entry: dict = {"status": "ok", "error": "", "notes": [], "params": dict(params)}
        try:
            det: Detector = get_detector(name, **params)
            entry["params"] = dict(det.params)
            det.fit(inputs.fit, inputs.head)
            id_scores = det.score(inputs.id_test)
            ood_scores = det.score(inputs.ood)
            entry["pooled"] = ood_metrics(id_scores, ood_scores)
            entry["classes"] = _group_metrics(id_scores, ood_scores, inputs.ood_groups)
            per_class = list(entry["classes"].values())
            entry["mean_class"] = {k: float(np.mean([c[k] for c in per_class]))
                                   for k in ("auroc", "fpr95_id_positive", "fpr95_ood_positive")}
            if labelled.any():
                entry["failure_auroc"] = failure_detection_auroc(id_scores[labelled], correct[labelled], ood_scores)
                entry["moaa"] = mean_outlier_aware_accuracy(id_scores[labelled], correct[labelled], ood_scores)
            else:
                entry["failure_auroc"] = entry["moaa"] = None
                entry["notes"].append("failure-detection AUROC and mOAA need ID test labels of the model's classes")
            if inputs.unit_tests is not None and len(inputs.unit_tests):
                unit_scores = det.score(inputs.unit_tests)
                tests = _group_metrics(id_scores, unit_scores, inputs.unit_groups)
                for t in tests.values():
                    t["failed"] = bool(t["fpr95_id_positive"] > UNIT_TEST_FPR_LIMIT)
                entry["unit_tests"] = tests
                entry["unit_tests_failed"] = sorted(k for k, t in tests.items() if t["failed"])
            if not result["severity_message"]:
                sev = severity_levels(id_scores, {g: ood_scores[inputs.ood_groups == g] for g in class_sizes},
                                      window=severity_window, seed=seed)
                entry["severity"] = sev.levels
            entry["notes"] += det.notes
        except (DetectorError, ValueError, np.linalg.LinAlgError) as exc:
            entry = {"status": "failed", "error": f"{type(exc).__name__}: {exc}", "notes": [], "params": entry["params"]}
        entry["seconds"] = round(time.perf_counter() - started, 3)
        result["detectors"][name] = entry
        if progress:
            progress(name)
    return clean(result)


def detector_info(names: list[str]) -> dict[str, dict]:
    """Labels and citations for the result page (stored with the results: the web process
    reads them from there)."""
    return {n: {"label": DETECTORS[n].label, "paper": DETECTORS[n].paper} for n in names if n in DETECTORS}
