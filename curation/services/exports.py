"""Exports: clean OOD sets and OOD unit-test sets, immutable and versioned.

export_create / unit_tests_create record the request (Export + Job, config fixed before any
work) and queue it; export_execute / unit_tests_execute do the work (Celery task or inline):
select the images, check leakage, write the folder (pipelines.export.write), record the members.
A finished or blocked export is never touched again; re-running an unfinished one starts its
folder from scratch, so a redelivered task cannot leave a half-written export behind.
"""
from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from itertools import islice
from pathlib import Path
from typing import Any, Callable

from django.conf import settings
from django.contrib.auth.models import User
from django.db import IntegrityError, transaction
from django.db.models import BooleanField, Count, Exists, ExpressionWrapper, FilteredRelation, Max, OuterRef, Q, Value
from django.utils import timezone

from curation.audit import audit_record
from curation.jobs import enqueue_on_commit, run_inline
from curation.models import (
    CandidateClass,
    DuplicateOverride,
    Export,
    ExportMember,
    Image,
    ImageEmbedding,
    Job,
    ReviewDecision,
    ReviewItem,
    ReviewSettings,
    Source,
)
from curation.selectors import class_policy, contamination_report
from curation.services.export_datasheet import datasheet_facts
from curation.services.id_classes import id_classes_resolve
from curation.services.jobs import job_fail, job_mark_running
from curation.version import code_version
from pipelines.classes.semantic import EASY, HARD, DifficultyError, SemanticIndex, difficulty_split, parse_difficulty
from pipelines.classes.wordnet_graph import load_noun_graph
from pipelines.export.diff import PreviousMember, PreviousVersion
from pipelines.export.layouts import default_layouts
from pipelines.export.write import LAYOUTS, MANIFEST_FORMAT
from pipelines.names import InvalidName, check_name, inside
from pipelines.sources.walk import UnsafePath

Progress = Callable[[int], None]


class ExportRequestError(ValueError):
    """A request that cannot be exported as asked; the message says what to change."""


# -- requests ----------------------------------------------------------------------------------


def _next_version(name: str) -> int:
    # failed attempts wrote nothing; their numbers are free again
    return (Export.objects.filter(name=name).exclude(status=Export.Status.FAILED).aggregate(v=Max("version"))["v"] or 0) + 1


def check_export_names(name: str, split: str, *, name_label: str = "export name", split_label: str = "split") -> None:
    """The one name rule (pipelines/names.py) for an export's name and split, before anything
    else; the labels name the inputs in the message (the command's flags, say)."""
    try:
        check_name(name, what=name_label)
        check_name(split, what=split_label, max_length=40)
    except InvalidName as exc:
        raise ExportRequestError(str(exc)) from None


def _create(*, name: str, kind: str, split: str, config: dict, user, enqueue: bool, override: str = "") -> Export:
    job_kind = Job.Kind.EXPORT if kind == Export.Kind.DATASET else Job.Kind.UNIT_TESTS
    for _attempt in range(5):  # two curators exporting under one name at once: the loser retries
        try:
            with transaction.atomic():
                version = _next_version(name)
                job = Job.objects.create(kind=job_kind, config={**config, "name": name, "version": version},
                                         code_version=code_version(), created_by=user if getattr(user, "pk", None) else None)
                export = Export.objects.create(name=name, version=version, kind=kind, split=split, job=job, config=job.config,
                                               leakage_override=override, created_by=job.created_by)
                audit_record(actor=user, action="export_requested", target=export, data={"kind": kind, "config": job.config})
                if enqueue:
                    enqueue_on_commit(job)
                return export
        except IntegrityError:
            continue
    raise ExportRequestError(f"could not allocate a version for export {name!r}; try again")


def export_create(*, name: str, sources: list[Source], wnids: list[str] | None = None, min_per_class: int = 1,
                  layouts: list[str] | None = None, split: str = "test", link: bool = True, override_leakage: str = "",
                  model_name: str | None = None, difficulty: str | None = None, user: User | None = None, enqueue: bool = True,
                  include_certified: bool = False, warn_loss: float | None = None) -> Export:
    """Ask for a clean-set export of ``sources`` (all their classes, or those in ``wnids``).
    ``difficulty`` (``median``, ``quantile:Q`` or a threshold) also writes easy/hard sub-splits
    by semantic similarity to the closest ID class (pipelines.classes.semantic). ``warn_loss``: the
    share of the previous version's images whose loss the export warns about (default
    settings.EXPORT_WARN_LOSS)."""
    check_export_names(name, split)
    if warn_loss is not None and not 0 <= warn_loss <= 1:
        raise ExportRequestError(f"the loss warned about must be a share between 0 and 1, e.g. 0.2 for 20% (got {warn_loss})")
    if difficulty is not None:
        try:
            parse_difficulty(difficulty)
        except DifficultyError as exc:
            raise ExportRequestError(str(exc)) from None
        difficulty = difficulty.strip()
    layouts = list(dict.fromkeys(layouts or default_layouts()))
    bad = [x for x in layouts if x not in LAYOUTS]
    if bad:
        raise ExportRequestError(f"unknown layout(s) {', '.join(bad)}; choose from {', '.join(LAYOUTS)}")
    if not sources:
        raise ExportRequestError("choose at least one candidate source")
    not_candidates = [s.name for s in sources if s.role != Source.Role.CANDIDATE]
    if not_candidates:
        raise ExportRequestError(f"{', '.join(not_candidates)}: ID reference sources are never exported as OOD")
    if min_per_class < 1:
        raise ExportRequestError(f"the minimum number of clean images per class must be at least 1 (got {min_per_class})")
    wnids = sorted(set(wnids or []))
    if wnids:
        known = set(CandidateClass.objects.filter(source__in=sources).values_list("wnid", flat=True))
        unknown = [w for w in wnids if w not in known]
        if unknown:
            raise ExportRequestError(f"unknown class(es) {', '.join(unknown)}: not a class of {', '.join(s.name for s in sources)}")
    config = {"sources": sorted(s.name for s in sources), "wnids": wnids, "min_per_class": min_per_class, "layouts": layouts,
              "split": split, "link": link, "model": model_name or settings.DEFAULT_MODEL,
              "id_dup_threshold": settings.ID_DUP_THRESHOLD, "max_pixel_diff": settings.NEAR_DUP_MAX_PIXEL_DIFF,
              "warn_loss": settings.EXPORT_WARN_LOSS if warn_loss is None else warn_loss}
    if difficulty is not None:
        config["difficulty"] = difficulty
    if include_certified:  # unreviewed images a met certificate admits (docs/review.md, "Review in full or certify")
        from curation.services.certification import certified_plans

        missing = [s.name for s in sources if s.name not in certified_plans(sources=sources)]
        if missing:
            raise ExportRequestError(f"--include-certified: {', '.join(missing)} has no met certificate; plan one with "
                                     f"`python manage.py certify plan --source {missing[0]}` and review its sample")
        config["include_certified"] = True
    return _create(name=name, kind=Export.Kind.DATASET, split=split, config=config, user=user, enqueue=enqueue, override=override_leakage.strip())


