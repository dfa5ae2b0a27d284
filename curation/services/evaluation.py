"""Evaluation runs: OOD detectors x models on an export (and a unit-test set), against an ID test
set, with statistics from an ID fit set.

A run is a chunked job like extraction: ``evaluation_plan`` splits the model outputs still
missing from the cache into chunks (model, image set, slice); ``evaluation_process_chunk``
computes one (on the ``gpu`` queue where GPU workers serve it) and writes a part file under a
name fixed by its slice, atomically; ``evaluation_finalize`` (cpu) assembles the parts into the
cache (``EvalFeatureSet``, one per model x image set x version, reused by later runs), fits and
scores every detector, writes results and plots. Redelivered tasks find their work done and
change nothing; a killed worker's chunk is computed again.
"""
from __future__ import annotations

import hashlib
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
from django.conf import settings
from django.contrib.auth.models import User
from django.db import IntegrityError, transaction
from django.utils import timezone

from curation.audit import audit_record
from curation.jobs import JobActive, enqueue_on_commit, run_inline
from curation.jobs.chunks import chunk_finish, chunk_start, chunks_to_do, chunks_write, unfinished_chunks
from curation.models import CandidateClass, EvalFeatureSet, EvaluationRun, Export, IdClassSet, Image, Job, Source, SynsetText
from curation.services.jobs import job_fail, job_mark_running
from curation.version import code_version
from pipelines.names import InvalidName, atomic_write, check_name, safe_component
from pipelines.sources.walk import UnsafePath

IMAGE_SUFFIXES = {".jpg", ".jpeg", ".png", ".webp", ".bmp", ".gif", ".tif", ".tiff"}
ROLES = ("id_test", "id_fit", "ood", "unit_tests")


class EvaluationError(ValueError):
    """A run cannot be created or computed as asked; the message says why and what to do."""


# -- image sets ------------------------------------------------------------------------------------


class EvaluationRunning(JobActive, EvaluationError):
    """The same evaluation (same export, sets, models, detectors and parameters) is unfinished."""

    def __init__(self, run: EvaluationRun):
        self.run = run
        super().__init__(run.job, f"the same evaluation is already {run.status} as run #{run.pk}; wait for it")


@dataclass
class ImageSet:
    key: str  # source:NAME, source:NAME@CLASSES, export:NAME-vN, import:NAME
    kind: str  # source | export | import
    version: str
    obj: object  # Source, Export or EvalFeatureSet
    classes: tuple[str, ...] = ()  # source:NAME@CLASSES: only images of these wnids (a registered ID class set)


@dataclass
class Item:
    key: str  # stable name of the image inside the set
    path: str  # absolute path; "" where it may not be read (the reason is in ``error``)
    wnid: str
    group: str
    error: str = ""


def _digest(lines) -> str:
    h = hashlib.sha256()
    for line in lines:
        h.update(line.encode("utf-8"))
        h.update(b"\n")
    return h.hexdigest()


def _source_images(source: Source, classes: tuple[str, ...] = ()):
    qs = Image.objects.filter(source=source, status=Image.Status.OK).select_related("candidate_class", "source").order_by("relative_path")
    return qs.filter(candidate_class__wnid__in=list(classes)) if classes else qs


def resolve_set(spec: str, *, role: str) -> ImageSet:
    """``source:NAME`` (or a bare source name) for an ID reference source, ``import:NAME`` for
    imported outputs. Raises EvaluationError naming what is wrong."""
    spec = (spec or "").strip()
    if not spec:
        raise EvaluationError(f"{role}: an ID image set is required (source:NAME of an ID reference source, or import:NAME)")
    kind, _, name = spec.partition(":") if ":" in spec else ("source", ":", spec)
    if kind == "import":
        row = EvalFeatureSet.objects.filter(dataset=f"import:{name}").order_by("-created_at").first()
        if row is None:
            known = ", ".join(sorted(d.split(":", 1)[1] for d in EvalFeatureSet.objects.filter(dataset__startswith="import:")
                                     .values_list("dataset", flat=True))) or "none"
            raise EvaluationError(f"{role}: no imported outputs named {name!r} (imported: {known}); "
                                  "add them with: python manage.py import_outputs NAME FILE.npz --model MODEL")
        return ImageSet(key=row.dataset, kind="import", version=row.version, obj=row)
    if kind != "source":
        raise EvaluationError(f"{role}: {spec!r} is neither source:NAME nor import:NAME")
    name, _, class_set = name.partition("@")
    classes: tuple[str, ...] = ()
    if class_set:
        found = IdClassSet.objects.filter(name=class_set).first()
        if found is None:
            known = ", ".join(IdClassSet.objects.order_by("name").values_list("name", flat=True)) or "none"
            raise EvaluationError(f"{role}: {spec!r} names the class set {class_set!r}, which is not registered (ID class sets: "
                                  f"{known}); make one with: python manage.py semantic_split --register NAME ...")
        classes = tuple(found.wnids)
    source = Source.objects.filter(name=name).first()
    if source is None:
        known = ", ".join(Source.objects.filter(role=Source.Role.ID).values_list("name", flat=True)) or "none"
        raise EvaluationError(f"{role}: unknown source {name!r}; ID reference sources: {known} "
                              f"(register one with: python manage.py add_source NAME FOLDER --role id)")
    if source.role != Source.Role.ID:
        raise EvaluationError(f"{role}: source {name!r} holds OOD candidates; ID test and fit sets must be ID reference sources (--role id)")
    rows = list(_source_images(source, classes).values_list("relative_path", "sha256"))
    if not rows:
        raise EvaluationError(f"{role}: source {name!r} has no readable images"
                              + (f" of the {len(classes)} classes of {class_set}" if classes else " (has it been ingested?)"))
    # a whole source's version is its files' (so its caches stay valid); a class subset adds its classes
    version = _digest([*(f"{p}\t{s}" for p, s in rows), *(f"class\t{w}" for w in sorted(classes))])
    return ImageSet(key=f"source:{name}" + (f"@{class_set}" if classes else ""), kind="source", version=version, obj=source,
                    classes=classes)


def export_set(export: Export) -> ImageSet:
    return ImageSet(key=f"export:{export.label}", kind="export", version=export.manifest_sha256, obj=export)


def set_items(image_set: ImageSet) -> list[Item]:
    """The set's images in a fixed order (the order of every cached array)."""
    if image_set.kind == "source":
        source: Source = image_set.obj  # type: ignore[assignment]
        root_real = os.path.realpath(source.root)
        items = []
        for img in _source_images(source, image_set.classes):
            wnid = img.candidate_class.wnid if img.candidate_class else ""
            try:  # the bytes through the source's layout, checked against the ingest hash when read
                path, error = img.ref(root_real=root_real), ""
            except UnsafePath as exc:
                path, error = "", str(exc)
            items.append(Item(key=img.relative_path, path=path, wnid=wnid, group=wnid, error=error))
        return items
    if image_set.kind == "export":
        export: Export = image_set.obj  # type: ignore[assignment]
        root = Path(settings.EXPORT_ROOT) / export.path
        if export.kind == Export.Kind.DATASET:
            items = []
            for m in export.members.order_by("wnid", "sha256", "pk"):
                rel = next(iter(sorted(m.files.values())), "")
                items.append(Item(key=rel, path=str(root / rel) if rel else "", wnid=m.wnid, group=m.wnid,
                                  error="" if rel else "no file in the export"))
            return items
        from pipelines.export.write import read_manifest

        files = sorted(f for f in read_manifest(root)["files"] if Path(f).suffix.lower() in IMAGE_SUFFIXES and "/" in f)
        return [Item(key=f, path=str(root / f), wnid="", group=f.split("/", 1)[0]) for f in files]
    return []


# -- creating a run --------------------------------------------------------------------------------


def _method_params(params: dict) -> dict[str, dict]:
    """Per-detector parameters from the run's settings, checked against each detector's declaration."""
    from pipelines.evaluation.detectors import DetectorError, method_params

    try:
        return method_params(params)
    except DetectorError as exc:
        raise EvaluationError(str(exc)) from None


