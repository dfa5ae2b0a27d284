"""Issue 31.6: the duplicate-group list names each group's class, size, highest similarity and
state, with a "needs attention" filter and its count; the group page has keys (members, the
corrections, next / previous group needing attention). Chromium at 1366x768 and 1920x1080, the
database checked after each correction made by key."""
from __future__ import annotations

import numpy as np
import pytest
from django.test import Client

from curation.models import DuplicateOverride, FeatureShard, Image, ImageEmbedding
from curation.roles import CURATOR, RESEARCHER
from curation.services.duplicates import duplicate_override_clear, duplicate_override_set
from curation.services.review import review_queue_sync
from curation.services.users import user_create_with_role
from tests.conftest import SHOTS, browser_login
from tests.review_data import queue_with_rows


def _cosine(u: np.ndarray, v: np.ndarray) -> float:
    return float(np.dot(u, v) / (np.sqrt(np.dot(u, u)) * np.sqrt(np.dot(v, v))))


@pytest.fixture
def two_groups(tmp_path, settings, role_groups):
    """Two groups written as the search would (a kept image and its near-duplicates), with
    features in a real shard: group A = a, b, c (kept a), group B = d, e (kept d)."""
    settings.FEATURE_STORE = tmp_path / "features"
    settings.THUMBNAIL_DIR = tmp_path / "thumbs"
    source = queue_with_rows(tmp_path, n=8)
    imgs = list(Image.objects.filter(source=source).order_by("id")[:5])
    rng = np.random.default_rng(3)
    feats = rng.normal(size=(5, 16)).astype(np.float32)
    feats[1] = feats[0] + 0.1 * feats[1]  # b close to a
    feats[2] = feats[0] + 0.5 * feats[2]  # c further from a
    feats[4] = feats[3] + 0.2 * feats[4]  # e close to d
    settings.FEATURE_STORE.mkdir(parents=True)
    np.save(settings.FEATURE_STORE / "dups.npy", feats)
    shard = FeatureShard.objects.create(model_name=settings.DEFAULT_MODEL, path="dups.npy", rows=5, dim=16)
    a, b, c, d, e = imgs
    for row, (img, kept) in enumerate(((a, a), (b, a), (c, a), (d, d), (e, d))):
        drop = "" if img == kept else f"near_duplicate_of:{kept.pk}"
        ImageEmbedding.objects.filter(image=img, model_name=settings.DEFAULT_MODEL).update(
            shard=shard, row=row, search_group=kept.pk, search_drop=drop, dup_group=kept.pk, drop_reason=drop)
    review_queue_sync(source=source)
    user_create_with_role(username="cur", password="cur-pw", role=CURATOR)
    user_create_with_role(username="res", password="res-pw", role=RESEARCHER)
    expected = {a.pk: max(_cosine(feats[1], feats[0]), _cosine(feats[2], feats[0])), d.pk: _cosine(feats[4], feats[3])}
    return imgs, expected


@pytest.mark.django_db
def test_the_list_shows_class_size_similarity_and_state_and_filters_what_needs_attention(two_groups):
    (a, b, c, d, e), expected = two_groups
    cur = Client()
    cur.login(username="cur", password="cur-pw")
    page = cur.get("/curate/duplicates/").content.decode()
    assert 'data-count="total">2<' in page and 'data-count="open">2<' in page
    assert f"{expected[a.pk]:.3f}" in page and f"{expected[d.pk]:.3f}" in page
    assert a.candidate_class.label in page and "3 images, 2 dropped" in page and "2 images, 1 dropped" in page
    assert page.count('data-resolved="no"') == 2
    duplicate_override_set(image_id=e.pk, action="not_duplicate", user=None)
    open_page = cur.get("/curate/duplicates/?state=open").content.decode()
    assert f'data-group="{a.pk}"' in open_page and f'data-group="{d.pk}"' not in open_page
    assert 'data-count="open">1<' in open_page
    decided = cur.get("/curate/duplicates/?state=decided").content.decode()
    assert f'data-group="{d.pk}" data-resolved="yes"' in decided and f'data-group="{a.pk}"' not in decided
    bad = cur.get("/curate/duplicates/?state=maybe")
    assert bad.status_code == 400 and "is not one of open, decided" in bad.content.decode()
    # a researcher reads the page but is offered no correction keys
    res = Client()
    res.login(username="res", password="res-pw")
    group = res.get(f"/curate/duplicates/{b.pk}/").content.decode()
    assert "<kbd>N</kbd>" in group and "<kbd>X</kbd>" not in group and "needs attention" in group


