"""Grid review (issue 30) and keys typed ahead on the review screens (issue 38) in Debian's
headless Chromium against a live server on the test database (PostgreSQL), checked in the
database after every step: marks, a page sent with the rest as ood, undo of a page, gold tiles
scored, the page size, and the layout at 1366x768 and 1920x1080."""
from __future__ import annotations

import io
import re

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command

from curation.models import Assignment, AuditLog, Review, ReviewItem
from curation.roles import ANNOTATOR, CURATOR
from curation.services.review import review_cache_clear, review_items_set_gold, review_next, review_settings_save, review_submit
from curation.services.review_grid import grid_cache_clear
from curation.services.users import user_create_with_role
from tests.conftest import SHOTS, browser_login
from tests.review_data import FAKE_TOP5, KEPT_CLASSES, fake_predictions, ingest, write_candidates

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

ICEBERG, SUNSET = KEPT_CLASSES[0], KEPT_CLASSES[1]


@pytest.fixture
def pool(tmp_path, settings, role_groups):
    """About 100 sunsets and 33 icebergs, predictions written as rows, queued."""
    from curation.services.review import review_queue_sync

    settings.THUMBNAIL_DIR = tmp_path / "thumbs"
    review_cache_clear()
    grid_cache_clear()
    call_command("set_id_classes", "imagenet-1k", stdout=io.StringIO())
    write_candidates(tmp_path / "pool", 132, classes=(ICEBERG, SUNSET, SUNSET, SUNSET))  # ingested last: the most urgent
    source = ingest("pool", tmp_path / "pool")
    fake_predictions(source, similarity_step=0.001)
    review_queue_sync(source=source)
    for name in ("ann1", "ann2"):
        user_create_with_role(username=name, password=f"{name}-pw", role=ANNOTATOR)
    user_create_with_role(username="cur", password="cur-pw", role=CURATOR)
    return source


def _tiles(page) -> list[dict]:
    return page.eval_on_selector_all("#tiles .tile", "els => els.map(e => ({a: +e.dataset.assignment, image: +e.dataset.image, "
                                                      "mark: e.dataset.mark, cursor: e.classList.contains('cursor')}))")


def _wait_page(page, n: int):
    page.wait_for_function(f"document.querySelector('#grid-review').dataset.page === '{n}' && "
                           "!document.querySelector('#grid-review').classList.contains('saving')")


def _fits(page):
    """Nothing scrolls sideways, the keys and every tile are inside the window."""
    size = page.viewport_size
    assert page.evaluate("document.documentElement.scrollWidth") <= size["width"]
    for sel in ("footer.bar", "#send", "#undo", "#status"):
        box = page.locator(sel).bounding_box()
        assert box and box["y"] + box["height"] <= size["height"] + 1 and box["x"] + box["width"] <= size["width"] + 1, sel
    last = page.locator("#tiles .tile").last.bounding_box()
    bar = page.locator("footer.bar").bounding_box()
    assert last["y"] + last["height"] <= bar["y"] + 1, "tiles hidden under the key bar"


