import os
from pathlib import Path

import numpy as np

from . import Detector, DetectorError, Head, Outputs, Param, register_detector, require_text

NEGLABEL_REF = ("XueJiang16/NegLabel@979e142e8054 mmcls/models/classifiers/multi_modal.py (negative mining), "
                "mmcls/models/ood/clip_ood.py@5ab9a42151cd (grouped score), custom_config/clip.py@6884a885e592 (defaults)")
CORPORA = ("nouns+adjectives", "nouns")
# NegLabel's prompts (its class_names.py): index 85 for ID names and nouns, the first adjective prompt for adjectives
NOUN_PROMPT = "the nice {}"
ADJ_PROMPT = "This is a {} photo"


_CORPUS: dict[str, list[str]] = {}


def wordnet_corpus(kind: str) -> list[str]:
    """NegLabel's candidate negative labels (Jiang et al., ICLR 2024, sec. 3.2: WordNet's words):
    every lemma of WordNet 3.0's nouns (``kind`` "noun") or adjectives ("adj", satellites
    included), in NLTK's (alphabetical) order, underscores as spaces, each once. Needs WordNet
    provisioned under NLTK_DATA (scripts/setup.sh)."""
    if kind not in ("noun", "adj"):
        raise ValueError(f"corpus {kind!r}: noun or adj")
    if kind not in _CORPUS:
        from pipelines.classes.wordnet import load_wordnet

        wn = load_wordnet(Path(os.environ.get("NLTK_DATA") or "nltk_data"))
        words = [w.replace("_", " ") for w in wn.all_lemma_names(pos="n" if kind == "noun" else "a")]
        _CORPUS[kind] = list(dict.fromkeys(words))
    return _CORPUS[kind]


WORDNET = "wordnet"
WORD_KINDS = ("noun", "adj")


def word_files(spec: str) -> list[Path]:
    """The authors' word files named by ``--neglabel-words`` (paths separated by commas), in the
    order they are read. A folder is read as NegLabel's loader reads its ``wordnet_database``
    (XueJiang16/NegLabel@979e142e8054 mmcls/models/classifiers/multi_modal.py, lines 62-94):
    its entries in ``os.listdir`` order, a file's kind the part of its name before the first dot
    (``noun.artifact.txt`` a noun file, ``adj.all.txt`` an adjective file), any other entry
    skipped. A file named on its own is read where it stands in the list and must be of one of
    those kinds. DetectorError in one line otherwise."""
    fix = "give the authors' word files (their txtfiles/ folder, or noun.*.txt / adj.*.txt files separated by commas) or 'wordnet'"
    files: list[Path] = []
    for item in (x.strip() for x in spec.split(",")):
        if not item:
            continue
        path = Path(item).expanduser()
        if path.is_dir():
            found = [path / n for n in os.listdir(path) if n.split(".")[0] in WORD_KINDS and (path / n).is_file()]
            if not found:
                raise DetectorError(f"--neglabel-words: {item} holds no noun.* or adj.* word file; {fix}")
            files += found
        elif path.is_file():
            if path.name.split(".")[0] not in WORD_KINDS:
                raise DetectorError(f"--neglabel-words: {item}: the authors' loader takes a file's kind from its name "
                                    f"(noun.* or adj.*), and this name is neither; {fix}")
            files.append(path)
        else:
            raise DetectorError(f"--neglabel-words: {item} is not a file or folder; {fix}")
    if not files:
        raise DetectorError(f"--neglabel-words: {spec!r} names no file; {fix}")
    return files


def check_words(spec: str) -> None:
    """``--neglabel-words`` checked before a run starts: 'wordnet', or word files that exist
    (``word_files``' one-line DetectorError otherwise)."""
    if spec.strip() != WORDNET:
        word_files(spec)


