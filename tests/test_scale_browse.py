"""The image browser, its class search and the admin's image search at a pool's size (issue 45),
checked by their statements and plans, not timings: a page's queries do not grow with the pool,
the review-side filters are read from the few reviews and items they name (partial indexes),
a filter's count above COUNT_CAP is the planner's estimate said to be one, a deep page's rows
are read without joining the queue or the predictions, the class search's index is made once
per process and again when a class changes, and the admin searches a path's beginning or a
whole SHA-256 through an index."""
from __future__ import annotations

import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from curation.models import Assignment, AuditLog, CandidateClass, Image, ImageEmbedding, Review, ReviewItem, Source
from curation.roles import CURATOR
from curation.services.users import user_create_with_role
from tests.sql_plans import plan_without_seq_scans

pytestmark = pytest.mark.django_db

POSTGRES = pytest.mark.skipif(connection.vendor != "postgresql", reason="the plan and the estimate are PostgreSQL's")
FILTERS = ("", "annotator=ann", "note=yes", "note=no", "decided=adjudication", "decided=curator", "label=id", "label=open",
           "top1=n01440764", "sort=-similarity", "cls_name=thing+1")


@pytest.fixture
def pool(settings):
    source = Source.objects.create(name="pool", root="/nonexistent")
    classes = CandidateClass.objects.bulk_create([CandidateClass(source=source, folder=f"n{k:08d}", wnid=f"n{k:08d}", synset_name=f"thing_{k}.n.01",
                                                                 lemmas=[f"thing_{k}"], mapping="wnid_folder") for k in range(3)])
    ann, _made = user_create_with_role(username="ann", password="x", role="annotator")
    user_create_with_role(username="cur", password="x", role=CURATOR)
    return source, classes, ann, settings.DEFAULT_MODEL


def _grow(pool, start: int, n: int) -> None:
    """``n`` more images, each with a prediction and a queue item; every fifth reviewed (every
    tenth with a note), every seventh adjudicated (every 14th with a final note)."""
    source, classes, ann, model = pool
    images = Image.objects.bulk_create([Image(source=source, candidate_class=classes[k % 3], relative_path=f"n{k % 3:08d}/{k}.jpg",
                                              sha256=f"{k:064x}", status="ok") for k in range(start, start + n)])
    ImageEmbedding.objects.bulk_create([ImageEmbedding(image=i, model_name=model, top1_wnid="n01440764", top1_prob=0.5, max_softmax=0.5,
                                                       nearest_id_similarity=(i.pk % 97) / 100) for i in images])
    items = ReviewItem.objects.bulk_create([
        ReviewItem(image=i, source=source, candidate_class=i.candidate_class,
                   status="adjudicated" if k % 7 == 0 else "open", final_decision="id" if k % 7 == 0 else "",
                   final_note="seen twice" if k % 14 == 0 else "") for k, i in enumerate(images, start)])
    now = timezone.now()
    for k, item in enumerate(items, start):
        if k % 5 == 0:
            a = Assignment.objects.create(item=item, annotator=ann, state="done", leased_at=now, expires_at=now)
            Review.objects.create(item=item, annotator=ann, assignment=a, decision="ood", seconds=1.0, note="blurry" if k % 10 == 0 else "")
    AuditLog.objects.bulk_create([AuditLog(actor=ann, action="review_adjudicated", target_type="curation.reviewitem", target_id=str(it.pk),
                                           data={"via": "browser"} if k % 21 == 0 else {}) for k, it in enumerate(items, start) if k % 7 == 0])


def _get(client, url: str):
    with CaptureQueriesContext(connection) as ctx:
        r = client.get(url)
    assert r.status_code == 200, (url, r.status_code, r.content[:300])
    return r, [q["sql"] for q in ctx.captured_queries]


def test_a_pages_queries_do_not_grow_with_the_pool(client, pool):
    """Every filter's page makes as many queries at 300 images as at 60 (the menus, the count, the
    rows, the rows' prediction and review state: none per row), the second page by cursor too."""
    from curation.selectors import browse

    def queries(f: str) -> int:
        browse._CLASS_INDEXES.clear()  # each request makes the class search's index, as a new process does
        return len(_get(client, f"/curate/images/?{f}&size=2")[1])

    client.login(username="cur", password="x")
    _grow(pool, 0, 60)
    before = {f: queries(f) for f in FILTERS}
    _grow(pool, 60, 240)
    assert {f: queries(f) for f in FILTERS} == before


def test_the_annotator_menu_reads_no_review_row_by_row(client, pool):
    """The annotators offered are the users with a review, each found by one probe of the
    (annotator, created_at) index: no DISTINCT over every review of the pool."""
    client.login(username="cur", password="x")
    _grow(pool, 0, 20)
    r, sqls = _get(client, "/curate/images/")
    assert b'<option value="ann"' in r.content or b">ann<" in r.content
    assert not [s for s in sqls if "DISTINCT" in s and '"curation_review"' in s]


