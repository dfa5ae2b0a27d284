"""What a curator does to a selection in the image browser (docs/browse.md): exclude images with
a reason (the review queue and every export leave them out), include them again, send
reviewed images back to the queue for one more review, and label them (a curator's decision,
recorded as adjudication). Each image is audited; a batch reports what it did and why it left
some images alone."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

from django.contrib.auth.models import User
from django.db import transaction
from django.utils import timezone

from curation.audit import audit_record
from curation.models import Image, ReviewDecision, ReviewItem, Source
from curation.services.review import ReviewError, clean_decision, review_queue_refresh_if_built

MAX_SELECTION = 1000


class BrowseActionError(ValueError):
    """A selection action that cannot run; the message says why and what to do."""


@dataclass
class ActionReport:
    action: str
    done: int = 0
    skipped: dict[str, int] = field(default_factory=dict)

    def summary(self) -> str:
        rest = "; ".join(f"{n} {why}" for why, n in sorted(self.skipped.items()))
        return f"{self.action}: {self.done} image(s)" + (f"; left alone: {rest}" if rest else "")


def _images(image_ids: Iterable[int]) -> list[Image]:
    ids = sorted({int(i) for i in image_ids})
    if not ids:
        raise BrowseActionError("no image is selected: tick the images first")
    if len(ids) > MAX_SELECTION:
        raise BrowseActionError(f"{len(ids)} images are selected; act on at most {MAX_SELECTION} at once")
    return list(Image.objects.filter(pk__in=ids).select_related("source"))


def _refresh(sources: set[int], user: User | None) -> None:
    for source in Source.objects.filter(pk__in=sources, role=Source.Role.CANDIDATE):
        review_queue_refresh_if_built(source=source, user=user)


def images_exclude(*, image_ids: Iterable[int], reason: str, user: User | None = None) -> ActionReport:
    """Exclude images: they leave the review queue (open ones are withdrawn) and no export
    carries them, until included again."""
    reason = (reason or "").strip()
    if not reason:
        raise BrowseActionError("say why the images are excluded (the reason is kept with them and in the audit log)")
    if len(reason) > 500:
        raise BrowseActionError("the reason is longer than 500 characters")
    report = ActionReport("excluded")
    images = _images(image_ids)
    with transaction.atomic():
        for image in images:
            if image.excluded_reason == reason:
                report.skipped["already excluded for that reason"] = report.skipped.get("already excluded for that reason", 0) + 1
                continue
            before = image.excluded_reason
            Image.objects.filter(pk=image.pk).update(excluded_reason=reason)
            audit_record(actor=user, action="image_excluded", target=image, data={"reason": reason, "before": before})
            report.done += 1
    _refresh({i.source_id for i in images}, user)
    return report


def images_include(*, image_ids: Iterable[int], user: User | None = None) -> ActionReport:
    """Take a curator's exclusion back."""
    report = ActionReport("included again")
    images = _images(image_ids)
    with transaction.atomic():
        for image in images:
            if not image.excluded_reason:
                report.skipped["not excluded"] = report.skipped.get("not excluded", 0) + 1
                continue
            Image.objects.filter(pk=image.pk).update(excluded_reason="")
            audit_record(actor=user, action="image_included", target=image, data={"before": image.excluded_reason})
            report.done += 1
    _refresh({i.source_id for i in images}, user)
    return report


def _outside_queue(image: Image, item: ReviewItem | None, verb: str) -> str:
    """Why a selected image cannot be requeued or labelled at all ("" when it can): the reason
    counted in the action's report."""
    if image.source.role != Source.Role.CANDIDATE:
        return f"ID reference images are not {verb}"
    if image.excluded_reason:
        return "excluded by a curator (include them first)"
    if item is None or item.status == ReviewItem.Status.WITHDRAWN:
        return "not in the review queue (build it, or see why the queue leaves them out on the review dashboard)"
    return ""


