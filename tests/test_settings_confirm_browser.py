"""Issue 31.2: a settings change that would change decided work says what, with counts, and
needs a confirmation (Chromium at 1366x768 and 1920x1080, the database checked at each step)."""
from __future__ import annotations

import pytest
from django.contrib.auth.models import User

from curation.models import AuditLog, ReviewItem, ReviewSettings
from curation.roles import ANNOTATOR, CURATOR
from curation.services.review import review_cache_clear, review_next, review_settings_impact, review_submit
from curation.services.users import user_create_with_role
from tests.conftest import SHOTS, browser_login
from tests.review_data import queue_with_rows

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def decided(tmp_path, settings, role_groups):
    """A queue of 12 images at one review each; 7 of them decided."""
    settings.THUMBNAIL_DIR = tmp_path / "thumbs"
    review_cache_clear()
    source = queue_with_rows(tmp_path, n=12)
    ann = user_create_with_role(username="ann1", password="ann1-pw", role=ANNOTATOR)[0]
    user_create_with_role(username="cur", password="cur-pw", role=CURATOR)
    for _ in range(7):
        a = review_next(user=ann, want=1)[0]
        review_submit(user=ann, assignment_id=a.pk, decision="ood")
    return source


@pytest.mark.parametrize("viewport", [(1366, 768), (1920, 1080)], ids=["1366x768", "1920x1080"])
def test_raising_reviews_per_image_shows_what_it_reopens_and_needs_a_confirmation(decided, live_server, browser, viewport):
    source = decided
    complete = ReviewItem.objects.filter(source=source, status="complete").count()
    assert complete == 7
    w, h = viewport
    page = browser.new_context(viewport={"width": w, "height": h}).new_page()
    browser_login(page, live_server.url, "cur", "/curate/reviews/")
    form = page.locator("form.settings-form").first
    form.locator("input[name=reviews_required]").fill("2")
    form.locator("button[name=save]").click()
    page.wait_for_selector("#settings-impact")
    assert page.inner_text("[data-count=reopen]").strip() == "7"
    assert page.inner_text("[data-count=before]").strip() == "1" and page.inner_text("[data-count=after]").strip() == "2"
    assert "re-opens 7 decided images" in page.inner_text("#settings-impact")
    assert page.evaluate("document.documentElement.scrollWidth") <= w
    if w == 1366:
        page.screenshot(path=str(SHOTS / "settings-confirm-1366x768.png"))
    # nothing changed yet
    assert ReviewItem.objects.filter(source=source, status="complete").count() == 7
    assert not ReviewSettings.objects.filter(source=source, reviews_required=2).exists()
    assert not AuditLog.objects.filter(action="review_settings_changed").exists()
    # cancel: still nothing; then again, and confirm
    page.click("#cancel-settings")
    page.wait_for_url(f"{live_server.url}/curate/reviews/")
    assert ReviewItem.objects.filter(source=source, status="complete").count() == 7
    form = page.locator("form.settings-form").first
    form.locator("input[name=reviews_required]").fill("2")
    form.locator("button[name=save]").click()
    page.click("#confirm-settings")
    page.wait_for_url(f"{live_server.url}/curate/reviews/")
    assert "re-opens 7 decided images" in page.inner_text(".messages")
    assert ReviewItem.objects.filter(source=source, status="complete").count() == 0
    assert ReviewItem.objects.filter(source=source, status="open", done=1, required=2).count() == 7
    log = AuditLog.objects.get(action="review_settings_changed")
    assert log.data["confirmed"] == {"reviews_required": [1, 2], "reopened": 7, "conflicts_reopened": 0, "decided": 0}
    assert log.actor == User.objects.get(username="cur")
    # back to 1: the 7 open images with one review each are decided at once: counted and confirmed too
    assert review_settings_impact(source=source, reviews_required=1).decide == 7
    form = page.locator("form.settings-form").first
    form.locator("input[name=reviews_required]").fill("1")
    form.locator("button[name=save]").click()
    page.wait_for_selector("#settings-impact")
    assert page.inner_text("[data-count=decide]").strip() == "7"
    page.click("#confirm-settings")
    page.wait_for_url(f"{live_server.url}/curate/reviews/")
    assert ReviewItem.objects.filter(source=source, status="complete").count() == 7


def test_a_change_that_touches_no_decided_work_saves_at_once(decided, client):
    client.force_login(User.objects.get(username="cur"))
    r = client.post(f"/curate/reviews/source/{decided.pk}/", {"reviews_required": "1", "order": "random", "gold_rate": "0.1"})
    assert r.status_code == 302 and ReviewSettings.objects.get(source=decided, candidate_class=None).gold_rate == 0.1
    # a confirmation whose counts went stale (someone reviewed meanwhile) asks again instead of applying
    r = client.post(f"/curate/reviews/source/{decided.pk}/", {"reviews_required": "2", "order": "random", "gold_rate": "0.1",
                                                             "confirm": "1-2-6-0"})
    assert r.status_code == 200 and b"settings-impact" in r.content
    assert ReviewItem.objects.filter(source=decided, status="complete").count() == 7
    r = client.post(f"/curate/reviews/source/{decided.pk}/", {"reviews_required": "12", "order": "random", "gold_rate": "0"})
    assert r.status_code == 302 and ReviewSettings.objects.get(source=decided, candidate_class=None).reviews_required == 1
