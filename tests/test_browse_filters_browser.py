"""The image browser's filters by name, annotator, note and decision source, its numbered pages,
the image page's previous / next, broken files, and the class search on the review screen (issue
31, points 4 and 5), in Debian's headless Chromium against a live server, with the database
checked. Pages are checked at 1366x768 and 1920x1080; screenshots go to var/screenshots."""
from __future__ import annotations

import io
import re
from urllib.parse import parse_qs, urlparse

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command

from curation.models import CandidateClass, Image, ImageEmbedding, Review, ReviewItem
from curation.roles import ANNOTATOR, CURATOR, RESEARCHER
from curation.services.browse import images_label
from curation.services.review import review_adjudicate, review_cache_clear, review_next, review_queue_sync, review_settings_save, review_submit
from curation.services.users import user_create_with_role
from pipelines.classes.search import ClassIndex, SearchEntry
from tests.conftest import SHOTS, browser_login, follow
from tests.review_data import fake_predictions, ingest, write_candidates

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

CLASSES = ("n06785654", "n09308572", "n11517776")  # crossword puzzle, iceberg, sunset
ESPRESSO, ESPRESSO_MAKER = "n07920052", "n03297495"


def _fits(page) -> None:
    width = page.evaluate("document.scrollingElement.scrollWidth")
    assert width <= page.viewport_size["width"], f"{page.url} scrolls sideways: {width}px"
    clipped = page.evaluate("""() => [...document.querySelectorAll('button:not([hidden]), a, input, select')].filter(b => b.offsetParent)
        .filter(b => { const r = b.getBoundingClientRect(); return r.right > window.innerWidth + 1 || r.left < -1; })
        .map(b => b.textContent.trim() || b.name || b.id)""")
    assert not clipped, f"{page.url}: controls outside the window: {clipped}"


def _both_sizes(page, name: str) -> None:
    for w, h in ((1366, 768), (1920, 1080)):
        page.set_viewport_size({"width": w, "height": h})
        page.wait_for_timeout(150)
        _fits(page)
        page.screenshot(path=str(SHOTS / f"{name}-{w}x{h}.png"))
    page.set_viewport_size({"width": 1366, "height": 768})


def _tiles(page) -> list[int]:
    return [int(x) for x in page.eval_on_selector_all("#grid li.tile", "els => els.map(e => e.dataset.image)")]


def _query(page) -> dict:
    return {k: v[0] for k, v in parse_qs(urlparse(page.url).query).items()}


@pytest.fixture
def pool(tmp_path, settings, role_groups, isolated_roots):
    """18 candidates in three classes (crossword puzzle, iceberg, sunset) plus a file that cannot be
    decoded; predictions as the image pipeline writes them, some images' top-1 espresso and some
    espresso maker; two reviews per image: agreed ones, two conflicts adjudicated, two labelled
    by a curator from the browser, notes on some."""
    settings.THUMBNAIL_DIR = tmp_path / "thumbs"
    review_cache_clear()
    call_command("set_id_classes", "imagenet-1k", stdout=io.StringIO())
    write_candidates(tmp_path / "pool", 18, classes=CLASSES)
    (tmp_path / "pool" / CLASSES[1] / "torn_upload.jpg").write_bytes(b"\xff\xd8\xff\xe0 not really a jpeg")
    source = ingest("pool", tmp_path / "pool")
    fake_predictions(source)
    ok = list(Image.objects.filter(source=source, status="ok").order_by("id").values_list("id", flat=True))
    ImageEmbedding.objects.filter(image_id__in=ok[0:4]).update(top1_wnid=ESPRESSO)
    ImageEmbedding.objects.filter(image_id__in=ok[4:9]).update(top1_wnid=ESPRESSO_MAKER)
    for name, role in (("ann1", ANNOTATOR), ("ann2", ANNOTATOR), ("ann3", ANNOTATOR), ("cur", CURATOR), ("res", RESEARCHER)):
        user_create_with_role(username=name, password=f"{name}-pw", role=role)
    review_queue_sync(source=source)
    review_settings_save(source=source, reviews_required=2)
    ann1, ann2 = User.objects.get(username="ann1"), User.objects.get(username="ann2")
    for user in (ann1, ann2):
        while batch := review_next(user=user, want=10):
            for a in batch:
                k = ok.index(a.item.image_id)
                decision = "unclear" if user == ann2 and k in (10, 11) else "ood"
                note = "blurry corner" if user == ann1 and k in (1, 2, 3) else ""
                review_submit(user=user, assignment_id=a.pk, decision=decision, wnids=[], note=note, seconds=2.0)
    cur = User.objects.get(username="cur")
    for k in (10, 11):
        review_adjudicate(item_id=ReviewItem.objects.get(image_id=ok[k]).pk, decision="ood", note="", user=cur)
    images_label(image_ids=[ok[12], ok[13]], decision="not_target", reason="no crossword in view", user=cur)
    return source