def _conventions(params: dict) -> dict:
    """The figure conventions chosen for a run, checked by pipelines.evaluation.run.Conventions (unset
    ones take its defaults)."""
    from dataclasses import asdict

    from pipelines.evaluation.run import Conventions

    chosen = {k: params[k] for k in ("fpr_method", "aupr_method", "oaa_convention", "severity_protocol") if params.get(k)}
    try:
        chosen.update({k: int(params[k]) for k in ("severity_per_class", "severity_estimation") if params.get(k)})
    except (TypeError, ValueError):
        raise EvaluationError("severity-per-class and severity-estimation must be whole numbers") from None
    try:
        return asdict(Conventions(**chosen))
    except ValueError as exc:
        raise EvaluationError(str(exc)) from None


# The whole-number settings of a run: (key, its words in a message, lowest, highest, default when
# unset or empty). Checked when the run is asked for, so a bad value never reaches the detectors
# (a negative C-OOD window used to fail MSP and friends deep inside a run that then said "done").
RUN_NUMBERS = (
    ("severity_window", "severity window", 0, 10**7, lambda: settings.EVAL_SEVERITY_WINDOW or 0),
    ("seed", "seed", 0, 2**32 - 1, lambda: 0),
    ("sanity_seeds", "sanity seeds (random networks; 0 is off, the paper uses 5)", 0, 20, lambda: settings.EVAL_SANITY_SEEDS),
    ("sanity_sample", "sanity sample", 1, 10**7, lambda: settings.EVAL_SANITY_SAMPLE),
)


def _run_numbers(params: dict) -> dict[str, int]:
    """The run's whole-number settings, each through ``pipelines.numbers.whole_number`` and its
    range (``RUN_NUMBERS``); EvaluationError naming the first bad one."""
    from pipelines.numbers import whole_number

    out = {}
    for key, words, lo, hi, default in RUN_NUMBERS:
        raw = params.get(key)
        if raw is None or raw == "":
            raw = default()
        try:
            out[key] = whole_number(raw, words, lo=lo, hi=hi)
        except ValueError as exc:
            raise EvaluationError(str(exc)) from None
    return out


def _check_clip_weights(models: Sequence[str]) -> None:
    """Every vision-language model's weights can be had now (pipelines.evaluation.vlm.resolve_weights: a
    file, the local cache, or a hub that answers) and open with open_clip's loader
    (check_weights_file: a pickle, a zip, a truncated file are refused here, before any run row);
    EvaluationError in one line naming the model and the file to pass otherwise. An OSError from a
    user-named path (too long, a loop, no permission) is such a line too, never a traceback or a 500."""
    from pipelines.evaluation.vlm import check_weights_file, is_clip, resolve_weights
    from pipelines.features.classifiers import ModelUnavailable

    for m in models:
        if is_clip(m.strip()):
            try:
                check_weights_file(m.strip(), resolve_weights(m.strip()))
            except ModelUnavailable as exc:
                raise EvaluationError(str(exc).splitlines()[0]) from None
            except OSError as exc:
                name = m.strip() if len(m.strip()) <= 120 else f"{m.strip()[:117]}..."
                raise EvaluationError(f"model {name!r}: cannot read its weights file ({exc.strerror or type(exc).__name__}); "
                                      "pass a readable path of the checkpoint") from None


def _check_models_resolvable(models: Sequence[str], imported: Sequence[ImageSet]) -> None:
    """Every model of a run can be had: a registered model, the model whose outputs an imported
    set holds, one with outputs in the cache already, or a timm architecture. Checked before the
    run exists, so a typo is one line and no failed run is left behind (timm is imported only for
    a name none of the others know)."""
    from pipelines.evaluation.vlm import is_clip
    from pipelines.features.classifiers import MODELS

    _check_clip_weights(models)
    models = [m for m in models if not is_clip(m)]
    known = set(MODELS) | {s.obj.model_name for s in imported}
    unknown = [m for m in models if m not in known and not EvalFeatureSet.objects.filter(model_name=m).exists()]
    if not unknown:
        return
    try:
        import timm
    except ImportError:  # pragma: no cover - timm is a dependency; without it only the names above can run
        missing = unknown
    else:
        missing = [m for m in unknown if not timm.is_model(m)]
    if missing:
        raise EvaluationError(f"unknown model{'s' if len(missing) > 1 else ''} {', '.join(repr(m) for m in missing)}: not a registered model "
                              f"({', '.join(sorted(MODELS)) or 'none'}), not the model of an imported set, and not a timm "
                              "architecture (python -c \"import timm; print(timm.list_models('NAME*'))\" lists close ones)")


