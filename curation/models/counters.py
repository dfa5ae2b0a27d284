"""Counters the database keeps (issue 45): the review queue's items per (source, candidate class)
by status and decision, and a source's images by status. Pages that showed counts over the whole
queue (9.2 million items at ImageNet-21K's size) read these instead: one row per class (19,167),
one per source and status.

Nothing in Python writes them. Triggers on ``curation_reviewitem`` and ``curation_image``
(migration 0032_queue_counters) add each statement's change, so no write path (a service, a bulk
UPDATE, the queue rebuild's COPY'd temporary table, the admin, a raw SQL fix) can forget one. A row
whose items are all gone is deleted by the same trigger; that is also why the foreign keys here
have no database constraint: a class or source deleted with its items leaves nothing behind, and
a counter row never blocks (nor is cascaded before) the delete that empties it."""
from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models.functions import Coalesce

from curation.models.sources import CandidateClass, Source


class QueueClassCount(models.Model):
    """The review queue of one (source, candidate class): its items by status, the final
    decisions among the decided ones, the open items that still have a free slot, and the sums
    of reviews done and required. Kept by triggers (module docstring); read, never written, by
    Python."""

    source = models.ForeignKey(Source, on_delete=models.DO_NOTHING, db_constraint=False, db_index=False, related_name="+")
    candidate_class = models.ForeignKey(CandidateClass, null=True, blank=True, on_delete=models.DO_NOTHING, db_constraint=False,
                                        db_index=False, related_name="+", help_text="Empty: the items without a class")
    n_open = models.BigIntegerField(default=0, help_text="Items open (waiting for reviews or holding leases)")
    n_complete = models.BigIntegerField(default=0, help_text="Items whose reviews agreed")
    n_conflict = models.BigIntegerField(default=0, help_text="Items waiting for adjudication")
    n_adjudicated = models.BigIntegerField(default=0)
    n_withdrawn = models.BigIntegerField(default=0, help_text="Items whose class or image left the pool")
    open_free = models.BigIntegerField(default=0, help_text="Open items with a free slot (done + leased < required)")
    final_decided = models.BigIntegerField(default=0, help_text="Complete or adjudicated items with a final decision")
    final_id = models.BigIntegerField(default=0, help_text="... whose final decision is id (an ID object visible: contamination)")
    final_ood = models.BigIntegerField(default=0)
    final_unclear = models.BigIntegerField(default=0)
    final_not_target = models.BigIntegerField(default=0)
    done_sum = models.BigIntegerField(default=0, help_text="Reviews done, summed over the items not withdrawn")
    required_sum = models.BigIntegerField(default=0, help_text="Reviews required, summed over the items not withdrawn")
    n_gold = models.BigIntegerField(default=0, help_text="Gold items (any status)")

    class Meta:
        constraints = [models.UniqueConstraint(models.F("source"), Coalesce(models.F("candidate_class"), models.Value(0)),
                                               name="queue_class_count_key")]

    def __str__(self) -> str:
        return f"queue of source {self.source_id} class {self.candidate_class_id}: {self.n_open} open"

    @property
    def total(self) -> int:
        """Items queued and not withdrawn."""
        return self.n_open + self.n_complete + self.n_conflict + self.n_adjudicated


class AnnotatorQueueCount(models.Model):
    """One annotator's part of an open queue, per (source, candidate class): their assignments
    (not expired) on open items, and those done or skipped on open items that still have a free
    slot. The review screen's "left" and the annotator's "waiting for you" subtract these from
    the class's open counts (``QueueClassCount``) instead of joining the annotator's 90,000
    assignments to the queue per request (0.74 s at 13.2M images). Kept by triggers on
    ``curation_assignment`` and ``curation_reviewitem`` (module docstring)."""

    annotator = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.DO_NOTHING, db_constraint=False, db_index=False,
                                  related_name="+")
    source = models.ForeignKey(Source, on_delete=models.DO_NOTHING, db_constraint=False, db_index=False, related_name="+")
    candidate_class = models.ForeignKey(CandidateClass, null=True, blank=True, on_delete=models.DO_NOTHING, db_constraint=False,
                                        db_index=False, related_name="+")
    seen_open = models.BigIntegerField(default=0, help_text="Their assignments, not expired, on open items")
    seen_free = models.BigIntegerField(default=0, help_text="Their done or skipped assignments on open items with a free slot")

    class Meta:
        constraints = [models.UniqueConstraint(models.F("annotator"), models.F("source"), Coalesce(models.F("candidate_class"), models.Value(0)),
                                               name="annotator_queue_count_key")]

    def __str__(self) -> str:
        return f"annotator {self.annotator_id} in source {self.source_id} class {self.candidate_class_id}: {self.seen_open} seen"


class SourceImageCount(models.Model):
    """A source's images with one status. Kept by triggers (module docstring)."""

    source = models.ForeignKey(Source, on_delete=models.DO_NOTHING, db_constraint=False, db_index=False, related_name="+")
    status = models.CharField(max_length=16)
    n = models.BigIntegerField(default=0)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["source", "status"], name="source_image_count_key")]

    def __str__(self) -> str:
        return f"source {self.source_id}: {self.n} {self.status}"


class ReviewStatsSnapshot(models.Model):
    """The review figures that sum over every review (Fleiss' kappa, every pair of annotators'
    Cohen kappa, each annotator's throughput and gold accuracy): at 13.2M images that is millions
    of reviews, seconds a request. Computed in the background when the reviews change
    (``curation.services.review_stats``) and shown as of ``computed_at``, over ``reviews``
    reviews. One row."""

    computed_at = models.DateTimeField(null=True, blank=True, help_text="Empty: never computed yet")
    requested_at = models.DateTimeField(null=True, blank=True, help_text="When a page last asked for a recomputation")
    reviews = models.BigIntegerField(default=0, help_text="Non-gold reviews the figures are over")
    done_sum = models.BigIntegerField(default=0, help_text="The queue's reviews done (QueueClassCount) when computed: stale when it moved")
    figures = models.JSONField(default=dict, blank=True)

    def __str__(self) -> str:
        return f"review figures as of {self.computed_at} over {self.reviews} reviews"