def test_a_pages_rows_carry_their_prediction_and_review_state_without_joining_them(client, pool):
    """The statement reading the page's rows joins neither the queue nor the predictions when no
    filter or sort needs them (deep in the list each became a merge join reading its table from
    the first row up to the page: 0.8 s at page 10000 of 1M images); the tiles still show both."""
    from curation.selectors.browse import browse_filters_from, image_browse

    _grow(pool, 0, 30)
    first = image_browse(filters=browse_filters_from({}), page_size=10)
    with CaptureQueriesContext(connection) as ctx:
        page = image_browse(filters=browse_filters_from({}), page_size=10, after=first.next_cursor, page=2)
    rows_sql = [q["sql"] for q in ctx.captured_queries if '"curation_image"."relative_path"' in q["sql"]]
    assert len(rows_sql) == 1 and "curation_reviewitem" not in rows_sql[0] and "curation_imageembedding" not in rows_sql[0]
    adjudicated = next(r for r in page.rows if r["review_item__status"] == "adjudicated")
    assert adjudicated["review_item__final_decision"] == "id" and adjudicated["emb__top1_wnid"] == "n01440764"
    assert [r["id"] for r in page.rows] == list(Image.objects.order_by("id").values_list("id", flat=True)[10:20])


@pytest.mark.parametrize("query,expected", [
    ("annotator=ann", lambda k: k % 5 == 0),
    ("note=yes", lambda k: k % 10 == 0 or k % 14 == 0),
    ("decided=adjudication", lambda k: k % 7 == 0 and k % 21 != 0),
    ("decided=curator", lambda k: k % 21 == 0),
])
def test_the_review_side_filters_find_the_images_they_name(pool, query, expected):
    from django.http import QueryDict

    from curation.selectors.browse import browse_filters_from, image_browse

    _grow(pool, 0, 90)
    images = list(Image.objects.order_by("id").values_list("id", flat=True))
    page = image_browse(filters=browse_filters_from(QueryDict(query)), page_size=200)
    assert [r["id"] for r in page.rows] == [i for k, i in enumerate(images) if expected(k)]
    assert page.count == len(page.rows) and not page.count_estimated and not page.count_capped


def _plan(qs) -> str:
    sql, params = qs.query.sql_with_params()
    with connection.cursor() as cur:
        cur.execute("ANALYZE")
    return plan_without_seq_scans(sql, params)


@POSTGRES
@pytest.mark.parametrize("query,index", [
    ("note=yes", "review_with_note"),
    ("note=yes", "review_item_final_note"),
    ("decided=adjudication", "review_item_adjudicated"),
    ("decided=curator", "review_item_adjudicated"),
])
def test_the_review_side_filters_are_read_through_their_partial_indexes(pool, query, index):
    """A note is on 0.02% of a pool's images: the filter starts from the reviews and items that
    have one, not an EXISTS per image scanned until a page matches (5 s at 13.2M images)."""
    from django.http import QueryDict

    from curation.selectors.browse import _ordered, browse_filters_from

    _grow(pool, 0, 60)
    qs = _ordered(browse_filters_from(QueryDict(query)))[0][:61]
    plan = _plan(qs)
    assert index in plan, plan
    assert not re.search(r"Seq Scan on curation_(image|review|reviewitem)\b", plan), plan


@POSTGRES
def test_a_count_above_the_cap_is_the_planners_estimate_said_to_be_one(client, pool, monkeypatch):
    """Above COUNT_CAP the number matching is EXPLAIN's estimate, shown as "about N", and no
    COUNT reads the images (a capped count of a rare filter still read every image until 1,001
    matched); a first page holding every match is its own count, exact."""
    from curation.selectors import browse

    client.login(username="cur", password="x")
    _grow(pool, 0, 40)
    with connection.cursor() as cur:
        cur.execute("ANALYZE")
    r, sqls = _get(client, "/curate/images/?size=60")
    assert re.search(rb'id="match-count">40 matching', r.content) and not [s for s in sqls if "COUNT(" in s.upper()]
    monkeypatch.setattr(browse, "COUNT_CAP", 5)
    for query in ("size=10", "note=yes&size=2", "annotator=ann&size=2"):
        r, sqls = _get(client, f"/curate/images/?{query}")
        assert not [s for s in sqls if "COUNT(" in s.upper() and '"curation_image"' in s], query
        assert re.search(rb'id="match-count"><span[^>]*>about</span> \d+ matching', r.content), query


