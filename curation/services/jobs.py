from __future__ import annotations

import traceback
from typing import Callable

from django.utils import timezone

from curation.models import Job


def job_mark_running(*, job: Job, message: str = "") -> None:
    fields = {"status": Job.Status.RUNNING, "message": message}
    if job.started_at is None:
        fields["started_at"] = timezone.now()
    Job.objects.filter(pk=job.pk).exclude(status__in=[Job.Status.DONE, Job.Status.FAILED]).update(**fields)


def job_fail(*, job_id: int, error: BaseException | str) -> None:
    """Mark a job failed with a message a user can act on (and the traceback for staff)."""
    if isinstance(error, BaseException):
        text = f"{type(error).__name__}: {error}"
        detail = "".join(traceback.format_exception(error))[-4000:]
    else:
        text, detail = str(error), ""
    job = Job.objects.filter(pk=job_id).first()
    if job is None or job.status == Job.Status.DONE:
        return
    job.status = Job.Status.FAILED
    job.message = text
    job.result = {**job.result, "traceback": detail}
    job.finished_at = timezone.now()
    job.save(update_fields=["status", "message", "result", "finished_at"])


def job_run_chunks_inline(
    *, job: Job, plan: Callable[..., list[int]], process: Callable[..., bool], finalize: Callable[..., Job],
    progress: Callable[[int], None] | None = None, on_total: Callable[[int], None] | None = None,
) -> Job:
    """Run a chunked job (plan -> every chunk -> finalize) in this process, as its Celery tasks
    would: for commands without a broker. A failure marks the job failed and is raised."""
    try:
        indices = plan(job_id=job.pk)
        job.refresh_from_db()
        if on_total:
            on_total(job.total)
        for index in indices:
            process(job_id=job.pk, index=index, progress=progress)
        return finalize(job_id=job.pk)
    except Exception as exc:
        job_fail(job_id=job.pk, error=exc)
        raise