def unit_tests_create(*, name: str, per_test: int = 400, seed: int = 0, id_source: Source | None = None, workers: int = 1,
                      user: User | None = None, enqueue: bool = True, convention: str = "paper") -> Export:
    """Ask for a NINCO unit-test set mirroring the images of an ID reference source."""
    check_export_names(name, "unit-tests")
    id_source = id_source or Source.objects.filter(role=Source.Role.ID).order_by("pk").first()
    if id_source is None or id_source.role != Source.Role.ID:
        raise ExportRequestError("unit tests mirror ID images: register an ID reference source first "
                                 "(`python manage.py add_source NAME PATH --role id`)")
    if per_test < 1:
        raise ExportRequestError(f"images per test must be at least 1 (got {per_test})")
    from pipelines.export.unit_tests import CONVENTIONS

    if convention not in CONVENTIONS:
        raise ExportRequestError(f"unit-test convention {convention!r}: use one of {', '.join(CONVENTIONS)}")
    config = {"per_test": per_test, "seed": seed, "id_source": id_source.name, "workers": workers, "convention": convention}
    return _create(name=name, kind=Export.Kind.UNIT_TESTS, split="unit-tests", config=config, user=user, enqueue=enqueue)


# -- selection ---------------------------------------------------------------------------------
#
# At a pool's size (13.2M images, 9.2M queue items) the selection never holds the pool: the
# reasons are counted by one grouped query per source (a row per class and kind of outcome, the
# row rule applied to each group), the chosen images come from one streamed query that the
# database has already narrowed to final ``ood`` images, and decisions.csv streams every item
# considered in chunks of CHUNK rows (their reviews read per chunk). Memory is bounded by the
# chosen images and the chunk, not by the pool (docs/exports.md, "At a pool's size").

CHUNK = 2000  # rows fetched at a time from a streamed query, and items whose reviews are read together


@dataclass(slots=True)
class Chosen:
    """An image the export carries: the columns the writer, the leakage check and the manifest
    read, with its class and source shared among the images (not a model instance per image)."""

    pk: int  # the review item
    image_id: int
    source: Source
    candidate_class: CandidateClass
    status: str
    decided_at: Any
    relative_path: str
    sha256: str
    container: str
    offset: int
    bytes: int

    @property
    def source_id(self) -> int:
        return self.source.pk

    @property
    def candidate_class_id(self) -> int:
        return self.candidate_class.pk

    @property
    def image(self) -> Image:
        """An unsaved Image with the columns its ``ref()`` reads, built when asked for."""
        return Image(pk=self.image_id, source=self.source, candidate_class=self.candidate_class, relative_path=self.relative_path,
                     sha256=self.sha256, container=self.container, offset=self.offset, bytes=self.bytes)


@dataclass(frozen=True, slots=True)
class Considered:
    """One item the selection considered (a row of decisions.csv), as its query returned it."""

    pk: int
    image_id: int
    source: Source
    candidate_class: CandidateClass | None
    status: str
    final_decision: str
    final_wnids: list
    final_note: str
    decided_by: str  # the adjudicating curator's username, or ""
    relative_path: str
    sha256: str
    image_status: str
    excluded: bool  # a curator excluded the image
    admitted: bool  # open, and in a met certificate's plan (include_certified)
    embedding: dict | None  # the model's prediction row (decisions.csv's columns), or None


class ConsideredRows:
    """Every item the selection considered, with its exclusion reason ('' = exported), in the
    order of decisions.csv; streamed from the database each time it is iterated."""

    def __init__(self, sel: Selection):
        self.sel = sel

    def __len__(self) -> int:
        return self.sel.considered

    def __iter__(self) -> Iterator[tuple[Considered, str]]:
        return _considered_rows(self.sel)


@dataclass
class Selection:
    items: list[Chosen] = field(default_factory=list)  # exported, in order
    excluded: Counter = field(default_factory=Counter)
    classes: dict[str, dict] = field(default_factory=dict)  # wnid -> {name, images}
    class_filter: dict = field(default_factory=dict)
    review_policy: dict = field(default_factory=dict)
    duplicate_overrides: list = field(default_factory=list)  # a curator's corrections of the duplicate search
    certified: set = field(default_factory=set)  # review items admitted by a certificate, not a review
    certificates: dict = field(default_factory=dict)  # source name -> the certificate that admitted them
    # what the streamed rows are read with: the request and the rule's inputs, per source
    considered: int = 0
    model: str = ""
    wnids: list[str] = field(default_factory=list)
    minimum: int = 1
    sources: list[Source] = field(default_factory=list)
    plans: list[int] = field(default_factory=list)  # met certificates' plans (include_certified)
    class_of: dict[int, dict[int, CandidateClass]] = field(default_factory=dict)  # source id -> class id -> class
    policies: dict[int, Any] = field(default_factory=dict)  # source id -> its ClassPolicy
    kept: set[int] = field(default_factory=set)  # classes with at least ``minimum`` clean images

    @property
    def rows(self) -> ConsideredRows:
        """Every item considered, with its exclusion reason ('' = exported), streamed."""
        return ConsideredRows(self)


def _class_filter_info(run) -> dict:
    """The class filter run an export's class choice rests on, for its manifest."""
    if run is None:
        return {}
    return {"run": run.pk, "policy": run.policy_name, "policy_origin": run.policy_origin, "policy_digest": run.policy_digest,
            "id_spec": run.id_spec, "wordnet_sha1": run.wordnet_sha1, "finished": run.job.finished_at.isoformat() if run.job.finished_at else None}


