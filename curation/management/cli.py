"""Checks of command-line paths, made before any work starts: a bad path is one line naming
the flag and the fix (CommandError, exit status 1), never a traceback after minutes of work."""
from __future__ import annotations

import os
from pathlib import Path

from django.core.management.base import CommandError


def output_file(path: str | None, flag: str) -> str | None:
    """``path`` if a file can be written there ('-' is standard output)."""
    if path is None or path == "-":
        return path
    p = Path(path).expanduser()
    if p.is_dir():
        raise CommandError(f"{flag} {path}: is a folder; give a file name inside it (e.g. {p / 'out.csv'})")
    parent = p.parent if str(p.parent) else Path(".")
    if not parent.is_dir():
        raise CommandError(f"{flag} {path}: the folder {parent} does not exist; create it first (mkdir -p {parent})")
    if not os.access(parent, os.W_OK) or (p.exists() and not os.access(p, os.W_OK)):
        raise CommandError(f"{flag} {path}: not writable by this user; choose another place")
    return str(p)


def output_folder(path: str, flag: str) -> Path:
    """``path`` if it is an empty folder or can be created as one."""
    p = Path(path).expanduser()
    if p.exists() and not p.is_dir():
        raise CommandError(f"{flag} {path}: is a file, not a folder; give a new folder's path")
    if p.is_dir() and any(p.iterdir()):
        raise CommandError(f"{flag} {path}: the folder is not empty; give a new or empty folder")
    anchor = next((a for a in (p, *p.parents) if a.exists()), Path("."))
    if not anchor.is_dir() or not os.access(anchor, os.W_OK):
        raise CommandError(f"{flag} {path}: {anchor} is not a writable folder; choose another place")
    return p


def comma_list(value: str | None, flag: str) -> list[str]:
    """The one rule for comma lists on the command line (``pipelines.numbers.comma_list``): the
    items, stripped; an empty item (``1,,2``, ``a,``) is one line naming the flag, exit status 1."""
    from pipelines.numbers import comma_list as items

    try:
        return items(value, flag)
    except ValueError as exc:
        raise CommandError(str(exc)) from None


def whole_number_option(value: object, flag: str, *, lo: int, hi: int) -> int | None:
    """A whole-number option through the one rule (``pipelines.numbers.whole_number``: ASCII
    digits, in ``lo..hi``); None when not given. One line naming the flag otherwise."""
    from pipelines.numbers import whole_number

    if value is None:
        return None
    try:
        return whole_number(value.strip() if isinstance(value, str) else value, flag, lo=lo, hi=hi)
    except ValueError as exc:
        raise CommandError(str(exc)) from None


def one_line_parser_errors(parser):
    """Make ``parser`` report a bad or missing option as one line and exit status 1 when the
    command runs from the command line (argparse prints its usage and exits 2), so every refusal
    of a command reads and exits alike. Under call_command it still raises CommandError."""
    import sys

    original = parser.error

    def error(message):
        if getattr(parser, "called_from_command_line", False):
            sys.stderr.write(f"CommandError: {message} (see --help)\n")
            sys.exit(1)
        original(message)

    parser.error = error
    return parser
