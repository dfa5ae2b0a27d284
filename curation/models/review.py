"""The review queue: settings, scopes, items, assignments, reviews, and synset texts for the screen."""
from __future__ import annotations

from django.conf import settings
from django.db import models

from curation.models.sources import CandidateClass, Image, Source


class ReviewDecision(models.TextChoices):
    """The decision schema for a reviewed image (DESIGN.md; shown in the UI's help and exports)."""

    OOD = "ood", "ood: no ID object visible, the OOD class is"
    ID = "id", "id: an ID object is at least partly visible"
    UNCLEAR = "unclear", "unclear: cannot tell (excluded, like NINCO's ambiguous images)"
    NOT_TARGET = "not_target", "not_target: no object of the OOD class, or the label is wrong"
    SKIP = "skip", "skip: no decision"


class SynsetText(models.Model):
    """Names, lemmas and gloss of the synsets the review screen shows (ID classes, candidate
    classes), copied from WordNet when a queue is built so web requests need no WordNet."""

    wnid = models.CharField(max_length=9, unique=True)
    name = models.CharField(max_length=255)
    label = models.CharField(max_length=255)
    lemmas = models.JSONField(default=list)
    gloss = models.TextField(blank=True)

    def __str__(self) -> str:
        return f"{self.wnid} {self.label}"


class ReviewSettings(models.Model):
    """How a source (or one of its classes, which then wins) is reviewed."""

    class Order(models.TextChoices):
        NEAREST_ID = "nearest_id", "closest to ID images first"
        RANDOM = "random", "random"

    source = models.ForeignKey(Source, on_delete=models.CASCADE, related_name="review_settings")
    candidate_class = models.ForeignKey(CandidateClass, null=True, blank=True, on_delete=models.CASCADE, related_name="review_settings",
                                        help_text="Empty: the whole source")
    reviews_required = models.PositiveSmallIntegerField(default=1, help_text="Independent reviews each image needs (1-9)")
    order = models.CharField(max_length=16, choices=Order.choices, default=Order.NEAREST_ID)
    gold_rate = models.FloatField(default=0.0, help_text="Share of served images that are gold (0 to 0.5)")
    group_classes = models.BooleanField(default=True, db_default=True, help_text="Serve a class's images in runs (REVIEW_CLASS_RUN images) rather than "
                                                                "switching class at almost every image")
    updated_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name_plural = "review settings"
        constraints = [
            models.UniqueConstraint(fields=["source"], condition=models.Q(candidate_class=None), name="one_review_setting_per_source"),
            models.UniqueConstraint(fields=["source", "candidate_class"], name="one_review_setting_per_class"),
            models.CheckConstraint(condition=models.Q(reviews_required__gte=1, reviews_required__lte=9), name="reviews_required_1_to_9"),
            models.CheckConstraint(condition=models.Q(gold_rate__gte=0, gold_rate__lte=0.5), name="gold_rate_0_to_half"),
        ]

    def __str__(self) -> str:
        scope = self.candidate_class.folder if self.candidate_class_id else "all classes"
        return f"{self.source.name} / {scope}: {self.reviews_required} review(s), {self.order}"


class AnnotatorScope(models.Model):
    """Restricts an annotator to sources or classes. An annotator without scopes reviews every
    candidate source."""

    annotator = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="review_scopes")
    source = models.ForeignKey(Source, on_delete=models.CASCADE, related_name="+")
    candidate_class = models.ForeignKey(CandidateClass, null=True, blank=True, on_delete=models.CASCADE, related_name="+",
                                        help_text="Empty: every class of the source")
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["annotator", "source"], condition=models.Q(candidate_class=None), name="unique_annotator_source_scope"),
            models.UniqueConstraint(fields=["annotator", "source", "candidate_class"], name="unique_annotator_class_scope"),
        ]

    def __str__(self) -> str:
        return f"{self.annotator} -> {self.source.name}" + (f"/{self.candidate_class.folder}" if self.candidate_class_id else "")


