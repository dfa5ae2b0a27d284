import os
import random
from pathlib import Path
from typing import Callable

import numpy as np

from . import Detector, DetectorError, Head, Outputs, Param, register_detector, require_text
from .neglabel import grouped_score

CSP_REF = ("MengyuanChen21/NeurIPS2024-CSP@252d4d53f243 mmcls/models/classifiers/multi_modal.py (pool, mining) and "
           "class_names.py (templates), mmcls/models/ood/clip_ood.py@e939ff5afa46 (grouped score), "
           "custom_config/clip-ViT-B16.py@07219acf3f40 (defaults)")
# The authors' prompts (their class_names.py): ID names and nouns through eight templates, each
# adjective "conjugated" with one superclass-like word drawn at random, then through four templates
NOUN_TEMPLATES = ("a close-up photo of the nice {}.", "a photo with the nice {}.", "a good photo with the nice {}.",
                  "a photo of the nice {}.", "{}", "the {}", "the good {}", "the nice {}")
CONJUGATES = ("{} environment", "{} space", "{} object", "{} scene", "{} place", "{} item", "{} area", "{} view", "{} thing",
              "{} pattern", "{} structure", "{} landscape", "{} vista", "{} creature")
ADJ_TEMPLATES = ("{}", "a nice photo of {}", "a good photo of {}", "a close-up photo of {}")
# WordNet lexicographer files the authors leave out (their config's txt_exclude)
EXCLUDED_FILES = ("noun.person", "noun.quantity", "noun.group", "adj.pert")

_WORDS: dict[str, tuple[list[str], list[str]]] = {}


def lexicographer_words() -> tuple[list[str], list[str]]:
    """(nouns, adjectives) of WordNet 3.0 by lexicographer file, as CSP's word files hold them:
    every lemma (underscores as spaces) of the noun.* and adj.* files but EXCLUDED_FILES, the
    files in name order (adj.* first), each word once (the first file that has it keeps it).
    Needs WordNet under NLTK_DATA."""
    if "words" not in _WORDS:
        from pipelines.classes.wordnet import load_wordnet

        wn = load_wordnet(Path(os.environ.get("NLTK_DATA") or "nltk_data"))
        files: dict[str, list[str]] = {}
        for pos in ("n", "a"):
            for synset in wn.all_synsets(pos):
                files.setdefault(synset.lexname(), []).extend(lemma.replace("_", " ") for lemma in synset.lemma_names())
        seen: set[str] = set()
        nouns: list[str] = []
        adjectives: list[str] = []
        for name in sorted(files):
            if name in EXCLUDED_FILES:
                continue
            for word in files[name]:
                if word not in seen:
                    seen.add(word)
                    (nouns if name.startswith("noun.") else adjectives).append(word)
        _WORDS["words"] = (nouns, adjectives)
    return _WORDS["words"]


def template_mean(encode_raw: Callable[[list[str]], np.ndarray], items: list[str], templates: tuple[str, ...]) -> np.ndarray:
    """Each item's embeddings through ``templates``, averaged before any normalisation (the
    authors average the encoder's raw outputs), then normalised."""
    total = None
    for t in templates:
        e = encode_raw([t.format(x) for x in items])
        total = e if total is None else total + e
    assert total is not None
    mean = total / len(templates)
    return mean / np.linalg.norm(mean, axis=1, keepdims=True)


@register_detector
class CSP(Detector):
    """Conjugated Semantic Pool (Chen, Gao, Xu, "Conjugated semantic pool improves OOD detection
    with pre-trained vision-language models", NeurIPS 2024): NegLabel's grouped score over a larger
    pool of negative labels: WordNet's nouns (persons, quantities and groups left out) and its
    adjectives each conjugated with a superclass-like word ("striped pattern", "icy landscape"),
    every label an average over several prompts; the least ID-like 15% of each kind kept (a
    label whose largest similarity to an ID label is above 0.95 is never kept)."""

    name = "csp"
    label = "CSP (zero-shot CLIP)"
    paper = "Chen, Gao, Xu, NeurIPS 2024"
    reference = CSP_REF
    needs_text = True
    costly = "encodes about 800,000 prompts (WordNet's words x its templates) once per model: hours on a CPU, minutes on a GPU"
    parameters = (
        Param("temperature", float, 0.01, 1e-4, 100.0, help="softmax temperature on cosine similarities",
              source="CSP's config (t = 1 on 100 x cosine)"),
        Param("fraction", float, 0.15, 0.0001, 1.0, help="share of each kind of word kept as negative labels", source="CSP's config"),
        Param("percentile", float, 0.95, 0.0, 1.0, help="quantile of a label's similarities to the ID labels that ranks it",
              source="CSP's config"),
        Param("max_similarity", float, 0.95, 0.0, 1.0, help="a label this similar to any ID label is never a negative",
              source="CSP's code"),
        Param("groups", int, 100, 1, 10000, help="groups of negative labels the score is averaged over", source="CSP's config"),
        Param("seed", int, 0, 0, 2**32 - 1, help="seed of the random grouping (numpy; the authors': torch CUDA, seed 0)",
              source="ours"),
        Param("conjugate_seed", int, 0, 0, 2**32 - 1, help="seed of Python's random.choice of each adjective's conjugate",
              source="CSP's config (seed 0)"),
    )

    def fit(self, fit: Outputs, head: Head | None = None) -> Detector:
        text = require_text(self.text, "CSP")
        encode_raw = getattr(text.encode, "raw", None)
        if encode_raw is None:
            raise DetectorError("CSP needs the model's text encoder (raw embeddings) to embed its prompts")
        try:
            nouns, adjectives = lexicographer_words()
        except RuntimeError as exc:  # WordNet not provisioned
            raise DetectorError(f"CSP: {str(exc).splitlines()[0]}") from None
        self.pos = template_mean(encode_raw, list(text.names), NOUN_TEMPLATES)
        rng = random.Random(self.params["conjugate_seed"])  # the same draws as the authors' random.seed(seed); random.choice
        conjugated = [rng.choice(CONJUGATES).format(a) for a in adjectives]
        kinds = [template_mean(encode_raw, nouns, NOUN_TEMPLATES), template_mean(encode_raw, conjugated, ADJ_TEMPLATES)]
        kept, counts = [], []
        for cand in kinds:
            q = np.zeros(len(cand))
            for s in range(0, len(cand), 1000):
                sim = cand[s:s + 1000] @ self.pos.T
                q[s:s + 1000] = np.where(sim.max(axis=1) > self.params["max_similarity"], 1.0,
                                         np.quantile(sim, self.params["percentile"], axis=1))
            order = np.argsort(q, kind="stable")[:int(len(cand) * self.params["fraction"])]
            kept.append(cand[order])
            counts.append(len(order))
        self.neg = np.concatenate(kept)
        g = self.params["groups"]
        usable = len(self.neg) - len(self.neg) % g
        if usable < g:
            raise DetectorError(f"CSP: {len(self.neg)} negative labels cannot fill {g} groups; lower --csp-groups")
        self.groups = np.random.default_rng(self.params["seed"]).permutation(usable).reshape(g, -1)
        self.notes.append(f"{len(self.neg):,} negative labels ({counts[0]:,} nouns + {counts[1]:,} conjugated adjectives) mined from "
                          f"WordNet against {len(text.names)} ID labels; {g} groups of {usable // g}; temperature "
                          f"{self.params['temperature']:g} on cosine similarities (CLIP logits / {text.logit_scale:g})")
        return self

    def score(self, data: Outputs) -> np.ndarray:
        return grouped_score(data, self.pos, self.neg, self.groups, self.params["temperature"])
