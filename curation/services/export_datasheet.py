"""The facts an export's datasheet states (pipelines.export.datasheet renders them as README.md).

Everything here is read from the database while the export is written: the sources and what
their review decided, the class filter's decisions per rule and the curators' overrides, the
image pipeline's model and duplicate counts, the review protocol's agreement and gold accuracy,
the contamination estimate, the certificate's sentence, and the difference from the previous
version of the same export.
"""
from __future__ import annotations

from collections import Counter
from pathlib import Path

from django.db.models import Count

from curation.models import (
    ClassDecision,
    ClassOverride,
    Export,
    Image,
    ImageEmbedding,
    Review,
    ReviewItem,
    Source,
)
from pipelines.review.agreement import fleiss_kappa
from pipelines.sources.images import sha256_file


def _sources(names: list[str], exported: Counter) -> list[dict]:
    out = []
    for source in Source.objects.filter(name__in=names).order_by("name"):
        images = Image.objects.filter(source=source)
        final = ReviewItem.objects.filter(source=source, status__in=ReviewItem.FINAL)
        out.append({"name": source.name, "images": images.count(), "ok": images.filter(status=Image.Status.OK).count(),
                    "final": final.count(),
                    "final_by_label": dict(sorted(Counter(final.values_list("final_decision", flat=True)).items())),
                    "exported": exported[source.name], "layout": source.layout or "folder",
                    **({"list": {k: v for k, v in source.layout_options["list"].items() if k in ("path", "format", "sha256", "entries")}}
                       if (source.layout_options or {}).get("list") else {})})
    return out


def _class_filter(names: list[str], class_filter: dict) -> list[dict]:
    out = []
    for name in sorted(names):
        info = class_filter.get(name) or {}
        run = info.get("run")
        if run is None:
            out.append({"source": name, "run": None})
            continue
        rows = ClassDecision.objects.filter(run_id=run)
        by_rule = (rows.values("decision", "rule").annotate(n=Count("id")).order_by("decision", "rule"))
        wnids = list(rows.exclude(wnid="").values_list("wnid", flat=True))
        out.append({
            "source": name, "run": run, "policy": info.get("policy"), "policy_digest": info.get("policy_digest"), "id_spec": info.get("id_spec"),
            "classes": rows.count(), "by_decision": dict(sorted(Counter(rows.values_list("decision", flat=True)).items())),
            "by_rule": [{"decision": r["decision"], "rule": r["rule"], "classes": r["n"]} for r in by_rule],
            "overrides": ClassOverride.objects.filter(wnid__in=wnids).count(),
            "resolutions": rows.exclude(resolution="").count(),
        })
    return out


def _review(names: list[str], review_policy: dict) -> dict:
    reviews = Review.objects.filter(item__source__name__in=names)
    plain = reviews.filter(is_gold=False)
    by_item: dict[int, dict[int, str]] = {}
    for item_id, who, decision in plain.values_list("item_id", "annotator_id", "decision"):
        by_item.setdefault(item_id, {})[who] = decision
    multi = [list(d.values()) for d in by_item.values() if len(d) >= 2]
    gold = reviews.filter(is_gold=True)
    n_gold, n_gold_ok = gold.count(), gold.filter(gold_correct=True).count()
    items = ReviewItem.objects.filter(source__name__in=names)
    return {
        "reviews_required": {s: p["reviews_required"] for s, p in sorted(review_policy.items())},
        "annotators": reviews.values("annotator_id").distinct().count(), "reviews": plain.count(),
        "fleiss_kappa": fleiss_kappa(multi), "multi_reviewed": len(multi),
        "gold": n_gold, "gold_correct": n_gold_ok, "gold_accuracy": n_gold_ok / n_gold if n_gold else None,
        "adjudicated": items.filter(status=ReviewItem.Status.ADJUDICATED).count(),
        "conflict": items.filter(status=ReviewItem.Status.CONFLICT).count(),
        "final_label_rule": "ood when every review said ood, or a curator adjudicated ood",
    }


def _weights(model_name: str, extract_jobs: list[dict]) -> list[dict]:
    """The weights each feature extraction used, with the sha256 of the file where it is a file
    (the registry's default resolves to one; read when the export is written)."""
    from pipelines.features.classifiers import MODELS, ModelUnavailable

    out = []
    for given in sorted({str(j["weights"]) for j in extract_jobs}):
        where = given
        if given == "registry default" and model_name in MODELS:
            try:
                where = MODELS[model_name].default_weights()
            except ModelUnavailable as exc:
                where = f"registry default ({exc})"
        path = Path(where)
        if path.is_file():  # the file's name and digest say which weights; this machine's folder would not
            out.append({"weights": path.name, "sha256": sha256_file(path)})
        else:
            out.append({"weights": where, "sha256": ""})
    return out


