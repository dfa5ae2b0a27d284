"""The README's first command, minus set-up: the demo job on the embedded default (SQLite,
eager Celery), then the served web app, logged into in headless Chromium."""
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.slow
DEMO_DEADLINE_S = 1200


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def demo_server(tmp_path_factory):
    data = tmp_path_factory.mktemp("demo")
    # what the README's command runs: the default model (efficientnet_lite2), not the fast tests' Lite0
    env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "CELERY_BROKER_URL", "OODC_MODEL"}}
    env.update({"OODC_DATA_DIR": str(data), "NLTK_DATA": str(REPO / "var" / "nltk_data"), "PYTHONUNBUFFERED": "1"})
    subprocess.run([sys.executable, "manage.py", "migrate", "--noinput", "-v", "0"], cwd=REPO, env=env, check=True, timeout=300)
    port = _free_port()
    log = open(data / "demo.log", "w")
    proc = subprocess.Popen([sys.executable, "manage.py", "demo", "--addr", f"127.0.0.1:{port}"], cwd=REPO, env=env,
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    # a bound on a hang, not a timing: the demo takes about 5 min alone on 2 cores, and in the suite
    # it shares them with the other process's tests (a fresh-clone run passed 600 s, 2026-11-28)
    deadline = time.monotonic() + DEMO_DEADLINE_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"demo exited with {proc.returncode}:\n{(data / 'demo.log').read_text()[-4000:]}")
        try:
            urllib.request.urlopen(f"{url}/healthz", timeout=2)
            break
        except OSError:
            time.sleep(0.5)
    else:
        # the demo goes on past a failed fixture unless stopped here (teardown runs only after yield)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=20)
        pytest.fail(f"demo did not serve within {DEMO_DEADLINE_S} s:\n{(data / 'demo.log').read_text()[-4000:]}")
    yield url, data
    proc.terminate()
    proc.wait(timeout=20)


