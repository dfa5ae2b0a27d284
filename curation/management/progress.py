"""Terminal progress for jobs: inline runs drive a tqdm bar; queued runs poll the Job row."""
from __future__ import annotations

import sys
import time

from tqdm import tqdm

from curation.jobs import is_stale, silent_for, state
from curation.models import Job


def wait_for_job(job: Job, *, desc: str, poll: float = 0.5, timeout: float | None = None, unit: str = "img",
                 until_stale: bool = False) -> Job:
    """Show a bar fed from the Job row until the workers finish it (or ``timeout`` passes; or,
    with ``until_stale``, until no worker reports on it any more)."""
    start = time.monotonic()
    bar = tqdm(total=job.total or None, desc=desc, unit=unit, file=sys.stderr, dynamic_ncols=True)
    warned = False
    try:
        while True:
            job.refresh_from_db()
            if job.total and bar.total != job.total:
                bar.total = job.total
            bar.n = job.progress
            bar.set_postfix_str(state(job) if job.status in (Job.Status.PENDING, Job.Status.RUNNING) else job.status)
            bar.refresh()
            if job.status in (Job.Status.DONE, Job.Status.FAILED):
                return job
            if timeout is not None and time.monotonic() - start > timeout:
                return job
            if until_stale and is_stale(job):
                return job
            if is_stale(job) and not warned:
                warned = True
                tqdm.write(f"job #{job.pk} is stale: no worker has reported on it for {silent_for(job)} s (a worker died, or none "
                           f"serves its queue). Start a worker, or resume it: python manage.py resume_job {job.pk}", file=sys.stderr)
            time.sleep(poll)
    finally:
        bar.close()


class InlineBar:
    """A tqdm bar for a job run in this process: ``update`` takes processed counts, ``on_total``
    sets the total once the job has planned its work."""

    def __init__(self, desc: str, unit: str = "img"):
        self.bar = tqdm(desc=desc, unit=unit, file=sys.stderr, dynamic_ncols=True)
        self.update = self.bar.update

    def on_total(self, total: int) -> None:
        self.bar.total = total
        self.bar.refresh()

    def __enter__(self) -> "InlineBar":
        return self

    def __exit__(self, *exc) -> None:
        self.bar.close()


def resume_and_wait(cmd, job: Job, *, desc: str, force: bool = False) -> Job:
    """Resume a stale job (curation.jobs.resume) and follow it: in this process with a bar when
    no broker is set, else re-queued on the workers and watched from the Job row."""
    from django.core.management.base import CommandError

    from curation.jobs import JobNotResumable, on_workers, resume

    try:
        if on_workers():
            job.refresh_from_db()
            if not force and job.status in (Job.Status.PENDING, Job.Status.RUNNING) and not is_stale(job):
                # a worker took up the job's queued steps again (e.g. one started after the crash):
                # follow it; whatever the lost worker held is resumed once the job goes quiet
                cmd.stdout.write(f"job #{job.pk} is running again ({job.worker or 'a worker'} reported {silent_for(job)} s ago); "
                                 "following it, and resuming what is left if it goes quiet")
                job = wait_for_job(job, desc=desc, until_stale=True)
                if job.status in (Job.Status.DONE, Job.Status.FAILED):
                    return job
            r = resume(job, force=force)
            cmd.stdout.write(f"Re-queued {r.queued} step(s) of job #{job.pk} ({job.progress}/{job.total} done before)")
            return wait_for_job(job, desc=desc)
        with InlineBar(desc) as bar:
            resume(job, force=force, progress=bar.update, on_total=bar.on_total)
    except JobNotResumable as exc:
        raise CommandError(str(exc)) from None
    except Exception as exc:
        raise CommandError(f"resuming job #{job.pk} failed: {type(exc).__name__}: {exc}") from None
    job.refresh_from_db()
    return job
