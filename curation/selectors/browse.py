"""Reads of the image browser (docs/browse.md): its filters from a query string, a page of
images by cursor, the menus' choices, and everything known about one image."""
from __future__ import annotations

import re
from dataclasses import dataclass

from django.db.models import F, Q

from curation.models import Image, Source
from pipelines.names import class_label
from pipelines.numbers import row_id, whole_number


class BrowseError(ValueError):
    """A filter or cursor the browser cannot use; the message names it and says what it takes."""


# sort name -> (embedding field or None for the image id, descending)
BROWSE_SORTS = {
    "id": (None, False),
    "-id": (None, True),
    "-similarity": ("nearest_id_similarity", True),
    "similarity": ("nearest_id_similarity", False),
    "msp": ("max_softmax", False),
    "-msp": ("max_softmax", True),
}
BROWSE_SORT_LABELS = {
    "id": "oldest first", "-id": "newest first", "-similarity": "most similar to an ID image first",
    "similarity": "least similar to an ID image first", "msp": "lowest max softmax first", "-msp": "highest max softmax first",
}
FINAL_LABELS = ("ood", "id", "unclear", "not_target", "open", "conflict", "unqueued")


DECIDED_BY = {  # where a final decision came from (the menu says it short; docs/browse.md in full)
    "review": "reviews agreed",
    "adjudication": "adjudication",
    "curator": "curator's label",
    "certificate": "certificate",
}
PAGE_SIZES = (24, 48, 60, 96, 120, 240)
PAGE_MAX = 100_000  # a page number past this is refused: the jump reads its way to the page


@dataclass
class BrowseFilters:
    source: str = ""
    cls: int | None = None  # candidate class id
    cls_name: str = ""  # a typed class name that stands for several classes (the same wnid in several sources)
    cls_ids: tuple[int, ...] = ()  # ... and those classes
    status: str = ""  # Image.Status
    label: str = ""  # a final decision, or open / conflict / unqueued
    top1: str = ""  # wnid
    annotator: str = ""  # a username: images this annotator reviewed
    annotator_id: int | None = None  # ... that user's id
    note: str = ""  # "yes" / "no": a review or the final decision has a note
    decided: str = ""  # a key of DECIDED_BY
    group: int | None = None  # duplicate group (the image id it keeps)
    dropped: str = ""  # "yes": dropped by the duplicate search; "no": kept
    excluded: str = ""  # "yes" / "no": excluded by a curator
    export: int | None = None
    sim_min: float | None = None
    sim_max: float | None = None
    msp_min: float | None = None
    msp_max: float | None = None
    sort: str = "id"
    model: str = ""
    size: int | None = None  # thumbnails a page (None: the setting)

    def query(self, **changes) -> str:
        """The filters as a query string (for links that keep them)."""
        from urllib.parse import urlencode

        values = {**self.__dict__, **changes}
        values.pop("cls_ids", None)
        values.pop("annotator_id", None)
        if values.get("cls") is not None:
            values["cls_name"] = ""
        return urlencode({k: v for k, v in values.items() if v not in (None, "") and not (k == "sort" and v == "id")})


def _number(query, name: str, kind, lo=None, hi=None):
    raw = (query.get(name) or "").strip()
    if raw == "":
        return None
    try:
        value = whole_number(raw, name) if kind is int else kind(raw)  # the one integer rule: ASCII digits, 64 bits
    except ValueError:
        raise BrowseError(f"{name}={raw[:40]!r} is not a {'whole ' if kind is int else ''}number") from None
    if kind is float and value != value or value in (float("inf"), float("-inf")):
        raise BrowseError(f"{name} must be a finite number")
    if (lo is not None and value < lo) or (hi is not None and value > hi):
        raise BrowseError(f"{name}={raw[:40]} is outside {lo}..{hi}")
    return value


def _is_wnid(text: str) -> bool:
    return len(text) == 9 and text[0] == "n" and text[1:].isdigit() and text.isascii()


