"""The certification page (issue 37): plan a certification of a source's unreviewed images,
watch the bound fall with every review, and close the plan. The statistics are in
pipelines/review/certify.py, the work in curation/services/certification.py."""
from __future__ import annotations

import math

from django.contrib import messages
from django.http import HttpResponse, HttpResponseBadRequest
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_http_methods, require_POST

from curation.models import CertificationPlan, Source
from curation.roles import CURATOR, RESEARCHER
from curation.services.certification import (
    SEED_MAX,
    CertificationConflict,
    CertificationError,
    certification_close,
    certification_holds,
    certification_leased_draws,
    certification_plan_create,
    certification_refresh,
    guarantee_text,
    sampler_note,
)
from curation.services.review import review_release_leases
from labeling_ui.http import decimal_number, whole_number
from labeling_ui.review_views import request_roles, role_required
from pipelines.review import certify as C


def _ticks(top: float, most: int = 6) -> list[float]:
    """Round tick values from 0 to at least ``top``: steps of 1, 2 or 5 times a power of ten."""
    raw = max(top, 1e-9) / (most - 1)
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    return [k * step for k in range(int(math.ceil(top / step - 1e-9)) + 1)]


def bound_plot_svg(history: list[tuple[int, float]], target: float) -> str:
    """The bound on the remainder's ID share after each number of reviews, with the target: an
    SVG written directly (matplotlib drew it in 0.2-0.5 s a request, most of the page; issue 45)."""
    w, h, left, right, top, bottom = 900, 230, 62, 16, 14, 44
    xs = [n for n, _b in history]
    ys = [100 * b for _n, b in history]
    x_ticks = _ticks(max(xs, default=1))
    y_ticks = _ticks(max([*ys, 100 * target]))
    x_max, y_max = x_ticks[-1] or 1, y_ticks[-1] or 1

    def px(x: float) -> float:
        return round(left + (w - left - right) * x / x_max, 1)

    def py(y: float) -> float:
        return round(h - bottom - (h - top - bottom) * y / y_max, 1)

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {w} {h}" width="100%" role="img" '
           'aria-label="bound on the remainder\'s ID share against reviews" font-family="sans-serif" font-size="11">']
    for t in y_ticks:
        out.append(f'<line x1="{left}" x2="{w - right}" y1="{py(t)}" y2="{py(t)}" stroke="#ddd"/>'
                   f'<text x="{left - 6}" y="{py(t) + 4}" text-anchor="end">{t:g}</text>')
    for t in x_ticks:
        out.append(f'<line x1="{px(t)}" x2="{px(t)}" y1="{top}" y2="{h - bottom}" stroke="#eee"/>'
                   f'<text x="{px(t)}" y="{h - bottom + 15}" text-anchor="middle">{t:g}</text>')
    out.append(f'<line x1="{left}" x2="{w - right}" y1="{py(100 * target)}" y2="{py(100 * target)}" stroke="#d62728" '
               f'stroke-dasharray="6 4"/>')
    if history:
        points = " ".join(f"{px(x)},{py(y)}" for x, y in zip(xs, ys))
        out.append(f'<polyline points="{points}" fill="none" stroke="#1f77b4" stroke-width="1.5"/>')
        out.extend(f'<circle cx="{px(x)}" cy="{py(y)}" r="2" fill="#1f77b4"/>' for x, y in zip(xs, ys))
    out.append(f'<text x="{w - right - 4}" y="{top + 12}" text-anchor="end" fill="#1f77b4">bound (upper, anytime-valid)</text>'
               f'<text x="{w - right - 4}" y="{top + 26}" text-anchor="end" fill="#d62728">target {100 * target:.2f}%</text>'
               f'<text x="{(left + w - right) / 2}" y="{h - 8}" text-anchor="middle">reviews of the sample (decided, in serving order)</text>'
               f'<text transform="translate(14 {(top + h - bottom) / 2}) rotate(-90)" text-anchor="middle">ID share of the remainder, %</text>'
               f'<rect x="{left}" y="{top}" width="{w - left - right}" height="{h - top - bottom}" fill="none" stroke="#999"/></svg>')
    return "".join(out)


def _seed(request) -> int | None:
    """The plan's seed from the form: blank for a random one (the service draws it); otherwise a
    whole number by the app's one rule (labeling_ui.http.whole_number)."""
    raw = request.POST.get("seed", "")
    if not raw.strip():
        return None
    try:
        return whole_number(raw, "seed", lo=0, hi=SEED_MAX)
    except ValueError:
        raise ValueError(f"seed must be a whole number from 0 to {SEED_MAX} in digits 0-9, or blank for a random one; "
                         f"not {raw[:20]!r}") from None


def _whole(request, name: str, default: int, lo: int, hi: int) -> int:
    return whole_number(request.POST.get(name, str(default)), name, lo=lo, hi=hi)


def _number(request, name: str, default: str, lo: float, hi: float) -> float:
    return decimal_number(request.POST.get(name, default), name, lo=lo, hi=hi)


HOLDS_SHOWN = 5  # the first sampled images the bound waits for, named on the page


