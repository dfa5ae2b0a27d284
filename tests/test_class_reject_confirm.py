"""Issue 31.2, class rejection: rejecting a class whose images carry decided or reviewed work
shows what it takes out, with counts, and needs a confirmation of exactly those counts; the
confirmed counts are audited. Counts are computed here from the rows, not by the service; the
page is checked in Chromium at 1366x768 and 1920x1080 too."""
from __future__ import annotations

import pytest
from django.test import Client

from curation.models import AuditLog, ClassVisualSignal, ExportMember, Review, ReviewItem
from curation.roles import ANNOTATOR, CURATOR
from curation.services.review import review_cache_clear, review_next, review_submit
from curation.services.users import user_create_with_role
from tests.review_data import queue_with_rows

FOLDER = "n09308572"  # iceberg, one of the queue's classes


def _setup(tmp_path):
    review_cache_clear()
    source = queue_with_rows(tmp_path, n=12)
    ann = user_create_with_role(username="ann", password="ann-pw", role=ANNOTATOR)[0]
    cur = user_create_with_role(username="cur", password="cur-pw", role=CURATOR)[0]
    cls = source.classes.get(folder=FOLDER)
    for k, a in enumerate(review_next(user=ann, want=20)):
        if a.item.candidate_class_id == cls.pk:
            review_submit(user=ann, assignment_id=a.pk, decision="ood" if k % 2 else "id", wnids=[] if k % 2 else ["n02123045"], seconds=2.0)
    sig = ClassVisualSignal.objects.create(candidate_class=cls, model_name="m", n_images=3, top_wnid="n09472597", top_share=0.9,
                                           threshold=0.5, flagged=True, reason="visually_ambiguous_with:n09472597")
    return source, cls, sig, cur


def _expected(cls) -> dict:
    items = list(ReviewItem.objects.filter(candidate_class=cls))
    final = [i for i in items if i.status in ("complete", "adjudicated")]
    return {"images": len(items), "decided_ood": sum(i.final_decision == "ood" for i in final),
            "decided_other": sum(i.final_decision != "ood" for i in final) + sum(i.status == "conflict" for i in items),
            "open_reviewed": sum(i.status == "open" and i.done > 0 for i in items),
            "reviews": Review.objects.filter(item__in=items, is_gold=False).count(),
            "exported": ExportMember.objects.filter(image_id__in=[i.image_id for i in items]).count()}


@pytest.mark.django_db
def test_rejecting_a_reviewed_class_asks_first_with_its_counts(tmp_path):
    source, cls, sig, cur = _setup(tmp_path)
    want = _expected(cls)
    assert want["decided_ood"] and want["decided_other"]  # the set-up decided some of each
    c = Client()
    c.force_login(cur)
    page = c.post("/curate/classes/", {"kind": "signal", "pk": sig.pk, "verdict": "reject", "note": "volcano-like"})
    assert page.status_code == 200 and b'id="reject-impact"' in page.content
    html = page.content.decode()
    for key, n in want.items():
        assert f'data-count="{key}">{n}<' in html, key
    sig.refresh_from_db()
    assert sig.resolution == "" and not AuditLog.objects.filter(action="class_signal_reject").exists()  # nothing changed yet
    token = f"{want['images']}-{want['decided_ood']}-{want['decided_other']}-{want['open_reviewed']}"
    # a confirmation of other counts (the work changed meanwhile) is asked again, not taken
    stale = c.post("/curate/classes/", {"kind": "signal", "pk": sig.pk, "verdict": "reject", "note": "x", "confirm": "1-0-0-0"})
    assert b'id="reject-impact"' in stale.content
    done = c.post("/curate/classes/", {"kind": "signal", "pk": sig.pk, "verdict": "reject", "note": "volcano-like", "confirm": token})
    assert done.status_code == 302
    sig.refresh_from_db()
    assert sig.resolution == "reject"
    audit = AuditLog.objects.get(action="class_signal_reject")
    assert audit.data["confirmed_impact"] == want
    assert not ReviewItem.objects.filter(candidate_class=cls, status="open").exists()  # open images left the queue


@pytest.mark.django_db
def test_accepting_or_rejecting_a_class_nobody_reviewed_needs_no_confirmation(tmp_path):
    review_cache_clear()
    source = queue_with_rows(tmp_path, n=6)
    cur = user_create_with_role(username="cur", password="cur-pw", role=CURATOR)[0]
    cls = source.classes.get(folder=FOLDER)
    sig = ClassVisualSignal.objects.create(candidate_class=cls, model_name="m", n_images=3, top_wnid="n09472597", top_share=0.9,
                                           threshold=0.5, flagged=True, reason="visually_ambiguous_with:n09472597")
    c = Client()
    c.force_login(cur)
    assert c.post("/curate/classes/", {"kind": "signal", "pk": sig.pk, "verdict": "reject"}).status_code == 302
    sig.refresh_from_db()
    assert sig.resolution == "reject"
    assert c.post("/curate/classes/", {"kind": "signal", "pk": 10**12, "verdict": "reject"}).status_code == 404


@pytest.mark.browser
@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("viewport", [(1366, 768), (1920, 1080)], ids=["1366x768", "1920x1080"])
def test_the_rejection_confirmation_in_the_browser(tmp_path, settings, role_groups, live_server, browser, viewport):
    from tests.conftest import SHOTS, browser_login

    settings.THUMBNAIL_DIR = tmp_path / "thumbs"
    source, cls, sig, cur = _setup(tmp_path)
    want = _expected(cls)
    w, h = viewport
    page = browser.new_context(viewport={"width": w, "height": h}).new_page()
    browser_login(page, live_server.url, "cur", "/curate/classes/")
    card = page.locator("form.class-verdict").filter(has=page.locator(f'input[name=pk][value="{sig.pk}"]'))
    card.locator("button[value=reject]").click()
    page.wait_for_selector("#reject-impact")
    assert page.inner_text('[data-count="decided_ood"]').strip() == str(want["decided_ood"])
    assert page.locator("#confirm-reject").is_visible() and page.evaluate("document.documentElement.scrollWidth") <= w
    if w == 1366:
        page.screenshot(path=str(SHOTS / "class-reject-confirm-1366x768.png"))
    sig.refresh_from_db()
    assert sig.resolution == ""
    page.click("#confirm-reject")
    page.wait_for_url("**/curate/classes/")
    sig.refresh_from_db()
    assert sig.resolution == "reject" and AuditLog.objects.get(action="class_signal_reject").data["confirmed_impact"] == want
    review_cache_clear()
