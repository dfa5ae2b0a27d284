"""The zero-shot CLIP detectors against their authors' code (issue 46), to 1e-9 relative on the
same embeddings. Each reference below is written here from the named repository and commit (not
imported from the toolkit): MCM's and the energy scores from deeplearning-wisc/MCM
utils/detection_util.py@006fb40c23b6 (get_ood_scores_clip), the max-logit score from the same file
at 640657ea67cb (the commit that adds its branch), GL-MCM from AtsuMiyai/GL-MCM
utils/detection_util.py@796b9ba7d824, NegLabel's mining from XueJiang16/NegLabel
mmcls/models/classifiers/multi_modal.py@979e142e8054 and its grouped score from
mmcls/models/ood/clip_ood.py@5ab9a42151cd with the defaults of custom_config/clip.py@6884a885e592, CSP's pool
and mining from MengyuanChen21/NeurIPS2024-CSP mmcls/models/classifiers/multi_modal.py@252d4d53f243 (its templates
from class_names.py there) and its score from mmcls/models/ood/clip_ood.py@e939ff5afa46.

Text embeddings come from a small open_clip model with RANDOM WEIGHTS built inside the tests
(tests/vlm_model.py): formula fidelity only; the images' embeddings are random arrays."""
from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from pipelines.evaluation.detectors import DETECTORS, DetectorError, Outputs, TextHead, default_detectors, detector_names, get_detector
from pipelines.evaluation.metrics import ood_metrics
from pipelines.evaluation.run import EvalInputs, evaluate_model
from pipelines.evaluation.vlm import TextEncoder, zero_shot_head
from pipelines.features.classifiers import imagenet_1k_classes
from tests.vlm_model import tiny_clip_model

WNIDS = imagenet_1k_classes()[0]
TEXT_DETECTORS = ("clip_mcm", "gl_mcm", "clip_energy", "clip_maxlogit", "neglabel", "csp")
CHECKED_HERE = set(TEXT_DETECTORS)  # against their authors' code (tests/pipelines/test_detectors_reference.py counts them)
NOUNS = ["apple", "tree", "river", "violin", "cloud", "mountain", "teacup", "bicycle", "carpet", "lantern", "anchor", "pebble",
         "comet", "harbor", "meadow", "kettle", "saddle", "glacier", "orchid", "quarry", "tundra", "velvet", "walrus", "yacht",
         "zeppelin", "bagpipe", "canyon", "dune", "easel", "fjord", "gazebo", "hammock", "igloo", "jigsaw", "kayak", "lagoon",
         "marble", "nebula", "oasis", "parasol", "quill", "reef", "sundial", "trellis", "urn", "vineyard", "windmill", "xylophone",
         "yarn", "zither", "bamboo", "cactus", "dynamo", "ember", "falcon", "geyser", "hive", "iris", "jade", "kiln"]
ADJECTIVES = ["striped", "bumpy", "glossy", "woven", "dotted", "cracked", "fuzzy", "rusty", "shiny", "wrinkled", "golden", "pale"]


def rel(a, b):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return float(np.max(np.abs(a - b) / np.maximum(np.abs(b), 1e-300)))


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    cm = tiny_clip_model(tmp_path_factory.mktemp("tiny"))
    encoder = TextEncoder(cm, tmp_path_factory.mktemp("text"))
    text = zero_shot_head(cm, [WNIDS[i] for i in (0, 1, 7, 251, 257, 409, 530, 948)], template="mcm", encoder=encoder)
    rng = np.random.default_rng(3)
    d = cm.feature_dim
    sets = {name: Outputs(features=rng.normal(size=(n, d)), logits=np.zeros((n, 0)), local=rng.normal(size=(n, 9, d)).astype(np.float16))
            for name, n in (("id", 40), ("ood", 30))}
    return cm, text, sets


def _unit(x: np.ndarray) -> torch.Tensor:
    t = torch.from_numpy(np.asarray(x, dtype=np.float64))
    return t / t.norm(dim=-1, keepdim=True)


def _fit(name, text, params=None):
    det = get_detector(name, **(params or {}))
    det.text = text
    return det.fit(Outputs(features=np.zeros((1, text.embeddings.shape[1])), logits=np.zeros((1, 0))))


