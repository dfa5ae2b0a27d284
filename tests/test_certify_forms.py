"""The certify form (issue 47, rows 1 and 4) and the sampler a plan records (issue 50).

Row 1: three curators, each logged in with their own client and database connection, POST a
valid new plan for the same source at the same moment. One plan is made; the others are
refused with a message (409), never a 500 from the one-open-plan-per-source constraint.

Row 4: every number of the form goes through the app's one rule (labeling_ui.http): Unicode
digits, floats where a whole number is asked, underscores, spaces, inf and nan answer 400 and
write nothing.
"""
from __future__ import annotations

import threading
import time

import numpy as np
import pytest
from django.db import connection
from django.test import Client

from curation.models import AuditLog, CertificationPlan, CertificationUnit
from curation.roles import ANNOTATOR, CURATOR
from curation.services.certification import (
    certification_cache_clear,
    certification_plan_create,
    certification_refresh,
    certification_replays,
    stage_samplers,
)
from curation.services.review import review_cache_clear, review_next, review_submit
from curation.services.users import user_create_with_role
from labeling_ui.http import decimal_number
from pipelines.review import certify as C
from tests.review_data import queue_with_rows

PLAN = {"strata": "2", "pilot": "3", "target": "20", "confidence": "0.9"}


def _curator_client(name: str) -> Client:
    user_create_with_role(username=name, password=f"{name}-pw-12345", role=CURATOR)
    c = Client(raise_request_exception=False)  # a server error is a 500 answer here, as a browser sees it
    assert c.login(username=name, password=f"{name}-pw-12345")
    return c


@pytest.mark.django_db(transaction=True)
def test_three_curators_planning_at_once_get_one_plan_and_two_refusals(tmp_path, role_groups, monkeypatch):
    source = queue_with_rows(tmp_path, n=30)
    clients = [_curator_client(f"cur{k}") for k in range(3)]
    url = f"/curate/certify/{source.pk}/"
    # widen the window between the "already open?" check and the insert (the stratification runs
    # between them): every request passes the early check before any of them commits
    real = C.stratify_quantiles

    def slow(*a, **k):
        time.sleep(0.5)
        return real(*a, **k)

    monkeypatch.setattr(C, "stratify_quantiles", slow)
    start = threading.Barrier(3, timeout=30)
    answers: list = [None] * 3
    errors: list = []

    def post(i: int) -> None:
        try:
            start.wait()
            answers[i] = clients[i].post(url, {**PLAN, "seed": str(10 + i)})
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=post, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(90)
    assert not errors, errors
    codes = sorted(a.status_code for a in answers)
    assert codes == [302, 409, 409], [(a.status_code, a.content[:300]) for a in answers]
    for a in answers:
        if a.status_code == 409:
            assert b"open certification plan" in a.content
    plans = list(CertificationPlan.objects.filter(source=source))
    assert len(plans) == 1 and plans[0].status == CertificationPlan.Status.PILOT
    winner = answers.index(next(a for a in answers if a.status_code == 302))
    assert plans[0].seed == 10 + winner
    assert AuditLog.objects.filter(action="certification_planned").count() == 1
    assert CertificationUnit.objects.filter(plan=plans[0]).count() == 30


@pytest.mark.django_db
@pytest.mark.parametrize("field, value", [
    ("seed", "１２"), ("seed", "٣"), ("seed", "1_2"), ("seed", "+12"), ("seed", "12.0"), ("seed", " 12"),
    ("strata", "4.7"), ("strata", "２"), ("strata", "2_0"), ("strata", "2e0"),
    ("pilot", "1_0"), ("pilot", "٣"), ("pilot", "3.0"), ("pilot", " 3"),
    ("target", "2_0"), ("target", "٢٠"), ("target", "inf"), ("target", "nan"), ("target", "+20"), ("target", "20 "),
    ("confidence", "0.9_0"), ("confidence", "٠.٩"), ("confidence", "NaN"), ("confidence", "1e999"),
    ("full_top", "0_0"), ("full_top", "−0.1"),
])
def test_the_form_takes_numbers_by_the_apps_one_rule(tmp_path, field, value):
    source = queue_with_rows(tmp_path, n=12)
    user_create_with_role(username="cur", password="pw-cur-12345", role=CURATOR)
    c = Client()
    assert c.login(username="cur", password="pw-cur-12345")
    r = c.post(f"/curate/certify/{source.pk}/", {**PLAN, "seed": "12", field: value})
    assert r.status_code == 400, (field, value, r.status_code)
    assert r.content.decode().startswith(f"{field} must be"), r.content
    assert not CertificationPlan.objects.exists() and not AuditLog.objects.filter(action="certification_planned").exists()
    # and the same form with plain ASCII numbers makes the plan
    ok = c.post(f"/curate/certify/{source.pk}/", {**PLAN, "seed": "12", "full_top": "0"})
    assert ok.status_code == 302 and CertificationPlan.objects.get().seed == 12


