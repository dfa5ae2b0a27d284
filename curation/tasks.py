"""Celery tasks: one per (job kind, step), all the same thin body. The job protocol
(curation/jobs/) runs the step, records failures on the job and queues the next steps.

Task names are ``curation.<kind>.<step>`` (``curation.extract.chunk``...), so worker logs say
what they run; each step goes to the queue its kind declares."""
from __future__ import annotations

import logging
import time

from celery import shared_task

from curation.jobs.protocol import STEPS, task_name
from curation.models import Job

TASK_OPTIONS = {"acks_late": True, "reject_on_worker_lost": True}

log = logging.getLogger("curation.jobs")

# A step hit by a database or broker outage (PostgreSQL or Redis restarting) is tried again in the
# same task every OUTAGE_RETRY_S seconds until the service is back, for at most OUTAGE_GIVE_UP_S;
# after that the task ends, the job turns stale and `resume_job` carries it on. The retry is not
# Celery's (`self.retry`): that publishes a new message, which fails while Redis is down, and Celery
# then drops the task (Reject without requeue), and with it the chunk, or the finalize step a
# chunk was queueing. Steps are idempotent, so trying one again redoes nothing done.
OUTAGE_RETRY_S = 5
OUTAGE_GIVE_UP_S = 15 * 60


def _make_task(kind: str, step: str):
    def run(self, job_id: int, index: int | None = None):
        from django.db import connections

        from curation.jobs.runner import run_step
        from curation.outages import is_outage

        waited = 0.0
        while True:
            try:
                result = run_step(job_id=job_id, step=step, index=index)
                break
            except Exception as exc:
                if not is_outage(exc) or waited >= OUTAGE_GIVE_UP_S:
                    raise
                log.warning("job #%s %s step: outage (%s: %s); trying again in %s s", job_id, step, type(exc).__name__,
                            str(exc).splitlines()[0] if str(exc) else "", OUTAGE_RETRY_S)
                connections.close_all()  # a restarted PostgreSQL left this process dead connections
                time.sleep(OUTAGE_RETRY_S)
                waited += OUTAGE_RETRY_S
        return len(result) if isinstance(result, list) else None

    run.__name__ = run.__qualname__ = f"{kind}_{step}_task"
    return shared_task(name=task_name(kind, step), bind=True, **TASK_OPTIONS)(run)


TASKS = {(kind, step): _make_task(kind, step) for kind in Job.Kind.values for step in STEPS}



@shared_task(name="curation.review_stats.refresh", **TASK_OPTIONS)
def review_stats_refresh_task() -> None:
    """Recompute the review progress page's agreement and per-annotator figures
    (curation.services.review_stats): idempotent, the newest sum wins."""
    from curation.services.review_stats import review_stats_compute

    review_stats_compute()
