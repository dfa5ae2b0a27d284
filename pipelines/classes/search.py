"""The one ranking rule of every class search (docs/browse.md, "Class search"): the review and
adjudication screens' ID-class search, the image browser's class and top-1 filters, and the
WordNet noun search that maps an unmapped folder.

A query and every text it is compared with are folded the same way (lower case; runs of spaces,
underscores and hyphens become one space; no space at either end), so "Pug-dog", "pug dog" and
"pug_dog" are one text. A class matches in the first of these tiers that holds, best first:

    0  its name is the query                     "espresso" -> espresso
    1  another of its lemmas is the query        "crossword" -> crossword puzzle (lemma crossword)
    2  its name starts with the query            "espresso" -> espresso maker
    3  a later word of its name starts with it   "cat" -> Persian cat, "retr" -> golden retriever
    4  another lemma, or a word of one, starts with it   "cat" -> tabby (lemma tabby cat)
    5  its name or a lemma contains the query    "hound" -> bloodhound
    6  its gloss contains the query              "stripe" -> zebra ("...black-and-white striped...")
    7  its wnid contains the query               "2123045" -> tabby

Within a tier, classes keep the order they were given in (class order for ID classes, WordNet's
order for nouns), so a search gives the same list every time. The name is what pages call the
class (the first lemma); a class's other lemmas rank below it, so "stripe" lists the synsets
named stripe before band, which has stripe as its third lemma.

labeling_ui/static/labeling_ui/idsearch.js holds the same rule for the review screens, which
search in the browser (no round trip between a key and the list Enter records);
tests/test_class_search_browser.py checks that both give the same lists.
"""
from __future__ import annotations

import bisect
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Callable, Generic, Iterable, Sequence, TypeVar

TIERS = ("name", "lemma", "name prefix", "name word prefix", "lemma prefix", "name or lemma contains", "gloss", "wnid")
EXACT_TIERS = (0, 1)  # the query is a name or lemma of the class

# ASCII whitespace only, written out: the browser's copy of the rule (idsearch.js) folds exactly these
_SEPARATORS = re.compile(r"[ \t\n\r\f\v_-]+")

T = TypeVar("T")


def fold(text: str) -> str:
    """A text as searches compare it: lower case, each run of spaces, underscores and hyphens one
    space, none at either end."""
    return _SEPARATORS.sub(" ", (text or "").lower()).strip(" ")


@dataclass(frozen=True)
class SearchEntry(Generic[T]):
    """A class as the search sees it; ``ref`` is what the caller gets back (a row, an id)."""

    name: str
    lemmas: tuple[str, ...] = ()
    gloss: str = ""
    wnid: str = ""
    ref: T | None = None


@dataclass(frozen=True)
class Hit(Generic[T]):
    entry: SearchEntry[T]
    tier: int  # index into TIERS
    order: int  # position in the list searched

    @property
    def exact(self) -> bool:
        return self.tier in EXACT_TIERS


@dataclass(frozen=True)
class _Folded:
    name: str
    lemmas: tuple[str, ...]  # the other lemmas, folded, without the name
    gloss: str
    wnid: str

    @property
    def text(self) -> str:
        """Every field in one line: a query that matches the entry is a part of it."""
        return " | ".join((self.name, *self.lemmas, self.gloss, self.wnid))


def _folded(entry: SearchEntry) -> _Folded:
    name = fold(entry.name)
    lemmas = tuple(k for k in dict.fromkeys(fold(x) for x in entry.lemmas) if k and k != name)
    return _Folded(name, lemmas, fold(entry.gloss), (entry.wnid or "").lower())


def _tier(q: str, f: _Folded) -> int | None:
    if f.name == q:
        return 0
    if q in f.lemmas:
        return 1
    if f.name.startswith(q):
        return 2
    if " " + q in " " + f.name:  # a word of the name starts with it (the first word was tier 2)
        return 3
    if any(k.startswith(q) or " " + q in " " + k for k in f.lemmas):
        return 4
    if q in f.name or any(q in k for k in f.lemmas):
        return 5
    if q in f.gloss:
        return 6
    if q in f.wnid:
        return 7
    return None


def tier_of(query: str, entry: SearchEntry) -> int | None:
    """The tier in which ``entry`` matches ``query`` (None: it does not match)."""
    q = fold(query)
    return _tier(q, _folded(entry)) if q else None


