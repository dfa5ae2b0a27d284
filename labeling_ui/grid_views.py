"""Grid review (docs/review.md, "Grid review"): the annotator's page of one class's thumbnails
and its JSON API. Thin: leasing, recording and undo are curation.services.review_grid's."""
from __future__ import annotations

from django.conf import settings
from django.http import JsonResponse
from django.http.request import RawPostDataException
from django.shortcuts import render
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from curation import selectors
from curation.models import ReviewItem
from curation.roles import ANNOTATOR
from curation.selectors.grid import grid_tile_of
from curation.services.review import NothingToUndo, ReviewError
from curation.services.review_grid import (
    GRID_MAX,
    GRID_MIN,
    TILE_DEFAULT,
    TILE_MAX,
    TILE_MIN,
    grid_closest_id_classes,
    grid_size,
    grid_tile_save,
    review_grid_next,
    review_grid_submit,
    review_grid_undo,
)
from labeling_ui.review_views import KEYS, role_required, seconds_on_screen
from labeling_ui.review_views import json_body as _review_json_body

DEFAULT_SIZE = 48


def _page(request, size: int, *, prefetch: bool = False) -> dict:
    """The page's tiles; with ``prefetch`` the next page is leased too and its images named, so
    the screen loads their thumbnails while this page is decided (after the first page: the
    first one answers fastest without it)."""
    lease = review_grid_next(user=request.user, size=size, prefetch=size if prefetch else 0)
    tiles = selectors.review_payload(lease.assignments, model_name=settings.DEFAULT_MODEL)
    upcoming = [a.item_id for a in lease.upcoming]
    images = [getattr(a, "image_id", None) for a in lease.upcoming]  # the services name them as they lease
    cls = None
    if tiles:
        first = tiles[0]
        cls = {**first["ood_class"], "id": lease.class_id, "source": first["source"],
               "closest": grid_closest_id_classes(class_id=lease.class_id, model_name=settings.DEFAULT_MODEL)}
    return {"tiles": tiles, "class": cls, "size": size, "busy": lease.busy,
            "prefetch": images if None not in images else list(ReviewItem.objects.filter(pk__in=upcoming).values_list("image_id", flat=True))}


def _size_from(request, data: dict | None = None):
    raw = (data or {}).get("size", request.GET.get("size", DEFAULT_SIZE))
    return grid_size(raw)


def _json_body(request) -> dict:
    """The request's JSON object; a form or multipart body already read as a form is refused too (4xx, not 500)."""
    try:
        return _review_json_body(request)
    except RawPostDataException:
        raise ReviewError("the request body must be a JSON object, not a form") from None


@role_required(ANNOTATOR)
@require_GET
def grid_screen(request):
    return render(request, "labeling_ui/review_grid.html", {"keys": KEYS, "grid_min": GRID_MIN, "grid_max": GRID_MAX,
                                                            "default_size": DEFAULT_SIZE, "tile_min": TILE_MIN, "tile_max": TILE_MAX,
                                                            "tile": grid_tile_of(request.user, TILE_DEFAULT),
                                                            "lease_minutes": settings.REVIEW_LEASE_SECONDS // 60})


@role_required(ANNOTATOR, api=True)
@require_http_methods(["GET", "POST"])
def api_grid_next(request):
    """The page. GET only reads it (leasing it as the single-image screen's GET does); a POST
    (JSON ``{size, tile}``, with the CSRF token) also remembers ``tile``, the tile side the
    annotator changed to: a state change is never a GET another site can make (issue 62, row 9).
    A GET naming ``tile`` is refused (405) and changes nothing."""
    if request.method == "GET" and "tile" in request.GET:
        response = JsonResponse({"error": "the tile size is changed by a POST of {size, tile}, not by a GET"}, status=405)
        response["Allow"] = "POST"
        return response
    try:
        data = _json_body(request) if request.method == "POST" else None
        size = _size_from(request, data)
        if data is not None and "tile" in data:
            grid_tile_save(user=request.user, tile=data["tile"])
    except ReviewError as exc:
        return JsonResponse({"error": str(exc)}, status=400)
    return JsonResponse({**_page(request, size), "progress": selectors.annotator_progress(request.user)})


@role_required(ANNOTATOR, api=True)
@require_POST
def api_grid_submit(request):
    try:
        data = _json_body(request)
        size = _size_from(request, data)
        saved = review_grid_submit(user=request.user, marks=data.get("marks"), seconds=seconds_on_screen(data.get("seconds")))
    except (ReviewError, TypeError, ValueError, OverflowError) as exc:
        return JsonResponse({"error": str(exc)}, status=400)
    out = {"saved": {"reviews": len(saved.reviews), "skipped": saved.skipped, "replays": saved.replays}, **_page(request, size, prefetch=True)}
    if data.get("progress") is True or not out["tiles"]:  # the screen asks every few pages and counts in between (review.js alike)
        out["progress"] = selectors.annotator_progress(request.user)
    return JsonResponse(out)


@role_required(ANNOTATOR, api=True)
@require_POST
def api_grid_undo(request):
    try:
        size = _size_from(request, _json_body(request))
    except ReviewError as exc:
        return JsonResponse({"error": str(exc)}, status=400)
    try:
        undone = review_grid_undo(user=request.user)
    except (NothingToUndo, ReviewError) as exc:
        return JsonResponse({"error": str(exc)}, status=409)
    return JsonResponse({"undone": undone, **_page(request, size), "progress": selectors.annotator_progress(request.user)})
