"""Feature shards, predictions and features per image, and class-level visual signals."""
from __future__ import annotations

from django.conf import settings
from django.db import models

from curation.models.jobs import Job
from curation.models.sources import CandidateClass, Image


class FeatureShard(models.Model):
    """One ``.npy`` file of float16 penultimate features (rows = images) under FEATURE_STORE."""

    model_name = models.CharField(max_length=200, db_index=True)
    path = models.CharField(max_length=500, unique=True, help_text="Relative to the feature store")
    rows = models.PositiveIntegerField()
    dim = models.PositiveIntegerField()
    decoder = models.CharField(max_length=20, default="pil", help_text="How the images became model inputs: pil or torchvision")
    job = models.ForeignKey(Job, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return self.path


class ImageEmbedding(models.Model):
    """What one model said about one image (once per image and model), where its features are,
    and what the duplicate search decided."""

    image = models.ForeignKey(Image, on_delete=models.CASCADE, related_name="embeddings")
    model_name = models.CharField(max_length=200)
    ok = models.BooleanField(default=True)
    error = models.TextField(blank=True)
    shard = models.ForeignKey(FeatureShard, null=True, blank=True, on_delete=models.PROTECT, related_name="embeddings")
    row = models.IntegerField(default=-1)
    topk = models.JSONField(default=list, blank=True, help_text="[[wnid, probability], ...], best first")
    top1_wnid = models.CharField(max_length=9, blank=True, db_index=True)
    top1_prob = models.FloatField(null=True, blank=True)
    max_softmax = models.FloatField(null=True, blank=True)
    max_logit = models.FloatField(null=True, blank=True)
    energy = models.FloatField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    # written by the duplicate search (re-run from scratch each time): what it found (search_*)
    # and what holds once a curator's DuplicateOverrides are applied (dup_group, drop_reason:
    # what the review queue and exports read)
    search_group = models.BigIntegerField(null=True, blank=True, db_index=True,
                                          help_text="The image id of the representative the search chose for its group")
    search_drop = models.CharField(max_length=80, blank=True, default="", db_default="", help_text="The search's drop reason, before overrides")
    dup_group = models.BigIntegerField(null=True, blank=True, help_text="The image id of its group's representative")
    drop_reason = models.CharField(max_length=80, blank=True, db_index=True)
    nearest_id_image = models.ForeignKey(Image, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    nearest_id_similarity = models.FloatField(null=True, blank=True, db_index=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["image", "model_name"], name="one_embedding_per_image_and_model")]
        indexes = [
            models.Index(fields=["model_name", "drop_reason"]),
            # the image browser's sorted, keyset-paged views (docs/browse.md)
            models.Index(fields=["model_name", "nearest_id_similarity", "image"], name="emb_browse_similarity"),
            models.Index(fields=["model_name", "max_softmax", "image"], name="emb_browse_msp"),
            models.Index(fields=["model_name", "dup_group"], name="emb_browse_group"),
            models.Index(fields=["model_name", "top1_wnid", "image"], name="emb_browse_top1"),
            # the duplicate groups (more than one member: one of them the search dropped), read
            # without a pass over every prediction (issue 45)
            # (every member but the one a group keeps was dropped by the search and names another image as its group)
            models.Index(fields=["model_name", "search_group"], condition=~models.Q(search_drop="") & ~models.Q(search_group=models.F("image")),
                         name="emb_dup_members"),
        ]

    def __str__(self) -> str:
        return f"{self.model_name}: image {self.image_id}"


class DuplicateOverride(models.Model):
    """A curator's correction of the duplicate search for one image, kept across re-runs of the
    search and applied after each (pipelines.features.near_dups.apply_overrides): ``not_duplicate`` takes
    the image out of its group (and clears a match with an ID image); ``keep`` makes it the image
    its group keeps instead of the representative the search chose; ``confirm`` (recorded on the
    image a group keeps) says the search got the group right, which changes nothing but marks the
    group decided."""

    class Action(models.TextChoices):
        NOT_DUPLICATE = "not_duplicate", "not a duplicate"
        KEEP = "keep", "keep this one instead"
        CONFIRM = "confirm", "the search is right"

    image = models.ForeignKey(Image, on_delete=models.CASCADE, related_name="duplicate_overrides")
    model_name = models.CharField(max_length=200)
    action = models.CharField(max_length=16, choices=Action.choices)
    note = models.TextField(blank=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["image", "model_name"], name="one_duplicate_override_per_image_and_model")]
        ordering = ["created_at", "id"]

    def __str__(self) -> str:
        return f"image {self.image_id}: {self.get_action_display()} ({self.model_name})"


class ClassVisualSignal(models.Model):
    """Per candidate class and model: the share of its images whose top-1 is one ID class
    (C-OOD: most models call over half of the viceroy images monarch)."""

    candidate_class = models.ForeignKey(CandidateClass, on_delete=models.CASCADE, related_name="visual_signals")
    model_name = models.CharField(max_length=200)
    n_images = models.PositiveIntegerField()
    top_wnid = models.CharField(max_length=9, blank=True)
    top_label = models.CharField(max_length=255, blank=True)
    top_share = models.FloatField(default=0.0)
    threshold = models.FloatField()
    flagged = models.BooleanField(default=False, db_index=True)
    reason = models.CharField(max_length=64, blank=True)
    updated_at = models.DateTimeField(auto_now=True)
    # a curator's answer to the flag on the class-level review screen (kept across re-runs)
    resolution = models.CharField(max_length=8, choices=[("", "unresolved"), ("accept", "class accepted"), ("reject", "class rejected")],
                                  blank=True, default="")
    resolution_note = models.TextField(blank=True)
    resolved_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    resolved_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["candidate_class", "model_name"], name="one_visual_signal_per_class_and_model")]

    def __str__(self) -> str:
        return f"{self.candidate_class}: {self.top_share:.0%} {self.top_label}"


# -- review ----------------------------------------------------------------------------------------
