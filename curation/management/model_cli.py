"""What the file-level model commands (predict, find_duplicates) share: their model options,
and turning paths into files plus a loaded model, with bad paths reported, not fatal."""
from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from pipelines.models import PRODUCTION_MODEL, ModelUnavailable


def add_model_arguments(parser) -> None:
    parser.add_argument("--model", default="efficientnet_lite0",
                        help=f"a registered model or any timm name (production choice: {PRODUCTION_MODEL})")
    parser.add_argument("--weights", help="a checkpoint file for the model (where the hub is unreachable)")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--workers", type=int, default=None, help="DataLoader worker processes (default: CPUs - 1, at most 4)")
    parser.add_argument("--device", default=None, help="cpu, cuda, cuda:1 ... (default: cuda when available)")


def files_and_model(command: BaseCommand, paths: list[str], *, model: str, weights: str | None, device: str | None, what: str):
    """(files, loaded model). Paths that are missing or unsafe are listed on stderr; no files
    at all, or a model whose weights cannot be had, is a CommandError."""
    from pipelines.models import load_model
    from pipelines.sources import list_files

    files, problems = list_files(paths)
    for p, why in problems:
        command.stderr.write(f"skipped {p}: {why}")
    if not files:
        raise CommandError(f"no files to {what}")
    try:
        return files, load_model(model, weights=weights, device=device)
    except ModelUnavailable as exc:
        raise CommandError(str(exc)) from None