def test_demo_ingests_the_bundled_data_and_prints_accounts(demo_server):
    _url, data = demo_server
    out = (data / "demo.log").read_text()
    assert (data / "db.sqlite3").is_file()  # the embedded default, not the test's PostgreSQL
    for line in ("demo-candidates", "demo-id", "annotator   password: annotator-demo", "curator     password: curator-demo",
                 "researcher  password: researcher-demo", "[decompression_bomb] misc_uploads/bomb.png",
                 "[path_escapes_root] misc_uploads/escapes_root.jpg", "misc_uploads: no WordNet noun has this name"):
        assert line in out, line
    assert "broken=8" in out and "duplicate=1" in out
    # real photos: the ID classes chosen by the model's measured accuracy, printed per class
    chosen = re.search(r"ID classes: (\d+) of the (\d+) ImageNet-1K classes among the cut-outs, where efficientnet_lite2 is right", out)
    assert chosen and int(chosen.group(1)) >= 20, chosen
    per_class = []
    for line in out.split("efficientnet_lite2's accuracy per ID class on the ID test set (6 images each):\n")[1].splitlines():
        if not line.startswith("    "):
            break
        per_class += re.findall(r"(\d+)%", line)
    assert len(per_class) == int(chosen.group(1))
    # the class filter step ran on the candidates with the demo's policy and wrote its CSV
    assert "Class filter run #1: 236 candidates (source:demo-candidates)" in out and re.search(r"keep 27   flag 35 \(\d+ strong, \d+ weak\)   remove 174", out)
    assert (data / "demo" / "class_filter_decisions.csv").read_text().count("\n") == 237
    # the model ran only on the classes the filter did not remove; the review queue is built
    assert "6/10 Review queue" in out and "demo-candidates: 162 images to review" in out and "1048 class_removed" in out
    recorded = re.search(r"recorded: (\d+) id, (\d+) ood; 6 image\(s\) of class folder n04487996 skipped, left in the queue", out)
    assert recorded, out[-3000:]
    # what was planted, and what the review caught: every planted object it met is recorded as id, none is exported
    planted = re.search(r"planted ID objects: (\d+): (\d+) in classes the filter removed, (\d+) in classes it flagged for a "
                        r"curator, (\d+) reviewed: (\d+) recorded as id, (\d+) still open; 0 in the export", out)
    assert planted, out[-3000:]
    n, removed, flagged, reviewed, as_id, still_open = map(int, planted.groups())
    assert n >= 30 and removed + flagged + reviewed <= n and reviewed >= 5 and as_id + still_open == reviewed
    assert as_id == int(recorded.group(1))  # the stand-in meets no ID object the demo did not plant
    # a few of its decisions are gold, served to people at the demo's rate
    assert "gold: 4 decided images with an ID object and 4 without now check annotators, served as 10% of their images" in out
    # ... and ends with an export of the clean images and a small unit-test set, both verifiable
    exported = re.search(r"(\d+) images in (\d+) classes; excluded: class_visual_flag_unresolved \d+, final_id (\d+), review_open \d+", out)
    assert exported and int(exported.group(1)) >= 100 and int(exported.group(2)) >= 20 and int(exported.group(3)) == as_id
    export = data / "exports" / "demo-clean" / "v1"
    assert f"Wrote {export}" in out and "85 unit-test images (17 tests) written to" in out
    for folder in (export, data / "exports" / "demo-unit-tests" / "v1"):
        check = subprocess.run([sys.executable, "manage.py", "verify_export", str(folder)], capture_output=True, text=True,
                               env=_demo_env(data), cwd=REPO, timeout=120)
        assert check.returncode == 0 and "OK:" in check.stdout, check.stderr
    assert "annotator2  password: annotator2-demo" in out and "/review/ (log in as annotator or annotator2)" in out
    # ... and with an evaluation run of the detectors (the input-level ones left out), whose URL it prints
    assert re.search(r"evaluation #1: efficientnet_lite2 x \d+ detectors on demo-clean-v1 \+ demo-unit-tests-v1", out)
    # the bar: ID accuracy >= 80% over 20+ real ID classes with Lite2, MSP AUROC >= 80 on the clean export
    accuracy = re.search(r"efficientnet_lite2: ID accuracy ([\d.]+)% on (\d+) labelled ID test images", out)
    msp_auroc = float(re.search(r"\n  MSP +([\d.]+) ", out).group(1))
    assert float(accuracy.group(1)) >= 80 and int(accuracy.group(2)) == 6 * int(chosen.group(1)) and msp_auroc >= 80, (accuracy, msp_auroc)
    for line in ("ID accuracy: the share of ID test images", "AUROC: the chance that a random ID image", "demo data: ",
                 "(input-level: passes of their own over every image)", "full: python manage.py evaluate --export demo-clean",
                 "researcher: browses the images (/curate/images/), runs and reads evaluations", "Look at the data:"):
        assert line in out, line
    assert f"Evaluation results: {_url}/evaluations/1/" in out
    # covariate shift: corrupted copies of the ID test set, reported three ways, and the random-weight check
    assert "source demo-id-test-c-gaussian_noise-5: gaussian_noise at severity 5 of demo-id-test" in out
    assert "shifted ID set source:demo-id-test-c-defocus_blur-5: ID accuracy" in out
    assert "random-weight sanity check (RANDOM WEIGHTS (sanity check only): resnet18" in out
    for label in ("MSP", "Mahalanobis", "Relative Mahalanobis", "ViM", "KNN", "ReAct + Energy", "ASH-S + Energy", "MCM / RCos"):
        assert f"\n  {label} " in out, label
    assert "failed:" not in out  # every detector ran
    assert "KNN: k=1000 is more than the 240 ID fit images; used k=240" in out
    assert "need at least |Y_ID| = 1000 OOD classes" in out


def _demo_env(data):
    return {**{k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "CELERY_BROKER_URL", "OODC_MODEL"}}, "OODC_DATA_DIR": str(data),
            "NLTK_DATA": str(REPO / "var" / "nltk_data")}


