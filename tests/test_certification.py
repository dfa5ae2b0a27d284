"""Certification plans on the test database (issue 37): the plan and its replayable draw, blind
serving of the sample first, the move from pilot to Neyman sample, the bound, stopping when
certified (audited), and the command."""
from __future__ import annotations

import io

import numpy as np
import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from curation.models import AuditLog, CertificationPlan, CertificationUnit, ReviewItem
from curation.roles import ANNOTATOR
from curation.services.certification import (
    CertificationError,
    certification_cache_clear,
    certification_close,
    certification_plan_create,
    certification_refresh,
)
from curation.services.review import review_cache_clear, review_next, review_submit
from curation.services.users import user_create_with_role
from pipelines.review import certify as C
from tests.review_data import FAKE_TOP5, queue_with_rows

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _fresh(settings):
    settings.REVIEW_RECLAIM_EVERY = 0  # refresh plans on every lease
    review_cache_clear()
    certification_cache_clear()
    yield
    review_cache_clear()


def _annotator(name="ann"):
    return user_create_with_role(username=name, password="pw-" + name, role=ANNOTATOR)[0]


def _decide(user, id_items=frozenset(), limit=10_000):
    """Review what the queue serves; images in ``id_items`` get `id`. Returns the served item ids."""
    served = []
    for _ in range(limit):
        held = review_next(user=user, want=1)
        if not held:
            break
        a = held[0]
        if a.item_id in id_items:
            review_submit(user=user, assignment_id=a.pk, decision="id", wnids=[FAKE_TOP5[0][0]])
        else:
            review_submit(user=user, assignment_id=a.pk, decision="ood")
        served.append(a.item_id)
    return served


def test_a_plan_begun_under_the_doubling_schedule_goes_on_under_the_current_one(tmp_path, monkeypatch):
    """oodc-certify/2 doubled the draws each stage (pilot 12: ends 12, 24, 48); /3 adds half
    (12, 18, 27, 41, 60). A plan whose stages so far end at 48 gets its next stage to the first
    end of the current schedule past 48 (60), not a stage of negative length."""
    source = queue_with_rows(tmp_path, n=60)
    monkeypatch.setattr(C, "STAGE_GROWTH", 2.0)
    plan = certification_plan_create(source=source, n_strata=3, pilot=4, target=0.01, confidence=0.9, seed=3)
    ann = _annotator()
    _decide(ann, limit=12)
    certification_refresh(plan=plan)
    _decide(ann, limit=6)  # half of the stage 12..24: the next stage is due
    certification_refresh(plan=plan)
    plan.refresh_from_db()
    assert [(st["start"], st["end"]) for st in plan.allocation] == [(0, 12), (12, 24), (24, 48)]
    monkeypatch.setattr(C, "STAGE_GROWTH", 1.5)
    _decide(ann, limit=30)
    plan.refresh_from_db()
    assert [(st["start"], st["end"]) for st in plan.allocation] == [(0, 12), (12, 24), (24, 48), (48, 60)]
    assert CertificationUnit.objects.filter(plan=plan, serve__isnull=False).count() == 60


