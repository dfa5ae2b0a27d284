"""Looking at the data, in Debian's headless Chromium against a live server (issue 21): the image
browser and its filters, a duplicate-group correction reaching the next export, zoom keys and
the progress display on the review screen, adjudication by keys, and mapping an unmapped class.
Pages are checked at 1366x768 and 1920x1080; screenshots go to var/screenshots."""
from __future__ import annotations

import io
import json
import shutil
from pathlib import Path

import pytest
from django.core.management import call_command

from curation.models import (
    AuditLog,
    CandidateClass,
    ClassDecision,
    ClassFilterRun,
    DuplicateOverride,
    Export,
    ExportMember,
    Image,
    ImageEmbedding,
    Review,
    ReviewItem,
)
from curation.roles import ANNOTATOR, CURATOR, RESEARCHER
from curation.services.review import review_cache_clear, review_next, review_queue_sync, review_settings_save, review_submit
from curation.services.users import user_create_with_role
from tests.conftest import SHOTS, browser_login, follow
from tests.review_data import KEPT_CLASSES, ingest, queue_with_rows, write_candidates

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def _users():
    for name, role in (("ann1", ANNOTATOR), ("ann2", ANNOTATOR), ("cur", CURATOR), ("res", RESEARCHER)):
        user_create_with_role(username=name, password=f"{name}-pw", role=role)


def _fits(page) -> None:
    """Nothing scrolls the page sideways, and every button is inside the window."""
    width = page.evaluate("document.scrollingElement.scrollWidth")
    assert width <= page.viewport_size["width"], f"{page.url} scrolls sideways: {width}px"
    clipped = page.evaluate("""() => [...document.querySelectorAll('button:not([hidden])')].filter(b => b.offsetParent)
        .map(b => [b.textContent.trim(), b.getBoundingClientRect()])
        .filter(([t, r]) => r.right > window.innerWidth + 1 || r.left < -1).map(([t]) => t)""")
    assert not clipped, f"{page.url}: buttons outside the window: {clipped}"
    below = page.evaluate("""() => [...document.querySelectorAll('footer.bar button')].filter(b => b.offsetParent)
        .filter(b => b.getBoundingClientRect().bottom > window.innerHeight + 1).map(b => b.textContent.trim())""")
    assert not below, f"{page.url}: keys below the window: {below}"


def _both_sizes(page, name: str) -> None:
    for w, h in ((1366, 768), (1920, 1080)):
        page.set_viewport_size({"width": w, "height": h})
        page.wait_for_timeout(150)
        _fits(page)
        page.screenshot(path=str(SHOTS / f"{name}-{w}x{h}.png"))
    page.set_viewport_size({"width": 1366, "height": 768})


def _search_id_classes(page, text: str) -> None:
    """I (an ID object is visible), / (search every ID class), the text; waits for the results."""
    page.keyboard.press("i")
    page.keyboard.press("/")
    page.keyboard.type(text)
    page.wait_for_selector("#results li.hl")


def _review_everything(annotator, decision="ood"):
    while batch := review_next(user=annotator, want=10):
        for a in batch:
            review_submit(user=annotator, assignment_id=a.pk, decision=decision, wnids=[], seconds=2.0)


@pytest.fixture
def pool(tmp_path, settings, role_groups, isolated_roots):
    """Candidates (three kept classes) with a lossless copy of one image, an ID reference, the
    real offline model and the real duplicate search, queued."""
    from tests.conftest import real_photo

    settings.THUMBNAIL_DIR = tmp_path / "thumbs"
    settings.BROWSE_PAGE_SIZE = 8
    review_cache_clear()
    call_command("set_id_classes", "imagenet-1k", stdout=io.StringIO())
    write_candidates(tmp_path / "cands", 18)
    from PIL import Image as PILImage

    original = tmp_path / "cands" / KEPT_CLASSES[0] / "img_0000.jpg"
    with PILImage.open(original) as im:
        im.save(original.with_name("img_0000_copy.png"))  # the same pixels, other bytes: a near-duplicate
    for name, wnid in [("coffee.png", "n07920052"), ("camera.png", "n04485082")]:
        (tmp_path / "ref" / wnid).mkdir(parents=True, exist_ok=True)
        shutil.copy(real_photo(name), tmp_path / "ref" / wnid / name)
    source = ingest("cands", tmp_path / "cands")
    ingest("ref", tmp_path / "ref", role="id")
    call_command("run_image_pipeline", stdout=io.StringIO(), stderr=io.StringIO())
    review_queue_sync(source=source)
    _users()
    return source


