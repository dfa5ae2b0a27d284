"""ImageNet class lists shipped inside timm (``timm/data/_info``), read without importing timm.

Importing timm imports torch; the web process and the class filter must not pay for that, so the
files are located through the import system's metadata only.
"""
from __future__ import annotations

import importlib.util
from functools import lru_cache
from pathlib import Path

from pipelines.classes.wordnet import is_wnid

NAMED_LISTS = {
    "imagenet-1k": "imagenet_synsets.txt",
    "imagenet-21k": "imagenet21k_goog_synsets.txt",  # fall11, 21,843 classes
    "imagenet-21k-p": "imagenet21k_miil_synsets.txt",  # Ridnik et al., fall11, 11,221
    "imagenet-21k-p-winter21": "imagenet21k_miil_w21_synsets.txt",  # 10,450
    "imagenet-12k": "imagenet12k_synsets.txt",
}


class ClassListError(ValueError):
    """A class list could not be read; the message names the file and the line."""


def timm_info_dir() -> Path:
    spec = importlib.util.find_spec("timm")
    if spec is None or not spec.submodule_search_locations:
        raise ClassListError("timm is not installed; its ImageNet class lists are needed. Fix: pip install -r requirements.txt")
    path = Path(list(spec.submodule_search_locations)[0]) / "data" / "_info"
    if not path.is_dir():
        raise ClassListError(f"timm is installed but {path} is missing; reinstall timm (pip install -r requirements.txt)")
    return path


@lru_cache(maxsize=None)
def named_list(name: str) -> tuple[str, ...]:
    if name not in NAMED_LISTS:
        raise ClassListError(f"unknown class list {name!r}; choose one of {', '.join(NAMED_LISTS)} or give a file of wnids")
    return read_wnid_file(timm_info_dir() / NAMED_LISTS[name])


def read_wnid_file(path: str | Path) -> tuple[str, ...]:
    """One wnid per line; blank lines and ``#`` comments ignored; order kept, repeats refused."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ClassListError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ClassListError(f"{path}: cannot read it as UTF-8 text ({exc})") from None
    seen: dict[str, int] = {}
    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        wnid = line.split()[0]
        if not is_wnid(wnid):
            raise ClassListError(f"{path}, line {lineno}: {wnid!r} is not a WordNet noun id like n01440764")
        if wnid in seen:
            raise ClassListError(f"{path}, line {lineno}: {wnid} repeats line {seen[wnid]}")
        seen[wnid] = lineno
    if not seen:
        raise ClassListError(f"{path}: holds no wnids")
    return tuple(seen)


def resolve_class_list(spec: str) -> tuple[str, ...]:
    """A named list (``imagenet-1k``...) or a path to a wnid file."""
    if spec in NAMED_LISTS:
        return named_list(spec)
    if not Path(spec).exists():
        raise ClassListError(f"{spec}: neither a file of wnids nor a named list (unknown class list; named lists: {', '.join(NAMED_LISTS)})")
    return read_wnid_file(spec)


@lru_cache(maxsize=1)
def imagenet_lemmas() -> dict[str, str]:
    """wnid -> comma-separated lemmas, as ImageNet labels them (all 21K classes)."""
    out = {}
    for line in (timm_info_dir() / "imagenet_synset_to_lemma.txt").read_text(encoding="utf-8").splitlines():
        wnid, _, lemma = line.partition("\t")
        if wnid:
            out[wnid] = lemma
    return out
