"""Looking at the data (docs/browse.md): the image browser, an image's page, duplicate groups
with a curator's corrections, and the WordNet noun search used to map class folders. Curators
and researchers read; only curators act. Views stay thin: selectors read, services act."""
from __future__ import annotations

from django.conf import settings
from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpResponseBadRequest, JsonResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme, urlencode
from django.views.decorators.http import require_GET, require_POST

from curation import selectors
from curation.models import CandidateClass, ReviewDecision, Source
from curation.roles import CURATOR, RESEARCHER
from curation.selectors.browse import (
    PAGE_MAX,
    PAGE_SIZES,
    BrowseError,
    BrowseFilters,
    browse_choices,
    browse_filters_from,
    browse_neighbours,
    class_search,
    image_browse,
    noun_search,
    top1_label,
)
from curation.selectors.duplicates import (
    DuplicateListError,
    duplicate_group_counts,
    duplicate_group_decided,
    duplicate_group_list,
    duplicate_group_neighbours,
)
from curation.services.browse import ActionReport, BrowseActionError, images_exclude, images_include, images_label, images_requeue
from curation.services.duplicates import DuplicateError, duplicate_group, duplicate_override_clear, duplicate_override_set
from curation.services.similar import SimilarError, images_to_front
from labeling_ui.http import object_id
from labeling_ui.review_views import request_roles, role_required
from pipelines.numbers import whole_number


def _back(request, fallback: str) -> str:
    """Where to go after an action: the page it came from, if it is one of ours."""
    nxt = request.POST.get("next", "")
    if nxt and url_has_allowed_host_and_scheme(nxt, allowed_hosts={request.get_host()}, require_https=request.is_secure()) \
            and nxt.startswith("/"):
        return nxt
    return fallback


# The choices of the browser's and the duplicate page's forms. A value outside them is no form of
# ours: 400 with the choices, nothing changed (issue 47), rather than a message after a redirect.
IMAGE_ACTIONS = ("exclude", "include", "requeue", "front", "label", "admin")
LABEL_DECISIONS = tuple(d for d in ReviewDecision.values if d != ReviewDecision.SKIP)
DUPLICATE_ACTIONS = ("clear", "confirm", "not_duplicate", "keep")


def _not_a_choice(name: str, value: str, choices) -> HttpResponseBadRequest:
    return HttpResponseBadRequest(f"{name}={value[:40]!r} is not one of {', '.join(choices)}; nothing was changed\n",
                                  content_type="text/plain; charset=utf-8")


def _ids(request) -> list[int]:
    try:
        return [object_id(raw, "ids") for raw in request.POST.getlist("ids")]
    except ValueError as exc:
        raise BrowseActionError(str(exc)) from None


def _page_number(request) -> int:
    raw = request.GET.get("page", "")
    if not raw:
        return 1
    try:
        return whole_number(raw, "page", lo=1, hi=PAGE_MAX)
    except ValueError:
        raise BrowseError(f"page={raw[:40]!r} is not a page number") from None


def _images_url(query: str) -> str:
    return f"{reverse('labeling_ui:images')}?{query}" if query else reverse("labeling_ui:images")


@require_GET
@role_required(CURATOR, RESEARCHER)
def images(request):
    try:
        filters = browse_filters_from(request.GET)
        size = filters.size or settings.BROWSE_PAGE_SIZE
        page = image_browse(filters=filters, after=request.GET.get("after", "")[:200], before=request.GET.get("before", "")[:200],
                            page_size=size, page=_page_number(request))
    except BrowseError as exc:
        return render(request, "labeling_ui/browse.html", {"error": str(exc), "f": BrowseFilters(), **browse_choices(),
                                                           "size": settings.BROWSE_PAGE_SIZE, "typed": {
                                                               "cls_name": request.GET.get("cls_name", "")[:200],
                                                               "top1_name": (request.GET.get("top1_name") or request.GET.get("top1", ""))[:200]}},
                      status=400)
    cls = CandidateClass.objects.filter(pk=filters.cls).select_related("source").first() if filters.cls else None
    # a tile's link carries the filters and this page's place, so the image page can step through
    # the same list and come back to this page
    here_query = filters.query(after=page.cursor or None, page=page.number if page.number > 1 else None)
    next_url = _images_url(filters.query(after=page.next_cursor, page=page.number + 1)) if page.next_cursor else ""
    # previous: backwards by cursor from this page's first row (as cheap as next); by number
    # where this page has no rows (a jump past the end)
    prev_url = (_images_url(filters.query(before=page.prev_cursor, page=page.number - 1)) if page.prev_cursor
                else _images_url(filters.query(page=page.number - 1 if page.number > 2 else None)) if page.number > 1 else "")
    # the pages either side go by cursor too; the others are found by number (read up to them once)
    near = {page.number - 1: prev_url, page.number + 1: next_url}
    numbers = [(n, (near.get(n) or _images_url(filters.query(page=n if n > 1 else None))) if n else "") for n in page.numbers()]
    return render(request, "labeling_ui/browse.html", {
        "f": filters, "page": page, "cls": cls, "can_act": CURATOR in request_roles(request), **browse_choices(),
        "size": size, "page_sizes": sorted({*PAGE_SIZES, settings.BROWSE_PAGE_SIZE, size}), "top1_name": top1_label(filters.top1),
        "next_url": next_url, "prev_url": prev_url,
        "numbers": numbers, "tile_query": here_query, "jump_fields": _hidden_fields(filters),
        "here": request.get_full_path()})


