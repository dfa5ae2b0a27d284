"""Jobs and their chunks (the job protocol's rows), and the audit log."""
from __future__ import annotations

from django.conf import settings
from django.db import models

from curation.models.sources import Source


class Job(models.Model):
    """A unit of background work with its config recorded before it starts."""

    class Kind(models.TextChoices):
        INGEST = "ingest", "ingest a source"
        CLASS_FILTER = "class_filter", "class filter (WordNet rules)"
        EXTRACT = "extract", "predictions and features"
        DEDUP = "dedup", "near-duplicates and similarity to ID"
        EXPORT = "export", "export a clean set"
        UNIT_TESTS = "unit_tests", "generate OOD unit tests"
        EVALUATE = "evaluate", "evaluation run (OOD detectors x models)"
        COVARIATE_SHIFT = "covariate_shift", "covariate-shifted copies (ImageNet-C corruptions)"
        EMBEDDING_MAP = "embedding_map", "embedding map (2-D projection of a source's features)"

    class Status(models.TextChoices):
        PENDING = "pending", "pending"
        RUNNING = "running", "running"
        DONE = "done", "done"
        FAILED = "failed", "failed"

    kind = models.CharField(max_length=32, choices=Kind.choices, db_index=True)
    source = models.ForeignKey(Source, null=True, blank=True, on_delete=models.CASCADE, related_name="jobs")
    config = models.JSONField(default=dict, blank=True)
    code_version = models.CharField(max_length=64, blank=True)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING, db_index=True)
    progress = models.PositiveIntegerField(default=0)
    total = models.PositiveIntegerField(default=0)
    message = models.TextField(blank=True)
    result = models.JSONField(default=dict, blank=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True, help_text="When a worker last reported working on this job")
    worker = models.CharField(max_length=200, blank=True, help_text="host:pid of the process that last reported")

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.get_kind_display()} #{self.pk} ({self.status})"

    @property
    def percent(self) -> int:
        return int(100 * self.progress / self.total) if self.total else (100 if self.status == self.Status.DONE else 0)


class JobChunk(models.Model):
    """One slice of a job's work. A chunk is done exactly once: its rows and its done flag are
    written in one transaction, so a killed worker leaves it pending and a redelivery redoes it."""

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="chunks")
    index = models.PositiveIntegerField()
    payload = models.JSONField()
    done = models.BooleanField(default=False)
    stats = models.JSONField(default=dict, blank=True)
    attempts = models.PositiveIntegerField(default=0)
    done_at = models.DateTimeField(null=True, blank=True)
    # A worker holds a chunk while it works on it and extends the lease with its heartbeat; a
    # second delivery of the chunk skips it while the lease is live (see curation/jobs/).
    lease_owner = models.CharField(max_length=200, blank=True)
    lease_until = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["job", "index"], name="unique_chunk_per_job")]
        ordering = ["job", "index"]


class AuditLog(models.Model):
    actor = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    action = models.CharField(max_length=64, db_index=True)
    target_type = models.CharField(max_length=64, blank=True)
    target_id = models.CharField(max_length=64, blank=True)
    data = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.created_at:%Y-%m-%d %H:%M} {self.actor or 'system'} {self.action} {self.target_type}:{self.target_id}"
