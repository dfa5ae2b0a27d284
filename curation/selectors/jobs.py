"""Reads of the recorded jobs."""
from __future__ import annotations

from curation.models import Job


def recent_jobs(*, limit: int = 20) -> list[Job]:
    return list(Job.objects.select_related("source", "created_by").order_by("-created_at")[:limit])
