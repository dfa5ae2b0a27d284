"""Signs of life: a job's heartbeat, a chunk's lease, and what "stale" means.

While a process works on a step it writes ``Job.heartbeat_at`` (and extends the lease of the
chunk it holds) every ``JOB_HEARTBEAT_S`` seconds, from a thread of its own. A killed process stops writing; after ``JOB_STALE_AFTER_S``
without a sign the job is stale, and its chunks' leases have run out with it, so a resumed
chunk may be taken by another process, while a live one is never taken from its holder.
"""
from __future__ import annotations

import os
import socket
import threading
import uuid
from datetime import timedelta

from django.conf import settings
from django.db import connection, connections
from django.db.models import Q
from django.utils import timezone

from curation.models import Job, JobChunk


def process_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def new_owner() -> str:
    """A lease owner: this process, and this one attempt (a redelivery in the same process is
    another attempt)."""
    return f"{process_name()}:{uuid.uuid4().hex[:8]}"


def lease_length() -> timedelta:
    return timedelta(seconds=settings.JOB_STALE_AFTER_S)


def claim_chunk(*, job_id: int, index: int, owner: str) -> float | None:
    """Take chunk ``index`` for ``owner``: 0.0 when taken; None when it is done (or gone);
    else the seconds until the live lease that holds it runs out."""
    now = timezone.now()
    taken = JobChunk.objects.filter(job_id=job_id, index=index, done=False).filter(
        Q(lease_until__isnull=True) | Q(lease_until__lt=now) | Q(lease_owner=owner)
    ).update(lease_owner=owner, lease_until=now + lease_length())
    if taken:
        return 0.0
    held = JobChunk.objects.filter(job_id=job_id, index=index, done=False).values_list("lease_until", flat=True).first()
    return None if held is None else max(0.0, (held - now).total_seconds())


def release_chunk(*, job_id: int, index: int, owner: str) -> None:
    JobChunk.objects.filter(job_id=job_id, index=index, lease_owner=owner).update(lease_until=None)


def beat(*, job_id: int, owner: str = "", chunk_index: int | None = None) -> None:
    now = timezone.now()
    Job.objects.filter(pk=job_id).update(heartbeat_at=now, worker=process_name())
    if chunk_index is not None and owner:
        JobChunk.objects.filter(job_id=job_id, index=chunk_index, lease_owner=owner, done=False).update(
            lease_until=now + lease_length())


class Heartbeat:
    """``with Heartbeat(job_id, ...):`` beats once on entry, then every interval from a thread
    with its own database connection, so a step that reports no progress for minutes (a large
    duplicate search) still looks alive."""

    def __init__(self, job_id: int, *, owner: str = "", chunk_index: int | None = None):
        self.job_id, self.owner, self.chunk_index = job_id, owner, chunk_index
        self.interval = float(settings.JOB_HEARTBEAT_S)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _run(self) -> None:
        try:
            while not self._stop.wait(self.interval):
                try:
                    beat(job_id=self.job_id, owner=self.owner, chunk_index=self.chunk_index)
                except Exception:  # a failed beat is retried next interval; the work goes on
                    connections.close_all()
        finally:
            connections.close_all()  # this thread's own connection

    def __enter__(self) -> "Heartbeat":
        beat(job_id=self.job_id, owner=self.owner, chunk_index=self.chunk_index)
        if not _in_memory_database():
            self._thread = threading.Thread(target=self._run, name=f"heartbeat-job-{self.job_id}", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.interval + 5)


def _in_memory_database() -> bool:
    # an in-memory SQLite database is private to its connection: another thread cannot write it
    return connection.vendor == "sqlite" and str(connection.settings_dict.get("NAME", "")) in ("", ":memory:")


def last_sign(job: Job):
    return job.heartbeat_at or job.started_at or job.created_at


def is_stale(job: Job, *, now=None) -> bool:
    """An unfinished job nobody has reported on for JOB_STALE_AFTER_S: its worker died, the
    command running it was stopped, or no worker serves its queue."""
    if job.status not in (Job.Status.PENDING, Job.Status.RUNNING):
        return False
    return ((now or timezone.now()) - last_sign(job)).total_seconds() > settings.JOB_STALE_AFTER_S


def state(job: Job, *, now=None) -> str:
    """done, failed, running, queued (pending, not stale) or stale."""
    if is_stale(job, now=now):
        return "stale"
    if job.status == Job.Status.PENDING:
        return "queued"
    return job.status


def silent_for(job: Job, *, now=None) -> int:
    return int(((now or timezone.now()) - last_sign(job)).total_seconds())


def stale_filter(now=None) -> Q:
    """A queryset filter for stale jobs (the same rule as ``is_stale``)."""
    cutoff = (now or timezone.now()) - timedelta(seconds=settings.JOB_STALE_AFTER_S)
    unfinished = Q(status__in=[Job.Status.PENDING, Job.Status.RUNNING])
    return unfinished & (
        Q(heartbeat_at__lt=cutoff)
        | Q(heartbeat_at__isnull=True, started_at__lt=cutoff)
        | Q(heartbeat_at__isnull=True, started_at__isnull=True, created_at__lt=cutoff)
    )