@pytest.mark.browser
@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("viewport", [(1366, 768), (1920, 1080)], ids=["1366x768", "1920x1080"])
def test_keys_move_correct_and_go_to_the_next_group_needing_attention(two_groups, live_server, browser, viewport):
    (a, b, c, d, e), expected = two_groups
    w, h = viewport
    page = browser.new_context(viewport={"width": w, "height": h}).new_page()
    browser_login(page, live_server.url, "cur", "/curate/duplicates/?state=open")
    assert page.inner_text("[data-count=open]") == "2"
    assert page.locator(".group-row").count() == 2
    assert page.evaluate("document.documentElement.scrollWidth") <= w
    if w == 1366:
        page.screenshot(path=str(SHOTS / "duplicate-list-1366x768.png"))
    page.click(f'.group-row[data-group="{a.pk}"] .group-class')
    page.wait_for_selector("#dup-keys")
    assert page.inner_text("#group-state") == "needs attention"
    assert page.get_attribute(".member.focused", "data-image") == str(a.pk)  # the kept image first
    # the keys read as they work (← K previous, → J next), and the kept image, with no correction to offer, has no note field
    assert "← or K previous, → or J next member" in page.inner_text("#dup-keys")
    assert page.locator(f'.member[data-image="{a.pk}"] input[name=note]').count() == 0
    assert page.locator(f'.member[data-image="{b.pk}"] input[name=note]').count() == 1
    page.keyboard.press("j")
    assert page.get_attribute(".member.focused", "data-image") == str(b.pk)
    page.keyboard.press("ArrowRight")
    page.keyboard.press("ArrowLeft")
    assert page.get_attribute(".member.focused", "data-image") == str(b.pk)
    assert page.evaluate("document.documentElement.scrollWidth") <= w
    if w == 1366:
        page.screenshot(path=str(SHOTS / "duplicate-group-keys-1366x768.png"))
    # X: "not a duplicate" on the focused member
    page.keyboard.press("x")
    page.wait_for_selector("#group-state.state-decided")
    o = DuplicateOverride.objects.get(image=b)
    assert o.action == "not_duplicate" and o.created_by.username == "cur"
    assert ImageEmbedding.objects.get(image=b).drop_reason == "" and ImageEmbedding.objects.get(image=c).drop_reason == f"near_duplicate_of:{a.pk}"
    assert page.get_attribute(".member.focused", "data-image") == str(b.pk)  # the focus stays on the member just corrected
    # N: the next group needing attention (group B), then O: keep e instead of d
    page.keyboard.press("n")
    page.wait_for_url(f"**/curate/duplicates/{d.pk}/")
    assert page.inner_text("#group-state") == "needs attention" and page.locator("#prev-open").count() == 0
    page.keyboard.press("k")  # already at the first member: stays
    page.keyboard.press("j")
    assert page.get_attribute(".member.focused", "data-image") == str(e.pk)
    page.keyboard.press("o")
    page.wait_for_selector("#group-state.state-decided")
    assert DuplicateOverride.objects.get(image=e).action == "keep"
    assert ImageEmbedding.objects.get(image=d).drop_reason == f"near_duplicate_of:{e.pk}"
    # U takes the correction back
    page.keyboard.press("u")
    page.wait_for_selector("#group-state.state-open")
    assert not DuplicateOverride.objects.filter(image=e).exists()
    assert ImageEmbedding.objects.get(image=e).drop_reason == f"near_duplicate_of:{d.pk}"
    # no earlier group needs attention (A is decided), so P has nowhere to go
    assert page.locator("#prev-open").count() == 0
    page.goto(f"{live_server.url}/curate/duplicates/?state=open")
    assert page.inner_text("[data-count=open]") == "1" and page.locator(f'.group-row[data-group="{d.pk}"]').count() == 1
    # once A's correction is taken back, A needs attention again and P from B opens it
    duplicate_override_clear(image_id=b.pk, user=None)
    page.goto(f"{live_server.url}/curate/duplicates/{d.pk}/")
    page.keyboard.press("p")
    page.wait_for_url(f"**/curate/duplicates/{a.pk}/")
    assert page.inner_text("#group-state") == "needs attention"


@pytest.mark.browser
@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("viewport", [(1366, 768), (1920, 1080)], ids=["1366x768", "1920x1080"])
def test_c_confirms_a_group_the_search_got_right_and_opens_the_next_one(two_groups, live_server, browser, viewport):
    """A group the search got right leaves "needs attention" with one key (C), which records the
    confirmation on the kept image, changes no membership and opens the next group needing
    attention; U on the kept image takes it back."""
    (a, b, c, d, e), expected = two_groups
    w, h = viewport
    before = {x.image_id: (x.dup_group, x.drop_reason) for x in ImageEmbedding.objects.all()}
    page = browser.new_context(viewport={"width": w, "height": h}).new_page()
    browser_login(page, live_server.url, "cur", f"/curate/duplicates/{a.pk}/")
    page.wait_for_selector("#confirm-group")
    assert page.is_visible("#confirm-group") and page.evaluate("document.documentElement.scrollWidth") <= w
    box = page.locator("#confirm-group").bounding_box()
    assert box is not None and box["y"] + box["height"] <= h  # in the first screen
    page.keyboard.press("c")
    page.wait_for_url(f"**/curate/duplicates/{d.pk}/")
    o = DuplicateOverride.objects.get(image=a)
    assert o.action == "confirm" and o.created_by.username == "cur" and DuplicateOverride.objects.count() == 1
    assert {x.image_id: (x.dup_group, x.drop_reason) for x in ImageEmbedding.objects.all()} == before
    # the last group needing attention: confirmed, the page stays and says it is decided
    page.keyboard.press("c")
    page.wait_for_selector("#group-state.state-decided")
    assert DuplicateOverride.objects.get(image=d).action == "confirm"
    assert page.locator("#confirm-group").count() == 0
    page.goto(f"{live_server.url}/curate/duplicates/?state=open")
    assert page.inner_text("[data-count=open]") == "0"
    # U on the kept image (the focus starts there) takes the confirmation back
    page.goto(f"{live_server.url}/curate/duplicates/{d.pk}/")
    page.keyboard.press("u")
    page.wait_for_selector("#group-state.state-open")
    assert not DuplicateOverride.objects.filter(image=d).exists()