def test_filters_by_name_annotator_note_and_decision_source(pool, live_server, browser):
    page = browser.new_context(viewport={"width": 1366, "height": 768}).new_page()
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    browser_login(page, live_server.url, "cur", "/curate/images/")
    # issue 31 as walked: the class boxes have their names above them, like every other filter (they sat beside them)
    for name in ("cls_name", "top1_name", "annotator"):
        label, box = page.locator(f"#filters label:has([name={name}])").bounding_box(), page.locator(f"#filters [name={name}]").bounding_box()
        assert box["y"] >= label["y"] + 8 and abs(box["x"] - label["x"]) < 2, (name, label, box)
    # a name that matches no class says so in the list (it stayed closed, and Show answered with an error page)
    page.fill("input[name=cls_name]", "zzqx")
    page.wait_for_selector("#filters .typeahead-results li.none")
    assert page.inner_text("#filters .typeahead-results li.none") == "No candidate class matches “zzqx”."
    page.fill("input[name=cls_name]", "")
    # the class filter by name: type, the list ranks the class first with the text marked, Enter picks it
    page.fill("input[name=cls_name]", "crossword")
    first = page.wait_for_selector("#filters .typeahead-results li.hl")
    assert first.inner_text().startswith("crossword puzzle") and first.get_attribute("data-tier") == "1"
    assert page.inner_text("#filters .typeahead-results li.hl mark") == "crossword"
    _both_sizes(page, "browse-class-typeahead")
    page.press("input[name=cls_name]", "Enter")
    assert page.input_value("input[name=cls_name]").startswith("crossword puzzle (n06785654)")
    follow(page, "#apply-filters")
    page.wait_for_selector("#grid")
    crossword = CandidateClass.objects.get(source=pool, wnid=CLASSES[0])
    q = _query(page)
    assert q["cls"] == str(crossword.pk) and "cls_name" not in q and "status" not in q  # only what is set, the class by its id
    assert sorted(_tiles(page)) == sorted(Image.objects.filter(candidate_class=crossword).values_list("id", flat=True))
    assert "class crossword puzzle (n06785654)" in page.inner_text("#match-count")
    # top-1 by name: espresso is the exact name, listed before espresso maker
    page.goto(f"{live_server.url}/curate/images/?source=pool")
    page.fill("input[name=top1_name]", "espresso")
    page.wait_for_selector("#filters .typeahead-results li.hl")
    rows = page.eval_on_selector_all("#filters label:has(input[name=top1_name]) .typeahead-results li", "els => els.map(e => e.dataset.wnid)")
    assert rows[:2] == [ESPRESSO, ESPRESSO_MAKER]
    # Enter right after a key takes the first row for the text as typed, not the earlier text's list:
    # "espress" lists espresso maker first (both start with it; class order), "espresso" espresso
    page.fill("input[name=top1_name]", "espress")
    page.wait_for_function("document.querySelector('#filters label:has(input[name=top1_name]) li.hl')?.dataset.wnid === '%s'" % ESPRESSO_MAKER)
    page.type("input[name=top1_name]", "o")
    page.press("input[name=top1_name]", "Enter")
    page.wait_for_function(f"document.querySelector('input[name=top1]').value === '{ESPRESSO}'")
    assert page.input_value("input[name=top1_name]") == "espresso"
    follow(page, "#apply-filters")
    page.wait_for_selector("#grid")
    assert _query(page)["top1"] == ESPRESSO
    want = set(ImageEmbedding.objects.filter(top1_wnid=ESPRESSO).values_list("image_id", flat=True))
    assert len(want) == 4 and set(_tiles(page)) == want
    # names typed without picking (or written into the URL) are looked up by the same rule
    page.goto(f"{live_server.url}/curate/images/?cls_name=crossword&top1=espresso")
    assert set(_tiles(page)) == want & set(Image.objects.filter(candidate_class=crossword).values_list("id", flat=True))
    r = page.goto(f"{live_server.url}/curate/images/?top1=crane")
    assert r.status == 400 and "Top-1 class 'crane' matches 2 classes (crane (n02012849), crane (n03126707))" in page.inner_text("#browse-error")
    # annotator, note and where the decision came from, each against the database
    checks = {
        "annotator=ann2": set(Review.objects.filter(annotator__username="ann2").values_list("item__image_id", flat=True)),
        "annotator=ann3": set(),
        "note=yes": set(Review.objects.exclude(note="").values_list("item__image_id", flat=True))
        | set(ReviewItem.objects.exclude(final_note="").values_list("image_id", flat=True)),
        "decided=review": set(ReviewItem.objects.filter(status="complete").values_list("image_id", flat=True)),
        "decided=adjudication": set(ReviewItem.objects.filter(status="adjudicated", decided_by__username="cur", final_note="")
                                    .values_list("image_id", flat=True)),
        "decided=curator": set(ReviewItem.objects.filter(final_note="no crossword in view").values_list("image_id", flat=True)),
        "decided=certificate": set(),
    }
    assert len(checks["note=yes"]) == 5 and len(checks["decided=adjudication"]) == 2 and len(checks["decided=curator"]) == 2
    everything = set(Image.objects.values_list("id", flat=True))
    checks["note=no"] = everything - checks["note=yes"]
    for query, expected in checks.items():
        page.goto(f"{live_server.url}/curate/images/?{query}&size=60")
        assert set(_tiles(page)) == expected, query
    page.goto(f"{live_server.url}/curate/images/?note=yes&decided=curator")
    assert page.input_value("select[name=note]") == "yes" and page.input_value("select[name=decided]") == "curator"
    assert not errors, errors