@pytest.mark.parametrize("viewport", [(1366, 768), (1920, 1080)], ids=["1366x768", "1920x1080"])
def test_grid_review_by_keys_marks_page_submit_undo_and_gold(pool, live_server, browser, viewport):
    w, h = viewport
    # a gold image in the class: ann2 reviewed three sunsets; a curator made them gold
    for _ in range(3):
        a = review_next(user=User.objects.get(username="ann2"), want=1)[0]
        review_submit(user=a.annotator, assignment_id=a.pk, decision="ood")
    gold_items = list(ReviewItem.objects.filter(status="complete").values_list("pk", flat=True))
    assert review_items_set_gold(item_ids=gold_items, gold=True) == 3
    review_settings_save(source=pool, gold_rate=0.5)
    review_cache_clear()

    ctx = browser.new_context(viewport={"width": w, "height": h})
    page = ctx.new_page()
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    browser_login(page, live_server.url, "ann1", "/review/")
    page.click("#start-grid")
    page.wait_for_url(re.compile("/review/grid/$"))
    _wait_page(page, 0)
    tiles = _tiles(page)
    assert len(tiles) >= 24  # the default page: as many 128 px tiles as fit the window
    _fits(page)
    # the class, its gloss and the ID classes to watch for are on screen
    assert "sunset" in page.inner_text("#ood-label").lower()
    assert page.inner_text("#ood-gloss").strip()
    assert "tabby" in page.inner_text("#closest").lower()
    assert page.locator("#top5 li").count() == 5
    page.wait_for_function("[...document.querySelectorAll('#tiles .tile img')].every((i) => i.complete && i.naturalWidth > 0)")
    page.screenshot(path=str(SHOTS / f"grid-review-128px-{w}x{h}.png"))

    # the smallest tiles (80 px): more of them, still inside the window without scrolling
    def _at(px):
        page.wait_for_function(f"document.querySelector('#size-label').textContent.startsWith('{px} px') && "
                               "!document.querySelector('#grid-review').classList.contains('saving')")
    for px in (112, 96, 80):
        page.keyboard.press("+")
        _at(px)
    # more tiles (at 1920x1080 the 99 sunsets are one page at either size: the same tiles)
    assert len(_tiles(page)) > len(tiles) or len(tiles) == 99
    _fits(page)
    assert page.locator("#tiles .tile").first.bounding_box()["width"] >= 70
    page.wait_for_function("[...document.querySelectorAll('#tiles .tile img')].every((i) => i.complete && i.naturalWidth > 0)")
    page.screenshot(path=str(SHOTS / f"grid-review-80px-{w}x{h}.png"))
    # fewer, larger tiles: back to 128, then 144 and 160 (the leases beyond the page stay held for the next one)
    for px in (96, 112, 128, 144, 160):
        page.keyboard.press("-")
        _at(px)
    _fits(page)
    tiles = _tiles(page)
    assert 6 <= len(tiles) < 48
    items = {a.pk: a for a in Assignment.objects.filter(pk__in=[t["a"] for t in tiles]).select_related("item")}
    assert {a.item.candidate_class.wnid for a in items.values()} == {SUNSET}, "one class per page"
    assert all(a.state == "leased" and a.annotator.username == "ann1" for a in items.values())
    gold_tiles = [t for t in tiles if items[t["a"]].is_gold]
    assert gold_tiles, "gold images appear as tiles at the source's gold rate"
    regular = [t for t in tiles if not items[t["a"]].is_gold]

    # marks by keys: tile 3 id (I, then 1: its top-1 class), tile 5 unclear, tile 6 not target; 4 marked then cleared
    page.keyboard.press("ArrowRight")
    page.keyboard.press("ArrowRight")
    page.keyboard.press("i")
    page.keyboard.press("1")
    page.keyboard.press("o")          # tile 4: ood, then taken back with Backspace
    page.keyboard.press("ArrowLeft")
    page.keyboard.press("Backspace")
    page.keyboard.press("ArrowRight")
    page.keyboard.press("u")
    page.keyboard.press("n")
    marked = _tiles(page)
    assert [t["mark"] for t in marked[:6]] == ["", "", "id", "", "unclear", "not_target"]
    assert Review.objects.filter(annotator__username="ann1").count() == 0, "marks stay on the page until it is sent"
    # Space opens the cursor tile large with zoom; a mark key marks it and returns to the page
    page.keyboard.press("ArrowDown")
    cur = next(i for i, t in enumerate(_tiles(page)) if t["cursor"])
    page.keyboard.press(" ")
    page.wait_for_selector("#tile-view:not([hidden])")
    page.keyboard.press("1")
    assert page.get_attribute("#stage", "data-zoom") == "1:1"
    page.screenshot(path=str(SHOTS / f"grid-review-tile-{w}x{h}.png"))
    page.keyboard.press("u")
    assert page.is_hidden("#tile-view")
    assert _tiles(page)[cur]["mark"] == "unclear"
    page.wait_for_function("[...document.querySelectorAll('#tiles .tile img')].every((i) => i.complete && i.naturalWidth > 0)")
    page.screenshot(path=str(SHOTS / f"grid-review-marked-{w}x{h}.png"))

    expected = {t["image"]: "ood" for t in tiles}
    expected[tiles[2]["image"]] = "id"
    expected[tiles[4]["image"]] = "unclear"
    expected[tiles[5]["image"]] = "not_target"
    expected[tiles[cur]["image"]] = "unclear"
    # Enter: the rest as ood, the page in one request; then the next page
    page.keyboard.press("Enter")
    _wait_page(page, 1)
    got = {r.item.image_id: r for r in Review.objects.filter(annotator__username="ann1").select_related("item")}
    assert {i: r.decision for i, r in got.items()} == expected
    assert got[tiles[2]["image"]].id_wnids == [FAKE_TOP5[0][0]]
    for t in gold_tiles:  # scored against the known answer (ood), not counted towards the image's reviews
        r = got[t["image"]]
        assert r.is_gold and r.gold_correct is (expected[t["image"]] == "ood")
        assert ReviewItem.objects.get(image_id=t["image"]).done == 1
    for t in regular:
        item = ReviewItem.objects.get(image_id=t["image"])
        assert (item.done, item.leased, item.status, item.final_decision) == (1, 0, "complete", expected[t["image"]])
    assert AuditLog.objects.filter(action="review_decided", actor__username="ann1").count() == len(tiles)
    page_log = AuditLog.objects.get(action="review_grid_page", actor__username="ann1")
    assert sorted(page_log.data["reviews"]) == sorted(r.pk for r in got.values())
    second = _tiles(page)
    assert not {t["image"] for t in second} & set(expected), "no image twice"

    # Z: the page comes back, with its marks; nothing of it is left in the database
    page.keyboard.press("z")
    _wait_page(page, 1)
    page.wait_for_function("document.querySelector('#status').textContent.includes('taken back')")
    back = _tiles(page)
    assert [t["image"] for t in back] == [t["image"] for t in tiles]
    assert back[2]["mark"] == "id" and back[4]["mark"] == "unclear" and back[0]["mark"] == ""
    assert Review.objects.filter(annotator__username="ann1").count() == 0
    assert AuditLog.objects.filter(action="review_undone", actor__username="ann1").count() == len(tiles)
    assert all(ReviewItem.objects.get(image_id=t["image"]).status == "open" for t in regular)
    # change one mark (tile 5: ood after all) and send again
    page.keyboard.press("ArrowRight")
    page.keyboard.press("ArrowRight")
    page.keyboard.press("ArrowRight")
    page.keyboard.press("ArrowRight")
    page.keyboard.press("Backspace")
    expected[tiles[4]["image"]] = "ood"
    page.keyboard.press("Enter")
    _wait_page(page, 2)
    got = {r.item.image_id: r.decision for r in Review.objects.filter(annotator__username="ann1").select_related("item")}
    assert got == expected
    _fits(page)
    assert not errors, errors