def test_browser_filters_pages_and_acts_on_a_selection(pool, live_server, browser):
    page = browser.new_context(viewport={"width": 1366, "height": 768}).new_page()
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    browser_login(page, live_server.url, "cur", "/curate/images/")
    n_cands = Image.objects.filter(source=pool).count()
    # every candidate, page by page (8 a page, by cursor): none twice, none missed
    page.goto(f"{live_server.url}/curate/images/?source=cands")
    assert f"{n_cands} matching" in page.inner_text("#match-count")
    seen = []
    while True:
        seen += [int(x) for x in page.eval_on_selector_all("#grid li.tile", "els => els.map(e => e.dataset.image)")]
        if not page.query_selector("#next-page"):
            break
        follow(page, "#next-page")
    assert sorted(seen) == sorted(Image.objects.filter(source=pool).values_list("id", flat=True)) and len(seen) == len(set(seen))
    # sorted by similarity to the ID images: the values shown go down, and match the database
    page.select_option("select[name=sort]", "-similarity")
    follow(page, "#apply-filters")
    shown = [int(x) for x in page.eval_on_selector_all("#grid li.tile", "els => els.map(e => e.dataset.image)")]
    sims = dict(ImageEmbedding.objects.filter(image_id__in=shown).values_list("image_id", "nearest_id_similarity"))
    assert [sims[i] for i in shown] == sorted(sims.values(), reverse=True)
    assert max(sims.values()) == max(ImageEmbedding.objects.filter(image__source=pool).values_list("nearest_id_similarity", flat=True))
    # the duplicate filter finds the copy the search dropped
    page.goto(f"{live_server.url}/curate/images/?dropped=yes")
    copy = Image.objects.get(relative_path__endswith="img_0000_copy.png")
    assert [int(x) for x in page.eval_on_selector_all("#grid li.tile", "els => els.map(e => e.dataset.image)")] == [copy.pk]
    # a bad filter is a 400 with the reason, not a 500
    r = page.goto(f"{live_server.url}/curate/images/?sim_min=lots")
    assert r.status == 400 and "sim_min='lots' is not a number" in page.inner_text("#browse-error")
    # select two images (the second with Shift: a range of three), exclude them with a reason
    page.goto(f"{live_server.url}/curate/images/?source=cands")
    boxes = page.query_selector_all("#grid input[name=ids]")
    boxes[0].click()
    boxes[2].click(modifiers=["Shift"])
    assert page.inner_text("#selected-count") == "3 selected"
    picked = [int(b.get_attribute("value")) for b in boxes[:3]]
    page.fill("input[name=reason]", "watermarked stock photos")
    page.press("input[name=reason]", "Enter")  # Enter in the reason box excludes (not the form's first button)
    assert "excluded: 3 image(s)" in page.inner_text("ul.messages")
    assert set(Image.objects.exclude(excluded_reason="").values_list("id", flat=True)) == set(picked)
    assert AuditLog.objects.filter(action="image_excluded").count() == 3
    assert ReviewItem.objects.filter(image_id__in=picked, status="withdrawn").count() == 3  # they left the queue
    _both_sizes(page, "browse")
    # the image's own page: provenance, hash, top-5, the exclusion and its history
    page.goto(f"{live_server.url}/curate/images/{picked[0]}/")
    text = page.inner_text("main")
    img = Image.objects.get(pk=picked[0])
    assert img.sha256 in text and "watermarked stock photos" in page.inner_text("#excluded-reason") and "image_excluded" in page.inner_text("#history")
    top1 = ImageEmbedding.objects.get(image=img).top1_wnid
    assert top1 in text
    _both_sizes(page, "image-detail")
    # a curator's "id" label by the ID class's name (the class search of the review screen), not a typed wnid
    page.goto(f"{live_server.url}/curate/images/?source=cands")
    box = next(b for b in page.query_selector_all("#grid input[name=ids]") if int(b.get_attribute("value")) not in picked)
    target = int(box.get_attribute("value"))
    box.click()
    page.click("input.id-class-search")
    page.keyboard.type("golden retr")
    page.wait_for_selector("#label-id-results li.hl")
    assert "golden retriever" in page.inner_text("#label-id-results li.hl")
    page.keyboard.press("Enter")
    assert page.input_value("input[name=wnids]") == "n02099601" and page.input_value("select[name=decision]") == "id"
    assert "golden retriever (n02099601)" in page.inner_text("#label-id-picked")
    page.fill("input[name=label_reason]", "a dog in the corner")
    page.press("input[name=label_reason]", "Enter")
    page.wait_for_selector("ul.messages")
    item = ReviewItem.objects.get(image_id=target)
    assert item.final_decision == "id" and item.final_wnids == ["n02099601"]
    # its page names the class, and says the label came before any review (not "0/1 reviews")
    page.goto(f"{live_server.url}/curate/images/{target}/")
    final = page.inner_text("#final")
    assert "id (golden retriever (n02099601))" in final and "labelled by cur before any review" in final and "0/1" not in final
    assert not errors, errors