def _reason(*, status: str, final_decision: str, image_status: str, excluded: bool, drop_reason: str,
            cc: CandidateClass | None, admitted: bool, policy: Any) -> str:
    """Why an item is not exported ('' = it is, unless its class falls below the minimum): the
    one rule, applied to a group of items by ``export_select`` and to each row of decisions.csv.
    An item a certificate admits stands in for a final ``ood``; the checks on its image and class
    still apply (an image a curator excluded, a broken file or a dropped duplicate is not exported
    because nobody reviewed it)."""
    if status not in ReviewItem.FINAL:
        if not admitted:
            return f"review_{status}"
    elif final_decision != ReviewDecision.OOD:
        return f"final_{final_decision}"
    if image_status != Image.Status.OK:
        return f"image_{image_status}"
    if excluded:
        return "excluded_by_curator"
    if drop_reason:
        return f"duplicate_{drop_reason}"
    if cc is None or not cc.wnid:
        return "class_unmapped"
    return policy.of(cc.pk).reason


_NEAR_DUPLICATE = "near_duplicate_of:"


def _items(sel: Selection, source: Source):
    """The source's review items the export considers, with the columns every rule reads:
    ``dropped`` (a near-duplicate of another candidate as the search stands, overrides applied;
    copies of ID images are the leakage check's to block), ``excluded`` (by a curator) and
    ``admitted`` (open and in a met certificate's plan)."""
    from curation.models import CertificationUnit

    items = ReviewItem.objects.filter(source=source)
    if sel.wnids:
        items = items.filter(candidate_class__wnid__in=sel.wnids)
    dup = ImageEmbedding.objects.filter(image_id=OuterRef("image_id"), model_name=sel.model, drop_reason__startswith=_NEAR_DUPLICATE)
    items = items.annotate(dropped=Exists(dup), excluded=ExpressionWrapper(~Q(image__excluded_reason=""), output_field=BooleanField()))
    if sel.plans:
        units = CertificationUnit.objects.filter(plan_id__in=sel.plans, item_id=OuterRef("pk"))
        return items.annotate(admitted=ExpressionWrapper(Q(status=ReviewItem.Status.OPEN) & Exists(units), output_field=BooleanField()))
    return items.annotate(admitted=Value(False, output_field=BooleanField()))


def export_select(*, config: dict) -> Selection:
    """The images an export carries: final label ``ood`` (reviews agreed or a curator
    adjudicated), image file still ok, class kept by the latest class filter run (or accepted
    by a curator) and not visually flagged, and a class with at least ``min_per_class`` of them.

    Per source: the reasons counted by one grouped query (the rule applied to each group of
    items alike), then the chosen images by one streamed query; no statement lists the items."""
    sel = Selection(model=config.get("model") or settings.DEFAULT_MODEL, wnids=sorted(set(config.get("wnids") or [])),
                    minimum=int(config.get("min_per_class", 1)))
    sel.sources = list(Source.objects.filter(name__in=config["sources"]))
    if config.get("include_certified"):
        from curation.services.certification import certified_plans

        for name, plan in certified_plans(sources=sel.sources).items():
            sel.certificates[name] = plan.certificate
            sel.plans.append(plan.pk)
    clean: Counter = Counter()  # class id -> images with no reason against them
    groups: list[tuple[str, int | None, int]] = []  # (reason, class id, items)
    for source in sel.sources:
        policy = class_policy(source=source)  # the one class-eligibility policy, as the review queue uses it
        sel.policies[source.pk] = policy
        sel.class_of[source.pk] = {c.pk: c for c in CandidateClass.objects.filter(source=source)
                                   .only("pk", "source_id", "folder", "wnid", "synset_name", "lemmas")}
        info = _class_filter_info(policy.run)
        sel.class_filter[source.name] = info or {"run": None, "note": "no class filter run: every class counted as kept"}
        sel.review_policy[source.name] = _review_policy(source)
        sel.duplicate_overrides += [
            {"image": o.image_id, "action": o.action, "by": o.created_by.username if o.created_by else "", "note": o.note,
             "at": o.created_at.isoformat()}
            for o in DuplicateOverride.objects.filter(image__source=source, model_name=sel.model)
            .select_related("created_by").order_by("created_at", "id")]
        counted = (_items(sel, source).values("status", "final_decision", "image__status", "excluded", "dropped", "admitted",
                                              "candidate_class_id")
                   .annotate(n=Count("pk")).order_by())
        for g in counted:
            cc = sel.class_of[source.pk].get(g["candidate_class_id"])
            reason = _reason(status=g["status"], final_decision=g["final_decision"], image_status=g["image__status"],
                             excluded=g["excluded"], drop_reason=_NEAR_DUPLICATE if g["dropped"] else "", cc=cc,
                             admitted=g["admitted"], policy=policy)
            groups.append((reason, g["candidate_class_id"], g["n"]))
            if not reason:
                clean[g["candidate_class_id"]] += g["n"]
    sel.kept = {k for k, n in clean.items() if n >= sel.minimum}
    for reason, class_id, n in groups:
        sel.considered += n
        if reason:
            sel.excluded[reason.split(":")[0]] += n
        elif class_id not in sel.kept:
            sel.excluded[f"below_min_per_class_{sel.minimum}"] += n
    for source in sel.sources:
        _choose(sel, source)
    return sel


def _review_policy(source: Source) -> dict:
    """The review settings an export's images were decided under, for its manifest."""
    base = {r.candidate_class_id: r for r in ReviewSettings.objects.filter(source=source).select_related("candidate_class")}
    default = base.get(None)
    return {
        "reviews_required": default.reviews_required if default else 1, "order": default.order if default else "nearest_id",
        "gold_rate": default.gold_rate if default else 0.0,
        "per_class": {r.candidate_class.wnid or r.candidate_class.folder: {"reviews_required": r.reviews_required, "order": r.order}
                      for k, r in base.items() if k is not None},
        "final_label": "ood when every review said ood, or a curator adjudicated ood",
    }


def _choose(sel: Selection, source: Source) -> None:
    """The source's chosen images, in the export's order, streamed: the database keeps the final
    ``ood`` images of mapped classes that are ok, not excluded and not dropped (and the images a
    certificate admits, under the same checks); the class policy and the minimum are applied here to each row."""
    classes = sel.class_of[source.pk]
    decided = Q(status__in=ReviewItem.FINAL, final_decision=ReviewDecision.OOD) | Q(admitted=True)
    wanted = (decided & Q(image__status=Image.Status.OK, excluded=False, dropped=False, candidate_class__isnull=False)
              & ~Q(candidate_class__wnid=""))
    rows = (_items(sel, source).filter(wanted)
            .order_by("candidate_class__wnid", "image__relative_path")
            .values_list("pk", "image_id", "candidate_class_id", "status", "decided_at", "image__relative_path", "image__sha256",
                         "image__container", "image__offset", "image__bytes"))
    for pk, image_id, class_id, status, decided_at, path, sha256, container, offset, size in rows.iterator(chunk_size=CHUNK):
        if class_id not in sel.kept:
            continue  # its class's policy, or below the minimum: counted by export_select
        cc = classes[class_id]
        sel.items.append(Chosen(pk=pk, image_id=image_id, source=source, candidate_class=cc, status=status, decided_at=decided_at,
                                relative_path=path, sha256=sha256, container=container, offset=offset, bytes=size))
        if status not in ReviewItem.FINAL:
            sel.certified.add(pk)  # unreviewed, admitted by the certificate
        entry = sel.classes.setdefault(cc.wnid, {"name": cc.synset_name or cc.folder, "label": _class_name(cc), "images": 0, "sources": []})
        entry["images"] += 1
        if source.name not in entry["sources"]:
            entry["sources"].append(source.name)


