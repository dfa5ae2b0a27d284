"""Class filter runs, their decisions, and pinned overrides."""
from __future__ import annotations

from django.conf import settings
from django.db import models

from curation.models.jobs import Job
from curation.models.sources import CandidateClass, Source


class ClassFilterRun(models.Model):
    """One run of the WordNet class rules over a candidate list, with everything it used
    recorded before it starts (candidates, ID classes, resolved policy, WordNet, code)."""

    job = models.OneToOneField(Job, on_delete=models.CASCADE, related_name="class_filter_run")
    source = models.ForeignKey(Source, null=True, blank=True, on_delete=models.CASCADE, related_name="class_filter_runs")
    candidates_spec = models.CharField(max_length=500, help_text="Named list, wnid file or source:NAME")
    id_spec = models.CharField(max_length=500)
    id_wnids = models.JSONField(help_text="The ID classes the run compared against")
    policy_name = models.CharField(max_length=200)
    policy_origin = models.CharField(max_length=500)
    policy = models.JSONField(help_text="The resolved policy: every rule's severity and parameters")
    policy_digest = models.CharField(max_length=64, db_index=True)
    wordnet_sha1 = models.CharField(max_length=40, blank=True)
    counts = models.JSONField(default=dict, blank=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"class filter #{self.pk}: {self.candidates_spec} vs {self.id_spec} ({self.policy_name})"


class ClassDecision(models.Model):
    """The decision on one candidate class in one run. ``rule_decision`` is what the rules
    said; ``decision`` is the effective one after a pinned override or a curator's resolution
    of a flag (both say so in ``rule`` / ``detail``)."""

    class Decision(models.TextChoices):
        KEEP = "keep", "keep"
        FLAG = "flag", "flag (needs a curator)"
        REMOVE = "remove", "remove"

    class Resolution(models.TextChoices):
        NONE = "", "unresolved"
        KEEP = "keep", "kept by a curator"
        REMOVE = "remove", "removed by a curator"

    run = models.ForeignKey(ClassFilterRun, on_delete=models.CASCADE, related_name="decisions")
    position = models.PositiveIntegerField()
    key = models.CharField(max_length=255, help_text="The wnid, or the source's class folder")
    wnid = models.CharField(max_length=9, blank=True, db_index=True)
    name = models.CharField(max_length=255)
    synset = models.CharField(max_length=255, blank=True)
    candidate_class = models.ForeignKey(CandidateClass, null=True, blank=True, on_delete=models.SET_NULL, related_name="decisions")
    n_images = models.PositiveIntegerField(null=True, blank=True)
    rule_decision = models.CharField(max_length=8, choices=Decision.choices)
    rule_name = models.CharField("rules' deciding rule", max_length=64, blank=True)
    rule_related_wnid = models.CharField(max_length=9, blank=True)
    rule_related_name = models.CharField(max_length=255, blank=True)
    rule_detail = models.TextField(blank=True, help_text="Every rule that fired, with its WordNet path")
    fired = models.JSONField(default=list, blank=True)
    decision = models.CharField(max_length=8, choices=Decision.choices, db_index=True)
    rule = models.CharField(max_length=64, blank=True, db_index=True)
    detail = models.TextField(blank=True)
    resolution = models.CharField(max_length=8, choices=Resolution.choices, blank=True, default="", db_index=True)
    resolution_note = models.TextField(blank=True)
    resolved_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    resolved_at = models.DateTimeField(null=True, blank=True)
    resolution_from = models.ForeignKey("self", null=True, blank=True, on_delete=models.SET_NULL, related_name="+",
                                        help_text="The earlier decision whose resolution this one carried over")
    # semantic distance to the ID set (pipelines.classes.semantic; docs/class_filter.md)
    semantic_similarity = models.FloatField(null=True, blank=True, help_text="Lin similarity (intrinsic IC) to the closest ID class")
    closest_id_wnid = models.CharField(max_length=9, blank=True)
    closest_id_name = models.CharField(max_length=255, blank=True)
    path_distance = models.PositiveSmallIntegerField(null=True, blank=True, help_text="Fewest hypernym edges to any ID class")
    # ranked flags (pipelines.classes.filter.strength): set on rows the rules flagged
    flag_strength = models.FloatField(null=True, blank=True, db_index=True)
    flag_level = models.CharField(max_length=6, blank=True, db_index=True)
    evidence_wnids = models.JSONField(default=list, blank=True, help_text="ID wnids whose predictions count as image evidence")
    image_top1_share = models.FloatField(null=True, blank=True)
    image_top5_share = models.FloatField(null=True, blank=True)
    evidence_model = models.CharField(max_length=200, blank=True, help_text="The model whose predictions gave the image evidence")

    class Meta:
        ordering = ["run", "position"]
        constraints = [models.UniqueConstraint(fields=["run", "key"], name="unique_class_decision_per_run")]
        indexes = [models.Index(fields=["run", "decision"]), models.Index(fields=["run", "rule"])]

    def __str__(self) -> str:
        return f"{self.name} ({self.wnid or self.key}): {self.decision}"

    @property
    def related_wnid(self) -> str:
        return "" if self.rule.startswith("override_") else self.rule_related_wnid

    @property
    def related_name(self) -> str:
        return "" if self.rule.startswith("override_") else self.rule_related_name


class ClassOverride(models.Model):
    """A curator's pinned decision on a synset: wins over every rule, in every run."""

    class Action(models.TextChoices):
        ALLOW = "allow", "allow (always keep)"
        DENY = "deny", "deny (always remove)"

    wnid = models.CharField(max_length=9, unique=True)
    name = models.CharField(max_length=255, blank=True)
    action = models.CharField(max_length=8, choices=Action.choices)
    note = models.TextField(blank=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["wnid"]

    def __str__(self) -> str:
        return f"{self.action} {self.wnid} {self.name}"
