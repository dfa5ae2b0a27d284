"""Adjudication from the adjudication screen, and its undo.

A decision is ``review_adjudicate`` (curation/services/review.py), whose audit entry keeps the
item's whole previous state (status, final decision, classes, note, decider, time, gold). An
undo takes the curator's latest adjudication made on this screen that was not undone yet, checks
the image still holds exactly what that adjudication wrote (nobody changed it since), and puts
the previous state back, field for field; the undo is audited as
``review_adjudication_undone`` naming the entry it reverses. Pressing undo again goes one
further back.
"""
from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from django.contrib.auth.models import User
from django.db import transaction

from curation.audit import audit_record
from curation.models import AuditLog, ReviewItem
from curation.selectors.adjudication import ADJUDICATED, UNDONE, adjudications_undoable
from curation.services.review import NothingToUndo, ReviewError, review_adjudicate

__all__ = ["NothingToUndo", "ReviewError", "adjudication_decide", "adjudication_undo"]


def adjudication_decide(*, item_id: int, decision: str, wnids: Sequence[str] | None = None, note: str = "",
                        make_gold: bool = False, user: User) -> ReviewItem:
    """The final decision on a conflict; only a conflict (one already decided is refused, so
    that two curators on the same queue do not overwrite each other unseen)."""
    status = ReviewItem.objects.filter(pk=item_id).values_list("status", flat=True).first()
    if status is None:
        raise ReviewError(f"no review item {item_id}")
    if status != ReviewItem.Status.CONFLICT:
        raise ReviewError(f"image of item {item_id} is no longer waiting for adjudication (it is {status}): someone decided it meanwhile")
    return review_adjudicate(item_id=item_id, decision=decision, wnids=wnids, note=note, make_gold=make_gold, user=user)


def _after_matches(item: ReviewItem, log: AuditLog) -> bool:
    d = log.data
    return (item.status == ReviewItem.Status.ADJUDICATED and item.final_decision == d.get("decision")
            and list(item.final_wnids or []) == list(d.get("wnids") or []) and item.final_note == d.get("note", "")
            and item.decided_by_id == log.actor_id and item.is_gold == bool(d.get("gold")))


def adjudication_undo(*, user: User) -> ReviewItem:
    """Take back the user's latest adjudication (on this screen) not undone yet: the image's
    previous state comes back exactly. Refused, naming the image, when the image changed since."""
    with transaction.atomic():
        logs = adjudications_undoable(user=user, limit=1)
        if not logs:
            raise NothingToUndo("no adjudication of yours is left to undo")
        log = logs[0]
        item = ReviewItem.objects.select_for_update().filter(pk=int(log.target_id)).first()
        if item is None:
            raise ReviewError(f"the image of adjudication {log.pk} is no longer in the review queue")
        later = AuditLog.objects.filter(action=ADJUDICATED, target_type=log.target_type, target_id=log.target_id, pk__gt=log.pk)
        if later.exists() or not _after_matches(item, log):
            raise ReviewError(f"image {item.image_id} was changed after your adjudication (now {item.status}"
                              f"{' ' + item.final_decision if item.final_decision else ''}); change it from the image browser instead")
        before = log.data.get("before") or {}
        if "decided_at" not in before:
            raise ReviewError(f"adjudication {log.pk} was recorded before undo existed: its previous state is not complete")
        undone = {"status": item.status, "decision": item.final_decision, "wnids": item.final_wnids, "note": item.final_note,
                  "decided_by": item.decided_by_id, "decided_at": item.decided_at.isoformat() if item.decided_at else None,
                  "gold": item.is_gold}
        item.status, item.final_decision = before["status"], before["decision"]
        item.final_wnids, item.final_note = before.get("wnids") or [], before.get("note", "")
        item.decided_by_id = before.get("decided_by")
        item.decided_at = datetime.fromisoformat(before["decided_at"]) if before.get("decided_at") else None
        item.is_gold = bool(before.get("gold"))
        item.save(update_fields=["status", "final_decision", "final_wnids", "final_note", "decided_by", "decided_at", "is_gold"])
        audit_record(actor=user, action=UNDONE, target=item, data={"undoes": log.pk, "image": item.image_id, "restored": before,
                                                                    "undone": undone})
    return item