def test_a_rerun_reuses_cached_outputs_and_a_failing_run_says_why(demo_server):
    import json

    _url, data = demo_server
    args = [sys.executable, "manage.py", "evaluate", "--export", "demo-clean", "--unit-tests", "demo-unit-tests",
            "--id-test", "source:demo-id-test", "--id-fit", "source:demo-id-fit", "--sanity-seeds", "0", "--methods", "msp,mahalanobis,energy"]
    started = time.monotonic()
    again = subprocess.run(args, capture_output=True, text=True, env=_demo_env(data), cwd=REPO, timeout=300)
    assert again.returncode == 0, again.stderr
    assert time.monotonic() - started < 60  # nothing extracted again: every output is cached
    dump = subprocess.run([sys.executable, "manage.py", "shell", "-c",
                           "from curation.models import *; import json; print(json.dumps([[r.pk, r.job.total, r.results] for r in "
                           "EvaluationRun.objects.order_by('pk')]))"], capture_output=True, text=True, env=_demo_env(data), cwd=REPO,
                          timeout=120)
    runs = json.loads(dump.stdout.strip().splitlines()[-1])
    first, second = runs[0], runs[-1]
    assert second[1] == 0  # no image went through the model again
    for det in ("msp", "mahalanobis", "energy"):
        assert second[2]["models"]["efficientnet_lite2"]["detectors"][det]["pooled"] == \
            first[2]["models"]["efficientnet_lite2"]["detectors"][det]["pooled"]
    bad = subprocess.run([*args[:-2], "--methods", "msp", "--models", "no_such_net"], capture_output=True, text=True,
                         env=_demo_env(data), cwd=REPO, timeout=300)
    assert bad.returncode != 0 and "unknown model 'no_such_net'" in bad.stderr


