"""Terminal progress for jobs: inline runs drive a tqdm bar; queued runs poll the Job row."""
from __future__ import annotations

import sys
import time

from tqdm import tqdm

from curation.models import Job


def wait_for_job(job: Job, *, desc: str, poll: float = 0.5, timeout: float | None = None, unit: str = "img") -> Job:
    """Show a bar fed from the Job row until the workers finish it (or ``timeout`` passes)."""
    start = time.monotonic()
    bar = tqdm(total=job.total or None, desc=desc, unit=unit, file=sys.stderr, dynamic_ncols=True)
    try:
        while True:
            job.refresh_from_db()
            if job.total and bar.total != job.total:
                bar.total = job.total
            bar.n = job.progress
            bar.set_postfix_str(job.status)
            bar.refresh()
            if job.status in (Job.Status.DONE, Job.Status.FAILED):
                return job
            if timeout is not None and time.monotonic() - start > timeout:
                return job
            time.sleep(poll)
    finally:
        bar.close()
