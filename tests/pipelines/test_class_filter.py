"""The WordNet class rules on the real WordNet 3.0, with cases from the literature (NINCO,
ImageNet-OOD, C-OOD) and classes that must be kept. No database: plain pipeline code."""
from __future__ import annotations

import json

import pytest
from django.conf import settings

from pipelines.classes.filter import PRESETS, RULES, SEVERITIES, Candidate, Override, PolicyError, load_policy, run_class_filter
from pipelines.classes.filter.policy import policy_from_mapping
from pipelines.classes.imagenet import named_list
from pipelines.classes.wordnet import WordNetUnavailable
from pipelines.classes.wordnet_graph import NounGraph, graph_cache_path, load_noun_graph

ID_1K = list(named_list("imagenet-1k"))


@pytest.fixture(scope="module")
def graph():
    return load_noun_graph(settings.NLTK_DATA)


def judge(graph, wnid, policy=None, *, n_images=None, overrides=None, key=None):
    pol = policy if hasattr(policy, "severities") else load_policy(policy)
    result = run_class_filter(graph, [Candidate(key=key or wnid, wnid=wnid, n_images=n_images)], ID_1K, pol, overrides=overrides)
    return result.decisions[0]


def fired(decision) -> dict[str, dict]:
    return {row["rule"]: row for row in decision.fired}


def wnid_of(graph, synset_name):
    node = graph.index_of_name(synset_name)
    assert node is not None, synset_name
    return graph.wnid(node)


# -- one test per rule, with the literature's cases -------------------------------------------------


def test_id_class_removes_the_id_synset_itself(graph):
    d = judge(graph, "n01514859")  # hen, ImageNet-1K class 8
    assert (d.decision, d.rule, d.related_wnid) == ("remove", "id_class", "n01514859")


def test_hypernym_of_id_frozen_dessert_above_ice_cream(graph):
    d = judge(graph, "n07611358")  # frozen dessert
    assert (d.decision, d.rule, d.related_wnid) == ("remove", "hypernym_of_id", "n07614500")  # ice cream
    assert "[ice_cream.n.01 -> frozen_dessert.n.01]" in d.detail


def test_hypernym_of_id_over_every_path_reaches_person(graph):
    # person is above "ballplayer" and "scuba diver" (ID classes) through different paths
    d = judge(graph, "n00007846", "cood")  # cood: no organism rule, so the hypernym rule decides
    assert d.rule == "hypernym_of_id" and d.decision == "remove"


def test_hyponym_of_id_rainbow_lorikeet_below_lorikeet(graph):
    d = judge(graph, "n01821076", "cood")  # organism off: the hyponym rule alone must catch it
    assert (d.decision, d.rule, d.related_wnid) == ("remove", "hyponym_of_id", "n01820546")
    assert "rainbow_lorikeet.n.01 -> lorikeet.n.01" in d.detail


def test_hyponym_of_id_follows_instance_hypernyms(graph):
    d = judge(graph, "n09177883")  # Vesuvius is an *instance* of volcano (ID n09472597)
    assert (d.rule, d.related_wnid) == ("hyponym_of_id", "n09472597")
    assert "vesuvius.n.01 -(instance of)-> volcano.n.02" in d.detail


def test_organism_removes_everything_under_organism_with_configurable_exceptions(graph):
    party_man = wnid_of(graph, "party_man.n.01")  # a politician: nothing in ImageNet-1K
    d = judge(graph, party_man)
    assert d.rule == "organism" and d.decision == "remove"
    assert "person.n.01 -> organism.n.01" in d.detail
    keep_people = policy_from_mapping({"rules": {"organism": {"exceptions": ["person.n.01"]}}}, "test", "people")
    assert "organism" not in fired(judge(graph, party_man, keep_people))
    # a plant is still removed under that policy
    assert judge(graph, "n12708293", keep_people).rule == "organism"  # orange tree


