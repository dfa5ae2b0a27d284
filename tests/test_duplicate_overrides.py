"""A curator's corrections of the duplicate search, through the services and the group page:
"not a duplicate" brings an image into the review queue, undoing it restores the search's
result, and only curators may correct. (The real search, "keep this one instead" and the export
that follows it are in tests/test_browse_browser.py.)"""
from __future__ import annotations

import pytest
from django.test import Client

from curation.models import AuditLog, DuplicateOverride, Image, ImageEmbedding, ReviewItem
from curation.roles import CURATOR, RESEARCHER
from curation.services.duplicates import DuplicateError, duplicate_override_clear, duplicate_override_set
from curation.services.review import review_queue_sync
from curation.services.users import user_create_with_role
from tests.review_data import queue_with_rows

pytestmark = pytest.mark.django_db


@pytest.fixture
def grouped(tmp_path, role_groups):
    """Three images of one class made one group by hand, as the search would write it."""
    source = queue_with_rows(tmp_path, n=6)
    a, b, c = Image.objects.filter(source=source).order_by("id")[:3]
    for img, drop in ((a, ""), (b, f"near_duplicate_of:{a.pk}"), (c, f"near_duplicate_of:{a.pk}")):
        ImageEmbedding.objects.filter(image=img).update(search_group=a.pk, search_drop=drop, dup_group=a.pk, drop_reason=drop)
    review_queue_sync(source=source)
    assert set(ReviewItem.objects.filter(status="open").values_list("image_id", flat=True)) & {b.pk, c.pk} == set()
    cur = user_create_with_role(username="cur", password="pw", role=CURATOR)[0]
    return source, (a, b, c), cur


def test_not_a_duplicate_queues_the_image_and_undo_restores_the_search(grouped):
    source, (a, b, c), cur = grouped
    duplicate_override_set(image_id=b.pk, action="not_duplicate", note="different angle", user=cur)
    assert ImageEmbedding.objects.get(image=b).drop_reason == "" and ImageEmbedding.objects.get(image=b).dup_group == b.pk
    assert ImageEmbedding.objects.get(image=c).drop_reason == f"near_duplicate_of:{a.pk}"
    assert ReviewItem.objects.get(image=b).status == "open"  # in the queue at once
    log = AuditLog.objects.get(action="duplicate_override_set")
    assert log.data["before"] == [a.pk, f"near_duplicate_of:{a.pk}"] and log.data["after"] == [b.pk, ""]
    # saying it again changes nothing; the kept image cannot be "kept instead"
    duplicate_override_set(image_id=b.pk, action="not_duplicate", user=cur)
    assert DuplicateOverride.objects.count() == 1
    with pytest.raises(DuplicateError, match="the one its group keeps; say 'not a duplicate' on a member"):
        duplicate_override_set(image_id=a.pk, action="not_duplicate", user=cur)
    with pytest.raises(DuplicateError, match="already the one its group keeps"):
        duplicate_override_set(image_id=a.pk, action="keep", user=cur)
    with pytest.raises(DuplicateError, match="must be not_duplicate, keep or confirm"):
        duplicate_override_set(image_id=c.pk, action="merge", user=cur)
    assert duplicate_override_clear(image_id=b.pk, user=cur) == 1
    assert ImageEmbedding.objects.get(image=b).drop_reason == f"near_duplicate_of:{a.pk}"
    assert ReviewItem.objects.get(image=b).status == "withdrawn"


def test_the_group_page_shows_members_and_only_curators_correct(grouped):
    source, (a, b, c), cur = grouped
    res = user_create_with_role(username="res", password="pw", role=RESEARCHER)[0]
    rc, cc = Client(), Client()
    rc.force_login(res)
    cc.force_login(cur)
    page = rc.get(f"/curate/duplicates/{c.pk}/")
    assert page.status_code == 200 and page.content.decode().count('data-state=') == 3
    assert b'data-state="kept"' in page.content and b"Keep this one instead" not in page.content  # researchers read only
    assert rc.post(f"/curate/duplicates/{c.pk}/", {"image": c.pk, "action": "keep"}).status_code == 403
    r = cc.post(f"/curate/duplicates/{c.pk}/", {"image": c.pk, "action": "keep", "note": "sharper"})
    assert r.status_code == 302
    assert ImageEmbedding.objects.get(image=a).drop_reason == f"near_duplicate_of:{c.pk}"
    assert set(ImageEmbedding.objects.filter(image__in=[a, b, c]).values_list("dup_group", flat=True)) == {c.pk}
    listing = cc.get("/curate/duplicates/")
    assert listing.status_code == 200 and f'data-group="{a.pk}"'.encode() in listing.content
    assert cc.get("/curate/duplicates/?source=nope").status_code == 404


def test_confirm_marks_the_group_decided_and_changes_no_membership(grouped):
    """'The search is right' (C on the group page): said of the image the group keeps, on a group
    nobody corrected; memberships, drops and the queue stay exactly as the search left them."""
    from curation.selectors.duplicates import duplicate_group_decided

    source, (a, b, c), cur = grouped
    before = {e.image_id: (e.dup_group, e.drop_reason) for e in ImageEmbedding.objects.filter(image__in=(a, b, c))}
    queue_before = set(ReviewItem.objects.filter(status="open").values_list("image_id", flat=True))
    assert not duplicate_group_decided(raw_group=a.pk)
    with pytest.raises(DuplicateError, match=f"not the one its group keeps \\(image {a.pk} is\\)"):
        duplicate_override_set(image_id=b.pk, action="confirm", user=cur)
    duplicate_override_set(image_id=a.pk, action="confirm", user=cur)
    assert duplicate_group_decided(raw_group=a.pk)
    assert {e.image_id: (e.dup_group, e.drop_reason) for e in ImageEmbedding.objects.filter(image__in=(a, b, c))} == before
    assert set(ReviewItem.objects.filter(status="open").values_list("image_id", flat=True)) == queue_before
    assert AuditLog.objects.filter(action="duplicate_override_set", data__action="confirm").count() == 1
    # a decided group is not confirmed over its correction (that would undo a 'keep' on the kept image)
    duplicate_override_clear(image_id=a.pk, user=cur)
    duplicate_override_set(image_id=c.pk, action="keep", user=cur)
    with pytest.raises(DuplicateError, match="already decided by a correction; undo it"):
        duplicate_override_set(image_id=c.pk, action="confirm", user=cur)
    assert DuplicateOverride.objects.get(image=c).action == "keep"
    # an image alone in its group has nothing to confirm
    d = Image.objects.filter(source=source).order_by("id")[3]
    ImageEmbedding.objects.filter(image=d).update(search_group=d.pk, dup_group=d.pk, search_drop="", drop_reason="")
    with pytest.raises(DuplicateError, match="in no duplicate group: there is nothing to confirm"):
        duplicate_override_set(image_id=d.pk, action="confirm", user=cur)