def test_numbered_pages_jump_and_previous_next_on_the_image_page(pool, live_server, browser):
    page = browser.new_context(viewport={"width": 1366, "height": 768}).new_page()
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    browser_login(page, live_server.url, "res", "/curate/images/")
    order = list(ImageEmbedding.objects.filter(image__source=pool).order_by("-nearest_id_similarity", "-image_id")
                 .values_list("image_id", flat=True))
    assert len(order) == 18
    page.goto(f"{live_server.url}/curate/images/?sort=-similarity&size=24")
    assert page.input_value("select[name=size]") == "24"
    assert _tiles(page) == order
    # four a page: numbers 1..5, the next page by cursor, page 4 by its number, a jump to page 5
    base = f"{live_server.url}/curate/images/?sort=-similarity&size=4"
    page.goto(base)
    assert page.eval_on_selector_all("#pager .numbers > *", "els => els.map(e => e.textContent)") == ["1", "2", "3", "…", "5"]
    assert "page 1 of 5" in page.inner_text("#page-of") and page.input_value("select[name=size]") == "4"
    _fits(page)
    page.screenshot(path=str(SHOTS / "browse-pages-1366x768.png"), full_page=True)
    follow(page, "#next-page")
    assert _tiles(page) == order[4:8] and "after" in _query(page) and _query(page)["page"] == "2"
    follow(page, "#pager .numbers a[data-page='4']")
    assert _tiles(page) == order[12:16]
    follow(page, "#prev-page")  # backwards by cursor from the page's first image
    assert _tiles(page) == order[8:12] and _query(page)["page"] == "3" and "before" in _query(page)
    assert "page 3 of 5" in page.inner_text("#page-of")
    follow(page, "#prev-page")
    follow(page, "#prev-page")
    assert _tiles(page) == order[0:4] and page.query_selector("#prev-page") is None  # back at the first page
    page.fill("#jump input[name=page]", "5")
    follow(page, "#jump-button")
    assert _tiles(page) == order[16:18] and _query(page)["sort"] == "-similarity"
    page.goto(base + "&page=9")
    assert "There is no page 9: the last is page 5" in page.inner_text("#no-images")
    # the image page steps through the same filtered, sorted list and comes back to the page it was on
    crossword = CandidateClass.objects.get(source=pool, wnid=CLASSES[0])
    in_class = [i for i in order if Image.objects.get(pk=i).candidate_class_id == crossword.pk]
    page.goto(f"{live_server.url}/curate/images/?cls={crossword.pk}&sort=-similarity&size=4&page=2")
    assert _tiles(page) == in_class[4:6]
    follow(page, f"#grid li.tile[data-image='{in_class[4]}'] a")
    page.wait_for_selector("#steps")
    page.keyboard.press("ArrowRight")
    page.wait_for_url(re.compile(rf"/curate/images/{in_class[5]}/"))
    assert _query(page)["cls"] == str(crossword.pk) and _query(page)["sort"] == "-similarity"
    assert page.query_selector("#next-image") is None  # the last of the class
    page.keyboard.press("ArrowLeft")
    page.wait_for_url(re.compile(rf"/curate/images/{in_class[4]}/"))
    page.click("#prev-image")
    page.wait_for_url(re.compile(rf"/curate/images/{in_class[3]}/"))
    _both_sizes(page, "image-detail-steps")
    follow(page, "#back-to-list")
    assert _tiles(page)[0] == in_class[0]
    assert not errors, errors