def test_the_decimal_rule():
    assert decimal_number("0.5", "x", lo=0, hi=1) == 0.5
    assert decimal_number(".5", "x", lo=0, hi=1) == 0.5
    assert decimal_number("1e-3", "x", lo=0, hi=1) == 0.001
    assert decimal_number("-0.25", "x", lo=-1, hi=1) == -0.25
    assert decimal_number(3, "x", lo=0, hi=5) == 3.0
    for bad in ("1_0", "٣", "１", "inf", "-inf", "nan", "1.", "+1", " 1", "1 ", "", "0x1", "1e999", True, None, [1]):
        with pytest.raises(ValueError, match="^x must be"):
            decimal_number(bad, "x", lo=-10, hi=10)
    with pytest.raises(ValueError, match="between"):
        decimal_number("11", "x", lo=0, hi=10)


def _decide_all(user, limit):
    for _ in range(limit):
        held = review_next(user=user, want=1)
        if not held:
            return
        review_submit(user=user, assignment_id=held[0].pk, decision="ood")


@pytest.mark.django_db
def test_a_plan_drawn_by_the_old_sampler_keeps_its_order_and_goes_on_with_the_new(tmp_path, settings):
    """A plan made before issue 50 (sampler 1, what the migration gives stored plans) replays
    its stored order from its seed with sampler 1; its next stages are drawn by sampler 2 and say
    so; the plan page names both. A new plan is sampler 2 throughout."""
    settings.REVIEW_RECLAIM_EVERY = 0
    review_cache_clear()
    certification_cache_clear()
    source = queue_with_rows(tmp_path, n=60)
    plan = certification_plan_create(source=source, n_strata=3, pilot=4, target=0.01, confidence=0.9, seed=11, sampler=1)
    assert plan.sampler == 1 and stage_samplers(plan) == [1]
    sizes = [s["size"] for s in plan.strata]
    units = list(CertificationUnit.objects.filter(plan=plan).values_list("item_id", "stratum", "draw", "serve"))
    for h in range(3):  # the stratum orders of the shipped code: default_rng([seed, h])
        members = sorted(i for i, s, _d, _v in units if s == h)
        by_draw = [i for i, s, d, _v in sorted(units, key=lambda u: u[2]) if s == h]
        assert by_draw == [members[j] for j in C.draw_order(sizes[h], seed=11, stratum=h, sampler=1)]
    pilot = C.draw_strata(sizes=sizes, drawn=[0, 0, 0], base=np.array(sizes) / 60, n=12, seed=11, stream=0, sampler=1)
    assert [s for _v, s in sorted((v, s) for _i, s, _d, v in units if v is not None)] == list(pilot)
    assert certification_replays(plan=plan)
    ann = user_create_with_role(username="ann", password="pw-ann-12345", role=ANNOTATOR)[0]
    _decide_all(ann, 12)
    certification_refresh(plan=plan)
    _decide_all(ann, 5)
    certification_refresh(plan=plan)
    plan.refresh_from_db()
    assert len(plan.allocation) >= 3 and stage_samplers(plan)[0] == 1 and set(stage_samplers(plan)[1:]) == {2}
    assert certification_replays(plan=plan)
    # a stored order that its seed does not give is caught
    a, b = CertificationUnit.objects.filter(plan=plan, stratum=0).order_by("draw")[:2]
    CertificationUnit.objects.filter(pk=a.pk).update(draw=b.draw)
    CertificationUnit.objects.filter(pk=b.pk).update(draw=a.draw)
    assert not certification_replays(plan=plan)
    user_create_with_role(username="cur", password="pw-cur-12345", role=CURATOR)
    c = Client()
    assert c.login(username="cur", password="pw-cur-12345")
    page = c.get(f"/curate/certify/{source.pk}/").content.decode()
    assert 'id="cert-sampler"' in page and "sampler 1" in page and "later stages use sampler 2" in page
    assert "at any look" in page and "at most 0.1" in page
    c.post(f"/curate/certify/{source.pk}/close")
    assert c.post(f"/curate/certify/{source.pk}/", {**PLAN, "seed": "5"}).status_code == 302
    new = CertificationPlan.objects.filter(source=source).latest("created_at")
    assert new.sampler == 2 and stage_samplers(new) == [2] and certification_replays(plan=new)
    page = c.get(f"/curate/certify/{source.pk}/").content.decode()
    assert 'data-sampler="2"' in page and "sampler 2: every draw" in page
