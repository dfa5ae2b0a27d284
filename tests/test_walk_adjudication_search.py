"""Issue 31.1 as walked: the reviews that disagree stay whole in view while the curator searches
the ID classes (the search moves to the top of the panel, and a long result list pushed the
reviews below the window at 1366x768)."""
from __future__ import annotations

import pytest

from tests.conftest import browser_login
from tests.test_adjudication_browser import LONG, _fits, conflicts  # noqa: F401 (the fixture)

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.django_db(transaction=True)]


@pytest.mark.parametrize("size", [(1366, 768), (1920, 1080)], ids=["1366x768", "1920x1080"])
def test_reviews_stay_whole_while_searching_id_classes(conflicts, live_server, browser, size):  # noqa: F811
    page = browser.new_context(viewport={"width": size[0], "height": size[1]}).new_page()
    page.set_default_timeout(LONG)
    browser_login(page, live_server.url, "cur", "/curate/adjudicate/")
    page.wait_for_selector("#adj-reviews li")
    page.keyboard.press("i")
    page.keyboard.press("/")
    page.keyboard.type("stripe")  # matches only glosses: a long list of results
    page.wait_for_function("document.querySelectorAll('#results li').length >= 5")
    assert page.evaluate("document.activeElement.id") == "search"
    fit = _fits(page)
    assert not fit["sideways"] and fit["whole"] and not fit["clipped"], fit
    # and the search box itself is in view above the results
    box = page.evaluate("(() => { const r = document.getElementById('search').getBoundingClientRect(); return [r.top, r.bottom]; })()")
    assert 0 < box[0] and box[1] < size[1], box
