"""Certification in Debian's headless Chromium at 1366x768 (issue 37): a curator plans a
certification of a source whose predictions come from the real offline model, an annotator
reviews the sample on the ordinary review screen (blind: nothing marks it), the curator watches
the bound fall to the target, and the export carries the certificate."""
from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest
from django.core.management import call_command

from curation.models import AuditLog, CertificationPlan, CertificationUnit, Export
from curation.roles import ANNOTATOR, CURATOR
from curation.services.certification import certification_cache_clear
from curation.services.exports import export_path
from curation.services.review import review_cache_clear
from curation.services.users import user_create_with_role
from tests.conftest import SHOTS, browser_login
from tests.review_data import queue_with_real_model

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def pool(tmp_path, settings, role_groups):
    settings.THUMBNAIL_DIR = tmp_path / "thumbs"
    settings.EXPORT_ROOT = tmp_path / "exports"
    settings.FEATURE_STORE = tmp_path / "features"
    settings.REVIEW_RECLAIM_EVERY = 0  # plans move on at the next lease
    review_cache_clear()
    certification_cache_clear()
    source = queue_with_real_model(tmp_path, n=30)
    user_create_with_role(username="ann", password="ann-pw", role=ANNOTATOR)
    user_create_with_role(username="cur", password="cur-pw", role=CURATOR)
    return source


def _bound(page) -> float:
    return float(page.get_attribute("[data-bound]", "data-bound"))


def _fits(page):
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= 1366, f"sideways scroll: {width}px"


def test_plan_review_the_sample_watch_the_bound_fall_and_export_with_the_certificate(pool, live_server, browser):
    ctx = browser.new_context(viewport={"width": 1366, "height": 768})
    cur = ctx.new_page()
    errors = []
    cur.on("pageerror", lambda e: errors.append(str(e)))
    url = f"{live_server.url}/curate/certify/{pool.pk}/"
    browser_login(cur, live_server.url, "cur", f"/curate/certify/{pool.pk}/")
    # each field named above its box (issue 31 as walked: inline, "seed" ended one line and its box began the next)
    for name in ("score", "method", "strata", "pilot", "target", "confidence", "seed"):
        label, box = cur.locator(f"#cert-plan label:has([name={name}])").bounding_box(), cur.locator(f"#cert-plan [name={name}]").bounding_box()
        assert box["y"] >= label["y"] + 8 and abs(box["x"] - label["x"]) < 2, (name, label, box)
    cur.fill("#cert-plan input[name=strata]", "2")
    cur.fill("#cert-plan input[name=pilot]", "3")
    cur.fill("#cert-plan input[name=target]", "25")
    cur.fill("#cert-plan input[name=confidence]", "0.9")
    # A chosen seed: the draws replay. With every answer `ood`, how soon a 31-image pool of two
    # strata certifies depends only on the seed's order of strata: under sampler 2 (issue 50),
    # 19 to 27 reviews over seeds 0-39 (sampler 1: 19 to 31); seed 3 certifies at 19.
    cur.fill("#cert-plan input[name=seed]", "3")
    with cur.expect_navigation():
        cur.click("#cert-plan button")
    cur.wait_for_selector("#cert-status")
    assert "pilot" in cur.inner_text("#cert-status")
    assert cur.locator("#cert-plot svg").count() == 1
    _fits(cur)
    plan = CertificationPlan.objects.get(source=pool)
    assert plan.seed == 3 and cur.inner_text("[data-seed]") == "3"
    assert plan.sampler == 2 and "sampler 2" in cur.inner_text("#cert-sampler")
    assert "at any look" in cur.inner_text("#cert-guarantee")
    serving = list(CertificationUnit.objects.filter(plan=plan, serve__isnull=False).order_by("serve")
                   .values_list("item__image_id", flat=True))
    assert len(serving) == 6
    first_bound = _bound(cur)

    # the annotator reviews on the ordinary screen; the pilot comes first, in the plan's order
    annp = browser.new_context(viewport={"width": 1366, "height": 768}).new_page()
    annp.on("pageerror", lambda e: errors.append(str(e)))
    browser_login(annp, live_server.url, "ann", "/review/screen/")
    seen = []
    for k in range(40):
        annp.wait_for_function("document.querySelector('#photo')?.dataset.image || !document.querySelector('#empty').hidden")
        if not annp.locator("#empty").is_hidden():
            break
        image = int(annp.get_attribute("#photo", "data-image"))
        seen.append(image)
        annp.keyboard.press("o")
        annp.wait_for_function(f"document.querySelector('#status').textContent.includes('{k + 1} reviewed this session')")
        if k == 5:
            assert seen == serving  # the pilot, in serving order, on the same screen as any image
            cur.goto(url)
            after_pilot = _bound(cur)
            assert after_pilot < first_bound
            cur.screenshot(path=str(SHOTS / "certify-1366x768.png"))
    plan.refresh_from_db()
    assert plan.status == CertificationPlan.Status.CERTIFIED, plan.status
    assert len(seen) < 31  # certified before the whole pool was reviewed; the queue stopped serving the rest
    cur.goto(url)
    assert "certified" in cur.inner_text("#cert-status")
    assert _bound(cur) <= 0.25 < after_pilot
    assert "at most" in cur.inner_text("#cert-quote")
    assert "--include-certified" in cur.inner_text("#cert-export")
    _fits(cur)
    cur.screenshot(path=str(SHOTS / "certify-certified-1366x768.png"))
    assert AuditLog.objects.filter(action="certification_certified").count() == 1

    call_command("export", "--name", "certified", "--source", pool.name, "--include-certified", stdout=io.StringIO(),
                 stderr=io.StringIO())
    export = Export.objects.get(name="certified")
    assert export.status == Export.Status.DONE, export.message
    root = Path(export_path(export))
    manifest = json.loads((root / "manifest.json").read_text())
    c = manifest["certification"]["certificates"][pool.name]
    assert c["confidence"] == 0.9 and c["target"] == 0.25 and c["seed"] == plan.seed
    assert c["remainder_id_share_bound"] <= 0.25 and c["reviews_used"] >= 6
    admitted = manifest["certification"]["admitted_by_certificate"]
    assert admitted > 0
    rows = list(csv.DictReader((root / "decisions.csv").open()))
    assert sum(r["admitted_by"] == "certificate" for r in rows) == admitted
    cur.goto(f"{live_server.url}/exports/")
    assert f"{admitted} of the" in cur.inner_text("[data-certified]")
    _fits(cur)
    assert not errors, errors