_EMBEDDING_COLUMNS = ("pk", "topk", "dup_group", "drop_reason", "nearest_id_image", "nearest_id_similarity")


def _considered_rows(sel: Selection, *, model_name: str | None = None, images: Any = None) -> Iterator[tuple[Considered, str]]:
    """Every item the selection considered, with its reason, in decisions.csv's order (source
    by source, then class wnid and path), streamed in chunks of CHUNK rows, with ``model_name``'s
    prediction row (the selection's model by default); ``images`` (a queryset of image ids)
    narrows it to those images."""
    names = ("pk", "image_id", "candidate_class_id", "status", "final_decision", "final_wnids", "final_note", "decided_by__username",
             "image__relative_path", "image__sha256", "image__status", "excluded", "admitted",
             *(f"emb__{c}" for c in _EMBEDDING_COLUMNS))
    for source in sel.sources:
        classes, policy = sel.class_of[source.pk], sel.policies[source.pk]
        rows = _items(sel, source).annotate(emb=FilteredRelation("image__embeddings", condition=Q(image__embeddings__model_name=model_name or sel.model)))
        if images is not None:
            rows = rows.filter(image_id__in=images)
        rows = rows.order_by("candidate_class__wnid", "image__relative_path").values_list(*names)
        for r in rows.iterator(chunk_size=CHUNK):
            row = dict(zip(names, r))
            cc = classes.get(row["candidate_class_id"]) if row["candidate_class_id"] is not None else None
            emb = {c: row[f"emb__{c}"] for c in _EMBEDDING_COLUMNS} if row["emb__pk"] is not None else None
            drop = (emb["drop_reason"] or "") if emb else ""
            item = Considered(pk=row["pk"], image_id=row["image_id"], source=source, candidate_class=cc, status=row["status"],
                              final_decision=row["final_decision"], final_wnids=row["final_wnids"], final_note=row["final_note"],
                              decided_by=row["decided_by__username"] or "", relative_path=row["image__relative_path"],
                              sha256=row["image__sha256"], image_status=row["image__status"], excluded=row["excluded"],
                              admitted=row["admitted"], embedding=emb)
            reason = _reason(status=item.status, final_decision=item.final_decision, image_status=item.image_status,
                             excluded=item.excluded, drop_reason=drop if drop.startswith(_NEAR_DUPLICATE) else "", cc=cc,
                             admitted=item.admitted, policy=policy)
            if not reason and row["candidate_class_id"] not in sel.kept:
                reason = f"below_min_per_class_{sel.minimum}"
            yield item, reason


def _class_name(cc: CandidateClass) -> str:
    """A class's readable name: its first WordNet lemma (spaces for underscores), else the folder."""
    if cc.lemmas:
        return str(cc.lemmas[0]).replace("_", " ")
    return cc.folder


# -- leakage -----------------------------------------------------------------------------------


def export_leakage(*, items: Sequence[Chosen], split: str, model_name: str, threshold: float, max_pixel_diff: float) -> dict:
    """What an export would leak (pipelines.export.leakage.find_leaks): images identical to, or
    near-duplicates of (feature cosine >= ``threshold`` and the pixel check, as in the duplicate
    search), an ID reference image or an image in a finished export of a different split; images
    that cannot be checked (no features) are listed too. Returns {"violations": [...], "checked": n, ...}."""
    from curation.services.image_pipeline import load_features
    from pipelines.export.leakage import Entry, find_leaks
    from pipelines.features.near_dups import PixelCheck

    ref_rows = list(Image.objects.filter(source__role=Source.Role.ID, status=Image.Status.OK).select_related("source"))
    other = list(ExportMember.objects.filter(export__kind=Export.Kind.DATASET, export__status=Export.Status.DONE)
                 .exclude(export__split=split).select_related("image__source", "export"))
    refs = [("id_reference", r) for r in ref_rows] + [(f"export {m.export.label} (split {m.export.split})", m.image) for m in other]
    embs = _embeddings([it.image_id for it in items], model_name)
    ref_embs = _embeddings([img.pk for _k, img in refs], model_name)
    item_order = [i for i in dict.fromkeys(it.image_id for it in items) if i in embs]
    ref_order = [i for i in dict.fromkeys(img.pk for _k, img in refs) if i in ref_embs]
    item_row, ref_row = {i: n for n, i in enumerate(item_order)}, {i: n for n, i in enumerate(ref_order)}
    entries = [Entry(it.image_id, f"{it.source.name}:{it.relative_path}", it.sha256, item_row.get(it.image_id)) for it in items]
    ref_entries = [Entry(img.pk, f"{img.source.name}:{img.relative_path}", img.sha256, ref_row.get(img.pk), against=kind)
                   for kind, img in refs]
    images = {it.image_id: it.image for it in items} | {img.pk: img for _k, img in refs}

    def path_of(image_id: int):
        try:
            return images[image_id].ref()
        except UnsafePath:
            return None

    ids = list(images)
    pixels = PixelCheck([path_of(i) for i in ids], [images[i].sha256 for i in ids], max_pixel_diff)
    position = {i: n for n, i in enumerate(ids)}
    violations = find_leaks(entries, ref_entries, item_x=load_features([embs[i] for i in item_order]),
                            ref_x=load_features([ref_embs[i] for i in ref_order]), threshold=threshold, model_name=model_name,
                            looks_same=lambda a, b: pixels(position[a.image_id], position[b.image_id]))
    return {"violations": violations, "checked": len(items), "id_reference_images": len(ref_rows),
            "other_split_images": len(other), "model": model_name, "threshold": threshold, "max_pixel_diff": max_pixel_diff}


