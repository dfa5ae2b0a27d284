"""Build the find-similar indexes (candidates, ID images) of a model's stored features, once per
feature set; the web app builds small ones itself and asks for this above 200,000 vectors."""
from __future__ import annotations

import time

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from curation.models import Source
from curation.services.similar import SimilarError, similar_index_build


class Command(BaseCommand):
    help = "Build the find-similar indexes of the stored features (kept under FEATURE_STORE/similar/ until the features change)"

    def add_arguments(self, parser):
        parser.add_argument("--model", default=None, help="model whose features to index (default: OODC_MODEL)")

    def handle(self, *args, **opts):
        model = opts["model"] or settings.DEFAULT_MODEL
        for role in (Source.Role.CANDIDATE, Source.Role.ID):
            t = time.perf_counter()
            try:
                idx = similar_index_build(model_name=model, role=role, force_inline=True)
            except SimilarError as exc:
                raise CommandError(str(exc)) from None
            kind = "exact" if idx.exact else (f"inverted file ({idx.index.nlist} cells, {idx.nprobe} probed per query: "
                                              f"recall@20 {idx.recall:.3f} measured against exact search)" if idx.recall is not None
                                              else f"inverted file ({idx.nprobe} cells probed per query)")
            self.stdout.write(f"{role}: {len(idx)} vectors of {model}, {kind} index, {time.perf_counter() - t:.1f} s")
