"""Issue 31's walk (pages a curator reads all day): the certification page is reachable from review
progress, the home page's sources lead into the image browser only for those the browser lets in
(no link to a 403), and the confirmation of a settings change names what its button does."""
from __future__ import annotations

import io
import re

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command

from curation.roles import ANNOTATOR, CURATOR, RESEARCHER
from curation.services.review import review_cache_clear, review_next, review_queue_sync, review_submit
from curation.services.users import user_create_with_role
from tests.review_data import KEPT_CLASSES, fake_predictions, ingest, write_candidates

pytestmark = pytest.mark.django_db


@pytest.fixture
def pool(tmp_path, settings, role_groups):
    """A candidate pool of 8 images plus one file that cannot be decoded; 3 images decided at one review each."""
    settings.THUMBNAIL_DIR = tmp_path / "thumbs"
    review_cache_clear()
    call_command("set_id_classes", "imagenet-1k", stdout=io.StringIO())
    write_candidates(tmp_path / "pool", 8)
    folder = next(p for p in (tmp_path / "pool").iterdir() if p.is_dir())
    (folder / "zz_not_an_image.jpg").write_bytes(b"this is text, not a JPEG")
    source = ingest("pool", tmp_path / "pool")
    fake_predictions(source)
    review_queue_sync(source=source)
    ann = user_create_with_role(username="ann1", password="ann1-pw", role=ANNOTATOR)[0]
    user_create_with_role(username="cur", password="cur-pw", role=CURATOR)
    user_create_with_role(username="res", password="res-pw", role=RESEARCHER)
    for _ in range(3):
        a = review_next(user=ann, want=1)[0]
        review_submit(user=ann, assignment_id=a.pk, decision="ood")
    assert KEPT_CLASSES
    return source


def _hrefs(html: bytes, pattern: str) -> list[str]:
    return [h.replace("&amp;", "&") for h in re.findall(r'href="([^"]*)"', html.decode()) if re.search(pattern, h)]


@pytest.mark.parametrize("user", ["cur", "res"])
def test_review_progress_links_each_source_to_its_certification_page(pool, client, user):
    client.force_login(User.objects.get(username=user))
    html = client.get("/curate/reviews/").content
    links = _hrefs(html, r"^/curate/certify/")
    assert links == [f"/curate/certify/{pool.pk}/"]
    assert client.get(links[0]).status_code == 200


def test_home_sources_lead_into_the_browser_only_for_those_it_lets_in(pool, client):
    client.force_login(User.objects.get(username="cur"))
    html = client.get("/").content
    links = _hrefs(html, r"^/curate/images/")
    assert "/curate/images/?source=pool" in links
    broken = "/curate/images/?source=pool&status=broken"
    assert broken in links
    page = client.get(broken)
    assert page.status_code == 200 and b"zz_not_an_image.jpg" in page.content
    # staff without a curating role see the sources (the admin's view) but get no link the browser would refuse
    staff = User.objects.create_user(username="staff", password="staff-pw", is_staff=True)
    client.force_login(staff)
    html = client.get("/").content
    assert b'id="sources"' in html and b"Exact copies" in html
    assert _hrefs(html, r"^/curate/images/") == []
    assert client.get("/curate/images/?source=pool").status_code == 403


def test_settings_confirmation_button_names_the_images_it_reopens(pool, client):
    client.force_login(User.objects.get(username="cur"))
    r = client.post(f"/curate/reviews/source/{pool.pk}/", {"reviews_required": "2", "order": "random", "gold_rate": "0"})
    assert r.status_code == 200
    button = re.search(rb'<button[^>]*id="confirm-settings"[^>]*>(.*?)</button>', r.content, re.S).group(1).decode()
    assert button == "Change it: re-open 3 images"


@pytest.mark.parametrize("decided", ["adjudication", "curator"])
def test_decision_source_filters_are_sql_the_demos_sqlite_runs(decided):
    """The demo serves from SQLite: the 'Decided by' filters once used DISTINCT ON (PostgreSQL only),
    a 500 there. Compiled by Django's SQLite backend; the PostgreSQL results are checked in
    tests/test_browse_filters_browser.py."""
    from django.db import connections
    from django.db.backends.sqlite3.base import DatabaseWrapper

    from curation.selectors.browse import browse_filters_from, browse_queryset

    sqlite = DatabaseWrapper({**connections["default"].settings_dict, "ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"},
                             alias="sqlite_check")
    qs = browse_queryset(browse_filters_from({"decided": decided}))
    sql, params = qs.query.get_compiler(connection=sqlite).as_sql()
    assert "review_adjudicated" in str(params) + sql  # the audit log is read, not skipped
    sqlite.close()