def _hidden_fields(filters: BrowseFilters) -> list[tuple[str, str]]:
    """The filters as hidden fields of the jump-to-page form."""
    from urllib.parse import parse_qsl

    return parse_qsl(filters.query())


@require_POST
@role_required(CURATOR)
def images_action(request):
    action = request.POST.get("action", "")
    if action not in IMAGE_ACTIONS:
        return _not_a_choice("action", action, IMAGE_ACTIONS)
    if action == "label" and request.POST.get("decision", "") not in LABEL_DECISIONS:
        return _not_a_choice("decision", request.POST.get("decision", ""), LABEL_DECISIONS)
    back = _back(request, reverse("labeling_ui:images"))
    try:
        ids = _ids(request)
        if action == "exclude":
            report = images_exclude(image_ids=ids, reason=request.POST.get("reason", ""), user=request.user)
        elif action == "include":
            report = images_include(image_ids=ids, user=request.user)
        elif action == "requeue":
            report = images_requeue(image_ids=ids, user=request.user)
        elif action == "front":
            moved, skipped = images_to_front(image_ids=ids, user=request.user)
            report = ActionReport("sent to the front of the review queue", moved, skipped)
        elif action == "label":
            report = images_label(image_ids=ids, decision=request.POST.get("decision", ""),
                                  wnids=request.POST.get("wnids", "").replace(",", " ").split(), reason=request.POST.get("label_reason", ""),
                                  user=request.user)
        else:  # admin
            if not ids:
                raise BrowseActionError("no image is selected: tick the images first")
            return redirect(f"{reverse('admin:curation_image_changelist')}?id__in={','.join(map(str, ids[:500]))}")
    except (BrowseActionError, SimilarError) as exc:
        messages.error(request, str(exc))
    else:
        messages.success(request, report.summary())
    return redirect(back)


@require_GET
@role_required(CURATOR, RESEARCHER)
def image_detail(request, image_id: int):
    d = selectors.image_detail(image_id=image_id)
    if d is None:
        raise Http404(f"no image {image_id}")
    # previous / next in the browser's order under the filters the link carried (every image
    # by id without any); the list page it came from is kept for the way back
    try:
        filters = browse_filters_from(request.GET)
        prev, nxt = browse_neighbours(filters=filters, image_id=image_id)
    except BrowseError as exc:
        return render(request, "labeling_ui/image_detail.html", {"d": d, "error": str(exc), "here": request.get_full_path()}, status=400)
    keep = filters.query()
    step = f"?{keep}" if keep else ""
    try:
        back_page = _page_number(request)
    except BrowseError as exc:
        return render(request, "labeling_ui/image_detail.html", {"d": d, "error": str(exc), "here": request.get_full_path()}, status=400)
    list_query = filters.query(after=request.GET.get("after", "")[:200] or None, page=back_page if back_page > 1 else None)
    return render(request, "labeling_ui/image_detail.html", {
        "d": d, "can_act": CURATOR in request_roles(request), "here": request.get_full_path(),
        "prev_url": f"{reverse('labeling_ui:image_detail', args=[prev])}{step}" if prev else "",
        "next_url": f"{reverse('labeling_ui:image_detail', args=[nxt])}{step}" if nxt else "",
        "list_url": _images_url(list_query), "filtered": bool(keep)})