def evaluation_create(*, export: Export | None = None, id_test: str, id_fit: str, models: list[str], methods: list[str] | None = None,
                      unit_tests: Export | None = None, params: dict | None = None, ood: str | None = None,
                      restrict_logits: str | None = None, id_shifted: list[str] | None = None, fs_x: dict | None = None,
                      preset: str | None = None, user: User | None = None, enqueue: bool = True) -> EvaluationRun:
    """A run of detectors x models. The OOD set is a clean ``export``, or (``ood``) part of an ID
    source, ``source:NAME@CLASSES``, as in a semantic split (ImageNet-X: the OOD half of the ID
    classes). ``restrict_logits`` (a registered ID class set) keeps only those classes' logits, so
    the classifier decides among the ID half alone. ``id_shifted`` (``source:NAME`` or
    ``import:NAME`` each) are covariate-shifted images of ID classes (ImageNet-V2/-R/-C copies,
    or ``make_covariate_shift`` output): each is reported standard, full-spectrum and as a shift
    (pipelines.evaluation.metrics.full_spectrum_metrics), with the model's accuracy on it."""
    from curation.services.loaded_models import ModelNameError, check_model_name
    from pipelines.evaluation.detectors import default_detectors, detector_names
    from pipelines.evaluation.vlm import DEFAULT_TEMPLATE, TEMPLATE_KEYS, is_clip

    params = dict(params or {})
    ood_shifted: dict[str, str] = {}
    _check_clip_weights(models)  # a vision-language model without weights stops the run first, in one line
    if preset:
        if export is not None or ood or restrict_logits or id_shifted:
            raise EvaluationError(f"--preset {preset} builds the OOD set and the ID class restriction itself; give only "
                                  "--id-test and --id-fit (whole ID sources)" + (" and --variant" if preset == "imagenet-fs-x" else ""))
        split = _preset_split(preset, user=user)
        if preset == "imagenet-x":
            if "@" in id_test or "@" in id_fit:
                raise EvaluationError(f"--preset {preset}: give whole sources (source:NAME); the split's class lists select their images")
            ood, restrict_logits = f"{id_test}@{split}-ood", f"{split}-id"
            id_test, id_fit = f"{id_test}@{split}-id", f"{id_fit}@{split}-id"
        else:
            fs_x = {"split": split, "variants": (fs_x or {}).get("variants") or []}
    if fs_x:
        # ImageNet-FS-X (paper 004 sec. 2.2): each source split by the semantic split's class lists;
        # ID-class images of the ID source are ID, of the variants shifted ID; OOD-class images of
        # every source are OOD; the classifier keeps the ID half's logits.
        if export is not None or ood or restrict_logits or id_shifted:
            raise EvaluationError("--fs-x builds the OOD, shifted and restricted sets itself; give only --id-test, --id-fit "
                                  "and the variant sources")
        split, variants = fs_x["split"], [v.strip() for v in fs_x.get("variants") or [] if v.strip()]
        if not variants:
            raise EvaluationError("--fs-x needs at least one variant source (e.g. --variant source:imagenet-r)")
        if "@" in id_test or "@" in id_fit or any("@" in v for v in variants):
            raise EvaluationError("--fs-x: give whole sources (source:NAME); the split's class lists select their images")
        ood, restrict_logits = f"{id_test}@{split}-ood", f"{split}-id"
        id_test, id_fit = f"{id_test}@{split}-id", f"{id_fit}@{split}-id"
        id_shifted = [f"{v}@{split}-id" for v in variants]
        ood_shifted = {f"{v}@{split}-id": f"{v}@{split}-ood" for v in variants}
    if (export is None) == (ood is None):
        raise EvaluationError("give the OOD set: either a clean export or a source:NAME@CLASSES set (not both)")
    if export is not None and (export.kind != Export.Kind.DATASET or export.status != Export.Status.DONE):
        raise EvaluationError(f"export {export.label} is a {export.get_kind_display()} that is {export.status}; "
                              "evaluate a finished clean OOD export")
    if unit_tests is not None and (unit_tests.kind != Export.Kind.UNIT_TESTS or unit_tests.status != Export.Status.DONE):
        raise EvaluationError(f"{unit_tests.label} is not a finished OOD unit-test set")
    models = [m.strip() for m in models if m and m.strip()]
    if not models:
        raise EvaluationError("choose at least one model")
    if len(set(models)) != len(models):
        raise EvaluationError(f"a model is listed twice: {', '.join(models)}")
    for m in models:
        if is_clip(m):  # clip:ARCH:/path/to/weights names a file; checked by _check_models_resolvable
            if len(m) > 200:
                raise EvaluationError(f"model {m[:60]}...: names are at most 200 characters; move the weights to a shorter path")
            continue
        try:
            check_model_name(m)
        except ModelNameError as exc:
            raise EvaluationError(str(exc)) from None
    known = detector_names()
    clip_models = [m for m in models if is_clip(m)]
    methods = list(dict.fromkeys(methods or default_detectors(text=bool(clip_models))))  # with a CLIP model: its detectors too
    template = params.get("clip_template") or DEFAULT_TEMPLATE
    if template not in TEMPLATE_KEYS:
        raise EvaluationError(f"prompt template {template!r}: choose one of {', '.join(TEMPLATE_KEYS)}")
    unknown = [m for m in methods if m not in known]
    if unknown:
        raise EvaluationError(f"unknown detector(s) {', '.join(unknown)}; registered: {', '.join(known)}")
    test_set, fit_set = resolve_set(id_test, role="ID test set"), resolve_set(id_fit, role="ID fit set")
    if test_set.key == fit_set.key:
        raise EvaluationError(f"the ID test set and the ID fit set are both {test_set.key}: statistics fitted on the test images "
                              "inflate every feature-based result; register a separate fit set (e.g. a train subset) or import one")
    for s in (test_set, fit_set):
        if s.kind == "import" and models != [s.obj.model_name]:
            raise EvaluationError(f"{s.key} holds outputs of {s.obj.model_name}; a run that uses it can only evaluate that model "
                                  f"(asked for {', '.join(models)})")
    from pipelines.features.decode import DECODERS

    decoder = params.get("decoder") or settings.DECODER
    if decoder not in DECODERS:
        raise EvaluationError(f"decoder {decoder!r}: choose one of {', '.join(DECODERS)}")
    for role, s in (("ID test set", test_set), ("ID fit set", fit_set)):
        if s.kind == "import" and s.obj.decoder not in (decoder, "unknown"):
            raise EvaluationError(f"{s.key} was computed with the {s.obj.decoder} decoder and this run decodes with {decoder}: "
                                  f"outputs of one evaluation must come from one decoder (choose decoder {s.obj.decoder})")
    _check_models_resolvable(models, [s for s in (test_set, fit_set) if s.kind == "import"])
    method_params = {k: v for k, v in _method_params(params).items() if k in methods}
    weights = params.get("weights") if isinstance(params.get("weights"), dict) else {}
    numbers = _run_numbers(params)
    seed = numbers["seed"]
    ood_set = export_set(export) if export is not None else resolve_set(ood, role="OOD set")
    if ood_set.kind == "import":
        raise EvaluationError(f"OOD set {ood}: imported outputs cannot be the OOD set; give source:NAME@CLASSES or an export")
    if ood_set.key in (test_set.key, fit_set.key):
        raise EvaluationError(f"the OOD set {ood_set.key} is also the ID test or fit set")
    overlap = set(ood_set.classes) & set(test_set.classes)
    if overlap:
        raise EvaluationError(f"the OOD set and the ID test set share {len(overlap)} class(es) (e.g. {sorted(overlap)[0]}); "
                              "a semantic split's halves are disjoint")
    restriction = _restriction(restrict_logits) if restrict_logits else None
    sets = {"id_test": test_set, "id_fit": fit_set, "ood": ood_set}
    for spec in dict.fromkeys(x.strip() for x in (id_shifted or []) if x and x.strip()):
        shifted = resolve_set(spec, role=f"shifted ID set {spec}")
        if shifted.key in (test_set.key, fit_set.key, ood_set.key):
            raise EvaluationError(f"shifted ID set {spec}: it is also the ID test, ID fit or OOD set")
        if shifted.kind == "import" and models != [shifted.obj.model_name]:
            raise EvaluationError(f"{shifted.key} holds outputs of {shifted.obj.model_name}; it can only be used with that model")
        sets[f"{SHIFTED_PREFIX}{shifted.key}"] = shifted
        if spec in ood_shifted:
            sets[f"{OOD_SHIFTED_PREFIX}{shifted.key}"] = resolve_set(ood_shifted[spec], role=f"OOD set {ood_shifted[spec]}")
    if unit_tests is not None:
        sets["unit_tests"] = export_set(unit_tests)
    for m in clip_models:  # cached outputs of a clip:ARCH:/path model must come from the file's current weights
        for s in sets.values():
            row = EvalFeatureSet.objects.filter(model_name=m, dataset=s.key, version=s.version, decoder=decoder).first()
            if row is not None:
                _check_clip_cache(m, row)
    config = {
        "models": models, "methods": methods, "method_params": method_params, "seed": seed,
        "severity_window": numbers["severity_window"],
        "sets": {role: {"key": s.key, "version": s.version} for role, s in sets.items()},
        "weights": {m: (weights or {}).get(m, "") for m in models},
        "chunk_size": settings.EVAL_CHUNK_SIZE, "batch_size": settings.EXTRACT_BATCH_SIZE,
        "unit_test_fpr_limit": 0.10,
        "conventions": _conventions(params),
        "decoder": decoder,
    }
    if restriction:
        config["restrict_logits"] = restriction
    if clip_models:
        config["clip_template"] = template
    if preset:
        config["preset"] = preset
    if fs_x:
        config["fs_x"] = {"split": fs_x["split"], "variants": [k.partition("@")[0] for k in ood_shifted]}
    sanity_seeds = numbers["sanity_seeds"]
    if sanity_seeds:
        config["sanity"] = {"seeds": sanity_seeds, "arch": params.get("sanity_arch") or settings.EVAL_SANITY_ARCH,
                            "sample": numbers["sanity_sample"]}
    with transaction.atomic():
        if export is not None:
            Export.objects.select_for_update().get(pk=export.pk)
        for active in EvaluationRun.objects.filter(export=export, status__in=[EvaluationRun.Status.PENDING, EvaluationRun.Status.RUNNING]):
            if active.config == config and active.unit_tests_id == (unit_tests.pk if unit_tests else None):
                raise EvaluationRunning(active)
        job = Job.objects.create(kind=Job.Kind.EVALUATE, config=config, code_version=code_version(),
                                 created_by=user if getattr(user, "pk", None) else None)
        run = EvaluationRun.objects.create(
            export=export, unit_tests=unit_tests, id_test=test_set.key, id_fit=fit_set.key, model_names=models, methods=methods,
            config=config, code_version=job.code_version,
            export_version=(f"{export.label} sha256:{export.manifest_sha256}" if export is not None
                            else f"{ood_set.key} sha256:{ood_set.version}")[:200],
            job=job, created_by=job.created_by)
        audit_record(actor=user, action="evaluation_started", target=run,
                     data={"ood": ood_set.key, "models": models, "methods": methods, "restrict_logits": restrict_logits or ""})
        if enqueue:
            enqueue_on_commit(job)
    return run


# ImageNet-X (Noda et al., sec. 2.1) and ImageNet-FS-X (sec. 2.2) as presets: the published split of
# ImageNet-1K (pipelines.classes.semantic_split reproduces it), registered under this name when first used
PRESETS = ("imagenet-x", "imagenet-fs-x")
PRESET_SPLIT = "imagenet-x"
PRESET_SPEC = "semantic split of imagenet-1k (ImageNet-X procedure)"


