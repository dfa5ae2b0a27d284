"""One model's evaluation: every requested detector fitted on the ID fit set and scored on the ID
test set, the OOD set (pooled and per OOD class) and the OOD unit tests, with the figures the
papers report. Plain data in, a JSON-ready dict out (NaN becomes None).

What is reported per detector (REFERENCE.md, Metrics):
- pooled AUROC, AUPR-In/Out, FPR@95 in NINCO's (ID positive) and OpenOOD's (OOD positive) conventions;
- per OOD class the same figures, and their mean over classes (NINCO's headline FPR);
- per unit test NINCO's FPR and whether it is above 10% (failed);
- failure-detection AUROC (ImageNet-OOD) and mean outlier-aware accuracy (Wang et al.),
  both from the ID test set's labels;
- C-OOD severity levels when the OOD set has enough classes (pipelines.evaluation.severity).

Which convention each figure follows (``Conventions``; docs/evaluation.md lists them with
their sources) is stored with the results and shown on the result page.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from pipelines.evaluation.detectors import DETECTORS, Detector, DetectorError, Head, Outputs, TextHead, get_detector, params_of
from pipelines.evaluation.metrics import (
    AUPR_METHODS,
    FPR_METHODS,
    OAA_CONVENTIONS,
    OAA_GRID,
    TPR_LEVEL,
    failure_detection_auroc,
    full_spectrum_metrics,
    mean_outlier_aware_accuracy,
    ood_metrics,
)
from pipelines.evaluation.severity import ESTIMATION, GROUP_RULE, PER_CLASS, check_protocol, severity_levels, severity_requirements

UNIT_TEST_FPR_LIMIT = 0.10  # NINCO: a detector fails a unit test when its FPR there is above 10%


@dataclass(frozen=True)
class Conventions:
    """How the figures are computed where the papers' codes differ (docs/evaluation.md)."""

    fpr_method: str = "exact"  # or "ninco-interpolated" (NINCO's code: np.quantile)
    aupr_method: str = "average-precision"  # or "openood" (the trapezoid under scikit-learn's PR curve)
    oaa_convention: str = "paper"  # or "code" (Wang et al.'s compute_oaa)
    severity_protocol: str = "c-ood"  # or "small-data" (ours, labelled as not C-OOD's)
    severity_per_class: int = PER_CLASS
    severity_estimation: int = ESTIMATION

    def __post_init__(self):
        for value, allowed, what in ((self.fpr_method, FPR_METHODS, "fpr-method"), (self.aupr_method, AUPR_METHODS, "aupr-method"),
                                     (self.oaa_convention, OAA_CONVENTIONS, "oaa-convention")):
            if value not in allowed:
                raise ValueError(f"{what}: {value!r} is not one of {', '.join(allowed)}")
        check_protocol(self.severity_protocol, self.severity_per_class, self.severity_estimation)

    def describe(self) -> dict:
        """Plain words for the result page, CSV/JSON."""
        return {
            "fpr_method": self.fpr_method,
            "fpr95_id_positive": ("threshold at NumPy's interpolated 5% quantile of ID scores, as NINCO's code"
                                  if self.fpr_method == "ninco-interpolated" else
                                  "threshold at the exact order statistic keeping >= 95% of ID scores"),
            "aupr_method": self.aupr_method,
            "aupr": ("trapezoid under scikit-learn's precision-recall curve, as OpenOOD v1.5's metrics.auc(recall, precision)"
                     if self.aupr_method == "openood" else
                     "average precision (scikit-learn's average_precision_score), as NINCO"),
            "oaa_convention": self.oaa_convention,
            "moaa": ("rejected samples with a wrong prediction count as correct, misclassified ID included (Wang et al.'s code)"
                     if self.oaa_convention == "code" else
                     "rejected OOD samples count as correct (Wang et al., Fig. 10 caption)") + f"; grid: {OAA_GRID}",
            "severity_protocol": self.severity_protocol,
            "severity": (f"C-OOD's protocol: {self.severity_per_class} images per class, {self.severity_estimation} to estimate "
                         f"severity, {self.severity_per_class - self.severity_estimation} to test"
                         if self.severity_protocol == "c-ood" else
                         "small-data variant (NOT C-OOD's protocol): classes with >= 2 images split in half")
                        + f"; groups = {GROUP_RULE}",
            "tpr_level": TPR_LEVEL,
        }


