"""Jobs started from the web without a broker: an in-process queue, so a request never waits
for the work it asked for.

With ``CELERY_BROKER_URL`` set, queued jobs go to the Celery workers. Without one (the embedded
default: SQLite, no Redis), a job queued by a request is handed to one background thread of
the web process, which runs it with ``run_inline``: the same steps, heartbeat, chunk leases,
progress and failure handling as on a worker, one job at a time in the order queued. If the
web process stops mid-job, the job stops reporting and turns stale like one on a lost worker;
``python manage.py resume_job --stale`` (or the admin's Resume action) carries it on.

Commands do not use this queue: they run their job in the foreground with a progress bar.
"""
from __future__ import annotations

import logging
import queue
import threading
import time
from typing import Any, Callable

from django.db import close_old_connections, connections

log = logging.getLogger("curation.jobs")

_pending: "queue.Queue[tuple[int, Callable[[Any], Any]]]" = queue.Queue()
_lock = threading.Lock()
_thread: threading.Thread | None = None
_outstanding = [0]  # queued and not finished


def submit(job_id: int, run: Callable[[Any], Any]) -> None:
    """Queue job ``job_id`` (its row committed) to run on the background thread as ``run(job)``
    (the runner's ``run_inline``)."""
    global _thread
    with _lock:
        if _thread is None or not _thread.is_alive():
            _thread = threading.Thread(target=_work, name="oodc-background-jobs", daemon=True)
            _thread.start()
        _outstanding[0] += 1
    _pending.put((job_id, run))


def wait_idle(timeout: float) -> bool:
    """Wait until every queued job has run; False if ``timeout`` seconds pass first."""
    deadline = time.monotonic() + timeout
    while _outstanding[0]:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def _work() -> None:
    from curation.models import Job

    while True:
        job_id, run = _pending.get()
        try:
            close_old_connections()
            job = Job.objects.filter(pk=job_id).first()
            if job is None or job.status in (Job.Status.DONE, Job.Status.FAILED):
                continue
            run(job)
        except Exception as exc:  # the kind has recorded the failure on its job; the thread goes on
            log.warning("background job #%s: %s: %s", job_id, type(exc).__name__, exc)
        finally:
            connections.close_all()  # this thread's connections only
            with _lock:
                _outstanding[0] -= 1
            _pending.task_done()