def test_mcm_energy_and_max_logit_match_mcm_code(world):
    _, text, sets = world
    t_emb = torch.from_numpy(text.embeddings)
    for data in sets.values():
        output = _unit(data.features) @ t_emb.T  # image_features @ text_features.T on unit vectors
        for temperature in (1.0, 0.01):
            mcm_ref = F.softmax(output / temperature, dim=1).max(dim=1).values.numpy()  # -(-max smax)
            assert rel(_fit("clip_mcm", text, {"temperature": temperature}).score(data), mcm_ref) <= 1e-9
        energy_ref = (0.01 * torch.logsumexp(output / 0.01, dim=1)).numpy()  # -(-T logsumexp(output / T)), T = 0.01 (OOD-X)
        assert rel(_fit("clip_energy", text).score(data), energy_ref) <= 1e-9
        maxlogit_ref = output.max(dim=1).values.numpy()  # 'max-logit': the raw similarities, no softmax
        assert rel(_fit("clip_maxlogit", text).score(data), maxlogit_ref) <= 1e-9
    assert DETECTORS["clip_mcm"].defaults() == {"temperature": 1.0} and DETECTORS["clip_energy"].defaults() == {"temperature": 0.01}


def test_gl_mcm_matches_its_code(world):
    _, text, sets = world
    t_emb = torch.from_numpy(text.embeddings)
    for data in sets.values():
        glob = _unit(data.features) @ t_emb.T
        n, p, d = data.local.shape
        local = _unit(data.local.astype(np.float64)).reshape(n, 3, 3, d) @ t_emb.T  # batch, grid, grid, class
        for temperature, lam in ((1.0, 1.0), (0.5, 0.25)):
            smax_global = F.softmax(glob / temperature, dim=1).numpy()
            smax_local = F.softmax(local / temperature, dim=-1).numpy()
            ref = np.max(smax_global, axis=1) + lam * np.max(smax_local, axis=(1, 2, 3))
            det = _fit("gl_mcm", text, {"temperature": temperature, "lambda_local": lam})
            assert rel(det.score(data), ref) <= 1e-9
    with pytest.raises(DetectorError, match="local"):
        _fit("gl_mcm", text).score(Outputs(features=sets["id"].features, logits=np.zeros((40, 0))))


def full_context_encoder(cm):
    """Prompts -> unit embeddings through open_clip's own encode_text (77 tokens), float64: the
    text embeddings the detector and the reference both get here."""
    def encode(texts):
        with torch.no_grad():
            e = cm.model.encode_text(cm.tokenizer(list(texts))).double()
        return (e / e.norm(dim=-1, keepdim=True)).numpy()
    return encode


def _neglabel_reference(cm, names, images, *, nouns, adjectives, seed, groups=100, fraction=0.15, pct=0.95, t=1.0):
    """NegLabel's scores as its code computes them, from the same model: positive and negative
    prompts encoded and normalised, each candidate's 95% quantile of similarity to the positives
    (torch.quantile, in blocks of 1000), the lowest 15% of the nouns and of the adjectives kept,
    the remainder of a division into groups dropped, the columns permuted (the authors draw the
    permutation with torch's CUDA generator; the same permutation as the detector's numpy draw is
    given here), softmax over [positives, one group] of 100 x cosine / t, positives' share,
    averaged over the groups."""
    def encode(texts):
        return torch.from_numpy(full_context_encoder(cm)(texts))

    pos_t = encode([f"the nice {c}" for c in names])
    neg_t = torch.cat([encode([f"the nice {w}" for w in nouns]), encode([f"This is a {w} photo" for w in adjectives])])
    sims = torch.cat([torch.quantile(neg_t[i:i + 1000] @ pos_t.T, q=pct, dim=-1) for i in range(0, len(neg_t), 1000)])
    n_noun = len(nouns)
    ind_noun, ind_adj = torch.argsort(sims[:n_noun]), torch.argsort(sims[n_noun:])
    neg_t = torch.cat([neg_t[:n_noun][ind_noun[:int(len(ind_noun) * fraction)]], neg_t[n_noun:][ind_adj[:int(len(ind_adj) * fraction)]]])
    img = _unit(images)
    pos, neg = 100.0 * img @ pos_t.T, 100.0 * img @ neg_t.T
    drop = neg.shape[1] % groups
    if drop > 0:
        neg = neg[:, :-drop]
    idx = torch.from_numpy(np.random.default_rng(seed).permutation(neg.shape[1]))
    negs = neg.T[idx].T.reshape(pos.shape[0], groups, -1)
    scores = [F.softmax(torch.cat([pos, negs[:, i, :]], dim=-1) / t, dim=-1)[:, :pos.shape[1]].sum(dim=-1) for i in range(groups)]
    return torch.stack(scores, dim=-1).mean(dim=-1).numpy()