@dataclass
class EvalInputs:
    fit: Outputs
    id_test: Outputs  # labels: ImageNet-1K class index, -1 where the ID class is not one of the model's
    ood: Outputs
    ood_groups: np.ndarray  # OOD class (wnid) per OOD image
    unit_tests: Outputs | None = None
    unit_groups: np.ndarray | None = None  # unit test name per image
    head: Head | None = None
    ood_subsplits: np.ndarray | None = None  # sub-split (e.g. easy / hard) per OOD image, "" where none
    id_shifted: dict[str, Outputs] = field(default_factory=dict)  # covariate-shifted ID sets by name (labels as id_test)
    # ImageNet-FS-X: the OOD-class images of the same shifted sources, keyed like id_shifted
    ood_shifted: dict[str, Outputs] = field(default_factory=dict)
    # a vision-language model's zero-shot head (its logits are logit_scale x cos(image, class text));
    # None for a classifier
    text: TextHead | None = None


ALL_SHIFTED = "all shifted sets"
ID_SOURCE = "ID source"


def _fs_x(id_scores, ood_scores, shifted: dict[str, np.ndarray], ood_shifted: dict[str, np.ndarray], fm: str,
          am: str = "average-precision") -> dict:
    """ImageNet-FS-X (paper 004 sec. 2.2): per source, its ID-class images vs its OOD-class images;
    pooled, every ID-class image (ID source and variants) vs every OOD-class image of all sources,
    one AUROC over the concatenated scores as the authors' ``test_ood(is_fullspectrum=True)``."""
    per_source = {ID_SOURCE: ood_metrics(id_scores, ood_scores, fpr_method=fm, aupr_method=am)}
    for name, scores in shifted.items():
        if name in ood_shifted:
            per_source[name] = ood_metrics(scores, ood_shifted[name], fpr_method=fm, aupr_method=am)
    pooled = ood_metrics(np.concatenate([id_scores, *shifted.values()]), np.concatenate([ood_scores, *ood_shifted.values()]),
                         fpr_method=fm, aupr_method=am)
    return {"pooled": pooled, "per_source": per_source}


def _accuracy(o: Outputs) -> dict:
    """Top-1 accuracy of the model on a labelled set (labels -1: not one of the model's classes)."""
    labels = o.labels if o.labels is not None else np.full(len(o.logits), -1)
    known = labels >= 0
    correct = o.logits.argmax(axis=1) == labels
    return {"n": int(len(labels)), "labelled": int(known.sum()),
            "accuracy": float(correct[known].mean()) if known.any() else None}


def restrict_classes(outputs: Outputs, keep: np.ndarray) -> Outputs:
    """The outputs of a classifier restricted to the classes ``keep`` (indices into its logits):
    their logits only, in that order, and labels renumbered 0..len(keep)-1 (-1 for any other
    class). Features are unchanged. For semantic splits (ImageNet-X), where one model's classes
    are divided into an ID half and an OOD half."""
    keep = np.asarray(keep, dtype=np.int64)
    labels = None
    if outputs.labels is not None:
        remap = np.full(outputs.logits.shape[1], -1, dtype=np.int64)
        remap[keep] = np.arange(len(keep))
        labels = np.where(outputs.labels >= 0, remap[np.clip(outputs.labels, 0, None)], -1)
    return Outputs(features=outputs.features, logits=outputs.logits[:, keep], labels=labels, extra=outputs.extra, local=outputs.local)


def restrict_inputs(inputs: "EvalInputs", keep: np.ndarray) -> "EvalInputs":
    """Every set of an evaluation restricted to the classes ``keep`` (``restrict_classes``), and the
    last layer with them: a semantic split's classifier deciding among the ID half alone."""
    def r(o: Outputs | None) -> Outputs | None:
        return restrict_classes(o, keep) if o is not None else None
    return EvalInputs(fit=restrict_classes(inputs.fit, keep), id_test=restrict_classes(inputs.id_test, keep),
                      ood=restrict_classes(inputs.ood, keep), ood_groups=inputs.ood_groups, unit_tests=r(inputs.unit_tests),
                      unit_groups=inputs.unit_groups, head=inputs.head.restricted(keep) if inputs.head is not None else None,
                      ood_subsplits=inputs.ood_subsplits, id_shifted={k: restrict_classes(o, keep) for k, o in inputs.id_shifted.items()},
                      ood_shifted={k: restrict_classes(o, keep) for k, o in inputs.ood_shifted.items()},
                      text=inputs.text.restricted(keep) if inputs.text is not None else None)


