"""A curator's side of issue 30 in Debian's headless Chromium against a live server on the test
database: bulk labels from the image browser (recorded as adjudication, audited, not as an
annotator's review), checked in the database after each step."""
from __future__ import annotations

import pytest

from curation.models import Assignment, AuditLog, Review, ReviewItem
from curation.roles import ANNOTATOR, CURATOR, RESEARCHER
from curation.services.review import review_cache_clear, review_next, review_submit
from curation.services.users import user_create_with_role
from tests.conftest import SHOTS, browser_login
from tests.review_data import queue_with_rows

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def pool(tmp_path, settings, role_groups):
    settings.THUMBNAIL_DIR = tmp_path / "thumbs"
    review_cache_clear()
    source = queue_with_rows(tmp_path, n=40)
    user_create_with_role(username="ann1", password="ann1-pw", role=ANNOTATOR)
    user_create_with_role(username="cur", password="cur-pw", role=CURATOR)
    user_create_with_role(username="res", password="res-pw", role=RESEARCHER)
    return source


@pytest.mark.parametrize("viewport", [(1366, 768), (1920, 1080)], ids=["1366x768", "1920x1080"])
def test_curator_labels_a_selection_from_the_browser_as_adjudication(pool, live_server, browser, viewport):
    from django.contrib.auth.models import User

    ann = User.objects.get(username="ann1")
    a = review_next(user=ann, want=1)[0]
    review_submit(user=ann, assignment_id=a.pk, decision="ood")  # one image already has a review
    reviewed_image = a.item.image_id

    w, h = viewport
    page = browser.new_context(viewport={"width": w, "height": h}).new_page()
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    browser_login(page, live_server.url, "cur", "/curate/images/")
    page.goto(f"{live_server.url}/curate/images/?source=pool&sort=id")
    assert page.evaluate("document.documentElement.scrollWidth") <= w
    boxes = page.locator("#grid input[name=ids]")
    ids = [int(boxes.nth(i).get_attribute("value")) for i in range(boxes.count())]
    # a range by Shift-click: tiles 1..5
    boxes.nth(0).click()
    boxes.nth(4).click(modifiers=["Shift"])
    assert "5 selected" in page.inner_text("#selected-count")
    chosen = ids[:5]
    if reviewed_image not in chosen:  # and the image an annotator reviewed, ticked too
        page.locator(f"#grid input[value='{reviewed_image}']").click()
        chosen.append(reviewed_image)
    page.select_option("select[name=decision]", "id")
    page.fill("input[name=label_reason]", "all show a tabby on the shore")
    page.click("button[value=label]")
    page.wait_for_selector(".messages")
    assert "needs the ID class" in page.inner_text(".messages"), "id without its class is refused"
    assert not ReviewItem.objects.filter(status="adjudicated").exists()

    for i in chosen:
        if not page.locator(f"#grid input[value='{i}']").is_checked():
            page.locator(f"#grid input[value='{i}']").click()
    page.select_option("select[name=decision]", "id")
    page.fill("input[name=wnids]", "n02123045")
    page.fill("input[name=label_reason]", "all show a tabby on the shore")
    page.screenshot(path=str(SHOTS / f"browse-bulk-label-{w}x{h}.png"))
    page.press("input[name=label_reason]", "Enter")  # Enter in the reason labels
    page.wait_for_selector(".messages")
    assert f"labelled id (n02123045): {len(chosen)} image(s)" in page.inner_text(".messages")

    items = ReviewItem.objects.filter(image_id__in=chosen)
    assert items.count() == len(chosen)
    for it in items:
        assert (it.status, it.final_decision, it.final_wnids, it.decided_by.username, it.final_note) == \
            ("adjudicated", "id", ["n02123045"], "cur", "all show a tabby on the shore")
    # counted as adjudication, not as a review: the annotator's one review is all there is
    assert Review.objects.count() == 1 and Review.objects.get().item.image_id == reviewed_image
    logs = AuditLog.objects.filter(action="review_adjudicated", actor__username="cur")
    assert logs.count() == len(chosen) and all(x.data["via"] == "image browser" for x in logs)
    assert logs.get(data__image=reviewed_image).data["before"]["status"] == "complete"
    # labelled images are served to no one
    other = user_create_with_role(username="ann2", password="x", role=ANNOTATOR)[0]
    served = {x.item.image_id for x in review_next(user=other, want=50)}
    assert not served & set(chosen)
    # the browser's filter by final label finds them
    page.goto(f"{live_server.url}/curate/images/?source=pool&label=id")
    assert page.locator("#grid li.tile").count() == len(chosen)
    assert not errors, errors


