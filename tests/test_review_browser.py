"""The review app in Debian's headless Chromium (Playwright), against a live server on the test
database, with predictions from the real offline model. Screenshots go to var/screenshots
(or $OODC_SCREENSHOTS) at 1366x768 and 1920x1080."""
from __future__ import annotations

import pytest

from curation.models import AuditLog, Review, ReviewItem
from curation.roles import ANNOTATOR, CURATOR
from curation.services.review import review_cache_clear, review_next, review_settings_save, review_submit
from curation.services.users import user_create_with_role
from tests.conftest import SHOTS, browser_login
from tests.review_data import queue_with_real_model

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

@pytest.fixture
def queue(tmp_path, settings, role_groups):
    settings.THUMBNAIL_DIR = tmp_path / "thumbs"
    review_cache_clear()
    source = queue_with_real_model(tmp_path, n=30)
    for name in ("ann1", "ann2"):
        user_create_with_role(username=name, password=f"{name}-pw", role=ANNOTATOR)
    user_create_with_role(username="cur", password="cur-pw", role=CURATOR)
    return source


def _on_screen(page) -> int:
    page.wait_for_function("document.querySelector('#photo') && document.querySelector('#photo').dataset.image")
    return int(page.get_attribute("#photo", "data-image"))


def _wait_saved(page, count: int):
    page.wait_for_function(f"document.querySelector('#status').textContent.includes('{count} reviewed this session')")


def test_annotator_reviews_twenty_images_with_the_keyboard_only(queue, live_server, browser):
    ctx = browser.new_context(viewport={"width": 1366, "height": 768})
    page = ctx.new_page()
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    browser_login(page, live_server.url, "ann1", "/review/")
    assert "Start reviewing" in page.inner_text("#start")
    page.goto(f"{live_server.url}/review/screen/")
    page.wait_for_selector("#top5 li")
    page.screenshot(path=str(SHOTS / "review-1366x768.png"))
    expected: dict[int, tuple[str, list[str]]] = {}
    plan = ["o", "o", "u", "o", "search", "n", "o", "o", "o", "top1", "o", "o", "o", "u", "o", "o", "o", "n", "o", "o"]
    done = 0
    undo_at, undone_image = 7, None
    for k, action in enumerate(plan):
        image = _on_screen(page)
        if action == "search":
            page.keyboard.press("i")
            page.keyboard.press("/")
            page.keyboard.type("golden retr")
            page.wait_for_selector("#results li.hl")
            page.screenshot(path=str(SHOTS / "review-id-search-1366x768.png"))
            assert "golden retriever" in page.inner_text("#results li.hl")
            page.keyboard.press("Enter")
            expected[image] = ("id", ["n02099601"])
        elif action == "top1":
            wnid = page.get_attribute("#top5 li[data-rank='1']", "data-wnid")
            page.keyboard.press("i")
            page.keyboard.press("1")
            expected[image] = ("id", [wnid])
        else:
            if k == 3:  # a note, typed after T, saved with the decision
                page.keyboard.press("t")
                page.keyboard.type("faint reflection, no ID object")
                page.keyboard.press("Enter")
            page.keyboard.press(action)
            expected[image] = ({"o": "ood", "u": "unclear", "n": "not_target"}[action], [])
        done += 1
        _wait_saved(page, done)
        if action == "search":  # the status line names the class, not only its wnid
            assert "Saved: id: golden retriever (n02099601)" in page.inner_text("#status")
        if k == undo_at:  # take it back: the same image returns, decided again
            undone_image = image
            page.keyboard.press("z")
            page.wait_for_function("document.querySelector('#status').textContent.includes('taken back')")
            assert _on_screen(page) == image
            done -= 1
            page.keyboard.press("u")
            expected[image] = ("unclear", [])
            done += 1
            _wait_saved(page, done)
    page.keyboard.press("?")
    assert page.is_visible("#help")
    page.screenshot(path=str(SHOTS / "review-help-1366x768.png"))
    page.keyboard.press("Escape")
    page.keyboard.press("1")  # actual size, then back to fit (tests/test_browse_browser.py covers zoom in full)
    assert page.get_attribute("#stage", "data-zoom") == "1:1"
    page.keyboard.press("f")
    assert page.get_attribute("#stage", "data-zoom") == "fit"
    page.set_viewport_size({"width": 1920, "height": 1080})
    page.wait_for_timeout(300)
    page.screenshot(path=str(SHOTS / "review-1920x1080.png"))
    assert not errors, errors

    reviews = {r.item.image_id: (r.decision, r.id_wnids) for r in Review.objects.filter(annotator__username="ann1").select_related("item")}
    assert reviews == expected and len(reviews) == 20
    assert Review.objects.get(item__image_id=list(expected)[3]).note == "faint reflection, no ID object"
    assert AuditLog.objects.filter(action="review_undone", data__image=undone_image).count() == 1
    assert AuditLog.objects.filter(action="review_decided", actor__username="ann1").count() == 21  # the undone one too
    assert ReviewItem.objects.filter(status="complete").count() == 20
    # the top-5 shown were the real model's, with example strips from the ID reference source
    assert page.locator("#top5 li").count() == 5


def test_two_annotators_get_disjoint_images_and_a_curator_adjudicates(queue, live_server, browser):
    pages = {}
    for name in ("ann1", "ann2"):
        ctx = browser.new_context(viewport={"width": 1366, "height": 768})
        pages[name] = ctx.new_page()
        browser_login(pages[name], live_server.url, name, "/review/screen/")
    seen = {"ann1": [], "ann2": []}
    for round_ in range(1, 7):
        for name, page in pages.items():
            seen[name].append(_on_screen(page))
        for name, page in pages.items():  # both decide at (nearly) the same time
            page.keyboard.press("o")
        for page in pages.values():
            _wait_saved(page, round_)
    assert not set(seen["ann1"]) & set(seen["ann2"]), seen
    assert Review.objects.count() == 12 and Review.objects.values("item").distinct().count() == 12

    # a second review is now required: a third annotator sees ID objects where ann1 saw none
    review_settings_save(source=queue, reviews_required=2)
    third = user_create_with_role(username="ann3", password="x", role=ANNOTATOR)[0]
    for _ in range(3):
        held = review_next(user=third, want=1)
        review_submit(user=third, assignment_id=held[0].pk, decision="id", wnids=["n02123045"], note="tabby behind")
    assert ReviewItem.objects.filter(status="conflict").count() == 3

    cur = browser.new_context(viewport={"width": 1366, "height": 768}).new_page()
    browser_login(cur, live_server.url, "cur", "/curate/adjudicate/")
    assert "3 images waiting" in cur.inner_text("#waiting")
    item_id = int(cur.get_attribute("#adjudication", "data-item"))
    assert "tabby behind" in cur.inner_text("#adj-reviews")
    cur.screenshot(path=str(SHOTS / "adjudicate-1366x768.png"))
    cur.fill("#adj-note", "no cat: a pattern")
    cur.click("button.decide[data-decision=ood]")
    cur.wait_for_selector("text=2 images waiting")
    item = ReviewItem.objects.get(pk=item_id)
    assert (item.status, item.final_decision, item.decided_by.username, item.final_note) == ("adjudicated", "ood", "cur", "no cat: a pattern")
    cur.goto(f"{live_server.url}/curate/reviews/")
    assert "Fleiss" in cur.inner_text("#fleiss")
    cur.set_viewport_size({"width": 1920, "height": 1080})
    cur.screenshot(path=str(SHOTS / "review-dashboard-1920x1080.png"), full_page=True)