def browse_filters_from(query) -> BrowseFilters:
    """The browser's filters from a query string (a QueryDict or dict); unknown values are a
    BrowseError naming the parameter and what it takes. Class and top-1 may be given by name
    (``cls_name``, ``top1`` / ``top1_name``): the class search's rule finds them, and a name
    that stands for more than one class is a BrowseError listing them."""
    from django.conf import settings
    from django.contrib.auth.models import User

    from pipelines.names import InvalidName, check_name

    f = BrowseFilters()
    f.source = (query.get("source") or "").strip()
    if f.source:
        try:
            check_name(f.source, what="source")
        except InvalidName as exc:
            raise BrowseError(str(exc)) from None
    f.cls = _number(query, "cls", int, 1, 2**62)
    name = (query.get("cls_name") or "").strip()[:200]
    if f.cls is None and name:
        ids = class_ids_for_name(name, source=f.source)
        if len(ids) == 1:
            f.cls = ids[0]
        else:
            f.cls_name, f.cls_ids = name, tuple(ids)
    f.status = (query.get("status") or "").strip()
    if f.status and f.status not in Image.Status.values:
        raise BrowseError(f"status must be one of {', '.join(Image.Status.values)}, not {f.status[:40]!r}")
    f.label = (query.get("label") or "").strip()
    if f.label and f.label not in FINAL_LABELS:
        raise BrowseError(f"label must be one of {', '.join(FINAL_LABELS)}, not {f.label[:40]!r}")
    top1 = (query.get("top1") or "").strip()[:200]
    top1_name = (query.get("top1_name") or "").strip()[:200]
    if top1 and not _is_wnid(top1):
        top1, top1_name = "", top1  # a name written into top1: looked up as one
    f.top1 = top1 or (top1_wnid_for_name(top1_name) if top1_name else "")
    f.annotator = (query.get("annotator") or "").strip()[:150]
    if f.annotator:
        f.annotator_id = User.objects.filter(username=f.annotator).values_list("pk", flat=True).first() if f.annotator.isprintable() else None
        if f.annotator_id is None:
            raise BrowseError(f"annotator={f.annotator[:40]!r}: no such user (pick one from the list)")
    f.decided = (query.get("decided") or "").strip()
    if f.decided and f.decided not in DECIDED_BY:
        raise BrowseError(f"decided must be one of {', '.join(DECIDED_BY)}, not {f.decided[:40]!r}")
    f.group = _number(query, "group", int, 1, 2**62)
    f.export = _number(query, "export", int, 1, 2**62)
    for yes_no in ("dropped", "excluded", "note"):
        value = (query.get(yes_no) or "").strip()
        if value not in ("", "yes", "no"):
            raise BrowseError(f"{yes_no} must be yes or no, not {value[:40]!r}")
        setattr(f, yes_no, value)
    f.sim_min, f.sim_max = _number(query, "sim_min", float, -1, 1), _number(query, "sim_max", float, -1, 1)
    f.msp_min, f.msp_max = _number(query, "msp_min", float, 0, 1), _number(query, "msp_max", float, 0, 1)
    f.sort = (query.get("sort") or "id").strip()
    if f.sort not in BROWSE_SORTS:
        raise BrowseError(f"sort must be one of {', '.join(BROWSE_SORTS)}, not {f.sort[:40]!r}")
    f.model = (query.get("model") or "").strip() or settings.DEFAULT_MODEL
    if len(f.model) > 200:
        raise BrowseError("model is longer than 200 characters")
    f.size = _number(query, "size", int, 1, 500)
    if f.size == settings.BROWSE_PAGE_SIZE:
        f.size = None
    return f