def _preset_split(preset: str, *, user: User | None = None) -> str:
    """The name of the registered ImageNet-X split (``<name>-id`` / ``<name>-ood``), made from
    ImageNet-1K by ImageNet-X's procedure the first time a preset needs it."""
    from curation.services.id_classes import IdClassSetError, semantic_split_create
    from pipelines.classes.wordnet import WordNetUnavailable

    if preset not in PRESETS:
        raise EvaluationError(f"--preset {preset!r}: choose one of {', '.join(PRESETS)}")
    sides = {s.name: s for s in IdClassSet.objects.filter(name__in=[f"{PRESET_SPLIT}-id", f"{PRESET_SPLIT}-ood"])}
    if len(sides) == 2:
        odd = [n for n, s in sides.items() if not (s.spec or "").startswith(PRESET_SPEC)]
        if odd:
            raise EvaluationError(f"--preset {preset}: the ID class set {odd[0]} is not ImageNet-X's split ({sides[odd[0]].spec!r}); "
                                  f"rename or delete it, the preset registers {PRESET_SPLIT}-id/-ood itself")
        return PRESET_SPLIT
    try:
        semantic_split_create(id_spec="imagenet-1k", register=PRESET_SPLIT, user=user)
    except (IdClassSetError, WordNetUnavailable) as exc:
        raise EvaluationError(f"--preset {preset}: cannot make ImageNet-X's split: {str(exc).splitlines()[0]}") from None
    return PRESET_SPLIT


SHIFTED_PREFIX = "id_shifted:"
OOD_SHIFTED_PREFIX = "ood_shifted:"  # ImageNet-FS-X: the OOD-class images of a variant source, keyed like its shifted ID set


def _restriction(set_name: str) -> dict:
    """The classes whose logits a run keeps: a registered ID class set, every class of it one of
    the models' ImageNet-1K classes."""
    from pipelines.features.classifiers import imagenet_1k_classes

    found = IdClassSet.objects.filter(name=set_name).first()
    if found is None:
        known = ", ".join(IdClassSet.objects.order_by("name").values_list("name", flat=True)) or "none"
        raise EvaluationError(f"restrict logits: no ID class set named {set_name!r} (registered: {known})")
    classes = set(imagenet_1k_classes()[0])
    outside = [w for w in found.wnids if w not in classes]
    if outside:
        raise EvaluationError(f"restrict logits: {len(outside)} class(es) of {set_name} are not ImageNet-1K classes the models "
                              f"predict ({', '.join(outside[:5])}); logits can only be restricted to the model's own classes")
    return {"set": found.name, "wnids": list(found.wnids)}


# -- cache layout ---------------------------------------------------------------------------------


def cache_dir(model_name: str, key: str, version: str, decoder: str = "pil") -> Path:
    """Where one (model, set, version, decoder)'s outputs live; the pil decoder's keep the
    folder names they had before the decoder became part of the key."""
    suffix = "" if decoder in ("pil", "unknown") else f"-{safe_component(decoder)}"
    return Path(settings.EVAL_ROOT) / "cache" / safe_component(model_name) / f"{safe_component(key)}-{version[:16]}{suffix}"


def head_path(model_name: str) -> Path:
    return Path(settings.EVAL_ROOT) / "cache" / safe_component(model_name) / "head.npz"


def _decoder(cfg: dict) -> str:
    return cfg.get("decoder", "pil")  # runs created before the decoder was recorded used Pillow


def _cached(model_name: str, s: dict, decoder: str) -> EvalFeatureSet | None:
    return EvalFeatureSet.objects.filter(model_name=model_name, dataset=s["key"], version=s["version"], decoder=decoder).first()


def _input_keys(run_config: dict, *, fit_only: bool = False) -> dict[str, str]:
    """Cache name -> detector, for the run's input-level detectors (ODIN): the scores they
    need computed from the images while extracting (Detector.input_level); with ``fit_only`` those
    the ID fit set needs too (Detector.input_fit)."""
    from pipelines.evaluation.detectors import DETECTORS, params_of

    keys = {}
    for name in run_config["methods"]:
        cls = DETECTORS.get(name)
        if cls is not None and cls.input_level and (cls.input_fit or not fit_only):
            keys[cls.input_key_for(params_of(name, run_config["method_params"]))] = name
    return keys


def _set_of(role_entry: dict) -> ImageSet:
    key = role_entry["key"]
    kind, _, name = key.partition(":")
    if kind == "export":
        label_name, _, v = name.rpartition("-v")
        export = Export.objects.filter(name=label_name, version=int(v)).first()
        if export is None:
            raise EvaluationError(f"{key}: the export is gone")
        s = export_set(export)
    else:
        s = resolve_set(key, role=key)
    if s.version != role_entry["version"]:
        raise EvaluationError(f"{key} changed since the run was created (images added, removed or edited); start a new run")
    return s


# -- plan, chunks, finalize ----------------------------------------------------------------------------


def evaluation_plan(*, job_id: int) -> list[int]:
    """Chunks for every (model, set) output not cached yet, and for input-level scores (ODIN)."""
    from pipelines.evaluation.vlm import is_clip

    job = Job.objects.get(pk=job_id)
    planned = chunks_to_do(job)
    if planned is not None:
        return planned
    cfg = job.config
    input_keys = _input_keys(cfg)
    fit_keys = _input_keys(cfg, fit_only=True)  # input-level arrays the ID fit set needs too (per-layer statistics)
    payloads = []
    for model in cfg["models"]:
        for role, entry in cfg["sets"].items():
            s = _set_of(entry)
            if s.kind == "import":
                continue
            cached = _cached(model, entry, _decoder(cfg))
            if cached is not None and is_clip(model):
                _check_clip_cache(model, cached)
            n = None
            wanted = [] if cached else ["features"]
            if not is_clip(model):  # input-level methods (ODIN, ...) need a classifier's gradients and layers
                wanted += [key for key in input_keys if (role != "id_fit" or key in fit_keys) and (cached is None or key not in cached.extras)]
            if wanted:
                n = len(set_items(s))
            for what in wanted:
                for start in range(0, n, int(cfg["chunk_size"])):
                    payloads.append({"model": model, "role": role, "what": what, "start": start,
                                     "stop": min(n, start + int(cfg["chunk_size"]))})
    def record(locked: Job) -> None:  # with the chunks, in their transaction
        job_mark_running(job=locked, message=f"{locked.total} images to run through {', '.join(cfg['models'])}"
                         if payloads else "every model output is cached")
        EvaluationRun.objects.filter(job=locked).update(status=EvaluationRun.Status.RUNNING)

    return chunks_write(job_id=job.pk, payloads=payloads, total=sum(p["stop"] - p["start"] for p in payloads), on_written=record)


def _part_path(model: str, entry: dict, what: str, start: int, decoder: str) -> Path:
    return cache_dir(model, entry["key"], entry["version"], decoder) / "parts" / f"{what}_{start:08d}.npz"


def _write_head(lm) -> None:
    path = head_path(lm.name)
    if path.is_file():
        return
    from pipelines.features.classifiers import linear_head

    head = linear_head(lm)
    if head is None:
        return  # ViM, ReAct and ASH then report that they need the last layer
    weight, bias = head
    atomic_write(path, lambda fh: np.savez(fh, weight=weight, bias=bias, weights_source=np.array(lm.weights)), root=settings.EVAL_ROOT)


_CLIP: dict[str, Any] = {}


def clip_model(name: str) -> Any:
    """``pipelines.evaluation.vlm.load_clip(name)``, loaded once per process (one vision-language model at a
    time in memory), on the torch threads the settings give."""
    if name not in _CLIP:
        from pipelines.evaluation.vlm import load_clip

        if settings.TORCH_THREADS:
            from pipelines.features.classifiers import set_torch_threads

            set_torch_threads(settings.TORCH_THREADS)
        _CLIP.clear()
        _CLIP[name] = load_clip(name)
    return _CLIP[name]


CLIP_WEIGHTS_NOTE = "vision-language weights "