def test_organism_roots_are_configurable_and_checked(graph):
    animals_only = policy_from_mapping({"rules": {"organism": {"roots": ["animal.n.01"]}}}, "test", "animals")
    assert "organism" not in fired(judge(graph, "n12708293", animals_only))  # orange tree is a plant
    typo = policy_from_mapping({"rules": {"organism": {"roots": ["organsim.n.01"]}}}, "test", "typo")
    with pytest.raises(ValueError, match="organism.roots: 'organsim.n.01' is not a WordNet 3.0 noun synset"):
        judge(graph, "n09436708", typo)


def test_same_lemma_hen_and_orange_tree(graph):
    # C-OOD: "hen" n01792640 in 21K is practically the ID class "hen" n01514859
    d = judge(graph, "n01792640", "cood")
    assert (d.decision, d.rule, d.related_wnid) == ("remove", "same_lemma", "n01514859")
    assert "shares the lemma 'hen'" in d.detail
    d = judge(graph, "n12708293", "cood")  # orange tree, lemma "orange" of the fruit
    assert (d.rule, d.related_wnid) == ("same_lemma", "n07747607")
    # the default preset (ImageNet-OOD) flags it rather than removing it
    assert fired(judge(graph, "n01792640"))["same_lemma"]["severity"] == "flag"


def test_part_whole_organ_pipe_is_part_of_the_pipe_organ(graph):
    d = judge(graph, "n03854815", "cood")  # organ pipe
    assert (d.decision, d.rule, d.related_wnid) == ("remove", "part_whole", "n03854065")  # pipe organ
    assert "is a part of organ.n.05" in d.detail


def test_part_whole_reaches_parts_of_kinds_of_id_objects(graph):
    d = fired(judge(graph, wnid_of(graph, "lamp_house.n.01")))["part_whole"]
    assert d["related_wnid"] == "n04009552"  # projector
    assert "movie_projector.n.01 -> projector.n.02" in d["text"]


def test_head_noun_king_vulture(graph):
    hit = fired(judge(graph, "n01620735"))["head_noun"]  # king vulture
    assert hit["related_wnid"] == "n01616318" and "head noun 'vulture'" in hit["text"]


def test_head_noun_flags_a_compound_that_wordnet_files_elsewhere(graph):
    d = judge(graph, wnid_of(graph, "horsehair_wig.n.01"))
    assert "head_noun" in fired(d) and fired(d)["head_noun"]["related_wnid"] == "n04584207"  # wig


def test_gloss_mentions_id_pickle_cucumbers(graph):
    d = judge(graph, "n07824988")  # pickle: "vegetables (especially cucumbers) preserved in brine or vinegar"
    assert (d.decision, d.rule, d.related_wnid) == ("flag", "gloss_mentions_id", "n07718472")
    assert "gloss mentions 'cucumber'" in d.detail


def test_gloss_mentions_id_hayfield_and_hay(graph):
    # NINCO's example of categorical contamination: PLACES "hayfield" vs ID "hay"
    d = judge(graph, "n08570634")
    assert (d.decision, d.rule, d.related_wnid) == ("flag", "gloss_mentions_id", "n07802026")


def test_gloss_rule_ignores_polysemous_lemmas_and_policies_can_restore_them(graph):
    flying_fox = wnid_of(graph, "flying_fox.n.01")  # gloss: "...fox-like head" (ID 'head' is a promontory)
    assert "gloss_mentions_id" not in fired(judge(graph, flying_fox))
    everything = policy_from_mapping({"rules": {"gloss_mentions_id": {"ignore_lemmas": []}}}, "test", "all")
    assert "'head'" in fired(judge(graph, flying_fox, everything))["gloss_mentions_id"]["text"]


def test_sister_of_id_viola_and_violin(graph):
    d = judge(graph, "n04536335")  # viola, the instrument
    assert d.decision == "flag"
    hit = fired(d)["sister_of_id"]
    assert "bowed_stringed_instrument.n.01" in hit["text"] and "violin.n.01" in hit["text"]


