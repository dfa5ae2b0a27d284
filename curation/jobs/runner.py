"""Running a job's steps, for every kind alike: on Celery workers (one task per step), or in
this process (commands without a broker), with the same heartbeat, leases, failure handling
and resume."""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Callable

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from curation.jobs.chunks import all_chunks_done, chunks_to_do, unfinished_chunks
from curation.jobs.heartbeat import Heartbeat, claim_chunk, is_stale, new_owner, release_chunk, silent_for
from curation.jobs.protocol import JobKind, NextPhase, Progress, kind_of, task_name
from curation.models import Job
from curation.outages import is_outage

log = logging.getLogger("curation.jobs")


class JobNotResumable(ValueError):
    """A resume that cannot be done as asked; the message says why and what to do."""


class JobActive(RuntimeError):
    """A second start of work that an unfinished job already does; ``job`` is that job, and
    the message says whether to wait for it or to resume it (when it is stale)."""

    def __init__(self, job: Job, message: str = ""):
        self.job = job
        super().__init__(describe(kind_of(job.kind), job) if is_stale(job) or not message else message)


def on_workers() -> bool:
    """The one rule for inline or queued: jobs go to Celery workers when a broker is set
    (CELERY_BROKER_URL). Without one, a command runs its job in its own process, and a job
    queued by a request runs on the web process's background thread (``jobs.background``),
    so no request waits for it (JOBS_IN_BACKGROUND; off only where a test wants the job
    finished when the request returns)."""
    return not settings.CELERY_TASK_ALWAYS_EAGER


def where_queued() -> str:
    """Where a job queued now will run, for messages."""
    if on_workers():
        return "queued for the Celery workers"
    return "queued on the web app's background worker" if settings.JOBS_IN_BACKGROUND else "queued to run in this process"


def dispatch(job: Job | int, step: str, index: int | None = None, *, countdown: float | None = None) -> None:
    """Queue one step of a job on its kind's queue (``countdown``: not before so many seconds);
    without a broker, run it here and now (it runs the steps after it the same way)."""
    job = job if isinstance(job, Job) else Job.objects.only("pk", "kind").get(pk=job)
    kind = kind_of(job.kind)
    args = (job.pk,) if index is None else (job.pk, index)
    if on_workers():
        from curation.celery import app

        app.send_task(task_name(kind.kind, step), args=args, queue=kind.queue(step), countdown=countdown)
        return
    try:
        run_step(job_id=job.pk, step=step, index=index)
    except Exception as exc:  # recorded on the job by run_step; the caller (a web request) goes on
        log.warning("job #%s (%s) failed in its %s step: %s: %s", job.pk, kind.kind, step, type(exc).__name__, exc)


def queued_message(job: Job, what: str, *, follow: str = "its progress is shown on this list") -> str:
    """What a page says once it has queued ``job``: done, failed, or queued and where, truly;
    ``follow`` says where to follow a queued job."""
    job.refresh_from_db(fields=["status", "message", "progress", "total"])
    if job.status == Job.Status.DONE:
        return f"{what}: done" + (f" ({job.message})" if job.message else "")
    if job.status == Job.Status.FAILED:
        return f"{what}: failed: {job.message}"
    return f"{what}: {where_queued()}; {follow}"


def enqueue_on_commit(job: Job) -> None:
    """Queue the job once the current transaction commits (the row must exist for the worker):
    its plan step on the Celery workers, or the whole job on the background thread."""
    if not on_workers() and settings.JOBS_IN_BACKGROUND:
        from curation.jobs import background

        transaction.on_commit(lambda: background.submit(job.pk, run_inline))
        return
    transaction.on_commit(lambda: dispatch(job, "plan"))


def run_step(*, job_id: int, step: str, index: int | None = None, queue_next: bool = True,
             progress: Progress | None = None, on_total: Callable[[int], None] | None = None) -> Any:
    """Run one step with a heartbeat; a failure is recorded by the kind and raised. With
    ``queue_next`` (workers) the following steps are queued: every chunk after the plan, the
    finalize step after the last chunk. Returns the plan's indices, the chunk's "last" flag
    (None when skipped), or what finalize returns."""
    job = Job.objects.only("pk", "kind", "status").filter(pk=job_id).first()
    if job is None:
        log.warning("job #%s no longer exists; its %s step is dropped", job_id, step)
        return None
    kind = kind_of(job.kind)
    owner = new_owner()
    try:
        if step == "plan":
            with Heartbeat(job_id):
                indices = kind.plan(job_id)
            if queue_next:
                for i in indices:
                    dispatch(job, "chunk", i)
                if not indices:
                    dispatch(job, "finalize")
            return indices
        if step == "chunk":
            assert index is not None
            wait = claim_chunk(job_id=job_id, index=index, owner=owner)
            if wait is None:
                log.info("job #%s chunk %s: done already; skipped", job_id, index)
                if queue_next:
                    _finalize_if_complete(job)
                return None
            if wait > 0:
                # Held by a lease that is live: its holder is working, or died less than a lease ago (Redis
                # hands a dead worker's chunk to another worker on its own schedule). Come back when the lease
                # has run out; by then the chunk is done (and this delivery ends) or free to take.
                log.info("job #%s chunk %s: held by a live lease for %.0f s more; retried then", job_id, index, wait)
                if queue_next and on_workers():  # (in-process there is no later: the holder finishes it)
                    dispatch(job, "chunk", index, countdown=wait + 1)
                return None
            try:
                with Heartbeat(job_id, owner=owner, chunk_index=index):
                    last = kind.process(job_id, index, progress, on_total)
            except BaseException:
                release_chunk(job_id=job_id, index=index, owner=owner)
                raise
            if queue_next:
                if last:
                    dispatch(job, "finalize")
                else:
                    _finalize_if_complete(job)
            return last
        if step == "finalize":
            with Heartbeat(job_id):
                result = kind.finalize(job_id)
            if isinstance(result, NextPhase) and queue_next:  # a phased kind wrote its next phase's chunks
                for i in result.indices:
                    dispatch(job, "chunk", i)
                if not result.indices:
                    dispatch(job, "finalize")
            return result
        raise ValueError(f"unknown step {step!r}")
    except Exception as exc:
        if is_outage(exc):  # the database or broker is restarting: the work is not wrong; retried or resumed, not failed
            log.warning("job #%s (%s) %s step hit an outage: %s: %s", job_id, kind.kind, step, type(exc).__name__, exc)
            raise
        kind.fail(job_id, exc)
        raise