def test_betting_plan_replays_its_draws_serves_them_first_and_stops_when_certified(tmp_path):
    """The default method: strata at pipelines.review.certify.tail_quantiles, a pilot of pilot x strata
    draws with probabilities in proportion to size, stages queued as reviews come in, the bound
    from pipelines.review.certify.betting_upper on the decided prefix, each draw under its stage's weights."""
    source = queue_with_rows(tmp_path, n=60)
    plan = certification_plan_create(source=source, n_strata=3, pilot=4, target=0.3, confidence=0.9, seed=11)
    assert plan.prior == C.BETTING
    units = list(CertificationUnit.objects.filter(plan=plan).values_list("item_id", "stratum", "draw", "serve"))
    sizes = [s["size"] for s in plan.strata]
    assert len(units) == 60 and sizes == [36, 14, 10]  # finer towards the most ID-like scores
    for h in range(3):
        members = sorted(i for i, s, _d, _v in units if s == h)
        by_draw = [i for i, s, d, _v in sorted(units, key=lambda u: u[2]) if s == h]
        assert by_draw == [members[j] for j in C.draw_order(sizes[h], seed=11, stratum=h)]
    # the pilot: 12 draws whose strata replay from (seed, stream 0), each the next of its stratum's order
    strata = C.draw_strata(sizes=sizes, drawn=[0, 0, 0], base=np.array(sizes) / 60, n=12, seed=11, stream=0)
    served = sorted((v, s, d) for _i, s, d, v in units if v is not None)
    assert [s for _v, s, _d in served] == list(strata)
    assert [d for _v, _s, d in served] == [list(strata[:k]).count(strata[k]) for k in range(12)]
    assert plan.allocation == [{"start": 0, "end": 12, "weights": [36 / 60, 14 / 60, 10 / 60], "sampler": C.SAMPLER}]
    assert plan.sampler == C.SAMPLER == 2
    id_items = {i for i, s, d, _v in units if s == 2 and d < 3}  # three ID images in the top stratum
    ann = _annotator()
    pilot = [next(i for i, _s, _d, v in units if v == k) for k in range(12)]
    seen = _decide(ann, id_items, limit=12)
    assert seen == pilot
    sd = certification_refresh(plan=plan)
    plan.refresh_from_db()
    assert plan.status == CertificationPlan.Status.SAMPLING and len(plan.allocation) == 2
    assert plan.allocation[1]["start"] == 12 and plan.allocation[1]["end"] == 18  # 12 + 12 / 2
    assert AuditLog.objects.filter(action="certification_allocated").exists()
    bound_after_pilot = sd.cert.remainder_share
    seen += _decide(ann, id_items)
    plan.refresh_from_db()
    assert plan.status == CertificationPlan.Status.CERTIFIED, plan.status
    cert = plan.certificate
    assert cert["method_name"] == "betting" and "betting" in cert["method"] and cert["stages"] == plan.allocation
    assert cert["remainder_id_share_bound"] <= 0.3 < bound_after_pilot
    assert review_next(user=_annotator("other"), want=1) == []
    assert ReviewItem.objects.filter(source=source, status=ReviewItem.Status.OPEN).count() == cert["remainder_images"] > 0
    # the certificate's bound is the pipeline's, recomputed from the serving order and the stages
    rows = list(CertificationUnit.objects.filter(plan=plan, serve__isnull=False).order_by("serve")
                .values_list("stratum", "item_id", "item__status"))
    n = cert["reviews_used"]
    lab = np.array([s for s, _i, _st in rows[:n]])
    xs = np.array([int(i in id_items) for _s, i, _st in rows[:n]])
    direct = C.betting_upper(sizes, lab, xs, C.stage_bases(plan.allocation, n, 3), 0.1)
    assert cert["remainder_id_bound"] == direct.total - int(xs.sum())


def test_plan_draw_replays_and_the_sample_is_served_first_then_stops_when_certified(tmp_path):
    """The older method, kept by name: equal-count strata, a pilot per stratum, Neyman after."""
    source = queue_with_rows(tmp_path, n=60)
    plan = certification_plan_create(source=source, n_strata=3, pilot=4, target=0.3, confidence=0.9, seed=11,
                                     method="wor-cs/shared")
    units = list(CertificationUnit.objects.filter(plan=plan).values_list("item_id", "stratum", "draw", "serve"))
    assert len(units) == 60 and [s["size"] for s in plan.strata] == [20, 20, 20]
    # the draw replays from the seed: stratum h's order is pipelines.review.certify.draw_order(seed, h)
    for h in range(3):
        members = sorted(i for i, s, _d, _v in units if s == h)
        by_draw = [i for i, s, d, _v in sorted(units, key=lambda u: u[2]) if s == h]
        assert by_draw == [members[j] for j in C.draw_order(20, seed=11, stratum=h)]
    pilot = [i for i, _s, _d, v in sorted(units, key=lambda u: (u[3] is None, u[3])) if v is not None]
    assert len(pilot) == 12
    # the most ID-like stratum holds some ID images; the annotator cannot tell sample from queue
    id_items = {i for i, s, d, _v in units if s == 2 and d < 2}  # the top stratum's first two draws
    ann = _annotator()
    served = _decide(ann, id_items, limit=12)
    assert served == pilot
    sd = certification_refresh(plan=plan)
    plan.refresh_from_db()
    assert plan.status == CertificationPlan.Status.SAMPLING
    assert AuditLog.objects.filter(action="certification_allocated").exists()
    assert sd.decided_prefix == 12 and sum(sd.reviewed) == 12
    bound_after_pilot = sd.cert.remainder_share
    served += _decide(ann, id_items)
    plan.refresh_from_db()
    assert plan.status == CertificationPlan.Status.CERTIFIED, plan.status
    assert AuditLog.objects.filter(action="certification_certified", target_id=str(plan.pk)).exists()
    cert = plan.certificate
    assert cert["remainder_id_share_bound"] <= 0.3 < bound_after_pilot
    assert cert["seed"] == 11 and len(cert["strata"]) == 3 and cert["reviews_used"] == sum(s["reviewed"] for s in cert["strata"])
    # the certified remainder is not served any more: nothing of the source is left to review
    assert review_next(user=_annotator("other"), want=1) == []
    left = ReviewItem.objects.filter(source=source, status=ReviewItem.Status.OPEN).count()
    assert left == cert["remainder_images"] > 0
    # the bound the page shows is the pipeline's, from the decided prefix of the serving order
    sizes = [s["size"] for s in cert["strata"]]
    direct = C.stratified_upper(sizes, [s["reviewed"] for s in cert["strata"]], [s["id_found"] for s in cert["strata"]], 0.1,
                                covariate=[s["covariate"] for s in plan.strata])
    assert cert["remainder_id_bound"] == direct.remainder


