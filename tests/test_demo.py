"""The README's first command, minus set-up: the demo job on the embedded default (SQLite,
eager Celery), then the served web app, logged into in headless Chromium."""
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.slow


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def demo_server(tmp_path_factory):
    data = tmp_path_factory.mktemp("demo")
    env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "CELERY_BROKER_URL"}}
    env.update({"OODC_DATA_DIR": str(data), "NLTK_DATA": str(REPO / "var" / "nltk_data"), "PYTHONUNBUFFERED": "1"})
    subprocess.run([sys.executable, "manage.py", "migrate", "--noinput", "-v", "0"], cwd=REPO, env=env, check=True, timeout=300)
    port = _free_port()
    log = open(data / "demo.log", "w")
    proc = subprocess.Popen([sys.executable, "manage.py", "demo", "--addr", f"127.0.0.1:{port}"], cwd=REPO, env=env,
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"demo exited with {proc.returncode}:\n{(data / 'demo.log').read_text()[-4000:]}")
        try:
            urllib.request.urlopen(f"{url}/healthz", timeout=2)
            break
        except OSError:
            time.sleep(0.5)
    else:
        pytest.fail(f"demo did not serve within 240 s:\n{(data / 'demo.log').read_text()[-4000:]}")
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
    # the class filter step ran on the candidates and wrote its CSV
    assert "Class filter run #1: 19 candidates (source:demo-candidates)" in out and "keep 8   flag 5   remove 6" in out
    assert (data / "demo" / "class_filter_decisions.csv").read_text().count("\n") == 20
    # the review queue is built; the demo's stand-in reviews all but one class from the answer key
    assert "6/9 Review queue" in out and "demo-candidates: 148 images to review" in out
    assert "ood 139 (class folder(s) n09270735 left for you to review)" in out and "with ID objects: 0/139" in out
    # ... and ends with an export of the clean images and a small unit-test set, both verifiable
    assert "115 images in 6 classes; excluded: class_visual_flag_unresolved 24, review_open 9" in out
    export = data / "exports" / "demo-clean" / "v1"
    assert f"Wrote {export}" in out and "170 unit-test images (17 tests) written to" in out
    for folder in (export, data / "exports" / "demo-unit-tests" / "v1"):
        check = subprocess.run([sys.executable, "manage.py", "verify_export", str(folder)], capture_output=True, text=True,
                               env={**{k: v for k, v in os.environ.items() if k != "DATABASE_URL"}, "OODC_DATA_DIR": str(data),
                                    "NLTK_DATA": str(REPO / "var" / "nltk_data")}, cwd=REPO, timeout=120)
        assert check.returncode == 0 and "OK:" in check.stdout, check.stderr
    assert "annotator2  password: annotator2-demo" in out and "/review/ (log in as annotator or annotator2)" in out


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
        assert any("demo-candidates" in r and "326" in r for r in rows), rows
        page.screenshot(path=str(shots / "home_curator_1366x768.png"), full_page=True)
        page.goto(f"{url}/admin/curation/image/?status__exact=broken")
        assert page.locator("#result_list tbody tr").count() == 8
        page.screenshot(path=str(shots / "admin_broken_images.png"))

        # the class filter's report, reached from the home page
        page.goto(f"{url}/")
        page.click("#class-filter-runs tbody tr a")
        page.wait_for_selector("#rules")
        assert page.inner_text("#decision-counts").split("Download")[0].split() == ["keep", "8", "flag", "5", "remove", "6"]
        assert page.locator("#flagged tbody tr").count() == 5
        page.screenshot(path=str(shots / "class_filter_report.png"), full_page=True)
        # resolve the flags in bulk from the admin, through the action's confirmation page
        page.click("text=Resolve flags in the admin")
        page.wait_for_selector("#result_list")
        assert page.locator("#result_list tbody tr").count() == 5
        page.check("#action-toggle")
        page.select_option("select[name=action]", "resolve_keep")
        page.click("button[name=index]")
        page.wait_for_selector("textarea[name=note]")
        page.fill("textarea[name=note]", "looked at them: fine")
        page.click("input[name=apply]")
        page.wait_for_selector(".messagelist")
        assert "5 flagged class(es) resolved: keep" in page.inner_text(".messagelist")
        page.goto(f"{url}/class-filter/1/")
        assert page.inner_text("#decision-counts").split("Download")[0].split() == ["keep", "13", "flag", "0", "remove", "6"]
        assert page.locator("#resolved tbody tr").count() == 5
        # the class-level screen: the visually ambiguous checkerboard class, with sample images
        page.goto(f"{url}/curate/classes/")
        card = page.locator(".flagged-class[data-folder=checkerboard]")
        assert "crossword puzzle" in card.inner_text() and card.locator(".thumbs img").count() == 8
        page.screenshot(path=str(shots / "flagged_classes.png"), full_page=True)
        card.locator("input[name=note]").fill("checkerboards are not crosswords")
        card.locator("button[value=accept]").click()
        page.wait_for_selector("#no-flags")
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
