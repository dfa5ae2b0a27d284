"""Issue 48, grid review at a person's pace, in Debian's headless Chromium at 1366x768 and
1920x1080 against a live server on PostgreSQL, checked in the database: a click marks a tile id
with its top-1 class (a second click clears it), shift-click marks a range, Y and a tile's number
reach a tile without arrows, holding V peeks at a tile at full size with a loupe, the class
search's Enter followed at once by Enter sends the page, the page size follows the window and the
chosen tile size is remembered on the server, no page is a stub, and the end panel shows the pace."""
from __future__ import annotations

import io
import re

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command

from curation.models import Review, ReviewItem
from curation.models.review import GridPreference
from curation.roles import ANNOTATOR
from curation.services.review import review_cache_clear
from curation.services.review_grid import grid_cache_clear
from curation.services.users import user_create_with_role
from tests.conftest import SHOTS, browser_login
from tests.review_data import FAKE_TOP5, KEPT_CLASSES, fake_predictions, ingest, write_candidates

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

ICEBERG, SUNSET = KEPT_CLASSES[0], KEPT_CLASSES[1]
TABBY = FAKE_TOP5[0][0]
ZEBRA = "n02391049"


@pytest.fixture
def pool(tmp_path, settings, role_groups):
    """About 75 sunsets and 25 icebergs, predictions written as rows, queued."""
    from curation.services.review import review_queue_sync

    settings.THUMBNAIL_DIR = tmp_path / "thumbs"
    review_cache_clear()
    grid_cache_clear()
    call_command("set_id_classes", "imagenet-1k", stdout=io.StringIO())
    write_candidates(tmp_path / "pool", 100, classes=(ICEBERG, SUNSET, SUNSET, SUNSET))
    source = ingest("pool", tmp_path / "pool")
    fake_predictions(source, similarity_step=0.001)
    review_queue_sync(source=source)
    user_create_with_role(username="ann1", password="ann1-pw", role=ANNOTATOR)
    return source


def _tiles(page) -> list[dict]:
    return page.eval_on_selector_all("#tiles .tile", "els => els.map(e => ({a: +e.dataset.assignment, image: +e.dataset.image, "
                                                      "mark: e.dataset.mark, cursor: e.classList.contains('cursor')}))")


def _wait_page(page, n: int):
    page.wait_for_function(f"document.querySelector('#grid-review').dataset.page === '{n}' && "
                           "!document.querySelector('#grid-review').classList.contains('saving')")


def _thumbs_loaded(page):
    page.wait_for_function("[...document.querySelectorAll('#tiles .tile img')].every((i) => i.complete && i.naturalWidth > 0)")


def _reviews() -> dict[int, tuple[str, list]]:
    return {r.item.image_id: (r.decision, r.id_wnids) for r in Review.objects.filter(annotator__username="ann1").select_related("item")}