def test_neglabel_matches_its_code(world, monkeypatch):
    cm, text, sets = world
    corpus = {"noun": NOUNS * 1 + [f"{w} stone" for w in NOUNS] + [f"old {w}" for w in NOUNS], "adj": ADJECTIVES * 1}
    monkeypatch.setattr("pipelines.evaluation.detectors.neglabel.wordnet_corpus", lambda kind: corpus[kind])
    from dataclasses import replace

    text = replace(text, encode=full_context_encoder(cm))  # the same text embeddings as the reference's
    for params in ({"groups": 5, "seed": 0}, {"groups": 3, "seed": 11, "fraction": 0.3, "percentile": 0.5}):
        det = _fit("neglabel", text, params)
        assert any("negative labels" in n and "temperature 0.01" in n for n in det.notes)
        for data in sets.values():
            ref = _neglabel_reference(cm, text.names, data.features, nouns=corpus["noun"], adjectives=corpus["adj"],
                                      seed=params["seed"], groups=params["groups"], fraction=params.get("fraction", 0.15),
                                      pct=params.get("percentile", 0.95))
            assert rel(det.score(data), ref) <= 1e-9
    assert {k: v for k, v in DETECTORS["neglabel"].defaults().items() if k != "seed"} == {
        "temperature": 0.01, "fraction": 0.15, "percentile": 0.95, "groups": 100, "corpus": "nouns+adjectives", "words": "wordnet"}
    with pytest.raises(DetectorError, match="cannot fill 100 groups"):
        _fit("neglabel", text)


def test_text_detectors_declare_themselves_and_skip_classifiers(world):
    _, text, sets = world
    for name in TEXT_DETECTORS:
        cls = DETECTORS[name]
        assert cls.needs_text and cls.reference and cls.paper
    assert DETECTORS["gl_mcm"].needs_local and not DETECTORS["mcm"].needs_text  # NINCO's class-mean MCM stays a classifier detector
    assert not set(TEXT_DETECTORS) & set(default_detectors())
    assert set(TEXT_DETECTORS) - {"csp"} <= set(default_detectors(text=True)) and DETECTORS["csp"].costly
    # on a classifier's outputs (no text head) each is skipped with one line; on CLIP's each names its temperature
    def with_logits(o, labels=None):
        return Outputs(features=o.features, logits=100 * text.cosines(o.features), labels=labels, local=o.local)

    inputs = EvalInputs(fit=with_logits(sets["id"], np.zeros(40, dtype=int)), id_test=with_logits(sets["id"], np.zeros(40, dtype=int)),
                        ood=with_logits(sets["ood"]), ood_groups=np.array(["a"] * 15 + ["b"] * 15))
    methods = [(n, {}) for n in TEXT_DETECTORS if n not in ("neglabel", "csp")]
    r = evaluate_model(inputs, methods, severity_window=2)
    assert all(e["status"] == "skipped" and "needs a vision-language model's text head" in e["error"] for e in r["detectors"].values())
    inputs.text = text
    r = evaluate_model(inputs, methods, severity_window=2)
    for name, e in r["detectors"].items():
        assert e["status"] == "ok", (name, e)
        assert any("temperature" in n for n in e["notes"]), (name, e["notes"])


