"""Find similar (docs/browse.md): an image's nearest candidates and ID images by stored
features, as a page curators act on with the browser's selection actions; and the annotator's
"send the 20 nearest to the front of the queue". Thin: curation.services.similar does the work."""
from __future__ import annotations

from django.http import Http404, JsonResponse
from django.http.request import RawPostDataException
from django.shortcuts import render
from django.views.decorators.http import require_GET, require_POST

from curation.models import Image
from curation.roles import ANNOTATOR, CURATOR, RESEARCHER
from curation.selectors.similar import neighbour_rows
from curation.services.review import ReviewError
from curation.services.similar import SimilarError, find_similar, review_similar_to_front
from labeling_ui.http import object_id
from labeling_ui.review_views import json_body as _review_json_body
from labeling_ui.review_views import request_roles, role_required


def _json_body(request) -> dict:
    """The request's JSON object; a form or multipart body already read as a form is refused too (4xx, not 500)."""
    try:
        return _review_json_body(request)
    except RawPostDataException:
        raise ReviewError("the request body must be a JSON object, not a form") from None


@require_GET
@role_required(CURATOR, RESEARCHER)
def image_similar(request, image_id: int):
    image = Image.objects.select_related("source", "candidate_class").filter(pk=image_id).first()
    if image is None:
        raise Http404(f"no image {image_id}")
    ctx = {"im": image, "can_act": CURATOR in request_roles(request), "here": request.get_full_path()}
    try:
        near = find_similar(image_id=image_id, k=20)
    except SimilarError as exc:
        return render(request, "labeling_ui/image_similar.html", {**ctx, "error": str(exc)}, status=409)
    return render(request, "labeling_ui/image_similar.html", {**ctx, "candidates": neighbour_rows(near["candidates"]),
                                                              "id_images": neighbour_rows(near["id_images"])})


@require_POST
@role_required(ANNOTATOR, api=True)
def api_similar_to_front(request):
    try:
        data = _json_body(request)
        moved = review_similar_to_front(user=request.user, assignment_id=object_id(data.get("assignment"), "assignment"))
    except (ReviewError, SimilarError, ValueError) as exc:
        return JsonResponse({"error": str(exc)}, status=400)
    return JsonResponse({"moved": len(moved)})
