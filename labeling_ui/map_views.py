"""The embedding map (docs/browse.md): a source's images as points, coloured by final label,
class or predicted ID class; a box or lasso selection opens as a page of thumbnails with the
browser's selection actions. Thin: curation.services.embedding_map makes and reads the map."""
from __future__ import annotations

from django.contrib import messages
from django.http import Http404, HttpResponseBadRequest, JsonResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from curation.models import Image, Job, Source
from curation.roles import CURATOR, RESEARCHER
from curation.services.browse import MAX_SELECTION
from curation.services.embedding_map import MapError, embedding_map_points, embedding_map_start
from labeling_ui.http import object_id
from labeling_ui.review_views import request_roles, role_required
from pipelines.features.embedding_map import METHODS
from pipelines.names import class_label
from pipelines.numbers import comma_list


def _source(request, raw) -> Source:
    try:
        pk = object_id(raw, "source")
    except ValueError as exc:
        raise Http404(str(exc)) from None
    source = Source.objects.filter(pk=pk).first()
    if source is None:
        raise Http404(f"no source {pk}")
    return source


class NotAMethod(ValueError):
    pass


def _method(raw: str) -> str:
    """The projection asked for: one of ``METHODS`` (umap when the field is absent or empty); any
    other value is refused (400), not quietly drawn as umap (issue 47)."""
    if not raw:
        return "umap"
    if raw not in METHODS:
        raise NotAMethod(f"method={raw[:40]!r} is not one of {', '.join(METHODS)}")
    return raw


def _bad_method(exc: NotAMethod, api: bool = False):
    if api:
        return JsonResponse({"error": str(exc)}, status=400)
    return HttpResponseBadRequest(f"{exc}; nothing was changed\n", content_type="text/plain; charset=utf-8")


@role_required(CURATOR, RESEARCHER)
def embedding_map(request):
    sources = list(Source.objects.order_by("name"))
    if request.method == "POST":
        if CURATOR not in request_roles(request):
            return render(request, "403.html", status=403)
        source = _source(request, request.POST.get("source", ""))
        try:
            method = _method(request.POST.get("method", ""))
        except NotAMethod as exc:
            return _bad_method(exc)
        try:
            job = embedding_map_start(source=source, method=method, user=request.user)
        except MapError as exc:
            messages.error(request, str(exc))
        else:
            if job is not None:
                job.refresh_from_db()  # where jobs run in the request it is done already
            messages.success(request, f"The map of {source.name} is ready." if job is None or job.status == Job.Status.DONE
                             else f"The map of {source.name} is being made (job {job.pk}); this page shows it when it is done.")
        return redirect(f"{reverse('labeling_ui:embedding_map')}?source={source.pk}&method={method}")
    source = _source(request, request.GET["source"]) if request.GET.get("source") else (sources[0] if sources else None)
    try:
        method = _method(request.GET.get("method", "umap"))
    except NotAMethod as exc:
        return _bad_method(exc)
    ready = None
    job = None
    if source is not None:
        ready = embedding_map_points(source=source, method=method) is not None
        job = Job.objects.filter(kind=Job.Kind.EMBEDDING_MAP, source=source, config__method=method).order_by("-id").first()
    return render(request, "labeling_ui/embedding_map.html", {"sources": sources, "source": source, "method": method, "methods": METHODS,
                                                              "ready": ready, "job": job, "can_act": CURATOR in request_roles(request),
                                                              "max_selection": MAX_SELECTION})


@require_GET
@role_required(CURATOR, RESEARCHER, api=True)
def embedding_map_json(request, source_id: int):
    source = _source(request, source_id)
    try:
        method = _method(request.GET.get("method", "umap"))
    except NotAMethod as exc:
        return _bad_method(exc, api=True)
    points = embedding_map_points(source=source, method=method)
    if points is None:
        return JsonResponse({"error": f"the map of {source.name} has not been made: press Make the map"}, status=404)
    from curation.models import CandidateClass, SynsetText

    classes = {c.pk: class_label(c.wnid, c.synset_name, c.folder) for c in CandidateClass.objects.filter(source=source)}
    top1 = {t.wnid: t.label for t in SynsetText.objects.filter(wnid__in=set(points["top1"]))}
    return JsonResponse({**points, "class_names": {str(k): v for k, v in classes.items()}, "top1_names": top1})


@require_POST
@role_required(CURATOR, RESEARCHER)
def embedding_map_selection(request):
    """The points a box or lasso took, as thumbnails with the browser's selection actions."""
    try:
        ids = [object_id(x, "ids") for x in comma_list(request.POST.get("ids", ""), "ids")]
    except ValueError as exc:
        return render(request, "labeling_ui/map_selection.html", {"error": str(exc), "rows": []}, status=400)
    truncated = len(ids) > MAX_SELECTION
    ids = ids[:MAX_SELECTION]
    rows = list(Image.objects.filter(pk__in=ids).order_by("id").values(
        "id", "relative_path", "source__name", "excluded_reason", "candidate_class__wnid", "candidate_class__synset_name",
        "candidate_class__folder", "review_item__status", "review_item__final_decision"))
    for r in rows:
        r["class_label"] = class_label(r["candidate_class__wnid"], r["candidate_class__synset_name"], r["candidate_class__folder"]) \
            if r["candidate_class__folder"] else "(no class)"
    return render(request, "labeling_ui/map_selection.html", {"rows": rows, "truncated": truncated, "can_act": CURATOR in request_roles(request),
                                                              "here": _back_to_map(request.POST.get("back", ""))})


def _back_to_map(raw: str) -> str:
    """Where the selection's actions return: the map page it came from."""
    base = reverse("labeling_ui:embedding_map")
    return raw if raw.startswith(base) and "//" not in raw and len(raw) < 300 else base
