"""Reads. Views, commands and the admin ask these rather than building queries themselves."""
from __future__ import annotations

from django.db.models import Count, Q

from curation.models import CandidateClass, ClassFilterRun, IdClassSet, Image, Job, Source
from pipelines.class_filter.engine import CSV_COLUMNS
from pipelines.class_filter.rules import RULES


def source_broken_images(*, source: Source) -> list[Image]:
    return list(Image.objects.filter(source=source, status=Image.Status.BROKEN).order_by("relative_path"))


def source_summaries() -> list[dict]:
    """One row per source with image counts by status and class counts, in two queries."""
    counts = {
        row["source"]: row
        for row in Image.objects.values("source").annotate(
            total=Count("id"),
            ok=Count("id", filter=Q(status=Image.Status.OK)),
            broken=Count("id", filter=Q(status=Image.Status.BROKEN)),
            duplicate=Count("id", filter=Q(status=Image.Status.DUPLICATE)),
            missing=Count("id", filter=Q(status=Image.Status.MISSING)),
        )
    }
    out = []
    for source in Source.objects.annotate(
        n_classes=Count("classes", distinct=True),
        n_unmapped=Count("classes", filter=Q(classes__mapping=CandidateClass.Mapping.UNMAPPED), distinct=True),
    ).order_by("role", "name"):
        c = counts.get(source.pk, {})
        out.append({
            "source": source, "classes": source.n_classes, "unmapped": source.n_unmapped,
            **{k: c.get(k, 0) for k in ("total", "ok", "broken", "duplicate", "missing")},
        })
    return out


def recent_jobs(*, limit: int = 20) -> list[Job]:
    return list(Job.objects.select_related("source", "created_by").order_by("-created_at")[:limit])


def default_id_class_set() -> IdClassSet | None:
    return IdClassSet.objects.filter(is_default=True).first()


# -- class filter ---------------------------------------------------------------------------------

CLASS_DECISION_CSV_COLUMNS = CSV_COLUMNS  # one definition, in the class filter


def class_decision_csv_rows(*, run: ClassFilterRun):
    """The run's decisions as the CSV's rows (the effective decision, in candidate order)."""
    for d in run.decisions.order_by("position").iterator(chunk_size=2000):
        yield {"wnid": d.wnid or d.key, "name": d.name, "decision": d.decision, "rule": d.rule,
               "related_wnid": d.related_wnid, "related_name": d.related_name, "detail": d.detail}


def class_filter_report(*, run: ClassFilterRun, list_limit: int | None = None) -> dict:
    """Counts per decision and rule (effective, and what the rules alone said), the removed and
    flagged classes with their reasons, resolutions and the overrides that applied."""
    qs = run.decisions.all()
    by_decision = dict(qs.values_list("decision").annotate(n=Count("id")).values_list("decision", "n"))
    by_rule = [
        {"decision": row["decision"], "rule": row["rule"] or "(no rule fired)", "n": row["n"]}
        for row in qs.values("decision", "rule").annotate(n=Count("id")).order_by("decision", "-n", "rule")
    ]
    fired = run.counts.get("fired", {})
    rules_alone = run.counts.get("rules_alone", {})
    explanations = {slug: spec.explanation for slug, spec in RULES.items()}
    per_rule = [
        {"rule": slug, "severity": cfg["severity"], "fired": fired.get(slug, 0),
         "deciding": sum(r["n"] for r in by_rule if r["rule"] == slug), "explanation": explanations.get(slug, ""),
         "params": {k: v for k, v in cfg.items() if k != "severity"}}
        for slug, cfg in run.policy.get("rules", {}).items()
    ]

    def listing(decision):
        rows = qs.filter(decision=decision).order_by("rule", "name")
        total = rows.count()
        return total, list(rows[:list_limit] if list_limit else rows)

    n_removed, removed = listing("remove")
    n_flagged, flagged = listing("flag")
    overridden = list(qs.filter(rule__startswith="override_").order_by("name"))
    resolved = list(qs.exclude(resolution="").select_related("resolved_by").order_by("name"))
    return {
        "run": run, "total": sum(by_decision.values()), "by_decision": by_decision, "rules_alone": rules_alone,
        "by_rule": by_rule, "per_rule": per_rule, "removed": removed, "n_removed": n_removed,
        "flagged": flagged, "n_flagged": n_flagged, "overridden": overridden, "resolved": resolved,
    }


def class_filter_runs(*, limit: int = 20) -> list[ClassFilterRun]:
    return list(ClassFilterRun.objects.select_related("job", "source", "created_by").order_by("-created_at")[:limit])
