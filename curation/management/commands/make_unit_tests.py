import os
import sys
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError
from tqdm import tqdm

from curation.management.cli import comma_list, output_folder
from curation.management.progress import InlineBar
from curation.models import Source
from curation.services.exports import ExportRequestError, export_path, export_run_inline, id_samples_of_source, unit_tests_create, unit_tests_recipe_text
from pipelines.export.unit_tests import CONVENTIONS, UNIT_TESTS, id_samples_from_folder, write_unit_tests


class Command(BaseCommand):
    help = ("Write NINCO's 17 synthetic OOD unit tests (appendix G): one folder per test, sizes and formats mirroring random "
            "ID images (--id-images DIR, or the ID reference source), deterministic for --seed, plus unit_tests.csv "
            "(every image's parameters) and manifest.json. With --name instead of --out it is stored as an export of kind unit-tests.")

    def add_arguments(self, parser):
        where = parser.add_mutually_exclusive_group(required=True)
        where.add_argument("--out", help="folder to write (must be empty or absent)")
        where.add_argument("--name", help="store as a new version of the unit-test export NAME (under OODC_EXPORT_ROOT)")
        parser.add_argument("--per-test", type=int, default=400, help="images per test (default 400, as NINCO)")
        parser.add_argument("--seed", type=int, default=0)
        parser.add_argument("--id-images", help="folder of ID images to mirror (default: the ID reference source)")
        parser.add_argument("--id-source", help="ID reference source to mirror (default: the first one)")
        parser.add_argument("--tests", help=f"comma-separated subset of: {', '.join(UNIT_TESTS)}")
        parser.add_argument("--convention", choices=CONVENTIONS, default=CONVENTIONS[0],
                            help="paper: recipes as NINCO's appendix G states them (default); ninco: as NINCO's published "
                                 "generator computes them (wrapping filters, leftover rows to the last stripe, colour range "
                                 "[c, c + 2 delta], truncated 8 bits, PNG/JPEG by sample index); docs/exports.md")
        parser.add_argument("--resume", action="store_true", help="with --name: resume that unit-test export if it is unfinished (stale)")
        parser.add_argument("--workers", type=int, default=max(1, min(4, os.cpu_count() or 1)), help="processes (default: up to 4)")

    def handle(self, *args, out, name, per_test, seed, id_images, id_source, tests, workers, convention="paper", resume=False, **opts):
        tests_chosen = comma_list(tests, "--tests")  # a typo in the list is named before any work
        if resume:
            if not name:
                raise CommandError("--resume needs --name: the unit-test export to resume")
            from curation.management.commands.export import resume_export
            from curation.models import Export

            return resume_export(self, name=name, kind=Export.Kind.UNIT_TESTS)
        if per_test < 1:
            raise CommandError(f"--per-test must be at least 1 (got {per_test})")
        source = None
        if id_source:
            source = Source.objects.filter(name=id_source, role=Source.Role.ID).first()
            if source is None:
                raise CommandError(f"--id-source {id_source}: no ID reference source by that name")
        if name:
            if id_images or tests:
                raise CommandError("--name stores the full set mirroring an ID source; use --out for --id-images or --tests")
            try:
                export = unit_tests_create(name=name, per_test=per_test, seed=seed, id_source=source, workers=workers, enqueue=False,
                                           convention=convention)
            except ExportRequestError as exc:
                raise CommandError(str(exc)) from None
            with InlineBar(f"unit tests {export.label}") as bar:
                export = export_run_inline(export=export, progress=bar.update, on_total=bar.on_total)
            if export.status != "done":
                raise CommandError(f"{export.label}: {export.message}")
            self.stdout.write(self.style.SUCCESS(f"{export.message} (verify: python manage.py verify_export {export_path(export)})"))
            return
        target = output_folder(out, "--out")
        if id_images:
            try:
                samples, refused = id_samples_from_folder(Path(id_images))
            except FileNotFoundError as exc:
                raise CommandError(str(exc)) from None
        else:
            source = source or Source.objects.filter(role=Source.Role.ID).order_by("pk").first()
            if source is None:
                raise CommandError("no ID images to mirror: pass --id-images DIR, or register an ID reference source "
                                   "(python manage.py add_source NAME PATH --role id)")
            samples, refused = id_samples_of_source(source)
        for rel, problem in refused:
            self.stderr.write(f"skipped ID image {rel}: {problem}")
        if not samples:
            raise CommandError("no readable ID image to mirror" + (f" in {id_images}" if id_images else ""))
        chosen = tests_chosen or list(UNIT_TESTS)
        from pipelines.export import write as px

        with tqdm(total=per_test * len(chosen), desc="unit tests", unit="img", file=sys.stderr, dynamic_ncols=True) as bar:
            try:
                rows = write_unit_tests(target, samples=samples, per_test=per_test, seed=seed, tests=chosen, workers=workers,
                                        progress=bar.update, convention=convention)
            except (KeyError, ValueError) as exc:
                raise CommandError(str(exc.args[0] if exc.args else exc)) from None
        manifest = {"format": px.MANIFEST_FORMAT, "id": None, "name": target.name, "version": None, "kind": "unit_tests", "split": "unit-tests",
                    "config": {"per_test": per_test, "seed": seed, "tests": chosen, "id_images": str(id_images or source.name),
                               "convention": convention},
                    "recipe": unit_tests_recipe_text(convention),
                    "counts": {"images": len(rows), "id_samples": len(samples)}, "files": px.hash_tree(target)}
        px.write_manifest(target, manifest)
        origin = f"{id_images}" if id_images else f"source {source.name}"
        self.stdout.write(self.style.SUCCESS(f"{len(rows)} images ({len(chosen)} tests x {per_test}) written to {target}, "
                                             f"mirroring the sizes and formats of {len(samples)} ID image(s) of {origin}"))