def restrict_to_classes(inputs: EvalInputs, wnids: Sequence[str], *, set_name: str,
                        input_level: bool = False) -> tuple[EvalInputs, dict]:
    """A semantic split evaluated as ImageNet-X does: every set's logits and the last layer kept
    for the ImageNet-1K classes ``wnids`` (the ID half, ``restrict_inputs``), and the record the
    results carry of it, saying what the figures then measure. ``input_level``: the run has
    input-level scores (ODIN), which come from the full model."""
    from pipelines.features.classifiers import imagenet_1k_classes

    index = {w: i for i, w in enumerate(imagenet_1k_classes()[0])}
    outside = [w for w in wnids if w not in index]
    if outside:
        raise ValueError(f"restrict logits: {len(outside)} class(es) of {set_name} are not ImageNet-1K classes ({', '.join(outside[:5])})")
    keep = np.array([index[w] for w in wnids], dtype=np.int64)
    if inputs.text is not None:  # a zero-shot head: prompted with the ID names only, as ImageNet-X runs CLIP
        note = (f"zero-shot head over the {len(wnids)} class names of {set_name} only: the model was never told the "
                "OOD half's names, so this measures novelty as ImageNet-X does")
    else:
        note = (f"logits restricted to the {len(wnids)} classes of {set_name}: the classifier "
                "was trained on all of its classes, the OOD half included, so this measures fine-grained separation "
                "of classes it has seen, not novelty (as ImageNet-X's split of ImageNet-1K)"
                + ("; input-level scores (ODIN) come from the full model" if input_level else ""))
    record = {"set": set_name, "classes": len(wnids), "note": note}
    return restrict_inputs(inputs, keep), record


def clean(value: Any) -> Any:
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


def _group_metrics(id_scores: np.ndarray, scores: np.ndarray, groups: np.ndarray, fpr_method: str = "exact",
                   aupr_method: str = "average-precision") -> dict[str, dict]:
    out = {}
    for g in sorted(set(groups.tolist())):
        sel = scores[groups == g]
        m = ood_metrics(id_scores, sel, fpr_method=fpr_method, aupr_method=aupr_method)
        out[g] = {"n": int(len(sel)), **{k: m[k] for k in ("auroc", "aupr_in", "aupr_out", "fpr95_id_positive", "fpr95_ood_positive")}}
    return out


