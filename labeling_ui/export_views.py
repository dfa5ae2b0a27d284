"""Exports for people: the list of exports with their downloads (streamed .tar.gz / .zip,
never built in memory), and a source's contamination report. Curators and researchers only."""
from __future__ import annotations

import hashlib
import logging

from django.http import Http404, HttpResponse, HttpResponseBadRequest, StreamingHttpResponse
from django.shortcuts import get_object_or_404, render
from django.views.decorators.http import require_GET

from curation import selectors
from curation.models import Export, Source
from curation.roles import CURATOR, RESEARCHER
from curation.services.exports import export_path
from labeling_ui.http import attachment, whole_number
from labeling_ui.review_views import role_required
from pipelines.export.write import (
    LAYOUTS,
    MANIFEST,
    SUMS_FILE,
    DownloadAborted,
    ExportError,
    archive_members,
    first_changed_member,
    iter_tar_gz,
    iter_zip,
    read_manifest,
    sha256sums,
)
from pipelines.sources.images import sha256_file

log = logging.getLogger("curation.downloads")
FORMATS = {"tar.gz": ("application/gzip", iter_tar_gz), "zip": ("application/zip", iter_zip)}


@require_GET
@role_required(CURATOR, RESEARCHER)
def exports(request):
    return render(request, "labeling_ui/exports.html", {"exports": selectors.export_list(), "layouts": LAYOUTS,
                                                        "sources": Source.objects.filter(role=Source.Role.CANDIDATE).order_by("name")})


@require_GET
@role_required(CURATOR, RESEARCHER)
def download(request, export_id: int, fmt: str):
    export = get_object_or_404(Export, pk=export_id)
    if fmt not in FORMATS:
        raise Http404(f"unknown archive format {fmt!r}; use tar.gz or zip")
    if export.status != Export.Status.DONE:
        return HttpResponse(f"{export.label} is {export.status}, not downloadable", status=409, content_type="text/plain")
    layout = request.GET.get("layout") or None
    if layout and layout not in export.config.get("layouts", []):
        raise Http404(f"{export.label} has no {layout} layout")
    written = _as_written(export)
    if isinstance(written, HttpResponse):
        return written
    root, manifest, _ = written
    members = archive_members(root, manifest, layout=layout)
    # every file against the manifest before the first byte: a changed file is a 409 naming it,
    # never a 200 whose archive stops short of it (issue 47; cost in docs/security.md)
    changed = first_changed_member(root, members, manifest["files"])
    if changed:
        log.error("download of export %s (#%s) refused: %s", export.label, export.pk, changed)
        return HttpResponse(f"{export.label} cannot be downloaded: {changed}. Nothing was sent. Check the export with "
                            f"`python manage.py verify_export {root}` and write a new version.\n", status=409,
                            content_type="text/plain; charset=utf-8")
    content_type, writer = FORMATS[fmt]
    prefix = export.label + (f"-{layout}" if layout else "")
    sums = {SUMS_FILE: sha256sums(members, manifest["files"], export.manifest_sha256)}
    stream = writer(root, members, prefix=prefix, expected=manifest["files"], extra=sums)
    response = StreamingHttpResponse(_logged(stream, export), content_type=content_type)
    response["Content-Disposition"] = attachment(f"{prefix}.{fmt}")
    response["Cache-Control"] = "private, no-store"
    response["X-Accel-Buffering"] = "no"
    return response


@require_GET
@role_required(CURATOR, RESEARCHER)
def datasheet(request, export_id: int):
    """The export's datasheet (its README.md), as written and checked against its manifest."""
    from django.utils.safestring import mark_safe

    from pipelines.export.datasheet import to_html

    export = get_object_or_404(Export, pk=export_id)
    if export.status != Export.Status.DONE:
        return HttpResponse(f"{export.label} is {export.status}: it has no datasheet", status=409, content_type="text/plain")
    written = _as_written(export, "README.md", absent=f"{export.label} was written before exports carried a datasheet")
    if isinstance(written, HttpResponse):
        return written
    text = written[2]
    return render(request, "labeling_ui/export_datasheet.html",
                  {"export": export, "html": mark_safe(to_html(text.decode("utf-8")))})  # to_html escapes every text it renders