class ReviewItem(models.Model):
    """One candidate image in the review queue, with its counters (``done`` reviews, ``leased``
    open leases) and, once complete, its final decision."""

    class Status(models.TextChoices):
        OPEN = "open", "open"
        COMPLETE = "complete", "complete (reviews agree)"
        CONFLICT = "conflict", "conflict (needs adjudication)"
        ADJUDICATED = "adjudicated", "adjudicated"
        WITHDRAWN = "withdrawn", "withdrawn (its class or image left the pool)"

    FINAL = (Status.COMPLETE, Status.ADJUDICATED)  # decided: the reviews agreed, or a curator adjudicated

    image = models.OneToOneField(Image, on_delete=models.CASCADE, related_name="review_item")
    # no index of their own: (source, status) and (candidate_class, status) lead with them, and every
    # index is written on each update of a row (a rebuild that moves 9.2M priorities; issue 45)
    source = models.ForeignKey(Source, on_delete=models.CASCADE, related_name="review_items", db_index=False)
    candidate_class = models.ForeignKey(CandidateClass, null=True, blank=True, on_delete=models.CASCADE, related_name="review_items",
                                        db_index=False)
    priority = models.FloatField(default=0.0, help_text="Lower is served first")
    front_priority = models.FloatField(null=True, blank=True,
                                       help_text="Sent to the front of the queue (find similar): the priority it keeps when the queue is built again")
    required = models.PositiveSmallIntegerField(default=1)
    extra_reviews = models.PositiveSmallIntegerField(default=0, db_default=0, help_text="Reviews asked for beyond the settings (a curator sent it back)")
    done = models.PositiveSmallIntegerField(default=0)
    leased = models.PositiveSmallIntegerField(default=0)
    status = models.CharField(max_length=12, choices=Status.choices, default=Status.OPEN)
    final_decision = models.CharField(max_length=12, choices=ReviewDecision.choices, blank=True, db_index=True)
    final_wnids = models.JSONField(default=list, blank=True)
    final_note = models.TextField(blank=True)
    decided_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+",
                                   help_text="The adjudicating curator (empty when the reviews agreed)")
    decided_at = models.DateTimeField(null=True, blank=True)
    is_gold = models.BooleanField(default=False, db_index=True, help_text="Served to annotators as a known answer")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        indexes = [
            models.Index(fields=["priority", "id"], condition=models.Q(status="open"), name="review_item_open_queue"),
            models.Index(fields=["source", "status"]),
            models.Index(fields=["candidate_class", "status"]),
            # the contamination report's seeded sample: the finally decided items in id order, by position
            # (an index-only scan of the decided items, 10% of a pool, not the queue's heap; issue 45)
            models.Index(fields=["source", "id"], condition=models.Q(status__in=["complete", "adjudicated"]) & ~models.Q(final_decision=""),
                         name="review_item_final_by_id"),
        ]

    def __str__(self) -> str:
        return f"review of image {self.image_id} ({self.status}, {self.done}/{self.required})"


class Assignment(models.Model):
    """An image leased to an annotator. One row per (image, annotator): the same annotator is
    never given an image twice; a lease that expires goes back to the queue."""

    class State(models.TextChoices):
        LEASED = "leased", "leased"
        DONE = "done", "decided"
        SKIPPED = "skipped", "skipped"
        EXPIRED = "expired", "lease expired"

    item = models.ForeignKey(ReviewItem, on_delete=models.CASCADE, related_name="assignments")
    annotator = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="review_assignments")
    state = models.CharField(max_length=8, choices=State.choices, default=State.LEASED)
    is_gold = models.BooleanField(default=False)
    leased_at = models.DateTimeField()
    expires_at = models.DateTimeField()
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["item", "annotator"], name="one_assignment_per_image_and_annotator")]
        indexes = [
            models.Index(fields=["annotator", "state", "leased_at"]),
            models.Index(fields=["expires_at"], condition=models.Q(state="leased"), name="assignment_open_leases"),
        ]

    def __str__(self) -> str:
        return f"{self.annotator} <- item {self.item_id} ({self.state})"


class Review(models.Model):
    """One annotator's decision on one image (``skip`` is recorded on the assignment instead)."""

    item = models.ForeignKey(ReviewItem, on_delete=models.CASCADE, related_name="reviews")
    annotator = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="reviews")
    assignment = models.OneToOneField(Assignment, on_delete=models.CASCADE, related_name="review")
    decision = models.CharField(max_length=12, choices=ReviewDecision.choices)
    id_wnids = models.JSONField(default=list, blank=True, help_text="The ID classes seen (decision id)")
    note = models.TextField(blank=True)
    seconds = models.FloatField(help_text="From the image being served to the decision (capped at 5 minutes)")
    is_gold = models.BooleanField(default=False)
    gold_correct = models.BooleanField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["item", "annotator"], name="one_review_per_image_and_annotator")]
        indexes = [models.Index(fields=["annotator", "created_at"]),
                   # an annotator's own reviews counted (not gold) and today's: from the index alone (issue 45: ~90,000 an annotator at 13.2M)
                   models.Index(fields=["annotator", "is_gold", "created_at"], name="review_annotator_gold_time"),
                   # the browser's "with a note": the few reviews with one (0.02% of a pool's images; issue 45)
                   models.Index(fields=["item"], condition=~models.Q(note=""), name="review_with_note"),
                   # the certification page's gold figures: the answered gold reviews (0.5% of reviews), not all of them
                   models.Index(fields=["item"], condition=models.Q(is_gold=True, gold_correct__isnull=False), name="review_gold_answered")]

    def __str__(self) -> str:
        return f"{self.annotator}: {self.decision} on item {self.item_id}"


class GridPreference(models.Model):
    """How one annotator likes the grid review screen: the tile side they chose (the page then
    holds as many tiles as fit their window). Kept on the server, so it follows them between
    browsers and machines."""

    annotator = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="grid_preference")
    tile_px = models.PositiveSmallIntegerField(help_text="Tile side in CSS pixels (64 to 400)")
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [models.CheckConstraint(condition=models.Q(tile_px__gte=64, tile_px__lte=400), name="grid_tile_px_64_to_400")]

    def __str__(self) -> str:
        return f"{self.annotator}: {self.tile_px} px tiles"


# -- exports ---------------------------------------------------------------------------------------
