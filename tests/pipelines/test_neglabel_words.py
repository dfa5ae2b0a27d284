"""NegLabel's candidate words from the authors' own word files (issue 60): ``--neglabel-words``.

The authors mine their negatives from ``txtfiles/`` (XueJiang16/NegLabel, read at 3253db6: 27
files, 70,000 distinct words), not from WordNet as NLTK ships it (136,139 words). Their loader,
mmcls/models/classifiers/multi_modal.py@979e142e8054 (unchanged in this part up to 3253db6), is
restated below in the test (``authors_loader``): the entries of the folder in ``os.listdir``
order, a file's kind the name before its first dot, files of other kinds skipped, each line
stripped, a word already seen skipped (a ``dedup`` dict over both kinds)."""
from __future__ import annotations

import hashlib
import os

import numpy as np
import pytest

from pipelines.evaluation.detectors import DetectorError, Outputs, TextHead, get_detector
from pipelines.evaluation.detectors import neglabel as nl

FILES = {  # a miniature of the authors' txtfiles/: "bright" and "plain" are in a noun file and an adjective file
    "noun.artifact.txt": "lantern\nkettle\nsaddle\nbright\nanchor\nlantern\n",
    "noun.object.txt": "pebble\ncomet\nglacier\nplain\nreef\n",
    "adj.all.txt": "bright\nfuzzy\nrusty\nplain\nglossy\nwoven\n",
    "noun.plant.txt": "orchid\nbamboo\ncactus\nkettle\n",
    "README.md": "not a word file\n",
}


def authors_loader(folder: str, txt_exclude: str | None = None) -> tuple[list[str], list[str]]:
    """NegLabel's loop (multi_modal.py@979e142e8054, lines 62-94), without the prompts."""
    txtfiles = os.listdir(folder)
    if txt_exclude:
        for file in txt_exclude.split(","):
            txtfiles.remove(file)
    words_noun, words_adj, dedup = [], [], {}
    for file in txtfiles:
        filetype = file.split(".")[0]
        if filetype not in ("adj", "noun"):
            continue
        with open(os.path.join(folder, file)) as f:
            for line in f.readlines():
                if line.strip() in dedup:
                    continue
                dedup[line.strip()] = None
                (words_noun if filetype == "noun" else words_adj).append(line.strip())
    return words_noun, words_adj


@pytest.fixture
def txtfiles(tmp_path):
    folder = tmp_path / "txtfiles"
    folder.mkdir()
    for name, body in FILES.items():
        (folder / name).write_text(body)
    return folder


@pytest.mark.parametrize("order", ["as listed", "reversed", "adjectives last"])
def test_a_folder_is_read_in_the_authors_order(txtfiles, monkeypatch, order):
    listing = sorted(FILES)
    listing = {"as listed": listing, "reversed": listing[::-1],
               "adjectives last": [n for n in listing if not n.startswith("adj")] + ["adj.all.txt"]}[order]
    real = os.listdir
    monkeypatch.setattr(os, "listdir", lambda p: list(listing) if str(p) == str(txtfiles) else real(p))
    files = nl.word_files(str(txtfiles))
    assert [f.name for f in files] == [n for n in listing if n != "README.md"]  # os.listdir order; other entries skipped
    words = nl.read_word_files(files, ["noun", "adj"])
    nouns, adjectives = authors_loader(str(txtfiles))
    assert words == {"noun": nouns, "adj": adjectives}
    # the first file that has a word decides its kind
    first_noun_file = listing.index("noun.artifact.txt") < listing.index("adj.all.txt")
    assert ("bright" in words["noun"]) == first_noun_file and ("bright" in words["adj"]) != first_noun_file
    # nouns only: the adjective files are left out before the words are made unique, as txt_exclude does
    only = nl.read_word_files(files, ["noun"])
    assert only == {"noun": authors_loader(str(txtfiles), txt_exclude="adj.all.txt")[0]}
    assert "bright" in only["noun"] and "plain" in only["noun"]


def test_files_named_one_by_one_are_read_in_the_order_given(txtfiles):
    spec = ",".join(str(txtfiles / n) for n in ("adj.all.txt", "noun.plant.txt", "noun.artifact.txt"))
    words = nl.read_word_files(nl.word_files(spec), ["noun", "adj"])
    assert words["adj"] == ["bright", "fuzzy", "rusty", "plain", "glossy", "woven"]
    assert words["noun"] == ["orchid", "bamboo", "cactus", "kettle", "lantern", "saddle", "anchor"]  # kettle once, bright an adjective