@dataclass
class BrowsePage:
    rows: list[dict]
    next_cursor: str | None
    count: int  # matching images: exact up to COUNT_CAP, else the planner's estimate (``count_estimated``)
    count_capped: bool  # more than COUNT_CAP match, and no estimate says how many (SQLite)
    sort_note: str = ""
    number: int = 1  # which page this is (1 = the first)
    size: int = 60
    cursor: str = ""  # the cursor this page starts after ("" on the first page)
    past_end: bool = False  # a jump beyond the last page
    prev_cursor: str = ""  # the first row's cursor: the previous page ends before it ("" on the first page)
    count_estimated: bool = False  # ``count`` is PostgreSQL's estimate, shown as "about N"

    @property
    def last(self) -> int | None:
        """The last page's number, where the count is exact."""
        return None if self.count_capped or self.count_estimated else max(1, -(-self.count // self.size))

    def numbers(self, around: int = 2) -> list[int | None]:
        """Page numbers to link: the first, a few either side of this one, the last where known
        (None marks a gap)."""
        last = self.last
        top = last if last is not None else self.number + (1 if self.next_cursor else 0)  # as far as is known
        wanted = sorted({1, *range(max(1, self.number - around), min(top, self.number + around) + 1), *([last] if last else [])})
        out: list[int | None] = []
        for n in wanted:
            if out and n - (out[-1] or 0) > 1:
                out.append(None)
            out.append(n)
        return out


COUNT_CAP = 1_000  # counted exactly up to here; above it the planner's estimate ("about N"), or "1000+" without one


def estimated_count(queryset) -> int | None:
    """The number of rows ``queryset`` holds as PostgreSQL's planner estimates it (EXPLAIN; the
    table's statistics, no rows read), or None where that is not to be had (SQLite). COUNT(*)
    over a filter of 13 million images reads every matching row (seconds); the estimate reads
    the statistics (milliseconds). The admin's change lists and the image browser share it."""
    import json

    from django.db import connections

    conn = connections[queryset.db]
    if conn.vendor != "postgresql":
        return None
    sql, params = queryset.order_by().values("pk").query.sql_with_params()
    with conn.cursor() as cur:
        cur.execute(f"EXPLAIN (FORMAT JSON) {sql}", params)
        plan = cur.fetchone()[0]
    plan = json.loads(plan) if isinstance(plan, str) else plan
    return int(plan[0]["Plan"]["Plan Rows"])


def browse_queryset(f: BrowseFilters, *emb_conditions: Q):
    """The images matching ``f``. Conditions on the model's prediction row (``emb__...``, with
    ``emb_conditions``) go into one ``filter()`` so they share one join: Django joins a
    multi-valued relation again for each separate filter() call, which costs a join per
    condition and defeats the sorted index scan."""
    from django.db.models import BigIntegerField, Exists, FilteredRelation, Max, OuterRef
    from django.db.models.functions import Cast

    from curation.models import AuditLog, CertificationPlan, CertificationUnit, Review, ReviewItem

    qs = Image.objects.annotate(emb=FilteredRelation("embeddings", condition=Q(embeddings__model_name=f.model)))
    where: list[Q] = []
    if f.source:
        where.append(Q(source__name=f.source))
    if f.cls is not None:
        where.append(Q(candidate_class_id=f.cls))
    elif f.cls_ids:
        where.append(Q(candidate_class_id__in=list(f.cls_ids)))
    if f.status:
        where.append(Q(status=f.status))
    if f.label in ("ood", "id", "unclear", "not_target"):
        where.append(Q(review_item__status__in=["complete", "adjudicated"], review_item__final_decision=f.label))
    elif f.label in ("open", "conflict"):
        where.append(Q(review_item__status=f.label))
    elif f.label == "unqueued":
        where.append(Q(review_item__isnull=True) | Q(review_item__status="withdrawn"))
    if f.excluded == "yes":
        where.append(Q(excluded_reason__gt=""))
    elif f.excluded == "no":
        where.append(Q(excluded_reason=""))
    if f.export is not None:
        where.append(Q(export_memberships__export_id=f.export))
    # the review-side filters are driven from the reviews and items they name (an index each), not
    # by an EXISTS per image of the pool scanned until a page of them matches: reviews with a note
    # are 0.02% of a pool's images, so that scan read 5,000 images per match (5 s at 13.2M; issue 45)
    if f.annotator:
        # by the user's id: each image's review is then one probe of the (item, annotator) unique index
        where.append(Q(pk__in=Review.objects.filter(annotator_id=f.annotator_id).values("item__image_id")))
    if f.note:  # an annotator's note on a review, or the note of the final decision (adjudication, a curator's label)
        if f.note == "yes":
            # the partial indexes review_with_note and review_item_final_note (migration 0034)
            where.append(Q(pk__in=Review.objects.filter(~Q(note="")).values("item__image_id"))
                         | Q(pk__in=ReviewItem.objects.filter(~Q(final_note="")).values("image_id")))
        else:  # most images: the page is found among the first few read
            review_note = Exists(Review.objects.filter(item__image=OuterRef("pk"), note__gt=""))
            where.append(~review_note & (Q(review_item__isnull=True) | Q(review_item__final_note="")))
    if f.decided == "review":
        where.append(Q(review_item__status="complete"))
    elif f.decided in ("adjudication", "curator"):
        # a curator's label from the browser is audited as an adjudication "via" the browser; the
        # latest adjudication of an item says which it was. One pass over the adjudications'
        # entries (the newest entry per item: the highest id, as entries are only appended), not a
        # look-up per image; GROUP BY rather than DISTINCT ON, which SQLite (the demo's database) lacks
        latest = (AuditLog.objects.filter(action="review_adjudicated", target_type="curation.reviewitem")
                  .order_by().values("target_id").annotate(newest=Max("id")).values("newest"))
        by_curator = (AuditLog.objects.filter(id__in=latest, data__via__isnull=False)
                      .annotate(item_id=Cast("target_id", BigIntegerField())).values("item_id"))
        # driven from the adjudicated items (the partial index review_item_adjudicated, migration
        # 0034), not by a look-up of each image's item until a page of them is found
        adjudicated = ReviewItem.objects.filter(status="adjudicated")
        adjudicated = adjudicated.filter(id__in=by_curator) if f.decided == "curator" else adjudicated.exclude(id__in=by_curator)
        where.append(Q(pk__in=adjudicated.values("image_id")))
    elif f.decided == "certificate":
        certified = CertificationUnit.objects.filter(item=OuterRef("review_item"), plan__status=CertificationPlan.Status.CERTIFIED)
        where.append(Q(review_item__status="open") & Exists(certified))
    where += _prediction_conditions(f)
    where += emb_conditions
    return qs.filter(*where) if where else qs


def _prediction_conditions(f: BrowseFilters) -> list[Q]:
    """The filters on the model's prediction row, each a Q of one ``emb__`` lookup."""
    where: list[Q] = []
    if f.top1:
        where.append(Q(emb__top1_wnid=f.top1))
    if f.group is not None:
        where.append(Q(emb__dup_group=f.group))
    if f.dropped == "yes":
        where.append(Q(emb__drop_reason__gt=""))
    elif f.dropped == "no":
        where.append(Q(emb__drop_reason=""))
    for name, lookup in (("sim_min", "emb__nearest_id_similarity__gte"), ("sim_max", "emb__nearest_id_similarity__lte"),
                         ("msp_min", "emb__max_softmax__gte"), ("msp_max", "emb__max_softmax__lte")):
        if getattr(f, name) is not None:
            where.append(Q(**{lookup: getattr(f, name)}))
    return where


def _only_prediction_filters(f: BrowseFilters) -> bool:
    """Whether every filter in ``f`` is on the prediction row (each prediction is of one image,
    so the predictions alone list the same images in the same order)."""
    return not (f.source or f.cls is not None or f.cls_ids or f.status or f.label or f.excluded or f.export is not None
                or f.annotator or f.note or f.decided)


def _cursor(value, image_id: int) -> str:
    return f"{'' if value is None else repr(float(value))}~{image_id}"


def _parse_cursor(cursor: str, numeric: bool) -> tuple[float | None, int]:
    try:
        value, image_id = cursor.split("~", 1)
        return (float(value) if numeric else None), row_id(image_id, "after")
    except ValueError:
        raise BrowseError(f"after={cursor[:40]!r} is not a page cursor of the browser: start again from the first page") from None


def _ordered(filters: BrowseFilters, *, after: tuple[float | None, int] | None = None, backwards: bool = False):
    """(queryset in the browser's order, or the reverse, after the (value, id) cursor; the
    embedding field sorted by, or None; the count's queryset; the note on sorting)."""
    field_name, desc = BROWSE_SORTS[filters.sort]
    if backwards:
        desc = not desc
    note = ""
    sorted_by: list[Q] = []
    key = f"emb__{field_name}" if field_name else None
    if key is not None:
        sorted_by.append(Q(**{f"{key}__isnull": False}))
        note = "images without this value (no prediction, or not yet searched for duplicates) are not listed in this order"
        order = [F(key).desc(), F("id").desc()] if desc else [F(key).asc(), F("id").asc()]
    else:
        order = [F("id").desc()] if desc else [F("id").asc()]
    after_cursor: list[Q] = []
    if after is not None:
        value, last = after
        if key is None:
            after_cursor.append(Q(id__lt=last) if desc else Q(id__gt=last))
        # (key, id) after the cursor; the plain bound on the key alone lets PostgreSQL start its
        # index scan at the cursor instead of filtering from the top (an OR gives it no range)
        elif desc:
            after_cursor += [Q(**{f"{key}__lte": value}), Q(**{f"{key}__lt": value}) | Q(**{key: value, "id__lt": last})]
        else:
            after_cursor += [Q(**{f"{key}__gte": value}), Q(**{f"{key}__gt": value}) | Q(**{key: value, "id__gt": last})]
    qs = browse_queryset(filters, *sorted_by, *after_cursor).order_by(*order)
    return qs, field_name, browse_queryset(filters, *sorted_by), note


ROW_FIELDS = ["id", "source__name", "relative_path", "width", "height", "status", "error_code", "error", "duplicate_of_id",
              "excluded_reason", "candidate_class_id", "candidate_class__folder", "candidate_class__wnid",
              "candidate_class__synset_name"]
# a page's prediction and review state are read for its rows alone, by their image ids: LEFT JOINs
# of the predictions and the queue in the page's query become, deep in the list, merge joins that
# read either table from its first row up to the page (page 10000 of a 1M pool: 0.7-0.8 s each,
# the first 600,000 predictions; issue 45)
EMB_FIELDS = ("top1_wnid", "top1_prob", "max_softmax", "nearest_id_similarity", "dup_group", "drop_reason")


def _row_fields(field_name: str | None) -> list[str]:
    return ROW_FIELDS + ([f"emb__{field_name}"] if field_name else [])  # the sort key: the cursor is made of it


def _with_prediction_and_review(rows: list[dict], model: str) -> None:
    """Each row's prediction under ``model`` (``emb__...``) and its review item's status and final
    decision (``review_item__...``; None where there is none): two queries over the page's ids."""
    from curation.models import ImageEmbedding, ReviewItem

    ids = [r["id"] for r in rows]
    state = {image_id: (status, decision) for image_id, status, decision in
             ReviewItem.objects.filter(image_id__in=ids).values_list("image_id", "status", "final_decision")}
    emb = {e["image_id"]: e for e in ImageEmbedding.objects.filter(image_id__in=ids, model_name=model).values("image_id", *EMB_FIELDS)}
    for r in rows:
        r["review_item__status"], r["review_item__final_decision"] = state.get(r["id"], (None, None))
        e = emb.get(r["id"], {})
        for name in EMB_FIELDS:
            r[f"emb__{name}"] = e.get(name)


def _seek(filters: BrowseFilters, number: int, size: int) -> str | None:
    """The cursor page ``number`` starts after: the last row of the page before, read by its
    position (OFFSET over the sorted index, key and id only); None past the end."""
    at = (number - 1) * size
    field_name, desc = BROWSE_SORTS[filters.sort]
    if field_name is not None and _only_prediction_filters(filters):
        # sorted by a prediction with no filter on the image: the predictions' own sorted index
        # (model, value, image), read alone. Through the images, each row skipped was a look-up of
        # its image (page 1000 sorted by similarity, 1M images: 0.46 s)
        from curation.models import ImageEmbedding

        order = [F(field_name).desc(), F("image_id").desc()] if desc else [F(field_name).asc(), F("image_id").asc()]
        conditions = [Q(**{name.removeprefix("emb__"): v for name, v in c.children}) if isinstance(c, Q) else c
                      for c in _prediction_conditions(filters)]
        got = list(ImageEmbedding.objects.filter(*conditions, model_name=filters.model, **{f"{field_name}__isnull": False})
                   .order_by(*order).values_list(field_name, "image_id")[at - 1:at])
    else:
        qs, field_name, _count, _note = _ordered(filters)
        key = f"emb__{field_name}" if field_name else "id"
        got = list(qs.values_list(key, "id")[at - 1:at])
    if not got:
        return None
    return _cursor(got[0][0] if field_name else None, got[0][1])


def image_browse(*, filters: BrowseFilters, after: str = "", before: str = "", page_size: int = 60, page: int = 1) -> BrowsePage:
    """One page of images matching ``filters``, in the order asked, after the cursor ``after``
    (keyset pagination: each page costs the same however deep it is), or the page that ends
    just before the cursor ``before`` (the previous page, read backwards by the same index).
    ``page`` is the page's number: with a cursor it only labels the page; without one, page N
    is found by reading past the (N-1) pages before it, once, and the links from there are
    cursors again. Sorting by a prediction lists only the images that have that value."""
    if not 1 <= page <= PAGE_MAX:
        raise BrowseError(f"page={page} is outside 1..{PAGE_MAX}")
    past_end = False
    if not after and not before and page > 1:
        sought = _seek(filters, page, page_size)
        if sought is None:
            past_end = True
        else:
            after = sought
    field_name = BROWSE_SORTS[filters.sort][0]
    numeric = field_name is not None
    if before:
        # backwards from the cursor: this page's rows and, one further, the row the page starts after
        qs, field_name, count_qs, note = _ordered(filters, after=_parse_cursor(before, numeric), backwards=True)
        back = list(qs.values(*_row_fields(field_name))[:page_size + 1])
        rows = list(reversed(back[:page_size]))
        more = True  # the cursor's own row follows
        if len(back) > page_size:
            start = back[page_size]
            after = _cursor(start[f"emb__{field_name}"] if field_name else None, start["id"])
        else:
            after, page = "", 1  # nothing before it: the first page
    else:
        cursor = _parse_cursor(after, numeric) if after else None
        qs, field_name, count_qs, note = _ordered(filters, after=cursor)
        rows = [] if past_end else list(qs.values(*_row_fields(field_name))[:page_size + 1])
        more = len(rows) > page_size
        rows = rows[:page_size]
    _with_prediction_and_review(rows, filters.model)
    for r in rows:
        r["class_label"] = class_label(r["candidate_class__wnid"], r["candidate_class__synset_name"], r["candidate_class__folder"] or "")
        r["readable"] = r["status"] == Image.Status.OK
        r["selectable"] = r["readable"] or bool(r["excluded_reason"])  # what the selection's actions can apply to
        marker = f"{r['relative_path']}: "  # ingest's message names the file's absolute path first; the tile shows the rest
        r["reason"] = r["error"].split(marker, 1)[1] if marker in r["error"] else r["error"]

    def cursor_of(row) -> str:
        return _cursor(row[f"emb__{field_name}"] if field_name else None, row["id"])

    n, capped, estimated = _match_count(count_qs, rows=len(rows), whole=not after and not before and not more and not past_end)
    return BrowsePage(rows=rows, next_cursor=cursor_of(rows[-1]) if more and rows else None, count=n,
                      count_capped=capped, count_estimated=estimated, sort_note=note, number=page, size=page_size, cursor=after,
                      past_end=past_end, prev_cursor=cursor_of(rows[0]) if rows and after else "")


def _match_count(count_qs, *, rows: int, whole: bool) -> tuple[int, bool, bool]:
    """(how many images match, more than COUNT_CAP and unknown how many, the number is an
    estimate). A first page that holds every match is its own count. Otherwise, where the
    planner expects more than COUNT_CAP matches its estimate stands, said to be one ("about N"):
    even a count capped at 1,001 rows reads, for a rare filter over 13M images, as many rows
    as it takes to find them (an image with a note: 0.5 s at 1M). At or below, and on SQLite,
    the matches are counted up to COUNT_CAP + 1 (a COUNT over a LIMITed subquery)."""
    if whole:
        return rows, False, False
    guess = estimated_count(count_qs)
    if guess is not None and guess > COUNT_CAP:
        return guess, False, True
    n = count_qs.order_by().values("id")[:COUNT_CAP + 1].count()
    return min(n, COUNT_CAP), n > COUNT_CAP, False


def browse_neighbours(*, filters: BrowseFilters, image_id: int) -> tuple[int | None, int | None]:
    """The images before and after ``image_id`` in the browser's order under ``filters`` (the
    image page's previous / next); (None, None) where the image has no place in that order (no
    value for the sort)."""
    field_name = BROWSE_SORTS[filters.sort][0]
    value = None
    if field_name is not None:
        from curation.models import ImageEmbedding

        value = ImageEmbedding.objects.filter(image_id=image_id, model_name=filters.model).values_list(field_name, flat=True).first()
        if value is None:
            return None, None
    nxt = _ordered(filters, after=(value, image_id))[0].values_list("id", flat=True).first()
    prev = _ordered(filters, after=(value, image_id), backwards=True)[0].values_list("id", flat=True).first()
    return prev, nxt


# -- class search for the filters (pipelines/classes/search.py) --------------------------------------

@dataclass(frozen=True)
class _ClassRef:
    """What the class search hands back: the class's id, source and names (the index of a pool's
    20,000 classes is built from plain rows rather than model instances, and kept per process
    while the classes stay the same: issue 45)."""

    pk: int
    source_id: int
    source_name: str
    folder: str
    label: str

    @property
    def source(self):
        from types import SimpleNamespace

        return SimpleNamespace(pk=self.source_id, name=self.source_name)


def _class_rows(source: str, words: list[str] | None = None) -> list[tuple]:
    """The plain rows the class search's index is made of, in its order (source, folder); with
    ``words``, only the classes whose fields hold every one of them (any case)."""
    from django.db.models import TextField, Value
    from django.db.models.functions import Cast, Concat

    from curation.models import CandidateClass

    rows = CandidateClass.objects.order_by("source__name", "folder")
    if source:
        rows = rows.filter(source__name=source)
    if words:
        fields = [F("folder"), F("wnid"), F("synset_name"), Cast("lemmas", TextField()), F("gloss"), F("description")]
        spaced = [part for field in fields for part in (field, Value(" "))]
        rows = rows.annotate(search_text=Concat(*spaced, output_field=TextField()))
        for word in words:
            rows = rows.filter(search_text__icontains=word)
    return list(rows.values_list("pk", "source_id", "source__name", "folder", "wnid", "synset_name", "lemmas", "gloss", "description"))


_ASCII_WORD = re.compile(r"[a-z0-9]+")


def _class_index_for_name(name: str, source: str):
    """The index a typed class name is resolved against: the classes whose fields hold every
    run of ASCII letters and digits of the folded name, read by one query. Whatever the search
    can match holds its folded query within a name, lemma, gloss or wnid, so it holds each such
    run, as written in the row (folding only lowers the case and merges spaces, underscores and
    hyphens): the classes left out cannot match, and the answer is the whole index's. A name
    without such a run is resolved against the whole index (kept per process). 19,167 classes'
    index took about 1 s to make; this one holds the few that share the name's words."""
    from pipelines.classes.search import fold

    words = _ASCII_WORD.findall(fold(name))
    return _index_of(_class_rows(source, words)) if words else cached_class_index(source)


def _candidate_class_index(source: str = ""):
    """The class search's index of ``source``'s classes, made now (one query's plain rows)."""
    return _index_of(_class_rows(source))


def _index_of(rows: list[tuple]):
    from pipelines.classes.search import ClassIndex, SearchEntry
    from pipelines.names import class_label

    entries = []
    for pk, source_id, source_name, folder, wnid, synset_name, raw, gloss, description in rows:
        lemmas = [x.replace("_", " ") for x in raw or []]  # as WordNet spells them ("crossword_puzzle")
        name = ((lemmas or [""])[0] or (synset_name.rsplit(".", 2)[0].replace("_", " ") if synset_name else "")) if wnid else folder
        ref = _ClassRef(pk, source_id, source_name, folder, class_label(wnid, (raw or [""])[0] or synset_name, folder))
        entries.append(SearchEntry(name or folder, (*lemmas, folder), gloss or description, wnid, ref))
    return ClassIndex(entries)


# the class search's index per source ("" for every source): (the classes' signature, the index).
# Built once per process and kept while the classes are what they were: 19,167 classes' index took
# 0.9 s to build per request (issue 45); a class mapped or described in any process changes the
# signature, and the next search builds it again.
_CLASS_INDEXES: dict[str, tuple[str, object]] = {}

_CLASS_SIGNATURE_SQL = (
    "SELECT count(*), md5(string_agg(concat_ws(chr(31), c.id, c.source_id, s.name, c.folder, c.wnid, c.synset_name, "
    "c.lemmas::text, c.gloss, c.description), chr(30) ORDER BY c.id)) "
    "FROM curation_candidateclass c JOIN curation_source s ON s.id = c.source_id")


def class_index_signature() -> str | None:
    """A digest of everything the class search's index is made of (each class's id, source name,
    folder, wnid, names, gloss and description), computed by PostgreSQL in one query (tens of
    milliseconds for 20,000 classes, no rows sent); None on SQLite, which has no digest function:
    there the index is keyed by a digest of the rows it is built from."""
    from django.db import connection

    if connection.vendor != "postgresql":
        return None
    with connection.cursor() as cur:
        cur.execute(_CLASS_SIGNATURE_SQL)
        n, digest = cur.fetchone()
    return f"{n}:{digest}"


def cached_class_index(source: str = ""):
    """The class search's index of ``source``'s classes (every source's for ""), made once per
    process and made again when any class changed (``class_index_signature``)."""
    import hashlib

    signature = class_index_signature()
    kept = _CLASS_INDEXES.get(source)
    if signature is not None and kept is not None and kept[0] == signature:
        return kept[1]
    if signature is None:  # SQLite: the rows are read; only making the index again is saved
        rows = _class_rows(source)
        signature = "rows:" + hashlib.sha1(repr(rows).encode()).hexdigest()
        if kept is not None and kept[0] == signature:
            return kept[1]
        index = _index_of(rows)
    else:
        index = _candidate_class_index(source)
    _CLASS_INDEXES[source] = (signature, index)
    return index


def class_ids_for_name(name: str, *, source: str = "") -> list[int]:
    """The candidate classes a typed name stands for (``resolve_one``: one class, or the classes
    of one wnid in several sources); BrowseError otherwise."""
    from pipelines.classes.search import Ambiguous, resolve_one

    try:
        found = resolve_one(name, _class_index_for_name(name, source), what="Class",
                            same=lambda e: e.wnid or f"{e.ref.source_id}/{e.ref.folder}")
    except Ambiguous as exc:
        raise BrowseError(str(exc)) from None
    return [e.ref.pk for e in found]


def _top1_index():
    from pipelines.classes.imagenet import ClassListError
    from pipelines.classes.search import imagenet_1k_index

    try:
        return imagenet_1k_index()
    except ClassListError as exc:
        raise BrowseError(f"the top-1 classes cannot be searched: {exc}") from None


def top1_wnid_for_name(name: str) -> str:
    from pipelines.classes.search import Ambiguous, resolve_one

    try:
        return resolve_one(name, _top1_index(), what="Top-1 class")[0].wnid
    except Ambiguous as exc:
        raise BrowseError(str(exc)) from None


def top1_label(wnid: str) -> str:
    """A top-1 wnid's name, as the search lists it ("crossword puzzle")."""
    if not wnid:
        return ""
    try:
        index = _top1_index()
    except BrowseError:
        return wnid
    return next((e.name for e in index.entries if e.wnid == wnid), wnid)


def class_search(*, kind: str, q: str, source: str = "", limit: int = 12) -> list[dict]:
    """The browser's type-ahead: candidate classes (``kind="class"``, of one source if given) or
    the ImageNet-1K classes a model predicts (``kind="top1"``), ranked by the class search's rule."""
    if source:
        from pipelines.names import InvalidName, check_name

        try:
            check_name(source, what="source")
        except InvalidName as exc:
            raise BrowseError(str(exc)) from None
    if kind == "class":
        hits = cached_class_index(source).search(q, limit=limit)
        return [{"id": h.entry.ref.pk, "name": h.entry.name, "lemmas": list(h.entry.lemmas[:-1]), "gloss": h.entry.gloss,
                 "wnid": h.entry.wnid, "label": h.entry.ref.label, "source": h.entry.ref.source.name, "folder": h.entry.ref.folder,
                 "tier": h.tier} for h in hits]
    if kind == "top1":
        return [{"wnid": h.entry.wnid, "name": h.entry.name, "lemmas": list(h.entry.lemmas), "gloss": h.entry.gloss, "tier": h.tier}
                for h in _top1_index().search(q, limit=limit)]
    raise BrowseError(f"kind must be class or top1, not {kind[:40]!r}")


def browse_choices() -> dict:
    """What the browser's filter menus offer: sources, exports, the annotators who reviewed,
    where decisions came from, page sizes."""
    from django.conf import settings
    from django.contrib.auth.models import User
    from django.db.models import Exists, OuterRef

    from curation.models import Export, Review

    # the users who reviewed, each found by one probe of the (annotator, created_at) index, not a
    # DISTINCT over every review of the pool (1.8M at 13.2M images)
    annotators = list(User.objects.filter(Exists(Review.objects.filter(annotator=OuterRef("pk")))).values_list("username", flat=True))
    return {"sources": list(Source.objects.order_by("name").values_list("name", flat=True)),
            "exports": list(Export.objects.filter(status="done").order_by("-created_at").values("id", "name", "version")[:100]),
            "statuses": Image.Status.choices, "labels": FINAL_LABELS, "sorts": list(BROWSE_SORT_LABELS.items()),
            "annotators": sorted(annotators, key=str.lower), "decided_by": list(DECIDED_BY.items()),
            "page_sizes": sorted({*PAGE_SIZES, settings.BROWSE_PAGE_SIZE})}


def image_detail(*, image_id: int) -> dict | None:
    """Everything known about one image: file and provenance, each model's top-5 and scores,
    its duplicate group, its reviews and final label, the exports that carry it, and what
    was done to it (the audit log)."""
    from curation.models import AuditLog, DuplicateOverride, ExportMember, ImageEmbedding, ReviewItem, SynsetText

    image = Image.objects.select_related("source", "candidate_class", "duplicate_of").filter(pk=image_id).first()
    if image is None:
        return None
    embs = list(ImageEmbedding.objects.filter(image=image).select_related("nearest_id_image__source").order_by("model_name"))
    wnids = {w for e in embs for w, _p in e.topk}
    texts = {t.wnid: t.label for t in SynsetText.objects.filter(wnid__in=wnids)}
    models = []
    for e in embs:
        members = []
        if e.search_group is not None:
            members = list(ImageEmbedding.objects.filter(model_name=e.model_name, search_group=e.search_group)
                           .exclude(image_id=image.pk).order_by("image_id").values_list("image_id", flat=True)[:12])
        models.append({"e": e, "top5": [{"wnid": w, "label": texts.get(w, w), "prob": p} for w, p in e.topk], "group_members": members})
    item = ReviewItem.objects.filter(image=image).select_related("decided_by").first()
    reviews = list(item.reviews.select_related("annotator").order_by("created_at")) if item else []
    # the ID classes named by the final label and the reviews, by name and wnid (pipelines.names.class_label)
    named = set(item.final_wnids if item else []) | {w for r in reviews for w in r.id_wnids}
    names = dict(SynsetText.objects.filter(wnid__in=named).values_list("wnid", "label"))
    for r in reviews:
        r.id_classes = [class_label(w, names.get(w, "")) for w in r.id_wnids]
    final_classes = [class_label(w, names.get(w, "")) for w in (item.final_wnids if item else [])]
    exports = list(ExportMember.objects.filter(image=image).select_related("export").order_by("-export__created_at"))
    overrides = list(DuplicateOverride.objects.filter(image=image).select_related("created_by"))
    history = list(AuditLog.objects.filter(target_type="curation.image", target_id=str(image.pk)).select_related("actor")
                   .order_by("-created_at")[:50])
    return {"image": image, "models": models, "item": item, "reviews": reviews, "final_classes": final_classes, "exports": exports,
            "overrides": overrides, "history": history}


_NOUN_INDEX: dict[str, object] = {}


def noun_search(q: str, *, limit: int = 12) -> list[dict]:
    """WordNet nouns for mapping a class folder, ranked by the class search's rule (the index is
    made once per process and WordNet copy). Raises WordNetUnavailable without WordNet."""
    from django.conf import settings

    from pipelines.classes.search import ClassIndex, SearchEntry
    from pipelines.classes.wordnet_graph import load_noun_graph

    graph = load_noun_graph(settings.NLTK_DATA, build=False)
    index = _NOUN_INDEX.get(graph.source_sha1)
    if not isinstance(index, ClassIndex):
        index = ClassIndex(SearchEntry(graph.label(i), tuple(x.replace("_", " ") for x in graph.lemmas[i]), graph.glosses[i],
                                       graph.wnid(i), i) for i in range(len(graph.names)))
        _NOUN_INDEX.clear()
        _NOUN_INDEX[graph.source_sha1] = index
    return [{"wnid": h.entry.wnid, "name": graph.names[h.entry.ref], "label": h.entry.name, "lemmas": list(h.entry.lemmas),
             "gloss": h.entry.gloss, "tier": h.tier} for h in index.search(q, limit=limit)]