@require_GET
@role_required(CURATOR, RESEARCHER)
def duplicates(request):
    after_raw = request.GET.get("after", "")
    state = request.GET.get("state", "")[:40]
    source = None
    if request.GET.get("source"):
        source = Source.objects.filter(name=request.GET["source"][:100]).first()
        if source is None:
            raise Http404(f"no source named {request.GET['source'][:100]!r}")
    context = {"source": source, "state": state, "rows": [],
               "sources": Source.objects.filter(role=Source.Role.CANDIDATE).order_by("name")}
    try:
        after = object_id(after_raw, "after") if after_raw else None
    except ValueError:
        return render(request, "labeling_ui/duplicates.html", {**context, "error": f"after={after_raw[:40]!r} is not a group id"}, status=400)
    try:
        rows, nxt = duplicate_group_list(after=after, source=source, state=state)
    except DuplicateListError as exc:
        return render(request, "labeling_ui/duplicates.html", {**context, "error": str(exc), "state": ""}, status=400)
    return render(request, "labeling_ui/duplicates.html", {**context, "rows": rows, "next": nxt,
                                                           "counts": duplicate_group_counts(source=source)})


@role_required(CURATOR, RESEARCHER)
def duplicate_group_page(request, image_id: int):
    if request.method == "POST":
        if CURATOR not in request_roles(request):
            raise PermissionDenied("only curators correct the duplicate search")
        action = request.POST.get("action", "")
        if action not in DUPLICATE_ACTIONS:
            return _not_a_choice("action", action, DUPLICATE_ACTIONS)
        try:
            target = object_id(request.POST.get("image", ""), "image")
            if action == "clear":
                duplicate_override_clear(image_id=target, user=request.user)
                messages.success(request, f"Image {target}: the duplicate search's own result holds again.")
            elif action == "confirm":
                nxt = request.POST.get("next", "")  # the next group needing attention, as the page offered it
                then = object_id(nxt, "next") if nxt else None
                duplicate_override_set(image_id=target, action=action, note=request.POST.get("note", ""), user=request.user)
                messages.success(request, f"The group of image {target} is confirmed as the search made it (undo: U on image {target}).")
                if then is not None:
                    return redirect(reverse("labeling_ui:duplicate_group", args=[then]))
            else:
                o = duplicate_override_set(image_id=target, action=action, note=request.POST.get("note", ""), user=request.user)
                messages.success(request, f"Image {target}: {o.get_action_display()} recorded; the review queue and the next export follow it.")
        except (DuplicateError, ValueError) as exc:
            messages.error(request, str(exc))
        focus = urlencode({"focus": request.POST.get("image", "")[:20]})  # the member just corrected keeps the keys' focus
        return redirect(f"{reverse('labeling_ui:duplicate_group', args=[image_id])}?{focus}")
    try:
        group = duplicate_group(image_id=image_id)
    except DuplicateError as exc:
        raise Http404(str(exc)) from None
    prev_open, next_open = duplicate_group_neighbours(raw_group=group.raw_group)
    return render(request, "labeling_ui/duplicate_group.html", {
        "g": group, "image_id": image_id, "can_act": CURATOR in request_roles(request),
        "decided": duplicate_group_decided(raw_group=group.raw_group), "prev_open": prev_open, "next_open": next_open,
        "focus": request.GET.get("focus", "")[:20]})


@require_GET
@role_required(CURATOR, api=True)
def api_wordnet_nouns(request):
    from pipelines.classes.wordnet_graph import WordNetUnavailable

    try:
        nouns = noun_search(request.GET.get("q", "")[:100], limit=12)
    except WordNetUnavailable as exc:
        return JsonResponse({"error": str(exc)}, status=503)
    return JsonResponse({"nouns": nouns})


@require_GET
@role_required(CURATOR, RESEARCHER, api=True)
def api_browse_classes(request):
    """The browser's class and top-1 type-ahead: ``?kind=class|top1&q=TEXT[&source=NAME]``."""
    try:
        results = class_search(kind=request.GET.get("kind", ""), q=request.GET.get("q", "")[:100],
                               source=request.GET.get("source", "")[:100], limit=12)
    except BrowseError as exc:
        return JsonResponse({"error": str(exc)}, status=400)
    return JsonResponse({"results": results})