def _image_pipeline(names: list[str], model: dict, cfg: dict, leak: dict) -> dict:
    embs = ImageEmbedding.objects.filter(image__source__name__in=names, model_name=cfg["model"])
    return {
        "model": model["name"], "timm_name": model["timm_name"], "extract_jobs": len(model["extract_jobs"]),
        "weights": _weights(model["name"], model["extract_jobs"]),
        "id_dup_threshold": cfg["id_dup_threshold"], "max_pixel_diff": cfg["max_pixel_diff"],
        "near_duplicates_in_pool": embs.filter(drop_reason__startswith="near_duplicate_of:").count(),
        "duplicates_of_id": embs.filter(drop_reason__startswith="duplicate_of_id:").count(),
        "leakage_checked": leak["checked"], "leakage_id_reference": leak["id_reference_images"],
        "leakage_other_split": leak["other_split_images"], "leakage_violations": len(leak["violations"]),
        "leakage_override": leak.get("override") if leak["violations"] else "",
    }


def _diff(diff: dict | None) -> dict | None:
    """The datasheet's part of the difference from the previous version (pipelines.export.diff)."""
    if diff is None:
        return None
    return {"previous": diff["previous"]["version"], **diff["images"],
            "classes_added": [c["wnid"] for c in diff["classes_added"]], "classes_removed": [c["wnid"] for c in diff["classes_removed"]],
            "removed_by_reason": diff["removed_by_reason"], "added_by_reason": diff["added_by_reason"], "warning": diff["warning"]}


def _limitations(facts: dict) -> list[str]:
    out = []
    small = [c["name"] for c in facts["classes"] if c["images"] < 10]
    if small:
        out.append(f"{len(small)} of {len(facts['classes'])} classes hold fewer than 10 images ({', '.join(small[:10])}"
                   f"{', ...' if len(small) > 10 else ''}): per-class figures on them are noisy.")
    rv = facts["review"]
    if rv["multi_reviewed"] == 0:
        out.append("No image was reviewed by two people, so agreement between annotators was not measured.")
    if rv["gold"] == 0:
        out.append("No gold checks were answered, so annotators' accuracy was not measured.")
    if facts.get("certificate"):
        out.append("Some images were admitted by a statistical certificate, not by a review (see Contamination). Its bound is "
                   "anytime-valid: the chance that it was ever below the true number of ID images, at any look, is at most one minus "
                   "its confidence, so up to that share of certified remainders may hold more ID images than the target; it counts "
                   "the reviewers' decisions as right.")
    out.append("Images are judged against the ID class set named above; for another ID set the review does not carry over.")
    out.append("The contamination figures are estimated from a sample of the source before cleaning; residual ID content in the "
               "export itself is bounded only by the review protocol above.")
    out.append("The license of each image is the source's; it is not recorded by the toolkit.")
    return out


def datasheet_facts(*, export: Export, root: Path, good: list, classes: dict, class_filter: dict, review_policy: dict, counts: dict,
                    leak: dict, model: dict, contamination: dict, certificate: str | None, difficulty: dict | None = None,
                    diff: dict | None = None) -> dict:
    """The datasheet's facts for an export being written into ``root`` (its lists and
    decisions.csv already there): ``good`` the placed images, ``classes``, ``class_filter`` and
    ``review_policy`` as the selection recorded them (curation.services.exports.Selection)."""
    cfg = export.config
    names = list(cfg["sources"])
    exported = Counter(p.item.source for p in good)
    id_spec = next((i.get("id_spec") for i in class_filter.values() if i.get("id_spec")), None)
    facts: dict = {
        "export": {"name": export.name, "version": export.version, "split": export.split, "images": counts["images"],
                   "classes": counts["classes"], "id_classes": id_spec or "ImageNet-1K (the default ID class set)",
                   "created": (export.created_at.date().isoformat() if export.created_at else ""),
                   "creator": export.created_by.username if export.created_by_id else "", "code_version": export.job.code_version},
        "classes": [{"wnid": w, "name": c["name"], "images": c["images"], "sources": classes[w]["sources"]}
                    for w, c in counts["per_class"].items()],
        "sources": _sources(names, exported),
        "class_filter": _class_filter(names, class_filter),
        "image_pipeline": _image_pipeline(names, model, cfg, leak),
        "review": _review(names, review_policy),
        "contamination": [{"source": s, **c} for s, c in sorted(contamination.items())],
        "certificate": certificate or "",
        "diff": _diff(diff),
        "excluded": counts["excluded"],
        "difficulty": {k: difficulty[k] for k in ("rule", "cut", "id_classes", "measure", "counts")} if difficulty else None,
        "layouts": list(cfg["layouts"]),
    }
    facts["limitations"] = _limitations(facts)
    image_files = {rel for p in good for rel in p.files.values()}
    facts["checksums"] = {rel: sha256_file(root / rel) for rel in sorted(_files(root)) if rel not in image_files}
    return facts


def _files(root: Path) -> list[str]:
    return [p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()]

