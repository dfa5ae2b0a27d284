"""Chunk bookkeeping, once for every chunked kind: writing a job's chunks, starting one (done or
finished-job check, attempts), committing one (its results, its done flag, the job's progress)
and answering "was this the last chunk?". The kinds' services do only their own work between
these calls; the runner (``runner.py``) holds the chunk's lease around them (``heartbeat.py``).

The rules (docs/jobs.md, "Chunks"):

- a job is split into chunks once: a second plan, or a plan racing another delivery of itself,
  returns the chunks still to do and writes nothing;
- a chunk that is done, or whose job is done or failed, is skipped: a redelivery does nothing;
- every start of a chunk counts one attempt; a chunk started ``MAX_ATTEMPTS`` times without
  finishing (its worker lost each time: killed, out of memory, a crash in a library) is not
  started again: the job fails with one line saying so, instead of being redelivered for ever;
- a chunk's results, its done flag, its stats and the job's progress commit in one
  transaction, so a chunk is done exactly once and a chunk killed half-way left nothing;
- the commit answers True for exactly one chunk of a job, the one that left none unfinished,
  even when chunks of the job commit at the same moment on several workers.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

from django.db import transaction
from django.db.models import F
from django.utils import timezone

from curation.models import Job, JobChunk

# How many times a chunk may be started before its job is failed. A chunk whose worker is
# killed comes back (acks_late, reject_on_worker_lost) or is resumed; killed this many times,
# it would be killed again. A database or broker outage in the middle of a chunk costs one.
MAX_ATTEMPTS = 5

FINISHED = (Job.Status.DONE, Job.Status.FAILED)


class ChunkAttemptsExceeded(RuntimeError):
    """A chunk was started ``MAX_ATTEMPTS`` times and never finished; the message says so in
    one line (the runner records it as the job's failure)."""


@dataclass(frozen=True)
class Chunk:
    """A started chunk: its row's id, its job (with the related rows asked for), its payload
    and which attempt this is (1 for the first)."""

    pk: int
    job: Job
    index: int
    payload: Any
    attempt: int


def chunks_to_do(job: Job) -> list[int] | None:
    """The indices of the chunks still to do of a planned job, [] for a job that is done or
    failed, None for a job with no chunks yet (the caller plans it)."""
    if job.status in FINISHED:
        return []
    if not JobChunk.objects.filter(job_id=job.pk).exists():
        return None
    return list(JobChunk.objects.filter(job_id=job.pk, done=False).order_by("index").values_list("index", flat=True))


def chunks_write(*, job_id: int, payloads: Sequence[Any], total: int | None = None,
                 on_written: Callable[[Job], None] | None = None) -> list[int]:
    """Write the chunks of job ``job_id`` (one per payload) and its ``total`` (None: the work
    sets its own), under the job's lock, once; ``on_written(job)`` records the kind's own rows
    in the same transaction (the job's message, the run's status...). A plan that finds the
    chunks written meanwhile (a redelivery of the plan won the race) keeps those and returns
    their indices still to do."""
    with transaction.atomic():
        job = Job.objects.select_for_update().get(pk=job_id)
        planned = chunks_to_do(job)
        if planned is not None:
            return planned
        JobChunk.objects.bulk_create([JobChunk(job=job, index=i, payload=p) for i, p in enumerate(payloads)])
        if total is not None:
            job.total = total
            job.save(update_fields=["total"])
        if on_written is not None:
            on_written(job)
    return list(range(len(payloads)))


def chunks_add(*, job_id: int, phase: str, payloads: Sequence[Any], total: int | None = None) -> list[int]:
    """Write the chunks of a later ``phase`` of job ``job_id`` (payloads are dicts; each gets
    ``"phase": phase``), numbered after the chunks it has, under the job's lock, once: a second
    call (a finalize step delivered twice) returns that phase's chunks still to do. ``total``
    replaces the job's total (the units of every phase)."""
    with transaction.atomic():
        job = Job.objects.select_for_update().get(pk=job_id)
        if job.status in FINISHED:
            return []
        mine = JobChunk.objects.filter(job_id=job_id, payload__phase=phase)
        if mine.exists():
            return list(mine.filter(done=False).order_by("index").values_list("index", flat=True))
        start = (JobChunk.objects.filter(job_id=job_id).order_by("-index").values_list("index", flat=True).first() or 0) + 1
        JobChunk.objects.bulk_create([JobChunk(job=job, index=start + i, payload={**p, "phase": phase}) for i, p in enumerate(payloads)])
        if total is not None:
            job.total = total
            job.save(update_fields=["total"])
    return list(range(start, start + len(payloads)))


def chunk_start(*, job_id: int, index: int, related: Sequence[str] = (), max_attempts: int = MAX_ATTEMPTS) -> Chunk | None:
    """Start chunk ``index`` of job ``job_id``: None when there is nothing to do (the chunk is
    done, or its job is done or failed: a redelivery); else the chunk, its attempt counted.
    ``related`` names the job's foreign keys to load with it ("source"). Raises
    ChunkAttemptsExceeded when the chunk was started ``max_attempts`` times already."""
    row = JobChunk.objects.select_related("job", *(f"job__{name}" for name in related)).get(job_id=job_id, index=index)
    if row.done or row.job.status in FINISHED:
        return None
    if row.attempts >= max_attempts:
        raise ChunkAttemptsExceeded(
            f"chunk {index} of job #{job_id} was started {row.attempts} times and never finished (its worker was lost each "
            f"time: killed, out of memory, or a crash in a library it runs); fix the cause and start the work again")
    JobChunk.objects.filter(pk=row.pk).update(attempts=F("attempts") + 1)
    return Chunk(pk=row.pk, job=row.job, index=index, payload=row.payload, attempt=row.attempts + 1)


def chunk_finish(chunk: Chunk, *, progress: int, stats: dict | None = None, write: Callable[[], None] | None = None) -> bool:
    """Commit ``chunk``: ``write()`` (its results), its done flag and ``stats``, and ``progress``
    more units on its job, in one transaction. Returns True when this commit left no chunk of
    the job unfinished (the runner then queues the finalize step): for exactly one chunk of a
    job. A chunk that another delivery finished first writes nothing and returns False."""
    with transaction.atomic():
        if JobChunk.objects.select_for_update().values_list("done", flat=True).get(pk=chunk.pk):
            return False  # another delivery finished it first; its results stand
        if write is not None:
            write()
        fields: dict[str, Any] = {"done": True, "done_at": timezone.now(), "lease_until": None}  # a done chunk holds no lease
        if stats is not None:
            fields["stats"] = stats
        JobChunk.objects.filter(pk=chunk.pk).update(**fields)
        # The job's row lock, taken by this update and held to the commit, orders the chunks of a
        # job that commit at the same moment: the next one counts after this one committed, so
        # the last to commit sees every chunk done, and each earlier one saw it unfinished.
        Job.objects.filter(pk=chunk.job.pk).update(progress=F("progress") + progress)
        return not JobChunk.objects.filter(job_id=chunk.job.pk, done=False).exists()


def unfinished_chunks(job_id: int) -> int:
    """How many chunks of the job are not done (0 for a job with no chunks)."""
    return JobChunk.objects.filter(job_id=job_id, done=False).count()


def all_chunks_done(job_id: int) -> bool:
    """The job has chunks and every one is done: its finalize step may run."""
    chunks = JobChunk.objects.filter(job_id=job_id)
    return chunks.exists() and not chunks.filter(done=False).exists()
