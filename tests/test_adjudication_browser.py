"""The adjudication screen in Debian's headless Chromium (Playwright) at 1366x768 and
1920x1080, against a live server on the test database, which is checked after each step: the
reviews that disagree are whole on screen with annotator, answer by class name and wnid, note
and time; a decision by keys is saved without reloading the page and the next conflict is drawn
in place; Z takes adjudications back one by one and the review item is exactly as before."""
from __future__ import annotations

import pytest
from django.forms.models import model_to_dict

from curation.models import AuditLog, ReviewItem
from curation.roles import ANNOTATOR, CURATOR
from curation.services.review import review_cache_clear, review_next, review_settings_save, review_submit
from curation.services.users import user_create_with_role
from tests.conftest import SHOTS, browser_login
from tests.review_data import queue_with_rows

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

LONG = 60_000  # ms: the test machine is shared and slow


@pytest.fixture
def conflicts(tmp_path, settings, role_groups):
    settings.THUMBNAIL_DIR = tmp_path / "thumbs"
    review_cache_clear()
    source = queue_with_rows(tmp_path, n=3)
    review_settings_save(source=source, reviews_required=2)
    users = {name: user_create_with_role(username=name, password=f"{name}-pw", role=ANNOTATOR)[0] for name in ("alice", "bob")}
    user_create_with_role(username="cur", password="cur-pw", role=CURATOR)
    for name, decision, wnids, note in (("alice", "ood", None, "only ice and sky, nothing from ImageNet"),
                                        ("bob", "id", ["n02123045", "n07920052"], "a tabby cat bottom left and a cup on the snow")):
        while held := review_next(user=users[name]):
            review_submit(user=users[name], assignment_id=held[0].pk, decision=decision, wnids=wnids, note=note, seconds=4.2)
    assert ReviewItem.objects.filter(status="conflict").count() == 3
    return source


def _row(pk):
    item = ReviewItem.objects.get(pk=pk)
    return model_to_dict(item) | {"decided_at": item.decided_at}


def _fits(page) -> dict:
    """No sideways scroll; the reviews box whole inside the window and not clipped by the panel."""
    return page.evaluate("""() => {
      const box = document.getElementById('adj-reviews').getBoundingClientRect();
      const list = document.getElementById('adj-reviews');
      const panel = document.querySelector('.panel').getBoundingClientRect();
      return {sideways: document.documentElement.scrollWidth > window.innerWidth,
              panelSideways: document.querySelector('.panel').scrollWidth > document.querySelector('.panel').clientWidth,
              whole: box.top >= panel.top && box.bottom <= Math.min(panel.bottom, window.innerHeight) && box.height > 0,
              clipped: list.scrollHeight > list.clientHeight + 1, height: box.height};
    }""")


@pytest.mark.parametrize("size", [(1366, 768), (1920, 1080)])
def test_reviews_visible_decide_in_place_and_undo(conflicts, live_server, browser, size):
    width, height = size
    page = browser.new_context(viewport={"width": width, "height": height}).new_page()
    page.set_default_timeout(LONG)
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    browser_login(page, live_server.url, "cur", "/curate/adjudicate/")
    page.wait_for_selector("#adj-reviews li")
    first = int(page.get_attribute("#adjudication", "data-item"))
    before_first = _row(first)

    # the reviews that disagree: annotator, answer by class name and wnid, note, time
    reviews = page.inner_text("#adj-reviews")
    for text in ("alice", "bob", "OOD: clean", "ID visible", "tabby", "(n02123045)", "espresso", "(n07920052)",
                 "only ice and sky", "a tabby cat bottom left", "4.2 s"):
        assert text in reviews, (text, reviews)
    fit = _fits(page)
    assert not fit["sideways"] and not fit["panelSideways"] and fit["whole"] and not fit["clipped"], fit
    page.screenshot(path=str(SHOTS / f"adjudicate-{width}x{height}.png"))

    # searching every ID class: the search and its results in view, no sideways scroll; Esc, Esc back
    page.keyboard.press("i")
    page.keyboard.press("/")
    page.keyboard.type("golden retr")
    page.wait_for_selector("#results li.hl")
    assert page.locator("#results li.hl").is_visible() and not _fits(page)["sideways"] and not _fits(page)["panelSideways"]
    page.screenshot(path=str(SHOTS / f"adjudicate-search-{width}x{height}.png"))
    page.keyboard.press("Escape")
    page.keyboard.press("Escape")
    assert ReviewItem.objects.get(pk=first).status == "conflict"

    # a decision by keys, no reload: a marker set on the window survives
    page.evaluate("window.__sameDocument = true")
    page.keyboard.press("t")
    page.keyboard.type("pattern only")
    page.keyboard.press("Enter")
    page.keyboard.press("g")
    page.keyboard.press("o")
    page.wait_for_function(f"document.querySelector('#adjudication').dataset.item !== '{first}'")
    page.wait_for_selector("text=2 images waiting")
    assert page.evaluate("window.__sameDocument") is True
    item = ReviewItem.objects.get(pk=first)
    assert (item.status, item.final_decision, item.final_note, item.is_gold, item.decided_by.username) == \
        ("adjudicated", "ood", "pattern only", True, "cur")
    second = int(page.get_attribute("#adjudication", "data-item"))
    assert second != first and "bob" in page.inner_text("#adj-reviews")
    assert page.input_value("#adj-note") == "" and not page.is_checked("#adj-gold")

    # the second by ID: I then 1 (the top-5's first class)
    before_second = _row(second)
    wnid = page.get_attribute("#top5 li[data-rank='1']", "data-wnid")
    page.keyboard.press("i")
    page.keyboard.press("1")
    page.wait_for_selector("text=1 image waiting")
    item = ReviewItem.objects.get(pk=second)
    assert (item.status, item.final_decision, item.final_wnids) == ("adjudicated", "id", [wnid])
    assert f"tabby ({wnid})" in page.inner_text("#adj-messages")  # the recorded class by name
    assert "Z undoes 2" in page.inner_text("#undoable")

    # Z takes the second back: it is on screen again, and its row is as before
    page.keyboard.press("z")
    page.wait_for_selector("text=2 images waiting")
    page.wait_for_function(f"document.querySelector('#adjudication').dataset.item === '{second}'")
    assert _row(second) == before_second
    assert "back as it was" in page.inner_text("#status")
    # and Z again, the first (gold and note taken back too)
    page.keyboard.press("z")
    page.wait_for_selector("text=3 images waiting")
    page.wait_for_function(f"document.querySelector('#adjudication').dataset.item === '{first}'")
    assert _row(first) == before_first and not ReviewItem.objects.get(pk=first).is_gold
    assert AuditLog.objects.filter(action="review_adjudication_undone", actor__username="cur").count() == 2
    assert page.is_disabled("#adj-undo")
    fit = _fits(page)
    assert not fit["sideways"] and fit["whole"] and not fit["clipped"], fit
    assert page.evaluate("window.__sameDocument") is True

    # decide all three; the empty screen still offers undo
    for _ in range(3):
        page.keyboard.press("u")
        page.wait_for_function("!document.querySelector('#status').textContent.startsWith('Recording')")
    page.wait_for_selector("#no-conflicts", state="visible")
    assert ReviewItem.objects.filter(status="adjudicated", final_decision="unclear").count() == 3
    page.screenshot(path=str(SHOTS / f"adjudicate-empty-{width}x{height}.png"))
    page.click("#adj-undo")
    page.wait_for_selector("text=1 image waiting")
    assert ReviewItem.objects.filter(status="conflict").count() == 1
    assert not errors, errors