def test_a_broken_file_shows_its_state_and_offers_nothing_that_cannot_apply(pool, live_server, browser):
    broken = Image.objects.get(source=pool, status="broken")
    assert broken.error_code
    page = browser.new_context(viewport={"width": 1366, "height": 768}).new_page()
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    failed = []
    page.on("response", lambda r: failed.append(r.url) if r.status >= 400 else None)
    browser_login(page, live_server.url, "cur", "/curate/images/")
    page.goto(f"{live_server.url}/curate/images/?source=pool&cls={broken.candidate_class_id}")
    tile = page.locator(f"#grid li.tile[data-image='{broken.pk}']")
    assert tile.get_attribute("data-status") == "broken"
    assert tile.locator("img").count() == 0 and tile.locator("input[name=ids]").count() == 0  # no thumbnail to break, nothing to select
    state = tile.locator(".file-state").inner_text()
    assert "cannot be decoded" in state and broken.error_code in state
    box = tile.bounding_box()
    assert tile.locator(".file-state").bounding_box()["height"] <= box["height"]
    ok_tile = page.locator("#grid li.tile[data-status=ok]").first
    assert ok_tile.locator("input[name=ids]").count() == 1
    page.click("#select-page")
    assert page.inner_text("#selected-count") == f"{page.locator('#grid input[name=ids]').count()} selected"
    _both_sizes(page, "browse-broken-file")
    # at 1920 px the grid uses the screen (it kept to a 1200 px column), and a broken tile's state stays whole at its top
    page.set_viewport_size({"width": 1920, "height": 1080})
    page.wait_for_timeout(150)
    assert page.locator("#grid").bounding_box()["width"] > 1600
    state, face = tile.locator(".file-state strong").bounding_box(), tile.locator(".file-state").bounding_box()
    assert state["y"] >= face["y"], (state, face)
    page.set_viewport_size({"width": 1366, "height": 768})
    page.goto(f"{live_server.url}/curate/images/{broken.pk}/")
    assert broken.error in page.inner_text("#file-state")
    assert page.locator("img.preview").count() == 0 and page.locator("text=full resolution").count() == 0
    assert page.locator("button[value=requeue], button[value=exclude], #find-similar").count() == 0
    # no "0×0 , 0 bytes" or "No model has looked at this image yet" for a file no model will read
    assert "0×0" not in page.inner_text("#file-size") and "not decoded" in page.inner_text("#file-size")
    assert page.inner_text("#no-model") == "No model reads a file that cannot be decoded."
    _both_sizes(page, "image-detail-broken")
    assert not [u for u in failed if "/images/" in u and u.endswith(("/thumb", "/view", "/full"))], failed
    assert not errors, errors


QUERIES = ["espresso", "stripe", "crossword", "dog", "cat", "retr", "golden retr", "pug-dog", "2123045", "n0212", "hot dog", "a",
           "  Sea   anemone ", "tabby_cat", "crane", "x-ray", "(", "*", "ß", "black-and-white"]


