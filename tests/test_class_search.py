"""The one ranking rule of class search (pipelines/classes/search.py, issue 31): exact name, then
exact lemma, then prefixes, then any part of a name or lemma, then the gloss, then the wnid; ties
in the order given. The expected lists are written out here from that rule, on the real ImageNet
class list (timm's lemmas and definitions) and the real WordNet nouns."""
from __future__ import annotations

import pytest
from django.conf import settings

from pipelines.classes.imagenet import imagenet_lemmas, named_list, timm_info_dir
from pipelines.classes.search import Ambiguous, ClassIndex, SearchEntry, fold, rank, resolve_one, tier_of


@pytest.fixture(scope="module")
def imagenet():
    """The 1,000 ImageNet-1K classes as the review screens list them: the first lemma is the name."""
    lemmas = imagenet_lemmas()
    glosses = dict(line.split("\t", 1) for line in (timm_info_dir() / "imagenet_synset_to_definition.txt")
                   .read_text(encoding="utf-8").splitlines() if "\t" in line)
    entries = []
    for w in named_list("imagenet-1k"):
        names = tuple(x.strip() for x in lemmas[w].split(","))
        entries.append(SearchEntry(names[0], names, glosses.get(w, ""), w, w))
    return ClassIndex(entries)


@pytest.fixture(scope="module")
def nouns():
    from pipelines.classes.wordnet_graph import load_noun_graph

    g = load_noun_graph(settings.NLTK_DATA)
    return ClassIndex(SearchEntry(g.label(i), tuple(x.replace("_", " ") for x in g.lemmas[i]), g.glosses[i], g.wnid(i), g.wnid(i))
                      for i in range(len(g.names)))


def _wnids(hits):
    return [h.entry.wnid for h in hits]


def test_espresso_lists_espresso_before_espresso_maker(imagenet):
    hits = imagenet.search("espresso")
    assert _wnids(hits)[:2] == ["n07920052", "n03297495"]  # espresso (exact name), espresso maker (prefix)
    assert [h.tier for h in hits[:2]] == [0, 2]
    assert _wnids(imagenet.search("Espresso "))[0] == "n07920052"  # case and spaces do not matter


def test_stripe_lists_the_synsets_named_stripe_before_band(nouns):
    hits = nouns.search("stripe", limit=6)
    # WordNet: stripe.n.02 (n07269758), stripe.n.04 (n05845749), stripe.n.05 (n04683136) are named stripe;
    # band.n.04 (n02784732, "band, banding, stripe") and chevron.n.01 have it as a later lemma
    named = {"n04683136", "n05845749", "n07269758"}
    assert set(_wnids(hits)[:3]) == named and all(h.tier == 0 for h in hits[:3])
    assert _wnids(hits)[3:5] == ["n02784732", "n07269552"] and [h.tier for h in hits[3:5]] == [1, 1]
    assert _wnids(hits)[:3] == sorted(named, key=lambda w: [h.entry.wnid for h in nouns.search("stripe", limit=None)].index(w))


def test_crossword_finds_crossword_puzzle_by_its_second_lemma(imagenet, nouns):
    assert _wnids(imagenet.search("crossword")) == ["n06785654"]
    assert imagenet.search("crossword")[0].tier == 1
    assert _wnids(nouns.search("crossword"))[0] == "n06785654"


def test_each_tier_in_turn_on_a_small_list():
    e = [
        SearchEntry("gloss hit", ("gloss hit",), "a cat with stripes", "n00000001"),  # 6
        SearchEntry("bobcat", ("bobcat", "Lynx rufus"), "", "n00000002"),  # 5: inside a name
        SearchEntry("tabby", ("tabby", "tabby cat"), "", "n00000003"),  # 4: a word of a lemma
        SearchEntry("Persian cat", ("Persian cat",), "", "n00000004"),  # 3: a later word of the name
        SearchEntry("catamaran", ("catamaran",), "", "n00000005"),  # 2: the name starts with it
        SearchEntry("true cat", ("true cat", "cat"), "", "n00000006"),  # 1: a lemma is it
        SearchEntry("cat", ("cat", "true cat"), "", "n00000007"),  # 0: the name is it
        SearchEntry("dog", ("dog",), "", "n00000008"),  # no match
        SearchEntry("wnid only", (), "", "n0000cat9"),  # 7 (a made-up id holding the text)
    ]
    hits = rank("cat", e)
    assert [h.entry.name for h in hits] == ["cat", "true cat", "catamaran", "Persian cat", "tabby", "bobcat", "gloss hit", "wnid only"]
    assert [h.tier for h in hits] == [0, 1, 2, 3, 4, 5, 6, 7]
    assert tier_of("dog", e[7]) == 0 and tier_of("cat", e[7]) is None and tier_of("   ", e[0]) is None


