from __future__ import annotations

import traceback

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