def test_researchers_browse_but_annotators_do_not_and_only_curators_act(pool, client):
    from django.test import Client

    res, ann = Client(), Client()
    res.login(username="res", password="res-pw")
    ann.login(username="ann1", password="ann1-pw")
    assert res.get("/curate/images/").status_code == 200
    assert ann.get("/curate/images/").status_code == 403
    some = Image.objects.filter(source=pool).first()
    assert res.post("/curate/images/action", {"action": "exclude", "ids": [some.pk], "reason": "no"}).status_code == 403
    assert res.get(f"/curate/images/{some.pk}/").status_code == 200 and res.get("/curate/images/999999/").status_code == 404
    assert res.get("/curate/images/?after=garbage").status_code == 400
    assert res.get("/curate/images/?sort=-id&label=ood").status_code == 200
    assert Image.objects.exclude(excluded_reason="").count() == 0


def test_keep_this_one_instead_reaches_the_next_export(pool, live_server, browser):
    copy = Image.objects.get(relative_path__endswith="img_0000_copy.png")
    original = Image.objects.get(relative_path=f"{KEPT_CLASSES[0]}/img_0000.jpg")
    assert ImageEmbedding.objects.get(image=copy).drop_reason == f"near_duplicate_of:{original.pk}"
    from django.contrib.auth.models import User

    ann = User.objects.get(username="ann1")
    _review_everything(ann)
    call_command("export", name="dups", sources=["cands"], stdout=io.StringIO(), stderr=io.StringIO())
    first = Export.objects.get(name="dups", version=1)
    assert set(ExportMember.objects.filter(export=first).values_list("image_id", flat=True)) >= {original.pk}
    assert not ExportMember.objects.filter(export=first, image=copy).exists()

    page = browser.new_context(viewport={"width": 1366, "height": 768}).new_page()
    browser_login(page, live_server.url, "cur", "/curate/duplicates/")
    page.click(f"section.group-row[data-group='{original.pk}'] a")
    page.wait_for_selector("#members")
    assert page.get_attribute(f".member[data-image='{original.pk}']", "data-state") == "kept"
    assert page.get_attribute(f".member[data-image='{copy.pk}']", "data-state") == "near_duplicate"
    assert "pixel difference 0.0" in page.inner_text(f".member[data-image='{copy.pk}']")  # the same pixels
    _both_sizes(page, "duplicate-group")
    page.fill(f"input[aria-label='note for image {copy.pk}']", "the PNG is the better file")
    page.click(f".member[data-image='{copy.pk}'] button[value=keep]")
    page.wait_for_selector("ul.messages li.msg-success")
    assert page.get_attribute(f".member[data-image='{copy.pk}']", "data-state") == "kept"
    assert page.get_attribute(f".member[data-image='{original.pk}']", "data-state") == "near_duplicate"
    o = DuplicateOverride.objects.get(image=copy)
    assert o.action == "keep" and o.created_by.username == "cur"
    assert AuditLog.objects.filter(action="duplicate_override_set", data__action="keep").count() == 1
    # the copy is queued now; once reviewed, the next export carries it and not the original
    assert ReviewItem.objects.get(image=copy).status == "open"
    _review_everything(User.objects.get(username="ann2"))
    call_command("export", name="dups", sources=["cands"], stdout=io.StringIO(), stderr=io.StringIO())
    second = Export.objects.get(name="dups", version=2)
    members = set(ExportMember.objects.filter(export=second).values_list("image_id", flat=True))
    assert copy.pk in members and original.pk not in members
    manifest = json.loads((_export_dir(second) / "manifest.json").read_text())
    assert [o["image"] for o in manifest["duplicate_overrides"]] == [copy.pk]
    # the search, re-run, keeps the correction
    from curation.services.image_pipeline import dedup_run_inline, dedup_start

    job = dedup_run_inline(job=dedup_start(enqueue=False))
    assert job.result["curator_overrides"] == 1
    assert ImageEmbedding.objects.get(image=original).drop_reason == f"near_duplicate_of:{copy.pk}"
    assert ImageEmbedding.objects.get(image=copy).drop_reason == ""


def _export_dir(export) -> Path:  # noqa: D103
    from curation.services.exports import export_path

    return export_path(export)


