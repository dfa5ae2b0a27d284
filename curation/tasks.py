"""Celery tasks: one per (job kind, step), all the same thin body. The job protocol
(curation/jobs/) runs the step, records failures on the job and queues the next steps.

Task names are ``curation.<kind>.<step>`` (``curation.extract.chunk``...), so worker logs say
what they run; each step goes to the queue its kind declares."""
from __future__ import annotations

from celery import shared_task

from curation.jobs.protocol import STEPS, task_name
from curation.models import Job

TASK_OPTIONS = {"acks_late": True, "reject_on_worker_lost": True}


OUTAGE_RETRY_S = 5  # a step hit by a database or broker outage is tried again this much later, until the service is back


def _make_task(kind: str, step: str):
    def run(self, job_id: int, index: int | None = None):
        from django.db import close_old_connections

        from curation.jobs.runner import run_step
        from curation.outages import is_outage

        try:
            result = run_step(job_id=job_id, step=step, index=index)
        except Exception as exc:
            if not is_outage(exc):
                raise
            close_old_connections()  # a restarted PostgreSQL left this process a dead connection
            raise self.retry(exc=exc, countdown=OUTAGE_RETRY_S, max_retries=None) from None
        return len(result) if isinstance(result, list) else None

    run.__name__ = run.__qualname__ = f"{kind}_{step}_task"
    return shared_task(name=task_name(kind, step), bind=True, **TASK_OPTIONS)(run)


TASKS = {(kind, step): _make_task(kind, step) for kind in Job.Kind.values for step in STEPS}

