"""Issue 62, row 9: the grid's tile size was saved by a GET (``/api/review/grid/next?tile=``), so
another site could change it (and lease the annotator a page) with an image tag. The tile side is
now remembered only by a POST of ``{size, tile}`` carrying the CSRF token; a GET naming ``tile``
is refused (405) and changes nothing, and a malformed POST answers 400."""
from __future__ import annotations

import pytest
from django.test import Client

from curation.models import Assignment
from curation.models.review import GridPreference
from curation.roles import ANNOTATOR
from curation.services.review import review_cache_clear
from curation.services.users import user_create_with_role
from tests.review_data import queue_with_rows

pytestmark = pytest.mark.django_db

NEXT = "/api/review/grid/next"


@pytest.fixture
def annotator(tmp_path, role_groups):
    review_cache_clear()
    queue_with_rows(tmp_path, n=18)
    return user_create_with_role(username="t1", password="t1-pw-12345", role=ANNOTATOR)[0]


@pytest.fixture
def browser(annotator):
    """A client that checks CSRF as a browser's requests are checked."""
    c = Client(enforce_csrf_checks=True)
    c.force_login(annotator)
    c.get("/review/grid/")  # the screen sets the CSRF cookie its script sends back
    return c


def _tile(user) -> int | None:
    return GridPreference.objects.filter(annotator=user).values_list("tile_px", flat=True).first()


def test_a_get_naming_a_tile_size_changes_nothing_and_leases_nothing(annotator, browser):
    r = browser.get(f"{NEXT}?size=8&tile=176")
    assert r.status_code == 405 and r["Allow"] == "POST" and "POST" in r.json()["error"]
    assert _tile(annotator) is None
    assert not Assignment.objects.filter(annotator=annotator).exists()
    assert 'data-tile="128"' in browser.get("/review/grid/").content.decode()
    assert browser.get(f"{NEXT}?size=8").status_code == 200  # a plain GET still brings the page


def test_the_tile_size_is_changed_by_a_post_with_the_csrf_token(annotator, browser):
    token = browser.cookies["csrftoken"].value
    r = browser.post(NEXT, {"size": 8, "tile": 176}, content_type="application/json", HTTP_X_CSRFTOKEN=token)
    assert r.status_code == 200 and r.json()["tiles"]
    assert _tile(annotator) == 176
    assert 'data-tile="176"' in browser.get("/review/grid/").content.decode()
    # the same page again (the held leases), the size unchanged: nothing else is written
    again = browser.post(NEXT, {"size": 8, "tile": 176}, content_type="application/json", HTTP_X_CSRFTOKEN=token)
    assert [t["assignment"] for t in again.json()["tiles"]] == [t["assignment"] for t in r.json()["tiles"]]


def test_a_post_without_the_csrf_token_is_refused(annotator, browser):
    r = browser.post(NEXT, {"size": 8, "tile": 200}, content_type="application/json")
    assert r.status_code == 403
    assert _tile(annotator) is None and not Assignment.objects.filter(annotator=annotator).exists()


@pytest.mark.parametrize("body,kind", [
    ({"size": 8, "tile": 9000}, "json"), ({"size": 8, "tile": "12px"}, "json"), ({"size": 8, "tile": 1.5}, "json"),
    ({"size": 8, "tile": True}, "json"), ({"size": 8, "tile": None}, "json"), ({"size": "x", "tile": 176}, "json"),
    ([176], "json"), ("{not json", "raw"), ({"size": "8", "tile": "176"}, "form"),
])
def test_a_malformed_post_answers_400_and_changes_nothing(annotator, browser, body, kind):
    token = browser.cookies["csrftoken"].value
    if kind == "form":
        r = browser.post(NEXT, body, HTTP_X_CSRFTOKEN=token)
    else:
        r = browser.post(NEXT, body, content_type="application/json", HTTP_X_CSRFTOKEN=token)
    assert r.status_code == 400, r.content[:300]
    assert "error" in r.json() and _tile(annotator) is None


def test_the_screen_sends_a_changed_tile_size_by_post():
    from pathlib import Path

    js = (Path(__file__).resolve().parents[1] / "labeling_ui/static/labeling_ui/grid.js").read_text()
    assert "&tile=" not in js and "call(api.next, { size, tile })" in js
