from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from curation.management.progress import InlineBar, resume_and_wait, wait_for_job
from curation.models import ClassVisualSignal, Job, Source
from curation.services.image_pipeline import JobAlreadyRunning, PipelineError, dedup_run_inline, dedup_start, extract_run_inline, extract_start
from pipelines.features.classifiers import PRODUCTION_MODEL, ModelUnavailable


class Command(BaseCommand):
    help = (
        "Predictions and features for every readable image of the sources (once per model), then near-duplicate "
        "groups across the candidate sources, duplicates of ID images, similarity to the nearest ID image and "
        "the per-class visual-ambiguity signal. Runs on the Celery workers when CELERY_BROKER_URL is set."
    )

    def add_arguments(self, parser):
        parser.add_argument("--sources", nargs="*", help="source names (default: every registered source)")
        parser.add_argument("--model", default=None, help=f"default {settings.DEFAULT_MODEL}; production choice: {PRODUCTION_MODEL}")
        parser.add_argument("--weights", help="checkpoint file for the model, where the hub is unreachable")
        parser.add_argument("--no-dedup", action="store_true", help="extract only")
        parser.add_argument("--skip-removed-classes", action="store_true",
                            help="leave out the images of classes the latest class filter run removed (run filter_classes first)")
        parser.add_argument("--no-wait", action="store_true", help="queue the extraction jobs and return")
        parser.add_argument("--resume", action="store_true",
                            help="resume a stale extraction or duplicate-search job of these sources and model instead of refusing")

    def handle(self, *args, sources=None, model=None, weights=None, no_dedup=False, no_wait=False, resume=False,
               skip_removed_classes=False, **opts):
        model = model or settings.DEFAULT_MODEL
        qs = Source.objects.order_by("role", "name")
        if sources:
            found = {s.name: s for s in qs.filter(name__in=sources)}
            missing = [n for n in sources if n not in found]
            if missing:
                raise CommandError(f"no such source(s): {', '.join(missing)}; registered: {', '.join(qs.values_list('name', flat=True)) or 'none'}")
            chosen = [found[n] for n in sources]
        else:
            chosen = list(qs)
        if not chosen:
            raise CommandError("no sources registered; add one with `manage.py add_source NAME PATH`")
        if settings.CELERY_TASK_ALWAYS_EAGER:  # (queued: the workers load it, and a failure fails the job)
            try:
                from curation.services.loaded_models import loaded_model

                loaded_model(model, weights or "")  # fail before any job if the weights cannot be had
            except ModelUnavailable as exc:
                raise CommandError(str(exc)) from None
        jobs = []
        for source in chosen:
            try:
                job = extract_start(source=source, model_name=model, weights=weights, enqueue=not settings.CELERY_TASK_ALWAYS_EAGER,
                                    skip_removed_classes=skip_removed_classes)
            except JobAlreadyRunning as exc:
                if not resume:
                    raise CommandError(str(exc)) from None
                jobs.append(resume_and_wait(self, exc.job, desc=f"{model} {source.name}"))
                continue
            except PipelineError as exc:
                raise CommandError(str(exc)) from None
            if settings.CELERY_TASK_ALWAYS_EAGER:
                job = self._inline(job, source)
            jobs.append(job)
        if not settings.CELERY_TASK_ALWAYS_EAGER:
            self.stdout.write(f"Queued {len(jobs)} extraction job(s): " + ", ".join(f"#{j.pk} {j.source.name}" for j in jobs))
            if no_wait:
                return
            jobs = [j if j.status in (Job.Status.DONE, Job.Status.FAILED) else wait_for_job(j, desc=f"{model} {j.source.name}")
                    for j in jobs]
        failed = [j for j in jobs if j.status != Job.Status.DONE]
        for j in jobs:
            self.stdout.write(f"  {j.source.name:<20} {j.status}: {j.message}")
        if failed:
            raise CommandError(f"{len(failed)} extraction job(s) failed: " + "; ".join(f"#{j.pk}: {j.message}" for j in failed))
        if no_dedup:
            return
        try:
            job = dedup_start(model_name=model, enqueue=not settings.CELERY_TASK_ALWAYS_EAGER)
        except JobAlreadyRunning as exc:
            if not resume:
                raise CommandError(str(exc)) from None
            job = resume_and_wait(self, exc.job, desc="near-duplicates")
        else:
            job = dedup_run_inline(job=job) if settings.CELERY_TASK_ALWAYS_EAGER else wait_for_job(job, desc="near-duplicates", unit="step")
        if job.status != Job.Status.DONE:
            raise CommandError(f"duplicate search job #{job.pk} {job.status}: {job.message}")
        self.stdout.write(self.style.SUCCESS(f"Near-duplicates (threshold {job.config['threshold']}): {job.message}"))
        for s in ClassVisualSignal.objects.filter(model_name=model, flagged=True).select_related("candidate_class__source"):
            self.stdout.write(f"  {s.candidate_class}: {s.reason} ({s.top_share:.0%} of {s.n_images} images are '{s.top_label}')")

    def _inline(self, job, source):
        with InlineBar(f"{job.config['model']} {source.name}") as bar:
            try:
                return extract_run_inline(job=job, progress=bar.update, on_total=bar.on_total)
            except ModelUnavailable as exc:
                raise CommandError(str(exc)) from None