def test_ties_keep_the_order_given_and_limit_cuts_the_tail():
    e = [SearchEntry(f"red {c}", (), "", f"n0000000{i}") for i, c in enumerate("zyxwv")]
    assert [h.entry.name for h in rank("red", e)] == ["red z", "red y", "red x", "red w", "red v"]
    assert [h.entry.name for h in rank("red", list(reversed(e)))] == ["red v", "red w", "red x", "red y", "red z"]
    assert [h.entry.name for h in rank("red", e, limit=2)] == ["red z", "red y"]
    assert [h.order for h in rank("red", e)] == [0, 1, 2, 3, 4]


def test_spaces_underscores_and_hyphens_are_one_separator(imagenet):
    assert fold("  Pug-Dog ") == "pug dog" and fold("hot__dog") == "hot dog" and fold("a - b") == "a b"
    assert _wnids(imagenet.search("pug_dog"))[0] == "n02110958"  # pug, lemma "pug-dog"
    assert imagenet.search("pug dog")[0].tier == 1
    assert _wnids(imagenet.search("golden retr"))[0] == "n02099601"
    assert _wnids(imagenet.search("retriever"))[:5] == ["n02099267", "n02099429", "n02099601", "n02099712", "n02099849"]


def test_a_wnid_or_part_of_one_finds_its_class_last(imagenet):
    assert _wnids(imagenet.search("n02123045")) == ["n02123045"]
    assert _wnids(imagenet.search("2123045")) == ["n02123045"] and imagenet.search("2123045")[0].tier == 7


def test_gloss_matches_come_after_every_name_match(imagenet):
    hits = imagenet.search("stripe", limit=None)
    assert hits and all(h.tier == 6 for h in hits)  # no ImageNet-1K class is named stripe
    assert "n02391049" in _wnids(hits)  # zebra: "...black-and-white striped African equines"
    hits = imagenet.search("coffee", limit=None)
    tiers = [h.tier for h in hits]
    # coffee mug, coffeepot (names starting with it), then glosses (espresso: "strong black coffee...")
    assert tiers == [2, 2, 6, 6] and _wnids(hits)[:2] == ["n03063599", "n03063689"] and "n07920052" in _wnids(hits)[2:]


def test_resolving_a_typed_name_for_a_filter(imagenet):
    assert [e.wnid for e in resolve_one("crossword", imagenet, what="Top-1 class")] == ["n06785654"]
    assert [e.wnid for e in resolve_one("golden retr", imagenet, what="Top-1 class")] == ["n02099601"]  # the only class it finds
    with pytest.raises(Ambiguous, match=r"Top-1 class 'crane' matches 2 classes \(crane \(n02012849\), crane \(n03126707\)\)"):
        resolve_one("crane", imagenet, what="Top-1 class")  # the bird and the machine
    with pytest.raises(Ambiguous, match="Top-1 class 'dog' matches .* classes"):
        resolve_one("dog", imagenet, what="Top-1 class")
    with pytest.raises(Ambiguous, match="no class matches it"):
        resolve_one("qqqzzz", imagenet, what="Top-1 class")
    # one class in two sources (the same wnid) is one class
    two = ClassIndex([SearchEntry("crossword puzzle", ("crossword puzzle", "crossword"), "", "n06785654", 1),
                      SearchEntry("crossword puzzle", ("crossword puzzle", "crossword"), "", "n06785654", 2),
                      SearchEntry("crossword clue", (), "", "", 3)])
    assert [e.ref for e in resolve_one("crossword", two, what="Class")] == [1, 2]


def test_the_short_cuts_give_what_the_full_ranking_gives(nouns, imagenet):
    # not a timing: the index narrows a query to the entries whose text holds it, and answers from
    # tiers 0-2 by look-up where they fill the list; both must give the full ranking's first rows
    assert len(nouns) == 82115
    assert len(nouns._candidates("espresso")) < 20
    for q in ("a", "ca", "cat", "dog", "stripe", "band", "sea", "crane", "n0", "x", "ab", "retr", "pug dog", "the", "zz"):
        for index in (nouns, imagenet):
            full = [(h.entry.wnid, h.tier) for h in index.search(q, limit=None)]
            for limit in (1, 5, 12):
                assert [(h.entry.wnid, h.tier) for h in index.search(q, limit=limit)] == full[:limit], (q, limit)
    # an entry whose lemma is the query and whose name starts with it is listed once, as tier 1
    e = [SearchEntry("stripe pattern", ("stripe pattern", "stripe"), "", "n00000001"), SearchEntry("stripes", (), "", "n00000002")]
    assert [(h.entry.wnid, h.tier) for h in ClassIndex(e).search("stripe", limit=2)] == [("n00000001", 1), ("n00000002", 2)]
