"""Stale jobs resumed without a human (issue 38).

A job whose worker died (killed, out of memory, its machine gone) turns stale after
``JOB_STALE_AFTER_S`` (60 s) without a sign of life; the tasks that worker held come back from
Redis only after the broker's visibility timeout (an hour), and ``resume_job`` needs a person.
Every Celery worker therefore runs a **sweep** on a thread of its main process (started when the
worker is ready: workers import this module, ``CELERY_IMPORTS`` in curation/settings.py): every ``JOB_STALE_SWEEP_S`` seconds it looks for
unfinished jobs silent for ``JOB_AUTO_RESUME_AFTER_S`` (and stale), and resumes them with the
runner's own ``resume`` (done chunks kept, the rest queued again).

Guards, so that nothing runs twice:

- **two sweepers** (every worker sweeps): a job is *claimed* by one UPDATE that moves its last
  sign of life to now only if it is still the one the sweeper read and the job is still silent
  (PostgreSQL re-checks the condition on the row a concurrent UPDATE just changed, so exactly
  one claim succeeds); the loser sees a job that reported a moment ago and leaves it;
- **a redelivery**: the old worker's tasks, redelivered by Redis after the visibility timeout,
  find their chunks done (skipped) or leased by the live worker (skipped): the chunk
  bookkeeping's rules, unchanged here;
- **a job no worker can serve** (no worker on its queue, a step that kills its worker each
  time): resumed at most ``JOB_AUTO_RESUME_MAX`` times (3); after that the sweep leaves it
  stale, says so once in the job's message and the audit log, and a person decides
  (``resume_job``).

Each automatic resume is audited (``job_auto_resumed``: how long the job was silent, which
process resumed it, the attempt) and written in the job's message until its work reports.
"""
from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from datetime import timedelta

from celery.signals import worker_ready, worker_shutdown
from django.conf import settings
from django.db import connection
from django.utils import timezone

from curation.audit import audit_record
from curation.jobs.heartbeat import process_name, silent_for, stale_filter
from curation.models import AuditLog, Job

log = logging.getLogger("curation.jobs")

RESUMED = "job_auto_resumed"
GAVE_UP = "job_auto_resume_given_up"


@dataclass
class Swept:
    job_id: int
    kind: str
    silent_s: int
    action: str  # RESUMED, GAVE_UP, or "lost_claim" (another sweeper took it first), "finished" (done meanwhile)
    attempt: int = 0


def auto_resume_after() -> float:
    """Seconds of silence after which a job is resumed automatically (never before it is stale)."""
    return max(settings.JOB_AUTO_RESUME_AFTER_S, settings.JOB_STALE_AFTER_S)


def silent_jobs(now=None):
    """Unfinished jobs silent for ``auto_resume_after()`` seconds: the stale rule
    (``heartbeat.stale_filter``), judged that much later."""
    now = now or timezone.now()
    return Job.objects.filter(stale_filter(now - timedelta(seconds=auto_resume_after() - settings.JOB_STALE_AFTER_S)))


def _attempts(job: Job) -> int:
    return AuditLog.objects.filter(action=RESUMED, target_type=Job._meta.label_lower, target_id=str(job.pk)).count()


def _claim(job: Job, now) -> bool:
    """Take the job for this sweeper: its last sign of life moves to ``now`` if it is still the
    one read, and the job still silent and unfinished. True for exactly one of racing sweepers."""
    same = {"heartbeat_at": job.heartbeat_at} if job.heartbeat_at is not None else {"heartbeat_at__isnull": True}
    return bool(silent_jobs(now).filter(pk=job.pk, **same).update(heartbeat_at=now))


def sweep_stale_jobs(*, now=None) -> list[Swept]:
    """Resume every job silent for ``auto_resume_after()`` seconds (at most
    ``JOB_AUTO_RESUME_MAX`` times each), once whatever the number of sweepers. Returns what was
    done, job by job."""
    from curation.jobs.runner import JobNotResumable, resume

    now = now or timezone.now()
    out = []
    for job in silent_jobs(now).order_by("pk"):
        silent = silent_for(job, now=now)
        attempt = _attempts(job) + 1
        if attempt > settings.JOB_AUTO_RESUME_MAX:
            if not AuditLog.objects.filter(action=GAVE_UP, target_type=Job._meta.label_lower, target_id=str(job.pk)).exists():
                note = (f"resumed automatically {settings.JOB_AUTO_RESUME_MAX} times and still silent ({silent} s): left for a person; "
                        f"see `python manage.py resume_job --list`, then `resume_job {job.pk}`")
                Job.objects.filter(pk=job.pk).update(message=note)
                audit_record(actor=None, action=GAVE_UP, target=job, data={"kind": job.kind, "silent_s": silent, "by": process_name()})
                log.warning("job #%s (%s): %s", job.pk, job.kind, note)
                out.append(Swept(job.pk, job.kind, silent, GAVE_UP, attempt - 1))
            continue
        if not _claim(job, timezone.now()):
            out.append(Swept(job.pk, job.kind, silent, "lost_claim"))
            continue
        note = (f"resumed automatically by {process_name()} after {silent} s without a sign of life "
                f"(attempt {attempt} of {settings.JOB_AUTO_RESUME_MAX})")
        audit_record(actor=None, action=RESUMED, target=job,
                     data={"kind": job.kind, "silent_s": silent, "attempt": attempt, "by": process_name(),
                           "progress": job.progress, "total": job.total})
        Job.objects.filter(pk=job.pk).update(message=note)
        try:
            resume(job, force=True)  # claimed just now, so no longer stale: the claim is the check
        except JobNotResumable:  # it finished between the read and the claim
            out.append(Swept(job.pk, job.kind, silent, "finished", attempt))
            continue
        log.warning("job #%s (%s): %s", job.pk, job.kind, note)
        out.append(Swept(job.pk, job.kind, silent, RESUMED, attempt))
    return out


class Sweeper(threading.Thread):
    """The sweep, every ``every`` seconds, on a daemon thread of a worker's main process; the
    first one at once (a worker started after every other died resumes their jobs)."""

    def __init__(self, every: float):
        super().__init__(name="oodc-stale-sweep", daemon=True)
        self.every = every
        self.stopping = threading.Event()

    def run(self) -> None:
        while not self.stopping.is_set():
            try:
                sweep_stale_jobs()
            except Exception:  # a database outage, a broker error: the next sweep tries again
                log.exception("stale-job sweep failed; trying again in %s s", self.every)
            finally:
                connection.close()  # this thread's connection: not kept between sweeps
            self.stopping.wait(self.every)

    def stop(self) -> None:
        self.stopping.set()


_sweeper: Sweeper | None = None


def start_sweeper() -> Sweeper | None:
    """Start this process's sweep (once); ``JOB_STALE_SWEEP_S`` = 0 turns it off."""
    global _sweeper
    if settings.JOB_STALE_SWEEP_S <= 0 or (_sweeper is not None and _sweeper.is_alive()):
        return _sweeper
    _sweeper = Sweeper(settings.JOB_STALE_SWEEP_S)
    _sweeper.start()
    return _sweeper


def stop_sweeper() -> None:
    if _sweeper is not None:
        _sweeper.stop()


@worker_ready.connect
def _start_on_worker(**_kwargs):
    start_sweeper()


@worker_shutdown.connect
def _stop_on_worker(**_kwargs):
    stop_sweeper()
