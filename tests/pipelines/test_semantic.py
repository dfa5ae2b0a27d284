"""Semantic distance to the ID set and ranked flags.

The expected numbers are computed here from the formulas (Seco et al. 2004 intrinsic IC; Lin 1998),
by hand on a small hierarchy and with NLTK's own Lin and path code on real WordNet, not with
pipelines.classes.semantic's helpers."""
from __future__ import annotations

import math

import numpy as np
import pytest
from django.conf import settings

from pipelines.classes.filter import Candidate, load_policy, run_class_filter
from pipelines.classes.filter.strength import flag_level, flag_strength, image_evidence
from pipelines.classes.imagenet import named_list
from pipelines.classes.semantic import SemanticIndex, intrinsic_ic
from pipelines.classes.wordnet_graph import RELATIONS, NounGraph, load_noun_graph

# -- a hand-made hierarchy -----------------------------------------------------------------------
#   entity ─┬─ animal ─┬─ dog ─┬─ puppy
#           │          │       └─ robodog   (also under artifact: two parents)
#           │          └─ cat
#           └─ artifact ─┬─ violin, viola, car
#                        └─ robodog
TOY = {  # name: (offset, parents)
    "entity": (1, []), "animal": (2, ["entity"]), "artifact": (3, ["entity"]), "dog": (4, ["animal"]),
    "cat": (5, ["animal"]), "puppy": (6, ["dog"]), "violin": (8, ["artifact"]), "viola": (9, ["artifact"]),
    "car": (7, ["artifact"]), "robodog": (10, ["dog", "artifact"]),
}


def toy_graph() -> NounGraph:
    names = list(TOY)
    index = {n: i for i, n in enumerate(names)}
    parents = {index[n]: [index[p] for p in TOY[n][1]] for n in names}
    children = {i: sorted(c for c, ps in parents.items() if i in ps) for i in range(len(names))}

    def csr(table):
        indptr, indices = [0], []
        for i in range(len(names)):
            indices += table.get(i, [])
            indptr.append(len(indices))
        return indptr, indices

    edges = {rel: csr({}) for rel in RELATIONS}
    edges["hypernym"], edges["hyponym"] = csr(parents), csr(children)
    return NounGraph(offsets=np.array([TOY[n][0] for n in names], dtype=np.int64), names=[f"{n}.n.01" for n in names],
                     lemmas=[(n,) for n in names], glosses=[""] * len(names), edges=edges, source_sha1="toy")


def ic_by_hand(hyponyms: int, n: int = len(TOY)) -> float:
    return 1 - math.log(hyponyms + 1) / math.log(n)


def test_intrinsic_ic_counts_distinct_hyponyms_at_any_depth():
    g = toy_graph()
    ic = intrinsic_ic(g)
    node = {name: g.index_of_name(f"{name}.n.01") for name in TOY}
    # entity has all 9 others below it; robodog is counted once although it has two parents
    assert ic[node["entity"]] == pytest.approx(0.0)
    assert ic[node["animal"]] == pytest.approx(ic_by_hand(4))  # dog, cat, puppy, robodog
    assert ic[node["artifact"]] == pytest.approx(ic_by_hand(4))  # violin, viola, car, robodog
    assert ic[node["dog"]] == pytest.approx(ic_by_hand(2))
    assert ic[node["cat"]] == ic[node["puppy"]] == ic[node["robodog"]] == pytest.approx(1.0)