def test_review_search_lists_the_exact_class_first_and_agrees_with_the_python_rule(pool, live_server, browser):
    from curation import selectors

    rows = selectors.id_class_list()
    index = ClassIndex([SearchEntry(c[1], tuple(c[2].split(", ")) if c[2] else (), c[3], c[0], c[0]) for c in rows])
    review_settings_save(source=pool, reviews_required=3)  # a third review each: ann3 has a queue
    page = browser.new_context(viewport={"width": 1366, "height": 768}).new_page()
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    browser_login(page, live_server.url, "ann3", "/review/screen/")
    page.wait_for_function("document.querySelector('#photo').dataset.image")
    # the same lists in the browser as in Python, for every query
    in_browser = page.evaluate("""async (queries) => {
        const rows = (await (await fetch('/api/id-classes')).json()).classes;
        const index = window.OODClassSearch.ClassIndex(rows.map((c) => ({ wnid: c[0], name: c[1], lemmas: c[2] ? c[2].split(', ') : [], gloss: c[3] })));
        return queries.map((q) => index.rank(q).map((h) => [h.entry.wnid, h.tier]));
    }""", QUERIES)
    for q, got in zip(QUERIES, in_browser):
        assert got == [[h.entry.wnid, h.tier] for h in index.search(q, limit=None)], q
    # the screen: I, /, "espresso": espresso is the first row, the text marked; Enter records it
    image = int(page.get_attribute("#photo", "data-image"))
    page.keyboard.press("i")
    page.keyboard.press("/")
    page.keyboard.type("espresso")
    first = page.wait_for_selector("#results li.hl")
    assert first.get_attribute("data-wnid") == ESPRESSO and first.get_attribute("data-tier") == "0"
    assert page.eval_on_selector_all("#results li", "els => els.map(e => e.dataset.wnid)")[:2] == [ESPRESSO, ESPRESSO_MAKER]
    assert page.inner_text("#results li.hl strong mark") == "espresso"
    assert page.eval_on_selector("#results", "ul => ul.innerHTML.includes('<script')") is False
    page.screenshot(path=str(SHOTS / "review-search-espresso-1366x768.png"))
    page.keyboard.press("Enter")
    page.wait_for_function(f"document.querySelector('#photo').dataset.image !== '{image}'")
    review = Review.objects.get(annotator__username="ann3", item__image_id=image)
    assert review.decision == "id" and review.id_wnids == [ESPRESSO]
    # markup typed into the search is text, never HTML
    page.keyboard.press("i")
    page.keyboard.press("/")
    page.keyboard.type("<b>crossword")
    page.wait_for_timeout(100)
    assert page.eval_on_selector_all("#results b", "els => els.length") == 0
    assert not errors, errors


def test_the_noun_search_and_the_class_api_rank_by_the_rule(pool, client):
    from django.test import Client

    cur, res, ann = Client(), Client(), Client()
    cur.login(username="cur", password="cur-pw")
    res.login(username="res", password="res-pw")
    ann.login(username="ann1", password="ann1-pw")
    nouns = cur.get("/api/wordnet-nouns?q=stripe").json()["nouns"]
    assert [n["label"] for n in nouns[:3]] == ["stripe"] * 3 and nouns[3]["wnid"] == "n02784732"  # band: stripe is its third lemma
    assert cur.get("/api/wordnet-nouns?q=espresso").json()["nouns"][0]["wnid"] == ESPRESSO
    top1 = res.get("/api/browse-classes?kind=top1&q=espresso").json()["results"]
    assert [r["wnid"] for r in top1[:2]] == [ESPRESSO, ESPRESSO_MAKER] and [r["tier"] for r in top1[:2]] == [0, 2]
    classes = res.get("/api/browse-classes?kind=class&q=iceberg&source=pool").json()["results"]
    assert [r["id"] for r in classes] == [CandidateClass.objects.get(source=pool, wnid=CLASSES[1]).pk]
    assert res.get("/api/browse-classes?kind=evil&q=x").status_code == 400
    assert res.get("/api/browse-classes?kind=class&q=x&source=../etc").status_code == 400
    assert ann.get("/api/browse-classes?kind=top1&q=x").status_code == 403
    for bad in ("page=0", "page=abc", "page=100001", "size=0", "size=9999", "decided=magic", "note=maybe", "annotator=nobody",
                "annotator=%00", "cls_name=qqqzzz", "top1_name=dog"):
        assert cur.get(f"/curate/images/?{bad}").status_code == 400, bad
    some = Image.objects.filter(source=pool, status="ok").first()
    assert cur.get(f"/curate/images/{some.pk}/?decided=magic").status_code == 400
    assert cur.get(f"/curate/images/{some.pk}/?sort=-similarity&cls_name=crossword").status_code == 200