def test_a_conflict_holds_the_bound_until_adjudicated(tmp_path):
    source = queue_with_rows(tmp_path, n=30)
    from curation.services.review import review_settings_save

    review_settings_save(source=source, reviews_required=2)
    plan = certification_plan_create(source=source, n_strata=2, pilot=3, target=0.3, seed=5)
    assert plan.prior == C.BETTING
    a, b = _annotator("a"), _annotator("b")
    first = review_next(user=a, want=1)[0]
    review_submit(user=a, assignment_id=first.pk, decision="ood")
    held = review_next(user=b, want=1)[0]
    assert held.item_id == first.item_id  # the same sample image gets its second review next
    review_submit(user=b, assignment_id=held.pk, decision="id", wnids=[FAKE_TOP5[0][0]])
    sd = certification_refresh(plan=plan)
    assert sd.decided_prefix == 0 and sum(sd.reviewed) == 0  # a conflict: nothing counts past it


def test_refusals_name_the_fix(tmp_path):
    source = queue_with_rows(tmp_path, n=12)
    with pytest.raises(CertificationError, match="target"):
        certification_plan_create(source=source, target=0)
    certification_plan_create(source=source, n_strata=2, pilot=2)
    with pytest.raises(CertificationError, match="close it first"):
        certification_plan_create(source=source)
    with pytest.raises(CommandError, match="unknown source"):
        call_command("certify", "status", "--source", "nope", stdout=io.StringIO())
    out = io.StringIO()
    call_command("certify", "status", "--source", source.name, stdout=out)
    assert "stratum 0" in out.getvalue() and "bound" in out.getvalue()
    call_command("certify", "close", "--source", source.name, stdout=io.StringIO())
    out = io.StringIO()
    call_command("certify", "plan", "--source", source.name, "--strata", "2", "--pilot", "2", "--seed", "3", stdout=out)
    assert "seed 3" in out.getvalue()
    assert np.isfinite(CertificationPlan.objects.filter(source=source).count())


def test_the_page_plans_shows_the_bound_and_keeps_roles(tmp_path):
    from django.test import Client

    from curation.roles import CURATOR

    source = queue_with_rows(tmp_path, n=20)
    cur = user_create_with_role(username="cur", password="pw-cur", role=CURATOR)[0]
    c = Client()
    c.force_login(cur)
    url = f"/curate/certify/{source.pk}/"
    assert c.get(url).status_code == 200
    assert c.post(url, {"strata": "x"}).status_code == 400
    assert c.post(url, {"target": "-1"}).status_code == 400
    for bad in ("-1", "1.5", "x", str(2**48)):
        r = c.post(url, {"strata": "2", "pilot": "3", "target": "20", "seed": bad})
        assert r.status_code == 400 and b"seed must be a whole number" in r.content, bad
    assert not CertificationPlan.objects.filter(source=source).exists()
    r = c.post(url, {"strata": "2", "pilot": "3", "target": "20", "confidence": "0.9", "seed": "41"})
    assert r.status_code == 302 and CertificationPlan.objects.get(source=source).seed == 41
    page = c.get(url).content.decode()
    assert "<svg" in page and "Plan " in page and 'id="cert-strata"' in page
    ann = _annotator()
    a = Client()
    a.force_login(ann)
    assert a.get(url).status_code == 403
    assert a.post(f"{url}close").status_code == 403
    assert c.post(f"{url}close").status_code == 302
    assert CertificationPlan.objects.get(source=source).status == CertificationPlan.Status.CLOSED