def read_word_files(files: list[Path], kinds: list[str]) -> dict[str, list[str]]:
    """The candidate words of ``files`` by kind, in the authors' order (multi_modal.py at
    979e142e8054): file after file, line after line, each line stripped; a word already read,
    from any file of either kind, is skipped, so the first file that has it decides whether it is
    a noun or an adjective (in the authors' files 1,637 words are in both). Files of a kind not in
    ``kinds`` are left out before that, as the authors' ``txt_exclude`` leaves them out. Blank
    lines are skipped (the authors' loader would keep one empty word; their files have none)."""
    words: dict[str, list[str]] = {k: [] for k in kinds}
    seen: set[str] = set()
    for f in files:
        kind = f.name.split(".")[0]
        if kind not in words:
            continue
        try:
            lines = f.read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError) as exc:
            raise DetectorError(f"--neglabel-words: {f} could not be read as UTF-8 text ({type(exc).__name__})") from None
        for line in lines:
            w = line.strip()
            if w and w not in seen:
                seen.add(w)
                words[kind].append(w)
    if not any(words.values()):
        raise DetectorError(f"--neglabel-words: the files hold no {' or '.join(kinds)} words")
    return words


def mine_negatives(pos: np.ndarray, negs: list[np.ndarray], *, percentile: float, fraction: float,
                   block: int = 1000) -> tuple[np.ndarray, list[int]]:
    """NegMining (Jiang et al., ICLR 2024, sec. 3.1): each candidate's ``percentile`` quantile of
    its cosine similarities to the ID labels ``pos`` (unit rows); of each kind of candidate
    (nouns, adjectives) the ``fraction`` with the lowest quantile, least similar first, kinds
    concatenated in that order. Returns (negative embeddings, how many of each kind)."""
    kept, counts = [], []
    for cand in negs:
        q = np.concatenate([np.quantile(cand[s:s + block] @ pos.T, percentile, axis=1) for s in range(0, len(cand), block)]) \
            if len(cand) else np.zeros(0)
        order = np.argsort(q, kind="stable")[:int(len(cand) * fraction)]
        kept.append(cand[order])
        counts.append(len(order))
    return np.concatenate(kept) if kept else np.zeros((0, pos.shape[1])), counts


def grouped_score(data: Outputs, pos: np.ndarray, neg: np.ndarray, groups: np.ndarray, temperature: float) -> np.ndarray:
    """``grouped_share`` of the images' normalised embeddings against the ID (``pos``) and
    negative (``neg``) text embeddings at ``temperature`` (NegLabel's and CSP's score)."""
    f = np.asarray(data.features, dtype=np.float64)
    f = f / np.linalg.norm(f, axis=1, keepdims=True)
    return grouped_share(f @ pos.T / temperature, f @ neg.T / temperature, groups)


def grouped_share(pos_logits: np.ndarray, neg_logits: np.ndarray, groups: np.ndarray) -> np.ndarray:
    """NegLabel's grouped score: for each group of negatives, the softmax share of the ID labels
    among the ID labels and that group, averaged over the groups (``groups`` [G, k] holds column
    indices of ``neg_logits``). Computed through log-sum-exps."""
    def lse(x: np.ndarray) -> np.ndarray:
        m = x.max(axis=1, keepdims=True)
        return (m + np.log(np.exp(x - m).sum(axis=1, keepdims=True)))[:, 0]
    pos = lse(pos_logits)
    shares = [np.exp(pos - np.logaddexp(pos, lse(neg_logits[:, g]))) for g in groups]
    return np.mean(shares, axis=0)