def test_keys_typed_while_saving_are_applied_in_order(pool, live_server, browser):
    """Issue 38: on a slow connection an annotator types ahead; every key is applied, in order, to
    the images that follow (nothing dropped), on the single-image screen and on the grid."""
    ctx = browser.new_context(viewport={"width": 1366, "height": 768})
    page = ctx.new_page()
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    browser_login(page, live_server.url, "ann1", "/review/screen/")
    page.wait_for_function("document.querySelector('#photo').dataset.image")

    def slow(route):
        page.wait_for_timeout(400)  # a slow connection: each submit takes 0.4 s more
        route.continue_()

    page.route("**/api/review/submit", slow)
    shown = []
    for key in ("o", "u", "n", "o"):
        shown.append(page.get_attribute("#photo", "data-image"))
        page.keyboard.press(key)
    # the first is saving; the others were typed ahead and are waiting, counted on the status line
    assert "typed ahead" in page.inner_text("#status")
    page.wait_for_function("document.querySelector('#status').textContent.includes('4 reviewed this session')", timeout=20000)
    reviews = list(Review.objects.filter(annotator__username="ann1").order_by("created_at", "id").values_list("item__image_id", "decision"))
    assert [d for _i, d in reviews] == ["ood", "unclear", "not_target", "ood"]
    assert len({i for i, _d in reviews}) == 4, "each key went to the next image"
    assert str(reviews[0][0]) == shown[0]
    # a failed save: the keys typed after it are not applied, and the screen says so
    page.unroute("**/api/review/submit")
    page.route("**/api/review/submit", lambda route: (page.wait_for_timeout(300), route.fulfill(status=400, body='{"error": "refused for the test"}',
                                                                                               content_type="application/json")))
    page.keyboard.press("o")
    page.keyboard.press("u")
    page.keyboard.press("n")
    page.wait_for_function("document.querySelector('#status').textContent.includes('were not applied')")
    assert "(U N)" in page.inner_text("#status")
    assert Review.objects.filter(annotator__username="ann1").count() == 4

    # the grid: marks typed while a page is being sent land on the next page
    page.unroute("**/api/review/submit")
    page.goto(f"{live_server.url}/review/grid/")
    _wait_page(page, 0)
    page.route("**/api/review/grid/submit", slow)
    page.keyboard.press("Enter")
    page.keyboard.press("ArrowRight")
    page.keyboard.press("u")
    _wait_page(page, 1)
    page.wait_for_function("document.querySelectorAll('#tiles .tile')[1].dataset.mark === 'unclear'")
    assert not errors, errors