def _as_written(export: Export, name: str = "", *, absent: str = ""):
    """(folder, manifest, bytes of ``name``) of a finished export, each checked to be what was
    written (the manifest against the digest recorded then, ``name`` against the manifest), or
    the answer to give: 410 when it cannot be read, 409 when a file is not the one written,
    404 (``absent``) when the manifest does not list ``name``."""
    root = export_path(export)
    try:
        manifest = read_manifest(root)
        intact = sha256_file(root / MANIFEST) == export.manifest_sha256
        listed = not name or name in manifest["files"]
        data = (root / name).read_bytes() if name and intact and listed else b""
    except (ExportError, OSError) as exc:
        return HttpResponse(f"{export.label} cannot be read from {root}: {exc}", status=410, content_type="text/plain")
    if intact and not listed:
        raise Http404(absent or f"{export.label} has no {name}")
    if not intact or (name and hashlib.sha256(data).hexdigest() != manifest["files"].get(name)):
        what = f"{name} or {MANIFEST}" if name else MANIFEST
        return HttpResponse(f"{export.label}: {what} is not the one written; run `python manage.py verify_export {root}`",
                            status=409, content_type="text/plain")
    return root, manifest, data


def _logged(stream, export: Export):
    """The archive stream; a file changed while it is being sent (after the check above) fails
    its re-hash and stops it, with a log line for the operator: the response then ends without
    its closing chunk, so clients report the download as failed (curl exits 18)."""
    try:
        yield from stream
    except DownloadAborted as exc:
        log.error("download of export %s (#%s) aborted: %s", export.label, export.pk, exc)
        raise


@require_GET
@role_required(CURATOR, RESEARCHER)
def contamination(request, source_id: int):
    source = get_object_or_404(Source, pk=source_id, role=Source.Role.CANDIDATE)
    try:
        sample = max(1, min(100_000, whole_number(request.GET.get("sample", "400"), "sample")))
        seed = whole_number(request.GET.get("seed", "0"), "seed", lo=0, hi=2**32 - 1)
    except ValueError as exc:
        return HttpResponseBadRequest(f"{exc}\n", content_type="text/plain; charset=utf-8")
    return render(request, "labeling_ui/contamination.html", {"source": source, "r": selectors.contamination_report(source=source, sample=sample, seed=seed)})


DIFF_PAGE = 200  # rows of diff.csv per page


@require_GET
@role_required(CURATOR, RESEARCHER)
def diff(request, export_id: int):
    """What an export changed against the previous version of its name: the summary, and every
    image added or removed with its reason (diff.csv, checked against the manifest), paged;
    ``?format=csv`` downloads the file itself."""
    import csv
    import io

    from pipelines.export.diff import DIFF_COLUMNS, meaning, summary_line

    export = get_object_or_404(Export, pk=export_id)
    if export.status != Export.Status.DONE:
        return HttpResponse(f"{export.label} is {export.status}: it has no difference to show", status=409, content_type="text/plain")
    d = export.counts.get("diff")
    if not d:
        raise Http404(f"{export.label} is the first version of {export.name} (or was written before exports recorded their difference)")
    change = request.GET.get("change", "")
    if change not in ("", "added", "removed"):
        return HttpResponseBadRequest("change must be added or removed (or left out for both)\n", content_type="text/plain; charset=utf-8")
    out_format = request.GET.get("format", "")
    if out_format not in ("", "html", "csv"):
        return HttpResponseBadRequest(f"format={out_format[:40]!r} is not html or csv\n", content_type="text/plain; charset=utf-8")
    try:
        page = whole_number(request.GET.get("page", "1"), "page", lo=1, hi=10**9)
    except ValueError as exc:
        return HttpResponseBadRequest(f"{exc}\n", content_type="text/plain; charset=utf-8")
    written = _as_written(export, d["file"])
    if isinstance(written, HttpResponse):
        return written
    data = written[2]
    if out_format == "csv":
        response = HttpResponse(data, content_type="text/csv; charset=utf-8")
        response["Content-Disposition"] = attachment(f"{export.label}-{d['file']}")
        return response
    rows = [dict(zip(DIFF_COLUMNS, r, strict=False)) for r in list(csv.reader(io.StringIO(data.decode("utf-8"))))[1:]]
    rows = [r for r in rows if not change or r["change"] == change]
    pages = max(1, -(-len(rows) // DIFF_PAGE))
    page = min(page, pages)
    return render(request, "labeling_ui/export_diff.html", {
        "export": export, "d": d, "line": summary_line(d),
        "reasons": [("removed", k, n, meaning(k)) for k, n in d["removed_by_reason"].items()]
        + [("added", k, n, meaning(k)) for k, n in d["added_by_reason"].items()], "rows": rows[(page - 1) * DIFF_PAGE:page * DIFF_PAGE], "shown": len(rows),
        "change": change, "page": page, "pages": pages, "prev": page - 1 if page > 1 else None, "next": page + 1 if page < pages else None})
