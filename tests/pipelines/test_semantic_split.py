"""ImageNet-X-style semantic splits: the authors' procedure by hand on a small hierarchy, its
invariants, and the published facts of the ImageNet-1K split (shared/REFERENCE-2.md 1.1)."""
from __future__ import annotations

from collections import Counter

import pytest
from django.conf import settings

from pipelines.classes.imagenet import named_list, timm_info_dir
from pipelines.classes.semantic_split import IMAGENET_PARENTS, SplitError, semantic_split
from pipelines.classes.wordnet_graph import load_noun_graph
from tests.pipelines.test_semantic import toy_graph

W = {name: f"n{offset:08d}" for name, offset in
     {"animal": 2, "artifact": 3, "dog": 4, "cat": 5, "puppy": 6, "car": 7, "violin": 8, "viola": 9, "robodog": 10}.items()}


def names(wnids):
    back = {v: k for k, v in W.items()}
    return [back[w] for w in wnids]


def test_the_authors_procedure_by_hand_on_a_small_hierarchy():
    # index order = wnid order: dog, cat, puppy, car, violin, viola. Groups in order of their first
    # class: animal [dog, cat], dog [puppy], artifact [car, violin, viola]. The first odd group
    # (dog's, one child) gives its extra child to ID, the next odd one (artifact's) to OOD.
    split = semantic_split(toy_graph(), [W[n] for n in ("viola", "cat", "dog", "puppy", "violin", "car")], overrides={})
    assert [g.parent for g in split.groups] == [W["animal"], W["dog"], W["artifact"]]
    assert names(split.id_wnids) == ["dog", "puppy", "car"]
    assert names(split.ood_wnids) == ["cat", "violin", "viola"]


def test_a_class_with_two_parents_joins_the_parent_with_more_classes_of_the_set():
    # robodog is under dog (no other class of the set there) and artifact (car, violin, viola)
    split = semantic_split(toy_graph(), [W[n] for n in ("dog", "cat", "car", "violin", "viola", "robodog")], overrides={})
    assert split.parent_choices == {W["robodog"]: (W["artifact"], "the parent with most classes of the set, then the smaller wnid")}
    assert names(split.id_wnids) == ["dog", "car", "violin"] and names(split.ood_wnids) == ["cat", "viola", "robodog"]
    # an override table wins where it names one of the class's parents
    forced = semantic_split(toy_graph(), [W[n] for n in ("dog", "cat", "car", "robodog")], overrides={W["robodog"]: W["dog"]})
    assert forced.parent_choices[W["robodog"]][0] == W["dog"]


def test_too_few_or_unknown_classes_are_refused():
    with pytest.raises(SplitError, match="at least two"):
        semantic_split(toy_graph(), [W["dog"]])
    with pytest.raises(SplitError, match="n09999999 is not a WordNet 3.0 noun"):
        semantic_split(toy_graph(), [W["dog"], "n09999999"])


@pytest.fixture(scope="module")
def graph():
    return load_noun_graph(settings.NLTK_DATA)


@pytest.fixture(scope="module")
def imagenet_x(graph):
    return semantic_split(graph, list(named_list("imagenet-1k")))


def test_imagenet_1k_gives_the_published_imagenet_x_split(graph, imagenet_x):
    side = imagenet_x.side_of()
    # the paper's example (Fig. 1) and the first group (index 0 is the tench)
    assert side["n02110341"] == "id" and side["n02111500"] == "ood"  # dalmatian ID, Great Pyrenees OOD
    assert side["n01440764"] == "id" and side["n01443537"] == "ood"  # tench ID, goldfish OOD
    assert len(imagenet_x.id_wnids) == len(imagenet_x.ood_wnids) == 500
    assert len(imagenet_x.groups) == 558
    sizes = Counter(len(g.children) for g in imagenet_x.groups)
    assert sizes[1] == 345 and sum(n for k, n in sizes.items() if k >= 2) == 213
    assert sum(n for k, n in sizes.items() if k % 2) == 404  # odd-sized groups
    singles = [g for g in imagenet_x.groups if len(g.children) == 1]
    assert sum(g.sides == ["id"] for g in singles) == 171
    multi = [g for g in imagenet_x.groups if len(g.children) >= 2]
    assert all(set(g.sides) == {"id", "ood"} for g in multi)
    assert sum(g.sides.count("id") for g in multi) == 329
    by_parent = {g.parent: g for g in imagenet_x.groups}
    for parent, n, n_id in (("n02092468", 18, 9), ("n02087551", 12, 6), ("n02104523", 10, 5),  # terrier, hound, shepherd dog
                            ("n02958343", 10, 5), ("n01727646", 9, 5)):  # car, colubrid snake
        assert (len(by_parent[parent].children), by_parent[parent].sides.count("id")) == (n, n_id), parent
    # the 26 forced parent choices are all used, and 38 classes have several NLTK parents
    assert len(imagenet_x.parent_choices) == 38
    assert {w for w, (p, why) in imagenet_x.parent_choices.items() if "ImageNet" in why} == set(IMAGENET_PARENTS)
    # ImageNet-R's 200 classes fall 100/100, ImageNet-A's 200 fall 101/99 (REFERENCE-2.md 1.1)
    for listed, expected in (("imagenet_r_synsets.txt", (100, 100)), ("imagenet_a_synsets.txt", (101, 99))):
        wnids = (timm_info_dir() / listed).read_text().split()
        assert (sum(side[w] == "id" for w in wnids), sum(side[w] == "ood" for w in wnids)) == expected
    # lists in group order, children in index order within a group (the authors' files)
    position = {w: i for i, w in enumerate(sorted(named_list("imagenet-1k")))}
    for g in imagenet_x.groups:
        assert [position[w] for w in g.children] == sorted(position[w] for w in g.children)


@pytest.mark.parametrize("seed", [0, 1, 7])
def test_the_seeded_variant_keeps_the_invariants_and_is_repeatable(graph, imagenet_x, seed):
    split = semantic_split(graph, list(named_list("imagenet-1k")), seed=seed)
    assert abs(len(split.id_wnids) - len(split.ood_wnids)) <= 1 and len(split.id_wnids) + len(split.ood_wnids) == 1000
    assert all(set(g.sides) == {"id", "ood"} for g in split.groups if len(g.children) >= 2)
    assert split.id_wnids == semantic_split(graph, list(named_list("imagenet-1k")), seed=seed).id_wnids
    assert set(split.id_wnids) != set(imagenet_x.id_wnids)