def _embeddings(image_ids: list[int], model_name: str) -> dict[int, ImageEmbedding]:
    """The images' usable prediction rows (with their feature shard), read CHUNK ids at a time:
    no statement lists every image of a large export."""
    out: dict[int, ImageEmbedding] = {}
    for chunk in _chunks(image_ids, CHUNK):
        out.update((e.image_id, e) for e in ImageEmbedding.objects.filter(image_id__in=chunk, model_name=model_name, ok=True)
                   .select_related("shard"))
    return out


# -- execution ---------------------------------------------------------------------------------


def _ticker(export: Export, progress: Progress | None, *, every: int) -> Progress:
    """A progress callback feeding the command's bar and, every ``every`` items, the Job row."""
    done = [0]

    def tick(n: int) -> None:
        done[0] += n
        if progress:
            progress(n)
        if done[0] % every < n:
            Job.objects.filter(pk=export.job_id).update(progress=done[0])

    return tick


def _manifest_head(export: Export) -> dict:
    return {"format": MANIFEST_FORMAT, "id": export.pk, "name": export.name, "version": export.version, "kind": export.kind,
            "split": export.split, "created": timezone.now().isoformat(),
            "creator": export.created_by.username if export.created_by_id else None,
            "config": export.config, "code_version": export.job.code_version or code_version()}


def _export_dir(export: Export) -> tuple[Path, Path]:
    """The export's folder and its temporary twin; the name was checked when it was requested,
    and the folder must still resolve inside EXPORT_ROOT (no link planted on the way)."""
    check_name(export.name, what="export name")
    final = inside(settings.EXPORT_ROOT, Path(settings.EXPORT_ROOT) / export.name / f"v{export.version}")
    return final, final.with_name(f".v{export.version}.partial")


def _reclaim_orphan(final: Path, export: Export) -> bool:
    """A folder this very export wrote before its worker died, between moving it into place and
    recording it (so it was never listed or downloadable): removed, to be written again.
    Anything else at that path is left alone."""
    from pipelines.export.write import ExportError, clear_partial, read_manifest

    try:
        manifest = read_manifest(final)
    except (ExportError, OSError):
        return False
    if manifest.get("id") != export.pk or manifest.get("version") != export.version or export.status == Export.Status.DONE:
        return False
    clear_partial(final)
    return True


def _begin(export_id: int) -> Export | None:
    with transaction.atomic():
        export = Export.objects.select_for_update(of=("self",)).select_related("job", "created_by").get(pk=export_id)
        if export.status in (Export.Status.DONE, Export.Status.BLOCKED, Export.Status.FAILED):
            return None
        export.status = Export.Status.RUNNING
        export.save(update_fields=["status"])
    job_mark_running(job=export.job, message="selecting images")
    return export


def _finish(export: Export, *, status: str, message: str, **fields) -> Export:
    with transaction.atomic():
        locked = Export.objects.select_for_update(of=("self",)).get(pk=export.pk)
        if locked.status in (Export.Status.DONE, Export.Status.BLOCKED):
            return locked
        for k, v in fields.items():
            setattr(locked, k, v)
        locked.status, locked.message, locked.finished_at = status, message, timezone.now()
        locked.save()
        job = Job.objects.select_for_update().get(pk=locked.job_id)
        job.status = Job.Status.DONE if status in (Export.Status.DONE, Export.Status.BLOCKED) else Job.Status.FAILED
        job.message, job.finished_at = message, timezone.now()
        job.result = {"export": locked.pk, "status": status, "counts": locked.counts}
        job.progress = max(job.progress, job.total)
        job.save()
        audit_record(actor=locked.created_by, action=f"export_{status}", target=locked, data={"message": message, "path": locked.path})
    return locked


def export_fail(*, export_id: int, error: BaseException | str) -> None:
    export = Export.objects.filter(pk=export_id).first()
    if export is None or export.status in (Export.Status.DONE, Export.Status.BLOCKED):
        return
    from pipelines.export.write import clear_partial

    job_fail(job_id=export.job_id, error=error)
    tmp = _export_dir(export)[1]
    clear_partial(tmp)  # a failed export leaves no half-written folder
    try:
        tmp.parent.rmdir()  # nor the name's folder, when this was its first version (only an empty folder is removed)
    except OSError:
        pass
    Export.objects.filter(pk=export_id).update(status=Export.Status.FAILED, finished_at=timezone.now(),
                                               message=Job.objects.get(pk=export.job_id).message)


def _model_provenance(sources: list[str], model_name: str) -> dict:
    from pipelines.features.classifiers import MODELS

    spec = MODELS.get(model_name)
    jobs = Job.objects.filter(kind=Job.Kind.EXTRACT, status=Job.Status.DONE, source__name__in=sources, config__model=model_name).order_by("pk")
    return {"name": model_name, "timm_name": spec.timm_name if spec else model_name, "description": spec.description if spec else "timm model by name",
            "extract_jobs": [{"job": j.pk, "source": j.source.name if j.source_id else None, "weights": j.config.get("weights") or "registry default",
                                                  "code_version": j.code_version, "finished": j.finished_at.isoformat() if j.finished_at else None}
                                                 for j in jobs.select_related("source")]}


def _wordnet() -> dict:
    return {"version": "3.0 (Princeton; ImageNet wnids are its noun offsets)"}


def _chunks(rows: Iterable, size: int) -> Iterator[list]:
    """``rows`` in lists of at most ``size``, read as they come."""
    it = iter(rows)
    while chunk := list(islice(it, size)):
        yield chunk


def _reviews_in_order(sel: Selection) -> Iterator[tuple[int, dict]]:
    """Every review of the items considered, as decisions.csv states them, in the items' order
    (source by source, class wnid, path; oldest review first), streamed CHUNK rows at a time: read
    beside the items in one pass, where looking each chunk's reviews up by item would read the
    review table at random (at 4M images, most of the time)."""
    from curation.models import Review

    for source in sel.sources:
        reviews = Review.objects.filter(item__source=source)
        if sel.wnids:
            reviews = reviews.filter(item__candidate_class__wnid__in=sel.wnids)
        rows = (reviews.order_by("item__candidate_class__wnid", "item__image__relative_path", "created_at", "pk")
                .values_list("item_id", "annotator__username", "decision", "id_wnids", "note", "created_at", "seconds", "is_gold"))
        for item_id, annotator, decision, id_wnids, note, at, seconds, gold in rows.iterator(chunk_size=CHUNK):
            yield item_id, {"annotator": annotator, "decision": decision, "id_wnids": id_wnids, "note": note,
                            "at": at.isoformat(), "seconds": round(seconds, 1), "gold": gold}