def evaluate_model(inputs: EvalInputs, methods: list[tuple[str, dict]], *, severity_window: int = 1000, seed: int = 0,
                   progress: Callable[[str], None] | None = None, conventions: Conventions | None = None) -> dict:
    """Evaluate every (detector name, params) in ``methods``. A detector that cannot be fitted or
    scored is reported as failed with its error; the others go on."""
    conv = conventions or Conventions()
    fm, am = conv.fpr_method, conv.aupr_method
    labels = inputs.id_test.labels if inputs.id_test.labels is not None else np.full(len(inputs.id_test), -1)
    labelled = labels >= 0
    pred = inputs.id_test.logits.argmax(axis=1)
    correct = pred == labels
    result: dict = {
        "n_fit": len(inputs.fit), "n_id_test": len(inputs.id_test), "n_ood": len(inputs.ood),
        "n_unit_tests": len(inputs.unit_tests) if inputs.unit_tests is not None else 0,
        "id_labelled": int(labelled.sum()),
        "id_accuracy": float(correct[labelled].mean()) if labelled.any() else None,
        # per ID class (its index in the model's head): the share of its test images predicted as it
        "id_accuracy_per_class": {str(int(c)): float(correct[labels == c].mean()) for c in np.unique(labels[labelled])},
        "ood_classes": int(len(set(inputs.ood_groups.tolist()))),
        "detectors": {},
        "conventions": conv.describe(),
    }
    if inputs.id_shifted:
        result["shifted"] = {name: _accuracy(o) for name, o in inputs.id_shifted.items()}
    class_sizes = {g: int(n) for g, n in zip(*np.unique(inputs.ood_groups, return_counts=True))}
    sev_opts: dict[str, Any] = {"protocol": conv.severity_protocol, "per_class": conv.severity_per_class, "estimation": conv.severity_estimation}
    result["severity_message"] = severity_requirements(class_sizes, severity_window, **sev_opts)
    for name, params in methods:
        started = time.perf_counter()
        entry: dict = {"status": "ok", "error": "", "notes": [], "params": dict(params)}
        try:
            det: Detector = get_detector(name, **params)
            entry["params"] = dict(det.params)
            if det.needs_text:
                det.text = inputs.text  # the zero-shot head in force (None for a classifier: the detector says so)
            det.fit(inputs.fit, inputs.head)
            id_scores = det.score(inputs.id_test)
            ood_scores = det.score(inputs.ood)
            entry["pooled"] = ood_metrics(id_scores, ood_scores, fpr_method=fm, aupr_method=am)
            entry["classes"] = _group_metrics(id_scores, ood_scores, inputs.ood_groups, fm, am)
            if inputs.id_shifted:
                shifted_scores = {name: det.score(o) for name, o in inputs.id_shifted.items()}
                if len(shifted_scores) > 1:  # every shifted set together, as ImageNet-FS-X pools its sources
                    shifted_scores[ALL_SHIFTED] = np.concatenate(list(shifted_scores.values()))
                entry["full_spectrum"] = {name: full_spectrum_metrics(id_scores, sc, ood_scores, fpr_method=fm, aupr_method=am)
                                          for name, sc in shifted_scores.items()}
            if inputs.ood_shifted:
                entry["fs_x"] = _fs_x(id_scores, ood_scores, {n: det.score(o) for n, o in inputs.id_shifted.items()},
                                      {n: det.score(o) for n, o in inputs.ood_shifted.items()}, fm, am)
            if inputs.ood_subsplits is not None:
                named = inputs.ood_subsplits != ""
                entry["subsplits"] = _group_metrics(id_scores, ood_scores[named], inputs.ood_subsplits[named], fm, am)
            per_class = list(entry["classes"].values())
            entry["mean_class"] = {k: float(np.mean([c[k] for c in per_class]))
                                   for k in ("auroc", "fpr95_id_positive", "fpr95_ood_positive")}
            if labelled.any():
                entry["failure_auroc"] = failure_detection_auroc(id_scores[labelled], correct[labelled], ood_scores)
                entry["moaa"] = mean_outlier_aware_accuracy(id_scores[labelled], correct[labelled], ood_scores,
                                                            convention=conv.oaa_convention)
            else:
                entry["failure_auroc"] = entry["moaa"] = None
                entry["notes"].append("failure-detection AUROC and mOAA need ID test labels of the model's classes")
            if inputs.unit_tests is not None and len(inputs.unit_tests):
                unit_scores = det.score(inputs.unit_tests)
                assert inputs.unit_groups is not None  # given with the unit-test outputs
                tests = _group_metrics(id_scores, unit_scores, inputs.unit_groups, fm, am)
                for t in tests.values():
                    t["failed"] = bool(t["fpr95_id_positive"] > UNIT_TEST_FPR_LIMIT)
                entry["unit_tests"] = tests
                entry["unit_tests_failed"] = sorted(k for k, t in tests.items() if t["failed"])
            if not result["severity_message"]:
                sev = severity_levels(id_scores, {g: ood_scores[inputs.ood_groups == g] for g in class_sizes},
                                      window=severity_window, seed=seed, **sev_opts)
                entry["severity"] = sev.levels
                result["severity_info"] = {"groups": sev.groups, "window": sev.window, "protocol": sev.protocol,
                                           "classes_used": sev.classes_used, "classes_dropped": sev.classes_dropped,
                                           "notes": sev.notes}
            entry["notes"] += det.notes
        except DetectorError as exc:  # cannot run on these inputs (too few fit images, no last layer, ...): why, in one line
            entry = {"status": "skipped", "error": str(exc).splitlines()[0] if str(exc) else type(exc).__name__, "notes": [],
                     "params": entry["params"]}
        except (ValueError, np.linalg.LinAlgError) as exc:
            entry = {"status": "failed", "error": f"{type(exc).__name__}: {exc}", "notes": [], "params": entry["params"]}
        entry["seconds"] = round(time.perf_counter() - started, 3)
        result["detectors"][name] = entry
        if progress:
            progress(name)
    return clean(result)


