"""The counters the database keeps for the pages (issue 45; migration 0032_queue_counters): after
every kind of write the services make, the per-class queue counters and the per-source image
counters equal a GROUP BY over the tables, on PostgreSQL (statement-level triggers) and on SQLite
(row-level triggers); and the pages that counted the whole queue per request now read the
counters: their statements do not read curation_reviewitem / curation_image / curation_review
whole, and their number does not grow with the pool."""
from __future__ import annotations

from datetime import timedelta

import pytest
from django.db.models import Count, Q, Sum
from django.utils import timezone

from curation.models import Assignment, CandidateClass, Image, ImageEmbedding, QueueClassCount, ReviewItem, Source, SourceImageCount
from curation.services.review import (
    review_adjudicate,
    review_items_set_gold,
    review_next,
    review_queue_sync,
    review_reclaim_expired,
    review_release_leases,
    review_settings_save,
    review_submit,
    review_undo,
)

pytestmark = pytest.mark.django_db

S = ReviewItem.Status
FINAL = Q(status__in=[S.COMPLETE, S.ADJUDICATED])


def _pool(n: int, name: str = "pool", classes: int = 3) -> Source:
    source = Source.objects.create(name=name, root="/nonexistent")
    made = CandidateClass.objects.bulk_create([CandidateClass(source=source, folder=f"c{k}", mapping="unmapped") for k in range(classes)])
    images = Image.objects.bulk_create([Image(source=source, candidate_class=made[k % classes], relative_path=f"c/{k}.jpg",
                                              sha256=f"{source.pk:08x}{k:056x}", status="ok" if k % 11 else "broken") for k in range(n)])
    ImageEmbedding.objects.bulk_create([ImageEmbedding(image=i, model_name="m", nearest_id_similarity=(i.pk % 17) / 17) for i in images])
    return source


def _expected_queue() -> dict:
    rows = (ReviewItem.objects.values("source_id", "candidate_class_id")
            .annotate(n_open=Count("id", filter=Q(status=S.OPEN)), n_complete=Count("id", filter=Q(status=S.COMPLETE)),
                      n_conflict=Count("id", filter=Q(status=S.CONFLICT)), n_adjudicated=Count("id", filter=Q(status=S.ADJUDICATED)),
                      n_withdrawn=Count("id", filter=Q(status=S.WITHDRAWN)),
                      final_decided=Count("id", filter=FINAL & ~Q(final_decision="")),
                      final_id=Count("id", filter=FINAL & Q(final_decision="id")), final_ood=Count("id", filter=FINAL & Q(final_decision="ood")),
                      final_unclear=Count("id", filter=FINAL & Q(final_decision="unclear")),
                      final_not_target=Count("id", filter=FINAL & Q(final_decision="not_target")),
                      done_sum=Sum("done", filter=~Q(status=S.WITHDRAWN), default=0),
                      required_sum=Sum("required", filter=~Q(status=S.WITHDRAWN), default=0),
                      n_gold=Count("id", filter=Q(is_gold=True))))
    out = {(r.pop("source_id"), r.pop("candidate_class_id")): r for r in rows}
    for key in out:
        out[key]["open_free"] = 0
    for it in ReviewItem.objects.filter(status=S.OPEN).values("source_id", "candidate_class_id", "done", "leased", "required"):
        if it["done"] + it["leased"] < it["required"]:
            out[(it["source_id"], it["candidate_class_id"])]["open_free"] += 1
    return out


def _kept_queue() -> dict:
    names = [f.name for f in QueueClassCount._meta.concrete_fields if f.name not in ("id", "source", "candidate_class")]
    return {(r.pop("source_id"), r.pop("candidate_class_id")): r for r in QueueClassCount.objects.values("source_id", "candidate_class_id", *names)}


def _expected_images() -> dict:
    return {(r["source_id"], r["status"]): r["n"] for r in Image.objects.values("source_id", "status").annotate(n=Count("id"))}


def _kept_images() -> dict:
    return {(r["source_id"], r["status"]): r["n"] for r in SourceImageCount.objects.values("source_id", "status", "n")}