@pytest.mark.browser
def test_curator_logs_in_and_sees_the_sources(demo_server, tmp_path):
    from playwright.sync_api import sync_playwright

    url, _data = demo_server
    shots = Path(os.environ.get("OODC_SCREENSHOTS", REPO / "var" / "screenshots"))
    shots.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=[
            "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
            "--disable-component-update", "--disable-sync"])
        page = browser.new_page(viewport={"width": 1366, "height": 768})
        page.goto(f"{url}/")
        assert "/accounts/login/" in page.url
        page.fill("#id_username", "curator")
        page.fill("#id_password", "wrong")
        page.keyboard.press("Enter")
        page.wait_for_selector(".error")
        page.fill("#id_username", "curator")
        page.fill("#id_password", "curator-demo")
        page.keyboard.press("Enter")
        page.wait_for_selector("#sources")
        rows = page.locator("#sources tbody tr").all_inner_texts()
        assert any("demo-candidates" in r and "1437" in r.replace(",", "") for r in rows), rows  # every file, the refused symlink too
        page.screenshot(path=str(shots / "home_curator_1366x768.png"), full_page=True)
        page.goto(f"{url}/admin/curation/image/?status__exact=broken")
        assert page.locator("#result_list tbody tr").count() == 8
        page.screenshot(path=str(shots / "admin_broken_images.png"))

        # the class filter's report, reached from the home page
        page.goto(f"{url}/")
        page.click("#class-filter-runs tbody tr a")
        page.wait_for_selector("#rules")
        assert page.inner_text("#decision-counts").split("Download")[0].split() == ["keep", "27", "flag", "35", "remove", "174"]
        strong = page.locator("#flagged tbody tr:not(.empty)").count()
        weak = page.locator("#flagged-weak tbody tr:not(.empty)").count()
        assert strong + weak == 35 and strong >= 1  # ranked: strong flags listed, weak ones collapsed
        assert not page.is_visible("#flagged-weak") or weak == 0
        page.screenshot(path=str(shots / "class_filter_report.png"), full_page=True)
        # resolve the flags in bulk from the admin, through the action's confirmation page
        page.click("text=Resolve flags in the admin")
        page.wait_for_selector("#result_list")
        assert page.locator("#result_list tbody tr").count() == 35
        page.check("#action-toggle")
        page.select_option("select[name=action]", "resolve_keep")
        page.click("button[name=index]")
        page.wait_for_selector("textarea[name=note]")
        page.fill("textarea[name=note]", "looked at them: fine")
        page.click("input[name=apply]")
        page.wait_for_selector(".messagelist")
        assert "35 flagged class(es) resolved: keep" in page.inner_text(".messagelist")
        page.goto(f"{url}/class-filter/1/")
        assert page.inner_text("#decision-counts").split("Download")[0].split() == ["keep", "62", "flag", "0", "remove", "174"]
        assert page.locator("#resolved tbody tr").count() == 35
        # the class-level screen: the planet Mars, which the model calls a croquet ball, with its sample images
        page.goto(f"{url}/curate/classes/")
        cards = page.locator(".flagged-class").count()
        card = page.locator(".flagged-class[data-folder=n09347445]")
        assert "croquet ball" in card.inner_text() and card.locator(".thumbs img").count() == 6
        page.screenshot(path=str(shots / "flagged_classes.png"), full_page=True)
        card.locator("input[name=note]").fill("the planet, not a ball")
        card.locator("button[value=accept]").click()
        page.wait_for_function(f"document.querySelectorAll('.flagged-class').length == {cards - 1}")
        assert page.locator(".flagged-class[data-folder=n09347445]").count() == 0
        # the curator finds the demo export and downloads it
        page.goto(f"{url}/exports/")
        row = page.locator("#exports tr[data-export=demo-clean-v1]")
        assert "Done" in row.inner_text() or "done" in row.inner_text()
        with page.expect_download() as dl:
            row.locator("a", has_text=".zip").first.click()
        import zipfile

        with zipfile.ZipFile(dl.value.path()) as zf:
            assert "demo-clean-v1/manifest.json" in zf.namelist() and len(zf.namelist()) > 300
        page.screenshot(path=str(shots / "exports_1366x768.png"), full_page=True)
        # a researcher reads the evaluation: the page's figures are the CSV's, the plots load, tables sort
        res = browser.new_context(viewport={"width": 1366, "height": 900}, accept_downloads=True).new_page()
        res.goto(f"{url}/accounts/login/?next=/evaluations/1/")
        res.fill("#id_username", "researcher")
        res.fill("#id_password", "researcher-demo")
        res.keyboard.press("Enter")
        res.wait_for_selector("table.results")
        assert res.inner_text("#run-status").lower() == "done"
        with res.expect_download() as dl:
            res.click("#csv-link")
        import csv as _csv

        rows = list(_csv.DictReader(open(dl.value.path(), encoding="utf-8")))
        pooled = {r["detector"]: r for r in rows if r["group"] == "pooled"}
        mean = {r["detector"]: r for r in rows if r["group"] == "mean_over_classes"}
        assert len(pooled) >= 25  # every registered detector but the input-level ones
        for det, r in pooled.items():
            row = res.locator(f"table.results tr[data-detector={det}]")
            assert row.locator("[data-metric=auroc]").inner_text() == f"{100 * float(r['auroc']):.1f}", det
            assert row.locator("[data-metric=fpr95_id_positive]").inner_text() == f"{100 * float(r['fpr95_id_positive']):.1f}", det
            assert row.locator("[data-metric=fpr95_ood_positive]").inner_text() == f"{100 * float(r['fpr95_ood_positive']):.1f}", det
            assert row.locator("[data-metric=mean_class_fpr]").inner_text() == f"{100 * float(mean[det]['fpr95_id_positive']):.1f}", det
            failed = sum(1 for x in rows if x["detector"] == det and x["set"] == "unit_test" and x["unit_test_failed"] == "True")
            assert row.locator("[data-metric=unit_tests_failed]").inner_text() == f"{failed} / 17", det
        per_class = [r for r in rows if r["detector"] == "mahalanobis" and r["set"] == "ood" and r["group"].startswith("n")]
        assert res.locator("table.per-class tbody tr").count() == len(per_class) >= 20
        for r in per_class:
            cell = res.locator(f"table.per-class tr[data-wnid={r['group']}] td[data-detector=mahalanobis]")
            assert cell.inner_text() == f"{100 * float(r['fpr95_id_positive']):.1f}"
        assert res.locator("table.unit-tests tbody tr").count() == 17
        assert "1000 OOD classes" in res.inner_text("#severity-message")
        for img in ("#cdf-1", "#bars-1"):
            assert res.eval_on_selector(img, "el => el.complete && el.naturalWidth > 100"), img
        res.select_option("select[data-bars]", label="Mahalanobis")
        res.wait_for_function("document.querySelector('#bars-1').src.includes('bars_mahalanobis.svg')")
        # sorting the per-class table by Mahalanobis's FPR puts the smallest first
        header = res.locator("table.per-class thead th", has_text="Mahalanobis").first
        header.click()
        values = [float(v) for v in res.locator("table.per-class td[data-detector=mahalanobis]").all_inner_texts()]
        assert values == sorted(values)
        # a metric where higher is better sorts best-first on the first click
        res.locator("table.results thead th", has_text="AUROC").first.click()
        aurocs = [float(v) for v in res.locator("table.results td[data-metric=auroc]").all_inner_texts() if v.strip()]
        assert aurocs == sorted(aurocs, reverse=True), aurocs
        res.screenshot(path=str(shots / "evaluation_1366x900.png"), full_page=True)
        # an annotator finds the class left for people and reviews one image with the keyboard
        ann = browser.new_context(viewport={"width": 1920, "height": 1080}).new_page()
        ann.goto(f"{url}/accounts/login/?next=/review/")
        ann.fill("#id_username", "annotator")
        ann.fill("#id_password", "annotator-demo")
        ann.keyboard.press("Enter")
        ann.wait_for_selector("#queue")
        assert ann.inner_text("#my-reviews") == "0"
        ann.goto(f"{url}/review/screen/")
        ann.wait_for_selector("#top5 li")
        assert ann.locator("#top5 li").count() == 5
        ann.keyboard.press("o")
        ann.wait_for_function("document.querySelector('#status').textContent.includes('1 reviewed this session')")
        ann.screenshot(path=str(shots / "demo_review_1920x1080.png"))
        browser.close()