def test_lin_and_path_to_the_closest_id_class_by_hand():
    g = toy_graph()
    node = {name: g.index_of_name(f"{name}.n.01") for name in TOY}
    index = SemanticIndex(g, [node["dog"], node["violin"]])
    ic_dog, ic_animal, ic_artifact = ic_by_hand(2), ic_by_hand(4), ic_by_hand(4)

    cat = index.closeness(node["cat"])  # sister of dog's: lcs animal
    assert cat.closest_id == node["dog"] and cat.lcs == node["animal"] and cat.path_distance == 2
    assert cat.similarity == pytest.approx(2 * ic_animal / (1.0 + ic_dog))

    viola = index.closeness(node["viola"])  # sister of violin
    assert viola.closest_id == node["violin"] and viola.similarity == pytest.approx(2 * ic_artifact / 2.0)

    puppy = index.closeness(node["puppy"])  # a kind of dog: the lcs is dog itself
    assert puppy.closest_id == node["dog"] and puppy.path_distance == 1
    assert puppy.similarity == pytest.approx(2 * ic_dog / (1.0 + ic_dog))

    # two parents: as close as the closest one (dog: 2*ic_dog/(1+ic_dog) > violin: ic_artifact)
    robodog = index.closeness(node["robodog"])
    assert robodog.closest_id == node["dog"] and robodog.path_distance == 1
    assert robodog.similarity == pytest.approx(max(2 * ic_dog / (1 + ic_dog), 2 * ic_artifact / 2))

    assert index.closeness(node["dog"]).similarity == pytest.approx(1.0)  # the ID class itself
    assert index.closeness(node["entity"]).similarity == pytest.approx(0.0)  # the root subsumes everything, IC 0


def test_ties_break_towards_the_shorter_path_then_the_smaller_wnid():
    g = toy_graph()
    node = {name: g.index_of_name(f"{name}.n.01") for name in TOY}
    index = SemanticIndex(g, [node["violin"], node["car"]])  # viola is equally close to both
    assert index.closeness(node["viola"]).closest_id == node["car"]  # n00000007 < n00000008


# -- real WordNet, against NLTK's own implementation ------------------------------------------------

@pytest.fixture(scope="module")
def graph():
    return load_noun_graph(settings.NLTK_DATA)


class SecoIC(dict):
    """An NLTK ``ic`` table whose -log(count/root) is Seco's intrinsic IC, computed lazily here by
    walking NLTK's hyponym closure (so NLTK's lin_similarity does the subsumer search itself)."""

    def __init__(self, wn):
        super().__init__()
        self.wn = wn
        self.n = sum(1 for _ in wn.all_synsets("n"))
        self[0] = 1.0  # the root's count: NLTK divides by it

    def __missing__(self, offset):
        synset = self.wn.synset_from_pos_and_offset("n", offset)
        below = set(synset.closure(lambda s: s.hyponyms() + s.instance_hyponyms()))
        ic = 1 - math.log(len(below) + 1) / math.log(self.n)
        self[offset] = math.exp(-ic)
        return self[offset]


@pytest.mark.parametrize("candidate, id_names", [
    ("viola.n.03", ["violin.n.01", "cello.n.01", "banjo.n.01", "sax.n.02"]),
    ("rainbow_lorikeet.n.01", ["lorikeet.n.01", "macaw.n.01", "tench.n.01"]),
    ("pickle.n.01", ["cucumber.n.02", "bagel.n.01", "ice_cream.n.01"]),
    ("aqualung.n.01", ["oxygen_mask.n.01", "snorkel.n.01", "scuba_diver.n.01"]),
])
def test_lin_and_path_match_nltk_on_real_wordnet(wn, graph, candidate, id_names):
    ic = {"n": SecoIC(wn)}
    cand = wn.synset(candidate)
    ids = [wn.synset(n) for n in id_names]
    lins = [cand.lin_similarity(s, ic) for s in ids]
    paths = [cand.shortest_path_distance(s) for s in ids]
    index = SemanticIndex(graph, [graph.index_of_name(n) for n in id_names])
    got = index.closeness(graph.index_of_name(candidate))
    assert got.similarity == pytest.approx(max(lins), abs=1e-9)
    assert graph.names[got.closest_id] == id_names[int(np.argmax(lins))]
    assert got.path_distance == min(paths)


# -- ranked flags --------------------------------------------------------------------------------