@pytest.mark.parametrize("viewport", [(1366, 768), (1920, 1080)], ids=["1366x768", "1920x1080"])
def test_clicks_ranges_peek_numbers_and_search_then_send(pool, live_server, browser, viewport):
    w, h = viewport
    page = browser.new_context(viewport={"width": w, "height": h}).new_page()
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    browser_login(page, live_server.url, "ann1", "/review/grid/")
    _wait_page(page, 0)
    _thumbs_loaded(page)
    tiles = _tiles(page)
    # the page holds as many 128 px tiles as fit the window (more on the larger screen)
    page.screenshot(path=str(SHOTS / f"grid-pace-{w}x{h}.png"))
    side = int(page.get_attribute("#tiles", "data-side"))
    assert side >= 120, side
    assert (len(tiles) >= 24) if w == 1366 else (len(tiles) >= 50), len(tiles)
    assert page.evaluate("document.documentElement.scrollWidth") <= w
    last = page.locator("#tiles .tile").last.bounding_box()
    assert last["y"] + last["height"] <= page.locator("footer.bar").bounding_box()["y"] + 1
    # the top-5's glosses are not cut off: the panel's last gloss is inside the window
    gloss = page.locator("#top5 li").last.locator(".gloss").bounding_box()
    assert gloss and gloss["y"] + gloss["height"] <= page.locator("footer.bar").bounding_box()["y"] + 1, gloss

    # a click: id with the tile's top-1 class; a second click clears it
    page.click("#tiles .tile >> nth=2")
    assert _tiles(page)[2]["mark"] == "id" and _tiles(page)[2]["cursor"]
    page.click("#tiles .tile >> nth=2")
    assert _tiles(page)[2]["mark"] == ""
    # click tile 4, shift-click tile 7: tiles 4 to 7 are id
    page.click("#tiles .tile >> nth=3")
    page.click("#tiles .tile >> nth=6", modifiers=["Shift"])
    assert [t["mark"] for t in _tiles(page)[:8]] == ["", "", "", "id", "id", "id", "id", ""]
    # a tile by its number, then Y: id with its top-1 (the number jumps at once when no longer one fits)
    n = len(tiles)
    target = 9 if n < 90 else 10  # "9" jumps at once on a page under 90 tiles; "1","0" then needs no pause either way
    for d in str(target):
        page.keyboard.press(d)
    page.wait_for_function(f"document.querySelectorAll('#tiles .tile')[{target - 1}].classList.contains('cursor')")
    page.keyboard.press("y")
    assert _tiles(page)[target - 1]["mark"] == "id"

    # hold V over a tile: it is shown at full size beside it; moving over the tile zooms into that spot
    box = page.locator("#tiles .tile >> nth=0").bounding_box()
    page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    page.keyboard.down("v")
    page.wait_for_selector("#peek:not([hidden])")
    page.wait_for_function("document.querySelector('#peek-img').dataset.full === '1'")
    assert page.get_attribute("#peek-img", "data-image") == str(tiles[0]["image"])
    assert "right" in page.get_attribute("#peek", "class"), "a tile on the left peeks on the right"
    page.mouse.move(box["x"] + box["width"] * 0.8, box["y"] + box["height"] * 0.3)
    assert page.get_attribute("#peek", "data-zoom") != "fit"
    page.screenshot(path=str(SHOTS / f"grid-peek-{w}x{h}.png"))
    page.keyboard.up("v")
    assert page.is_hidden("#peek")
    assert Review.objects.filter(annotator__username="ann1").count() == 0, "marks stay on the page until it is sent"

    # the class search then Enter at once: the tile is recorded with the class searched, and the
    # second Enter sends the page (it used to be swallowed by the search box)
    page.keyboard.press("ArrowLeft")  # the cursor back on a tile left unmarked (tile after the Y is marked: go to tile 12)
    for d in "12":
        page.keyboard.press(d)
    page.wait_for_function("document.querySelectorAll('#tiles .tile')[11].classList.contains('cursor')")
    page.keyboard.press("i")
    page.keyboard.type("zebra")
    page.wait_for_function("document.querySelectorAll('#results li').length > 0")
    page.keyboard.press("Enter")
    page.keyboard.press("Enter")
    _wait_page(page, 1)
    got = _reviews()
    images = [t["image"] for t in tiles]
    want = {im: ("ood", []) for im in images}
    for k in (3, 4, 5, 6, target - 1):
        want[images[k]] = ("id", [TABBY])
    want[images[11]] = ("id", [ZEBRA])
    assert got == want
    assert not {t["image"] for t in _tiles(page)} & set(images), "no image twice"
    assert not errors, errors


def test_tile_size_follows_the_window_is_remembered_and_no_page_is_a_stub(pool, live_server, browser):
    ann1 = User.objects.get(username="ann1")
    page = browser.new_context(viewport={"width": 1366, "height": 768}).new_page()
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    browser_login(page, live_server.url, "ann1", "/review/grid/")
    _wait_page(page, 0)
    first = len(_tiles(page))
    page.keyboard.press("-")  # larger tiles: fewer of them
    page.wait_for_function(f"document.querySelectorAll('#tiles .tile').length < {first} && "
                           "!document.querySelector('#grid-review').classList.contains('saving')")
    assert GridPreference.objects.get(annotator=ann1).tile_px == 144
    page.keyboard.press("-")
    page.keyboard.press("-")
    page.wait_for_function("document.querySelector('#size-label').textContent.startsWith('192 px') && "
                           "!document.querySelector('#grid-review').classList.contains('saving')")
    assert GridPreference.objects.get(annotator=ann1).tile_px == 192
    # another browser (a new context): the same tile size, from the server
    other = browser.new_context(viewport={"width": 1366, "height": 768}).new_page()
    browser_login(other, live_server.url, "ann1", "/review/grid/")
    _wait_page(other, 0)
    assert other.inner_text("#size-label").startswith("192 px")
    assert len(_tiles(other)) == len(_tiles(page))
    other.context.close()
    # send every page: a page holds at least half a page unless it is its class's only one
    per_class: dict[str, list[int]] = {}
    pages = 0
    size = len(_tiles(page))
    while not page.evaluate("document.querySelector('#grid-review').classList.contains('is-empty')"):
        tiles = _tiles(page)
        label = page.inner_text("#ood-label")
        per_class.setdefault(label, []).append(len(tiles))
        pages += 1
        page.keyboard.press("Enter")
        _wait_page(page, pages)
    for label, sizes in per_class.items():
        assert len(sizes) == 1 or all(2 * n >= size for n in sizes), (label, sizes, size)
    assert sum(sum(s) for s in per_class.values()) == ReviewItem.objects.count() == Review.objects.count()
    # the end panel: the queue is finished, with the pace
    assert page.is_visible("#empty")
    assert re.search(r"a median of [\d.]+ s each", page.inner_text("#empty-summary"))
    assert re.search(r"This session: \d+ images on \d+ pages", page.inner_text("#empty-pace"))
    assert not errors, errors
