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


class InlineBar:
    """A tqdm bar for a job run in this process: ``update`` takes processed counts, ``on_total``
    sets the total once the job has planned its work."""

    def __init__(self, desc: str, unit: str = "img"):
        self.bar = tqdm(desc=desc, unit=unit, file=sys.stderr, dynamic_ncols=True)
        self.update = self.bar.update

    def on_total(self, total: int) -> None:
        self.bar.total = total
        self.bar.refresh()

    def __enter__(self) -> "InlineBar":
        return self

    def __exit__(self, *exc) -> None:
        self.bar.close()
