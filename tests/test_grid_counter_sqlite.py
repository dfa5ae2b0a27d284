"""Issue 62, row 1: grid review on SQLite (the demo's database) answered 500 for an annotator on
every call once one of their grid leases had run out: the page lease upserts the assignments
(``INSERT ... ON CONFLICT DO UPDATE``), SQLite fires the assignment's UPDATE trigger for the
updated rows under the upsert's ABORT policy, which overrides the trigger body's
``INSERT OR IGNORE`` of the annotator's counter row, so an existing row raised
``UNIQUE constraint failed: index 'annotator_queue_count_key'``. Migration
0037_grid_counter_trigger_fix makes the triggers create a missing counter row with
``WHERE NOT EXISTS`` instead. These tests replay the history (reviews, leases that run out and go
back to the queue, a re-lease through the API) on whichever database the suite runs, SQLite by
default, and check the answers and the counters against a GROUP BY over the tables."""
from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from curation.models import AnnotatorQueueCount, Assignment
from curation.roles import ANNOTATOR
from curation.services.review import review_cache_clear, review_reclaim_expired, review_release_leases, review_settings_save
from curation.services.users import user_create_with_role
from tests.review_data import queue_with_rows
from tests.test_scale_counters import _agree

pytestmark = pytest.mark.django_db


@pytest.fixture
def pool(tmp_path, role_groups, client):
    review_cache_clear()
    source = queue_with_rows(tmp_path, n=30)  # 3 classes of 10
    user = user_create_with_role(username="sq1", password="sq1-pw-12345", role=ANNOTATOR)[0]
    other = user_create_with_role(username="sq2", password="sq2-pw-12345", role=ANNOTATOR)[0]
    client.force_login(user)
    return source, user, other


def _next(client, size: int = 8) -> dict:
    r = client.get(f"/api/review/grid/next?size={size}")
    assert r.status_code == 200, r.content[:500]
    return r.json()


def _submit(client, page: dict, decision: str = "ood", size: int = 8) -> dict:
    marks = [{"assignment": t["assignment"], "decision": decision} for t in page["tiles"]]
    r = client.post("/api/review/grid/submit", {"marks": marks, "size": size}, content_type="application/json")
    assert r.status_code == 200, r.content[:500]
    return r.json()


def _expire(user) -> None:
    Assignment.objects.filter(annotator=user, state=Assignment.State.LEASED).update(expires_at=timezone.now() - timedelta(minutes=1))
    review_reclaim_expired(force=True)


def test_a_page_leased_again_after_its_leases_ran_out_answers_200_and_keeps_the_counters(pool, client):
    source, user, _other = pool
    review_settings_save(source=source, reviews_required=2)  # decided images stay open: the annotator's counter rows live on
    first = _next(client)
    _agree("a grid page leased")
    after = _submit(client, first)  # reviews; the answer leases the next page of the class (and prefetches)
    _agree("a page sent")
    assert after["tiles"]
    _expire(user)  # the page left open runs out and goes back to the queue
    assert Assignment.objects.filter(annotator=user, state=Assignment.State.EXPIRED).count() >= 2
    _agree("leases expired and reclaimed")
    for _ in range(3):  # the same images leased to them again (their own expired rows updated): every call answers
        again = _next(client)
        assert again["tiles"]
        _agree("a re-lease of expired leases")
        _expire(user)
    expired = {t["assignment"] for t in after["tiles"]}
    page = _next(client)
    assert expired & {t["assignment"] for t in page["tiles"]}, "the re-lease updates their existing assignment rows"
    _submit(client, page)
    _agree("the re-leased page sent")
    assert AnnotatorQueueCount.objects.filter(annotator=user).exists()


def test_released_leases_and_a_requeue_then_a_re_lease(pool, client):
    source, user, other = pool
    review_settings_save(source=source, reviews_required=2)
    page = _next(client)
    held = Assignment.objects.filter(pk__in=[t["assignment"] for t in page["tiles"]]).order_by("pk")
    review_release_leases(item_ids=list(held.values_list("item_id", flat=True)[:3]))
    _agree("leases released")
    _expire(user)
    review_settings_save(source=source, reviews_required=3)  # a requeue: decided work opens again
    _agree("requeue")
    page = _next(client, size=12)
    _submit(client, page, "unclear", size=12)
    _agree("a re-leased page sent")
    client.force_login(other)
    _submit(client, _next(client), size=8)
    _agree("another annotator's page")


def test_the_sqlite_triggers_create_counter_rows_without_a_conflict_clause():
    if connection.vendor != "sqlite":
        pytest.skip("SQLite's row-level triggers")
    with connection.cursor() as c:
        c.execute("SELECT name, sql FROM sqlite_master WHERE type = 'trigger' AND name LIKE 'oodc_%'")
        triggers = dict(c.fetchall())
    assert {"oodc_seen_assign_upd", "oodc_seen_item_upd", "oodc_queue_counts_upd", "oodc_image_counts_upd"} <= set(triggers)
    for name, sql in triggers.items():  # an outer statement's conflict policy (an upsert's ABORT) would override it
        assert "OR IGNORE" not in sql.upper(), name
