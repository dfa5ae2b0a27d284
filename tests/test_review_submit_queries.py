"""How many SQL statements a review submit costs (issue 38: fifty annotators racing on two
cores). A page submit records the page and leases the next one in a fixed number of statements,
whatever the page's size: nothing is done per tile. A count, not a time: a change that adds a
query per request (or per tile) fails here, with the statements listed."""
from __future__ import annotations

import json

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from curation.models import Assignment, AuditLog, Review, ReviewItem
from curation.roles import ANNOTATOR
from curation.services.review import review_cache_clear
from curation.services.review_grid import grid_cache_clear
from curation.services.users import user_create_with_role
from tests.review_data import queue_with_rows

pytestmark = pytest.mark.django_db

# Statements of one request once the screen is under way (steady state: leases young, the
# per-process caches warm, the page's class not at its end), as the test database shows them
# (an atomic block is a savepoint here, a transaction in production). Session, user, roles: 3.
# The page: savepoint, lock its leases with their images, insert its reviews, mark its leases
# done, update its images' counters, insert its audit entries, release: 7. The next page: the
# annotator's scope, their live leases with their classes, savepoint, lock the next images,
# bump their counters, insert the leases, release: 7. The tiles: items, predictions, synset
# texts: 3. Progress, when the screen asks for it (every few pages; grid.js counts in between):
# scope, their assignments, open images, their reviews, their pace: 5.
# Before issue 38's pass: 31 on every page (progress on each, and the page's leases re-read,
# refreshed and committed apart).
# Issue 48 adds 1: the class's waiting images, counted once, so a page never leaves a stub behind.
GRID_PAGE_SUBMIT = 21
PROGRESS = 5
# Single image: 3; savepoint, lock, insert the review, mark the lease done, update the counter,
# audit, release: 7; the next image: live leases, scope, savepoint, lock one, bump its counter,
# insert the lease, release: 7; the new image's item, predictions, texts: 3.
SINGLE_SUBMIT = 20


def listed(ctx) -> str:
    return "\n".join(f"{k:3d} {q['sql'][:200]}" for k, q in enumerate(ctx.captured_queries, 1))


@pytest.fixture
def pool(tmp_path):
    review_cache_clear()
    grid_cache_clear()
    return queue_with_rows(tmp_path, n=300)  # three classes of 100


def _annotator(client, name):
    user, _ = user_create_with_role(username=name, password="x-pw-12345", role=ANNOTATOR)
    client.force_login(user)
    return user


def _submit_page(client, page, size, **extra):
    marks = [{"assignment": t["assignment"], "decision": "ood"} for t in page["tiles"]]
    with CaptureQueriesContext(connection) as ctx:
        r = client.post("/api/review/grid/submit", json.dumps({"marks": marks, "size": size, "seconds": 0.2 * size, **extra}),
                        content_type="application/json")
    assert r.status_code == 200, r.content
    return r.json(), ctx


# Sizes whose pages do not reach their class's end here (classes of 100): a page that is its
# class's last leases the next class's first page ahead, which costs that class's pick and count
# (2 statements more, whatever the size).
@pytest.mark.parametrize("size", [12, 20])
def test_a_page_submit_costs_the_same_few_statements_whatever_its_size(pool, client, size):
    user = _annotator(client, f"q{size}")
    page = client.get(f"/api/review/grid/next?size={size}").json()
    page, _ = _submit_page(client, page, size)  # the first submit leases the page after next too (prefetch)
    first = {t["assignment"] for t in page["tiles"]}
    page, ctx = _submit_page(client, page, size)
    assert len(ctx.captured_queries) == GRID_PAGE_SUBMIT, listed(ctx)
    # and it did the whole job: the page recorded once, the next page and the one after leased
    assert Review.objects.filter(annotator=user, assignment_id__in=first).count() == size
    assert AuditLog.objects.filter(actor=user, action="review_decided").count() == 2 * size
    # the page after this one takes the class's rest when less than half a page would be left (issue 48: no stubs)
    ahead = 100 - 3 * size
    want = ahead if 0 < ahead - size and 2 * (ahead - size) < size else size
    assert len(page["tiles"]) == size and len(page["prefetch"]) == want
    live = Assignment.objects.filter(annotator=user, state=Assignment.State.LEASED)
    assert live.count() == size + want
    assert sorted(page["prefetch"]) == sorted(ReviewItem.objects.filter(assignments__in=live.exclude(
        pk__in=[t["assignment"] for t in page["tiles"]])).values_list("image_id", flat=True))
    assert ReviewItem.objects.filter(leased__gt=0).count() == size + want and ReviewItem.objects.filter(done=1).count() == 2 * size
    assert "progress" not in page  # not asked for
    page, ctx = _submit_page(client, page, size, progress=True)
    assert len(ctx.captured_queries) == GRID_PAGE_SUBMIT + PROGRESS, listed(ctx)
    assert page["progress"]["done_today"] == 3 * size


def test_a_single_image_submit_costs_a_fixed_few_statements(pool, client):
    _annotator(client, "s1")
    data = client.get("/api/review/next").json()
    for k in range(3):
        item = data["items"][0]
        with CaptureQueriesContext(connection) as ctx:
            r = client.post("/api/review/submit", json.dumps({"assignment": item["assignment"], "decision": "ood", "seconds": 0.5,
                                                              "have": [x["assignment"] for x in data["items"][1:]]}),
                            content_type="application/json")
        assert r.status_code == 200, r.content
        data = r.json()
        assert len(ctx.captured_queries) == SINGLE_SUBMIT, listed(ctx)
