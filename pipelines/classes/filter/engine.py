"""Run a policy's rules over candidate classes: one explainable decision per candidate.

decision = ``remove`` if a rule of severity ``remove`` fired, else ``flag`` if one of severity
``flag`` fired, else ``keep``; the deciding rule is the first such rule in registration order.
A curator's pinned override (allow/deny) wins over every rule and says so in the detail.
"""
from __future__ import annotations

import gc
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable

from pipelines.classes.semantic import SemanticIndex
from pipelines.classes.wordnet_graph import NounGraph

from .policy import Policy
from .rules import RULES, Candidate, FilterContext, Hit, describe_hit
from .strength import flag_level, flag_strength

KEEP, FLAG, REMOVE = "keep", "flag", "remove"
DECISIONS = (KEEP, FLAG, REMOVE)


class FilterInputError(ValueError):
    pass


@dataclass(frozen=True)
class Override:
    action: str  # "allow" (keep) or "deny" (remove)
    note: str = ""
    by: str = ""


@dataclass
class Decision:
    key: str
    wnid: str
    name: str  # the first lemma, as people say it
    synset: str  # "dog.n.01"
    rule_decision: str  # what the rules decided
    deciding_rule: str  # the rules' deciding rule ("" for keep)
    related_wnid: str  # the ID synset (or root) the deciding rule relates the candidate to
    related_name: str
    rule_detail: str  # every rule that fired, with its path
    decision: str  # effective: an override wins over the rules
    rule: str  # the deciding rule, or override_allow / override_deny
    detail: str
    fired: list[dict] = field(default_factory=list)  # every rule that fired: rule, severity, related_wnid, related_name, text
    n_images: int | None = None
    # semantic distance to the ID set (pipelines.classes.semantic); None for a class not in WordNet
    semantic_similarity: float | None = None
    closest_id_wnid: str = ""
    closest_id_name: str = ""
    path_distance: int | None = None
    # flags only (pipelines.classes.filter.strength): how strongly the flag suggests contamination,
    # and the ID wnids whose predictions on the class's images count as image evidence
    flag_strength: float | None = None
    flag_level: str = ""
    evidence_wnids: list[str] = field(default_factory=list)


@dataclass
class FilterResult:
    decisions: list[Decision]
    policy: Policy

    def counts(self) -> dict:
        """Per decision, per deciding rule, and per rule that fired at all (a class can count
        under several rules there)."""
        return {
            "candidates": len(self.decisions),
            "decision": dict(Counter(d.decision for d in self.decisions)),
            "deciding_rule": dict(Counter(f"{d.decision}:{d.rule}" for d in self.decisions if d.rule)),
            "rules_alone": dict(Counter(d.rule_decision for d in self.decisions)),
            "fired": dict(Counter(h["rule"] for d in self.decisions for h in d.fired)),
        }


def id_nodes_for(graph: NounGraph, id_wnids: list[str], where: str = "ID classes") -> list[int]:
    nodes: list[int] = []
    unknown: list[str] = []
    for wnid in id_wnids:
        node = graph.index_of_wnid(wnid)
        if node is None:
            unknown.append(wnid)
        else:
            nodes.append(node)
    if unknown:
        raise FilterInputError(f"{where}: {len(unknown)} wnid(s) are not WordNet 3.0 nouns: {', '.join(unknown[:10])}")
    if not nodes:
        raise FilterInputError(f"{where}: no ID classes")
    return nodes


def run_class_filter(
    graph: NounGraph,
    candidates: list[Candidate],
    id_wnids: list[str],
    policy: Policy,
    *,
    overrides: dict[str, Override] | None = None,
    progress: Callable[[int], None] | None = None,
    progress_every: int = 2000,
) -> FilterResult:
    # The run allocates ~10^5 small containers and no reference cycles; with the collector on,
    # its generational passes walk the whole loaded graph again and again (measured: 20-25% of
    # the run). It is switched off for the run and restored after.
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        return _run(graph, candidates, id_wnids, policy, overrides or {}, progress, progress_every)
    finally:
        if gc_was_enabled:
            gc.enable()


def _run(graph, candidates, id_wnids, policy, overrides, progress, progress_every) -> FilterResult:
    ctx = FilterContext(graph, id_nodes_for(graph, id_wnids))
    semantic = SemanticIndex(graph, ctx.id_nodes)
    # Check the policy's synset parameters before any work, so a typo fails fast.
    org = policy.params["organism"]
    if policy.severities["organism"] != "off":
        ctx.organism_maps(tuple(org["roots"]), tuple(org["exceptions"]))
    active = [(slug, spec) for slug, spec in RULES.items()
              if policy.severities[slug] != "off" and slug not in ("not_in_wordnet", "too_few_images")]
    min_images = policy.params["too_few_images"]["min_images"]

    decisions = []
    for n, cand in enumerate(candidates):
        node = graph.index_of_wnid(cand.wnid) if cand.wnid else None
        fired: list[tuple[str, Hit | None, str]] = []  # rule, hit, text
        if node is None:
            if policy.severities["not_in_wordnet"] != "off":
                why = (f"{cand.wnid} is not a WordNet 3.0 noun" if cand.wnid else
                       f"folder {cand.key!r} is not mapped to a WordNet synset ({cand.mapping_note or 'no wnid given'}; "
                       "map it with add_source --class-map)")
                fired.append(("not_in_wordnet", None, f"not_in_wordnet: {why}"))
        else:
            for slug, spec in active:
                hit = spec.check(ctx, node, cand, policy.params[slug])
                if hit is not None:
                    fired.append((slug, hit, describe_hit(graph, hit)))
        if (cand.n_images is not None and policy.severities["too_few_images"] != "off" and cand.n_images < min_images):
            fired.append(("too_few_images", None, f"too_few_images: {cand.n_images} usable image(s), the policy asks for {min_images}"))
        decision = _decide(graph, cand, node, fired, policy, overrides.get(cand.wnid) if cand.wnid else None)
        _add_semantics(decision, ctx, semantic, node)
        decisions.append(decision)
        if progress and (n + 1) % progress_every == 0:
            progress(n + 1)
    if progress:
        progress(len(candidates))
    return FilterResult(decisions=decisions, policy=policy)


