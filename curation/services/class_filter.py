"""Class filter: run the WordNet rules (pipelines.classes.filter) as a recorded job, resolve
flags, pin overrides. Writes only; reads are in curation.selectors."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Iterable

from django.conf import settings
from django.contrib.auth.models import User
from django.db import transaction
from django.db.models import Count, Q
from django.utils import timezone

from curation.audit import audit_record
from curation.jobs import enqueue_on_commit, run_inline
from curation.models import CandidateClass, ClassDecision, ClassFilterRun, ClassOverride, ClassVisualSignal, Image, ImageEmbedding, Job, Source
from curation.services.id_classes import IdClassSetError, id_classes_resolve
from curation.services.jobs import job_mark_running
from curation.version import code_version
from pipelines.classes.filter import Candidate, Override, Policy, load_policy, policy_from_text, run_class_filter
from pipelines.classes.filter.engine import decide
from pipelines.classes.filter.strength import flag_level, flag_strength, image_evidence
from pipelines.classes.imagenet import ClassListError, imagenet_lemmas, resolve_class_list
from pipelines.classes.wordnet import is_wnid
from pipelines.classes.wordnet_graph import is_noun_wnid, load_noun_graph

if TYPE_CHECKING:
    from curation.services.review import RejectionImpact


class ClassFilterError(ValueError):
    """Bad input to the class filter; the message says which and how to fix it."""


SOURCE_PREFIX = "source:"


@dataclass
class CandidateList:
    spec: str
    candidates: list[Candidate]
    source: Source | None = None
    classes: dict[str, CandidateClass] | None = None  # folder -> class, for sources


def class_filter_candidates(*, spec: str) -> CandidateList:
    """A named list (imagenet-21k...), a file of wnids, or ``source:NAME``."""
    if spec.startswith(SOURCE_PREFIX):
        name = spec[len(SOURCE_PREFIX):]
        source = Source.objects.filter(name=name).first()
        if source is None:
            known = ", ".join(Source.objects.order_by("name").values_list("name", flat=True)[:20]) or "none registered"
            raise ClassFilterError(f"{spec}: no source named {name!r} (sources: {known}); register one with `manage.py add_source`")
        return _source_candidates(source, spec)
    try:
        wnids = resolve_class_list(spec)
    except ClassListError as exc:
        raise ClassFilterError(str(exc)) from None
    return CandidateList(spec=spec, candidates=[Candidate(key=w, wnid=w) for w in wnids])


def _source_candidates(source: Source, spec: str) -> CandidateList:
    classes = list(CandidateClass.objects.filter(source=source).annotate(
        usable=Count("images", filter=Q(images__status=Image.Status.OK))).order_by("folder"))
    if not classes:
        raise ClassFilterError(f"{spec}: the source has no class folders yet; ingest it first (`manage.py add_source` or the admin's re-scan)")
    cands = [Candidate(key=c.folder, wnid=c.wnid, n_images=c.usable, mapping_note=c.mapping_note) for c in classes]
    return CandidateList(spec=spec, candidates=cands, source=source, classes={c.folder: c for c in classes})


def _id_wnids(id_spec: str | None) -> tuple[str, list[str]]:
    try:
        return id_classes_resolve(id_spec)
    except IdClassSetError as exc:
        raise ClassFilterError(str(exc)) from None


def _policy(policy_spec: str | None, policy_text: str | None) -> Policy:
    if policy_text and policy_text.strip():
        return policy_from_text(policy_text, where="the policy text", default_name="custom")
    return load_policy(policy_spec)


def class_filter_start(
    *, candidates_spec: str, id_spec: str | None = None, policy_spec: str | None = None, policy_text: str | None = None,
    user: User | None = None, enqueue: bool = True,
) -> ClassFilterRun:
    """Check the inputs, record the run's configuration, and queue it (or leave it to the
    caller with ``enqueue=False``). Bad policies, lists and sources fail here, before any job."""
    policy = _policy(policy_spec, policy_text)
    cand = class_filter_candidates(spec=candidates_spec)  # validates now; re-read when the job runs
    id_name, id_wnids = _id_wnids(id_spec)
    unknown = [w for w in id_wnids if not is_noun_wnid(settings.NLTK_DATA, w)]  # no graph load in web processes
    if unknown:
        raise ClassFilterError(f"ID classes {id_name}: {len(unknown)} wnid(s) are not WordNet 3.0 nouns: {', '.join(unknown[:10])}")
    with transaction.atomic():
        job = Job.objects.create(
            kind=Job.Kind.CLASS_FILTER, source=cand.source, total=len(cand.candidates),
            created_by=user if getattr(user, "pk", None) else None, code_version=code_version(),
            config={"candidates": candidates_spec, "id": id_name, "policy": policy.name, "policy_origin": policy.origin,
                    "policy_digest": policy.digest},
        )
        run = ClassFilterRun.objects.create(
            job=job, source=cand.source, candidates_spec=candidates_spec, id_spec=id_name, id_wnids=id_wnids,
            policy_name=policy.name, policy_origin=policy.origin, policy=policy.as_dict(), policy_digest=policy.digest,
            created_by=job.created_by,
        )
        audit_record(actor=user, action="class_filter_started", target=run,
                     data={"candidates": candidates_spec, "id": id_name, "policy": policy.name, "digest": policy.digest})
        if enqueue:
            enqueue_on_commit(run.job)
    return run


def _as_override(o: ClassOverride) -> Override:
    return Override(action=o.action, note=o.note, by=o.created_by.username if o.created_by else "")


def _signature(fired: list[dict]) -> tuple[str, ...]:
    return tuple(sorted(f"{r['rule']}|{r['severity']}|{r['text']}" for r in fired))


def class_filter_execute(*, run_id: int, progress: Callable[[int], None] | None = None) -> ClassFilterRun:
    """Compute and store the run's decisions. Idempotent: a finished run is left alone, and the
    rows and the done status are written in one transaction, so a redelivered task that finds
    the run unfinished simply computes it again."""
    run = ClassFilterRun.objects.select_related("job").get(pk=run_id)
    job = run.job
    if job.status == Job.Status.DONE:
        return run
    job_mark_running(job=job, message="applying the WordNet rules")
    policy = Policy(name=run.policy_name, origin=run.policy_origin,
                    severities={slug: cfg["severity"] for slug, cfg in run.policy["rules"].items()},
                    params={slug: {k: v for k, v in cfg.items() if k != "severity"} for slug, cfg in run.policy["rules"].items()})
    cand = class_filter_candidates(spec=run.candidates_spec)
    graph = load_noun_graph(settings.NLTK_DATA)

    def report(n: int) -> None:
        Job.objects.filter(pk=job.pk).update(progress=n, total=len(cand.candidates))
        if progress:
            progress(n)

    pinned = {o.wnid: o for o in ClassOverride.objects.select_related("created_by")}
    result = run_class_filter(graph, cand.candidates, run.id_wnids, policy,
                              overrides={w: _as_override(o) for w, o in pinned.items()}, progress=report)
    # Resolutions of identical flags (same rules, same paths) in earlier runs carry over; there
    # are only as many as curators made by hand.
    earlier = {}
    for d in (ClassDecision.objects.filter(rule_decision=ClassDecision.Decision.FLAG)
              .exclude(resolution="").exclude(run=run).order_by("resolved_at", "pk")):
        earlier[(d.key, d.wnid, _signature(d.fired))] = d
    rows = []
    for pos, d in enumerate(result.decisions):
        prev = earlier.get((d.key, d.wnid, _signature(d.fired))) if d.decision == "flag" else None
        row = ClassDecision(
            run=run, position=pos, key=d.key, wnid=d.wnid, name=d.name[:255], synset=d.synset,
            candidate_class=cand.classes.get(d.key) if cand.classes else None, n_images=d.n_images,
            rule_decision=d.rule_decision, rule_name=d.deciding_rule, rule_related_wnid=d.related_wnid,
            rule_related_name=d.related_name[:255], rule_detail=d.rule_detail, fired=d.fired,
            decision=d.decision, rule=d.rule, detail=d.detail,
            semantic_similarity=d.semantic_similarity, closest_id_wnid=d.closest_id_wnid,
            closest_id_name=d.closest_id_name[:255], path_distance=d.path_distance,
            flag_strength=d.flag_strength, flag_level=d.flag_level, evidence_wnids=d.evidence_wnids,
        )
        if prev is not None:
            row.resolution, row.resolution_note, row.resolved_by_id = prev.resolution, prev.resolution_note, prev.resolved_by_id
            row.resolved_at, row.resolution_from = prev.resolved_at, prev
            _apply_effective(row, pinned.get(d.wnid))
        rows.append(row)
    with transaction.atomic():
        locked = Job.objects.select_for_update().get(pk=job.pk)
        if locked.status == Job.Status.DONE:  # another delivery finished first
            return run
        ClassDecision.objects.filter(run=run).delete()
        ClassDecision.objects.bulk_create(rows, batch_size=2000)
        if cand.source is not None:
            class_filter_refresh_strength(run=run)
        run.counts = result.counts()
        run.wordnet_sha1 = graph.source_sha1
        run.save(update_fields=["counts", "wordnet_sha1"])
        locked.status, locked.progress, locked.total = Job.Status.DONE, len(rows), len(rows)
        locked.finished_at = timezone.now()
        locked.message = _summary_line(run.counts)
        locked.result = {"counts": run.counts}
        locked.save(update_fields=["status", "progress", "total", "finished_at", "message", "result"])
    return run


def _summary_line(counts: dict) -> str:
    d = counts.get("decision", {})
    return f"{counts.get('candidates', 0)} candidates: {d.get('keep', 0)} keep, {d.get('flag', 0)} flag, {d.get('remove', 0)} remove"


def class_filter_run_inline(*, run: ClassFilterRun, progress: Callable[[int], None] | None = None) -> ClassFilterRun:
    run_inline(run.job, progress=progress)
    return ClassFilterRun.objects.select_related("job").get(pk=run.pk)


def _apply_effective(row: ClassDecision, override: ClassOverride | None) -> None:
    """Set ``decision`` / ``rule`` / ``detail`` from the rules' result, the row's resolution and
    an override (the engine's precedence: override > resolution > rules)."""
    o = _as_override(override) if override is not None else None
    decision, rule, detail = decide(row.fired, o)
    if o is None and row.resolution and row.rule_decision == ClassDecision.Decision.FLAG:
        decision = row.resolution
        who = row.resolved_by.username if row.resolved_by_id and row.resolved_by else "a curator"
        detail = f"resolved: {row.resolution} by {who}" + (f" ({row.resolution_note})" if row.resolution_note else "") + f"; {detail}"
    row.decision, row.rule, row.detail = decision, rule, detail


class ClassDecisionError(ValueError):
    pass


def class_decisions_resolve(*, decision_ids: Iterable[int], resolution: str, note: str = "", user: User | None = None,
                            impact: dict | None = None) -> int:
    """A curator decides flagged classes (keep or remove), in bulk, with a note. Rows that are
    not flags are left alone; returns how many were resolved. Each one is audited."""
    if resolution not in (ClassDecision.Resolution.KEEP, ClassDecision.Resolution.REMOVE):
        raise ClassDecisionError(f"resolution must be keep or remove, not {resolution!r}")
    now = timezone.now()
    overrides = {o.wnid: o for o in ClassOverride.objects.select_related("created_by")}
    n = 0
    with transaction.atomic():
        rows = list(ClassDecision.objects.select_for_update().filter(pk__in=list(decision_ids), rule_decision=ClassDecision.Decision.FLAG))
        for row in rows:
            row.resolution, row.resolution_note, row.resolved_by, row.resolved_at = resolution, note, user, now
            row.resolution_from = None
            _apply_effective(row, overrides.get(row.wnid))
            row.save(update_fields=["resolution", "resolution_note", "resolved_by", "resolved_at", "resolution_from", "decision", "rule", "detail"])
            audit_record(actor=user, action=f"class_flag_{resolution}", target=row,
                         data={"run": row.run_id, "wnid": row.wnid, "key": row.key, "rule": row.rule_name, "note": note,
                               **({"confirmed_impact": impact} if impact else {})})
            n += 1
    return n


def class_flag_answer(*, decision_id: int, verdict: str, note: str = "", user: User | None = None,
                      impact: RejectionImpact | None = None) -> int:
    """A curator's accept or reject of one flagged class on the flagged-classes screen: its flag is
    resolved keep or remove and, where the class also waits on a visual-ambiguity signal, the
    signal gets the same answer, in one transaction (one card, one answer). ``impact`` is the
    confirmed rejection impact (``RejectionImpact``), audited on both."""
    from curation.services.review import class_signal_resolve

    if verdict not in ("accept", "reject"):
        raise ClassDecisionError(f"verdict must be accept or reject, not {verdict!r}")
    with transaction.atomic():
        n = class_decisions_resolve(decision_ids=[decision_id], resolution={"accept": "keep", "reject": "remove"}[verdict], note=note,
                                    user=user, impact=impact.as_dict() if impact else None)
        class_id = ClassDecision.objects.filter(pk=decision_id).values_list("candidate_class_id", flat=True).first()
        signal = (ClassVisualSignal.objects.select_for_update().filter(candidate_class_id=class_id, flagged=True, resolution="").first()
                  if class_id else None)
        if signal is not None:
            class_signal_resolve(signal_id=signal.pk, resolution=verdict, note=note, user=user, impact=impact)
    return n


@dataclass
class ClassesAccepted:
    accepted: list[str]
    skipped: list[str]  # "label: why", one a class that was not accepted
    queues: list[str]   # each refreshed queue's summary, by source

    def summary(self) -> str:
        text = f"{len(self.accepted)} class{'es' if len(self.accepted) != 1 else ''} accepted"
        if self.skipped:
            text += f"; {len(self.skipped)} skipped: " + "; ".join(self.skipped)
        return text + "." + (f" Queue: {' / '.join(self.queues)}" if self.queues else "")


def flagged_classes_accept(*, class_ids: Iterable[int], note: str = "", user: User | None = None) -> ClassesAccepted:
    """Accept several flagged classes at once (the flagged-classes screen's selection): each one's
    open class-filter flag is resolved keep and its open visual signal accepted, audited one by
    one as a single accept would be. A class that is no longer waiting, or whose folder has no
    WordNet synset (it needs a noun or a description first), is skipped and named; the others go
    on. Each touched source's review queue is refreshed once. Rejections are not offered in bulk:
    one that withdraws reviewed work asks for its own confirmation."""
    from curation.selectors.review import flagged_classes
    from curation.services.review import class_signal_resolve, review_queue_refresh_if_built

    wanted = list(dict.fromkeys(class_ids))
    chosen = set(wanted)
    accepted, skipped, sources = [], [], {}
    with transaction.atomic():
        waiting = {e["cc"].pk: e for e in flagged_classes(samples=0) if e["cc"].pk in chosen}
        # locked, then read again: a class another curator answered since is not answered twice
        flags = {d.pk: d for d in ClassDecision.objects.select_for_update().filter(
            pk__in=[e["flag"].pk for e in waiting.values() if e["flag"] is not None])}
        signals = {g.pk: g for g in ClassVisualSignal.objects.select_for_update().filter(
            pk__in=[e["signal"].pk for e in waiting.values() if e["signal"] is not None])}
        for class_id in wanted:
            entry = waiting.get(class_id)
            flag = flags.get(entry["flag"].pk) if entry and entry["flag"] is not None else None
            signal = signals.get(entry["signal"].pk) if entry and entry["signal"] is not None else None
            flag = flag if flag is not None and flag.decision == ClassDecision.Decision.FLAG else None
            signal = signal if signal is not None and not signal.resolution else None
            if entry is None or (flag is None and signal is None):
                cc = entry["cc"] if entry else CandidateClass.objects.filter(pk=class_id).first()
                skipped.append(f"{cc.label if cc else f'class {class_id}'}: not waiting for a curator")
                continue
            if "unmapped" in entry["reasons"]:
                skipped.append(f"{entry['cc'].label}: no WordNet synset (map it or keep it unmapped)")
                continue
            if flag is not None:
                class_decisions_resolve(decision_ids=[flag.pk], resolution="keep", note=note, user=user)
            if signal is not None:
                class_signal_resolve(signal_id=signal.pk, resolution="accept", note=note, user=user)
            accepted.append(entry["cc"].label)
            sources[entry["source"].pk] = entry["source"]
    queues = []
    for source in sources.values():
        report = review_queue_refresh_if_built(source=source, user=user)
        if report:
            queues.append(f"{source.name}: {report.summary()}")
    return ClassesAccepted(accepted, skipped, queues)


def class_override_pin(*, wnid: str, action: str, note: str = "", user: User | None = None) -> ClassOverride:
    """Pin allow (always keep) or deny (always remove) on a synset. It wins over every rule in
    every run: the decisions already stored are updated, and future runs apply it."""
    wnid = wnid.strip()
    if action not in ClassOverride.Action.values:
        raise ClassDecisionError(f"override action must be allow or deny, not {action!r}")
    if not is_wnid(wnid):
        raise ClassDecisionError(f"{wnid!r} is not a WordNet noun id like n01440764")
    if not is_noun_wnid(settings.NLTK_DATA, wnid):
        raise ClassDecisionError(f"{wnid} is not a WordNet 3.0 noun")
    with transaction.atomic():
        obj, created = ClassOverride.objects.update_or_create(
            wnid=wnid, defaults={"action": action, "note": note, "name": _label(wnid), "created_by": user if getattr(user, "pk", None) else None})
        changed = _reapply(wnid, obj)
        audit_record(actor=user, action=f"class_override_{action}", target=obj,
                     data={"wnid": wnid, "name": obj.name, "note": note, "decisions_updated": changed, "replaced": not created})
    return obj


def _label(wnid: str) -> str:
    """A synset's name for people, without loading WordNet in a web process: from a stored
    decision, else ImageNet's lemma list (all 21K classes)."""
    name = ClassDecision.objects.filter(wnid=wnid).exclude(synset="").values_list("name", flat=True).first()
    if name:
        return name
    return imagenet_lemmas().get(wnid, "").split(",")[0].strip()


def class_override_unpin(*, wnid: str, user: User | None = None) -> int:
    with transaction.atomic():
        obj = ClassOverride.objects.filter(wnid=wnid).first()
        if obj is None:
            return 0
        data = {"wnid": wnid, "name": obj.name, "action": obj.action, "note": obj.note}
        obj.delete()
        changed = _reapply(wnid, None)
        audit_record(actor=user, action="class_override_removed", target=None, data={**data, "decisions_updated": changed})
    return changed


def _reapply(wnid: str, override: ClassOverride | None) -> int:
    n = 0
    for row in ClassDecision.objects.select_for_update(of=("self",)).select_related("resolved_by").filter(wnid=wnid):
        _apply_effective(row, override)
        row.save(update_fields=["decision", "rule", "detail"])
        n += 1
    return n


def class_filter_refresh_strength(*, run: ClassFilterRun, model_name: str | None = None) -> int:
    """Recompute the flag strength of a source's flagged classes with image evidence: the share
    of each class's images whose top-1 / top-5 prediction is the related ID class or one of its
    WordNet neighbours (``evidence_wnids``, stored by the run). Uses ``model_name``'s predictions,
    else the model with the most predictions on the source. Returns how many rows changed; runs
    on classes without predictions keep their WordNet-only strength. Idempotent."""
    if run.source_id is None:
        return 0
    rows = list(run.decisions.filter(rule_decision=ClassDecision.Decision.FLAG, candidate_class__isnull=False))
    if not rows:
        return 0
    embeddings = ImageEmbedding.objects.filter(image__source_id=run.source_id, ok=True, image__status=Image.Status.OK)
    if model_name is None:
        model_name = (embeddings.values("model_name").annotate(n=Count("id")).order_by("-n", "model_name")
                      .values_list("model_name", flat=True).first())
    if model_name is None:
        return 0
    topk: dict[int, list[list[str]]] = {}
    for class_id, preds in (embeddings.filter(model_name=model_name, image__candidate_class_id__in=[r.candidate_class_id for r in rows])
                            .values_list("image__candidate_class_id", "topk").iterator(chunk_size=5000)):
        topk.setdefault(class_id, []).append([w for w, _p in preds or []])
    changed = []
    for row in rows:
        found = image_evidence(topk.get(row.candidate_class_id, []), set(row.evidence_wnids))
        if found is None:
            continue
        top1, top5, evidence = found
        rules = [r["rule"] for r in row.fired if r["severity"] == "flag"]
        strength = flag_strength(rules, row.semantic_similarity, evidence)
        row.image_top1_share, row.image_top5_share, row.evidence_model = top1, top5, model_name
        row.flag_strength, row.flag_level = strength, flag_level(strength)
        changed.append(row)
    ClassDecision.objects.bulk_update(changed, ["image_top1_share", "image_top5_share", "evidence_model", "flag_strength", "flag_level"],
                                      batch_size=1000)
    return len(changed)


def class_filter_refresh_source(*, source: Source, model_name: str | None = None) -> int:
    """After a source's images are (re-)extracted: refresh the strength of every run over it."""
    return sum(class_filter_refresh_strength(run=run, model_name=model_name)
               for run in ClassFilterRun.objects.filter(source=source, job__status=Job.Status.DONE))


# -- unmapped class folders -------------------------------------------------------------------------

def _unmapped_flag(decision_id: int) -> ClassDecision:
    row = ClassDecision.objects.select_related("candidate_class__source", "run").filter(pk=decision_id).first()
    if row is None or row.candidate_class is None:
        raise ClassDecisionError(f"no flagged class folder {decision_id}")
    if row.candidate_class.wnid:
        raise ClassDecisionError(f"{row.candidate_class} is already mapped to {row.candidate_class.wnid}")
    return row


def candidate_class_map(*, decision_id: int, wnid: str, note: str = "", user: User | None = None) -> ClassFilterRun:
    """Map an unmapped class folder (flagged ``not_in_wordnet``) to a WordNet noun, then judge
    it like any other class: the source's class filter runs again with the same ID classes
    and policy, queued; until it finishes the class stays flagged (not reviewed, not exported)."""
    import json

    from curation.services.review import synset_texts_sync

    row = _unmapped_flag(decision_id)
    wnid = (wnid or "").strip()
    if not is_wnid(wnid) or not is_noun_wnid(settings.NLTK_DATA, wnid):
        raise ClassDecisionError(f"{wnid[:40]!r} is not a WordNet 3.0 noun id: choose one from the search (e.g. n01914609 sea anemone)")
    graph = load_noun_graph(settings.NLTK_DATA)
    i = graph.index_of_wnid(wnid)
    cc = row.candidate_class
    before = {"wnid": cc.wnid, "mapping": cc.mapping, "note": cc.mapping_note}
    with transaction.atomic():
        cc.wnid, cc.synset_name, cc.gloss = wnid, graph.names[i], graph.glosses[i]
        cc.lemmas = [x.replace("_", " ") for x in graph.lemmas[i]]
        cc.mapping = CandidateClass.Mapping.CURATOR
        who = user.username if getattr(user, "pk", None) else "a curator"
        cc.mapping_note = f"mapped to {graph.label(i)} by {who}" + (f" ({note})" if note else "") + (f"; was: {before['note']}" if before["note"] else "")
        cc.description = ""
        cc.save(update_fields=["wnid", "synset_name", "gloss", "lemmas", "mapping", "mapping_note", "description"])
        audit_record(actor=user, action="class_mapped", target=cc, data={"wnid": wnid, "label": graph.label(i), "note": note, "before": before})
    synset_texts_sync([wnid])
    run = row.run
    return class_filter_start(candidates_spec=f"{SOURCE_PREFIX}{cc.source.name}", id_spec=run.id_spec,
                              policy_text=json.dumps(run.policy), user=user)


def candidate_class_keep_unmapped(*, decision_id: int, description: str, user: User | None = None) -> CandidateClass:
    """Keep an unmapped class folder without a synset: its images are reviewed, and annotators
    see ``description`` where a mapped class shows its WordNet gloss. (No WordNet rule can judge
    it, and exports name classes by synset, so its images are not exported: see docs/review.md.)"""
    row = _unmapped_flag(decision_id)
    description = (description or "").strip()
    if len(description) < 10:
        raise ClassDecisionError("describe what the class shows (at least 10 characters): annotators read it in place of a WordNet gloss")
    if len(description) > 1000:
        raise ClassDecisionError("the description is longer than 1000 characters")
    cc = row.candidate_class
    with transaction.atomic():
        cc.description = description
        cc.save(update_fields=["description"])
        class_decisions_resolve(decision_ids=[row.pk], resolution=ClassDecision.Resolution.KEEP, note=f"kept unmapped: {description}", user=user)
        audit_record(actor=user, action="class_kept_unmapped", target=cc, data={"description": description})
    return cc
