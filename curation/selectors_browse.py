"""Reads of the image browser (docs/browse.md): its filters from a query string, a page of
images by cursor, the menus' choices, and everything known about one image."""
from __future__ import annotations

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


@dataclass
class BrowseFilters:
    source: str = ""
    cls: int | None = None  # candidate class id
    status: str = ""  # Image.Status
    label: str = ""  # a final decision, or open / conflict / unqueued
    top1: str = ""  # wnid
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

    def query(self, **changes) -> str:
        """The filters as a query string (for links that keep them)."""
        from urllib.parse import urlencode

        values = {**self.__dict__, **changes}
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


def browse_filters_from(query) -> BrowseFilters:
    """The browser's filters from a query string (a QueryDict or dict); unknown values are a
    BrowseError naming the parameter and what it takes."""
    from django.conf import settings

    from pipelines.names import InvalidName, check_name

    f = BrowseFilters()
    f.source = (query.get("source") or "").strip()
    if f.source:
        try:
            check_name(f.source, what="source")
        except InvalidName as exc:
            raise BrowseError(str(exc)) from None
    f.cls = _number(query, "cls", int, 1, 2**62)
    f.status = (query.get("status") or "").strip()
    if f.status and f.status not in Image.Status.values:
        raise BrowseError(f"status must be one of {', '.join(Image.Status.values)}, not {f.status[:40]!r}")
    f.label = (query.get("label") or "").strip()
    if f.label and f.label not in FINAL_LABELS:
        raise BrowseError(f"label must be one of {', '.join(FINAL_LABELS)}, not {f.label[:40]!r}")
    f.top1 = (query.get("top1") or "").strip()
    if f.top1 and not (len(f.top1) == 9 and f.top1[0] == "n" and f.top1[1:].isdigit()):
        raise BrowseError(f"top1 must be a wnid like n01440764, not {f.top1[:40]!r}")
    f.group = _number(query, "group", int, 1, 2**62)
    f.export = _number(query, "export", int, 1, 2**62)
    for name in ("dropped", "excluded"):
        value = (query.get(name) or "").strip()
        if value not in ("", "yes", "no"):
            raise BrowseError(f"{name} must be yes or no, not {value[:40]!r}")
        setattr(f, name, value)
    f.sim_min, f.sim_max = _number(query, "sim_min", float, -1, 1), _number(query, "sim_max", float, -1, 1)
    f.msp_min, f.msp_max = _number(query, "msp_min", float, 0, 1), _number(query, "msp_max", float, 0, 1)
    f.sort = (query.get("sort") or "id").strip()
    if f.sort not in BROWSE_SORTS:
        raise BrowseError(f"sort must be one of {', '.join(BROWSE_SORTS)}, not {f.sort[:40]!r}")
    f.model = (query.get("model") or "").strip() or settings.DEFAULT_MODEL
    if len(f.model) > 200:
        raise BrowseError("model is longer than 200 characters")
    return f


@dataclass
class BrowsePage:
    rows: list[dict]
    next_cursor: str | None
    count: int  # matching images, up to COUNT_CAP
    count_capped: bool
    sort_note: str = ""


COUNT_CAP = 1_000  # "1000+ matching": counting further costs more than the page itself at 1M images


def browse_queryset(f: BrowseFilters, *emb_conditions: Q):
    """The images matching ``f``. Conditions on the model's prediction row (``emb__...``, with
    ``emb_conditions``) go into one ``filter()`` so they share one join: Django joins a
    multi-valued relation again for each separate filter() call, which costs a join per
    condition and defeats the sorted index scan."""
    from django.db.models import FilteredRelation

    qs = Image.objects.annotate(emb=FilteredRelation("embeddings", condition=Q(embeddings__model_name=f.model)))
    where: list[Q] = []
    if f.source:
        where.append(Q(source__name=f.source))
    if f.cls is not None:
        where.append(Q(candidate_class_id=f.cls))
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
    where += emb_conditions
    return qs.filter(*where) if where else qs


def _cursor(value, image_id: int) -> str:
    return f"{'' if value is None else repr(float(value))}~{image_id}"


