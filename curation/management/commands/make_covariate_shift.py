from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from curation.management.cli import comma_list, output_folder
from curation.management.progress import InlineBar
from curation.services.covariate_shift import CovariateShiftError, covariate_shift_make
from pipelines.evaluation.corruptions import BENCHMARK, EXTRA
from pipelines.names import PathOutsideRoot


class Command(BaseCommand):
    help = ("Write covariate-shifted copies of an ID source with ImageNet-C's corruptions (Hendrycks & Dietterich 2019), in "
            "ImageNet-C's layout DIR/<corruption>/<severity>/<class>/<file>, and register each corruption and severity as an "
            "ID source for `evaluate --id-shifted`. Deterministic under --seed.")

    def add_arguments(self, parser):
        parser.add_argument("--from", dest="from_spec", required=True, help="the ID source to corrupt: source:NAME (e.g. an ID test set)")
        parser.add_argument("--out", required=True, help="a new or empty folder for the corrupted copies")
        parser.add_argument("--corruptions", default="benchmark",
                            help=f"comma-separated names, or benchmark (the 15: {', '.join(BENCHMARK)}), extra (the 4: "
                                 f"{', '.join(EXTRA)}) or all (default: benchmark)")
        parser.add_argument("--severities", default="1,2,3,4,5", help="comma-separated severities 1..5 (default all five)")
        parser.add_argument("--seed", type=int, default=0, help="the same seed gives the same files (default 0)")
        parser.add_argument("--name", help="prefix of the registered sources (default: <source>-c): NAME-<corruption>-<severity>")
        parser.add_argument("--full-image", action="store_true",
                            help="corrupt the whole image instead of ImageNet-C's 256/224 centre crop")
        parser.add_argument("--no-register", action="store_true", help="write the files only; register no sources")
        parser.add_argument("--resume", action="store_true", help="continue an interrupted run in the same --out folder")

    def handle(self, *args, from_spec, out, corruptions, severities, seed, name=None, full_image=False, no_register=False,
               resume=False, **opts):
        corruptions, severities = ",".join(comma_list(corruptions, "--corruptions")), ",".join(comma_list(severities, "--severities"))
        if resume:
            folder = Path(out).expanduser()
            if not folder.is_dir():
                raise CommandError(f"--resume: {out} is not a folder an earlier run wrote; run without --resume")
        else:
            folder = output_folder(out, "--out")
        try:
            with InlineBar("corrupting", unit="img") as bar:
                sources, counts = covariate_shift_make(
                    from_spec=from_spec, out_dir=folder, corruptions=corruptions, severities=severities, seed=seed, name=name,
                    imagenet_c_crop=not full_image, register=not no_register, progress=bar.update, on_total=bar.on_total)
        except (CovariateShiftError, PathOutsideRoot) as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(self.style.SUCCESS(
            f"Covariate shift of {from_spec}: " + ", ".join(f"{k} {v}" for k, v in counts.items() if v) + f"; files in {folder}"))
        for s in sources:
            self.stdout.write(f"  source {s.name}: {s.description}")
        if counts.get("failed"):
            self.stdout.write(f"  {counts['failed']} file(s) failed: see {folder / 'provenance.csv'}")
        if sources:
            self.stdout.write("  evaluate with: python manage.py evaluate ... " + " ".join(f"--id-shifted source:{s.name}" for s in sources[:3])
                              + (" ..." if len(sources) > 3 else ""))