def images_requeue(*, image_ids: Iterable[int], user: User | None = None) -> ActionReport:
    """Send reviewed images back to the review queue for one more review (their reviews so
    far stay; the next review joins them, and disagreement goes to adjudication). Images not in
    the queue are left alone, with the reason."""
    report = ActionReport("queued for one more review")
    images = {i.pk: i for i in _images(image_ids)}
    with transaction.atomic():
        items = {it.image_id: it for it in ReviewItem.objects.select_for_update().filter(image_id__in=list(images))}
        for image_id, image in images.items():
            it = items.get(image_id)
            why = _outside_queue(image, it, "reviewed")
            if not why and it.status == ReviewItem.Status.OPEN:
                why = "already waiting for review"
            if why:
                report.skipped[why] = report.skipped.get(why, 0) + 1
                continue
            before = {"status": it.status, "decision": it.final_decision, "required": it.required}
            it.status, it.final_decision, it.final_wnids = ReviewItem.Status.OPEN, "", []
            more = max(0, it.done + 1 - it.required)
            it.required += more
            it.extra_reviews += more
            it.save(update_fields=["status", "final_decision", "final_wnids", "required", "extra_reviews"])
            audit_record(actor=user, action="image_requeued", target=image, data={"before": before, "required": it.required})
            report.done += 1
    return report


def images_label(*, image_ids: Iterable[int], decision: str, wnids: Iterable[str] | None = None, reason: str,
                 user: User | None = None) -> ActionReport:
    """A curator labels a selection (ood / id with its ID classes / unclear / not_target), with a
    reason: each image's final decision is set as an adjudication would set it (status
    ``adjudicated``, decided by the curator, the reason as its note), whether or not annotators
    reviewed it yet; open images leave the queue that way. Audited per image as
    ``review_adjudicated`` with ``"via": "image browser"``. It is not an annotator's review: no
    Review row, no effect on annotators' numbers."""
    reason = (reason or "").strip()
    if not reason:
        raise BrowseActionError("say why these images get this label (the reason is kept with each decision and in the audit log)")
    if len(reason) > 500:
        raise BrowseActionError("the reason is longer than 500 characters")
    if decision == ReviewDecision.SKIP:
        raise BrowseActionError("a label needs a decision: ood, id, unclear or not_target (skip is not one)")
    try:
        decision, clean_wnids, reason = clean_decision(decision, list(wnids or []), reason)
    except ReviewError as exc:
        msg = str(exc).split(";")[0]
        raise BrowseActionError(msg + ("; give ID class wnids, such as n02123045 (tabby cat)" if "ID class" in msg else "")) from None
    report = ActionReport(f"labelled {decision}" + (f" ({', '.join(clean_wnids)})" if clean_wnids else ""))
    images = {i.pk: i for i in _images(image_ids)}
    now = timezone.now()
    with transaction.atomic():
        items = {it.image_id: it for it in ReviewItem.objects.select_for_update().filter(image_id__in=list(images))}
        for image_id, image in images.items():
            it = items.get(image_id)
            why = _outside_queue(image, it, "labelled")
            if not why and it.status == ReviewItem.Status.ADJUDICATED and it.final_decision == decision and it.final_wnids == clean_wnids:
                why = "already labelled so"
            if why:
                report.skipped[why] = report.skipped.get(why, 0) + 1
                continue
            before = {"status": it.status, "decision": it.final_decision, "wnids": it.final_wnids, "done": it.done}
            it.status, it.final_decision, it.final_wnids, it.final_note = ReviewItem.Status.ADJUDICATED, decision, clean_wnids, reason
            it.decided_by, it.decided_at = (user if getattr(user, "pk", None) else None), now
            it.save(update_fields=["status", "final_decision", "final_wnids", "final_note", "decided_by", "decided_at"])
            audit_record(actor=user, action="review_adjudicated", target=it,
                         data={"image": image_id, "decision": decision, "wnids": clean_wnids, "note": reason, "gold": it.is_gold,
                               "before": before, "via": "image browser"})
            report.done += 1
    return report
