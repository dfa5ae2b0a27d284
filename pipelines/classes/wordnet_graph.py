"""A compact, read-only copy of WordNet 3.0's noun graph, for rules that scan tens of thousands
of classes at once.

NLTK is the reader of record: the graph is built once from NLTK's synsets (about 15 s: NLTK
parses every noun line) and saved next to the WordNet files as an ``.npz`` of integer arrays
and one UTF-8 text blob (no pickle, so loading it runs no code). Loading that file takes a
fraction of a second, where opening WordNet through NLTK takes several. The file is keyed by
the SHA-1 of ``data.noun`` and a format version, so replacing WordNet rebuilds it.

Node ``i`` is a noun synset; edges are stored per relation as CSR arrays (``indptr``,
``indices``). Hypernym edges include instance hypernyms (ImageNet has classes that are
instances, e.g. named places); each edge remembers which kind it is so explanations can say so.
"""
from __future__ import annotations

import hashlib
import logging
import os
import re
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from pipelines.classes.wordnet import WordNetUnavailable, corpus_dir, load_wordnet

log = logging.getLogger(__name__)

FORMAT_VERSION = 1
# relation name -> the NLTK Synset methods whose targets it holds
RELATIONS: dict[str, tuple[str, ...]] = {
    "hypernym": ("hypernyms",),
    "instance_hypernym": ("instance_hypernyms",),
    "hyponym": ("hyponyms", "instance_hyponyms"),
    "part_meronym": ("part_meronyms",),
    "member_meronym": ("member_meronyms",),
    "substance_meronym": ("substance_meronyms",),
    "part_holonym": ("part_holonyms",),
    "member_holonym": ("member_holonyms",),
    "substance_holonym": ("substance_holonyms",),
}
FIELD_SEP, RECORD_SEP = "\x1f", "\x1e"


WORD_RE = re.compile(r"[a-z0-9]+")


def lemma_key(text: str) -> str:
    """How lemmas are compared: case, underscores, hyphens and runs of spaces folded."""
    return re.sub(r"[\s_\-]+", " ", text.strip().lower())


