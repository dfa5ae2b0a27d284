from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from pipelines.classes.wordnet import WordNetUnavailable, provision_wordnet
from pipelines.classes.wordnet_graph import load_noun_graph


class Command(BaseCommand):
    help = "Install WordNet 3.0 for NLTK under NLTK_DATA (from Debian's files, or nltk.download) and verify it."

    def add_arguments(self, parser):
        parser.add_argument("--no-download", action="store_true", help="Never try the NLTK downloader")

    def handle(self, *args, no_download=False, **opts):
        try:
            line = provision_wordnet(settings.NLTK_DATA, allow_download=not no_download)
        except WordNetUnavailable as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(self.style.SUCCESS(f"WordNet ready: {line}"))
        # The class filter's compact noun graph: built once here (about 15 s), then loaded in
        # a fraction of a second by every process that runs the rules.
        graph = load_noun_graph(settings.NLTK_DATA, log_to=self.stdout.write)
        self.stdout.write(self.style.SUCCESS(f"WordNet noun graph ready: {len(graph)} noun synsets"))
