"""The demo's stand-in for people: reviews recorded through the real review service from the
demo data's answer key, so the demo can end with an export. Never used outside the demo."""
from __future__ import annotations

from collections import Counter
from typing import Callable

from django.contrib.auth.models import User

from curation.audit import audit_record
from curation.models import ReviewItem
from curation.services.review import review_next, review_submit


def demo_reviews_record(*, user: User, answer: Callable[[str], tuple[str, list[str]]], leave_folders: set[str] = frozenset()) -> Counter:
    """Have ``user`` review every image they are served, deciding by ``answer(relative_path)``;
    images of ``leave_folders`` are skipped (left for people to review in the browser)."""
    decided: Counter = Counter()
    while True:
        batch = review_next(user=user, want=20)
        if not batch:
            break
        for a in batch:
            item = ReviewItem.objects.select_related("image", "candidate_class").get(pk=a.item_id)
            folder = item.candidate_class.folder if item.candidate_class_id else ""
            if folder in leave_folders:
                review_submit(user=user, assignment_id=a.pk, decision="skip")
                decided["left_for_people"] += 1
                continue
            decision, wnids = answer(item.image.relative_path)
            review_submit(user=user, assignment_id=a.pk, decision=decision, wnids=wnids, seconds=4.0,
                          note="demo answer key" if decision != "ood" else "")
            decided[decision] += 1
    audit_record(actor=user, action="demo_reviews_recorded", target=user, data=dict(decided))
    return decided