def _fake_encoder(dim: int, classes: int):
    """A stand-in text encoder: a prompt naming "class i" lands near class i's direction (whatever
    the template around it), any other prompt on a direction drawn from a generator seeded by it."""
    import hashlib
    import re

    directions = np.random.default_rng(99).normal(size=(classes, dim))

    def raw(texts):
        rows = []
        for t in texts:
            noise = np.random.default_rng(int(hashlib.sha256(t.encode()).hexdigest()[:12], 16)).normal(size=dim)
            m = re.search(r"class (\d+)", t)
            rows.append(3 * directions[int(m.group(1))] + 0.3 * noise if m else noise)
        return np.array(rows).reshape(len(rows), dim)

    def encode(texts):
        e = raw(texts)
        return e / np.linalg.norm(e, axis=1, keepdims=True)
    encode.raw = raw  # type: ignore[attr-defined]
    return encode


@pytest.mark.parametrize("name", [n for n in detector_names() if DETECTORS[n].needs_text])
def test_every_text_detector_meets_the_contract(name, monkeypatch):
    """The contract of tests/pipelines/test_detectors.py for the detectors that need a text head:
    ID images close to their class's text, OOD images in random directions; finite scores, one
    per image, higher = more ID, the same scores twice."""
    monkeypatch.setattr("pipelines.evaluation.detectors.neglabel.wordnet_corpus", lambda kind: [f"{kind} word {i}" for i in range(400)])
    monkeypatch.setattr("pipelines.evaluation.detectors.csp.lexicographer_words",
                        lambda: ([f"noun {i}" for i in range(400)], [f"adjective {i}" for i in range(100)]))
    d, c = 32, 8
    encode = _fake_encoder(d, c)
    names = tuple(f"class {i}" for i in range(c))
    text = TextHead(wnids=tuple(f"n{i:08d}" for i in range(c)), names=names, embeddings=encode([f"the nice {n}" for n in names]),
                    template="neglabel", template_text="neglabel: 'the nice {}'", logit_scale=100.0, encode=encode)
    rng = np.random.default_rng(0)

    def images(n, ood):
        base = rng.normal(size=(n, d)) if ood else text.embeddings[rng.integers(0, c, n)] * 3 + rng.normal(0, 0.3, (n, d))
        return Outputs(features=base, logits=100 * text.cosines(base),
                       local=(base[:, None, :] + rng.normal(0, 0.3, (n, 9, d))).astype(np.float16))

    test, ood = images(200, False), images(150, True)
    det = get_detector(name, **({"groups": 10} if name in ("neglabel", "csp") else {}))
    det.text = text
    det.fit(images(10, False))
    s_id, s_ood = det.score(test), det.score(ood)
    assert s_id.shape == (200,) and s_ood.shape == (150,) and np.all(np.isfinite(s_id)) and np.all(np.isfinite(s_ood))
    assert ood_metrics(s_id, s_ood)["auroc"] > 0.95, name
    np.testing.assert_array_equal(det.score(test), s_id)
    assert DETECTORS[name].label and DETECTORS[name].paper and DETECTORS[name].reference


class PromptMemo:
    """Each prompt encoded alone through open_clip's encode_text and remembered, float64: the same
    embedding for a prompt whatever batch asks for it (detector and reference share it)."""

    def __init__(self, cm):
        self.cm, self.memo = cm, {}

    def raw(self, texts):
        for t in texts:
            if t not in self.memo:
                with torch.no_grad():
                    self.memo[t] = self.cm.model.encode_text(self.cm.tokenizer([t])).double()[0].numpy()
        return np.stack([self.memo[t] for t in texts]) if texts else np.zeros((0, self.cm.feature_dim))

    def __call__(self, texts):
        e = self.raw(list(texts))
        return e / np.linalg.norm(e, axis=1, keepdims=True)


