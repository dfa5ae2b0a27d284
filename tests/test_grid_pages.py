"""Issue 48: grid pages never leave a stub. A class's rest of fewer than half a page joins its
last page, so every page holds at least half a page unless it is its class's only page (and at
most one and a half pages), with and without the next page leased ahead; an annotator's tile
size is remembered on the server."""
from __future__ import annotations

import pytest

from curation.models import ReviewItem
from curation.roles import ANNOTATOR
from curation.services.review import ReviewError, review_cache_clear
from curation.services.review_grid import grid_tile_save, review_grid_next, review_grid_submit
from curation.services.users import user_create_with_role
from tests.review_data import queue_with_rows

pytestmark = pytest.mark.django_db


@pytest.fixture
def pool(tmp_path, role_groups):
    review_cache_clear()
    queue_with_rows(tmp_path, n=30)  # 3 classes of 10
    return user_create_with_role(username="p1", password="p1-pw-12345", role=ANNOTATOR)[0]


@pytest.mark.parametrize("prefetch", [False, True])
@pytest.mark.parametrize("size", [4, 6, 7, 8, 9])
def test_no_page_is_a_stub(pool, size, prefetch):
    per_class: dict[int, list[int]] = {}
    for _ in range(40):
        lease = review_grid_next(user=pool, size=size, prefetch=size if prefetch else 0)
        if not lease.assignments:
            break
        classes = set(ReviewItem.objects.filter(pk__in=[a.item_id for a in lease.assignments]).values_list("candidate_class_id", flat=True))
        assert classes == {lease.class_id}, "one class a page"
        per_class.setdefault(lease.class_id, []).append(len(lease.assignments))
        review_grid_submit(user=pool, marks=[{"assignment": a.pk, "decision": "ood"} for a in lease.assignments])
    assert sorted(sum(p) for p in per_class.values()) == [10, 10, 10], per_class
    for pages in per_class.values():
        assert all(2 * n >= size for n in pages) or len(pages) == 1, (size, per_class)
        assert all(n <= size + size // 2 for n in pages), (size, per_class)
    if size == 8:  # 10 = 8 + a stub of 2: one page of 10
        assert list(per_class.values()) == [[10]] * 3


def test_tile_size_is_remembered_per_annotator(pool, client):
    client.login(username="p1", password="p1-pw-12345")
    assert 'data-tile="128"' in client.get("/review/grid/").content.decode()
    # a state change only by POST (issue 62 row 9: a GET another site could send changed it)
    assert client.post("/api/review/grid/next", {"size": 8, "tile": 176}, content_type="application/json").status_code == 200
    assert 'data-tile="176"' in client.get("/review/grid/").content.decode()
    assert client.post("/api/review/grid/next", {"size": 8, "tile": 9000}, content_type="application/json").status_code == 400
    with pytest.raises(ReviewError):
        grid_tile_save(user=pool, tile="12px")
    assert grid_tile_save(user=pool, tile=200) == 200
    assert 'data-tile="200"' in client.get("/review/grid/").content.decode()
