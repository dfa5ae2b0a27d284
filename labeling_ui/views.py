from django.contrib.auth.decorators import login_required
from django.db import connection
from django.http import JsonResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from curation import selectors
from curation.roles import CURATOR, RESEARCHER, user_roles


@login_required
@require_GET
def home(request):
    roles = user_roles(request.user)
    context = {"roles": sorted(roles), "id_classes": selectors.default_id_class_set()}
    # Source and job overviews are for the people who curate and evaluate; annotators see
    # only their own work (the review queue arrives with the review app).
    if roles & {CURATOR, RESEARCHER} or request.user.is_staff:
        context["sources"] = selectors.source_summaries()
        context["jobs"] = selectors.recent_jobs(limit=10)
    return render(request, "labeling_ui/home.html", context)


@require_GET
def healthz(request):
    with connection.cursor() as cur:
        cur.execute("SELECT 1")
    return JsonResponse({"ok": True})