@dataclass
class NounGraph:
    offsets: np.ndarray  # int64[N], WordNet 3.0 noun offsets
    names: list[str]  # "dog.n.01"
    lemmas: list[tuple[str, ...]]  # as WordNet spells them ("hot_dog")
    glosses: list[str]
    edges: dict[str, tuple[list[int], list[int]]]  # relation -> (indptr, indices) as Python lists
    source_sha1: str = ""
    noun_exceptions: dict[str, str] = field(default_factory=dict)  # irregular plural -> base ("mice" -> "mouse")
    _index: dict[int, int] = field(default_factory=dict, repr=False)
    _lemma_keys: dict[int, tuple[str, ...]] = field(default_factory=dict, repr=False)
    _gloss_words: dict[int, list[str]] = field(default_factory=dict, repr=False)
    _parents: dict[int, list[int]] = field(default_factory=dict, repr=False)
    _instance_edges: frozenset | None = field(default=None, repr=False)

    def __post_init__(self):
        if not self._index:
            self._index = {int(o): i for i, o in enumerate(self.offsets.tolist())}

    def __repr__(self) -> str:
        return f"<NounGraph {len(self.names)} noun synsets, data.noun sha1 {self.source_sha1[:12]}>"

    def __len__(self) -> int:
        return len(self.names)

    # -- lookups -----------------------------------------------------------------------------
    def index_of_wnid(self, wnid: str) -> int | None:
        if len(wnid) != 9 or wnid[0] != "n" or not wnid[1:].isdigit():
            return None
        return self._index.get(int(wnid[1:]))

    def wnid(self, i: int) -> str:
        return f"n{int(self.offsets[i]):08d}"

    def index_of_name(self, name: str) -> int | None:
        """``organism.n.01`` -> node (a linear scan; used for a handful of policy roots)."""
        try:
            return self.names.index(name)
        except ValueError:
            return None

    def lemma_keys(self, i: int) -> tuple[str, ...]:
        """The synset's lemmas folded for comparison (computed once per synset)."""
        keys = self._lemma_keys.get(i)
        if keys is None:
            keys = self._lemma_keys[i] = tuple(dict.fromkeys(lemma_key(x) for x in self.lemmas[i]))
        return keys

    def gloss_words(self, i: int) -> list[str]:
        """The gloss as lower-case words (hyphens and punctuation split; "'s" dropped)."""
        words = self._gloss_words.get(i)
        if words is None:
            words = self._gloss_words[i] = WORD_RE.findall(self.glosses[i].lower().replace("'s ", " "))
        return words

    def label(self, i: int) -> str:
        return self.lemmas[i][0].replace("_", " ") if self.lemmas[i] else self.names[i]

    def related(self, relation: str, i: int) -> list[int]:
        indptr, indices = self.edges[relation]
        return indices[indptr[i]:indptr[i + 1]]

    def parents(self, i: int) -> list[int]:
        """Direct hypernyms, instance hypernyms included (memoised: rules ask often)."""
        out = self._parents.get(i)
        if out is None:
            out = self._parents[i] = self.related("hypernym", i) + self.related("instance_hypernym", i)
        return out

    def is_instance_edge(self, child: int, parent: int) -> bool:
        if self._instance_edges is None:
            indptr, indices = self.edges["instance_hypernym"]
            self._instance_edges = frozenset(
                (c, indices[k]) for c in range(len(indptr) - 1) for k in range(indptr[c], indptr[c + 1]))
        return (child, parent) in self._instance_edges

    # -- persistence -------------------------------------------------------------------------
    def save(self, path: Path) -> None:
        text = RECORD_SEP.join(
            FIELD_SEP.join((name, " ".join(lemmas), gloss)) for name, lemmas, gloss in zip(self.names, self.lemmas, self.glosses)
        )
        arrays = {
            "format_version": np.array([FORMAT_VERSION]),
            "offsets": self.offsets.astype(np.int64),
            "text": np.frombuffer(text.encode("utf-8"), dtype=np.uint8),
            "source_sha1": np.frombuffer(self.source_sha1.encode("ascii"), dtype=np.uint8),
            "noun_exceptions": np.frombuffer(
                "\n".join(f"{k}\t{v}" for k, v in sorted(self.noun_exceptions.items())).encode("utf-8"), dtype=np.uint8
            ),
        }
        for rel, (indptr, indices) in self.edges.items():
            arrays[f"{rel}__indptr"] = np.asarray(indptr, dtype=np.int32)
            arrays[f"{rel}__indices"] = np.asarray(indices, dtype=np.int32)
        path.parent.mkdir(parents=True, exist_ok=True)
        # Write to a temporary file and rename: concurrent workers never read half a file.
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as fh:
                np.savez(fh, **arrays)  # type: ignore[arg-type]  # numpy's stub types the keyword arrays as its bool option
            os.chmod(tmp, 0o644)  # workers running as other users read it too
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    @classmethod
    def load(cls, path: Path) -> "NounGraph":
        with np.load(path, allow_pickle=False) as z:
            if int(z["format_version"][0]) != FORMAT_VERSION:
                raise ValueError(f"{path}: format version {int(z['format_version'][0])}, expected {FORMAT_VERSION}")
            offsets = z["offsets"]
            text = z["text"].tobytes().decode("utf-8")
            sha1 = z["source_sha1"].tobytes().decode("ascii")
            edges = {rel: (z[f"{rel}__indptr"].tolist(), z[f"{rel}__indices"].tolist()) for rel in RELATIONS}
            exc_text = z["noun_exceptions"].tobytes().decode("utf-8")
        exceptions = dict(line.split("\t", 1) for line in exc_text.split("\n") if line)
        names, lemmas, glosses = [], [], []
        for record in text.split(RECORD_SEP):
            name, lemma_text, gloss = record.split(FIELD_SEP)
            names.append(name)
            lemmas.append(tuple(lemma_text.split(" ")))
            glosses.append(gloss)
        if len(names) != len(offsets):
            raise ValueError(f"{path}: {len(names)} records for {len(offsets)} offsets")
        return cls(offsets=offsets, names=names, lemmas=lemmas, glosses=glosses, edges=edges, source_sha1=sha1,
                   noun_exceptions=exceptions)

    @classmethod
    def from_nltk(cls, wn: Any, source_sha1: str = "", noun_exc_path: Path | None = None,
                  progress: Callable[[int, int], None] | None = None) -> "NounGraph":
        synsets = list(wn.all_synsets("n"))
        index = {s.offset(): i for i, s in enumerate(synsets)}
        edges: dict[str, tuple[list[int], list[int]]] = {rel: ([0], []) for rel in RELATIONS}
        for n, s in enumerate(synsets):
            for rel, methods in RELATIONS.items():
                indptr, indices = edges[rel]
                targets = sorted({index[t.offset()] for m in methods for t in getattr(s, m)()})
                indices.extend(targets)
                indptr.append(len(indices))
            if progress and n % 5000 == 0:
                progress(n, len(synsets))
        offsets = np.array([s.offset() for s in synsets], dtype=np.int64)
        return cls(
            offsets=offsets,
            names=[s.name() for s in synsets],
            lemmas=[tuple(s.lemma_names()) for s in synsets],
            glosses=[s.definition() for s in synsets],
            edges=edges,
            source_sha1=source_sha1,
            noun_exceptions=read_noun_exceptions(noun_exc_path) if noun_exc_path else {},
        )


