"""The admin's change lists of the tables that grow with a pool (issue 45): their queries do not
grow with the rows, none counts a whole big table, and no filter lists a column's distinct values
by a scan of every row. Checked by the queries made, not by a timing."""
from __future__ import annotations

import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from curation.models import (
    AuditLog,
    CandidateClass,
    Export,
    ExportMember,
    Image,
    ImageEmbedding,
    Job,
    Review,
    ReviewItem,
    Source,
)

pytestmark = pytest.mark.django_db

LISTS = ("image", "imageembedding", "reviewitem", "review", "assignment", "exportmember", "auditlog", "job", "jobchunk")


def _grow(source: Source, cls: CandidateClass, export: Export, admin_user, start: int, n: int) -> None:
    from curation.models import Assignment

    images = Image.objects.bulk_create([Image(source=source, candidate_class=cls, relative_path=f"c/{k}.jpg", sha256=f"{k:064x}",
                                              status="ok" if k % 7 else "broken", error_code="" if k % 7 else f"code{k % 3}")
                                        for k in range(start, start + n)])
    ImageEmbedding.objects.bulk_create([ImageEmbedding(image=i, model_name="m", drop_reason="" if i.pk % 5 else f"near_duplicate_of:{i.pk}")
                                        for i in images])
    items = ReviewItem.objects.bulk_create([ReviewItem(image=i, source=source, candidate_class=cls) for i in images])
    now = "2026-01-01T00:00:00Z"
    assignments = Assignment.objects.bulk_create([Assignment(item=it, annotator=admin_user, state="done", leased_at=now, expires_at=now)
                                                  for it in items])
    Review.objects.bulk_create([Review(item=it, annotator=admin_user, assignment=a, decision="ood", seconds=1.0)
                                for it, a in zip(items, assignments)])
    ExportMember.objects.bulk_create([ExportMember(export=export, image=i, sha256=i.sha256) for i in images])
    AuditLog.objects.bulk_create([AuditLog(actor=admin_user, action="x", target_id=str(i.pk)) for i in images])


@pytest.fixture
def pool(admin_user):
    source = Source.objects.create(name="big", root="/nonexistent")
    cls = CandidateClass.objects.create(source=source, folder="c", wnid="n00000001", mapping="wnid_folder")
    job = Job.objects.create(kind="export", status="done")
    export = Export.objects.create(name="e", version=1, status="done", job=job)
    return source, cls, export


def _queries(client, url):
    with CaptureQueriesContext(connection) as ctx:
        r = client.get(url)
    assert r.status_code == 200, (url, r.status_code)
    return [q["sql"] for q in ctx.captured_queries], r


def test_change_lists_make_as_many_queries_at_120_rows_as_at_20(admin_client, admin_user, pool):
    """Every name a row shows (an image's source, a class's source, an annotator, an actor) comes
    with the page's one query, not one query per row."""
    source, cls, export = pool
    _grow(source, cls, export, admin_user, 0, 20)
    before = {m: len(_queries(admin_client, f"/admin/curation/{m}/")[0]) for m in LISTS}
    _grow(source, cls, export, admin_user, 20, 100)
    after = {m: len(_queries(admin_client, f"/admin/curation/{m}/")[0]) for m in LISTS}
    assert after == before


def test_no_list_scans_a_column_for_its_distinct_values(admin_client, admin_user, pool):
    """Django's plain-field filter reads SELECT DISTINCT col FROM the whole table (one per drop
    reason: a row per duplicate group); the filters here have fixed choices or read an index."""
    source, cls, export = pool
    _grow(source, cls, export, admin_user, 0, 30)
    for m in ("image", "imageembedding"):
        sqls, r = _queries(admin_client, f"/admin/curation/{m}/")
        for sql in sqls:
            if "DISTINCT" in sql and f'"curation_{m}"' in sql.split("FROM", 1)[1]:
                assert "WHERE" in sql, f"{m}: {sql[:300]}"
    sqls, r = _queries(admin_client, "/admin/curation/image/")
    assert b"code1" in r.content  # the error codes of the broken images are still offered
    sqls, r = _queries(admin_client, "/admin/curation/imageembedding/?dropped=near")
    assert re.search(rb"(\d+) image embeddings", r.content).group(1) == b"6"


@pytest.mark.skipif(connection.vendor != "postgresql", reason="the planner's estimate is PostgreSQL's")
def test_a_large_list_shows_the_planners_estimate_labelled_and_counts_no_rows(admin_client, admin_user, pool, monkeypatch):
    """Above ESTIMATE_ABOVE rows the count on the page is EXPLAIN's estimate, said to be one
    ("about"), and no COUNT(*) reads the table; below it the count is exact."""
    from curation.admin import _common

    source, cls, export = pool
    _grow(source, cls, export, admin_user, 0, 40)
    with connection.cursor() as cur:
        cur.execute("ANALYZE")
    sqls, r = _queries(admin_client, "/admin/curation/image/")
    assert b"about" not in r.content and re.search(rb"\b40 images", r.content)
    monkeypatch.setattr(_common, "ESTIMATE_ABOVE", 0)
    for m in LISTS:
        sqls, r = _queries(admin_client, f"/admin/curation/{m}/")
        counts = [s for s in sqls if "COUNT(" in s.upper() and f'"curation_{m}"' in s]
        assert not counts, f"{m}: {counts[0][:300]}"
        if m != "job" and m != "jobchunk":
            assert b"about</span>" in r.content, m