def test_thumbnails_in_one_request_next_class_prefetched_and_marks_kept_over_a_reload(pool, live_server, browser):
    """A page's thumbnails come in one request (not one per tile); when a page ends its class, the
    next class's first page is leased with it and its thumbnails fetched meanwhile, so it paints
    from memory; marks made on a page survive a reload of the tab until the page is sent."""
    ctx = browser.new_context(viewport={"width": 1366, "height": 768})
    page = ctx.new_page()
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    thumb_requests, per_tile = [], []
    page.on("request", lambda r: thumb_requests.append(r.url) if "/api/images/thumbs" in r.url else
            (per_tile.append(r.url) if re.search(r"/images/\d+/thumb$", r.url) else None))
    browser_login(page, live_server.url, "ann1", "/review/grid/")
    _wait_page(page, 0)
    page.wait_for_function("[...document.querySelectorAll('#tiles .tile img')].every((i) => i.complete && i.naturalWidth > 0)")
    n = len(_tiles(page))
    assert n >= 24 and len(thumb_requests) >= 1 and not per_tile
    assert len(thumb_requests[0].split("ids=")[1].split(",")) == n
    # marks, then the tab is reloaded: the same leases come back with the marks
    page.keyboard.press("ArrowRight")
    page.keyboard.press("u")
    page.keyboard.press("n")
    before = _tiles(page)
    page.reload()
    _wait_page(page, 0)
    page.wait_for_function("document.querySelector('#status').textContent.includes('2 marks on this page from before are back')")
    after = _tiles(page)
    assert [t["a"] for t in after] == [t["a"] for t in before]
    assert [t["mark"] for t in after[:3]] == ["", "unclear", "not_target"]
    assert Review.objects.filter(annotator__username="ann1").count() == 0
    page.keyboard.press("Enter")
    _wait_page(page, 1)
    got = dict(Review.objects.filter(annotator__username="ann1").values_list("item__image_id", "decision"))
    assert got[after[1]["image"]] == "unclear" and got[after[2]["image"]] == "not_target"
    assert page.evaluate("localStorage.getItem('oodc-grid-marks')") is None, "sent marks are forgotten"
    # sunset pages until the sunsets' last one (99 of them): its prefetch is the icebergs' first page
    ann1 = User.objects.get(username="ann1")
    sent = 1
    while True:
        held = Assignment.objects.filter(annotator=ann1, state="leased").select_related("item__candidate_class")
        classes = {a.item.candidate_class.wnid for a in held}
        if ICEBERG in classes:
            break
        assert sent < 10
        page.keyboard.press("Enter")
        sent += 1
        _wait_page(page, sent)
    assert classes == {SUNSET, ICEBERG}, classes
    rest = _tiles(page)
    icebergs = {a.item.image_id for a in held if a.item.candidate_class.wnid == ICEBERG}
    page.wait_for_function(f"document.querySelectorAll('#tiles .tile').length === {len(rest)}")
    # the prefetch's thumbnails arrive while this page is shown (a person takes seconds per page):
    # wait until the page holds them (data-ahead: how many it decoded ahead), not a fixed time
    page.wait_for_function("document.querySelector('#grid-review').dataset.ahead !== undefined", timeout=30000)
    asked = {int(i) for url in thumb_requests for i in url.split("ids=")[1].split(",")}
    assert icebergs <= asked, "the next class's thumbnails were fetched while this page was shown"
    assert int(page.get_attribute("#grid-review", "data-ahead")) >= len(icebergs)
    n_requests = len(thumb_requests)
    page.keyboard.press("Enter")
    _wait_page(page, sent + 1)
    page.wait_for_function("[...document.querySelectorAll('#tiles .tile img')].every((i) => i.complete && i.naturalWidth > 0)")
    assert {t["image"] for t in _tiles(page)} == icebergs and "iceberg" in page.inner_text("#ood-label").lower()
    later = {int(i) for url in thumb_requests[n_requests:] for i in url.split("ids=")[1].split(",")}
    assert not later & icebergs, "the page painted from the thumbnails fetched ahead"
    assert not per_tile and not errors, errors