@require_http_methods(["GET", "POST"])
@role_required(CURATOR, RESEARCHER)
def certify(request, source_id: int):
    source = get_object_or_404(Source, pk=source_id, role=Source.Role.CANDIDATE)
    if request.method == "POST":
        if CURATOR not in request_roles(request):
            return render(request, "labeling_ui/certify.html", {"source": source, "error": "planning needs the curator role"}, status=403)
        try:
            plan = certification_plan_create(
                source=source, n_strata=_whole(request, "strata", C.DEFAULT_STRATA, 1, 100),
                full_top=_number(request, "full_top", "0", 0, 0.5), confidence=_number(request, "confidence", "0.95", 0.5, 0.999),
                target=_number(request, "target", "0.5", 0.001, 99) / 100,
                pilot=_whole(request, "pilot", C.PILOT_PER_STRATUM, 1, 10_000), method=request.POST.get("method", C.BETTING),
                score=request.POST.get("score", CertificationPlan.Score.NEAREST_ID), seed=_seed(request), user=request.user)
        except CertificationConflict as exc:  # another plan is open: nothing wrong with the request itself
            return HttpResponse(f"{exc}\n", status=409, content_type="text/plain; charset=utf-8")
        except (ValueError, CertificationError) as exc:
            return HttpResponseBadRequest(f"{exc}\n", content_type="text/plain; charset=utf-8")
        messages.success(request, f"Plan {plan.pk}: the pilot is in the review queue.")
        return redirect("labeling_ui:certify", source_id=source.pk)
    plan = CertificationPlan.objects.filter(source=source).order_by("-created_at").first()
    ctx = {"source": source, "plan": plan, "scores": CertificationPlan.Score.choices, "is_curator": CURATOR in request_roles(request),
           "methods": C.METHODS, "defaults": {"strata": C.DEFAULT_STRATA, "pilot": C.PILOT_PER_STRATUM}}
    if plan is not None:
        sd = certification_refresh(plan=plan, user=request.user)
        # once certified, the certificate as it was met (reviews of images leased before then may still come in)
        certified = plan.status == CertificationPlan.Status.CERTIFIED
        share = plan.certificate["remainder_id_share_bound"] if certified else sd.cert.remainder_share
        history = [(n, b) for n, b in sd.history if not certified or n <= plan.certificate["reviews_used"]]
        shares = sd.draw_shares if sd.method == C.BETTING else []
        strata = [{"h": h, "size": sd.sizes[h], "reviewed": sd.reviewed[h], "found": sd.found[h], "full": sd.full[h],
                   "bound": int(sd.cert.bound.split[h]) if not sd.full[h] and h < len(sd.cert.bound.split) else None,
                   "share": None if h >= len(shares) or shares[h] is None else f"{100 * shares[h]:.1f}%"}
                  for h in range(len(sd.sizes))]
        if certified:  # the certificate as it was met
            c = plan.certificate
            history.append((c["reviews_used"], share))
            split = iter(c["split_of_bound"])
            strata = [{"h": h, "size": r["size"], "reviewed": r["reviewed"], "found": r["id_found"], "full": r["full"],
                       "bound": None if r["full"] else next(split, None), "share": None} for h, r in enumerate(c["strata"])]
        estimate = plan.certificate["remainder_id_share_estimate"] if certified else sd.cert.estimate
        holds = certification_holds(plan=plan, limit=HOLDS_SHOWN) if plan.status in ("pilot", "sampling") else []
        ctx.update(holds=holds if any(h.why != "queued" for h in holds) else [], holds_leased=any(h.why == "leased" for h in holds), holds_shown=HOLDS_SHOWN,
                   holds_queued=sum(1 for h in holds if h.why == "queued"))
        ctx.update(sd=sd, bound_share=share, betting=plan.prior == C.BETTING, guarantee=guarantee_text(plan.confidence),
                   sampler_note=sampler_note(plan) if plan.prior == C.BETTING else "",
                   pct={"target": 100 * plan.target, "bound": 100 * share, "estimate": 100 * estimate},
                   plot=bound_plot_svg(history, plan.target),
                   strata=strata)
    return render(request, "labeling_ui/certify.html", ctx)


@require_POST
@role_required(CURATOR)
def certify_close(request, source_id: int):
    source = get_object_or_404(Source, pk=source_id, role=Source.Role.CANDIDATE)
    plan = CertificationPlan.objects.filter(source=source).order_by("-created_at").first()
    if plan is None:
        return HttpResponseBadRequest("no plan to close\n", content_type="text/plain; charset=utf-8")
    try:
        certification_close(plan=plan, user=request.user)
    except CertificationError as exc:
        return HttpResponseBadRequest(f"{exc}\n", content_type="text/plain; charset=utf-8")
    return redirect("labeling_ui:certify", source_id=source.pk)


@require_POST
@role_required(CURATOR)
def certify_release(request, source_id: int):
    """Hand the open plan's leased, undecided sampled images back to the queue (their holders
    may have left; a decision they send later still counts)."""
    source = get_object_or_404(Source, pk=source_id, role=Source.Role.CANDIDATE)
    plan = CertificationPlan.objects.filter(source=source).order_by("-created_at").first()
    if plan is None:
        return HttpResponseBadRequest("no plan: there is nothing to hand back\n", content_type="text/plain; charset=utf-8")
    try:
        items = certification_leased_draws(plan=plan)
        n = review_release_leases(item_ids=items, user=request.user, why=f"certification plan {plan.pk}") if items else 0
    except CertificationError as exc:
        return HttpResponseBadRequest(f"{exc}\n", content_type="text/plain; charset=utf-8")
    messages.success(request, f"{n} lease(s) on the sample handed back to the queue." if n else "No sampled image was leased.")
    return redirect("labeling_ui:certify", source_id=source.pk)
