"""Reads of the class filter (docs/class_filter.md): the latest finished run of a source, the
class policy that decides which classes are reviewed and exported, and a run's report, search
and CSV."""
from __future__ import annotations

from dataclasses import dataclass

from django.db.models import Count, F, Q

from curation.models import CandidateClass, ClassFilterRun, Source
from pipelines.classes.filter.engine import CSV_COLUMNS
from pipelines.classes.filter.rules import RULES


def latest_class_filter_run(*, source: Source) -> ClassFilterRun | None:
    """The source's most recent finished class filter run (what its classes' fate rests on)."""
    return ClassFilterRun.objects.filter(source=source, job__status="done").order_by("-created_at", "-pk").first()


@dataclass(frozen=True)
class ClassStanding:
    """Where one class of a candidate source stands, for the review queue, exports and pages."""

    verdict: str  # keep | flag | remove: the class filter's effective decision, visual flags applied
    reason: str  # why its images are not exported ("" when they may be): class_flag, class_remove, ...
    reviewable: bool  # its images go to the review queue
    exportable: bool  # its reviewed-ood images may be exported


@dataclass
class ClassPolicy:
    """The one class-eligibility policy (docs/review.md, docs/exports.md):

    - the latest finished class filter run decides keep / flag / remove (its effective
      decisions: pinned overrides and curators' resolutions of flags included); without a run
      every class is kept, and a folder that appeared after the run waits for the next one;
    - a class-level visual-ambiguity flag that a curator rejected removes the class; one still
      unresolved keeps it in the review queue (the reviews inform the curator) but out of
      exports until it is accepted;
    - only kept classes are reviewed, only kept classes without an open visual flag exported.
    """

    run: ClassFilterRun | None
    classes: dict[int, ClassStanding]

    def of(self, class_id: int | None) -> ClassStanding:
        if class_id in self.classes:
            return self.classes[class_id]
        if self.run is None:
            return ClassStanding("keep", "", True, True)
        return ClassStanding("none", "class_not_in_filter_run", False, False)


def class_policy(*, source: Source) -> ClassPolicy:
    """Every class's standing in ``source`` (one query per kind of evidence)."""
    from curation.models import ClassDecision, ClassVisualSignal

    run = latest_class_filter_run(source=source)
    verdicts: dict[int, str] = {}
    if run is not None:
        verdicts = dict(run.decisions.filter(candidate_class__isnull=False).values_list("candidate_class_id", "decision"))
    visual = dict(ClassVisualSignal.objects.filter(candidate_class__source=source, flagged=True)
                  .values_list("candidate_class_id", "resolution"))
    classes: dict[int, ClassStanding] = {}
    for class_id in set(verdicts) | set(visual) | set(CandidateClass.objects.filter(source=source).values_list("pk", flat=True)):
        verdict = verdicts.get(class_id, ClassDecision.Decision.KEEP if run is None else "none")
        if verdict == "none":
            classes[class_id] = ClassStanding("none", "class_not_in_filter_run", False, False)
            continue
        resolution = visual.get(class_id)
        if verdict == ClassDecision.Decision.KEEP and resolution == "reject":
            classes[class_id] = ClassStanding(ClassDecision.Decision.REMOVE, "class_visual_flag_rejected", False, False)
        elif verdict == ClassDecision.Decision.KEEP and class_id in visual and resolution != "accept":
            classes[class_id] = ClassStanding(ClassDecision.Decision.KEEP, "class_visual_flag_unresolved", True, False)
        elif verdict == ClassDecision.Decision.KEEP:
            classes[class_id] = ClassStanding(ClassDecision.Decision.KEEP, "", True, True)
        else:
            classes[class_id] = ClassStanding(verdict, f"class_{verdict}", False, False)
    return ClassPolicy(run=run, classes=classes)


CLASS_DECISION_CSV_COLUMNS = CSV_COLUMNS  # one definition, in the class filter


def class_decision_csv_rows(*, run: ClassFilterRun):
    """The run's decisions as the CSV's rows (the effective decision, in candidate order)."""
    for d in run.decisions.order_by("position").iterator(chunk_size=2000):
        yield {"wnid": d.wnid or d.key, "name": d.name, "decision": d.decision, "rule": d.rule,
               "related_wnid": d.related_wnid, "related_name": d.related_name, "detail": d.detail,
               "semantic_similarity": _fixed(d.semantic_similarity), "closest_id_wnid": d.closest_id_wnid,
               "path_distance": "" if d.path_distance is None else d.path_distance,
               "flag_strength": _fixed(d.flag_strength), "flag_level": d.flag_level}


def _fixed(value: float | None) -> str:
    return "" if value is None else f"{value:.4f}"


CLASS_DECISION_FILTERS = {"decision": ("keep", "flag", "remove"), "level": ("strong", "weak")}


def class_decision_search(*, run: ClassFilterRun, q: str = "", decision: str = "", rule: str = "", level: str = ""):
    """Every decision of ``run`` matching the report's search form: ``q`` in the class name,
    wnid, folder or reason; a decision, a deciding rule, a flag level (empty: any), by name."""
    qs = run.decisions.all()
    if q:
        qs = qs.filter(Q(name__icontains=q) | Q(wnid__icontains=q) | Q(key__icontains=q) | Q(detail__icontains=q))
    if decision:
        qs = qs.filter(decision=decision)
    if rule:
        qs = qs.filter(rule=rule)
    if level:
        qs = qs.filter(decision="flag", flag_level=level)
    return qs.order_by("name", "key")


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
    n_kept, kept = listing("keep")
    # flags rank by strength: the likeliest contamination first (docs/class_filter.md)
    flag_rows = qs.filter(decision="flag").order_by(F("flag_strength").desc(nulls_last=True), "name")
    n_flagged = flag_rows.count()
    flagged = list(flag_rows[:list_limit] if list_limit else flag_rows)
    levels = dict(flag_rows.order_by().values_list("flag_level").annotate(n=Count("id")).values_list("flag_level", "n"))
    # the overrides and resolved flags are bounded like the other lists: a pool of 19,167 classes
    # had 1,346 resolved flags, and drawing every one cost the page more than its queries (issue 45)
    overridden_rows = qs.filter(rule__startswith="override_").order_by("name")
    n_overridden = overridden_rows.count()
    overridden = list(overridden_rows[:list_limit] if list_limit else overridden_rows)
    resolved_rows = qs.exclude(resolution="").select_related("resolved_by").order_by("name")
    n_resolved = resolved_rows.count()
    resolved = list(resolved_rows[:list_limit] if list_limit else resolved_rows)
    return {
        "run": run, "total": sum(by_decision.values()), "by_decision": by_decision, "rules_alone": rules_alone,
        "by_rule": by_rule, "per_rule": per_rule, "removed": removed, "n_removed": n_removed, "kept": kept, "n_kept": n_kept,
        "flagged": flagged, "n_flagged": n_flagged, "overridden": overridden, "n_overridden": n_overridden,
        "resolved": resolved, "n_resolved": n_resolved,
        "strong": [x for x in flagged if x.flag_level == "strong"], "weak": [x for x in flagged if x.flag_level != "strong"],
        "flag_levels": {"strong": levels.get("strong", 0), "weak": levels.get("weak", 0)},
    }


def class_filter_runs(*, limit: int = 20) -> list[ClassFilterRun]:
    return list(ClassFilterRun.objects.select_related("job", "source", "created_by").order_by("-created_at")[:limit])
