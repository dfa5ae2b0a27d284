"""Exports and unit-test sets, and the images an export carries."""
from __future__ import annotations

from django.conf import settings
from django.db import models

from curation.models.jobs import Job
from curation.models.sources import Image


class Export(models.Model):
    """One immutable, versioned export: a clean OOD set (kind ``dataset``) or NINCO's synthetic
    OOD unit tests (kind ``unit_tests``), written once under EXPORT_ROOT/<name>/v<version>/."""

    class Kind(models.TextChoices):
        DATASET = "dataset", "clean OOD set"
        UNIT_TESTS = "unit_tests", "OOD unit tests"

    class Status(models.TextChoices):
        PENDING = "pending", "pending"
        RUNNING = "running", "running"
        BLOCKED = "blocked", "blocked by the leakage check"
        DONE = "done", "done"
        FAILED = "failed", "failed"

    name = models.SlugField(max_length=100)
    version = models.PositiveIntegerField()
    kind = models.CharField(max_length=16, choices=Kind.choices, default=Kind.DATASET)
    split = models.SlugField(max_length=40, default="test", help_text="Images may not be near-duplicates of another split's")
    status = models.CharField(max_length=12, choices=Status.choices, default=Status.PENDING, db_index=True)
    job = models.OneToOneField(Job, on_delete=models.PROTECT, related_name="export")
    config = models.JSONField(default=dict)
    path = models.CharField(max_length=500, blank=True, help_text="Relative to EXPORT_ROOT, once written")
    manifest_sha256 = models.CharField(max_length=64, blank=True)
    counts = models.JSONField(default=dict, blank=True)
    leakage = models.JSONField(default=dict, blank=True)
    leakage_override = models.TextField(blank=True, help_text="The curator's reason to export despite leakage")
    message = models.TextField(blank=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        # A failed attempt writes nothing and gives its version number back: the next export of
        # that name takes it. Only exports that stand hold their (name, version).
        constraints = [models.UniqueConstraint(fields=["name", "version"], condition=~models.Q(status="failed"),
                                               name="unique_export_version")]

    def __str__(self) -> str:
        return f"{self.label} ({self.get_kind_display()}, {self.status})"

    @property
    def label(self) -> str:
        if self.status == self.Status.FAILED:
            return f"{self.name} (failed attempt #{self.pk})"
        return f"{self.name}-v{self.version}"


class ExportMember(models.Model):
    """An image an export carries (dataset exports): what the leakage check of later exports
    compares with, and the provenance query "which exports hold this image"."""

    export = models.ForeignKey(Export, on_delete=models.CASCADE, related_name="members")
    image = models.ForeignKey(Image, on_delete=models.PROTECT, related_name="export_memberships")
    sha256 = models.CharField(max_length=64, db_index=True)
    wnid = models.CharField(max_length=9, blank=True)
    files = models.JSONField(default=dict, help_text="layout -> path inside the export")

    class Meta:
        constraints = [models.UniqueConstraint(fields=["export", "image"], name="unique_image_per_export")]


# -- evaluation --------------------------------------------------------------------------------------