def _agree(step: str) -> None:
    assert _kept_queue() == _expected_queue(), f"queue counters after {step}"
    assert _kept_images() == _expected_images(), f"image counters after {step}"


def test_the_counters_equal_a_group_by_after_every_kind_of_write(settings, django_user_model):
    settings.DEFAULT_MODEL = "m"
    source = _pool(45)
    _agree("ingest (bulk insert)")
    review_settings_save(source=source, reviews_required=2)
    review_queue_sync(source=source, model_name="m")
    assert ReviewItem.objects.filter(source=source).exists()
    _agree("queue build")
    a, b, c = (django_user_model.objects.create(username=n) for n in ("a", "b", "c"))
    leases_a = review_next(user=a, want=6)
    _agree("lease")
    for lease in leases_a:
        review_submit(user=a, assignment_id=lease.pk, decision="ood", seconds=3.0)
    _agree("submit")
    leases_b = review_next(user=b, want=6)
    for k, lease in enumerate(leases_b):  # agreeing with a, disagreeing, or skipping
        review_submit(user=b, assignment_id=lease.pk, decision=("ood", "unclear", "skip")[k % 3], seconds=2.0)
    assert ReviewItem.objects.filter(status=S.CONFLICT).exists() and ReviewItem.objects.filter(status=S.COMPLETE).exists()
    _agree("agreement, conflict and skip")
    review_undo(user=b)
    _agree("undo")
    conflict = ReviewItem.objects.filter(status=S.CONFLICT).first()
    if conflict is not None:
        review_adjudicate(item_id=conflict.pk, decision="not_target")
    _agree("adjudication")
    review_items_set_gold(item_ids=list(ReviewItem.objects.filter(status=S.COMPLETE).values_list("pk", flat=True)[:2]), gold=True)
    _agree("gold")
    held = review_next(user=c, want=4)
    review_release_leases(item_ids=[held[0].item_id])
    Assignment.objects.filter(annotator=c, state=Assignment.State.LEASED).update(expires_at=timezone.now() - timedelta(minutes=1))
    review_reclaim_expired(force=True)
    _agree("released and expired leases")
    review_settings_save(source=source, reviews_required=3)  # re-opens decided work
    _agree("settings change (re-open)")
    gone = ReviewItem.objects.filter(source=source).order_by("pk").first()
    Image.objects.filter(pk=gone.image_id).update(excluded_reason="curator")
    review_queue_sync(source=source, model_name="m")
    assert ReviewItem.objects.get(pk=gone.pk).status == S.WITHDRAWN
    _agree("withdraw")
    ReviewItem.objects.filter(source=source, status=S.OPEN).update(status=S.COMPLETE, final_decision="id")  # a bulk UPDATE
    _agree("bulk update")
    Image.objects.filter(source=source, status="broken").update(status="missing")
    _agree("image status update")
    other = _pool(12, name="other")
    review_queue_sync(source=other, model_name="m")
    ReviewItem.objects.filter(source=source, candidate_class__folder="c0").delete()
    _agree("delete")
    Image.objects.filter(source=source).delete()  # with their queue items (the classes protect their images)
    source.delete()  # and its classes: nothing of it is left in the counters
    _agree("source deleted")
    assert not QueueClassCount.objects.filter(source_id=source.pk).exists() and not SourceImageCount.objects.filter(source_id=source.pk).exists()
    assert QueueClassCount.objects.filter(source=other).exists()


def test_an_item_without_a_class_is_counted_under_no_class():
    source = _pool(4, classes=1)
    image = Image.objects.filter(source=source).first()
    ReviewItem.objects.create(image=image, source=source, candidate_class=None)
    ReviewItem.objects.create(image=Image.objects.filter(source=source).last(), source=source, candidate_class=None, status=S.COMPLETE,
                              final_decision="ood")
    row = QueueClassCount.objects.get(source=source, candidate_class=None)
    assert (row.n_open, row.n_complete, row.final_ood, row.total) == (1, 1, 1, 2)
    ReviewItem.objects.filter(source=source).delete()
    assert not QueueClassCount.objects.filter(source=source).exists()