SKIP_LINKS = re.compile(r"(\.(csv|json|zip|tar\.gz|svg|png|jpg)(\?|$))|/plots/|/images/|/download\.|^mailto:|^#|/logout/")


@pytest.mark.browser
def test_every_page_fits_a_laptop_and_no_role_sees_a_link_it_cannot_follow(demo_server):
    """Every page each demo account can reach by clicking, at 1366 and 1920 px: no horizontal
    page scroll, and no link on it answers 403 (the admin's pages are checked, not crawled)."""
    from playwright.sync_api import sync_playwright

    url, _data = demo_server
    accounts = {"annotator": "annotator-demo", "curator": "curator-demo", "researcher": "researcher-demo", "admin": "admin-demo"}
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=[
            "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update", "--disable-sync"])
        for username, password in accounts.items():
            ctx = browser.new_context(viewport={"width": 1366, "height": 768})
            page = ctx.new_page()
            page.goto(f"{url}/accounts/login/")
            page.fill("#id_username", username)
            page.fill("#id_password", password)
            page.keyboard.press("Enter")
            page.wait_for_selector("header.top nav")
            seen, queue, checked = set(), ["/"], {}
            while queue and len(seen) < 40:
                path = queue.pop(0)
                if path in seen:
                    continue
                seen.add(path)
                response = page.goto(f"{url}{path}")
                assert response.status == 200, (username, path, response.status)
                assert page.locator("header.top nav").count() == 1, (username, path)  # every page has the main navigation
                for width in (1366, 1920):
                    page.set_viewport_size({"width": width, "height": 900})
                    page.wait_for_timeout(50)
                    overflow = page.evaluate("document.documentElement.scrollWidth - document.documentElement.clientWidth")
                    assert overflow <= 0, f"{username} {path} at {width} px scrolls sideways by {overflow} px"
                page.set_viewport_size({"width": 1366, "height": 768})
                for href in page.eval_on_selector_all("a[href]", "els => els.map(e => e.getAttribute('href'))"):
                    if not href or SKIP_LINKS.search(href) or href.startswith("http") and not href.startswith(url):
                        continue
                    target = href.removeprefix(url)
                    if target.startswith("?"):
                        target = path.split("?")[0] + target
                    if target not in checked:
                        checked[target] = ctx.request.get(f"{url}{target}", max_redirects=0).status
                    assert checked[target] != 403, f"{username} sees a link to {target} on {path}, which answers 403"
                    if not target.startswith("/admin/") and not target.startswith("/accounts/"):
                        queue.append(target)
            assert len(seen) >= (2 if username == "annotator" else 6), (username, sorted(seen))
            ctx.close()
        browser.close()