def _decisions_rows(sel: Selection, placed_by_image: Mapping[int, Any], model_name: str) -> Iterator[tuple[int, list]]:
    """decisions.csv's rows (image id, cells): every item considered, with ``model_name``'s
    prediction, and its reviews merged in from a second stream in the same order."""
    reviews = _reviews_in_order(sel)
    head = next(reviews, None)
    for it, reason in _considered_rows(sel, model_name=model_name):
        mine = []
        while head is not None and head[0] == it.pk:
            mine.append(head[1])
            head = next(reviews, None)
        cc, e = it.candidate_class, it.embedding
        placed = placed_by_image.get(it.image_id)
        if not reason and placed is not None and placed.problem:
            reason = placed.problem.split(":")[0]
        exported = placed is not None and not placed.problem
        yield it.image_id, [
            it.image_id, it.source.name, it.relative_path, it.sha256, cc.wnid if cc else "", _class_name(cc) if cc else "",
            it.final_decision, " ".join(it.final_wnids or []), it.status, it.decided_by, it.final_note, json.dumps(mine),
            json.dumps(e["topk"] if e else []), e["dup_group"] if e else "", e["drop_reason"] if e else "",
            e["nearest_id_image"] if e and e["nearest_id_image"] else "",
            round(e["nearest_id_similarity"], 4) if e and e["nearest_id_similarity"] is not None else "",
            "yes" if exported else "no", reason, ("certificate" if it.pk in sel.certified else "review") if exported else "",
        ]
    if head is not None:  # the two streams disagreed on the order: never write a row without its reviews
        raise RuntimeError(f"decisions.csv: the reviews of review item {head[0]} came out of the items' order; nothing was written")


# decisions.csv: these, then one column per layout written (pipelines.export.layouts: Layout.decisions_column)
DECISION_COLUMNS = [
    "image_id", "source", "source_path", "sha256", "ood_wnid", "ood_class", "final_label", "final_id_wnids", "review_status",
    "adjudicated_by", "final_note", "reviews", "top5", "duplicate_group", "duplicate_drop_reason", "nearest_id_image",
    "nearest_id_similarity", "exported", "excluded_reason", "admitted_by",
]


def previous_version(export: Export) -> PreviousVersion | None:
    """The latest finished dataset export of the same name before ``export``, with its members."""
    prev = (Export.objects.filter(name=export.name, kind=Export.Kind.DATASET, status=Export.Status.DONE, version__lt=export.version)
            .order_by("-version").first())
    if prev is None:
        return None
    members: dict[int, PreviousMember] = {}
    rows = (ExportMember.objects.filter(export=prev).select_related("image__source")
            .values_list("image_id", "wnid", "image__source__name", "image__relative_path"))
    for image_id, wnid, source, path in rows:
        members[image_id] = PreviousMember(wnid=wnid, source=source, source_path=path)
    names = {cc.wnid: _class_name(cc) for cc in CandidateClass.objects.filter(wnid__in={m.wnid for m in members.values()})}
    members = {i: replace(m, class_name=names.get(m.wnid, "")) for i, m in members.items()}
    return PreviousVersion(version=prev.version, label=prev.label, members=members, written_at=prev.created_at)


class _DatasetExport:
    """The database's part of a dataset export (pipelines.export.write.ExportHooks)."""

    def __init__(self, export: Export, sel: Selection, leak: dict, previous: PreviousVersion | None):
        self.export, self.sel, self.leak, self.previous = export, sel, leak, previous
        self.cfg = export.config
        self.previous_wnids = previous.wnids if previous else set()  # once, not per added image
        self.items_by_image = {it.image_id: it for it in sel.items}

    def difficulty(self, good):
        return _difficulty(self.sel, good, self.cfg.get("difficulty"), export_name=self.export.name, layouts=self.cfg["layouts"])

    def decision_rows(self, placed):
        return _decisions_rows(self.sel, placed, self.cfg["model"])

    def added_reason(self, p) -> str:
        it = self.items_by_image.get(p.item.image_id)
        if it is not None and it.pk in self.sel.certified:
            return "admitted_by_certificate"
        prev = self.previous
        if prev is not None and it is not None and it.decided_at and prev.written_at and it.decided_at > prev.written_at:
            return f"decided_after_v{prev.version}"
        if prev is not None and p.item.wnid not in self.previous_wnids:
            return "class_not_in_previous_version"
        return "selection_changed"

    def describe(self, root: Path, written) -> tuple[dict, dict]:
        export, sel, cfg, counts = self.export, self.sel, self.cfg, written.counts
        certification = None
        if sel.certificates:
            by_certificate = {it.image_id for it in sel.items if it.pk in sel.certified}
            n_cert = sum(1 for p in written.good if p.item.image_id in by_certificate)
            sentence = certificate_sentence(sel.certificates, n_cert, len(written.good))
            certification = {"admitted_by_certificate": n_cert, "admitted_by_review": len(written.good) - n_cert,
                             "certificates": sel.certificates, "sentence": sentence}
            counts["certified"] = {"images": n_cert, "sentence": sentence}  # the export page states it
        model = _model_provenance(cfg["sources"], cfg["model"])
        contamination = {s: _contamination_summary(s) for s in cfg["sources"]}
        facts = datasheet_facts(export=export, root=root, good=written.good, classes=sel.classes, class_filter=sel.class_filter,
                                review_policy=sel.review_policy, counts=counts, leak=self.leak, model=model,
                                contamination=contamination, certificate=certification["sentence"] if certification else None,
                                difficulty=written.difficulty, diff=written.diff)
        extra = {
            **_manifest_head(export), "class_filter": sel.class_filter,
            "review_policy": {"sources": sel.review_policy, "decisions": {c.value: c.label for c in ReviewDecision}},
            "duplicate_overrides": sel.duplicate_overrides,
            "model": model, "wordnet": _wordnet(),
            "leakage": {**{k: v for k, v in self.leak.items() if k != "violations"}, "violations": self.leak["violations"]},
            "contamination": contamination,
            **({"certification": certification} if certification else {}),
        }
        return extra, facts


