"""Issue 47, row 2: two annotators without leases ask for a grid page at the same instant. The
one whose rows the other is leasing at that moment must still get a page (or, while the rows
stay held, a "busy" answer the screen retries), never the empty "queue finished" page while
images are waiting. On PostgreSQL, each annotator in a thread with its own connection."""
from __future__ import annotations

import threading
import time

import pytest
from django.db import connection
from django.test import Client

from curation.models import Assignment
from curation.roles import ANNOTATOR
from curation.services import review_grid
from curation.services.review import review_cache_clear, review_settings_save
from curation.services.users import user_create_with_role
from tests.review_data import queue_with_rows

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def pool(tmp_path, role_groups):
    review_cache_clear()
    source = queue_with_rows(tmp_path, n=24)  # 3 classes of 8: a 12-tile page takes a whole class
    users = [user_create_with_role(username=f"r{k}", password=f"r{k}-pw-12345", role=ANNOTATOR)[0] for k in range(2)]
    return source, users


def _slow_leases(monkeypatch, hold: float):
    """Each page's leases are written ``hold`` seconds after their rows were locked: the window
    in which the other annotator's request meets those rows locked (it is milliseconds in
    production; here it is wide enough for the two threads to meet every time)."""
    real = review_grid._upsert_leases

    def slow(user, placed, *, gold, now):
        if placed and not gold:
            time.sleep(hold)
        return real(user, placed, gold=gold, now=now)

    monkeypatch.setattr(review_grid, "_upsert_leases", slow)


def _together(fn, n: int = 2) -> list:
    start = threading.Barrier(n, timeout=30)
    out: list = [None] * n
    errors: list = []

    def run(i: int) -> None:
        try:
            start.wait()
            out[i] = fn(i)
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    return out


@pytest.mark.parametrize("required", [1, 2])
def test_two_annotators_asking_at_once_both_get_a_page(pool, monkeypatch, required):
    source, users = pool
    review_settings_save(source=source, reviews_required=required)
    review_cache_clear()
    _slow_leases(monkeypatch, 0.4)
    leases = _together(lambda i: review_grid.review_grid_next(user=users[i], size=12))
    assert all(lease.assignments for lease in leases), [len(lease.assignments) for lease in leases]
    assert not any(lease.busy for lease in leases)
    mine = [{a.item_id for a in lease.assignments} for lease in leases]
    if required == 1:
        assert not mine[0] & mine[1], "one review an image: no image leased twice"
    for lease, user in zip(leases, users):
        held = set(Assignment.objects.filter(annotator=user, state="leased").values_list("pk", flat=True))
        assert {a.pk for a in lease.assignments} == held


def test_rows_held_past_the_retries_answer_busy_and_the_screen_asks_again(pool, monkeypatch):
    """Through the API with two logged-in clients: the rows stay locked longer than the request
    retries, so the loser hears "busy" with work left (not an empty finished page); asked
    again, it gets its page."""
    _source, users = pool
    monkeypatch.setattr(review_grid, "RACE_WAITS", (0.02, 0.05))
    _slow_leases(monkeypatch, 1.5)
    clients = []
    for k in range(2):
        c = Client()
        assert c.login(username=f"r{k}", password=f"r{k}-pw-12345")
        clients.append(c)
    answers = _together(lambda i: clients[i].get("/api/review/grid/next?size=12").json())
    by_tiles = sorted(answers, key=lambda a: len(a["tiles"]))
    loser, winner = by_tiles
    assert len(winner["tiles"]) == 8 and not winner["busy"]
    assert loser["tiles"] == [] and loser["busy"] is True and loser["progress"]["left"] > 0
    who = answers.index(loser)
    again = clients[who].get("/api/review/grid/next?size=12").json()
    assert again["tiles"] and not again["busy"]
