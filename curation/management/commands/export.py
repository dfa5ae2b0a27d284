from django.core.management.base import BaseCommand, CommandError

from curation.management.cli import comma_list
from curation.management.progress import InlineBar, resume_and_wait, wait_for_job
from curation.models import Export, Source
from curation.services.exports import ExportRequestError, check_export_names, export_create, export_path, export_run_inline
from pipelines.classes.semantic import DIFFICULTY_HELP
from pipelines.export.diff import summary_line
from pipelines.export.write import LAYOUTS


def read_wnids(classes: str | None, classes_file: str | None) -> list[str]:
    wnids = comma_list(classes, "--classes")
    if classes_file:
        try:
            with open(classes_file, encoding="utf-8") as fh:
                wnids += [line.split(",")[0].strip() for line in fh if line.strip() and not line.startswith("#")]
        except OSError as exc:
            raise CommandError(f"--classes-file {classes_file}: {exc.strerror or exc}") from None
    return wnids


class Command(BaseCommand):
    help = ("Export the clean images of candidate sources (final label ood, class kept) as a new, immutable version: "
            "NINCO / ImageNet-OOD / OpenOOD layouts, manifest.json with every checksum, decisions.csv. "
            "A leakage check (ID reference images, other splits) blocks the export unless overridden with a note.")

    def add_arguments(self, parser):
        parser.add_argument("--name", required=True, help="export name (a slug); each export under it gets the next version")
        parser.add_argument("--source", action="append", dest="sources", help="candidate source (repeat for several; required)")
        parser.add_argument("--classes", help="comma-separated wnids to export (default: every class)")
        parser.add_argument("--classes-file", help="file with one wnid per line")
        parser.add_argument("--min-per-class", type=int, default=1, help="classes with fewer clean images are left out (default 1)")
        parser.add_argument("--layout", action="append", dest="layouts", choices=list(LAYOUTS),
                            help="a layout to write, repeatable (default: every one): " + "; ".join(
                                layout.description for layout in LAYOUTS.values()))
        parser.add_argument("--split", default="test", help="split name; images may not be near-duplicates of another split's (default test)")
        parser.add_argument("--copy", action="store_true", help="copy files instead of hard-linking them")
        parser.add_argument("--override-leakage", default="", metavar="NOTE", help="export despite leakage, recording this note")
        parser.add_argument("--difficulty-split", nargs="?", const="median", default=None, metavar="SPEC",
                            help="also write easy/hard sub-splits of the OOD classes by semantic similarity to the closest ID "
                                 f"class: {DIFFICULTY_HELP}")
        parser.add_argument("--include-certified", action="store_true",
                            help="also export the unreviewed images a met certification admits (`certify`; off by default)")
        parser.add_argument("--warn-loss", type=float, default=None, metavar="SHARE",
                            help="warn when this export loses more than this share of the previous version's images "
                                 "(default OODC_EXPORT_WARN_LOSS, 0.2); the difference is always listed in diff.csv")
        parser.add_argument("--queue", action="store_true", help="run on the Celery workers and wait, instead of in this process")
        parser.add_argument("--resume", action="store_true",
                            help="resume the unfinished (stale) export NAME instead of starting a new version")

    def handle(self, *args, name, sources, classes, classes_file, min_per_class, layouts, split, copy, override_leakage, queue,
               resume=False, difficulty_split=None, include_certified=False, warn_loss=None, **opts):
        if resume:
            return resume_export(self, name=name, kind=Export.Kind.DATASET)
        if not sources:
            raise CommandError("--source is required: the candidate source(s) to export (repeat --source for several)")
        comma_list(classes, "--classes")  # a typo in the list is named before anything is looked up
        try:
            check_export_names(name, split, name_label="--name", split_label="--split")
        except ExportRequestError as exc:
            raise CommandError(str(exc)) from None
        found = {s.name: s for s in Source.objects.filter(name__in=sources)}
        missing = [s for s in sources if s not in found]
        if missing:
            raise CommandError(f"unknown source(s) {', '.join(missing)}; known: {', '.join(Source.objects.values_list('name', flat=True)) or 'none'}")
        try:
            export = export_create(name=name, sources=[found[s] for s in sources], wnids=read_wnids(classes, classes_file),
                                   min_per_class=min_per_class, layouts=layouts, split=split, link=not copy,
                                   override_leakage=override_leakage, difficulty=difficulty_split, enqueue=queue,
                                   include_certified=include_certified, warn_loss=warn_loss)
        except ExportRequestError as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(f"export {export.label} (#{export.pk}) requested")
        if queue:
            wait_for_job(export.job, desc=f"export {export.label}")
            export.refresh_from_db()
        else:
            with InlineBar(f"export {export.label}") as bar:
                export = export_run_inline(export=export, progress=bar.update, on_total=bar.on_total)
        report(self, export)
        if export.status != Export.Status.DONE:
            raise CommandError(not_done(export))


