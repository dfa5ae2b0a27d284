"""ImageNet-X-style semantic splits of an ID class set into an ID half and an OOD half, so that
closely related classes end up on opposite sides (paper 004, sec. 2.1; shared/REFERENCE-2.md 1.1).

The authors' procedure (their ``make_split_list.py``), which is deterministic:

1. Classes in index order: ImageNet's sorted-wnid order (index 0 is n01440764, tench).
2. Each class's *parent* is its direct hypernym. Classes are grouped by parent; groups are ordered
   by their first class, children keep index order.
3. One flag alternates over the odd-sized groups (single-child groups included): for a group of n,
   k = n // 2, plus one if n is odd and the flag is down (then the flag goes up; an odd group with
   the flag up puts it down). The first k children go to ID, the rest to OOD.

Choices the paper leaves open, decided here (docs/class_filter.md, "Semantic splits"):

- **Several parents.** ImageNet's ``wordnet.is_a.txt`` gives each class one parent, which NLTK's
  WordNet does not (38 ImageNet-1K classes have two or three). ``IMAGENET_PARENTS`` holds the 26
  parent choices that reproduce the published ImageNet-X lists exactly (REFERENCE-2.md 1.1, found by
  a constraint search); any other class with several parents takes the parent that has the most
  classes of the ID set under it directly (so siblings can be split), then the smaller wnid. For
  the 12 free ImageNet-1K classes any choice gives the same lists.
- **Index order of an arbitrary ID set**: sorted wnids, as ImageNet's.
- **A seeded variant** (``seed``): the children of each group are shuffled with the seed and the
  alternation starts on a side drawn from it; the invariants (every parent with two or more
  children is split, halves within one class of each other) hold for every seed.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field

from pipelines.classes.wordnet_graph import NounGraph

# Parent overrides that reproduce ImageNet-X (REFERENCE-2.md 1.1, table): child wnid -> parent wnid.
IMAGENET_PARENTS: dict[str, str] = {
    "n02672831": "n03393324",  # accordion -> free-reed instrument
    "n02776631": "n04602044",  # bakery -> workplace
    "n02799071": "n02778669",  # baseball -> ball
    "n02802426": "n02778669",  # basketball -> ball
    "n02808304": "n02807260",  # bath towel -> bath linen
    "n02916936": "n02862048",  # bulletproof vest -> body armor
    "n03085013": "n03163973",  # computer keyboard -> data input device
    "n03134739": "n03134853",  # croquet ball -> croquet equipment
    "n03314780": "n03994008",  # face powder -> powder
    "n03445777": "n02778669",  # golf ball -> ball
    "n03445924": "n03446832",  # golfcart -> golf equipment
    "n03478589": "n04464852",  # half track -> tracked vehicle
    "n03602883": "n03163973",  # joystick -> data input device
    "n03724870": "n03206718",  # mask -> disguise
    "n03770679": "n02958343",  # minivan -> car
    "n03773504": "n04565375",  # missile -> weapon
    "n03854065": "n03614532",  # organ -> keyboard instrument
    "n03954731": "n03265032",  # plane (tool) -> edge tool
    "n03982430": "n03414162",  # pool table -> game equipment
    "n04179913": "n03528263",  # sewing machine -> home appliance
    "n04371774": "n03964744",  # swing -> plaything
    "n04389033": "n04464852",  # tank -> tracked vehicle
    "n04423845": "n03094503",  # thimble -> container
    "n04458633": "n03282591",  # totem pole -> emblem
    "n04486054": "n03743902",  # triumphal arch -> memorial
    "n07871810": "n07557434",  # meat loaf -> dish
}

ID, OOD = "id", "ood"


class SplitError(ValueError):
    """The ID class set cannot be split; the message says why."""


@dataclass
class Group:
    parent: str  # wnid
    parent_name: str
    children: list[str]  # wnids, in index order (or shuffled, for a seeded split)
    sides: list[str] = field(default_factory=list)  # ID / OOD per child


@dataclass
class SemanticSplit:
    groups: list[Group]
    id_wnids: list[str]
    ood_wnids: list[str]
    parent_choices: dict[str, tuple[str, str]]  # child with several parents -> (chosen, why)
    seed: int | None = None

    def side_of(self) -> dict[str, str]:
        return {w: s for g in self.groups for w, s in zip(g.children, g.sides)}

    def summary(self) -> dict:
        multi = [g for g in self.groups if len(g.children) >= 2]
        split_multi = [g for g in multi if len(set(g.sides)) == 2]
        singles = [g for g in self.groups if len(g.children) == 1]
        largest = sorted(self.groups, key=lambda g: (-len(g.children), g.parent))[:5]
        return {
            "classes": len(self.id_wnids) + len(self.ood_wnids), "id_classes": len(self.id_wnids),
            "ood_classes": len(self.ood_wnids), "parents": len(self.groups),
            "parents_with_several_children": len(multi), "parents_split_across_sides": len(split_multi),
            "single_child_parents": len(singles),
            "single_child_classes_id": sum(1 for g in singles if g.sides[0] == ID),
            "odd_sized_groups": sum(1 for g in self.groups if len(g.children) % 2),
            "classes_with_several_parents": len(self.parent_choices),
            "largest_groups": [{"parent": g.parent, "name": g.parent_name, "children": len(g.children),
                                "id": g.sides.count(ID)} for g in largest],
            "procedure": "seeded" if self.seed is not None else "authors (deterministic)",
            "seed": self.seed,
        }


def choose_parents(graph: NounGraph, wnids: list[str], overrides: dict[str, str] | None = None) -> tuple[dict[str, str], dict[str, tuple[str, str]]]:
    """child wnid -> parent wnid for every class, and for classes with several parents the one
    chosen and why."""
    overrides = IMAGENET_PARENTS if overrides is None else overrides
    nodes = {}
    for w in wnids:
        node = graph.index_of_wnid(w)
        if node is None:
            raise SplitError(f"{w} is not a WordNet 3.0 noun")
        nodes[w] = node
    candidates = {w: sorted(graph.wnid(p) for p in graph.parents(n)) for w, n in nodes.items()}
    orphans = [w for w, ps in candidates.items() if not ps]
    if orphans:
        raise SplitError(f"{len(orphans)} class(es) have no hypernym to group by: {', '.join(orphans[:5])}")
    # how many of the set's classes sit directly under each parent (for the general tie-break)
    under: dict[str, int] = {}
    for ps in candidates.values():
        for p in ps:
            under[p] = under.get(p, 0) + 1
    parents, choices = {}, {}
    for w in wnids:
        ps = candidates[w]
        if len(ps) == 1:
            parents[w] = ps[0]
            continue
        if w in overrides and overrides[w] in ps:
            parents[w], why = overrides[w], "ImageNet's hierarchy (ImageNet-X override table)"
        else:
            parents[w] = min(ps, key=lambda p: (-under[p], p))
            why = "the parent with most classes of the set, then the smaller wnid"
        choices[w] = (parents[w], why)
    return parents, choices


def semantic_split(graph: NounGraph, wnids: list[str], *, seed: int | None = None,
                   overrides: dict[str, str] | None = None) -> SemanticSplit:
    """Split ``wnids`` into ID and OOD halves by WordNet parent (the authors' procedure, or the
    seeded variant)."""
    order = sorted(dict.fromkeys(wnids))
    if len(order) < 2:
        raise SplitError(f"a split needs at least two classes, not {len(order)}")
    parents, choices = choose_parents(graph, order, overrides)
    groups: dict[str, Group] = {}
    for w in order:  # groups ordered by their first class in index order
        p = parents[w]
        if p not in groups:
            node = graph.index_of_wnid(p)
            groups[p] = Group(parent=p, parent_name=graph.label(node) if node is not None else p, children=[])
        groups[p].children.append(w)
    rng = random.Random(seed) if seed is not None else None
    first_more = bool(rng.getrandbits(1)) if rng else False
    id_wnids, ood_wnids = [], []
    for g in groups.values():
        if rng:
            rng.shuffle(g.children)
        n = len(g.children)
        k = n // 2
        if n % 2:
            if not first_more:
                k += 1
            first_more = not first_more
        g.sides = [ID] * k + [OOD] * (n - k)
        id_wnids += g.children[:k]
        ood_wnids += g.children[k:]
    return SemanticSplit(groups=list(groups.values()), id_wnids=id_wnids, ood_wnids=ood_wnids,
                         parent_choices=choices, seed=seed)