def test_flag_strength_formula_by_hand():
    # sister alone: R = 0.3; similarity 0.8 -> a*S = 0.2
    assert flag_strength(["sister_of_id"], 0.8) == pytest.approx(1 - 0.7 * 0.8, abs=1e-4)
    assert flag_level(flag_strength(["sister_of_id"], 1.0)) == "weak"  # never strong on WordNet alone
    # gloss + sister: R = 1 - 0.4*0.7
    assert flag_strength(["gloss_mentions_id", "sister_of_id"], 0.5) == pytest.approx(1 - 0.4 * 0.7 * (1 - 0.125), abs=1e-4)
    # images that show the ID class make a sister strong ...
    assert flag_level(flag_strength(["sister_of_id"], 0.8, evidence=0.5)) == "strong"
    # ... and images the model never reads as anything related halve the rules' weight
    assert flag_strength(["gloss_mentions_id"], 0.3, evidence=0.0) == pytest.approx(1 - (1 - 0.3) * (1 - 0.075), abs=1e-4)
    assert flag_level(flag_strength(["gloss_mentions_id"], 0.3, evidence=0.0)) == "weak"
    assert image_evidence([["a", "x"], ["x", "a"], ["y", "z"], ["x", "y"]], {"a"}) == (0.25, 0.5, 0.375)
    assert image_evidence([], {"a"}) is None


# Categorical overlaps the papers name (NINCO, ImageNet-OOD, C-OOD, SSB via NINCO): each must be
# removed outright or flagged strong. (candidate, the ID class it overlaps)
NAMED_OVERLAPS = [
    ("n01821076", "lorikeet"),  # rainbow lorikeet / lorikeet (NINCO on SSB)
    ("n04536335", "violin"),  # viola / violin
    ("n02731629", "oxygen mask / scuba diver"),  # aqualung
    ("n08570634", "hay"),  # hayfield / hay (NINCO)
    ("n03854815", "organ"),  # organ pipe / organ
    ("n07824988", "cucumber"),  # pickle / cucumber
    ("n08544719", "corn"),  # cornfield / corn
    ("n09229709", "bubble"),  # bubble / bubble
    ("n07611358", "ice cream"),  # frozen dessert (hypernym)
    ("n09177883", "volcano"),  # Vesuvius (instance)
]


def test_named_overlaps_are_removed_or_strong(graph):
    wnids = [w for w, _ in NAMED_OVERLAPS]
    result = run_class_filter(graph, [Candidate(key=w, wnid=w) for w in wnids], list(named_list("imagenet-1k")),
                              load_policy("imagenet-ood"))
    for d, (_, what) in zip(result.decisions, NAMED_OVERLAPS):
        assert d.decision == "remove" or d.flag_level == "strong", (d.name, what, d.rule, d.flag_strength)


def test_on_imagenet_21k_p_at_most_a_third_of_survivors_are_strong_and_sisters_alone_are_weak(graph):
    four = {"id_class", "hypernym_of_id", "hyponym_of_id", "organism"}
    result = run_class_filter(graph, [Candidate(key=w, wnid=w) for w in named_list("imagenet-21k-p")],
                              list(named_list("imagenet-1k")), load_policy("imagenet-ood"))
    survivors = [d for d in result.decisions if not {f["rule"] for f in d.fired} & four]
    assert abs(len(survivors) - 4922) <= 50  # docs/class_filter.md
    strong = [d for d in survivors if d.flag_level == "strong"]
    assert 0 < len(strong) <= len(survivors) / 3
    sisters_only = [d for d in survivors if {f["rule"] for f in d.fired} == {"sister_of_id"}]
    assert sisters_only and all(d.flag_level == "weak" for d in sisters_only)
    # every survivor in WordNet has a similarity, a closest ID class and a path; flags have a strength
    assert all(d.semantic_similarity is not None and d.closest_id_wnid and d.path_distance >= 1 for d in survivors)
    assert all((d.flag_strength is not None) == (d.rule_decision == "flag") for d in result.decisions)
    # ranked: every strong flag outranks every weak one
    flags = sorted((d for d in survivors if d.flag_strength is not None), key=lambda d: -d.flag_strength)
    levels = [d.flag_level for d in flags]
    assert levels == sorted(levels, key=lambda x: x != "strong")