def _csp_reference(memo, names, images, *, nouns, adjectives, seed, conj_seed=0, groups=100, fraction=0.15, pct=0.95):
    """CSP's scores as its code computes them: ID prompts (eight templates x names, template-major)
    averaged per class before normalising; each noun through the eight templates, each adjective
    conjugated with random.choice of the fourteen conjugates (Python's random seeded once) and
    through the four adjective templates, averaged per word, normalised; per word the 95% quantile
    of similarity to the ID labels, forced to 1 where its largest similarity is above 0.95; the
    lowest 15% of each kind; NegLabel's grouping (the permutation given as the detector draws it)."""
    import itertools
    import random

    noun_t = ["a close-up photo of the nice {}.", "a photo with the nice {}.", "a good photo with the nice {}.",
              "a photo of the nice {}.", "{}", "the {}", "the good {}", "the nice {}"]
    conj_t = ["{} environment", "{} space", "{} object", "{} scene", "{} place", "{} item", "{} area", "{} view", "{} thing",
              "{} pattern", "{} structure", "{} landscape", "{} vista", "{} creature"]
    adj_t = ["{}", "a nice photo of {}", "a good photo of {}", "a close-up photo of {}"]
    raw = lambda texts: torch.from_numpy(memo.raw(texts))  # noqa: E731
    d = memo.cm.feature_dim
    pos = raw([p[0].format(p[1]) for p in itertools.product(noun_t, names)]).view(-1, len(names), d).mean(dim=0)
    pos = pos / pos.norm(dim=-1, keepdim=True)
    random.seed(conj_seed)
    words_noun = [t.format(w) for w in nouns for t in noun_t]
    words_adj = []
    for a in adjectives:
        candidate = random.choice(conj_t).format(a)
        words_adj += [t.format(candidate) for t in adj_t]
    neg = torch.cat([raw(words_noun).view(-1, len(noun_t), d).mean(dim=1), raw(words_adj).view(-1, len(adj_t), d).mean(dim=1)])
    neg = neg / neg.norm(dim=-1, keepdim=True)
    sims = []
    for i in range(0, len(neg), 1000):
        tmp = neg[i:i + 1000] @ pos.T
        q = torch.quantile(tmp, q=pct, dim=-1)
        q[torch.max(tmp, dim=1)[0] > 0.95] = 1.0
        sims.append(q)
    sims = torch.cat(sims)
    n = len(nouns)
    ind_noun, ind_adj = torch.argsort(sims[:n]), torch.argsort(sims[n:])
    neg = torch.cat([neg[:n][ind_noun[:int(len(ind_noun) * fraction)]], neg[n:][ind_adj[:int(len(ind_adj) * fraction)]]])
    img = _unit(images)
    p_sim, n_sim = 100.0 * img @ pos.T, 100.0 * img @ neg.T
    drop = n_sim.shape[1] % groups
    if drop > 0:
        n_sim = n_sim[:, :-drop]
    idx = torch.from_numpy(np.random.default_rng(seed).permutation(n_sim.shape[1]))
    negs = n_sim.T[idx].T.reshape(p_sim.shape[0], groups, -1)
    scores = [F.softmax(torch.cat([p_sim, negs[:, i, :]], dim=-1), dim=-1)[:, :p_sim.shape[1]].sum(dim=-1) for i in range(groups)]
    return torch.stack(scores, dim=-1).mean(dim=-1).numpy()


def test_csp_matches_its_code(world, monkeypatch):
    from dataclasses import replace

    cm, text, sets = world
    adjectives = ADJECTIVES + ["icy", "hollow", "tiny", "vast", "narrow", "ancient", "wooden", "frozen"]
    nouns = NOUNS + [f"old {w}" for w in NOUNS]
    monkeypatch.setattr("pipelines.evaluation.detectors.csp.lexicographer_words", lambda: (nouns, adjectives))
    memo = PromptMemo(cm)
    text = replace(text, encode=memo)
    for params in ({"groups": 4, "seed": 0}, {"groups": 3, "seed": 5, "conjugate_seed": 7, "fraction": 0.4, "percentile": 0.5}):
        det = _fit("csp", text, params)
        for data in sets.values():
            ref = _csp_reference(memo, text.names, data.features, nouns=nouns, adjectives=adjectives, seed=params["seed"],
                                 conj_seed=params.get("conjugate_seed", 0), groups=params["groups"],
                                 fraction=params.get("fraction", 0.15), pct=params.get("percentile", 0.95))
            assert rel(det.score(data), ref) <= 1e-9
    assert {k: v for k, v in DETECTORS["csp"].defaults().items() if "seed" not in k} == {
        "temperature": 0.01, "fraction": 0.15, "percentile": 0.95, "max_similarity": 0.95, "groups": 100}