def _finalize_if_complete(job: Job) -> None:
    """Queue the finalize step of an unfinished job whose chunks are all done. The chunk that
    finished last queues it (``chunks.chunk_finish`` tells exactly one chunk it was the last);
    this covers the times that step was lost: a broker restarting as it was sent, or the worker
    killed between the chunk's commit and the send (the chunk's delivery comes again, finds its
    chunk done, and queues it here). Finalize steps are idempotent, so one queued twice does
    nothing the second time."""
    if not all_chunks_done(job.pk):
        return
    if Job.objects.filter(pk=job.pk, status__in=[Job.Status.PENDING, Job.Status.RUNNING]).exists():
        dispatch(job, "finalize")


def run_inline(job: Job, *, progress: Progress | None = None, on_total: Callable[[int], None] | None = None) -> Any:
    """Every step of ``job`` in this process, as the workers would run them (commands without a
    broker, and resumes of such jobs). Chunks another live process holds are left to it; the
    job then stays unfinished and says so."""
    indices = run_step(job_id=job.pk, step="plan", queue_next=False)
    job.refresh_from_db()
    if on_total:
        on_total(job.total)
    if progress and job.progress:
        progress(job.progress)  # a resumed job: what is done already
    while True:
        for index in indices or []:
            run_step(job_id=job.pk, step="chunk", index=index, queue_next=False, progress=progress, on_total=on_total)
        held = unfinished_chunks(job.pk)
        if held:
            raise JobNotResumable(f"job #{job.pk}: {held} chunk(s) are held by another live process; "
                                  "wait for it, or resume once it is stale")
        result = run_step(job_id=job.pk, step="finalize", queue_next=False)
        if not isinstance(result, NextPhase):
            return result
        indices = result.indices  # a phased kind's next phase
        if on_total:
            job.refresh_from_db(fields=["total"])
            on_total(job.total)


@dataclass
class Resumed:
    job: Job
    queued: int  # steps queued (workers), 0 when run inline
    result: Any = None


def check_resumable(job: Job, *, force: bool = False) -> None:
    if job.status in (Job.Status.DONE, Job.Status.FAILED):
        raise JobNotResumable(f"job #{job.pk} ({job.kind}) is {job.status}: there is nothing to resume")
    if not force and not is_stale(job):
        raise JobNotResumable(
            f"job #{job.pk} ({job.kind}) is {job.status} and {job.worker or 'a worker'} reported {silent_for(job)} s ago "
            f"(stale after {settings.JOB_STALE_AFTER_S:g} s): it is not lost; wait for it")


def resume(job: Job, *, user=None, force: bool = False, progress: Progress | None = None,
           on_total: Callable[[int], None] | None = None, background: bool = False) -> Resumed:
    """Carry on with an unfinished, stale job from where it stopped: its unfinished chunks (or
    its plan, or its finalize step) are queued again, or run here without a broker. Done
    chunks are never redone; a chunk a lost worker held is redone from the start. With
    ``background`` (a request) a job without a broker goes to the background thread instead of
    running in the caller."""
    from curation.audit import audit_record

    job.refresh_from_db()
    check_resumable(job, force=force)
    Job.objects.filter(pk=job.pk).update(heartbeat_at=timezone.now())  # not stale while it waits
    audit_record(actor=user, action="job_resumed", target=job, data={"kind": job.kind, "progress": job.progress, "total": job.total})
    if not on_workers() and background and settings.JOBS_IN_BACKGROUND:  # a request: never wait for the work
        from curation.jobs import background as bg

        bg.submit(job.pk, run_inline)
        return Resumed(job=job, queued=1)
    if not on_workers():
        return Resumed(job=job, queued=0, result=run_inline(job, progress=progress, on_total=on_total))
    pending = chunks_to_do(job)
    if pending is None:  # never planned
        dispatch(job, "plan")
        return Resumed(job=job, queued=1)
    for index in pending:
        dispatch(job, "chunk", index)
    if not pending:
        dispatch(job, "finalize")
    return Resumed(job=job, queued=max(1, len(pending)))


def describe(kind: JobKind, job: Job) -> str:
    """What a refused second start says about the job in the way."""
    if is_stale(job):
        return (f"{kind.label} job #{job.pk} is stale: no worker has reported on it for {silent_for(job)} s "
                f"({job.progress}/{job.total} done); resume it with `python manage.py resume_job {job.pk}`"
                + (f" or {kind.resume_hint}" if kind.resume_hint else ""))
    return (f"{kind.label} job #{job.pk} is already {job.status} ({job.progress}/{job.total}); wait for it to finish")