def test_only_curators_label(pool, client):
    image = ReviewItem.objects.first().image_id
    client.login(username="res", password="res-pw")
    r = client.post("/curate/images/action", {"action": "label", "ids": [image], "decision": "ood", "label_reason": "x"})
    assert r.status_code == 403
    client.login(username="cur", password="cur-pw")
    r = client.post("/curate/images/action", {"action": "label", "ids": ["²"], "decision": "ood", "label_reason": "x"})
    assert r.status_code == 302 and not ReviewItem.objects.filter(status="adjudicated").exists()
    r = client.post("/curate/images/action", {"action": "label", "ids": [image], "decision": "skip", "label_reason": "x"}, follow=True)
    assert r.status_code == 400 and "'skip' is not one of" in r.content.decode()  # issue 47: enumerated fields checked
    r = client.post("/curate/images/action", {"action": "label", "ids": [image], "decision": "ood", "label_reason": "clear sky"}, follow=True)
    assert ReviewItem.objects.get(image_id=image).final_decision == "ood"
    assert not Review.objects.exists()


@pytest.fixture
def real_pool(tmp_path, settings, role_groups, isolated_roots):
    """Candidates and ID reference photos through the real offline model: stored features."""
    from curation.services.similar import similar_cache_clear
    from tests.review_data import queue_with_real_model

    settings.THUMBNAIL_DIR = tmp_path / "thumbs"
    similar_cache_clear()
    source = queue_with_real_model(tmp_path, n=30)
    user_create_with_role(username="ann1", password="ann1-pw", role=ANNOTATOR)
    user_create_with_role(username="cur", password="cur-pw", role=CURATOR)
    yield source
    similar_cache_clear()


def _exact_neighbours(image_id: int, role: str, k: int) -> list[tuple[int, float]]:
    """Cosine similarity by brute force over the stored shards, written here from the definition
    (not with the index the app uses)."""
    import numpy as np
    from django.conf import settings

    from curation.models import ImageEmbedding

    rows = list(ImageEmbedding.objects.filter(model_name=settings.DEFAULT_MODEL, ok=True, shard__isnull=False)
                .select_related("shard", "image__source").order_by("id"))

    def vec(e):
        v = np.load(settings.FEATURE_STORE / e.shard.path, mmap_mode="r")[e.row].astype(np.float64)
        return v / np.linalg.norm(v)

    q = vec(next(e for e in rows if e.image_id == image_id))
    scored = [(e.image_id, float(vec(e) @ q)) for e in rows if e.image.source.role == role and e.image_id != image_id
              and e.image.status == "ok"]
    return sorted(scored, key=lambda t: -t[1])[:k]


def test_find_similar_from_the_image_page_and_send_to_the_front(real_pool, live_server, browser):
    from curation.models import Image

    rocket = Image.objects.get(relative_path__endswith="rocket_over_the_ice.jpg")
    page = browser.new_context(viewport={"width": 1366, "height": 768}).new_page()
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    browser_login(page, live_server.url, "cur", "/curate/images/")
    page.goto(f"{live_server.url}/curate/images/{rocket.pk}/")
    page.click("#find-similar")
    page.wait_for_selector("#grid li.tile")
    assert page.evaluate("document.documentElement.scrollWidth") <= 1366
    page.evaluate("document.querySelectorAll('img[loading=lazy]').forEach((i) => { i.loading = 'eager'; })")
    page.wait_for_function("[...document.querySelectorAll('#grid img, #id-grid img')].every((i) => i.complete && i.naturalWidth > 0)")
    page.screenshot(path=str(SHOTS / "find-similar-1366x768.png"), full_page=True)
    shown = [(int(li.get_attribute("data-image")), float(li.get_attribute("data-similarity")))
             for li in page.locator("#grid li.tile").all()]
    expected = _exact_neighbours(rocket.pk, "candidate", 20)
    assert [i for i, _s in shown] == [i for i, _s in expected]
    assert all(abs(a[1] - b[1]) < 2e-3 for a, b in zip(shown, expected))
    id_shown = [int(li.get_attribute("data-image")) for li in page.locator("#id-grid li.tile").all()]
    assert id_shown == [i for i, _s in _exact_neighbours(rocket.pk, "id", 20)] and len(id_shown) == 3

    # all of them to the front of the queue: they are served first now
    page.click("#select-page")
    page.click("button[value=front]")
    page.wait_for_selector(".messages")
    assert "sent to the front of the review queue" in page.inner_text(".messages")
    moved = [i for i, _s in shown]
    front = list(ReviewItem.objects.filter(status="open").order_by("priority", "id").values_list("image_id", flat=True)[:len(moved)])
    open_moved = [i for i in moved if ReviewItem.objects.filter(image_id=i, status="open").exists()]
    assert front[:len(open_moved)] == open_moved
    log = AuditLog.objects.get(action="review_sent_to_front", actor__username="cur")
    assert log.data["images"] == open_moved and log.data["by"] == "curator"
    assert not errors, errors