def _check_clip_cache(model: str, row: EvalFeatureSet) -> None:
    """Cached outputs of a ``clip:ARCH:/path`` model are reused only while the file holds the
    weights they were computed from (the cache is keyed by the model's name, which names a path)."""
    from pipelines.evaluation.vlm import resolve_weights

    identity = resolve_weights(model).identity
    recorded = row.note.removeprefix(CLIP_WEIGHTS_NOTE) if row.note.startswith(CLIP_WEIGHTS_NOTE) else ""
    if recorded and recorded != identity:
        raise EvaluationError(f"{model}: the cached outputs of {row.dataset} were computed from weights {recorded[:19]}..., the "
                              f"file now holds {identity[:19]}...; give the new weights another path (or delete the cache row)")


def _clip_chunk(cm, items: list[Item], paths: list[str], cfg: dict, decoder: str, progress) -> tuple[dict, dict]:
    """A vision-language model's part file: global image embeddings as ``features``, an empty
    ``logits`` (the zero-shot head is applied when the run is finalized, with the run's template
    and ID classes) and GL-MCM's local embeddings where the architecture has them (always: the
    cache is shared by later runs, whose detectors may read them; about 200 KB an image for
    ViT-B/16, read only by runs with GL-MCM)."""
    from pipelines.evaluation.vlm import check_local_path, encode_images
    from pipelines.features.classifiers import ModelUnavailable

    try:
        check_local_path(cm)
        local = True
    except ModelUnavailable:  # not a ViT with a class token: GL-MCM says so when a run asks for it
        local = False
    emb = encode_images(cm, paths, batch_size=int(cfg["batch_size"] or 0) or 32, decoder=decoder,
                        num_workers=settings.EXTRACT_LOADER_WORKERS, max_pixels=settings.MAX_IMAGE_PIXELS, progress=progress,
                        local=local)
    ok, errors, rows = [], [], []
    at = 0
    for it in items:
        if not it.path:
            errors.append(f"{it.key}: {it.error}")
            continue
        row = int(emb.row_of[at])
        if row < 0:
            errors.append(emb.errors.get(at, f"{it.key}: not decoded"))
        else:
            ok.append(it)
            rows.append(row)
        at += 1
    arrays = {"features": emb.features[rows].astype(np.float32), "logits": np.zeros((len(rows), 0), dtype=np.float32),
              "keys": np.array([it.key for it in ok], dtype=str), "wnids": np.array([it.wnid for it in ok], dtype=str),
              "groups": np.array([it.group for it in ok], dtype=str), "errors": np.array(errors, dtype=str)}
    if local:
        arrays["local"] = emb.local[rows]
    arrays["weights_identity"] = np.array(cm.identity)
    return arrays, {"runtime": emb.runtime}


def evaluation_process_chunk(*, job_id: int, index: int, progress: Callable[[int], None] | None = None) -> bool:
    """Compute one chunk's outputs (features and logits, or an input-level method's scores) and write its part file.
    Returns True when it was the last unfinished chunk."""
    from curation.services.loaded_models import loaded_model
    from pipelines.features.extract import extract

    chunk = chunk_start(job_id=job_id, index=index)
    if chunk is None:  # done already, or its job is finished
        return False
    p, cfg = chunk.payload, chunk.job.config
    entry = cfg["sets"][p["role"]]
    items = set_items(_set_of(entry))[p["start"]:p["stop"]]
    decoder = _decoder(cfg)
    part = _part_path(p["model"], entry, p["what"], p["start"], decoder)
    stats: dict = {}
    if not part.is_file():
        from pipelines.evaluation.vlm import is_clip

        clip = is_clip(p["model"])
        lm = clip_model(p["model"]) if clip else loaded_model(p["model"], cfg["weights"].get(p["model"], ""))
        paths = [it.path for it in items if it.path]
        if not clip:
            _write_head(lm)
        if clip:  # a vision-language model: image embeddings, global and local
            arrays, stats = _clip_chunk(lm, items, paths, cfg, decoder, progress)
        elif p["what"] == "features":
            ex = extract(lm, paths, batch_size=int(cfg["batch_size"] or 0) or None, num_workers=settings.EXTRACT_LOADER_WORKERS,
                         max_pixels=settings.MAX_IMAGE_PIXELS, progress=progress, keep_logits=True, decoder=decoder)
            stats = {"runtime": ex.runtime, **({"notes": ex.notes} if ex.notes else {})}  # the run's record (_runtime_record)
            res = iter(ex.results)
            ok, errors = [], []
            for it in items:
                if not it.path:
                    errors.append(f"{it.key}: {it.error}")
                    continue
                r = next(res)
                if r.ok:
                    ok.append(it)
                else:
                    errors.append(r.error)
            arrays = {"features": ex.features.astype(np.float32), "logits": ex.logits.astype(np.float32),
                      "keys": np.array([it.key for it in ok], dtype=str), "wnids": np.array([it.wnid for it in ok], dtype=str),
                      "groups": np.array([it.group for it in ok], dtype=str), "errors": np.array(errors, dtype=str)}
        else:  # an input-level detector's scores, under its cache name
            from pipelines.evaluation.detectors import DETECTORS, params_of

            name = _input_keys(cfg)[p["what"]]
            cls = DETECTORS[name]
            scores = cls.input_scores(lm, paths, params_of(name, cfg["method_params"]),
                                      batch_size=min(int(cfg["batch_size"] or 0) or 32, 64), max_pixels=settings.MAX_IMAGE_PIXELS,
                                      progress=progress, decoder=decoder)
            arrays = {**(scores if isinstance(scores, dict) else {"scores": scores}),  # per-layer arrays come with their widths
                      "keys": np.array([it.key for it in items if it.path], dtype=str)}
        atomic_write(part, lambda fh: np.savez(fh, **arrays), root=settings.EVAL_ROOT)
    return chunk_finish(chunk, progress=len(items), stats=stats or None)  # the part file is the chunk's result, written before


def _assemble(model: str, entry: dict, what: str, user, decoder: str) -> EvalFeatureSet:
    """Join a (model, set)'s part files into the cache; idempotent (the row is unique)."""
    folder = cache_dir(model, entry["key"], entry["version"], decoder)
    parts = sorted((folder / "parts").glob(f"{what}_*.npz"))
    if what == "features":
        cached = _cached(model, entry, decoder)
        if cached is not None:
            return cached
        if not parts:
            raise EvaluationError(f"{entry['key']} with {model}: no computed outputs to assemble")
        loaded = [dict(np.load(p, allow_pickle=False)) for p in parts]
        arrays = {k: np.concatenate([d[k] for d in loaded]) for k in ("features", "logits", "keys", "wnids", "groups", "errors")
                  + (("local",) if all("local" in d for d in loaded) else ())}
        if not len(arrays["keys"]):
            raise EvaluationError(f"{entry['key']}: {model} could read none of its images ({'; '.join(arrays['errors'][:3])})")
        identities = {str(d["weights_identity"]) for d in loaded if "weights_identity" in d}  # a vision-language model's
        if len(identities) > 1:
            raise EvaluationError(f"{entry['key']} with {model}: its chunks were computed from different weights files; run it again")
        atomic_write(folder / "outputs.npz", lambda fh: np.savez(fh, **arrays), root=settings.EVAL_ROOT)
        try:
            with transaction.atomic():
                row = EvalFeatureSet.objects.create(
                    model_name=model, dataset=entry["key"], version=entry["version"], decoder=decoder,
                    path=str((folder / "outputs.npz").relative_to(settings.EVAL_ROOT)),
                    images=len(arrays["keys"]), feature_dim=int(arrays["features"].shape[1]), failed=[str(e) for e in arrays["errors"]],
                    created_by=user, note=f"{CLIP_WEIGHTS_NOTE}{identities.pop()}" if identities else "")
        except IntegrityError:
            row = _cached(model, entry, decoder)
        return row
    row = _cached(model, entry, decoder)
    if what in row.extras or not parts:
        return row  # nothing computed (no readable image): the detector reports the scores missing
    loaded = [d for d in (dict(np.load(p, allow_pickle=False)) for p in parts) if len(d["keys"])]
    if not loaded:
        return row
    scores = np.concatenate([d["scores"] for d in loaded])
    keys = np.concatenate([d["keys"] for d in loaded])
    extra_arrays = {"widths": loaded[0]["widths"]} if "widths" in loaded[0] else {}
    out = folder / f"{what}.npz"
    atomic_write(out, lambda fh: np.savez(fh, scores=scores, keys=keys, **extra_arrays), root=settings.EVAL_ROOT)
    with transaction.atomic():
        locked = EvalFeatureSet.objects.select_for_update().get(pk=row.pk)
        locked.extras = {**locked.extras, what: str(out.relative_to(settings.EVAL_ROOT))}
        locked.save(update_fields=["extras"])
    return locked