def export_execute(*, export_id: int, progress: Progress | None = None, on_total: Callable[[int], None] | None = None) -> Export:
    """Select, check for leakage, write (pipelines.export.write.write_export), record. Idempotent: a
    finished export is returned as it is."""
    from pipelines.export import write as px

    export = _begin(export_id)
    if export is None:
        return Export.objects.get(pk=export_id)
    cfg = export.config
    sel = export_select(config=cfg)
    Job.objects.filter(pk=export.job_id).update(total=len(sel.items), message="checking leakage")
    if on_total:
        on_total(len(sel.items))
    leak = export_leakage(items=sel.items, split=export.split, model_name=cfg["model"], threshold=cfg["id_dup_threshold"],
                          max_pixel_diff=cfg["max_pixel_diff"])
    leak["override"] = export.leakage_override
    counts = {"images": len(sel.items), "classes": len(sel.classes), "excluded": dict(sorted(sel.excluded.items()))}
    if leak["violations"] and not export.leakage_override:
        kinds = Counter(v["kind"] for v in leak["violations"])
        msg = (f"blocked: {len(leak['violations'])} image(s) would leak ({', '.join(f'{n} {k}' for k, n in kinds.items())}); nothing was written. "
               f"Export again with a leakage override note (admin) or --override-leakage \"why\" (command) if this is intended")
        return _finish(export, status=Export.Status.BLOCKED, message=msg, leakage=leak, counts=counts)
    if not sel.items:
        return _finish(export, status=Export.Status.FAILED, leakage=leak, counts=counts,
                       message=f"nothing to export: no image of {', '.join(cfg['sources'])} has the final label ood in a kept class "
                               f"(excluded: {', '.join(f'{k} {v}' for k, v in sorted(sel.excluded.items())) or 'none reviewed'})")
    final, tmp = _export_dir(export)
    if final.exists() and not _reclaim_orphan(final, export):
        return _finish(export, status=Export.Status.FAILED, message=f"{final} already exists; exports are never rewritten")
    px.clear_partial(tmp)
    tmp.mkdir(parents=True)
    Job.objects.filter(pk=export.job_id).update(message="writing files")
    items, refused = _export_items(sel)
    previous = previous_version(export)
    written = px.write_export(
        tmp, final, name=export.name, layouts=cfg["layouts"], items=items, refused=refused, link=cfg.get("link", True),
        excluded=sel.excluded, decision_columns=DECISION_COLUMNS, hooks=_DatasetExport(export, sel, leak, previous),
        previous=previous, why_not=_why_not(sel, export, previous),
        warn_loss=float(cfg.get("warn_loss", settings.EXPORT_WARN_LOSS)), progress=_ticker(export, progress, every=500))
    good, counts = written.good, written.counts
    with transaction.atomic():
        members = (ExportMember(export=export, image_id=p.item.image_id, sha256=p.item.sha256, wnid=p.item.wnid, files=p.files) for p in good)
        for batch in _chunks(members, CHUNK):  # CHUNK rows built at a time, not one instance per image at once
            ExportMember.objects.bulk_create(batch, ignore_conflicts=True)
        problems = sum(1 for p in written.placed if p.problem)
        msg = (f"{len(good)} images in {counts['classes']} classes written to {final}"
               + (f"; {problems} file(s) changed or vanished since ingest (or now outside their source) were left out (see decisions.csv)" if problems else "")
               + (f"; leakage overridden: {export.leakage_override}" if leak["violations"] else "")
               + (f"; loses {100 * written.diff['loss_share']:.0f}% of {written.diff['previous']['label']}'s images (see its difference)"
                  if written.diff and written.diff["warning"] else ""))
        return _finish(export, status=Export.Status.DONE, message=msg, path=str(final.relative_to(settings.EXPORT_ROOT)),
                       manifest_sha256=written.manifest_sha256, counts=counts, leakage=leak)


def _why_not(sel: Selection, export: Export, previous: PreviousVersion | None) -> dict[int, str]:
    """Image id -> why the selection left it out, for the previous version's images only (the
    difference names why each was removed): the considered rows narrowed to them by the database."""
    if previous is None:
        return {}
    prev = Export.objects.filter(name=export.name, kind=Export.Kind.DATASET, status=Export.Status.DONE, version=previous.version)
    images = ExportMember.objects.filter(export__in=prev.values("pk")).values("image_id")
    return {it.image_id: reason for it, reason in _considered_rows(sel, images=images) if reason}


def _export_items(sel: Selection) -> tuple[list, list]:
    """The selected images as the writer's items (their files resolved inside their source's
    root), and those refused because the file is now a link out of its source."""
    from pipelines.export import write as px

    roots = {s.pk: str(Path(s.root).resolve()) for s in sel.sources}
    items, refused = [], []
    for it in sel.items:
        cc = it.candidate_class
        item = px.ExportItem(image_id=it.image_id, src="", sha256=it.sha256, wnid=cc.wnid, class_name=_class_name(cc),
                             file_name=it.relative_path.rsplit("/", 1)[-1], source=it.source.name,
                             source_path=it.relative_path, synset=sel.classes[cc.wnid]["name"])
        try:  # the bytes through the source's layout: a file, or an archive member read in place
            items.append(replace(item, src=it.image.ref(root_real=roots[it.source_id])))
        except UnsafePath as exc:  # the file became a link out of its source after ingest
            refused.append(px.Placed(item=item, problem=f"unsafe_path: {exc}"))
    return items, refused


def certificate_sentence(certificates: dict, admitted: int, total: int) -> str:
    """The one sentence a paper can quote about the images no one reviewed."""
    parts = []
    for name, c in sorted(certificates.items()):
        parts.append(f"{name}: at most {100 * c['remainder_id_share_bound']:.2f}% of its {c['remainder_images']} unreviewed images "
                     f"show an ID object ({100 * c['confidence']:.0f}% confidence, anytime-valid bound from {c['reviews_used']} reviews "
                     f"of a score-stratified random sample, seed {c['seed']})")
    said = next((c["guarantee"] for _n, c in sorted(certificates.items()) if c.get("guarantee")), "")
    return (f"{admitted} of the {total} images were admitted by a certificate rather than a review; " + "; ".join(parts) + "."
            + (f" {said}" if said else ""))