def test_review_screen_zoom_keys_progress_class_runs_and_end_of_queue(tmp_path, settings, role_groups, isolated_roots, live_server, browser):
    settings.THUMBNAIL_DIR = tmp_path / "thumbs"
    review_cache_clear()
    source = queue_with_rows(tmp_path, n=9)
    _users()
    n = ReviewItem.objects.filter(source=source).count()
    page = browser.new_context(viewport={"width": 1366, "height": 768}).new_page()
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    browser_login(page, live_server.url, "ann1", "/review/screen/")
    page.wait_for_function("document.querySelector('#photo').dataset.image")
    assert page.inner_text("#progress-left") == f"{n} of {n} left in your queue"
    # zoom: 1 = actual size from the full-resolution file, 2 = double, F = fit, wheel zooms
    page.keyboard.press("1")
    assert page.get_attribute("#stage", "data-zoom") == "1:1" and float(page.get_attribute("#stage", "data-scale")) == 1.0
    page.keyboard.press("2")
    assert float(page.get_attribute("#stage", "data-scale")) == 2.0 and page.inner_text("#zoom-level") == "2x"
    page.keyboard.press("ArrowLeft")
    page.keyboard.press("f")
    assert page.get_attribute("#stage", "data-zoom") == "fit"
    fit = float(page.get_attribute("#stage", "data-scale"))
    assert not page.evaluate("document.querySelector('#photo').src.endsWith('/full')")
    page.mouse.move(400, 300)
    page.mouse.wheel(0, -200)
    page.wait_for_function(f"Number(document.querySelector('#stage').dataset.scale) > {fit}")
    # beyond the fitted size the full-resolution file is shown
    page.wait_for_function("document.querySelector('#photo').src.endsWith('/full')")
    page.keyboard.press("f")
    _both_sizes(page, "review-progress")
    # searching the ID classes at 1366x768: every result is in view (the top-5 shrinks to names)
    _search_id_classes(page, "dog")
    boxes = page.eval_on_selector_all("#results li", "els => els.map(e => e.getBoundingClientRect().bottom)")
    assert len(boxes) == 8 and max(boxes) <= 768, boxes
    page.screenshot(path=str(SHOTS / "review-search-dog-1366x768.png"))
    page.keyboard.press("Escape")
    page.keyboard.press("Escape")
    # decide every image by key; the progress counts down and the classes come in runs
    for k in range(n):
        page.wait_for_function(f"document.querySelector('#progress-left').textContent.startsWith('{n - k} of')")
        page.keyboard.press("o")
        page.wait_for_function(f"document.querySelector('#status').textContent.includes('{k + 1} reviewed this session')")
    page.wait_for_selector("#empty:not([hidden])")
    assert "reviewed %d images today" % n in page.inner_text("#empty-summary")
    assert page.inner_text("#progress-today") == f"{n} done today" and page.inner_text("#progress-pace").startswith("median ")
    assert page.is_disabled("button.decide[data-decision=ood]") and page.is_disabled("button[data-zoom='1:1']")
    page.keyboard.press("o")  # nothing to decide: nothing is sent
    page.screenshot(path=str(SHOTS / "review-end-of-queue-1366x768.png"))
    order = list(Review.objects.filter(annotator__username="ann1").order_by("created_at").values_list("item__candidate_class__folder", flat=True))
    switches = sum(a != b for a, b in zip(order, order[1:]))
    assert switches == len(set(order)) - 1, order  # one run per class (runs of 20 > 3 images per class)
    assert not errors, errors


def test_adjudication_by_keys_with_the_id_class_search_and_zoom(tmp_path, settings, role_groups, isolated_roots, live_server, browser):
    from django.contrib.auth.models import User

    settings.THUMBNAIL_DIR = tmp_path / "thumbs"
    review_cache_clear()
    source = queue_with_rows(tmp_path, n=2)
    _users()
    review_settings_save(source=source, reviews_required=2)
    for name, decision in (("ann1", "ood"), ("ann2", "unclear")):
        _review_everything(User.objects.get(username=name), decision)
    assert ReviewItem.objects.filter(status="conflict").count() == 2
    page = browser.new_context(viewport={"width": 1366, "height": 768}).new_page()
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    browser_login(page, live_server.url, "cur", "/curate/adjudicate/")
    first = int(page.get_attribute("#adjudication", "data-item"))
    page.keyboard.press("2")
    assert page.get_attribute("#stage", "data-zoom") == "2x"
    page.keyboard.press("f")
    _both_sizes(page, "adjudicate")
    _search_id_classes(page, "golden retr")
    assert "golden retriever" in page.inner_text("#results li.hl")
    page.keyboard.press("Enter")
    page.wait_for_selector("ul.messages li.msg-success")
    item = ReviewItem.objects.get(pk=first)
    assert item.status == "adjudicated" and item.final_decision == "id" and item.final_wnids == ["n02099601"]
    second = int(page.get_attribute("#adjudication", "data-item"))
    assert second != first
    page.keyboard.press("g")
    page.keyboard.press("i")
    page.keyboard.press("1")  # the top-5's first class
    page.wait_for_selector("#no-conflicts")
    item = ReviewItem.objects.get(pk=second)
    assert item.final_decision == "id" and item.final_wnids == ["n02123045"] and item.is_gold
    assert not errors, errors


