"""What the file-level model commands (predict, find_duplicates) share: their model options,
and turning paths into files plus a loaded model, with bad paths reported, not fatal."""
from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from pipelines.features.classifiers import PRODUCTION_MODEL, ModelUnavailable
from pipelines.features.decode import DECODERS


def add_model_arguments(parser) -> None:
    from django.conf import settings

    parser.add_argument("--model", default=settings.DEFAULT_MODEL,
                        help=f"a registered model or any timm name (default {settings.DEFAULT_MODEL}, OODC_MODEL; "
                             f"production choice: {PRODUCTION_MODEL})")
    parser.add_argument("--weights", help="a checkpoint file for the model (where the hub is unreachable)")
    parser.add_argument("--batch-size", type=int, default=None, help="images per forward pass (default: 256 on a GPU, 32 on the CPU; "
                                                                      "halved on GPU out-of-memory)")
    parser.add_argument("--workers", type=int, default=None,
                        help="pil: DataLoader processes (default CPUs - 1); torchvision: reader/decoder threads (default 2 x CPUs, up to 32)")
    parser.add_argument("--device", default=None, help="cpu, cuda, cuda:1 ... (default: cuda when available)")
    parser.add_argument("--decoder", choices=DECODERS, default=None,
                        help="torchvision: tensor decode and resize (nvJPEG on a GPU); pil: Pillow and timm's transform "
                             "(default: torchvision on a GPU, pil otherwise)")


def files_and_model(command: BaseCommand, paths: list[str], *, model: str, weights: str | None, device: str | None, what: str,
                    decoder: str | None = None, batch_size: int | None = None):
    """(files, loaded model). Paths that are missing or unsafe are listed on stderr; no files
    at all, or a model whose weights cannot be had, is a CommandError."""
    from pipelines.features.classifiers import load_model
    from pipelines.sources.walk import list_files

    files, problems = list_files(paths)
    for p, why in problems:
        command.stderr.write(f"skipped {p}: {why}")
    if not files:
        raise CommandError(f"no files to {what}")
    if batch_size is not None and batch_size < 1:
        raise CommandError(f"--batch-size {batch_size}: give a positive number of images")
    try:
        lm = load_model(model, weights=weights, device=device)
    except ModelUnavailable as exc:
        raise CommandError(str(exc)) from None
    if decoder == "torchvision":
        from pipelines.features.decode import Preprocess

        try:
            Preprocess.from_data_config(lm.data_config)
        except ValueError as exc:
            raise CommandError(f"--decoder torchvision: {exc}") from None
    return files, lm