def load_outputs(row: EvalFeatureSet, *, extras: Sequence[str] = (), local: bool = False) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray]:
    """(Outputs, keys, wnids, groups) of a cached set; with ``local``, a vision-language model's
    local embeddings too (float16 [n, P, D]: about 200 KB an image for ViT-B/16)."""
    from pipelines.evaluation.detectors import Outputs
    from pipelines.features.classifiers import imagenet_1k_classes

    data = np.load(Path(settings.EVAL_ROOT) / row.path, allow_pickle=False)
    keys = data["keys"]
    wnids = data["wnids"] if "wnids" in data else np.array([""] * len(keys))
    if "labels" in data:
        labels = data["labels"].astype(np.int64)
    else:
        index = {w: i for i, w in enumerate(imagenet_1k_classes()[0])}
        labels = np.array([index.get(str(w), -1) for w in wnids], dtype=np.int64)
    extra = {}
    for key in extras:
        if key in row.extras:
            e = np.load(Path(settings.EVAL_ROOT) / row.extras[key], allow_pickle=False)
            scores = np.asarray(e["scores"], dtype=np.float64)
            at = {k: i for i, k in enumerate(e["keys"].tolist())}
            where = np.array([at.get(k, -1) for k in keys.tolist()], dtype=np.int64)
            picked = scores[np.maximum(where, 0)] if len(scores) else np.zeros((len(where), *scores.shape[1:]))
            missing = (where < 0).reshape((-1,) + (1,) * (scores.ndim - 1))
            extra[key] = np.where(missing, np.nan, picked)  # one score (ODIN) or one row of layer outputs per image
            if "widths" in e:
                extra[f"{key}:widths"] = np.asarray(e["widths"], dtype=np.int64)
    groups = data["groups"] if "groups" in data else np.array([""] * len(keys))
    loc = data["local"] if local and "local" in data else None
    return Outputs(features=data["features"], logits=data["logits"], labels=labels, extra=extra, local=loc), keys, wnids, groups


def _head(model: str, fit_row: EvalFeatureSet):
    from pipelines.evaluation.detectors import Head

    if fit_row.has_head:
        d = np.load(Path(settings.EVAL_ROOT) / fit_row.path, allow_pickle=False)
        return Head(weight=d["weight"], bias=d["bias"])
    path = head_path(model)
    if not path.is_file():
        try:  # outputs came from imports only: read the last layer from the model itself
            from curation.services.loaded_models import loaded_model

            _write_head(loaded_model(model, ""))
        except Exception:
            return None
    if not path.is_file():
        return None
    d = np.load(path, allow_pickle=False)
    return Head(weight=d["weight"], bias=d["bias"])


def _names(wnids) -> dict[str, str]:
    """wnid -> the class's name as every page, CSV and plot gives it (pipelines.names.class_label):
    the lemma from the synset texts, else from the candidate class folders, else ImageNet's."""
    from pipelines.classes.imagenet import imagenet_lemmas
    from pipelines.names import class_label

    wnids = list(wnids)
    lemmas = dict(SynsetText.objects.filter(wnid__in=wnids).values_list("wnid", "label"))
    for wnid, synset, folder_lemmas in CandidateClass.objects.filter(wnid__in=wnids).values_list("wnid", "synset_name", "lemmas"):
        lemmas.setdefault(wnid, (folder_lemmas or [""])[0] or synset)
    missing = [w for w in wnids if not lemmas.get(w)]
    if missing:
        known = imagenet_lemmas()
        lemmas.update({w: known[w] for w in missing if w in known})
    return {w: class_label(w, lemmas.get(w, "")) for w in wnids}


def evaluation_finalize(*, job_id: int, progress: Callable[[str], None] | None = None) -> EvaluationRun:
    """Assemble the cache, fit and score every detector for every model, write results and plots."""
    from pipelines.evaluation.run import Conventions, EvalInputs, detector_info, evaluate_model, restrict_to_classes

    job = Job.objects.get(pk=job_id)
    run = EvaluationRun.objects.get(job=job)
    if run.status in (EvaluationRun.Status.DONE, EvaluationRun.Status.FAILED):
        return run
    pending = unfinished_chunks(job.pk)
    if pending:
        raise EvaluationError(f"evaluation #{run.pk}: {pending} chunk(s) are not computed yet")
    cfg = run.config
    extras = list(_input_keys(cfg))
    fit_extras = list(_input_keys(cfg, fit_only=True))
    results: dict = {"models": {}, "detectors": detector_info(cfg["methods"], cfg.get("method_params")), "sets": cfg["sets"],
                     "plots": {}}
    sets = {role: _set_of(entry) for role, entry in cfg["sets"].items()}
    decoder = _decoder(cfg)
    results["decoder"] = decoder
    from pipelines.evaluation.detectors import DETECTORS
    from pipelines.evaluation.vlm import is_clip

    local = any(getattr(DETECTORS.get(m), "needs_local", False) for m in cfg["methods"])
    all_extras, all_fit_extras = extras, fit_extras
    for model in cfg["models"]:
        clip = is_clip(model)
        extras, fit_extras = ([], []) if clip else (all_extras, all_fit_extras)  # input-level methods: classifiers only
        rows = {}
        for role, entry in cfg["sets"].items():
            s = sets[role]
            row = s.obj if s.kind == "import" else _assemble(model, entry, "features", run.created_by, decoder)
            if s.kind != "import":
                for key in extras:
                    if role != "id_fit" or key in fit_extras:
                        row = _assemble(model, entry, key, run.created_by, decoder)
            rows[role] = row
        check_one_decoder(rows, decoder)
        fit, _, _, _ = load_outputs(rows["id_fit"], extras=fit_extras)  # no detector reads the fit set's local embeddings
        test, _, _, _ = load_outputs(rows["id_test"], extras=extras, local=local)
        ood, ood_keys, _, ood_groups = load_outputs(rows["ood"], extras=extras, local=local)
        unit = unit_groups = None
        if "unit_tests" in rows:
            unit, _, _, unit_groups = load_outputs(rows["unit_tests"], extras=extras, local=local)
        shifted = {role.removeprefix(SHIFTED_PREFIX): load_outputs(row, extras=extras, local=local)[0]
                   for role, row in rows.items() if role.startswith(SHIFTED_PREFIX)}
        ood_shifted = {role.removeprefix(OOD_SHIFTED_PREFIX): load_outputs(row, extras=extras, local=local)[0]
                       for role, row in rows.items() if role.startswith(OOD_SHIFTED_PREFIX)}
        inputs = EvalInputs(fit=fit, id_test=test, ood=ood, ood_groups=ood_groups, unit_tests=unit, unit_groups=unit_groups,
                            head=None if clip else _head(model, rows["id_fit"]), ood_subsplits=_subsplits(sets["ood"], ood_groups),
                            id_shifted=shifted, ood_shifted=ood_shifted)
        weights_used = ""
        if clip:
            inputs, weights_used = _zero_shot(model, cfg, inputs)
        classes_before = inputs.id_test.logits.shape[1]
        restriction = cfg.get("restrict_logits")
        if restriction:
            inputs, restricted = restrict_to_classes(inputs, restriction["wnids"], set_name=restriction["set"], input_level=bool(extras))
        head = inputs.head
        window = int(cfg.get("severity_window") or inputs.id_test.logits.shape[1])
        methods = [(m, cfg["method_params"].get(m, {})) for m in cfg["methods"]]
        r = evaluate_model(inputs, methods, severity_window=window, seed=int(cfg.get("seed", 0)), progress=progress,
                           conventions=Conventions(**cfg.get("conventions", {})))
        if restriction:
            r["restricted_logits"] = restricted
        r["failed_images"] = {role: len(row.failed) for role, row in rows.items()}
        r["cache"] = {role: row.pk for role, row in rows.items()}
        r["head"] = head is not None
        r["head_used"] = _head_used(inputs, classes_before, restriction)
        if weights_used:
            r["weights"] = weights_used
        r.update(_runtime_record(job, model))
        results["models"][model] = r
        results["plots"][model] = _plots(run, model, r, results["detectors"])
    if cfg.get("sanity"):
        results["sanity"] = _sanity(cfg, sets, progress)
    wnids = sorted({w for r in results["models"].values() for d in r["detectors"].values() for w in d.get("classes", {})})
    results["class_names"] = _names(wnids)
    with transaction.atomic():
        locked = EvaluationRun.objects.select_for_update().get(pk=run.pk)
        if locked.status in (EvaluationRun.Status.DONE, EvaluationRun.Status.FAILED):
            return locked
        locked.results, locked.finished_at = results, timezone.now()
        locked.status, locked.message = run_outcome(results, n_models=len(cfg["models"]), n_methods=len(cfg["methods"]))
        locked.save(update_fields=["results", "status", "finished_at", "message"])
        job_status = Job.Status.DONE if locked.status == EvaluationRun.Status.DONE else Job.Status.FAILED
        Job.objects.filter(pk=job.pk).update(status=job_status, finished_at=locked.finished_at, message=locked.message)
    return locked