def decide(fired: list[dict], override: Override | None) -> tuple[str, str, str]:
    """(decision, deciding rule, detail) from the rules that fired and an optional override."""
    decision, rule = rules_decision(fired)
    detail = rules_detail(fired)
    if override is None:
        return decision, rule, detail
    pinned = f"override_{override.action}: pinned{' by ' + override.by if override.by else ''}" + (f" ({override.note})" if override.note else "")
    return (KEEP if override.action == "allow" else REMOVE), f"override_{override.action}", pinned + (f"; rules that fired: {detail}" if detail else "")


def rules_decision(fired: list[dict]) -> tuple[str, str]:
    for severity in (REMOVE, FLAG):
        for row in fired:
            if row["severity"] == severity:
                return severity, row["rule"]
    return KEEP, ""


def rules_detail(fired: list[dict]) -> str:
    return "; ".join(f"{r['text']} [{r['severity']}]" for r in fired)


def _decide(graph, cand, node, fired, policy, override: Override | None) -> Decision:
    rows = []
    for slug, hit, text in fired:
        related = hit.related if hit is not None else None
        rows.append({
            "rule": slug, "severity": policy.severities[slug], "text": text,
            "related_wnid": graph.wnid(related) if related is not None else "",
            "related_name": graph.label(related) if related is not None else "",
        })
    rule_decision, deciding = rules_decision(rows)
    first = next((r for r in rows if r["rule"] == deciding), None) if deciding else None
    decision, rule, detail = decide(rows, override)
    return Decision(
        key=cand.key, wnid=cand.wnid,
        name=graph.label(node) if node is not None else cand.key,
        synset=graph.names[node] if node is not None else "",
        rule_decision=rule_decision, deciding_rule=deciding,
        related_wnid=first["related_wnid"] if first else "", related_name=first["related_name"] if first else "",
        rule_detail=rules_detail(rows), decision=decision, rule=rule, detail=detail, fired=rows, n_images=cand.n_images,
    )


def _add_semantics(d: Decision, ctx: FilterContext, semantic: SemanticIndex, node: int | None) -> None:
    graph = ctx.graph
    if node is not None:
        near = semantic.closeness(node)
        d.semantic_similarity = round(near.similarity, 4)
        d.closest_id_wnid, d.closest_id_name = graph.wnid(near.closest_id), graph.label(near.closest_id)
        d.path_distance = near.path_distance
    if d.rule_decision != FLAG:
        return
    flag_rules = [r["rule"] for r in d.fired if r["severity"] == FLAG]
    d.flag_strength = flag_strength(flag_rules, d.semantic_similarity)
    d.flag_level = flag_level(d.flag_strength)
    wnids: set[str] = set()
    for w in {*(r["related_wnid"] for r in d.fired), d.closest_id_wnid}:
        if w:
            wnids.update(id_neighbours(ctx, w))
    d.evidence_wnids = sorted(wnids)


def id_neighbours(ctx: FilterContext, wnid: str) -> frozenset[str]:
    """If ``wnid`` is an ID class: it, the ID classes that share a direct hypernym with it, and
    its direct ID hypernyms and hyponyms (the classes a model's prediction may land on when an
    image shows that ID object); else nothing. Memoised per run."""
    cache = ctx.__dict__.setdefault("_id_neighbours", {})
    if wnid not in cache:
        graph, out = ctx.graph, set()
        n = graph.index_of_wnid(wnid)
        if n is not None and n in ctx.id_set:
            out.add(n)
            for p in graph.parents(n):
                if p in ctx.id_set:
                    out.add(p)
                out.update(c for c in graph.related("hyponym", p) if c in ctx.id_set)
            out.update(c for c in graph.related("hyponym", n) if c in ctx.id_set)
        cache[wnid] = frozenset(graph.wnid(x) for x in out)
    return cache[wnid]


# The columns of the decisions CSV (filter_classes --out, the report's download).
CSV_COLUMNS = ("wnid", "name", "decision", "rule", "related_wnid", "related_name", "detail",
               "semantic_similarity", "closest_id_wnid", "path_distance", "flag_strength", "flag_level")