def test_bad_word_files_are_refused_in_one_line(txtfiles, tmp_path):
    (tmp_path / "empty").mkdir()
    (tmp_path / "words.txt").write_text("apple\n")
    (tmp_path / "noun.blank.txt").write_text("\n\n")
    for spec, match in ((str(tmp_path / "nope"), "not a file or folder"), (str(tmp_path / "empty"), "no noun.* or adj.* word file"),
                        (str(tmp_path / "words.txt"), "takes a file's kind from its name"), (" , ", "names no file")):
        with pytest.raises(DetectorError, match=match) as exc:
            nl.word_files(spec)
        assert "\n" not in str(exc.value) and "--neglabel-words" in str(exc.value)
    with pytest.raises(DetectorError, match="hold no noun or adj words"):
        nl.read_word_files(nl.word_files(str(tmp_path / "noun.blank.txt")), ["noun", "adj"])


def _encoder(dim=16, classes=4):
    directions = np.random.default_rng(7).normal(size=(classes, dim))

    def encode(texts):
        rows = []
        for t in texts:
            noise = np.random.default_rng(int(hashlib.sha256(t.encode()).hexdigest()[:12], 16)).normal(size=dim)
            k = next((i for i in range(classes) if t.endswith(f"class {i}")), None)
            rows.append(3 * directions[k] + 0.3 * noise if k is not None else noise)
        e = np.array(rows)
        return e / np.linalg.norm(e, axis=1, keepdims=True)
    return encode


def test_the_detector_mines_the_word_files_as_it_mines_wordnet(txtfiles, monkeypatch):
    """The same words through the files or through the WordNet path: the same negatives, the same
    scores; the notes say where the words came from, in which order."""
    encode = _encoder()
    names = tuple(f"class {i}" for i in range(4))
    text = TextHead(wnids=tuple(f"n{i:08d}" for i in range(4)), names=names, embeddings=encode([f"the nice {n}" for n in names]),
                    encode=encode)
    images = Outputs(features=np.random.default_rng(1).normal(size=(20, 16)), logits=np.zeros((20, 0)))
    spec = ",".join(str(txtfiles / n) for n in ("noun.artifact.txt", "noun.object.txt", "adj.all.txt", "noun.plant.txt"))
    nouns, adjectives = authors_loader(str(txtfiles))  # (any order: the same words either way for this check)
    words = nl.read_word_files(nl.word_files(spec), ["noun", "adj"])
    monkeypatch.setattr(nl, "wordnet_corpus", lambda kind: words[kind])
    params = {"groups": 2, "fraction": 0.5}
    by_files = get_detector("neglabel", words=spec, **params)
    by_wordnet = get_detector("neglabel", **params)
    for det in (by_files, by_wordnet):
        det.text = text
        det.fit(images)
    np.testing.assert_array_equal(by_files.score(images), by_wordnet.score(images))
    assert any("17 words of 4 word files (read in this order: noun.artifact.txt, noun.object.txt, adj.all.txt, noun.plant.txt)" in n
               for n in by_files.notes)
    assert any("mined from WordNet" in n for n in by_wordnet.notes)
    assert sorted(nouns + adjectives) == sorted(words["noun"] + words["adj"])
    missing = get_detector("neglabel", words=str(txtfiles / "gone"))
    missing.text = text
    with pytest.raises(DetectorError, match="--neglabel-words: .*gone is not a file or folder"):
        missing.fit(images)


def test_the_option_is_a_declared_parameter_and_so_a_flag(tmp_path):
    from pipelines.evaluation.detectors import DETECTORS

    (tmp_path / "noun.all.txt").write_text("apple\n")
    p = {q.name: q for q in DETECTORS["neglabel"].parameters}["words"]
    assert p.kind is str and p.default == "wordnet" and p.flag("neglabel") == "--neglabel-words"
    assert p.check("neglabel", str(tmp_path)) == str(tmp_path) and p.check("neglabel", None) == "wordnet"


def test_a_missing_word_file_is_refused_with_the_other_arguments_before_a_run(tmp_path):
    from pipelines.evaluation.detectors import DETECTORS, DetectorError

    param = next(p for p in DETECTORS["neglabel"].parameters if p.name == "words")
    assert param.check("neglabel", "wordnet") == "wordnet"
    with pytest.raises(DetectorError, match="--neglabel-words: .*nope is not a file or folder"):
        param.check("neglabel", str(tmp_path / "nope"))
