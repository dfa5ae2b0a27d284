"""The demo's gold step (curation/services/demo.py): after the stand-in's reviews, a few decided
images with and without an ID object become gold, each from another class, gold is served at
the demo's rate, and a person who then reviews is checked against them and sees their gold
accuracy. On the test database, through the real review service."""
from __future__ import annotations

import random

import pytest

from curation.models import ReviewItem, ReviewSettings
from curation.roles import ANNOTATOR
from curation.selectors.adjudication import my_quality
from curation.services.demo import demo_gold_set, demo_reviews_record
from curation.services.review import review_cache_clear, review_next, review_submit
from curation.services.review_stats import review_stats_current
from curation.services.users import user_create_with_role
from tests.review_data import FAKE_TOP5, KEPT_CLASSES, queue_with_rows

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _fresh(settings):
    settings.REVIEW_RECLAIM_EVERY = 0
    review_cache_clear()
    yield
    review_cache_clear()


def test_gold_from_the_stand_ins_decisions_checks_the_next_person(tmp_path):
    source = queue_with_rows(tmp_path, n=18)
    stand_in = user_create_with_role(username="annotator2", password="pw-2", role=ANNOTATOR)[0]
    # the answer key: the first two images of each class hold an ID object; the last class is left for people
    paths = sorted(ReviewItem.objects.filter(source=source).values_list("image__relative_path", flat=True))
    with_id = {p for folder in KEPT_CLASSES for p in [q for q in paths if q.startswith(folder + "/")][:2]}
    decided = demo_reviews_record(user=stand_in, answer=lambda rel: ("id", [FAKE_TOP5[0][0]]) if rel in with_id else ("ood", []),
                                  leave_folders={KEPT_CLASSES[2]})
    assert decided["id"] >= 2 and decided["ood"] >= 2

    got = demo_gold_set(source=source, per_answer=2, rate=0.1)
    assert got == {"id": 2, "ood": 2}
    gold = ReviewItem.objects.filter(source=source, is_gold=True)
    assert sorted(gold.values_list("final_decision", flat=True)) == ["id", "id", "ood", "ood"]
    for decision in ("id", "ood"):  # another class each
        classes = list(gold.filter(final_decision=decision).values_list("candidate_class_id", flat=True))
        assert len(set(classes)) == 2
    assert ReviewSettings.objects.get(source=source, candidate_class=None).gold_rate == 0.1
    assert demo_gold_set(source=source, per_answer=2, rate=0.1) == {"id": 2, "ood": 2}  # a rerun adds others, changes none
    assert ReviewItem.objects.filter(source=source, is_gold=True).count() == 8

    person = user_create_with_role(username="annotator", password="pw-1", role=ANNOTATOR)[0]
    assert my_quality(user=person, figures=review_stats_current().figures) is None
    always = random.Random(0)
    always.random = lambda: 0.0  # every draw falls under the rate: a gold check is served
    held = review_next(user=person, want=1, rng=always)[0]
    assert held.is_gold
    review_submit(user=person, assignment_id=held.pk, decision="ood", seconds=3.0)
    right = ReviewItem.objects.get(pk=held.item_id).final_decision == "ood"
    mine = my_quality(user=person, figures=review_stats_current().figures)
    assert mine is not None and mine.gold == 1 and mine.gold_correct == int(right)