def certify_on_the_demo(url: str, data: Path, browser) -> dict:
    """Issue 37 on the demo's own source, in Chromium at 1366x768: a curator plans a certification
    of the images nobody has reviewed (the classes the curator kept, and the trophy images left for
    people), the annotator reviews the sample on the ordinary screen (answering as the demo's
    answer key says: `id` for a planted ID object, picking the top-1 class), the curator watches
    the bound fall to the target and exports from the admin's form with the certificate."""
    from fixtures.real_photos import read_answer_key

    key = read_answer_key(data / "demo" / "answer_key.csv")
    cur = browser.new_context(viewport={"width": 1366, "height": 768}).new_page()
    errors: list[str] = []
    cur.on("pageerror", lambda e: errors.append(str(e)))
    cur.goto(f"{url}/accounts/login/?next=/curate/reviews/")
    cur.fill("#id_username", "curator")
    cur.fill("#id_password", "curator-demo")
    cur.keyboard.press("Enter")
    cur.wait_for_selector("a[data-certify]")
    cur.locator("tr", has_text="demo-candidates").locator("a[data-certify]").first.click()
    cur.wait_for_selector("#cert-plan")
    certify_url = cur.url
    # A target of 40%, met in about 40-60 reviews of the sample. Reviews count only in serving order,
    # so a sampled image that someone leased and left holds the bound (issue 50's finding; the CI
    # failure of 2026-11-28: the admin's walk over every page in the test before leased two images
    # that later became draws). Below, annotator2 opens the review screen after the plan and
    # leaves; the page names those leases and the curator hands them back, as a curator would, and
    # does so again whenever a lease taken before the plan reaches the sample.
    cur.fill("#cert-plan input[name=target]", "40")
    cur.fill("#cert-plan input[name=seed]", "1")  # the plan replays
    with cur.expect_navigation():
        cur.click("#cert-plan button")
    assert "pilot" in cur.inner_text("#cert-status") and cur.inner_text("[data-seed]") == "1"
    population = int(cur.inner_text("#cert-bound").split("Remainder: ")[1].split(" images")[0])
    first_bound = float(cur.get_attribute("[data-bound]", "data-bound"))
    assert cur.locator("#cert-plot svg").count() == 1 and population > 150

    # annotator2 opens the review screen, takes the first sampled images (the screen leases two) and leaves
    adm_ctx = browser.new_context(viewport={"width": 1366, "height": 768})
    adm = adm_ctx.new_page()
    adm.goto(f"{url}/accounts/login/?next=/review/screen/")
    adm.fill("#id_username", "annotator2")
    adm.fill("#id_password", "annotator2-demo")
    adm.keyboard.press("Enter")
    adm.wait_for_function("document.querySelector('#photo').dataset.image")
    adm_ctx.close()
    cur.goto(certify_url)
    holds = cur.inner_text("#cert-holds")
    assert "leased to annotator2 " in holds and " ago (until " in holds, holds
    with cur.expect_navigation():
        cur.click("#cert-release")
    assert "handed back to the queue" in cur.inner_text("ul.messages")
    released = 1

    ann = browser.new_context(viewport={"width": 1366, "height": 768}).new_page()
    ann.on("pageerror", lambda e: errors.append(str(e)))
    ann.goto(f"{url}/accounts/login/?next=/review/screen/")
    ann.fill("#id_username", "annotator")
    ann.fill("#id_password", "annotator-demo")
    ann.keyboard.press("Enter")
    reviews, bounds, certified = 0, [first_bound], False
    while not certified and reviews < population:
        ann.wait_for_function("!document.querySelector('#empty').hidden || "
                              "(document.querySelector('#photo').dataset.image && document.querySelector('#top5 li'))")
        if ann.is_visible("#empty"):
            break
        path = ann.inner_text("#path").split(":", 1)[-1].strip()
        decision, _wnids = key.get(path, ("ood", []))
        if decision == "id":
            ann.keyboard.press("i")
            ann.keyboard.press("1")
        else:
            ann.keyboard.press("o")
        reviews += 1
        ann.wait_for_function(f"document.querySelector('#status').textContent.includes('{reviews} reviewed this session')")
        if reviews % 8 == 0:
            cur.goto(certify_url)
            certified = "certified" in cur.inner_text("#cert-status")
            bounds.append(float(cur.get_attribute("[data-bound]", "data-bound")))
            if not certified and cur.locator("#cert-release").count():  # a lease from before the plan reached the sample
                with cur.expect_navigation():
                    cur.click("#cert-release")
                released += 1
    cur.goto(certify_url)
    assert "certified" in cur.inner_text("#cert-status"), (reviews, bounds, released)
    final = float(cur.get_attribute("[data-bound]", "data-bound"))
    assert final <= 0.40 < first_bound and reviews < population, (reviews, population, bounds)
    assert "at most" in cur.inner_text("#cert-quote")

    # the export, from the link on the certified plan's page to the admin's form
    cur.click("#cert-export a")
    cur.fill("input[name=name]", "demo-certified")
    cur.select_option("select[name=sources]", label="demo-candidates")
    cur.check("input[name=include_certified]")
    cur.click("input[name=create]")
    cur.wait_for_selector(".messagelist")
    manifest_path = data / "exports" / "demo-certified" / "v1" / "manifest.json"
    deadline = time.monotonic() + 300  # no broker: the job runs on the web process's background thread
    while not manifest_path.is_file() and time.monotonic() < deadline:
        time.sleep(1)
    import json

    manifest = json.loads(manifest_path.read_text())
    c = manifest["certification"]["certificates"]["demo-candidates"]
    assert c["seed"] == 1 and c["target"] == 0.40 and c["confidence"] == 0.95 and c["remainder_id_share_bound"] <= 0.40
    admitted = manifest["certification"]["admitted_by_certificate"]
    assert admitted > 0 and c["reviews_used"] <= reviews
    cur.goto(f"{url}/exports/")
    assert f"{admitted} of the" in cur.inner_text("[data-certified]")
    assert not errors, errors
    return {"reviews": reviews, "population": population, "bounds": bounds, "admitted": admitted}