def _parse_cursor(cursor: str, numeric: bool) -> tuple[float | None, int]:
    try:
        value, image_id = cursor.split("~", 1)
        return (float(value) if numeric else None), row_id(image_id, "after")
    except ValueError:
        raise BrowseError(f"after={cursor[:40]!r} is not a page cursor of the browser: start again from the first page") from None


def image_browse(*, filters: BrowseFilters, after: str = "", page_size: int = 60) -> BrowsePage:
    """One page of images matching ``filters``, in the order asked, after the cursor ``after``
    (keyset pagination: each page costs the same however deep it is). Sorting by a prediction
    lists only the images that have that value."""
    field_name, desc = BROWSE_SORTS[filters.sort]
    note = ""
    sorted_by: list[Q] = []
    key = f"emb__{field_name}" if field_name else None
    if key is not None:
        sorted_by.append(Q(**{f"{key}__isnull": False}))
        note = "images without this value (no prediction, or not yet searched for duplicates) are not listed in this order"
        order = [F(key).desc(), F("id").desc()] if desc else [F(key).asc(), F("id").asc()]
    else:
        order = [F("id").desc()] if desc else [F("id").asc()]
    count_qs = browse_queryset(filters, *sorted_by)
    after_cursor: list[Q] = []
    if after:
        value, last = _parse_cursor(after, key is not None)
        if key is None:
            after_cursor.append(Q(id__lt=last) if desc else Q(id__gt=last))
        # (key, id) after the cursor; the plain bound on the key alone lets PostgreSQL start its
        # index scan at the cursor instead of filtering from the top (an OR gives it no range)
        elif desc:
            after_cursor += [Q(**{f"{key}__lte": value}), Q(**{f"{key}__lt": value}) | Q(**{key: value, "id__lt": last})]
        else:
            after_cursor += [Q(**{f"{key}__gte": value}), Q(**{f"{key}__gt": value}) | Q(**{key: value, "id__gt": last})]
    qs = browse_queryset(filters, *sorted_by, *after_cursor)
    fields = ["id", "source__name", "relative_path", "width", "height", "status", "excluded_reason", "candidate_class_id",
              "candidate_class__folder", "candidate_class__wnid", "candidate_class__synset_name",
              "emb__top1_wnid", "emb__top1_prob", "emb__max_softmax", "emb__nearest_id_similarity", "emb__dup_group",
              "emb__drop_reason", "review_item__status", "review_item__final_decision"]
    rows = list(qs.order_by(*order).values(*fields)[:page_size + 1])
    more = len(rows) > page_size
    rows = rows[:page_size]
    for r in rows:
        r["class_label"] = class_label(r["candidate_class__wnid"], r["candidate_class__synset_name"], r["candidate_class__folder"] or "")
    nxt = None
    if more and rows:
        last = rows[-1]
        nxt = _cursor(last[f"emb__{field_name}"] if field_name else None, last["id"])
    n = count_qs.order_by().values("id")[:COUNT_CAP + 1].count()  # COUNT over a LIMITed subquery: bounded cost
    return BrowsePage(rows=rows, next_cursor=nxt, count=min(n, COUNT_CAP), count_capped=n > COUNT_CAP, sort_note=note)


def browse_choices() -> dict:
    """What the browser's filter menus offer: sources, and the exports."""
    from curation.models import Export

    return {"sources": list(Source.objects.order_by("name").values_list("name", flat=True)),
            "exports": list(Export.objects.filter(status="done").order_by("-created_at").values("id", "name", "version")[:100]),
            "statuses": Image.Status.choices, "labels": FINAL_LABELS, "sorts": list(BROWSE_SORT_LABELS.items())}


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
    exports = list(ExportMember.objects.filter(image=image).select_related("export").order_by("-export__created_at"))
    overrides = list(DuplicateOverride.objects.filter(image=image).select_related("created_by"))
    history = list(AuditLog.objects.filter(target_type="curation.image", target_id=str(image.pk)).select_related("actor")
                   .order_by("-created_at")[:50])
    return {"image": image, "models": models, "item": item, "reviews": reviews, "exports": exports, "overrides": overrides,
            "history": history}