def test_without_an_estimate_the_count_stops_at_the_cap(client, pool, monkeypatch):
    """SQLite (the demo) has no planner's estimate: the count is exact up to COUNT_CAP, then "N+"."""
    from curation.selectors import browse

    monkeypatch.setattr(browse, "estimated_count", lambda qs: None)
    monkeypatch.setattr(browse, "COUNT_CAP", 5)
    client.login(username="cur", password="x")
    _grow(pool, 0, 40)
    r, _sqls = _get(client, "/curate/images/?size=10")
    assert re.search(rb'id="match-count">5\+ matching', r.content)


def test_the_class_search_index_is_made_once_per_process_and_again_after_a_class_changes(pool, monkeypatch):
    """19,167 classes took 0.9 s to index per request: the index is kept while the classes are
    what they were; a class described, mapped, added or removed in any process is found by the
    next search (PostgreSQL: a digest of the classes computed in SQL; SQLite: of the rows read)."""
    from curation.selectors import browse

    source, classes, _ann, _model = pool
    made = []
    real = browse._index_of
    monkeypatch.setattr(browse, "_index_of", lambda rows: made.append(len(rows)) or real(rows))
    browse._CLASS_INDEXES.clear()
    assert browse.class_search(kind="class", q="thing 1")[0]["id"] == classes[1].pk
    assert browse.class_search(kind="class", q="thing 2")[0]["id"] == classes[2].pk
    assert len(made) == 1
    CandidateClass.objects.filter(pk=classes[0].pk).update(description="a small striped fish")
    assert browse.class_search(kind="class", q="striped fish")[0]["id"] == classes[0].pk
    assert len(made) == 2
    CandidateClass.objects.filter(pk=classes[2].pk).update(lemmas=["tench"], synset_name="tench.n.01")
    assert browse.class_search(kind="class", q="tench")[0]["id"] == classes[2].pk
    CandidateClass.objects.create(source=source, folder="n00000009", wnid="n00000009", lemmas=["goldfish"], mapping="wnid_folder")
    assert browse.class_search(kind="class", q="goldfish")[0]["wnid"] == "n00000009"
    assert len(made) == 4
    browse.class_search(kind="class", q="goldfish", source="pool")  # another source's index is its own
    browse.class_search(kind="class", q="goldfish", source="pool")
    assert len(made) == 5


def test_the_admin_searches_a_paths_beginning_or_a_whole_sha256(admin_client, pool):
    _grow(pool, 0, 30)
    r, sqls = _get(admin_client, "/admin/curation/image/?q=n00000001/")
    assert re.search(rb"\b10 images\b", r.content)
    assert not [s for s in sqls if "LIKE" in s.upper() and "%n00000001/%" in s]  # no substring of every path
    r, sqls = _get(admin_client, f"/admin/curation/image/?q={7:064X}")
    assert re.search(rb"\b1 image\b", r.content) and b"n00000001/7.jpg" in r.content


@POSTGRES
def test_the_admin_image_search_reads_an_index(pool):
    """``icontains`` over 13.2M paths read every one (8.6 s): a path's beginning is read from
    image_path_prefix (its pattern operator class: whatever the collation), a hash from its index."""
    from django.contrib.admin.sites import site
    from django.test import RequestFactory

    _grow(pool, 0, 30)
    admin = site._registry[Image]
    request = RequestFactory().get("/admin/curation/image/")
    for term, index in (("n00000001/", "image_path_prefix"), (f"{7:064x}", "sha256")):
        qs, _dups = admin.get_search_results(request, Image.objects.all(), term)
        plan = _plan(qs.order_by("-pk")[:100])
        assert index in plan and "Seq Scan on curation_image" not in plan, (term, plan)


@pytest.mark.parametrize("query", ["sort=-similarity", "sort=msp&top1=n01440764", "sort=similarity&sim_min=0.2", "sort=-similarity&note=no"])
def test_a_jump_lands_where_paging_by_cursor_does_and_reads_only_the_predictions_when_it_can(pool, query):
    """Page N by number starts after the row page N-1 ends with by cursor. Sorted by a prediction
    with filters on predictions alone, the row it starts after is read from the predictions' sorted
    index, no image looked up per row skipped (page 1000 by similarity, 1M images: 0.46 s)."""
    from django.http import QueryDict

    from curation.selectors.browse import browse_filters_from, image_browse

    _grow(pool, 0, 50)
    f = browse_filters_from(QueryDict(query))
    by_cursor = image_browse(filters=f, page_size=6)
    for _n in range(2):
        by_cursor = image_browse(filters=f, page_size=6, after=by_cursor.next_cursor)
    with CaptureQueriesContext(connection) as ctx:
        jumped = image_browse(filters=f, page_size=6, page=3)
    assert [r["id"] for r in jumped.rows] == [r["id"] for r in by_cursor.rows] and len(jumped.rows) == 6
    seek = ctx.captured_queries[0]["sql"]
    assert "OFFSET" in seek
    if "note" not in query:
        assert '"curation_image"' not in seek, seek


