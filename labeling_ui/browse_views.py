"""Looking at the data (docs/browse.md): the image browser, an image's page, duplicate groups
with a curator's corrections, and the WordNet noun search used to map class folders. Curators
and researchers read; only curators act. Views stay thin: selectors read, services act."""
from __future__ import annotations

from django.conf import settings
from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import Http404, JsonResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_GET, require_POST

from curation import selectors
from curation.models import CandidateClass, Source
from curation.roles import CURATOR, RESEARCHER
from curation.services.browse import ActionReport, BrowseActionError, images_exclude, images_include, images_label, images_requeue
from curation.services.duplicates import DuplicateError, duplicate_group, duplicate_groups, duplicate_override_clear, duplicate_override_set
from curation.services.similar import SimilarError, images_to_front
from labeling_ui.http import object_id
from labeling_ui.review_views import request_roles, role_required


def _back(request, fallback: str) -> str:
    """Where to go after an action: the page it came from, if it is one of ours."""
    nxt = request.POST.get("next", "")
    if nxt and url_has_allowed_host_and_scheme(nxt, allowed_hosts={request.get_host()}, require_https=request.is_secure()) \
            and nxt.startswith("/"):
        return nxt
    return fallback


def _ids(request) -> list[int]:
    try:
        return [object_id(raw, "ids") for raw in request.POST.getlist("ids")]
    except ValueError as exc:
        raise BrowseActionError(str(exc)) from None


@require_GET
@role_required(CURATOR, RESEARCHER)
def images(request):
    try:
        filters = selectors.browse_filters_from(request.GET)
        page = selectors.image_browse(filters=filters, after=request.GET.get("after", "")[:200], page_size=settings.BROWSE_PAGE_SIZE)
    except selectors.BrowseError as exc:
        return render(request, "labeling_ui/browse.html", {"error": str(exc), "f": selectors.BrowseFilters(), **selectors.browse_choices()},
                      status=400)
    cls = CandidateClass.objects.filter(pk=filters.cls).select_related("source").first() if filters.cls else None
    return render(request, "labeling_ui/browse.html", {
        "f": filters, "page": page, "cls": cls, "can_act": CURATOR in request_roles(request), **selectors.browse_choices(),
        "next_url": f"{reverse('labeling_ui:images')}?{filters.query(after=page.next_cursor)}" if page.next_cursor else "",
        "first_url": f"{reverse('labeling_ui:images')}?{filters.query()}", "paged": bool(request.GET.get("after")),
        "here": request.get_full_path()})


@require_POST
@role_required(CURATOR)
def images_action(request):
    action = request.POST.get("action", "")
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
        elif action == "admin":
            if not ids:
                raise BrowseActionError("no image is selected: tick the images first")
            return redirect(f"{reverse('admin:curation_image_changelist')}?id__in={','.join(map(str, ids[:500]))}")
        else:
            raise BrowseActionError(f"unknown action {action[:40]!r}: use exclude, include, requeue, front, label or admin")
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
    return render(request, "labeling_ui/image_detail.html", {"d": d, "can_act": CURATOR in request_roles(request), "here": request.get_full_path()})


@require_GET
@role_required(CURATOR, RESEARCHER)
def duplicates(request):
    after_raw = request.GET.get("after", "")
    source = None
    if request.GET.get("source"):
        source = Source.objects.filter(name=request.GET["source"][:100]).first()
        if source is None:
            raise Http404(f"no source named {request.GET['source'][:100]!r}")
    try:
        after = object_id(after_raw, "after") if after_raw else None
    except ValueError:
        return render(request, "labeling_ui/duplicates.html", {"error": f"after={after_raw[:40]!r} is not a group id", "rows": []}, status=400)
    rows, nxt = duplicate_groups(after=after, source=source)
    return render(request, "labeling_ui/duplicates.html", {"rows": rows, "next": nxt, "source": source,
                                                           "sources": Source.objects.filter(role=Source.Role.CANDIDATE).order_by("name")})


@role_required(CURATOR, RESEARCHER)
def duplicate_group_page(request, image_id: int):
    if request.method == "POST":
        if CURATOR not in request_roles(request):
            raise PermissionDenied("only curators correct the duplicate search")
        action = request.POST.get("action", "")
        try:
            target = object_id(request.POST.get("image", ""), "image")
            if action == "clear":
                duplicate_override_clear(image_id=target, user=request.user)
                messages.success(request, f"Image {target}: the duplicate search's own result holds again.")
            else:
                o = duplicate_override_set(image_id=target, action=action, note=request.POST.get("note", ""), user=request.user)
                messages.success(request, f"Image {target}: {o.get_action_display()} recorded; the review queue and the next export follow it.")
        except (DuplicateError, ValueError) as exc:
            messages.error(request, str(exc))
        return redirect("labeling_ui:duplicate_group", image_id=image_id)
    try:
        group = duplicate_group(image_id=image_id)
    except DuplicateError as exc:
        raise Http404(str(exc)) from None
    return render(request, "labeling_ui/duplicate_group.html", {"g": group, "image_id": image_id, "can_act": CURATOR in request_roles(request)})


@require_GET
@role_required(CURATOR, api=True)
def api_wordnet_nouns(request):
    from pipelines.wordnet_graph import WordNetUnavailable, load_noun_graph, search_nouns

    q = request.GET.get("q", "")[:100]
    try:
        graph = load_noun_graph(settings.NLTK_DATA, build=False)
    except WordNetUnavailable as exc:
        return JsonResponse({"error": str(exc)}, status=503)
    return JsonResponse({"nouns": search_nouns(graph, q, limit=12)})
