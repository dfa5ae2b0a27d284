"""Semantic distance from a candidate class to an ID class set, from WordNet alone.

Two measures, both the project's own documented choice (none of the OOD papers we follow names a
measure; see shared/REFERENCE-2.md 2.1-2.3), computed offline on the noun graph:

- **Lin similarity with intrinsic information content.** Seco, Veale & Hayes (ECAI 2004) define a
  synset's IC from the taxonomy itself, without a corpus::

      IC(c) = 1 - log(hypo(c) + 1) / log(N)

  where ``hypo(c)`` is the number of distinct synsets below ``c`` (hyponyms and instances, at any
  depth) and ``N`` the number of noun synsets: a leaf has IC 1, the root ``entity`` IC 0. Lin
  (ICML 1998) then scores two synsets by the IC of their most informative common subsumer::

      lin(a, b) = 2 * IC(lcs(a, b)) / (IC(a) + IC(b))

  in [0, 1]; 1 for the same synset.
- **Shortest hypernym-path distance**: the fewest edges from ``a`` up to a common subsumer and down
  to ``b`` (instance hypernyms count as edges), as NLTK's ``shortest_path_distance`` for nouns.

For a candidate, the *closest ID class* is the one with the highest Lin similarity (ties: the
shorter path, then the smaller wnid), and ``path_distance`` is the shortest path to any ID class.
Both walk every hypernym path, so a class with several parents is as close as its closest one.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from pipelines.classes.wordnet_graph import NounGraph

_IC_CACHE: dict[tuple[int, str], np.ndarray] = {}


def ancestor_distances(graph: NounGraph, node: int) -> dict[int, int]:
    """Every synset above ``node`` (itself included, at 0) with its fewest hypernym edges."""
    parents = graph.parents
    dist = {node: 0}
    frontier = [node]
    d = 0
    while frontier:
        d += 1
        nxt = []
        for n in frontier:
            for p in parents(n):
                if p not in dist:
                    dist[p] = d
                    nxt.append(p)
        frontier = nxt
    return dist


def descendant_counts(graph: NounGraph) -> np.ndarray:
    """``hypo(c)`` for every synset: the number of distinct synsets below it, at any depth."""
    n = len(graph)
    order = _topological_from_roots(graph)
    ancestors: list[frozenset[int] | None] = [None] * n
    counts = np.zeros(n, dtype=np.int64)
    for node in order:  # parents come before children
        parents = graph.parents(node)
        if not parents:
            acc: frozenset[int] = frozenset()
        elif len(parents) == 1:
            p = parents[0]
            acc = ancestors[p] | {p}  # type: ignore[operator]
        else:
            merged: set[int] = set()
            for p in parents:
                merged |= ancestors[p]  # type: ignore[arg-type]
                merged.add(p)
            acc = frozenset(merged)
        ancestors[node] = acc
    for below in ancestors:
        for a in below or ():
            counts[a] += 1
    return counts


def _topological_from_roots(graph: NounGraph) -> list[int]:
    n = len(graph)
    pending = [len(graph.parents(i)) for i in range(n)]
    order = [i for i in range(n) if pending[i] == 0]
    k = 0
    while k < len(order):
        node = order[k]
        k += 1
        for child in graph.related("hyponym", node):
            pending[child] -= 1
            if pending[child] == 0:
                order.append(child)
    if len(order) != n:
        raise ValueError("the noun graph has a hypernym cycle; cannot compute information content")
    return order


def intrinsic_ic(graph: NounGraph) -> np.ndarray:
    """Seco et al. (2004) intrinsic information content of every synset (float64, 0..1)."""
    key = (id(graph), graph.source_sha1)
    if key not in _IC_CACHE:
        hypo = descendant_counts(graph).astype(np.float64)
        n = max(len(graph), 2)
        _IC_CACHE[key] = 1.0 - np.log(hypo + 1.0) / math.log(n)
    return _IC_CACHE[key]


def lin(ic_lcs: float, ic_a: float, ic_b: float) -> float:
    denominator = ic_a + ic_b
    return 1.0 if denominator <= 0 else 2.0 * ic_lcs / denominator


@dataclass(frozen=True)
class Closeness:
    similarity: float  # Lin, 0..1, to the closest ID class
    closest_id: int  # node of that ID class
    lcs: int  # its most informative common subsumer with the candidate
    path_distance: int  # fewest hypernym edges to any ID class


class SemanticIndex:
    """Answers "how close is this synset to the ID set?" for many candidates quickly.

    For a candidate ``c`` and any common subsumer ``a`` of ``c`` and an ID class ``i``,
    ``IC(lcs(c, i)) >= IC(a)``; so the best Lin similarity over the ID set is

        max over ancestors a of c of  2 * IC(a) / (IC(c) + min IC of the ID classes below a)

    and the shortest path is ``min over a of d(c, a) + (fewest edges from a down to an ID class)``.
    Both tables are built once per ID set (one walk up from each ID class); a candidate then
    costs one walk up its own hypernyms, with no per-ID-class work."""

    def __init__(self, graph: NounGraph, id_nodes: list[int]):
        if not id_nodes:
            raise ValueError("no ID classes to measure against")
        self.graph = graph
        self.ic = intrinsic_ic(graph)
        self._ic_list = self.ic.tolist()  # plain floats: indexing a list is several times faster than numpy here
        self.id_nodes = list(dict.fromkeys(int(n) for n in id_nodes))
        # per ancestor of the ID set: the best ID class below it for Lin (lowest IC, then fewest
        # edges down, then smaller wnid) and the fewest edges down to any ID class
        best: dict[int, tuple[float, int, str, int]] = {}
        down: dict[int, int] = {}
        for node in self.id_nodes:
            wnid = graph.wnid(node)
            ic = float(self.ic[node])
            for anc, d in ancestor_distances(graph, node).items():
                key = (ic, d, wnid, node)
                if anc not in best or key < best[anc]:
                    best[anc] = key
                if d < down.get(anc, 1 << 30):
                    down[anc] = d
        self._best, self._down = best, down

    def closeness(self, node: int) -> Closeness:
        ic = self._ic_list
        ic_c = ic[node]
        best_get, down = self._best.get, self._down
        # the first candidate always wins (similarities are >= 0), so the tie key's start never decides
        best_sim, best_id, best_anc = -1.0, self.id_nodes[0], -1
        tie: tuple[int, str, int] = (1 << 30, "", -1)
        path = 1 << 30
        for anc, d in ancestor_distances(self.graph, node).items():
            hit = best_get(anc)
            if hit is None:
                continue
            ic_id, d_id, wnid, id_node = hit
            den = ic_c + ic_id
            sim = 2.0 * ic[anc] / den if den > 0 else 1.0
            if sim > best_sim + 1e-12 or (sim >= best_sim - 1e-12 and (d + d_id, wnid, anc) < tie):
                best_sim, tie, best_id, best_anc = sim, (d + d_id, wnid, anc), id_node, anc
            if d + down[anc] < path:
                path = d + down[anc]
        return Closeness(similarity=min(max(best_sim, 0.0), 1.0), closest_id=best_id, lcs=best_anc, path_distance=path)


# -- easy / hard sub-splits of an OOD set ------------------------------------------------------------

EASY, HARD = "easy", "hard"
DIFFICULTY_HELP = ("median (default), quantile:Q (0<Q<1: the classes at or above the Q-quantile of similarity are hard) "
                   "or a similarity threshold T (0<=T<=1: classes with similarity >= T are hard)")


class DifficultyError(ValueError):
    pass


@dataclass(frozen=True)
class DifficultySpec:
    kind: str  # median | quantile | threshold
    value: float = 0.5

    def describe(self) -> str:
        return {"median": "the median similarity", "quantile": f"the {self.value:g}-quantile of similarity",
                "threshold": f"similarity {self.value:g}"}[self.kind]


def parse_difficulty(spec: str | None) -> DifficultySpec:
    """``median``, ``quantile:Q`` or a threshold ``T``; a bad spec names itself and the forms."""
    text = (spec or "median").strip().lower()
    if text == "median":
        return DifficultySpec("median", 0.5)
    try:
        if text.startswith("quantile:"):
            q = float(text.split(":", 1)[1])
            if not 0 < q < 1:
                raise ValueError
            return DifficultySpec("quantile", q)
        t = float(text)
        if not 0 <= t <= 1:
            raise ValueError
        return DifficultySpec("threshold", t)
    except ValueError:
        raise DifficultyError(f"difficulty split {spec!r}: use {DIFFICULTY_HELP}") from None


def difficulty_split(similarities: dict[str, float], spec: DifficultySpec) -> tuple[float, dict[str, str]]:
    """(cut, class -> easy|hard): a class at or above the cut is *hard* (semantically close to
    the ID set: near-OOD), below it *easy*. Classes are the OOD set's, keyed by wnid."""
    if not similarities:
        raise DifficultyError("difficulty split: no class with a WordNet similarity to split")
    values = np.array(sorted(similarities.values()), dtype=np.float64)
    if spec.kind == "threshold":
        cut = spec.value
    else:
        cut = float(np.quantile(values, spec.value, method="higher" if spec.kind == "median" else "linear"))
    return cut, {w: HARD if s >= cut else EASY for w, s in similarities.items()}