def test_too_few_images_for_sources(graph):
    d = judge(graph, "n09436708", "cood", n_images=150)
    assert (d.decision, d.rule) == ("remove", "too_few_images") and "150 usable image(s)" in d.detail
    assert judge(graph, "n09436708", "cood", n_images=200).decision == "keep"
    assert "too_few_images" not in fired(judge(graph, "n09436708", "cood"))  # named lists: no counts


def test_unknown_wnids_and_unmapped_folders_are_flagged_not_dropped(graph):
    d = judge(graph, "n99999999")
    assert (d.decision, d.rule) == ("flag", "not_in_wordnet") and "not a WordNet 3.0 noun" in d.detail
    d = judge(graph, "", key="my scraped folder")
    assert d.rule == "not_in_wordnet" and "'my scraped folder' is not mapped to a WordNet synset (no wnid given" in d.detail


@pytest.mark.parametrize("wnid,label", [
    ("n09436708", "sky"),  # incidental contamination only (planes): review's job, not the class filter's
    ("n03145719", "cue ball"),  # C-OOD's man-made look-alike, kept unless a policy says otherwise
    ("n08570634", "hayfield"),  # flagged (see above), never removed by the default preset
])
def test_classes_that_must_not_be_removed(graph, wnid, label):
    d = judge(graph, wnid)
    assert d.decision in ("keep", "flag"), d.detail
    assert d.name.lower().startswith(label.split()[0])


def test_strict_preset_removes_what_others_flag(graph):
    d = judge(graph, "n07824988", "strict")
    assert (d.decision, d.rule) == ("remove", "gloss_mentions_id")
    assert judge(graph, "n04536335", "strict").decision == "remove"  # viola


def test_overrides_win_over_every_rule_and_keep_the_explanation(graph):
    d = judge(graph, "n07611358", overrides={"n07611358": Override("allow", "we want desserts", "cur")})
    assert (d.decision, d.rule) == ("keep", "override_allow")
    assert d.detail.startswith("override_allow: pinned by cur (we want desserts)")
    assert "hypernym_of_id" in d.detail and d.rule_decision == "remove"
    d = judge(graph, "n09436708", overrides={"n09436708": Override("deny")})
    assert (d.decision, d.rule) == ("remove", "override_deny")


# -- the registry and policies ------------------------------------------------------------------------


@pytest.mark.parametrize("slug", list(RULES))
def test_every_rule_is_registered_with_severity_and_explanation_and_in_every_preset(slug):
    spec = RULES[slug]
    assert spec.default_severity in SEVERITIES and len(spec.explanation) > 30
    for preset in PRESETS:
        assert load_policy(preset).severities[slug] in SEVERITIES


def test_policy_files_yaml_and_json(tmp_path):
    y = tmp_path / "study.yaml"
    y.write_text("extends: cood\nrules:\n  sister_of_id: flag\n  too_few_images: {min_images: 50}\n  head_noun: off\n")
    pol = load_policy(str(y))
    assert pol.name == "study" and pol.severities["sister_of_id"] == "flag" and pol.severities["head_noun"] == "off"
    assert pol.params["too_few_images"]["min_images"] == 50 and pol.severities["too_few_images"] == "remove"
    j = tmp_path / "p.json"
    j.write_text(json.dumps({"name": "j", "rules": {"organism": {"exceptions": ["person.n.01"]}}}))
    assert load_policy(str(j)).params["organism"]["exceptions"] == ["person.n.01"]
    assert load_policy(str(j)).digest != load_policy("imagenet-ood").digest
    assert load_policy("imagenet-ood").digest == load_policy(None).digest


@pytest.mark.parametrize("text,message", [
    ("rules:\n  sistre_of_id: flag\n", "unknown rule 'sistre_of_id'"),
    ("rules:\n  organism: delete\n", "rules.organism.severity is 'delete'"),
    ("rules:\n  too_few_images: {min_imgs: 3}\n", "rules.too_few_images has no setting 'min_imgs'"),
    ("rules:\n  too_few_images: {min_images: many}\n", "must be a whole number"),
    ("extends: ninco\n", "extends 'ninco', which is not a preset"),
    ("rules: [1, 2\n", "not valid YAML"),
    ("colour: blue\n", "unknown key(s) colour"),
])
def test_bad_policy_files_name_the_file_and_the_problem(tmp_path, text, message):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(PolicyError) as err:
        load_policy(str(path))
    assert str(path) in str(err.value) and message in str(err.value)


