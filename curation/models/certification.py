"""Certifying a source's unreviewed images from a stratified sample (issue 37; docs/review.md,
"Review in full or certify")."""
from __future__ import annotations

from django.conf import settings
from django.db import models

from curation.models.review import ReviewItem
from curation.models.sources import Source


class CertificationPlan(models.Model):
    """A plan: the source's accepted images no review had decided when it was made, split into
    score strata; a seeded random order per stratum; which of them the queue serves; the target."""

    class Score(models.TextChoices):
        NEAREST_ID = "nearest_id_similarity", "similarity to the nearest ID image"
        TOP1 = "top1_prob", "top-1 ID-class probability"

    class Status(models.TextChoices):
        PILOT = "pilot", "pilot: the first reviews of every stratum"
        SAMPLING = "sampling", "sampling in Neyman proportions"
        CERTIFIED = "certified", "certified: the bound met the target"
        CLOSED = "closed", "closed by a curator"

    source = models.ForeignKey(Source, on_delete=models.CASCADE, related_name="certification_plans")
    model_name = models.CharField(max_length=128)
    score = models.CharField(max_length=32, choices=Score.choices, default=Score.NEAREST_ID)
    n_strata = models.PositiveSmallIntegerField(default=10)
    full_top = models.FloatField(default=0.0, help_text="Share of the most ID-like images reviewed in full")
    confidence = models.FloatField(default=0.95)
    target = models.FloatField(default=0.005, help_text="Largest ID share of the unreviewed remainder to certify")
    seed = models.BigIntegerField()
    pilot = models.PositiveIntegerField(default=30, help_text="Pilot reviews per stratum")
    minimum_share = models.FloatField(default=0.02, help_text="Each sampled stratum gets at least this share of the reviews")
    unclear_is_id = models.BooleanField(default=True, help_text="Count an `unclear` decision against the pool")
    prior = models.CharField(max_length=16, default="shared")
    status = models.CharField(max_length=12, choices=Status.choices, default=Status.PILOT)
    strata = models.JSONField(default=list, help_text="[{size, edge, full, covariate}], lowest score first")
    allocation = models.JSONField(default=list, blank=True, help_text="Share of the reviews per stratum after the pilot")
    certificate = models.JSONField(default=dict, blank=True, help_text="The certificate when the target was met")
    code_version = models.CharField(max_length=64, blank=True)
    # pipelines.review.certify.SAMPLER when the plan was made (a model may not import pipelines/): the
    # migration that added it gave the plans stored before it 1, the sampler that drew them
    sampler = models.PositiveSmallIntegerField(
        default=2, help_text="The sampler that drew the plan's stratum orders and pilot (pipelines.review.certify.SAMPLERS): 1 before issue 50, "
                             "2 since; each later stage records its own in allocation")
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    certified_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["source"], condition=models.Q(status__in=["pilot", "sampling"]),
                                    name="one_open_certification_per_source"),
        ]

    def __str__(self) -> str:
        return f"certification {self.pk} of {self.source.name} ({self.status})"


class CertificationUnit(models.Model):
    """One image of a plan's population: its stratum, its place in the stratum's seeded random
    order, and (for the images the queue serves) its place in the serving order."""

    # no index of its own: (plan, item) and (plan, stratum, draw) lead with the plan, and one index
    # fewer to fill is a sixth less work per unit when a plan writes 9 million (issue 45)
    plan = models.ForeignKey(CertificationPlan, on_delete=models.CASCADE, related_name="units", db_index=False)
    item = models.ForeignKey(ReviewItem, on_delete=models.CASCADE, related_name="certification_units")
    stratum = models.PositiveSmallIntegerField()
    draw = models.PositiveIntegerField(help_text="Position in the stratum's seeded order (0 = drawn first)")
    serve = models.PositiveIntegerField(null=True, blank=True, help_text="Position in the serving order (empty: not sampled yet)")

    class Meta:
        constraints = [models.UniqueConstraint(fields=["plan", "item"], name="one_certification_unit_per_item")]
        indexes = [models.Index(fields=["plan", "serve"], condition=models.Q(serve__isnull=False), name="cert_unit_serving"),
                   models.Index(fields=["plan", "stratum", "draw"])]

    def __str__(self) -> str:
        return f"plan {self.plan_id}: item {self.item_id} (stratum {self.stratum}, draw {self.draw})"


class CertificationStratumCount(models.Model):
    """Per plan and stratum: its units whose images have a final decision, and how many of them
    were ``id`` and ``unclear``. Kept by the database (triggers on curation_reviewitem, migration
    0033; filled when the plan is made), so the bound reads a row per stratum instead of joining
    every unit of the plan to the queue (9 million at ImageNet-21K's size, 3 s per page; issue 45)."""

    plan = models.ForeignKey(CertificationPlan, on_delete=models.CASCADE, related_name="stratum_counts")
    stratum = models.PositiveSmallIntegerField()
    final = models.BigIntegerField(default=0, help_text="Units whose image is decided (complete or adjudicated)")
    final_id = models.BigIntegerField(default=0, help_text="... decided `id`")
    final_unclear = models.BigIntegerField(default=0, help_text="... decided `unclear`")

    class Meta:
        constraints = [models.UniqueConstraint(fields=["plan", "stratum"], name="one_count_per_certification_stratum")]

    def __str__(self) -> str:
        return f"plan {self.plan_id} stratum {self.stratum}: {self.final} decided ({self.final_id} id, {self.final_unclear} unclear)"