def test_annotator_sends_the_nearest_to_the_front_with_m(real_pool, live_server, browser):
    page = browser.new_context(viewport={"width": 1366, "height": 768}).new_page()
    browser_login(page, live_server.url, "ann1", "/review/screen/")
    page.wait_for_function("document.querySelector('#photo').dataset.image")
    image = int(page.get_attribute("#photo", "data-image"))
    page.keyboard.press("m")
    page.wait_for_function("document.querySelector('#status').textContent.includes('moved to the front')")
    log = AuditLog.objects.get(action="review_sent_to_front", actor__username="ann1")
    assert log.data["image"] == image and log.data["by"] == "annotator"
    from django.contrib.auth.models import User

    ann = User.objects.get(username="ann1")
    held = set(Assignment.objects.filter(annotator=ann, state="leased").values_list("item__image_id", flat=True))
    want = [i for i, _s in _exact_neighbours(image, "candidate", 40)
            if i not in held and ReviewItem.objects.filter(image_id=i, status="open").exists()][:20]
    assert log.data["images"] == want
    front = list(ReviewItem.objects.filter(status="open").order_by("priority", "id").values_list("image_id", flat=True)[:len(want)])
    assert front == want
    # and the next images served are those (the two held ones first)
    page.keyboard.press("o")
    page.keyboard.press("o")
    page.keyboard.press("o")
    page.wait_for_function("document.querySelector('#status').textContent.includes('3 reviewed this session')")
    assert int(page.get_attribute("#photo", "data-image")) in want


def test_embedding_map_made_as_a_job_box_and_lasso_open_the_selection(real_pool, live_server, browser, settings):
    import numpy as np

    from curation.models import Job

    page = browser.new_context(viewport={"width": 1366, "height": 768}).new_page()
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    browser_login(page, live_server.url, "cur", "/curate/images/")
    page.click("#map-link")
    page.select_option("#map-source select[name=source]", str(real_pool.pk))
    page.click("#map-source button[type=submit]")
    # tests run jobs in the request: UMAP (umap-learn) over the real features. The click waits for
    # the navigation it starts, so it gets the same bound: in a new .venv numba compiles UMAP's
    # functions on this first use, which took over the click's default 30 s on a 2-core machine
    with page.expect_navigation(timeout=300000):
        page.click("#make-map", timeout=300000)
    page.wait_for_function("document.querySelector('#map') && document.querySelector('#map').dataset.ready === '1'", timeout=240000)
    job = Job.objects.get(kind="embedding_map")
    assert job.status == "done" and job.config["method"] == "umap" and job.source == real_pool
    data = np.load(settings.FEATURE_STORE / job.result["path"])
    ids, xy = data["ids"].tolist(), data["xy"]
    assert len(ids) == 31 and xy.shape == (31, 2) and xy.min() >= 0 and xy.max() <= 1
    assert page.evaluate("document.documentElement.scrollWidth") <= 1366
    page.screenshot(path=str(SHOTS / "embedding-map-1366x768.png"))
    page.select_option("#colour-by", "cls")  # coloured by class: the legend names them
    assert "iceberg" in page.inner_text("#legend")

    # a box over the left half: exactly the points whose x falls there, by the map's own coordinates
    box = page.locator("#map").bounding_box()
    pad = 10
    mid = box["width"] / 2
    page.mouse.move(box["x"] + 1, box["y"] + 1)
    page.mouse.down()
    page.mouse.move(box["x"] + mid, box["y"] + box["height"] - 1, steps=5)
    page.mouse.up()
    expected = {i for i, (x, _y) in zip(ids, xy) if pad + x * (box["width"] - 2 * pad) <= mid - 1}
    borderline = {i for i, (x, _y) in zip(ids, xy) if abs(pad + x * (box["width"] - 2 * pad) - mid) < 1.5}
    got = {int(x) for x in page.input_value("#map-ids").split(",") if x}
    assert expected - borderline <= got <= expected | borderline and got
    assert f"{len(got)} selected" in page.inner_text("#map-selected")
    # a lasso (Shift+drag) around everything takes every point
    corners = [(2, 2), (box["width"] - 2, 2), (box["width"] - 2, box["height"] - 2), (2, box["height"] - 2), (2, 3)]
    page.keyboard.down("Shift")
    page.mouse.move(box["x"] + corners[0][0], box["y"] + corners[0][1])
    page.mouse.down()
    for cx, cy in corners[1:]:
        page.mouse.move(box["x"] + cx, box["y"] + cy, steps=4)
    page.mouse.up()
    page.keyboard.up("Shift")
    assert f"{len(ids)} selected" in page.inner_text("#map-selected")
    # back to the box, then open it: the browser's thumbnails and actions
    page.keyboard.press("Escape")
    page.mouse.move(box["x"] + 1, box["y"] + 1)
    page.mouse.down()
    page.mouse.move(box["x"] + mid, box["y"] + box["height"] - 1, steps=5)
    page.mouse.up()
    chosen = {int(x) for x in page.input_value("#map-ids").split(",") if x}
    page.click("#open-selection")
    page.wait_for_selector("#selection-count")
    assert {int(li.get_attribute("data-image")) for li in page.locator("#grid li.tile").all()} == chosen
    page.click("#select-page")
    page.select_option("select[name=decision]", "ood")
    page.fill("input[name=label_reason]", "a cluster of plain textures")
    page.click("button[value=label]")
    page.wait_for_selector(".messages")
    labelled = set(ReviewItem.objects.filter(status="adjudicated", final_decision="ood", decided_by__username="cur")
                   .values_list("image_id", flat=True))
    assert labelled == {i for i in chosen if ReviewItem.objects.filter(image_id=i).exists()} and labelled
    assert "/curate/map/" in page.url  # back on the map
    assert not errors, errors
