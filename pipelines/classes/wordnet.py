"""WordNet 3.0 for ImageNet wnids: provisioning (an explicit step) and loading (via NLTK).

ImageNet class ids are WordNet 3.0 noun offsets: ``n02084071`` is ``dog.n.01``. Provisioning
arranges Princeton's files as NLTK expects (``<nltk_data>/corpora/wordnet/``): from Debian's
``wordnet-base`` + ``wordnet-sense-index`` packages when present, else NLTK's downloader where
the internet is reachable. Nothing here downloads or copies as a side effect of an import.
"""
from __future__ import annotations

import re
import shutil
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DEBIAN_WORDNET_DIR = Path("/usr/share/wordnet")
WNID_RE = re.compile(r"^n\d{8}$")

# The files NLTK's WordNetCorpusReader opens (cntlist.rev is optional for it).
REQUIRED_FILES = (
    "index.noun", "index.verb", "index.adj", "index.adv",
    "data.noun", "data.verb", "data.adj", "data.adv",
    "noun.exc", "verb.exc", "adj.exc", "adv.exc",
    "index.sense",
)
OPTIONAL_FILES = ("cntlist.rev",)

# The lexicographer file table of WordNet 3.0 (man page lexnames(5WN)): number, name, and the
# syntactic category (1 noun, 2 verb, 3 adjective, 4 adverb). Debian ships it only as a man page.
LEXNAMES = [
    "adj.all 3", "adj.pert 3", "adv.all 4", "noun.Tops 1", "noun.act 1", "noun.animal 1",
    "noun.artifact 1", "noun.attribute 1", "noun.body 1", "noun.cognition 1",
    "noun.communication 1", "noun.event 1", "noun.feeling 1", "noun.food 1", "noun.group 1",
    "noun.location 1", "noun.motive 1", "noun.object 1", "noun.person 1",
    "noun.phenomenon 1", "noun.plant 1", "noun.possession 1", "noun.process 1",
    "noun.quantity 1", "noun.relation 1", "noun.shape 1", "noun.state 1",
    "noun.substance 1", "noun.time 1", "verb.body 2", "verb.change 2", "verb.cognition 2",
    "verb.communication 2", "verb.competition 2", "verb.consumption 2", "verb.contact 2",
    "verb.creation 2", "verb.emotion 2", "verb.motion 2", "verb.perception 2",
    "verb.possession 2", "verb.social 2", "verb.stative 2", "verb.weather 2", "adj.ppl 3",
]

FIX_HINT = (
    "Provision it with `python manage.py setup_wordnet` (it copies Debian's files: "
    "`apt-get install wordnet-base wordnet-sense-index`; or, where the internet is reachable, "
    "uses nltk.download('wordnet')). NLTK_DATA must point at the folder it fills."
)


class WordNetUnavailable(RuntimeError):
    """WordNet 3.0 is not where it should be; the message says how to fix it."""


def lexnames_text() -> str:
    return "".join(f"{i:02d}\t{entry.split()[0]}\t{entry.split()[1]}\n" for i, entry in enumerate(LEXNAMES))


def corpus_dir(nltk_data: Path) -> Path:
    return Path(nltk_data) / "corpora" / "wordnet"


def provision_wordnet(nltk_data: Path, *, debian_dir: Path = DEBIAN_WORDNET_DIR, allow_download: bool = True) -> str:
    """Install WordNet 3.0 under ``nltk_data`` and verify it. Returns a line saying how."""
    nltk_data = Path(nltk_data)
    target = corpus_dir(nltk_data)
    missing = [f for f in REQUIRED_FILES if not (debian_dir / f).is_file()]
    if not missing:
        target.mkdir(parents=True, exist_ok=True)
        for name in REQUIRED_FILES + OPTIONAL_FILES:
            src = debian_dir / name
            if src.is_file():
                # Copies, not links: NLTK >= 3.10 refuses files that resolve outside its data path.
                shutil.copyfile(src, target / name)
        (target / "lexnames").write_text(lexnames_text(), encoding="utf-8")
        how = f"copied Princeton WordNet files from {debian_dir}"
    elif allow_download:
        err: Exception | None
        try:
            import nltk

            ok = nltk.download("wordnet", download_dir=str(nltk_data), quiet=True, raise_on_error=True)
        except Exception as exc:  # network errors come in many types
            ok, err = False, exc
        else:
            err = None
        if not ok:
            raise WordNetUnavailable(
                f"WordNet 3.0 could not be provisioned: {debian_dir} lacks {', '.join(missing)} and "
                f"nltk.download('wordnet') failed ({err or 'no network'}). Fix: `apt-get install "
                "wordnet-base wordnet-sense-index` and run `python manage.py setup_wordnet` again."
            )
        _unzip_if_needed(nltk_data)
        how = "downloaded with nltk.download('wordnet')"
    else:
        raise WordNetUnavailable(
            f"{debian_dir} lacks {', '.join(missing)}. Fix: `apt-get install wordnet-base wordnet-sense-index`."
        )
    wn = load_wordnet(nltk_data)
    return f"{how} into {target}; verified WordNet {wn.get_version()} ({describe_check(wn)})"


