from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from curation import selectors
from curation.management.progress import InlineBar, resume_and_wait, wait_for_job
from curation.models import Job, Source
from curation.services.ingest import IngestAlreadyRunning, ingest_run_inline, ingest_start
from curation.services.sources import SourceError, source_register
from pipelines.classes.folders import ClassMapError
from pipelines.classes.wordnet import WordNetUnavailable
from pipelines.sources.layouts import DEFAULT_LAYOUT, SOURCE_LAYOUTS
from pipelines.sources.layouts.lists import LIST_FORMATS


class Command(BaseCommand):
    help = (
        "Register a source and ingest it: a folder of images (PATH/<class folder>/<image files>), or archives read in "
        "place (--layout class-tars|wds|parquet), or only the images a published list names (--list). "
        "Re-running adds new images, notices changed ones (and changed archives) and marks missing ones."
    )

    def add_arguments(self, parser):
        parser.add_argument("name", help="Short unique name (letters, digits, - and _)")
        parser.add_argument("path", help="The source's root folder (the folder of class folders, tars, shards or Parquet files)")
        parser.add_argument("--layout", choices=list(SOURCE_LAYOUTS), default=DEFAULT_LAYOUT,
                            help="How PATH holds its images: " + "; ".join(f"{n}: {lay.description}" for n, lay in SOURCE_LAYOUTS.items()))
        options = {o: h for lay in SOURCE_LAYOUTS.values() for o, h in lay.options.items()}
        for option, text in options.items():
            owners = ", ".join(n for n, lay in SOURCE_LAYOUTS.items() if option in lay.options)
            parser.add_argument(f"--{option.replace('_', '-')}", dest=f"opt_{option}", metavar="VALUE", help=f"({owners}) {text}")
        parser.add_argument("--list", dest="list_path", metavar="FILE",
                            help="Only the images this published list names, over PATH in its --layout (an OpenOOD imglist, "
                                 "NINCO's file_list.csv, ImageNet-OOD's path list)")
        parser.add_argument("--list-format", choices=list(LIST_FORMATS), default="",
                            help="; ".join(f"{n}: {t}" for n, t in LIST_FORMATS.items()) + " (default paths)")
        parser.add_argument("--role", choices=Source.Role.values, default=Source.Role.CANDIDATE,
                            help="candidate (OOD candidates, default) or id (an in-distribution reference set)")
        parser.add_argument("--class-map", help="CSV of folder,wnid for folders not named by wnid")
        parser.add_argument("--rehash", action="store_true", help="Re-read every file, not only new or changed ones")
        parser.add_argument("--no-wait", action="store_true", help="With a broker: queue the job and return")
        parser.add_argument("--resume", action="store_true",
                            help="Resume this source's stale ingest job (its worker died) from where it stopped")
        parser.add_argument("--show-broken", type=int, default=20, help="How many broken files to list (default 20)")

    def handle(self, *args, name, path, role, class_map=None, rehash=False, no_wait=False, resume=False, show_broken=20,
               layout=DEFAULT_LAYOUT, list_path=None, list_format="", **opts):
        layout_options = {k.removeprefix("opt_"): v for k, v in opts.items() if k.startswith("opt_") and v is not None}
        try:
            reg = source_register(name=name, root=path, role=role, class_map_path=class_map, layout=layout,
                                  layout_options=layout_options, list_path=list_path, list_format=list_format)
        except (SourceError, ClassMapError, WordNetUnavailable) as exc:
            raise CommandError(str(exc)) from None
        source = reg.source
        listed = (source.layout_options or {}).get("list")
        if source.layout == DEFAULT_LAYOUT and not listed:
            self._classes(source, reg.classes, "class folders")
        else:
            self.stdout.write(f"Source {source.name!r} ({source.get_role_display()}) at {source.root}, layout {source.layout}"
                              + (f", the {listed['entries']} entries of {listed['path']} (sha256 {listed['sha256'][:12]}...)" if listed else "")
                              + ": its classes are read with its members")

        eager = settings.CELERY_TASK_ALWAYS_EAGER
        try:
            job = ingest_start(source=source, rehash=rehash, enqueue=not eager)
        except IngestAlreadyRunning as exc:
            if not resume:
                raise CommandError(str(exc)) from None
            job = resume_and_wait(self, exc.job, desc=f"ingest {source.name}")
            self._report(job, show_broken)
            if job.status == Job.Status.FAILED:
                raise CommandError(f"ingest job #{job.pk} failed: {job.message}")
            return
        else:
            if eager:
                job = self._run_inline(job)
            else:
                self.stdout.write(f"Queued ingest job #{job.pk} on the 'cpu' queue ({settings.CELERY_BROKER_URL.split('@')[-1]})")
        if not eager:
            if no_wait:
                return
            job = wait_for_job(job, desc=f"ingest {source.name}")
        self._report(job, show_broken)
        if job.status == Job.Status.FAILED:
            raise CommandError(f"ingest job #{job.pk} failed: {job.message}")

    def _run_inline(self, job):
        with InlineBar(f"ingest {job.source.name}") as bar:
            try:
                return ingest_run_inline(job=job, progress=bar.update, on_total=bar.on_total)
            except Exception as exc:
                raise CommandError(f"ingest job #{job.pk} failed: {type(exc).__name__}: {exc}") from exc

    def _classes(self, source, classes, what: str) -> None:
        unmapped = [c for c in classes if not c.wnid]
        self.stdout.write(f"Source {source.name!r} ({source.get_role_display()}) at {source.root}: "
                          f"{len(classes)} {what}, {len(classes) - len(unmapped)} mapped to WordNet")
        if unmapped:
            lines = "\n".join(f"  - {c.folder}: {c.mapping_note}" for c in unmapped[:50])
            more = f"\n  ... and {len(unmapped) - 50} more (see the admin's candidate classes)" if len(unmapped) > 50 else ""
            self.stderr.write(self.style.WARNING(
                f"Warning: {len(unmapped)} class(es) are unmapped (registered without a wnid; map them with --class-map):\n{lines}{more}"))

    def _report(self, job, show_broken):
        if job.source.layout != DEFAULT_LAYOUT or (job.source.layout_options or {}).get("list"):
            self._classes(job.source, list(job.source.classes.all()), "classes")
        self.stdout.write(self.style.SUCCESS(f"Job #{job.pk} {job.status}: {job.message}"))
        broken = selectors.source_broken_images(source=job.source)
        if broken:
            self.stdout.write(f"{len(broken)} broken or refused file(s), recorded with their reasons:")
            for img in broken[:show_broken]:
                self.stdout.write(f"  [{img.error_code}] {img.relative_path}: {img.error}")
            if len(broken) > show_broken:
                self.stdout.write(f"  ... and {len(broken) - show_broken} more (see the admin, filter by status)")