@register_detector
class NegLabel(Detector):
    """NegLabel (Jiang et al., "Negative label guided OOD detection with pretrained vision-language
    models", ICLR 2024): WordNet's words least like the ID labels (each word's 95th percentile of
    cosine similarity to the ID labels; the lowest 15% of the nouns and of the adjectives) are
    negative labels; an image's score is the softmax share (tau = 0.01 on cosines, i.e. CLIP's
    100 x cosine) of the ID labels among ID and negative labels, averaged over 100 random groups
    of the negatives. The authors draw the groups with torch.randperm on CUDA under seed 0, which
    no CPU generator reproduces: here numpy's, seeded (``seed``). The candidate words are
    WordNet 3.0's through NLTK by default (136,139: 117,798 nouns and 18,341 adjectives that are
    not nouns), about twice the authors' pool: their word files (``txtfiles/``, 70,000 words)
    are read instead with ``words`` (``--neglabel-words``)."""

    name = "neglabel"
    label = "NegLabel (zero-shot CLIP)"
    paper = "Jiang et al., ICLR 2024"
    reference = NEGLABEL_REF
    needs_text = True
    parameters = (
        Param("temperature", float, 0.01, 1e-4, 100.0, help="softmax temperature on cosine similarities",
              source="NegLabel's config (t = 1 on 100 x cosine)"),
        Param("fraction", float, 0.15, 0.0001, 1.0, help="share of the corpus kept as negative labels", source="NegLabel's config"),
        Param("percentile", float, 0.95, 0.0, 1.0, help="quantile of a word's similarities to the ID labels that ranks it",
              source="NegLabel's config"),
        Param("groups", int, 100, 1, 10000, help="groups of negative labels the score is averaged over", source="NegLabel's config"),
        Param("seed", int, 0, 0, 2**32 - 1, help="seed of the random grouping (numpy; the authors': torch CUDA, seed 0)",
              source="ours"),
        Param("corpus", str, CORPORA[0], choices=CORPORA, help="the kinds of words that may be negative labels",
              source="NegLabel's txtfiles: nouns and adjectives"),
        Param("words", str, WORDNET, help="where the candidate words come from: WordNet 3.0 through NLTK (136,139 words), or the "
              "authors' word files (their txtfiles/: 70,000 words)", source="ours; the authors read their own word files",
              text="wordnet, or the authors' word files: a folder or files, separated by commas",
              validate=lambda v: check_words(str(v))),
    )

    def fit(self, fit: Outputs, head: Head | None = None) -> Detector:
        text = require_text(self.text, "NegLabel")
        if text.encode is None:
            raise DetectorError("NegLabel needs the model's text encoder to embed its negative labels")
        # ID labels with NegLabel's own prompt (the run's zero-shot template is for the other detectors)
        self.pos = text.encode([NOUN_PROMPT.format(n) for n in text.names])
        kinds = ["noun"] + (["adj"] if self.params["corpus"] == "nouns+adjectives" else [])
        spec = str(self.params["words"] or WORDNET).strip()
        if spec == WORDNET:
            try:
                words = {k: wordnet_corpus(k) for k in kinds}
            except RuntimeError as exc:  # WordNet not provisioned
                raise DetectorError(f"NegLabel: {str(exc).splitlines()[0]}") from None
            origin = "WordNet"
        else:
            files = word_files(spec)
            words = read_word_files(files, kinds)
            used = [f.name for f in files if f.name.split(".")[0] in kinds]
            origin = f"{sum(map(len, words.values())):,} words of {len(used)} word files (read in this order: {', '.join(used)})"
        seen: set[str] = set()
        cands = []
        for k in kinds:  # each word once: a word that is also a noun counts as a noun
            ws = [w for w in words[k] if w not in seen]
            seen.update(ws)
            cands.append(text.encode([(NOUN_PROMPT if k == "noun" else ADJ_PROMPT).format(w) for w in ws]))
        self.neg, counts = mine_negatives(self.pos, cands, percentile=self.params["percentile"], fraction=self.params["fraction"])
        g = self.params["groups"]
        usable = len(self.neg) - len(self.neg) % g
        if usable < g:
            raise DetectorError(f"NegLabel: {len(self.neg)} negative labels cannot fill {g} groups; lower --neglabel-groups")
        perm = np.random.default_rng(self.params["seed"]).permutation(usable)
        self.groups = perm.reshape(g, -1)
        self.notes.append(f"{len(self.neg):,} negative labels ({' + '.join(f'{c:,} {k}s' for c, k in zip(counts, kinds))}) mined from "
                          f"{origin} against {len(text.names)} ID labels; {g} groups of {usable // g}"
                          + (f" ({len(self.neg) - usable} dropped to make them equal)" if usable < len(self.neg) else "")
                          + f"; temperature {self.params['temperature']:g} on cosine similarities (CLIP logits / {text.logit_scale:g}); "
                          f"prompt {NOUN_PROMPT!r}")
        return self

    def score(self, data: Outputs) -> np.ndarray:
        return grouped_score(data, self.pos, self.neg, self.groups, self.params["temperature"])