def test_a_certified_export_says_what_the_certificate_admitted(tmp_path, settings):
    import csv
    import json
    from pathlib import Path

    from curation.services.exports import ExportRequestError, export_create, export_path, export_run_inline
    from tests.test_exports import random_features

    settings.EXPORT_ROOT = tmp_path / "exports"
    settings.FEATURE_STORE = tmp_path / "features"
    source = queue_with_rows(tmp_path, n=40)
    random_features(source)
    with pytest.raises(ExportRequestError, match="no met certificate"):
        export_create(name="cert", sources=[source], include_certified=True, enqueue=False)
    plan = certification_plan_create(source=source, n_strata=2, pilot=3, target=0.35, confidence=0.9, seed=2)
    _decide(_annotator())
    plan.refresh_from_db()
    assert plan.status == CertificationPlan.Status.CERTIFIED
    reviewed = ReviewItem.objects.filter(source=source, status__in=ReviewItem.FINAL).count()
    plain = export_run_inline(export=export_create(name="plain", sources=[source], enqueue=False))
    assert plain.counts["images"] == reviewed and "certified" not in plain.counts
    # a certificate stands in for the reviews, not for the checks on the image: one unreviewed
    # image a curator excluded after the plan stays out, with its reason
    from curation.models import Image
    left_out = ReviewItem.objects.filter(source=source).exclude(status__in=ReviewItem.FINAL).order_by("pk").first()
    Image.objects.filter(pk=left_out.image_id).update(excluded_reason="a watermark")
    e = export_run_inline(export=export_create(name="cert", sources=[source], include_certified=True, enqueue=False))
    root = Path(export_path(e))
    manifest = json.loads((root / "manifest.json").read_text())
    cert = manifest["certification"]
    assert cert["admitted_by_certificate"] == 39 - reviewed > 0 and cert["admitted_by_review"] == reviewed
    c = cert["certificates"][source.name]
    assert c["seed"] == 2 and c["confidence"] == 0.9 and c["target"] == 0.35 and c["remainder_id_share_bound"] <= 0.35
    assert {"size", "reviewed", "id_found"} <= set(c["strata"][0]) and c["code_version"]
    rows = list(csv.DictReader((root / "decisions.csv").open()))
    by = {r["image_id"]: r["admitted_by"] for r in rows}
    assert sorted(by.values()).count("certificate") == 39 - reviewed and sorted(by.values()).count("review") == reviewed
    assert [r["excluded_reason"] for r in rows if r["image_id"] == str(left_out.image_id)] == ["excluded_by_curator"]
    readme = (root / "README.md").read_text()
    assert f"{39 - reviewed} of the 39 images were admitted by a certificate" in readme and "95%" not in readme
    assert "at any look" in cert["sentence"] and "at most 0.1" in cert["sentence"]  # what the bound guarantees, quoted with it
    assert "README.md" in manifest["files"]
    assert cert["sentence"] in e.counts["certified"]["sentence"]
    # the admin's export form asks for the same (a curator who never uses the command)
    from django.test import Client

    from curation.models import Export
    from curation.roles import CURATOR

    cur = user_create_with_role(username="cur", password="pw-cur", role=CURATOR)[0]
    cur.is_staff = True  # the admin's pages
    cur.save()
    client = Client()
    client.force_login(cur)
    assert b"include_certified" in client.get("/admin/curation/export/add/").content
    form = {"kind": "dataset", "name": "cert-web", "split": "test", "sources": [source.pk], "min_per_class": 1, "layouts": ["ninco"],
            "include_certified": "on", "seed": 0, "per_test": 400}
    r = client.post("/admin/curation/export/add/", form)
    assert r.status_code == 302 and r["Location"].endswith("/admin/curation/export/"), r.content[-2000:]
    web = Export.objects.get(name="cert-web")
    assert web.config.get("include_certified") is True


