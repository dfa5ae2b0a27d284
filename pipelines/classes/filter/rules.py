"""The class-level rules: each one a registered check of one candidate synset against the ID set.

A rule is a function ``check(ctx, node, candidate, params) -> Hit | None`` registered with
``@rule(slug, severity, explanation, params)``; adding a rule is one function here. Rules run in
registration order, which is also the precedence for the "deciding" rule of a decision.

Where the literature specifies a rule it is cited (see shared/REFERENCE.md):
- ImageNet-OOD (Yang et al., ICLR 2024, sec. 3.2 / app. H): remove ID classes, their hypernyms
  and hyponyms, and every hyponym of "organism"; then compare "sister" classes by hand.
- C-OOD (Galil et al., ICLR 2023, sec. 4): remove ID classes, hypernyms, hyponyms, classes that
  make up one object with an ID class or are a component of it, "practically identical classes
  with different ids", and keep classes with at least 200 images.
- NINCO (Bitterwolf et al., ICML 2023, sec. 3): an image is OOD only if no ID object is visible,
  not even partly: so parts and wholes of ID objects are contamination.
"""
from __future__ import annotations

import re
from collections import deque
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Callable

from pipelines.classes.wordnet_graph import WORD_RE as _WORD_RE
from pipelines.classes.wordnet_graph import NounGraph, lemma_key

SEVERITIES = ("remove", "flag", "off")

# ImageNet-1K lemmas that glosses and compound names mostly use in another sense ("head" of
# promontory vs a body's head, "wing" of an airliner vs a bird's, "cell" phone vs a biological
# cell, "orange" fruit vs the colour). Found by counting the most frequent gloss_mentions_id and
# head_noun hits over all of ImageNet-21K and reading them (docs/class_filter.md); without this list those rules
# flag thousands of classes for the wrong reason. A policy can replace it.
POLYSEMOUS_ID_LEMMAS = [
    "bars", "beam", "bell", "board", "bow", "boxer", "brass", "carrier", "cell", "chest", "claw",
    "coil", "ear", "file", "fly", "head", "hook", "horn", "iron", "knot", "light", "mail", "mole",
    "mouse", "muzzle", "orange", "organ", "pitcher", "plane", "plate", "pole", "press", "rubber",
    "rule", "ruler", "scale", "screen", "semi", "site", "slot", "spike", "spiral", "spot", "stage",
    "switch", "tank", "trumpet", "upright", "vacuum", "whorl", "wing",
]


@dataclass(frozen=True)
class Hit:
    """One rule firing on one candidate: the ID synset it relates to and the WordNet path."""

    rule: str
    related: int | None  # graph node of the related ID synset (or organism root)
    path: tuple[int, ...] = ()  # nodes from the candidate to ``related``
    note: str = ""  # what the path means, in words
    extra: str = ""  # appended to the description (e.g. further sisters)


@dataclass
class Candidate:
    key: str  # a wnid, or a source's folder name
    wnid: str = ""
    n_images: int | None = None  # known for sources only
    mapping_note: str = ""  # for a source's unmapped folder: why it has no wnid (ingest's words)


@dataclass(frozen=True)
class RuleSpec:
    slug: str
    default_severity: str
    explanation: str
    params: dict[str, Any]
    check: Callable[["FilterContext", int, Candidate, dict], Hit | None]


RULES: dict[str, RuleSpec] = {}


def rule(slug: str, severity: str, explanation: str, **params: Any) -> Callable[[Callable], Callable]:
    if severity not in SEVERITIES:
        raise ValueError(f"rule {slug}: severity must be one of {SEVERITIES}")

    def register(fn):
        if slug in RULES:
            raise ValueError(f"rule {slug!r} is registered twice")
        RULES[slug] = RuleSpec(slug=slug, default_severity=severity, explanation=explanation, params=params, check=fn)
        return fn

    return register


# -- shared, lazily computed structures ----------------------------------------------------------


def _bfs(sources: list[int], neighbours: Callable[[int], list[int]]) -> dict[int, int]:
    """Multi-source breadth-first search. Returns node -> the node it was reached from (a
    source maps to itself). Sources are visited in the given order, so ties between equally
    near sources go to the first: results are deterministic."""
    came_from = {s: s for s in sources}
    queue = deque(sources)
    while queue:
        node = queue.popleft()
        for nxt in neighbours(node):
            if nxt not in came_from:
                came_from[nxt] = node
                queue.append(nxt)
    return came_from


def _walk(came_from: dict[int, int], node: int) -> tuple[int, ...]:
    """The BFS tree path from ``node`` back to its source, both ends included."""
    path = [node]
    while came_from[path[-1]] != path[-1]:
        path.append(came_from[path[-1]])
    return tuple(path)




