"""What a job kind declares, and the registry of kinds.

A kind is three idempotent steps over a ``Job`` row and its ``JobChunk`` rows:

- ``plan(job_id) -> [index, ...]``: split the work into chunks (once; a second call returns
  the indices still to do);
- ``process(job_id, index, progress, on_total) -> last``: do one chunk; its results and its
  done flag commit together, so a chunk is done exactly once; returns True when no chunk is
  left;
- ``finalize(job_id)``: combine the chunks' results and mark the job done (a no-op when done).

``fail(job_id, error)`` records a failure on the job (and on the row the kind owns, such as an
export). ``queue(step)`` names the Celery queue of a step. The runner (``curation.jobs.runner``)
adds the rest for every kind alike: heartbeat, chunk leases, stale detection, resume, failure
handling, progress, and the one rule for running inline or on workers.

A kind whose work comes in phases (the duplicate search: cells, then the join of the cells)
returns ``NextPhase(indices)`` from ``finalize`` while there is a phase left: it has written the
next phase's chunks (once, under the job's lock, as ``chunks.chunks_add``), and the runner runs
them as it ran the first, then calls ``finalize`` again.

A kind whose work is one step (duplicate search, export, unit tests, class filter) is declared
with ``single_step``: one chunk, whose ``process`` is the step.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

Progress = Callable[[int], None]
STEPS = ("plan", "chunk", "finalize")


def task_name(kind: str, step: str) -> str:
    """The Celery task that runs ``step`` of a ``kind`` job (curation/tasks.py defines them)."""
    return f"curation.{kind}.{step}"


@dataclass(frozen=True)
class NextPhase:
    """What a phased kind's ``finalize`` returns when the chunks it wrote are to be run next."""

    indices: list[int]


@dataclass(frozen=True)
class JobKind:
    kind: str
    label: str
    plan: Callable[[int], list[int]]
    process: Callable[..., bool]
    finalize: Callable[[int], Any]
    fail: Callable[[int, BaseException | str], None]
    queue: Callable[[str], str]
    resume_hint: str = ""  # the stage command's flag, for messages
    role: str = "curator"  # who may resume it from the web (curation.roles): curators' stages; evaluations are researchers'


_KINDS: dict[str, JobKind] = {}


def register_kind(kind: JobKind) -> JobKind:
    if kind.kind in _KINDS and _KINDS[kind.kind] is not kind:
        raise ValueError(f"job kind {kind.kind!r} is registered twice")
    _KINDS[kind.kind] = kind
    return kind


def kind_of(name: str) -> JobKind:
    """The registered kind ``name`` (the built-in kinds are registered by curation/services/job_kinds.py
    when Django starts: CurationConfig.ready)."""
    try:
        return _KINDS[name]
    except KeyError:
        raise ValueError(f"unknown job kind {name!r}; registered: {', '.join(sorted(_KINDS))}") from None


def registered_kinds() -> list[str]:
    return sorted(_KINDS)


def single_step(*, kind: str, label: str, execute: Callable[..., Any], fail: Callable[[int, BaseException | str], None],
                queue: Callable[[str], str], resume_hint: str = "", role: str = "curator") -> JobKind:
    """A kind whose whole work is ``execute(job_id, progress, on_total)`` (itself idempotent: a
    finished job is left as it is). It gets one chunk so it has a lease like any other."""
    from curation.jobs.chunks import chunk_finish, chunk_start, chunks_to_do, chunks_write
    from curation.models import Job

    def plan(job_id: int) -> list[int]:
        planned = chunks_to_do(Job.objects.get(pk=job_id))
        return planned if planned is not None else chunks_write(job_id=job_id, payloads=[{}])

    def process(job_id: int, index: int, progress: Progress | None = None, on_total: Callable[[int], None] | None = None) -> bool:
        chunk = chunk_start(job_id=job_id, index=index)
        if chunk is None:  # done already, or the job is finished
            return False
        execute(job_id, progress, on_total)
        return chunk_finish(chunk, progress=0)  # the step keeps its own progress

    def finalize(job_id: int):
        return Job.objects.get(pk=job_id)

    return JobKind(kind=kind, label=label, plan=plan, process=process, finalize=finalize, fail=fail, queue=queue,
                   resume_hint=resume_hint, role=role)