def detector_info(names: list[str], method_params: dict | None = None) -> dict[str, dict]:
    """Labels, citations and the settings used, for the result page (stored with the results:
    the web process reads them from there)."""
    out = {}
    for n in names:
        if n not in DETECTORS:
            continue
        used = params_of(n, method_params)
        # a parameter the detector works out from the data (ViM's D) reads "auto" here; the value it
        # took is in the result's notes (it can differ per model)
        settings = ", ".join(f"{p.name}={p.format(used[p.name])}" if used.get(p.name) is not None
                             else f"{p.name}=auto" + (f" ({p.source})" if p.source else "")
                             for p in DETECTORS[n].parameters)
        out[n] = {"label": DETECTORS[n].label, "paper": DETECTORS[n].paper, "settings": settings,
                  "reference": DETECTORS[n].reference}
    return out


def leaderboard(results: dict) -> dict:
    """A run's models compared, as C-OOD compares hundreds (plain data for the page and the CSV):
    per detector every model's pooled AUROC, FPR@95 (ID positive) and ID accuracy, ranked by AUROC
    (rank 1 the highest; equal AUROCs share the better rank), with the points of an AUROC vs ID
    accuracy scatter in a 0..100 box; per model its mean rank over the detectors that ran for it."""
    info = results.get("detectors", {})
    per_det: dict[str, list[dict]] = {}
    accuracy = {m: r.get("id_accuracy") for m, r in results.get("models", {}).items()}
    for model, r in results.get("models", {}).items():
        for det, e in r.get("detectors", {}).items():
            if e.get("status") == "ok":
                per_det.setdefault(det, []).append({"model": model, "auroc": e["pooled"]["auroc"],
                                                    "fpr95": e["pooled"]["fpr95_id_positive"], "accuracy": accuracy[model]})
    detectors: list[dict] = []
    ranks: dict[str, list[int]] = {}
    for det, rows in per_det.items():
        rows.sort(key=lambda x: (-x["auroc"], x["model"]))
        for x in rows:
            x["rank"] = 1 + sum(1 for y in rows if y["auroc"] > x["auroc"])
            ranks.setdefault(x["model"], []).append(x["rank"])
            x["x"] = None if x["accuracy"] is None else round(100 * x["accuracy"], 2)
            x["y"] = round(100 - 100 * x["auroc"], 2)  # SVG's y grows downwards
        detectors.append({"det": det, "label": info.get(det, {}).get("label", det), "rows": rows,
                          "settings": info.get(det, {}).get("settings", "")})  # e.g. a CLIP detector's temperature
    from pipelines.evaluation.detectors import detector_names

    order = {n: i for i, n in enumerate(detector_names())}
    detectors.sort(key=lambda d: (order.get(d["det"], len(order)), d["det"]))  # the tables' order, not the stored dict's
    models = sorted(({"model": m, "accuracy": accuracy[m], "mean_rank": float(np.mean(v)), "detectors": len(v)}
                     for m, v in ranks.items()), key=lambda x: (x["mean_rank"], x["model"]))
    return {"detectors": detectors, "models": models}


LEADERBOARD_CSV_COLUMNS = ["detector", "rank", "model", "auroc", "fpr95_id_positive", "id_accuracy", "settings"]


def leaderboard_rows(board: dict) -> list[dict]:
    """The leaderboard as flat CSV rows (one per detector x model)."""
    return [{"detector": d["det"], "rank": x["rank"], "model": x["model"], "auroc": x["auroc"], "fpr95_id_positive": x["fpr95"],
             "id_accuracy": x["accuracy"], "settings": d.get("settings", "")} for d in board["detectors"] for x in d["rows"]]


# -- many models at once ------------------------------------------------------------------------


class ModelListError(ValueError):
    """A --models item that names no model: the message names the item and the fix."""