def noun_forms(word: str, plural_of: dict[str, list[str]]) -> set[str]:
    """A noun and its plurals: English suffix rules (as WordNet's morphy(7WN) undoes them)
    and WordNet's irregular plurals (noun.exc: "mice" for "mouse")."""
    out = {word, word + "s"}
    if word.endswith(("s", "x", "z", "ch", "sh")):
        out.add(word + "es")
    if word.endswith("y") and len(word) > 1 and word[-2] not in "aeiou":
        out.add(word[:-1] + "ies")
    if word.endswith("man"):
        out.add(word[:-3] + "men")
    out.update(plural_of.get(word, ()))
    return out


# candidate --relation--> ID object  <=>  ID object --inverse--> candidate
_PART_INVERSE = {
    "part_holonym": "part_meronym", "member_holonym": "member_meronym", "substance_holonym": "substance_meronym",
    "part_meronym": "part_holonym", "member_meronym": "member_holonym", "substance_meronym": "substance_holonym",
}


class FilterContext:
    """The ID set over the graph, with what the rules need computed once per run."""

    def __init__(self, graph: NounGraph, id_nodes: list[int]):
        self.graph = graph
        self.id_nodes = sorted(set(id_nodes))
        self.id_set = frozenset(self.id_nodes)

    @cached_property
    def up_from_id(self) -> dict[int, int]:
        """Every ancestor of an ID synset (all hypernym paths, instance hypernyms included),
        reached from its nearest ID synset."""
        return _bfs(self.id_nodes, self.graph.parents)

    @cached_property
    def down_from_id(self) -> dict[int, int]:
        """Every descendant of an ID synset (hyponyms and instances), from its nearest ID synset."""
        return _bfs(self.id_nodes, lambda n: self.graph.related("hyponym", n))

    def organism_maps(self, roots: tuple[str, ...], exceptions: tuple[str, ...]) -> tuple[dict[int, int], dict[int, int]]:
        """Descendants of the roots, and of the exceptions (by synset name or wnid)."""
        key = (roots, exceptions)
        cache = self.__dict__.setdefault("_organism_cache", {})
        if key not in cache:
            root_nodes = self.resolve_synsets(list(roots), "organism.roots")
            exception_nodes = self.resolve_synsets(list(exceptions), "organism.exceptions")
            hypo = lambda n: self.graph.related("hyponym", n)  # noqa: E731
            cache[key] = (_bfs(list(root_nodes), hypo), _bfs(list(exception_nodes), hypo) if exception_nodes else {})
        return cache[key]

    def frozen_keys(self, lemmas: list[str]) -> frozenset[str]:
        """A policy's lemma list, folded, as a set (cached per list object: policies are
        immutable during a run)."""
        cache = self.__dict__.setdefault("_frozen_keys", {})
        hit = cache.get(id(lemmas))
        if hit is None or hit[0] is not lemmas:
            hit = cache[id(lemmas)] = (lemmas, frozenset(lemma_key(x) for x in lemmas))
        return hit[1]

    def gloss_index(self, min_len: int, ignore: frozenset[str]) -> tuple[dict[str, str], dict[str, list[tuple[tuple[str, ...], str]]]]:
        """For the gloss rule: every form (singular, plurals) of a one-word ID lemma -> the
        lemma; and multi-word ID lemmas by first word as (word forms..., lemma), longest first."""
        key = (min_len, ignore)
        cache = self.__dict__.setdefault("_gloss_index", {})
        if key not in cache:
            plural_of: dict[str, list[str]] = {}
            for inflected, base in self.graph.noun_exceptions.items():
                plural_of.setdefault(base, []).append(inflected)
            single: dict[str, str] = {}
            multi: dict[str, list[tuple[tuple[str, ...], str]]] = {}
            for lemma in sorted(self.id_lemmas):
                if lemma in ignore:
                    continue
                words = lemma.split(" ")
                if len(words) == 1:
                    if len(lemma) >= min_len:
                        for form in noun_forms(lemma, plural_of):
                            single.setdefault(form, lemma)
                elif all(_WORD_RE.fullmatch(w) for w in words):
                    for form in noun_forms(words[-1], plural_of):
                        multi.setdefault(words[0], []).append((tuple(words[:-1]) + (form,), lemma))
            for lst in multi.values():
                lst.sort(key=lambda item: (-len(item[0]), item))
            cache[key] = (single, multi)
        return cache[key]

    @cached_property
    def part_partners(self) -> dict[int, tuple[str, int, bool]]:
        """node -> (relation, ID object, direct): nodes that are a part/member/substance of an
        ID object or of a kind of one, or have one as a part. WordNet stores each of these
        pointers in both directions, so they are read from the ID side once."""
        out: dict[int, tuple[str, int, bool]] = {}
        targets = self.id_nodes + sorted(n for n in self.down_from_id if n not in self.id_set)
        for target in targets:
            for relation, inverse in _PART_INVERSE.items():
                for node in self.graph.related(inverse, target):
                    out.setdefault(node, (relation, target, target in self.id_set))
        return out

    @cached_property
    def id_lemmas(self) -> dict[str, list[int]]:
        """Folded lemma -> the ID synsets that have it."""
        out: dict[str, list[int]] = {}
        for node in self.id_nodes:
            for key in self.graph.lemma_keys(node):
                nodes = out.setdefault(key, [])
                if node not in nodes:
                    nodes.append(node)
        return out

    @cached_property
    def id_by_parent(self) -> dict[int, list[int]]:
        """Direct hypernym -> its ID children (for sister classes)."""
        out: dict[int, list[int]] = {}
        for node in self.id_nodes:
            for parent in self.graph.parents(node):
                out.setdefault(parent, []).append(node)
        return out

    def resolve_synsets(self, names: list[str], what: str) -> tuple[int, ...]:
        """Synset names (``organism.n.01``) or wnids -> nodes; unknown ones are an error."""
        nodes = []
        for name in names:
            node = self.graph.index_of_wnid(name) if re.fullmatch(r"n\d{8}", name) else self.graph.index_of_name(name)
            if node is None:
                raise ValueError(f"{what}: {name!r} is not a WordNet 3.0 noun synset (write e.g. organism.n.01 or n00004475)")
            nodes.append(node)
        return tuple(nodes)


