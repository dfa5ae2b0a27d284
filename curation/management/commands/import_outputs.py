from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from curation.services.evaluation import EvaluationError, outputs_import


class Command(BaseCommand):
    help = ("Import precomputed model outputs for an ID set (e.g. ImageNet val or a train subset you cannot store here) from a "
            ".npz: features [n, d] and logits [n, C]; optional labels (class indices or wnids), keys, weight [C, d] and bias [C]. "
            "Use it in evaluations as import:NAME.")

    def add_arguments(self, parser):
        parser.add_argument("name", help="name to use as import:NAME")
        parser.add_argument("file", help="the .npz file")
        parser.add_argument("--model", required=True, help="the model that produced the outputs (runs with it may use them)")
        parser.add_argument("--decoder", choices=("pil", "torchvision", "unknown"), default="unknown",
                            help="how the images became model inputs, when known (runs with another decoder refuse the set)")

    def handle(self, *args, name, file, model, decoder, **opts):
        try:
            row = outputs_import(name=name, path=Path(file), model_name=model, decoder=decoder)
        except EvaluationError as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(f"import:{name}: {row.images} images, {row.feature_dim}-d features of {row.model_name}"
                          + (", with the classifier's weight and bias" if row.has_head else ""))