def _unzip_if_needed(nltk_data: Path) -> None:
    zipped = nltk_data / "corpora" / "wordnet.zip"
    if zipped.is_file() and not corpus_dir(nltk_data).is_dir():
        import zipfile

        with zipfile.ZipFile(zipped) as zf:
            zf.extractall(nltk_data / "corpora")


_CACHE: dict[str, object] = {}


def load_wordnet(nltk_data: Path) -> Any:
    """Return NLTK's WordNet reader for the copy under ``nltk_data``; check it is 3.0."""
    key = str(Path(nltk_data).resolve())
    if key in _CACHE:
        return _CACHE[key]
    root = corpus_dir(nltk_data)
    absent = [f for f in REQUIRED_FILES + ("lexnames",) if not (root / f).is_file()]
    if absent:
        raise WordNetUnavailable(f"WordNet 3.0 is not provisioned in {root} (missing {', '.join(absent)}). {FIX_HINT}")
    import nltk
    from nltk.corpus.reader.wordnet import WordNetCorpusReader

    if key not in nltk.data.path:
        nltk.data.path.insert(0, key)
    try:
        with warnings.catch_warnings():
            # "multilingual functions are not available": OMW is not needed for English wnids.
            warnings.simplefilter("ignore", UserWarning)
            wn = WordNetCorpusReader(nltk.data.find("corpora/wordnet"), None)
    except (LookupError, OSError, ValueError) as exc:
        raise WordNetUnavailable(f"NLTK could not open WordNet in {root}: {exc}. {FIX_HINT}") from exc
    version = wn.get_version()
    if version != "3.0":
        raise WordNetUnavailable(f"{root} holds WordNet {version}; ImageNet wnids need WordNet 3.0. {FIX_HINT}")
    check = wn.synset_from_pos_and_offset("n", 2084071).name()
    if check != "dog.n.01":
        raise WordNetUnavailable(f"{root}: n02084071 resolves to {check}, not dog.n.01; the files are not WordNet 3.0. {FIX_HINT}")
    _CACHE[key] = wn
    return wn


def describe_check(wn: Any) -> str:
    return f"n02084071 = {wn.synset_from_pos_and_offset('n', 2084071).name()}"


def is_wnid(text: str) -> bool:
    return bool(WNID_RE.match(text))


def synset_for_wnid(wn: Any, wnid: str) -> Any:
    """The noun synset for ``wnid``, or None when WordNet 3.0 has no such noun."""
    if not is_wnid(wnid):
        return None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # nltk warns, then returns None
            return wn.synset_from_pos_and_offset("n", int(wnid[1:]))
    except Exception:  # nltk raises WordNetError or ValueError for unknown offsets
        return None


def wnid_of(synset: Any) -> str:
    return f"{synset.pos()}{synset.offset():08d}"


@dataclass(frozen=True)
class SynsetInfo:
    wnid: str
    name: str  # e.g. "dog.n.01"
    lemmas: tuple[str, ...]
    gloss: str

    @property
    def label(self) -> str:
        return self.lemmas[0].replace("_", " ") if self.lemmas else self.name


def synset_info(wn: Any, wnid: str) -> SynsetInfo | None:
    syn = synset_for_wnid(wn, wnid)
    if syn is None:
        return None
    return SynsetInfo(wnid=wnid, name=syn.name(), lemmas=tuple(syn.lemma_names()), gloss=syn.definition())


def lookup_lemma(wn: Any, text: str) -> list[SynsetInfo]:
    """Noun synsets that have ``text`` as a lemma (spaces, hyphens and case folded)."""
    key = re.sub(r"[\s\-]+", "_", text.strip().lower())
    if not key:
        return []
    found = []
    for syn in wn.synsets(key, pos="n"):
        lemma_keys = {name.lower() for name in syn.lemma_names()}
        if key in lemma_keys:
            found.append(SynsetInfo(wnid=wnid_of(syn), name=syn.name(), lemmas=tuple(syn.lemma_names()), gloss=syn.definition()))
    return found
