from __future__ import annotations

import os
import re
from pathlib import Path

import numpy as np
import pytest
from django.conf import settings

from fixtures.images import broken_files, jpeg_bytes, pattern_image, png_bytes, write

REPO = Path(__file__).resolve().parent.parent

# The fast tests use the smaller offline model (the default where it is installed is
# efficientnet_lite2): set here for the commands and workers tests start as subprocesses, and
# in the fixture below for this process, whose settings may be loaded already.
FAST_MODEL = "efficientnet_lite0"
os.environ.setdefault("OODC_MODEL", FAST_MODEL)


@pytest.fixture(autouse=True)
def _jobs_finish_in_the_request(settings):
    """Without a broker the web app runs queued jobs on a background thread; tests in this
    process that check a job's result right after the request run it in the request instead.
    tests/test_web_jobs.py turns the background thread on and checks it."""
    settings.JOBS_IN_BACKGROUND = False
    settings.DEFAULT_MODEL = os.environ["OODC_MODEL"]


@pytest.fixture
def isolated_roots(tmp_path, settings):
    """Exports, evaluation outputs and feature shards under the test's own folder, and no review
    cache carried over."""
    settings.EXPORT_ROOT = tmp_path / "exports"
    settings.EVAL_ROOT = tmp_path / "evaluations"
    settings.FEATURE_STORE = tmp_path / "features"
    from curation.services.review import review_cache_clear

    review_cache_clear()
    yield
    review_cache_clear()


@pytest.fixture(scope="session")
def wn():
    from pipelines.wordnet import load_wordnet

    return load_wordnet(settings.NLTK_DATA)


def make_image_folder(root: Path, *, n_good: int, classes: list[str], seed: int = 0, size=(64, 48)) -> dict[str, bytes]:
    """``n_good`` small generated images spread over ``classes``; returns rel path -> bytes."""
    rng = np.random.default_rng(seed)
    written = {}
    for i in range(n_good):
        cls = classes[i % len(classes)]
        im = pattern_image(rng, "noise", [(int(rng.integers(0, 255)), 100, 150)], size)
        data = png_bytes(im) if i % 4 == 0 else jpeg_bytes(im)
        rel = f"{cls}/img_{i:05d}.{'png' if i % 4 == 0 else 'jpg'}"
        write(root / rel, data)
        written[rel] = data
    return written


def add_twenty_broken(root: Path, cls: str, seed: int = 1) -> dict[str, str]:
    """Twenty bad entries of every kind ingest must survive: rel path -> expected reason code."""
    rng = np.random.default_rng(seed)
    expected = {}
    kinds = list(broken_files(rng).items())
    for i in range(17):
        name, (data, code) = kinds[i % len(kinds)]
        rel = f"{cls}/broken_{i:02d}_{name}"
        write(root / rel, data)
        expected[rel] = code
    outside = root.parent / f"{root.name}_outside.jpg"
    outside.write_bytes(jpeg_bytes(pattern_image(rng, "noise", [(1, 2, 3)], (32, 32))))
    os.symlink(outside, root / cls / "link_out.jpg")
    expected[f"{cls}/link_out.jpg"] = "path_escapes_root"
    os.symlink("/etc", root / cls / "link_dir")
    expected[f"{cls}/link_dir"] = "path_escapes_root"
    (root / "stray_at_root.jpg").write_bytes(b"x")
    expected["stray_at_root.jpg"] = "not_in_class_folder"
    return expected


@pytest.fixture(scope="session")
def lite0():
    """The offline ImageNet-1K model with its real weights (loaded once per test session)."""
    from pipelines.classifiers import load_model

    return load_model("efficientnet_lite0", device="cpu")


def real_photo(name: str, package: str = "skimage") -> Path:
    from fixtures.demo import package_data_file

    return package_data_file(package, name)


@pytest.fixture
def role_groups(db):
    """The role groups and their permissions, as the migrations make them. A transactional test
    (real commits) starts after an earlier one's flush has emptied every table, so it re-runs
    the migrations' data functions (each is idempotent)."""
    import importlib

    from django.db import connection
    from django.db.migrations.loader import MigrationLoader

    apps = MigrationLoader(connection).project_state(("curation", "0012_evaluation_permissions")).apps  # the migrations' own view
    for name in ("0002_role_groups", "0004_class_filter_permissions", "0006_image_pipeline_permissions", "0008_review_permissions",
                 "0010_export_permissions", "0012_evaluation_permissions"):
        module = importlib.import_module(f"curation.migrations.{name}")
        (getattr(module, "create_groups", None) or module.grant)(apps, None)


# -- real Chromium (Debian's, through Playwright) for the browser tests ----------------------------
LAUNCH_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update", "--disable-sync"]
SHOTS = Path(os.environ.get("OODC_SCREENSHOTS", REPO / "var" / "screenshots"))  # screenshots the docs show


@pytest.fixture
def browser(monkeypatch):
    from playwright.sync_api import sync_playwright

    # Playwright's sync API runs an event loop in this thread; the ORM calls the test makes
    # between browser steps are ordinary synchronous ones.
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")

    SHOTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path="/usr/bin/chromium", args=LAUNCH_ARGS)
        yield b
        b.close()


def browser_login(page, base, user, next_url):
    page.goto(f"{base}/accounts/login/?next={next_url}")
    page.fill("#id_username", user)
    page.fill("#id_password", f"{user}-pw")
    page.press("#id_password", "Enter")
    page.wait_for_url(re.compile(re.escape(next_url) + "$"))