def test_the_class_filter_reports_lists_are_bounded(client, pool, monkeypatch):
    """Every list of the report (removed, kept, flagged, overrides, resolved flags) draws at most
    REPORT_LIST_LIMIT rows and says how many there are: 500 a list made 2,800 rows for a pool of
    19,167 classes, most of the page's time; the queries do not grow with the decisions either."""
    from curation.models import ClassDecision, ClassFilterRun, Job
    from labeling_ui import views

    monkeypatch.setattr(views, "REPORT_LIST_LIMIT", 4)
    source = pool[0]
    job = Job.objects.create(kind="class_filter", status="done")
    run = ClassFilterRun.objects.create(job=job, source=source, candidates_spec="source:pool", id_spec="x", id_wnids=[], policy_name="p",
                                        policy_origin="p", policy={"rules": {}}, policy_digest="d")

    def decide(start: int, n: int) -> None:
        ClassDecision.objects.bulk_create([
            ClassDecision(run=run, position=k, key=f"k{k}", name=f"class {k}", rule_decision="keep", decision=("keep", "remove", "flag")[k % 3],
                          rule="override_keep" if k % 4 == 0 else "", resolution="accept" if k % 3 == 2 else "", flag_level="strong")
            for k in range(start, start + n)])

    client.login(username="cur", password="x")
    decide(0, 30)
    _r, before = _get(client, f"/class-filter/{run.pk}/")
    decide(30, 120)
    r, after = _get(client, f"/class-filter/{run.pk}/")
    assert len(after) == len(before)
    html = r.content.decode()
    for tid in ("removed", "kept", "flagged", "overrides", "resolved"):
        table = html.split(f'id="{tid}"', 1)[1].split("</table>", 1)[0]
        assert table.count("<tr>") + table.count("<tr ") - table.count("<tr class=\"empty\"") <= 4 + 1, tid  # + the header row
    assert "Showing 4 of 50" in html and "Flags resolved by curators (50)" in html and "Overrides (38)" in html


NAMES = ("thing 1", "Thing_1", "thing-1", "THING", "n00000002", "crossword", "crossword puzzle", "cross", "puzzle game", "a small",
         "striped fish", "Tench", "tench fish", "n0000000", "zebra", "d'or", "café", "t", "1", "   ", "--", "thing 1 n00000001")


def test_a_typed_class_name_is_resolved_among_the_classes_holding_its_words(pool, monkeypatch):
    """The browser's filter by a typed name (``cls_name``) reads only the classes whose fields hold
    every word of the name (one query), never the index of all 19,167 (about 1 s to make), and
    answers as the whole index does: the same classes, the same ambiguity and the same message."""
    from curation.selectors import browse
    from pipelines.classes.search import Ambiguous, resolve_one

    source, classes, _ann, _model = pool
    other = Source.objects.create(name="other", root="/nonexistent")
    CandidateClass.objects.bulk_create([
        CandidateClass(source=source, folder="puzzles", wnid="n06785654", synset_name="crossword_puzzle.n.01",
                       lemmas=["crossword_puzzle", "crossword"], gloss="a puzzle game of words", mapping="wnid_folder"),
        CandidateClass(source=other, folder="n06785654", wnid="n06785654", synset_name="crossword_puzzle.n.01",
                       lemmas=["crossword_puzzle", "crossword"], gloss="a puzzle game of words", mapping="wnid_folder"),
        CandidateClass(source=other, folder="Tench-Fish", mapping="unmapped", description="a small striped fish"),
        CandidateClass(source=other, folder="café", mapping="unmapped", description="Bouton d'or"),
    ])

    def whole(name: str, src: str):
        try:
            return [e.ref.pk for e in resolve_one(name, browse._candidate_class_index(src), what="Class",
                                                  same=lambda e: e.wnid or f"{e.ref.source_id}/{e.ref.folder}")]
        except Ambiguous as exc:
            return str(exc)

    def narrowed(name: str, src: str):
        try:
            return browse.class_ids_for_name(name, source=src)
        except browse.BrowseError as exc:
            return str(exc)

    expected = {(name, src): whole(name, src) for src in ("", "other") for name in NAMES}
    sizes: list[int] = []
    real = browse._index_of
    monkeypatch.setattr(browse, "_index_of", lambda rows: sizes.append(len(rows)) or real(rows))
    for (name, src), answer in expected.items():
        assert narrowed(name, src) == answer, (name, src)
    sizes.clear()
    puzzles = CandidateClass.objects.get(folder="puzzles").pk
    with CaptureQueriesContext(connection) as ctx:
        assert browse.class_ids_for_name("crossword", source="pool") == [puzzles]
    assert len(ctx.captured_queries) == 1 and sizes == [1]  # one query, one class indexed of the 7