# -- the rules, in precedence order ---------------------------------------------------------------


@rule("not_in_wordnet", "flag", "The candidate has no WordNet 3.0 noun synset (unmapped folder or unknown wnid), so no rule can judge it.")
def _not_in_wordnet(ctx, node, cand, params):
    return None  # decided by the engine before any rule runs: there is no node to check


@rule("id_class", "remove", "The candidate is one of the ID synsets.")
def _id_class(ctx: FilterContext, node: int, cand: Candidate, params: dict) -> Hit | None:
    return Hit("id_class", node, (node,), "is an ID class") if node in ctx.id_set else None


@rule("hypernym_of_id", "remove",
      "The candidate is an ancestor of an ID synset (over all hypernym paths, instances included), so its images may be ID objects (ImageNet-OOD, C-OOD).")
def _hypernym_of_id(ctx, node, cand, params):
    if node in ctx.id_set or node not in ctx.up_from_id:
        return None
    path = _walk(ctx.up_from_id, node)  # candidate ... ID, walking down
    return Hit("hypernym_of_id", path[-1], path, "is a hypernym of")


@rule("hyponym_of_id", "remove",
      "The candidate is a kind (or an instance) of an ID synset, so its images are ID objects (ImageNet-OOD, C-OOD).")
def _hyponym_of_id(ctx, node, cand, params):
    if node in ctx.id_set or node not in ctx.down_from_id:
        return None
    path = _walk(ctx.down_from_id, node)  # candidate ... ID, walking up
    return Hit("hyponym_of_id", path[-1], path, "is a kind of")


@rule("organism", "remove",
      "The candidate descends from an organism root: WordNet mixes technical and everyday categories there, so ID animals and "
      "plants hide under other names (ImageNet-OOD).",
      roots=["organism.n.01"], exceptions=[])
def _organism(ctx, node, cand, params):
    below_root, below_exception = ctx.organism_maps(tuple(params["roots"]), tuple(params["exceptions"]))
    if node not in below_root or node in below_exception:
        return None
    path = _walk(below_root, node)
    return Hit("organism", path[-1], path, "descends from")


@rule("same_lemma", "remove",
      "The candidate shares a lemma with an ID synset: practically the same class under another id (C-OOD: hen n01792640 / hen n01514859).")
def _same_lemma(ctx, node, cand, params):
    for key in ctx.graph.lemma_keys(node):
        for other in ctx.id_lemmas.get(key, ()):
            if other != node:
                return Hit("same_lemma", other, (node, other), f"shares the lemma '{key}' with")
    return None


_PART_WORDS = {
    "part_holonym": "is a part of", "member_holonym": "is a member of", "substance_holonym": "is a substance of",
    "part_meronym": "has the part", "member_meronym": "has the member", "substance_meronym": "is made of",
}


@rule("part_whole", "remove",
      "The candidate is a part, member or substance of an ID object, or has one as a part: its images show (part of) an ID "
      "object (C-OOD's whole/component pairs; NINCO: even partly visible counts).")
def _part_whole(ctx, node, cand, params):
    found = ctx.part_partners.get(node)
    if found is None:
        return None
    relation, other, direct = found
    words = _PART_WORDS[relation]
    if direct:
        return Hit("part_whole", other, (node, other), words)
    # a part of a kind of ID object (the lamp house of a movie projector) is a part of an ID object
    path = _walk(ctx.down_from_id, other)
    return Hit("part_whole", path[-1], (node,) + path, f"{words} a kind of")