class ClassIndex(Generic[T]):
    """Entries folded once, for many searches over the same list (82,115 WordNet nouns, the
    1,000 ImageNet classes)."""

    def __init__(self, entries: Iterable[SearchEntry[T]]):
        self.entries: list[SearchEntry[T]] = list(entries)
        self._folded = [_folded(e) for e in self.entries]
        # every entry's fields on one line of one text: str.find over it picks the few entries a
        # query can match before the rule looks at each (a folded query holds no newline)
        lines = [f.text for f in self._folded]
        self._starts: list[int] = []
        at = 0
        for line in lines:
            self._starts.append(at)
            at += len(line) + 1
        self._text = "\n".join(lines)
        # tiers 0-2 without a scan: names and lemmas by value, names in sorted order for prefixes
        self._by_name: dict[str, list[int]] = {}
        self._by_lemma: dict[str, list[int]] = {}
        for i, f in enumerate(self._folded):
            self._by_name.setdefault(f.name, []).append(i)
            for k in f.lemmas:
                self._by_lemma.setdefault(k, []).append(i)
        self._names_sorted = sorted((f.name, i) for i, f in enumerate(self._folded))

    def __len__(self) -> int:
        return len(self.entries)

    def _candidates(self, q: str) -> list[int]:
        found: list[int] = []
        at = self._text.find(q)
        while at >= 0:
            i = bisect.bisect_right(self._starts, at) - 1
            found.append(i)
            nxt = self._starts[i + 1] if i + 1 < len(self._starts) else len(self._text)
            at = self._text.find(q, nxt)  # on to the next entry's line
        return found

    def search(self, query: str, *, limit: int | None = 12) -> list[Hit[T]]:
        """The matching entries, best tier first, then in the order given; at most ``limit``."""
        q = fold(query)
        if not q:
            return []
        if limit is not None:  # where the first three tiers fill the list, they are the whole answer
            first = self._first_tiers(q)
            if sum(len(b) for b in first) >= limit:
                return self._hits(first, limit)
        buckets: list[list[int]] = [[] for _ in TIERS]
        for i in self._candidates(q):
            t = _tier(q, self._folded[i])
            if t is not None:
                buckets[t].append(i)
        return self._hits(buckets, limit)

    def _first_tiers(self, q: str) -> list[list[int]]:
        """Tiers 0, 1 and 2 in full (each in the order given), by look-up rather than a scan."""
        exact = self._by_name.get(q, [])
        lemma = self._by_lemma.get(q, [])
        prefix = []
        in_lemma = set(lemma)  # tier 1 wins over a name that also starts with the query
        at = bisect.bisect_left(self._names_sorted, (q, -1))
        while at < len(self._names_sorted) and self._names_sorted[at][0].startswith(q):
            name, i = self._names_sorted[at]
            if name != q and i not in in_lemma:
                prefix.append(i)
            at += 1
        return [sorted(exact), sorted(lemma), sorted(prefix)]

    def _hits(self, buckets: list[list[int]], limit: int | None) -> list[Hit[T]]:
        hits: list[Hit[T]] = []
        for t, bucket in enumerate(buckets):
            for i in bucket:
                if limit is not None and len(hits) >= limit:
                    return hits
                hits.append(Hit(self.entries[i], t, i))
        return hits


def rank(query: str, entries: Sequence[SearchEntry[T]], *, limit: int | None = None) -> list[Hit[T]]:
    """``entries`` matching ``query``, ranked by the rule above (one search: no index kept)."""
    return ClassIndex(entries).search(query, limit=limit)


class Ambiguous(ValueError):
    """A name that does not pick out one class; the message lists what it matches."""


def _same_class(entry: SearchEntry) -> str:
    return entry.wnid or fold(entry.name)


def resolve_one(query: str, index: ClassIndex[T], *, what: str,
                same: Callable[[SearchEntry[T]], object] = _same_class) -> list[SearchEntry[T]]:
    """The classes a typed name stands for, where a filter needs them: its exact matches (tiers 0
    and 1) if they are one class (``same`` says which entries are one class, e.g. the same wnid
    in several sources), else the single class the search finds at all. Anything else is
    Ambiguous (or no match), with a message naming the query and the first candidates; ``what``
    is the field as the person typing sees it ("Class", "Top-1 class")."""
    hits = index.search(query, limit=None)
    exact = [h for h in hits if h.exact]
    pool = exact or hits
    if pool and len({same(h.entry) for h in pool}) == 1:
        return [h.entry for h in pool]
    shown = query.strip()[:60]
    if not hits:
        raise Ambiguous(f"{what} {shown!r}: no class matches it; type part of a name, a lemma or a wnid")
    names = ", ".join(_display(h.entry) for h in pool[:5])
    more = f" and {len(pool) - 5} more" if len(pool) > 5 else ""
    raise Ambiguous(f"{what} {shown!r} matches {len(pool)} classes ({names}{more}): type more of the name, or pick one from the list")


def _display(entry: SearchEntry) -> str:
    return f"{entry.name} ({entry.wnid})" if entry.wnid and entry.wnid != entry.name else entry.name


@lru_cache(maxsize=1)
def imagenet_1k_index() -> ClassIndex[str]:
    """The 1,000 classes an ImageNet-1K classifier predicts (the browser's top-1 filter), named
    as ImageNet names them (timm's lemma and definition lists; no WordNet needed); ``ref`` is
    the wnid. Raises ClassListError where timm's lists are missing."""
    from pipelines.classes.imagenet import imagenet_lemmas, named_list, timm_info_dir

    lemmas = imagenet_lemmas()
    glosses: dict[str, str] = {}
    for line in (timm_info_dir() / "imagenet_synset_to_definition.txt").read_text(encoding="utf-8").splitlines():
        wnid, _, gloss = line.partition("\t")
        glosses[wnid] = gloss.strip()
    entries = []
    for wnid in named_list("imagenet-1k"):
        names = tuple(x.strip() for x in lemmas.get(wnid, wnid).split(",") if x.strip()) or (wnid,)
        entries.append(SearchEntry(names[0], names, glosses.get(wnid, ""), wnid, wnid))
    return ClassIndex(entries)
