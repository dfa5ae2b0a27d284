"""The one rule for names that come from users, and the check that a written path stays in
its root. Every entry point (commands, admin forms, services) uses these; nothing else
decides what a name may be.

Names (sources, exports, splits, imported outputs) become folder names and archive entries,
so they are slugs: letters, digits, ``.``, ``_`` and ``-``; not starting with ``.`` (hidden
files, ``..``) or ``-`` (read as an option by shells and tools); at most 100 characters.
"""
from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path
from typing import Callable

NAME_MAX = 100
NAME_RULE = (f"letters, digits, '.', '_' and '-' only, not starting with '.' or '-', at most {NAME_MAX} characters "
             "(e.g. ninco-clean_v2)")
_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]*\Z", re.ASCII)


def class_label(wnid: str = "", name: str = "", folder: str = "") -> str:
    """The one way a class is named on pages, in CSVs and plots: its first WordNet lemma and its
    wnid, "sunset (n11517776)"; the folder name for a class without a wnid. ``name`` may be a
    lemma, a lemma list "a, b", or a synset name "sunset.n.02"."""
    if not wnid:
        return folder or "(no class)"
    lemma = (name or "").split(",")[0].strip()
    if re.fullmatch(r".+\.[a-z]\.\d\d", lemma):
        lemma = lemma.rsplit(".", 2)[0]
    lemma = lemma.replace("_", " ")
    return f"{lemma} ({wnid})" if lemma and lemma != wnid else wnid


class InvalidName(ValueError):
    """A user-given name the rule refuses; the message names the input and shows the rule."""


class PathOutsideRoot(ValueError):
    """A path about to be written that would resolve outside the folder it belongs in."""


def check_name(value: object, *, what: str = "name", max_length: int = NAME_MAX) -> str:
    """``value`` if it follows the name rule, else ``InvalidName`` saying which input and the rule."""
    text = value if isinstance(value, str) else ""
    if not text:
        raise InvalidName(f"{what} is empty: use {NAME_RULE}")
    shown = text if len(text) <= 60 else text[:57] + "..."
    if len(text) > max_length:
        raise InvalidName(f"{what} {shown!r} is {len(text)} characters long: use at most {max_length} ({NAME_RULE})")
    if not _NAME.match(text):
        raise InvalidName(f"{what} {shown!r} is not allowed: use {NAME_RULE}")
    return text


def safe_component(text: str) -> str:
    """Any text (a model's hub id, a set key) as one harmless file-name component: characters
    outside the name rule become '_', and a leading '.' or '-' is escaped. Not a validation:
    for names the toolkit derives, not names users choose."""
    out = "".join(c if (c.isascii() and c.isalnum()) or c in "._-" else "_" for c in text) or "_"
    return "_" + out if out[0] in ".-" else out


def inside(root: str | os.PathLike, path: str | os.PathLike) -> Path:
    """``path`` (absolute, or relative to ``root``) if it resolves inside ``root`` (symlinks
    followed, so a link out of the root is caught), else ``PathOutsideRoot``. The last check
    before anything is written."""
    root_real = Path(os.path.realpath(root))
    full = Path(root, path)
    real = Path(os.path.realpath(full))
    if real != root_real and root_real not in real.parents:
        raise PathOutsideRoot(f"{full} resolves to {real}, outside {root_real}; refusing to write there")
    return full


def atomic_write(path: Path, write: Callable, *, root: str | os.PathLike | None = None) -> None:
    """Write a file through ``write(binary file)`` into a temporary name, then rename it into
    place: readers never see half a file, and a killed worker leaves no partial one. With
    ``root``, the path must resolve inside it."""
    if root is not None:
        inside(root, path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            write(fh)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