def not_done(export: Export) -> str:
    """The last line of a CLI export that did not finish."""
    if export.status == Export.Status.FAILED:
        return (f"export {export.name} failed, nothing was written and its version number is free again "
                f"(attempt #{export.pk}): {export.message}")
    return f"export {export.label} {export.status}: {export.message}"


def resume_export(cmd, *, name: str, kind: str) -> None:
    export = Export.objects.filter(name=name, kind=kind, status__in=[Export.Status.PENDING, Export.Status.RUNNING]).order_by("-version").first()
    if export is None:
        raise CommandError(f"--resume: no unfinished export named {name!r}; "
                           "`python manage.py resume_job --list` lists every unfinished job")
    cmd.stdout.write(f"resuming export {export.label} (#{export.pk}, job #{export.job_id})")
    resume_and_wait(cmd, export.job, desc=f"export {export.label}")
    export.refresh_from_db()
    report(cmd, export)
    if export.status != Export.Status.DONE:
        raise CommandError(not_done(export))


def report(cmd, export: Export) -> None:
    if export.status == Export.Status.BLOCKED:
        cmd.stdout.write(cmd.style.ERROR("Leakage check failed:"))
        for v in export.leakage.get("violations", [])[:50]:
            similarity = f", similarity {v['similarity']}" if v["similarity"] is not None else ""
            cmd.stdout.write(f"  {v['path']}: {v['kind']} {v['with']} ({v['against']}{similarity})")
        return
    if export.status != Export.Status.DONE:
        return
    c = export.counts
    cmd.stdout.write(f"  {c.get('images', 0)} images in {c.get('classes', 0)} classes; excluded: "
                     + (", ".join(f"{k} {v}" for k, v in c.get("excluded", {}).items()) or "none"))
    classes = c.get("difficulty", {}).get("classes", {})
    for wnid, row in list(c.get("per_class", {}).items())[:40]:
        cmd.stdout.write(f"    {wnid} {row['name']:<30} {row['images']}" + (f"  {classes[wnid]}" if wnid in classes else ""))
    if c.get("difficulty"):
        d = c["difficulty"]
        cmd.stdout.write(f"  difficulty split ({d['rule']}): hard {d['hard']['classes']} classes / {d['hard']['images']} images, "
                         f"easy {d['easy']['classes']} classes / {d['easy']['images']} images")
    diff = c.get("diff")
    if diff:
        cmd.stdout.write(f"  {summary_line(diff)} (every image in {export_path(export) / diff['file']})")
        for row in diff["classes_removed"][:20]:
            cmd.stdout.write(f"    class removed: {row['wnid']} {row['name']}")
        if diff["warning"]:
            cmd.stdout.write(cmd.style.WARNING(f"  WARNING: {diff['warning']}"))
    elif export.kind == Export.Kind.DATASET:
        cmd.stdout.write(f"  the first version of {export.name}: nothing to compare with")
    cmd.stdout.write(cmd.style.SUCCESS(f"Wrote {export_path(export)} (check it with: python manage.py verify_export {export_path(export)})"))
