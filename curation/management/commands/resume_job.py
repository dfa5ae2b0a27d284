from django.core.management.base import BaseCommand, CommandError

from curation.jobs import registered_kinds, silent_for, stale_filter, state
from curation.management.progress import resume_and_wait
from curation.models import Job


class Command(BaseCommand):
    help = ("List unfinished jobs, or resume stale ones (their worker died, or the command running them was stopped) from "
            "where they stopped: done chunks are kept, the rest is queued again (or run here without a broker).")

    def add_arguments(self, parser):
        parser.add_argument("job_ids", nargs="*", type=int, metavar="JOB_ID", help="jobs to resume")
        parser.add_argument("--stale", action="store_true", help="resume every stale job")
        parser.add_argument("--kind", choices=registered_kinds(), help="with --stale or --list: only jobs of this kind")
        parser.add_argument("--list", dest="list_jobs", action="store_true", help="list unfinished jobs with their state and last sign of life")
        parser.add_argument("--force", action="store_true", help="resume even a job that is not stale yet (a worker may still hold it)")

    def handle(self, *args, job_ids, stale, kind, list_jobs, force, **opts):
        unfinished = Job.objects.filter(status__in=[Job.Status.PENDING, Job.Status.RUNNING]).order_by("pk")
        if kind:
            unfinished = unfinished.filter(kind=kind)
        if list_jobs or not (job_ids or stale):
            rows = [f"  #{j.pk:<6} {j.kind:<12} {state(j):<8} {j.progress}/{j.total}  last sign of life {silent_for(j)} s ago"
                    f"{' from ' + j.worker if j.worker else ''}" for j in unfinished]
            self.stdout.write("\n".join(rows) if rows else "No unfinished jobs.")
            if not (job_ids or stale):
                return
        jobs = list(unfinished.filter(stale_filter())) if stale else []
        for pk in job_ids:
            job = Job.objects.filter(pk=pk).first()
            if job is None:
                raise CommandError(f"no job #{pk}; list the unfinished ones with `python manage.py resume_job --list`")
            jobs.append(job)
        if stale and not jobs:
            self.stdout.write("No stale jobs.")
            return
        failed = []
        for job in jobs:
            job = resume_and_wait(self, job, desc=f"{job.kind} #{job.pk}", force=force)
            self.stdout.write(f"Job #{job.pk} ({job.kind}) {job.status}: {job.message}")
            if job.status != Job.Status.DONE:
                failed.append(job)
        if failed:
            raise CommandError(f"{len(failed)} job(s) did not finish: " + ", ".join(f"#{j.pk} {j.status}" for j in failed))
