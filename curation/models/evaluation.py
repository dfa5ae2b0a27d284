"""Evaluation runs and their cached model outputs."""
from __future__ import annotations

from django.conf import settings
from django.db import models

from curation.models.exports import Export
from curation.models.jobs import Job


class EvalFeatureSet(models.Model):
    """One model's outputs (features, logits, labels) on one image set at one version, cached on
    disk under EVAL_ROOT and reused by every later run with the same model and data."""

    model_name = models.CharField(max_length=200, db_index=True)
    dataset = models.CharField(max_length=200, help_text="source:NAME, export:NAME-vN or import:NAME")
    version = models.CharField(max_length=64, help_text="Digest of the image set (file list and hashes) or of the imported file")
    decoder = models.CharField(max_length=20, default="pil",
                               help_text="How the images became model inputs (pil, torchvision); 'unknown' for imported outputs")
    path = models.CharField(max_length=500, help_text="Relative to EVAL_ROOT: the .npz with features, logits, labels, keys, groups")
    images = models.PositiveIntegerField(default=0)
    feature_dim = models.PositiveIntegerField(default=0)
    failed = models.JSONField(default=list, blank=True, help_text="Files the model could not read, with the reason")
    extras = models.JSONField(default=dict, blank=True, help_text="Input-level scores (ODIN) -> .npy path relative to EVAL_ROOT")
    has_head = models.BooleanField(default=False, help_text="Imported sets: the .npz carried the classifier's weight and bias")
    note = models.TextField(blank=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        verbose_name = "cached model outputs"
        verbose_name_plural = "cached model outputs"
        constraints = [models.UniqueConstraint(fields=["model_name", "dataset", "version", "decoder"],
                                               name="one_output_cache_per_model_data_and_decoder")]

    def __str__(self) -> str:
        return f"{self.dataset} with {self.model_name} ({self.images} images)"


class EvaluationRun(models.Model):
    """OOD detectors x models on an export (and optionally a unit-test set), against an ID test
    set, with statistics from an ID fit set. Config, code version and export version are recorded
    when it is created; results are written once by the finishing task."""

    class Status(models.TextChoices):
        PENDING = "pending", "pending"
        RUNNING = "running", "running"
        DONE = "done", "done"
        FAILED = "failed", "failed"

    export = models.ForeignKey(Export, null=True, blank=True, on_delete=models.PROTECT, related_name="evaluations",
                               help_text="The OOD export; empty when the OOD set is part of an ID source (a semantic split)")
    unit_tests = models.ForeignKey(Export, null=True, blank=True, on_delete=models.PROTECT, related_name="unit_test_evaluations")
    id_test = models.CharField(max_length=200, help_text="source:NAME or import:NAME")
    id_fit = models.CharField(max_length=200, help_text="source:NAME or import:NAME")
    model_names = models.JSONField(help_text="Model names, in table order")
    methods = models.JSONField(help_text="Detector names, in table order")
    config = models.JSONField(default=dict, help_text="Everything the run used: parameters, dataset versions, weights")
    code_version = models.CharField(max_length=64, blank=True)
    export_version = models.CharField(max_length=200, blank=True, help_text="NAME-vN and the manifest's sha256")
    status = models.CharField(max_length=12, choices=Status.choices, default=Status.PENDING, db_index=True)
    job = models.OneToOneField(Job, on_delete=models.PROTECT, related_name="evaluation")
    results = models.JSONField(default=dict, blank=True)
    message = models.TextField(blank=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"evaluation #{self.pk} on {self.ood_label} ({self.status})"

    @property
    def ood_label(self) -> str:
        """The OOD set: an export's NAME-vN, or a set key such as source:val@imagenet-x-ood."""
        if self.export_id:
            return self.export.label
        return (self.config.get("sets", {}).get("ood") or {}).get("key", "?")
