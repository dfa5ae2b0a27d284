from urllib.parse import quote

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.db import connection
from django.http import HttpResponseBadRequest, JsonResponse, StreamingHttpResponse
from django.shortcuts import get_object_or_404, render
from django.views.decorators.http import require_GET

from curation import selectors
from curation.models import ClassFilterRun
from curation.roles import CURATOR, RESEARCHER, user_roles
from labeling_ui.http import attachment, whole_number
from pipelines.export import csv_cells


@login_required
@require_GET
def home(request):
    roles = user_roles(request.user)
    context = {"id_classes": selectors.default_id_class_set()}
    # Source and job overviews are for the people who curate and evaluate; annotators see
    # only their own work (the review queue arrives with the review app).
    if roles & {CURATOR, RESEARCHER} or request.user.is_staff:
        context["sources"] = selectors.source_summaries()
        context["jobs"] = selectors.recent_jobs(limit=10)
        context["class_filter_runs"] = selectors.class_filter_runs(limit=10)
        context["can_browse"] = bool(roles & {CURATOR, RESEARCHER})  # the image browser's own rule: no link that answers 403
    return render(request, "labeling_ui/home.html", context)


@require_GET
def healthz(request):
    with connection.cursor() as cur:
        cur.execute("SELECT 1")
    return JsonResponse({"ok": True})


# rows each of the report's lists draws (removed, kept, flagged, overrides, resolved flags); the rest
# through its search (100 a page) or the CSV. 500 a list made 2,800 rows for a pool of 19,167
# classes, most of the page's 0.5 s (issue 45)
REPORT_LIST_LIMIT = 100


def _require_curation_reader(request):
    """Class filter results are for curators, researchers and staff; annotators do not see them."""
    if not (user_roles(request.user) & {CURATOR, RESEARCHER} or request.user.is_staff):
        raise PermissionDenied("class filter results are for curators and researchers")


@login_required
@require_GET
def class_filter_report(request, run_id: int):
    _require_curation_reader(request)
    run = get_object_or_404(ClassFilterRun.objects.select_related("job", "source", "created_by"), pk=run_id)
    report = selectors.class_filter_report(run=run, list_limit=REPORT_LIST_LIMIT)
    rules = sorted(run.policy.get("rules", {})) + ["override_keep", "override_remove", "override_flag"]
    search = {k: request.GET.get(k, "").strip()[:100] for k in ("q", "decision", "rule", "level")}
    for key, allowed in (*selectors.CLASS_DECISION_FILTERS.items(), ("rule", rules)):
        if search[key] and search[key] not in allowed:
            return HttpResponseBadRequest(f"{key}={search[key]!r} is not one of: {', '.join(allowed)}")
    searching = any(search.values())
    try:  # the one rule for integers from a request; a page past the last shows the last
        number = whole_number(request.GET.get("page") or "1", "page", lo=1, hi=10**9)
    except ValueError as exc:
        return HttpResponseBadRequest(f"{exc}\n", content_type="text/plain; charset=utf-8")
    page = Paginator(selectors.class_decision_search(run=run, **search), 100).get_page(number) if searching else None
    query = "&".join(f"{k}={quote(v)}" for k, v in search.items() if v)
    return render(request, "labeling_ui/class_filter_report.html", {
        "r": report, "run": run, "search": search, "page": page, "query": query, "rules": rules,
        "filters": selectors.CLASS_DECISION_FILTERS})


class _Echo:
    def write(self, value):
        return value


@login_required
@require_GET
def class_filter_csv(request, run_id: int):
    _require_curation_reader(request)
    run = get_object_or_404(ClassFilterRun, pk=run_id)
    writer = csv_cells.DictWriter(_Echo(), fieldnames=selectors.CLASS_DECISION_CSV_COLUMNS)

    def rows():
        yield ",".join(selectors.CLASS_DECISION_CSV_COLUMNS) + "\r\n"
        for row in selectors.class_decision_csv_rows(run=run):
            yield writer.writerow(row)

    response = StreamingHttpResponse(rows(), content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = attachment(f"class-filter-{run.pk}.csv")
    return response
