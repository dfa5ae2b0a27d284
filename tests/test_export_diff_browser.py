"""Issue 31.3 in the browser (Chromium at 1366x768 and 1920x1080): a curator sees, on the exports
page, that a new version lost most of the previous one, expands the removed images by name, and
opens every change; the database's members say which images those are."""
from __future__ import annotations

import io

import pytest
from django.conf import settings
from django.core.management import call_command

from curation.models import Export, ExportMember, ReviewItem
from curation.services.review import review_cache_clear, review_next, review_settings_impact, review_settings_save, review_submit
from curation.services.users import user_create_with_role
from tests.conftest import SHOTS, browser_login

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def two_versions(tmp_path, settings, role_groups):
    """v1 of 'diffset' from a decided pool; then reviews per image raised to 2 (every decided
    image re-opened) and three images reviewed again; v2 of those three."""
    from tests.test_exports import reviewed_pool

    settings.EXPORT_ROOT = tmp_path / "exports"
    settings.FEATURE_STORE = tmp_path / "features"
    settings.THUMBNAIL_DIR = tmp_path / "thumbs"
    review_cache_clear()
    source, _ = reviewed_pool(tmp_path, n=24)
    call_command("export", name="diffset", sources=[source.name], stdout=io.StringIO(), stderr=io.StringIO())
    review_settings_save(source=source, reviews_required=2, impact=review_settings_impact(source=source, reviews_required=2))
    ann2 = user_create_with_role(username="ann2", password="ann2-pw", role="annotator")[0]
    for a in review_next(user=ann2, want=3):
        review_submit(user=ann2, assignment_id=a.pk, decision="ood", seconds=3.0)
    call_command("export", name="diffset", sources=[source.name], stdout=io.StringIO(), stderr=io.StringIO())
    user_create_with_role(username="cur", password="cur-pw", role="curator")
    v1, v2 = Export.objects.filter(name="diffset", status="done").order_by("version")
    yield v1, v2
    review_cache_clear()


@pytest.mark.parametrize("viewport", [(1366, 768), (1920, 1080)], ids=["1366x768", "1920x1080"])
def test_the_exports_page_names_what_a_new_version_lost(two_versions, live_server, browser, viewport):
    v1, v2 = two_versions
    before = set(ExportMember.objects.filter(export=v1).values_list("image_id", flat=True))
    now = set(ExportMember.objects.filter(export=v2).values_list("image_id", flat=True))
    removed = before - now
    assert removed and len(removed) / len(before) > settings.EXPORT_WARN_LOSS
    paths = dict(ReviewItem.objects.filter(image_id__in=removed).values_list("image_id", "image__relative_path"))
    w, h = viewport
    page = browser.new_context(viewport={"width": w, "height": h}).new_page()
    browser_login(page, live_server.url, "cur", "/exports/")
    row = page.locator(f'tr[data-export="{v2.label}"]')
    diff = row.locator("[data-diff]")
    assert f"Against {v1.label}" in diff.inner_text() and f"{len(removed)}" in diff.inner_text()
    assert row.locator("[data-diff-warning]").is_visible()
    assert f"loses {len(removed)} of the {len(before)} images" in row.locator("[data-diff-warning]").inner_text()
    row.locator("[data-diff] details summary").click()
    shown = {int(x) for x in row.locator("[data-removed]").evaluate_all("els => els.map(e => e.dataset.removed)")}
    assert shown == removed  # fewer than the page's sample of 50: all of them, by id
    text = row.locator("ul.diff-sample").inner_text()
    assert all(p in text for p in paths.values())
    assert page.evaluate("document.documentElement.scrollWidth") <= w
    if w == 1366:
        page.screenshot(path=str(SHOTS / "export-diff-list-1366x768.png"))
    row.get_by_role("link", name="every change").click()
    page.wait_for_selector("#diff-rows")
    assert page.locator("#diff-warning").is_visible()
    listed = {int(x) for x in page.locator('#diff-rows tr[data-change="removed"]').evaluate_all("els => els.map(e => e.dataset.image)")}
    assert listed == removed
    page.get_by_role("link", name=f"added ({len(now - before)})").click()
    page.wait_for_url("**change=added")
    added = {int(x) for x in page.locator('#diff-rows tr[data-change="added"]').evaluate_all("els => els.map(e => e.dataset.image)")}
    assert added == now - before and page.locator('#diff-rows tr[data-change="removed"]').count() == 0
    assert page.evaluate("document.documentElement.scrollWidth") <= w
    if w == 1366:
        page.goto(f"{live_server.url}/exports/{v2.pk}/diff/")
        page.screenshot(path=str(SHOTS / "export-diff-page-1366x768.png"))
