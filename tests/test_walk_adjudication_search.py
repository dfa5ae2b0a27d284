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


ESPRESSO = "n07920052"


def test_a_letter_in_id_mode_searches_and_a_gold_conflict_says_so(conflicts, live_server, browser):  # noqa: F811
    """Issue 31 as walked: after I, typing a class name without / first recorded the letters O, U
    or N on the way ("espresso" recorded ood), and a gold image requeued into conflict looked like
    any other while the decision recorded on it becomes the answer annotators are checked against."""
    from curation.models import ReviewItem

    ReviewItem.objects.filter(status="conflict").update(is_gold=True)  # as after the image browser's "Queue for review" on gold images
    page = browser.new_context(viewport={"width": 1366, "height": 768}).new_page()
    page.set_default_timeout(LONG)
    browser_login(page, live_server.url, "cur", "/curate/adjudicate/")
    page.wait_for_selector("#adj-reviews li")
    item = page.get_attribute("#adjudication", "data-item")
    assert page.is_visible("#adj-gold-note") and "becomes the answer annotators are checked against" in page.inner_text("#adj-gold-note")
    assert page.is_checked("#adj-gold") and page.is_disabled("#adj-gold")
    fit = _fits(page)
    assert not fit["sideways"] and fit["whole"] and not fit["clipped"], fit

    page.keyboard.press("i")
    page.keyboard.type("espresso")  # no "/": the first letter opens the search, the rest is typed into it
    page.wait_for_selector("#results li.hl")
    assert page.evaluate("document.activeElement.id") == "search" and page.input_value("#search") == "espresso"
    assert page.get_attribute("#results li.hl", "data-wnid") == ESPRESSO
    assert page.get_attribute("#adjudication", "data-item") == item
    assert ReviewItem.objects.filter(status="conflict").count() == 3  # nothing recorded on the way
    page.keyboard.press("Enter")
    page.wait_for_function(f"document.querySelector('#adjudication').dataset.item !== '{item}'")
    decided = ReviewItem.objects.get(pk=int(item))
    assert (decided.status, decided.final_decision, decided.final_wnids, decided.is_gold) == ("adjudicated", "id", [ESPRESSO], True)
    assert "(gold: its answer now)" in page.inner_text("#status")