def _difficulty(sel: Selection, good: list, spec_text: str | None, *, export_name: str,
                layouts: list[str]) -> tuple[dict | None, dict | None]:
    """wnid -> ClassDifficulty for the exported classes, and what the manifest says of the split:
    the measure, the ID classes it was measured against, the cut and the counts per sub-split."""
    from pipelines.export import write as px

    if spec_text is None or not good:
        return None, None
    spec = parse_difficulty(spec_text)
    id_spec = next((info.get("id_spec") for info in sel.class_filter.values() if info.get("id_spec")), None)
    id_name, id_wnids = id_classes_resolve(id_spec)
    graph = load_noun_graph(settings.NLTK_DATA)
    index = SemanticIndex(graph, [n for n in (graph.index_of_wnid(w) for w in id_wnids) if n is not None])
    near = {}
    for wnid in sorted({p.item.wnid for p in good}):
        node = graph.index_of_wnid(wnid)
        if node is not None:
            near[wnid] = index.closeness(node)
    cut, sides = difficulty_split({w: c.similarity for w, c in near.items()}, spec)
    out = {w: px.ClassDifficulty(similarity=round(c.similarity, 4), closest_id_wnid=graph.wnid(c.closest_id),
                                 closest_id_name=graph.label(c.closest_id), path_distance=c.path_distance, subsplit=sides[w])
           for w, c in near.items()}
    images = Counter(out[p.item.wnid].subsplit for p in good if p.item.wnid in out)
    info = {
        "spec": spec_text, "rule": f"hard: semantic similarity >= {cut:.4f} ({spec.describe()}); easy: below",
        "cut": round(cut, 4), "id_classes": id_name,
        "measure": "Lin similarity with intrinsic information content (Seco et al. 2004) to the closest ID class, "
                   "over WordNet 3.0's noun hierarchy; the project's own measure, not SSB's (docs/exports.md)",
        "counts": {sub: {"classes": sum(1 for d in out.values() if d.subsplit == sub), "images": images[sub]} for sub in (HARD, EASY)},
        "classes": {w: d.subsplit for w, d in sorted(out.items())},
        "files": {**{name: ", ".join(LAYOUTS[name].lists(export_name, "<sub>")) for name in layouts if LAYOUTS[name].lists(export_name, "<sub>")},
                  "classes": "difficulty.csv"},
    }
    return out, info


def _contamination_summary(source_name: str) -> dict:
    source = Source.objects.get(name=source_name)
    r = contamination_report(source=source)
    return {k: r[k] for k in ("sample", "seed", "n", "n_id", "share", "ci_low", "ci_high")}


def unit_tests_execute(*, export_id: int, progress: Progress | None = None, on_total: Callable[[int], None] | None = None) -> Export:
    """Write the 17 NINCO unit tests mirroring the export's ID source; idempotent like exports."""
    from pipelines.export import write as px
    from pipelines.export.unit_tests import UNIT_TESTS, write_unit_tests

    export = _begin(export_id)
    if export is None:
        return Export.objects.get(pk=export_id)
    cfg = export.config
    samples, skipped = id_samples_of_source(Source.objects.get(name=cfg["id_source"]))
    if not samples:
        return _finish(export, status=Export.Status.FAILED, message=f"ID source {cfg['id_source']} has no readable image to mirror")
    total = cfg["per_test"] * len(UNIT_TESTS)
    Job.objects.filter(pk=export.job_id).update(total=total, message="generating")
    if on_total:
        on_total(total)
    final, tmp = _export_dir(export)
    if final.exists() and not _reclaim_orphan(final, export):
        return _finish(export, status=Export.Status.FAILED, message=f"{final} already exists; exports are never rewritten")
    px.clear_partial(tmp)
    tmp.mkdir(parents=True)
    tick = _ticker(export, progress, every=100)
    convention = cfg.get("convention", "paper")
    rows = write_unit_tests(tmp, samples=samples, per_test=cfg["per_test"], seed=cfg["seed"], workers=cfg.get("workers", 1), progress=tick,
                            convention=convention)
    files = px.hash_tree(tmp)
    counts = {"images": len(rows), "tests": dict(Counter(r.test for r in rows)), "formats": dict(Counter(r.format for r in rows)),
              "id_samples": len(samples), "id_samples_skipped": len(skipped)}
    manifest = {
        **_manifest_head(export),
        "recipe": unit_tests_recipe_text(convention), "counts": counts, "files": files,
    }
    digest = px.write_manifest(tmp, manifest)
    px.finish(tmp, final)
    return _finish(export, status=Export.Status.DONE, message=f"{len(rows)} unit-test images ({len(UNIT_TESTS)} tests) written to {final}",
                   path=str(final.relative_to(settings.EXPORT_ROOT)), manifest_sha256=digest, counts=counts)


def unit_tests_recipe_text(convention: str) -> str:
    where = ("as NINCO's published generator computes them (j-cb/NINCO noise_functions.py; convention 'ninco')"
             if convention == "ninco" else "as the paper's text states them (convention 'paper'; see docs/exports.md)")
    return f"NINCO appendix G (Bitterwolf et al., ICML 2023), {where}; parameters per image in unit_tests.csv"


def id_samples_of_source(source: Source) -> tuple[list, list[tuple[str, str]]]:
    """The ID source's good images as unit-test samples (sorted by path), and the refused ones."""
    from pipelines.export.unit_tests import IdSample

    samples, skipped = [], []
    root_real = str(Path(source.root).resolve())
    for img in Image.objects.filter(source=source, status=Image.Status.OK).select_related("source").order_by("relative_path"):
        try:
            path = img.ref(root_real=root_real)
        except UnsafePath as exc:
            skipped.append((img.relative_path, str(exc)))
            continue
        samples.append(IdSample(path=path, name=img.relative_path, width=img.width, height=img.height, format=img.format))
    return samples, skipped


def export_run_inline(*, export: Export, progress: Progress | None = None, on_total: Callable[[int], None] | None = None) -> Export:
    """Run an export in this process (commands without a broker); failures mark it failed and raise."""
    run_inline(export.job, progress=progress, on_total=on_total)
    return Export.objects.select_related("job").get(pk=export.pk)


def export_verify(*, path: Path, progress: Progress | None = None) -> Any:
    """Verify an export folder (pipelines.export.write.verify_export) and, when this database knows
    the export, that its manifest is the one written (a rewritten manifest is caught too)."""
    from pipelines.export.write import MANIFEST, verify_export
    from pipelines.sources.images import sha256_file

    v = verify_export(path, progress=progress)
    if v.manifest is not None:
        known = Export.objects.filter(pk=v.manifest.get("id"), name=v.manifest.get("name"), version=v.manifest.get("version")).first()
        if known is not None and known.manifest_sha256:
            actual = sha256_file(Path(path) / MANIFEST)
            if actual != known.manifest_sha256:
                v.problems.append(f"{MANIFEST}: sha256 {actual} differs from the {known.manifest_sha256} recorded when {known.label} was written")
    return v


def export_path(export: Export) -> Path:
    return Path(settings.EXPORT_ROOT) / export.path