def _zero_shot(model: str, cfg: dict, inputs: Any) -> tuple[Any, str]:
    """A vision-language model's inputs with its zero-shot head over ImageNet-1K's classes (the
    run's template; pipelines.evaluation.vlm.zero_shot_head, text embeddings cached under the data folder)
    and every set's logits from it (logit_scale x cosine); a restriction to an ID class set then
    keeps those classes' prompts only. Returns (inputs, where the weights came from)."""
    from pipelines.evaluation.vlm import DEFAULT_TEMPLATE, zero_shot_head
    from pipelines.features.classifiers import imagenet_1k_classes

    cm = clip_model(model)
    text = zero_shot_head(cm, imagenet_1k_classes()[0], template=cfg.get("clip_template") or DEFAULT_TEMPLATE,
                          cache_dir=Path(settings.DATA_DIR) / "clip_text")
    sets = [inputs.fit, inputs.id_test, inputs.ood, *([inputs.unit_tests] if inputs.unit_tests is not None else []),
            *inputs.id_shifted.values(), *inputs.ood_shifted.values()]
    for o in sets:
        o.logits = (text.logit_scale * text.cosines(o.features)).astype(np.float32)
    inputs.text = text
    return inputs, f"{cm.weights} ({cm.identity})"


def _head_used(inputs: Any, classes_before: int, restriction: dict | None) -> dict:
    """Which head gave a model's logits, in words for the result page and the report."""
    if inputs.text is not None:
        t = inputs.text
        return {"kind": "zero-shot", "template": t.template,
                "text": f"zero-shot text head: prompt {t.template_text}; {len(t.wnids)} ID class names ({t.names_source})"
                        f"{', the ID half of ' + restriction['set'] + ' only' if restriction else ''}; logits = {t.logit_scale:g} x cosine"}
    classes = inputs.id_test.logits.shape[1]
    return {"kind": "classifier", "template": "",
            "text": f"the classifier's own {classes_before:,}-class head"
                    + (f", logits restricted to the {classes:,} classes of {restriction['set']}" if restriction else "")}


def _runtime_record(job: Job, model: str) -> dict:
    """What ran ``model``'s forward passes in this run's chunks ("runtime") and what their
    extractions noted ("runtime_notes": e.g. the CPU runtime's fallback to torch and why)."""
    from curation.models import JobChunk

    runtimes: list[str] = []
    notes: list[str] = []
    for payload, stats in JobChunk.objects.filter(job=job).order_by("index").values_list("payload", "stats"):
        if not isinstance(payload, dict) or payload.get("model") != model or not isinstance(stats, dict):
            continue
        if stats.get("runtime") and stats["runtime"] not in runtimes:
            runtimes.append(stats["runtime"])
        notes += [n for n in stats.get("notes", []) if n not in notes]
    return {**({"runtime": ", ".join(runtimes)} if runtimes else {}), **({"runtime_notes": notes} if notes else {})}


def run_outcome(results: dict, *, n_models: int, n_methods: int) -> tuple[str, str]:
    """(status, message) of a finished run. A detector that could not run on these sets is
    ``skipped`` (said per row; the run is done). A detector that raised is a failure: the run is
    then ``failed`` and its message starts with ``partial:`` and names each failed model/detector
    with its error, while the results that were computed stay on the run's page."""
    not_ok = [(f"{m}/{d}", e) for m, r in results["models"].items() for d, e in r["detectors"].items() if e["status"] != "ok"]
    skipped = [name for name, e in not_ok if e["status"] == "skipped"]
    failed = [(name, str(e.get("error") or "no error recorded").splitlines()[0][:300]) for name, e in not_ok if e["status"] != "skipped"]
    total = n_models * n_methods
    message = (f"{n_models} model(s) x {n_methods} detector(s) evaluated"
               + (f"; skipped (cannot run on these sets, see each row): {', '.join(skipped)}" if skipped else ""))
    if not failed:
        return EvaluationRun.Status.DONE, message
    return EvaluationRun.Status.FAILED, (f"partial: {len(failed)} of {total} detector result(s) failed: "
                                         + "; ".join(f"{name} ({error})" for name, error in failed)
                                         + f". The other results stand ({message}).")


def _sanity(cfg: dict, sets: dict[str, ImageSet], progress) -> dict:
    """ImageNet-OOD's random-weight sanity check (pipelines.evaluation.sanity) on samples of the run's sets,
    with the low-level statistics of each set beside it. RANDOM WEIGHTS: labelled as such."""
    from pipelines.evaluation.sanity import SanitySets, random_weight_check, sample
    from pipelines.features.classifiers import ModelUnavailable, imagenet_1k_classes

    sc = cfg["sanity"]
    skipped = [role for role, s in sets.items() if s.kind == "import"]
    if {"id_test", "id_fit"} & set(skipped):
        return {"status": "skipped", "note": "the ID test or fit set is imported outputs: the check needs the images"}
    paths: dict[str, list[Item]] = {}
    for role, s in sets.items():
        if s.kind != "import" and role != "unit_tests":
            paths[role] = sample([it for it in set_items(s) if it.path and not it.error], sc["sample"], seed=int(cfg.get("seed", 0)))
    index = {w: i for i, w in enumerate(imagenet_1k_classes()[0])}
    others = {role: [it.path for it in items] for role, items in paths.items() if role not in ("id_test", "id_fit")}
    try:
        result = random_weight_check(
            SanitySets(id_test=[it.path for it in paths["id_test"]], fit=[it.path for it in paths["id_fit"]],
                       fit_labels=[index.get(it.wnid, -1) for it in paths["id_fit"]], others=others),
            [(m, cfg["method_params"].get(m, {})) for m in cfg["methods"]], seeds=sc["seeds"], arch=sc["arch"],
            decoder=_decoder(cfg), progress=progress, cpu_graph_dir=str(settings.DATA_DIR / "cpu_graphs"))
    except (ModelUnavailable, OSError, RuntimeError) as exc:
        return {"status": "failed", "note": f"{type(exc).__name__}: {exc}"}
    result["status"] = "done"
    from pipelines.evaluation.low_level import low_level_report

    result["low_level"], result["differs"] = low_level_report({role: [it.path for it in items] for role, items in paths.items()})
    if skipped:
        result["notes"].append(f"not checked (imported outputs, no images): {', '.join(skipped)}")
    return result


def _subsplits(ood_set: ImageSet, groups: np.ndarray) -> np.ndarray | None:
    """The easy/hard sub-split of every OOD image, when the OOD set is an export written with
    ``--difficulty-split`` (its classes' sub-splits are recorded in the export's counts)."""
    if ood_set.kind != "export":
        return None
    classes = (ood_set.obj.counts or {}).get("difficulty", {}).get("classes")
    if not classes:
        return None
    return np.array([classes.get(str(g), "") for g in groups.tolist()], dtype=str)