def model_list(items: Sequence[str], *, registered: Sequence[str] = ()) -> list[str]:
    """The models a run evaluates, from command-line items (C-OOD's many-model protocol): a name
    (registered or timm's), a file of names (one a line; blank lines and # comments skipped), or
    a pattern with * ? [ ] matched against timm's models with pretrained ImageNet weights and the
    registered names (``timm.list_models(pattern, pretrained=True)``). Order kept, duplicates
    dropped."""
    import fnmatch

    out: list[str] = []
    for item in items:
        item = item.strip()
        if not item:
            continue
        path = Path(item)
        if path.suffix in (".txt", ".list", "") and path.is_file():
            names = [line.split("#", 1)[0].strip() for line in path.read_text(encoding="utf-8").splitlines()]
            names = [n for n in names if n]
            if not names:
                raise ModelListError(f"--models {item}: the file names no model (one timm or registered name a line)")
        elif any(ch in item for ch in "*?["):
            import timm

            names = [n for n in registered if fnmatch.fnmatchcase(n, item)] + list(timm.list_models(item, pretrained=True))
            if not names:
                raise ModelListError(f"--models {item}: the pattern matches no registered model and no timm model with pretrained "
                                     "weights (timm.list_models(pattern, pretrained=True)); check the spelling")
        else:
            names = [item]
        out += [n for n in names if n not in out]
    return out


# -- imported outputs --------------------------------------------------------------------------


class OutputsFileError(ValueError):
    """An outputs file that cannot be imported; the message names the file and what is wrong."""


def read_outputs_file(path: Path, class_wnids: Sequence[str]) -> dict[str, np.ndarray]:
    """The arrays of a precomputed outputs file (.npz: ``features`` [n, d] and ``logits`` [n, C];
    optional ``labels`` as class indices or wnids of ``class_wnids``, ``keys``, ``weight`` [C, d]
    and ``bias`` [C]), checked and in the evaluation cache's form (float32, labels as indices,
    keys as strings). Pickled objects are refused."""
    path = Path(path)
    if not path.is_file():
        raise OutputsFileError(f"{path}: no such file")
    try:
        data = dict(np.load(path, allow_pickle=False))
    except Exception as exc:
        raise OutputsFileError(f"{path}: not a readable .npz without pickled objects ({type(exc).__name__}: {exc})") from None
    missing = [k for k in ("features", "logits") if k not in data]
    if missing:
        raise OutputsFileError(f"{path}: missing array(s) {', '.join(missing)}; it needs features [n, d] and logits [n, C]")
    f, lg = data["features"], data["logits"]
    if f.ndim != 2 or lg.ndim != 2 or len(f) != len(lg) or not len(f):
        raise OutputsFileError(f"{path}: features {f.shape} and logits {lg.shape} must be [n, d] and [n, C] for the same n > 0")
    if not (np.isfinite(f).all() and np.isfinite(lg).all()):
        raise OutputsFileError(f"{path}: features or logits hold NaN or infinite values")
    arrays = {"features": f.astype(np.float32), "logits": lg.astype(np.float32),
              "keys": data.get("keys", np.array([f"{i:08d}" for i in range(len(f))])).astype(str),
              "groups": np.array([""] * len(f)), "errors": np.zeros(0, dtype=str)}
    if "labels" in data:
        labels = data["labels"]
        if labels.shape != (len(f),):
            raise OutputsFileError(f"{path}: labels {labels.shape} do not match {len(f)} rows")
        if labels.dtype.kind in "US":
            index = {w: i for i, w in enumerate(class_wnids)}
            bad = sorted({str(w) for w in labels if str(w) not in index})
            if bad:
                raise OutputsFileError(f"{path}: unknown wnid label(s) {', '.join(bad[:5])} (labels are ImageNet-1K wnids or class indices)")
            labels = np.array([index[str(w)] for w in labels])
        labels = labels.astype(np.int64)
        if labels.max() >= lg.shape[1] or labels.min() < -1:
            raise OutputsFileError(f"{path}: labels must be class indices in [0, {lg.shape[1] - 1}] (or -1 for unknown)")
        arrays["labels"] = labels
    if "weight" in data and "bias" in data:
        if data["weight"].shape != (lg.shape[1], f.shape[1]) or data["bias"].shape != (lg.shape[1],):
            raise OutputsFileError(f"{path}: weight {data['weight'].shape} / bias {data['bias'].shape} must be [C, d] / [C] = "
                                   f"[{lg.shape[1]}, {f.shape[1]}] / [{lg.shape[1]}]")
        arrays["weight"], arrays["bias"] = data["weight"].astype(np.float32), data["bias"].astype(np.float32)
    return arrays
