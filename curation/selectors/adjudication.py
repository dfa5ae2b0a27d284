"""Reads for adjudication: the conflicts waiting, the adjudication screen (one conflict with its
reviews, by class name), and annotator quality (pace and gold accuracy, flagged by
``pipelines.review.annotator_quality``)."""
from __future__ import annotations

from django.conf import settings

from curation.models import AuditLog, Review, ReviewItem, SynsetText
from pipelines.review.annotator_quality import AnnotatorQuality, AnnotatorTimes, QualityRules, annotator_quality

ADJUDICATED = "review_adjudicated"
UNDONE = "review_adjudication_undone"


def conflicts_waiting() -> int:
    return ReviewItem.objects.filter(status=ReviewItem.Status.CONFLICT).count()


def next_conflict(*, exclude=()) -> ReviewItem | None:
    """The conflict to show next (oldest first), leaving out ``exclude`` (item ids)."""
    return (ReviewItem.objects.filter(status=ReviewItem.Status.CONFLICT).exclude(pk__in=list(exclude))
            .order_by("decided_at", "id").first())


def adjudication_queue(*, limit: int = 50):
    from curation.models import ReviewItem

    return list(ReviewItem.objects.filter(status=ReviewItem.Status.CONFLICT).select_related("image", "source", "candidate_class")
                .prefetch_related("reviews__annotator").order_by("decided_at", "id")[:limit])


def adjudication_payload(item: ReviewItem) -> dict:
    """What the adjudication screen shows for one image: the review screen's facts (OOD class,
    top-5) and every non-gold review with its annotator, its answer by class name and wnid, its
    note, when it was given and how long it took."""
    from curation.models import Assignment
    from curation.selectors.review import review_payload

    # a gold image in conflict (requeued after it became gold) shows as gold: the decision recorded
    # here becomes the answer annotators are checked against
    fake = Assignment(item_id=item.pk, is_gold=item.is_gold, expires_at=item.created_at)
    p = review_payload([fake], model_name=settings.DEFAULT_MODEL)[0]
    reviews = list(item.reviews.filter(is_gold=False).select_related("annotator").order_by("created_at", "id"))
    wnids = {w for r in reviews for w in (r.id_wnids or [])}
    names = {t.wnid: t.label for t in SynsetText.objects.filter(wnid__in=wnids)}
    p["reviews"] = [{
        "annotator": r.annotator.username if r.annotator_id else "(deleted user)",
        "decision": r.decision,
        "classes": [{"wnid": w, "label": names.get(w, w)} for w in (r.id_wnids or [])],
        "note": r.note, "at": r.created_at.isoformat(), "seconds": round(r.seconds, 1) if r.seconds is not None else None,
    } for r in reviews]
    p["status"] = item.status
    return p


def class_names(wnids) -> list[str]:
    """``label (wnid)`` for each wnid, in order."""
    names = dict(SynsetText.objects.filter(wnid__in=list(wnids)).values_list("wnid", "label"))
    return [f"{names.get(w, w)} ({w})" for w in wnids]


def adjudications_undoable(*, user, limit: int = 50) -> list[AuditLog]:
    """The user's adjudications made on the adjudication screen, newest first, that were not
    undone (an undo names the entry it reverses)."""
    undone = set(AuditLog.objects.filter(action=UNDONE, actor=user).values_list("data__undoes", flat=True)[:1000])
    out = []
    for log in (AuditLog.objects.filter(action=ADJUDICATED, actor=user, target_type="curation.reviewitem")
                .exclude(data__has_key="via").order_by("-created_at", "-id")[: limit + len(undone)]):
        if log.pk not in undone:
            out.append(log)
            if len(out) >= limit:
                break
    return out


RULES = QualityRules()


def quality_rows(*, rules: QualityRules = RULES) -> list[AnnotatorQuality]:
    """Pace and gold accuracy of every annotator with a review, flagged by the stated rules."""
    times: dict[str, list[float]] = {}
    gold: dict[str, list[int]] = {}
    for name, secs, is_gold, ok in (Review.objects.values_list("annotator__username", "seconds", "is_gold", "gold_correct")
                                    .order_by().iterator(chunk_size=10000)):
        name = name or "(deleted user)"
        times.setdefault(name, [])
        g = gold.setdefault(name, [0, 0])
        if is_gold:
            g[0] += 1
            g[1] += 1 if ok else 0
        elif secs is not None:
            times[name].append(float(secs))
    people = [AnnotatorTimes(name=n, seconds=times[n], gold=gold[n][0], gold_correct=gold[n][1]) for n in sorted(times)]
    return annotator_quality(people, rules)


def my_quality(*, user, figures: dict) -> AnnotatorQuality | None:
    """The annotator's own row (pace against the team, gold accuracy) as of the review figures'
    snapshot (``figures``: ``curation.services.review_stats.review_stats_current().figures``),
    or None before a review."""
    from curation.selectors.review import quality_of

    for row in quality_of(figures):
        if row.name == user.username:
            return row
    return None