def read_noun_exceptions(path: Path) -> dict[str, str]:
    """WordNet's ``noun.exc``: one ``inflected base [base...]`` per line; the first base wins."""
    out = {}
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[0] not in out:
            out[parts[0].replace("_", " ")] = parts[1].replace("_", " ")
    return out


_SHA1S: dict[tuple[str, int, int], str] = {}


def _data_noun_sha1(nltk_data: Path) -> str:
    path = corpus_dir(nltk_data) / "data.noun"
    try:
        st = path.stat()
    except OSError:
        from pipelines.classes.wordnet import FIX_HINT

        raise WordNetUnavailable(f"WordNet 3.0 is not provisioned: {path} is missing. {FIX_HINT}") from None
    key = (str(path), st.st_size, st.st_mtime_ns)
    if key in _SHA1S:
        return _SHA1S[key]
    h = hashlib.sha1()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    _SHA1S[key] = h.hexdigest()
    return _SHA1S[key]


def graph_cache_path(nltk_data: Path, sha1: str) -> Path:
    return Path(nltk_data) / "oodc" / f"noun_graph-v{FORMAT_VERSION}-{sha1[:16]}.npz"


_GRAPHS: dict[str, NounGraph] = {}


def load_noun_graph(nltk_data: Path, *, build: bool = True, log_to: Any = None) -> NounGraph:
    """The noun graph of the WordNet under ``nltk_data``: from memory, from its cache file, or
    (with ``build``) built from NLTK once and cached. ``log_to`` receives progress lines."""
    nltk_data = Path(nltk_data)
    sha1 = _data_noun_sha1(nltk_data)
    if sha1 in _GRAPHS:
        return _GRAPHS[sha1]
    path = graph_cache_path(nltk_data, sha1)
    graph = None
    if path.is_file():
        try:
            graph = NounGraph.load(path)
        except (OSError, ValueError, KeyError) as exc:
            log.warning("ignoring unreadable WordNet graph cache %s (%s); rebuilding it", path, exc)
    if graph is None:
        if not build:
            raise WordNetUnavailable(f"the WordNet noun graph cache {path} is missing; run `python manage.py setup_wordnet`")
        say = log_to or (lambda line: log.info("%s", line))
        say(f"Building the WordNet noun graph from NLTK (one time, about 15 s) into {path}")
        started = time.perf_counter()
        graph = NounGraph.from_nltk(load_wordnet(nltk_data), source_sha1=sha1, noun_exc_path=corpus_dir(nltk_data) / "noun.exc")
        try:
            graph.save(path)
        except OSError as exc:  # a read-only data folder: keep it in memory and say so
            say(f"Could not save the graph cache to {path} ({exc}); it will be rebuilt in each process")
        say(f"Built the noun graph ({len(graph)} synsets) in {time.perf_counter() - started:.1f} s")
    _GRAPHS[sha1] = graph
    return graph


_OFFSETS: dict[str, frozenset[int]] = {}


def noun_offsets(nltk_data: Path) -> frozenset[int]:
    """The offsets of all WordNet 3.0 nouns, read from the graph cache without loading the rest:
    enough to validate wnids in a web process (a few MB instead of the graph's ~90 MB)."""
    sha1 = _data_noun_sha1(Path(nltk_data))
    if sha1 in _GRAPHS:
        return frozenset(_GRAPHS[sha1]._index)
    if sha1 not in _OFFSETS:
        path = graph_cache_path(Path(nltk_data), sha1)
        if not path.is_file():
            return frozenset(load_noun_graph(nltk_data)._index)
        with np.load(path, allow_pickle=False) as z:  # reads only this member of the archive
            _OFFSETS[sha1] = frozenset(z["offsets"].tolist())
    return _OFFSETS[sha1]


def is_noun_wnid(nltk_data: Path, wnid: str) -> bool:
    return len(wnid) == 9 and wnid[0] == "n" and wnid[1:].isdigit() and int(wnid[1:]) in noun_offsets(nltk_data)