def check_one_decoder(rows: dict[str, EvalFeatureSet], decoder: str) -> None:
    """ID fit, ID test and OOD outputs of one run come from one decoder (Pillow's and
    torchvision's inputs differ slightly; a detector fitted on one and scored on the other would
    measure the decoders); imported outputs whose decoder is not recorded are taken as they are."""
    other = {role: row.decoder for role, row in rows.items() if row.decoder not in (decoder, "unknown")}
    if other:
        raise EvaluationError("refusing to mix decoders: " + ", ".join(f"{role} ({rows[role].dataset}) was computed with {d}"
                                                                      for role, d in other.items())
                              + f", the run decodes with {decoder}; start a run with one decoder")


def _plot_drawers(run: EvaluationRun, model: str, r: dict, info: dict) -> dict[str, Callable[[], str]]:
    """Plot name -> a function drawing it as SVG text, for one model of a run; nothing is drawn here."""
    from pipelines.evaluation import plots as eval_plots

    ok = {d: e for d, e in r["detectors"].items() if e["status"] == "ok"}
    label = lambda d: info.get(d, {}).get("label", d)  # noqa: E731
    names: dict = {}

    def class_names() -> dict:
        if not names:
            names.update(_names(sorted({w for e in ok.values() for w in e["classes"]})))
        return names

    drawers: dict[str, Callable[[], str]] = {
        "cdf": lambda: eval_plots.fpr_cdf_svg({label(d): [c["fpr95_id_positive"] for c in e["classes"].values()] for d, e in ok.items()},
                                              title=f"{model}: per-class FPR@95 on {run.ood_label}")}
    for d, e in ok.items():
        drawers[f"bars_{d}"] = (lambda d=d, e=e: eval_plots.class_bars_svg(
            [class_names()[w] for w in e["classes"]], [c["fpr95_id_positive"] for c in e["classes"].values()],
            title=f"{model} / {label(d)}: FPR@95 per OOD class"))
    fs = {d: e["full_spectrum"] for d, e in ok.items() if e.get("full_spectrum")}
    if fs:
        from pipelines.evaluation.run import ALL_SHIFTED

        pick = ALL_SHIFTED if ALL_SHIFTED in next(iter(fs.values())) else next(iter(next(iter(fs.values()))))
        drawers["full_spectrum"] = lambda: eval_plots.full_spectrum_svg(
            [label(d) for d in fs], [m[pick]["standard"]["auroc"] for m in fs.values()],
            [m[pick]["full_spectrum"]["auroc"] for m in fs.values()], [m[pick]["shift"]["auroc"] for m in fs.values()],
            title=f"{model}: AUROC standard vs full spectrum ({pick})")
    if any(e.get("severity") for e in ok.values()):
        drawers["severity"] = lambda: eval_plots.severity_svg(
            {label(d): [lv["auroc"] for lv in e["severity"]] for d, e in ok.items() if e.get("severity")},
            title=f"{model}: AUROC per C-OOD severity level")
    return drawers


def _plot_folder(run: EvaluationRun) -> Path:
    return Path(settings.EVAL_ROOT) / "runs" / str(run.pk)


def _plots(run: EvaluationRun, model: str, r: dict, info: dict) -> dict:
    """The plot files of one model (relative paths, as the results record them). The summary plots
    (the FPR CDF, full spectrum, severity: one each) are drawn now; the per-detector bars, one per
    detector (34 in the demo, about a second each), when a page first asks for one
    (evaluation_plot_file)."""
    out: dict = {"bars": {}}
    folder = _plot_folder(run) / safe_component(model)
    folder.mkdir(parents=True, exist_ok=True)
    for name, draw in _plot_drawers(run, model, r, info).items():
        rel = f"{safe_component(model)}/{name}.svg"
        if name.startswith("bars_"):
            out["bars"][name[5:]] = rel
        else:
            (folder / f"{name}.svg").write_text(draw(), encoding="utf-8")
            out[name] = rel
    return out


_PLOT_LOCK = threading.Lock()


def evaluation_plot_file(*, run: EvaluationRun, rel: str) -> Path | None:
    """The file of one of ``run``'s plots, drawn and saved the first time it is asked for; None
    when ``rel`` is not one of the run's plots."""
    from curation.selectors.evaluation import evaluation_plot_path

    path = evaluation_plot_path(run, rel)
    if path is None or path.is_file():
        return path
    results = run.results or {}
    for model, plots in results.get("plots", {}).items():
        names = {v: k for k, v in plots.items() if k != "bars"} | {v: f"bars_{d}" for d, v in plots.get("bars", {}).items()}
        if rel in names and model in results.get("models", {}):
            draw = _plot_drawers(run, model, results["models"][model], results.get("detectors", {})).get(names[rel])
            if draw is None:
                return None
            with _PLOT_LOCK:  # pyplot keeps global state: one drawing at a time per process
                if not path.is_file():
                    svg = draw()
                    atomic_write(path, lambda fh: fh.write(svg.encode("utf-8")), root=settings.EVAL_ROOT)
            return path
    return None


def evaluation_fail(*, job_id: int, error: BaseException | str) -> None:
    job_fail(job_id=job_id, error=error)
    job = Job.objects.filter(pk=job_id).first()
    if job is not None and job.status == Job.Status.FAILED:
        EvaluationRun.objects.filter(job_id=job_id).exclude(status=EvaluationRun.Status.DONE).update(
            status=EvaluationRun.Status.FAILED, message=job.message, finished_at=timezone.now())


def evaluation_run_inline(*, run: EvaluationRun, progress: Callable[[int], None] | None = None,
                          on_total: Callable[[int], None] | None = None) -> EvaluationRun:
    """Run every step in this process (commands without a broker); a failure marks the run failed and is raised."""
    run_inline(run.job, progress=progress, on_total=on_total)
    return EvaluationRun.objects.select_related("job").get(pk=run.pk)


# -- imported outputs ------------------------------------------------------------------------------------


def outputs_import(*, name: str, path: Path, model_name: str, user: User | None = None, decoder: str = "unknown") -> EvalFeatureSet:
    """Import precomputed outputs (.npz with ``features`` [n, d] and ``logits`` [n, C]; optional
    ``labels`` (class indices or wnids), ``keys``, ``weight`` [C, d] and ``bias`` [C]) as an ID
    set named ``import:NAME`` for ``model_name``."""
    from pipelines.features.classifiers import imagenet_1k_classes
    from pipelines.features.decode import DECODERS

    if decoder not in (*DECODERS, "unknown"):
        raise EvaluationError(f"decoder {decoder!r}: choose one of {', '.join(DECODERS)} or unknown")
    try:
        check_name(name, what="import name")
    except InvalidName as exc:
        raise EvaluationError(str(exc)) from None
    from pipelines.evaluation.run import OutputsFileError, read_outputs_file

    path = Path(path)
    try:
        arrays = read_outputs_file(path, imagenet_1k_classes()[0])
    except OutputsFileError as exc:
        raise EvaluationError(str(exc)) from None
    f, has_head = arrays["features"], "weight" in arrays
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    key = f"import:{name}"
    existing = EvalFeatureSet.objects.filter(dataset=key).first()
    if existing is not None:
        if existing.version == digest and existing.model_name == model_name:
            return existing  # the same file again: nothing to do
        raise EvaluationError(f"imported outputs named {name!r} already exist (from another file or model); choose another name")
    folder = cache_dir(model_name, key, digest)
    atomic_write(folder / "outputs.npz", lambda fh: np.savez(fh, **arrays), root=settings.EVAL_ROOT)
    row = EvalFeatureSet.objects.create(model_name=model_name, dataset=key, version=digest, decoder=decoder,
                                        path=str((folder / "outputs.npz").relative_to(settings.EVAL_ROOT)), images=len(f),
                                        feature_dim=int(f.shape[1]), has_head=has_head, created_by=user,
                                        note=f"imported from {path}")
    audit_record(actor=user, action="outputs_imported", target=row, data={"file": str(path), "model": model_name, "rows": len(f)})
    return row