@pytest.mark.browser
def test_a_curator_certifies_the_demos_unreviewed_images_and_exports_with_the_certificate(demo_server):
    from playwright.sync_api import sync_playwright

    url, data = demo_server
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=["--headless", "--no-sandbox", "--disable-gpu"])
        try:
            certify_on_the_demo(url, data, browser)
        finally:
            browser.close()


def test_the_demo_on_a_new_data_folder_says_what_is_missing_before_building_anything(tmp_path):
    """`manage.py demo` alone on a new OODC_DATA_DIR built composites for two minutes, then
    stopped on the missing tables, then on missing WordNet (the walk of issue 31): it now checks
    both first, in one line each, and writes nothing."""
    env = {**os.environ, "OODC_DATA_DIR": str(tmp_path), "NLTK_DATA": str(tmp_path / "nltk_data")}
    env.pop("DATABASE_URL", None)
    first = subprocess.run([sys.executable, "manage.py", "demo", "--no-serve"], cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert first.returncode == 1 and "Traceback" not in first.stderr
    assert first.stderr.strip().splitlines() == [f"CommandError: the database ({tmp_path / 'db.sqlite3'}) is not migrated: "
                                                 "run `python manage.py migrate` first (scripts/demo.sh does it)"]
    subprocess.run([sys.executable, "manage.py", "migrate", "--noinput", "-v", "0"], cwd=REPO, env=env, check=True, timeout=300)
    second = subprocess.run([sys.executable, "manage.py", "demo", "--no-serve"], cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert second.returncode == 1 and len(second.stderr.strip().splitlines()) == 1
    assert "WordNet 3.0 is not provisioned" in second.stderr and "manage.py setup_wordnet" in second.stderr
    assert not (tmp_path / "demo").exists()