def test_unknown_preset_lists_the_presets():
    with pytest.raises(PolicyError, match="imagenet-ood, cood, strict"):
        load_policy("nonesuch")


# -- whole lists ----------------------------------------------------------------------------------------


def test_imagenet_21k_against_1k_is_complete_and_deterministic(graph):
    cands = [Candidate(key=w, wnid=w) for w in named_list("imagenet-21k")]
    a = run_class_filter(graph, cands, ID_1K, load_policy("imagenet-ood"))
    b = run_class_filter(graph, cands, ID_1K, load_policy("imagenet-ood"))
    assert len(a.decisions) == 21843
    assert [(d.decision, d.rule, d.detail) for d in a.decisions] == [(d.decision, d.rule, d.detail) for d in b.decisions]
    counts = a.counts()
    # 999 of the 1000 ImageNet-1K classes are in the fall11 release of ImageNet-21K
    assert counts["fired"]["id_class"] == 999
    assert sum(counts["decision"].values()) == 21843


def test_imagenet_ood_construction_on_21k_p_is_close_to_the_papers_count(graph):
    """ImageNet-OOD (sec. 3.2): 5,074 of ImageNet-21K-P's classes remain after removing the ID
    classes, their hypernyms and hyponyms, and organism's hyponyms."""
    off = ("same_lemma", "part_whole", "head_noun", "gloss_mentions_id", "sister_of_id")
    only_these = policy_from_mapping({"rules": {r: "off" for r in off}}, "test", "four-rules")
    cands = [Candidate(key=w, wnid=w) for w in named_list("imagenet-21k-p")]
    kept = sum(d.decision == "keep" for d in run_class_filter(graph, cands, ID_1K, only_these).decisions)
    assert abs(kept - 5074) / 5074 < 0.05, kept


# -- the compact graph -------------------------------------------------------------------------------------


def test_graph_matches_nltk_for_sample_synsets(graph, wn):
    for name in ("dog.n.01", "ice_cream.n.01", "organ_pipe.n.01", "vesuvius.n.01", "hen.n.02"):
        syn = wn.synset(name)
        node = graph.index_of_wnid(f"n{syn.offset():08d}")
        assert graph.names[node] == name and list(graph.lemmas[node]) == syn.lemma_names() and graph.glosses[node] == syn.definition()
        assert sorted(graph.names[p] for p in graph.parents(node)) == sorted(s.name() for s in syn.hypernyms() + syn.instance_hypernyms())
        assert sorted(graph.names[p] for p in graph.related("part_holonym", node)) == sorted(s.name() for s in syn.part_holonyms())
    assert len(graph) == 82115


def test_missing_wordnet_is_an_error_with_the_fix(tmp_path):
    with pytest.raises(WordNetUnavailable, match="setup_wordnet"):
        load_noun_graph(tmp_path / "empty")


@pytest.mark.slow
def test_a_corrupt_graph_cache_is_rebuilt_from_wordnet(graph, tmp_path):
    import shutil

    from pipelines.classes import wordnet_graph
    from pipelines.classes.wordnet import corpus_dir

    data = tmp_path / "nltk_data"
    shutil.copytree(corpus_dir(settings.NLTK_DATA), corpus_dir(data))
    cache = graph_cache_path(data, graph.source_sha1)
    graph.save(cache)
    assert NounGraph.load(cache).names == graph.names
    cache.write_bytes(b"not an npz")
    wordnet_graph._GRAPHS.pop(graph.source_sha1, None)
    try:
        rebuilt = load_noun_graph(data, log_to=lambda line: None)
    finally:
        wordnet_graph._GRAPHS[graph.source_sha1] = graph
    assert rebuilt.names == graph.names and rebuilt.edges == graph.edges
    assert NounGraph.load(cache).glosses == graph.glosses
