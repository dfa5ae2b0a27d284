"""How strongly a flag suggests ID contamination: ``flag_strength`` (0..1) and ``flag_level``.

The project's own, documented formula (docs/class_filter.md, "Ranked flags"); no paper defines
one. Three kinds of evidence, each a probability-like number, combined as a noisy-or (any one of
them alone can make a flag strong, and more evidence never lowers the score)::

    R = 1 - prod(1 - w[rule] for every flag rule that fired)        # WordNet rules
    S = semantic similarity to the closest ID class (Lin, 0..1)     # pipelines.classes.semantic
    E = (top1_share + top5_share) / 2                               # images, once extracted

    without images:  strength = 1 - (1 - R) * (1 - a*S)
    with images:     strength = 1 - (1 - R * c(E)) * (1 - a*S) * (1 - E),  c(E) = 0.5 + 0.5*min(1, E/E_REF)

``top1_share`` / ``top5_share`` are the shares of the class's images whose top-1 prediction / any
top-5 prediction is the related ID class or one of its WordNet neighbours (ID classes sharing a
direct hypernym with it, its ID hypernyms and hyponyms). ``c(E)`` lets images that the model never
reads as anything related halve the rules' weight: the lemma rules cannot tell senses apart, the
images can. A flag is ``strong`` at ``STRONG_AT`` or above.

The weights say how often each rule's hits were real overlaps when the rules' hits over
ImageNet-21K were read (same lemma and part/whole: mostly the same or a physically joined object;
head noun and gloss: often, but senses differ; sister of an ID class: ImageNet-OOD's own way of
*choosing* near-OOD candidates, so alone it means "close", not "contaminated"). With ``a = 0.25``
a sister-only flag stays weak on WordNet evidence alone, whatever its similarity; images can
make it strong.
"""
from __future__ import annotations

from typing import Iterable, Sequence

RULE_WEIGHTS: dict[str, float] = {
    "same_lemma": 0.9,
    "part_whole": 0.9,
    "head_noun": 0.7,
    "gloss_mentions_id": 0.6,
    "not_in_wordnet": 0.45,  # nothing known: a curator should look, after the likelier overlaps
    "sister_of_id": 0.3,
    "too_few_images": 0.0,  # says nothing about contamination
}
SEMANTIC_WEIGHT = 0.25
EVIDENCE_REF = 0.2
STRONG_AT = 0.5
STRONG, WEAK = "strong", "weak"


def rule_evidence(rules: Iterable[str]) -> float:
    keep = 1.0
    for slug in dict.fromkeys(rules):
        keep *= 1.0 - RULE_WEIGHTS.get(slug, 0.5)
    return 1.0 - keep


def flag_strength(rules: Iterable[str], similarity: float | None, evidence: float | None = None) -> float:
    """The strength of a flag raised by ``rules`` (the flag rules that fired) on a class with the
    given semantic similarity (None: not in WordNet) and image evidence (None: no images yet)."""
    r = rule_evidence(rules)
    s = SEMANTIC_WEIGHT * min(max(similarity or 0.0, 0.0), 1.0)
    if evidence is None:
        return round(1.0 - (1.0 - r) * (1.0 - s), 4)
    e = min(max(evidence, 0.0), 1.0)
    r_eff = r * (0.5 + 0.5 * min(1.0, e / EVIDENCE_REF))
    return round(1.0 - (1.0 - r_eff) * (1.0 - s) * (1.0 - e), 4)


def flag_level(strength: float) -> str:
    return STRONG if strength >= STRONG_AT else WEAK


def image_evidence(topk_lists: Sequence[Sequence[str]], related: set[str]) -> tuple[float, float, float] | None:
    """(top1_share, top5_share, E) over a class's images: ``topk_lists`` holds each image's
    predicted wnids, best first; ``related`` the ID wnids that count. None without images."""
    n = len(topk_lists)
    if n == 0 or not related:
        return None
    top1 = sum(1 for wnids in topk_lists if wnids and wnids[0] in related) / n
    top5 = sum(1 for wnids in topk_lists if any(w in related for w in wnids[:5])) / n
    return round(top1, 4), round(top5, 4), round((top1 + top5) / 2, 4)