def test_an_unmapped_folder_is_mapped_by_search_or_kept_with_a_description(tmp_path, settings, role_groups, isolated_roots, live_server,
                                                                          browser):
    settings.THUMBNAIL_DIR = tmp_path / "thumbs"
    review_cache_clear()
    call_command("set_id_classes", "imagenet-1k", stdout=io.StringIO())
    write_candidates(tmp_path / "mixed", 6, classes=("n09308572", "anemones_misc", "volunteer_uploads"))
    source = ingest("mixed", tmp_path / "mixed")
    call_command("filter_classes", candidates="source:mixed", out=str(tmp_path / "f.csv"), stdout=io.StringIO())
    _users()
    flagged = {d.candidate_class.folder: d for d in ClassDecision.objects.filter(decision="flag").select_related("candidate_class")}
    assert {"anemones_misc", "volunteer_uploads"} <= set(flagged)
    page = browser.new_context(viewport={"width": 1366, "height": 768}).new_page()
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    browser_login(page, live_server.url, "cur", "/curate/classes/")
    box = page.locator("[data-unmapped='anemones_misc']")
    assert box.locator("button[value=accept]").count() == 0  # no one-click accept of an unmapped folder
    _both_sizes(page, "flagged-unmapped")
    box.locator(".noun-search").fill("sea anemone")
    box.locator(".noun-results li").first.wait_for()
    box.locator(".noun-search").press("Enter")
    assert "n01914609" in box.locator(".chosen-noun").inner_text()
    box.locator("button[value=map]").click()
    page.wait_for_selector("ul.messages li.msg-success")
    cc = CandidateClass.objects.get(source=source, folder="anemones_misc")
    assert cc.wnid == "n01914609" and cc.mapping == "curator" and "sea anemone" in cc.lemmas
    assert ClassFilterRun.objects.filter(source=source).count() == 2  # judged again by the rules
    assert AuditLog.objects.filter(action="class_mapped", data__wnid="n01914609").exists()
    # the other folder: kept unmapped, with the description annotators will read
    box = page.locator("[data-unmapped='volunteer_uploads']")
    box.locator("textarea[name=description]").fill("street scenes uploaded by volunteers, no single object")
    box.locator("button[value=keep_unmapped]").click()
    page.wait_for_selector("ul.messages li.msg-success")
    cc2 = CandidateClass.objects.get(source=source, folder="volunteer_uploads")
    assert cc2.description.startswith("street scenes")
    from curation import selectors

    assert ClassDecision.objects.filter(candidate_class=cc2, resolution="keep", resolution_note__contains="street scenes").exists()
    assert selectors.class_policy(source=source).of(cc2.pk).reviewable
    from curation.models import Assignment

    item = ReviewItem(image=Image.objects.filter(candidate_class=cc2).first(), source=source, candidate_class=cc2)
    item.save()
    payload = selectors.review_payload([Assignment(pk=1, item_id=item.pk, is_gold=False, expires_at=item.created_at)], model_name="x")[0]
    assert payload["ood_class"]["gloss"] == cc2.description and payload["ood_class"]["described"]
    assert not errors, errors


def test_bad_input_on_the_new_pages_is_a_4xx(pool, client):
    from django.test import Client

    cur = Client()
    cur.login(username="cur", password="cur-pw")
    for url in ("/curate/images/?cls=abc", "/curate/images/?top1=dog", "/curate/images/?sort=evil", "/curate/images/?msp_min=2",
                "/curate/images/?source=../../etc", "/curate/duplicates/?after=x"):
        assert 400 <= cur.get(url).status_code < 500, url
    assert cur.get("/curate/duplicates/999999/").status_code == 404
    r = cur.post("/curate/images/action", {"action": "exclude", "ids": ["1;DROP"], "reason": "x"})
    assert r.status_code == 302
    r = cur.post("/curate/duplicates/1/", {"action": "keep", "image": "abc"})
    assert r.status_code == 302