def test_a_draw_leased_by_someone_who_left_is_named_and_a_curator_hands_it_back(tmp_path):
    """Issue 50's finding: reviews count only in serving order, so a sampled image leased by a
    person who walked away holds the bound at the decided prefix while the queue serves everyone
    else other images. The page names the draw, who holds it and until when; a curator's button
    ends those leases; the next annotator gets the draw; the holder's late decision still counts."""
    from django.test import Client

    from curation.roles import CURATOR
    from curation.services.certification import certification_holds

    source = queue_with_rows(tmp_path, n=40)
    plan = certification_plan_create(source=source, n_strata=2, pilot=3, target=0.3, seed=7)
    gone, a = _annotator("gone"), _annotator("a")
    left = review_next(user=gone, want=2)  # the screen's prefetch: the first two draws, then the tab is closed
    first_two = CertificationUnit.objects.filter(plan=plan, serve__in=[0, 1]).values_list("item_id", flat=True)
    assert {x.item_id for x in left} == set(first_two)
    served = _decide(a, limit=4)
    assert not set(served) & set(first_two)
    sd = certification_refresh(plan=plan)
    assert sd.decided_prefix == 0 and sd.waiting >= 2
    holds = certification_holds(plan=plan, limit=3)
    assert [h.why for h in holds[:2]] == ["leased", "leased"] and holds[0].holders[0][0] == "gone"

    cur = user_create_with_role(username="cur", password="pw-cur", role=CURATOR)[0]
    c, other = Client(), Client()
    c.force_login(cur)
    other.force_login(a)
    url = f"/curate/certify/{source.pk}/"
    page = c.get(url).content.decode()
    assert 'id="cert-holds"' in page and "leased to gone " in page and " ago (until " in page and 'id="cert-release"' in page
    assert other.post(f"{url}release").status_code == 403  # annotators cannot
    assert ReviewItem.objects.filter(pk__in=list(first_two), leased=1).count() == 2
    r = c.post(f"{url}release")
    assert r.status_code == 302
    assert ReviewItem.objects.filter(pk__in=list(first_two), leased=0).count() == 2
    assert AuditLog.objects.filter(action="review_leases_released", data__held_by=["gone"]).exists()
    nxt = review_next(user=a, want=1)[0]
    assert nxt.item_id == min(first_two, key=lambda i: CertificationUnit.objects.get(plan=plan, item_id=i).serve)
    review_submit(user=a, assignment_id=nxt.pk, decision="ood")
    review_submit(user=gone, assignment_id=left[1].pk, decision="ood")  # sent after the release: it still counts
    sd = certification_refresh(plan=plan)
    assert sd.decided_prefix >= 2 + len(served)
    page = c.get(url).content.decode()
    assert "leased to gone" not in page


def test_a_plan_reads_the_queue_as_columns_and_writes_its_units_a_slice_at_a_time(tmp_path, monkeypatch):
    """Issue 45: a plan over ImageNet-21K's ~9 million undecided images held every item and
    score as Python tuples and a dict, and every unit as an object at once (about 8 GB). Now the
    queue and scores come as arrays, no ReviewItem object is made, and units go in slices."""
    from curation.models import ImageEmbedding
    from curation.services import certification as cert_service

    source = queue_with_rows(tmp_path, n=60)
    made: list[int] = []
    real_init = ReviewItem.__init__

    def counting_init(self, *a, **kw):
        made.append(1)
        real_init(self, *a, **kw)

    batches: list[int] = []
    real_bulk = CertificationUnit.objects.bulk_create

    def recording_bulk(objs, *a, **kw):
        objs = list(objs)
        batches.append(len(objs))
        return real_bulk(objs, *a, **kw)

    monkeypatch.setattr(ReviewItem, "__init__", counting_init)
    monkeypatch.setattr(CertificationUnit.objects, "bulk_create", recording_bulk)
    monkeypatch.setattr(cert_service, "READ_SLICE", 7)  # the slices of a huge pool, on a small one
    monkeypatch.setattr(cert_service, "UNIT_SLICE", 7)
    plan = certification_plan_create(source=source, n_strata=3, pilot=2, target=0.3, seed=11)
    assert not made
    from django.db import connection
    if connection.vendor != "postgresql":  # PostgreSQL writes units by COPY from arrays: tests/test_scale_certification.py
        assert batches and max(batches) <= 7 and sum(batches) == 60
    assert CertificationUnit.objects.filter(plan=plan).count() == 60
    # the same draws as the plan a second time with the same seed (the replay)
    first = list(CertificationUnit.objects.filter(plan=plan).order_by("stratum", "draw").values_list("item_id", "serve"))
    certification_close(plan=plan)
    again = certification_plan_create(source=source, n_strata=3, pilot=2, target=0.3, seed=11)
    assert list(CertificationUnit.objects.filter(plan=again).order_by("stratum", "draw").values_list("item_id", "serve")) == first
    # an image without the score is named, as before
    ImageEmbedding.objects.filter(image_id=ReviewItem.objects.filter(source=source).values_list("image_id", flat=True)[:1]).delete()
    certification_close(plan=again)
    with pytest.raises(CertificationError, match="1 queued images of .* have no"):
        certification_plan_create(source=source, n_strata=3, pilot=2, target=0.3, seed=11)