@rule("head_noun", "flag",
      "A multi-word lemma of the candidate ends in an ID lemma (king vulture / vulture): often a kind of the ID class that WordNet files elsewhere.",
      min_head_length=3, ignore_lemmas=POLYSEMOUS_ID_LEMMAS)
def _head_noun(ctx, node, cand, params):
    ignore = ctx.frozen_keys(params["ignore_lemmas"])
    for key in ctx.graph.lemma_keys(node):
        words = key.split(" ")
        if "of" in words[1:]:  # "bird of paradise": the head is before "of"
            words = words[: words.index("of", 1)]
        for start in range(1, len(words)):
            head = " ".join(words[start:])
            if len(head) < params["min_head_length"] or head in ignore:
                continue
            for other in ctx.id_lemmas.get(head, ()):
                if other != node:
                    return Hit("head_noun", other, (node, other), f"'{key}' has the head noun '{head}' of")
    return None


@rule("gloss_mentions_id", "flag",
      "The candidate's gloss names an ID lemma (pickle: 'especially cucumbers'): its images may show the ID object.",
      min_lemma_length=3, ignore_lemmas=POLYSEMOUS_ID_LEMMAS)
def _gloss_mentions_id(ctx, node, cand, params):
    single, multi = ctx.gloss_index(params["min_lemma_length"], ctx.frozen_keys(params["ignore_lemmas"]))
    words = ctx.graph.gloss_words(node)
    if single.keys().isdisjoint(words) and multi.keys().isdisjoint(words):
        return None  # most glosses: decided at C speed
    for i, word in enumerate(words):
        for form_words, lemma in multi.get(word, ()):
            if tuple(words[i:i + len(form_words)]) == form_words:
                other = ctx.id_lemmas[lemma][0]
                if other != node:
                    return Hit("gloss_mentions_id", other, (node, other), f"gloss mentions '{lemma}' of")
        lemma = single.get(word)
        if lemma is not None:
            for other in ctx.id_lemmas[lemma]:
                if other != node:
                    return Hit("gloss_mentions_id", other, (node, other), f"gloss mentions '{lemma}' of")
    return None


@rule("sister_of_id", "flag",
      "The candidate shares a direct hypernym with an ID synset (viola / violin): the pairs ImageNet-OOD's authors compared by eye.")
def _sister_of_id(ctx, node, cand, params):
    if node in ctx.id_set:
        return None
    for parent in ctx.graph.parents(node):
        sisters = ctx.id_by_parent.get(parent)
        if sisters:
            others = "" if len(sisters) == 1 else " (and " + ", ".join(ctx.graph.names[s] for s in sisters[1:6]) + (" ..." if len(sisters) > 6 else "") + ")"
            return Hit("sister_of_id", sisters[0], (node, parent, sisters[0]), "shares a direct hypernym with", others)
    return None


@rule("too_few_images", "flag", "The source has fewer usable images of the class than the policy's minimum (C-OOD kept classes with at least 200).",
      min_images=20)
def _too_few_images(ctx, node, cand, params):
    return None  # decided by the engine: it needs no synset, only the image count


def _chain_up(graph: NounGraph, nodes) -> str:
    """``a -> b -> c``: each node is a kind (or, where marked, an instance) of the next."""
    nodes = list(nodes)
    out = graph.names[nodes[0]]
    for a, b in zip(nodes, nodes[1:]):
        out += (" -(instance of)-> " if graph.is_instance_edge(a, b) else " -> ") + graph.names[b]
    return out


def describe_hit(graph: NounGraph, hit: Hit) -> str:
    """``rule: <what> <related synset> (wnid) [WordNet path]``, with synset names and wnids."""
    if hit.related is None:
        return f"{hit.rule}: {hit.note}"
    text = f"{hit.rule}: {hit.note} {graph.names[hit.related]} ({graph.wnid(hit.related)})"
    if hit.rule in ("hyponym_of_id", "organism"):
        path = _chain_up(graph, hit.path)
    elif hit.rule == "hypernym_of_id":
        path = _chain_up(graph, reversed(hit.path))
    elif hit.rule == "sister_of_id":
        node, parent, sister = hit.path
        path = f"{_chain_up(graph, (node, parent))} <- {graph.names[sister]}{hit.extra}"
    elif hit.rule == "part_whole" and len(hit.path) > 2:
        path = f"{graph.names[hit.path[0]]} ({hit.note.rsplit(' a kind of', 1)[0]}) {_chain_up(graph, hit.path[1:])}"
    else:
        return text
    return f"{text} [{path}]"
