from django.core.management.base import BaseCommand, CommandError

from curation.services.id_classes import IdClassSetError, id_class_set_register
from pipelines.classes.imagenet import ClassListError
from pipelines.classes.wordnet import WordNetUnavailable


class Command(BaseCommand):
    help = "Choose the in-distribution class set: imagenet-1k (timm's list, the default) or a file of wnids."

    def add_arguments(self, parser):
        parser.add_argument("spec", nargs="?", default="imagenet-1k", help="imagenet-1k, another named list, or a wnid file")
        parser.add_argument("--name", help="Name to store it under (default: the list's name, or 'custom')")
        parser.add_argument("--no-default", action="store_true", help="Register without making it the default set")

    def handle(self, *args, spec, name=None, no_default=False, **opts):
        try:
            obj = id_class_set_register(spec=spec, name=name, make_default=not no_default)
        except (IdClassSetError, ClassListError, WordNetUnavailable) as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(self.style.SUCCESS(f"ID class set {obj.name!r}: {len(obj.wnids)} classes" + (" (default)" if obj.is_default else "")))
