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


def _keep_xdist_workers_apart() -> None:
    """scripts/test.sh runs the suite on several processes (pytest-xdist, `-n`). pytest-django
    gives each its own test database (test_oodc_gw0, ...); this gives each its own Redis
    database (TEST_REDIS_URL's number minus the worker's index, so the Celery workers that one
    process's integration tests start never take another's tasks) and its own data folder for
    what the app writes by default (feature shards and exports are named by row ids, which the
    processes' databases repeat; covariate-shift sources go under the first allowed root). Set
    here, at import, in this process's settings, and in the environment for the commands and
    workers its tests start (with this process's WordNet and secret key)."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    if not worker:
        return
    index = int(worker.removeprefix("gw"))
    url = os.environ.get("TEST_REDIS_URL")
    if url:
        base, _, db = url.rpartition("/")
        number = int(db or 0) - index
        if number < 1:  # 0 is the development broker's
            raise pytest.UsageError(f"TEST_REDIS_URL={url} leaves no Redis database for xdist worker {worker}: "
                                    "use a higher database number or fewer workers (-n)")
        os.environ["TEST_REDIS_URL"] = f"{base}/{number}"
    root = REPO / "var" / "test-workers" / worker
    root.mkdir(parents=True, exist_ok=True)
    os.environ.update({"OODC_DATA_DIR": str(root), "NLTK_DATA": str(settings.NLTK_DATA),
                       "DJANGO_SECRET_KEY": os.environ.get("DJANGO_SECRET_KEY") or settings.SECRET_KEY})
    for name in ("OODC_FEATURE_STORE", "OODC_EXPORT_ROOT", "OODC_EVAL_ROOT", "OODC_THUMBNAIL_DIR", "OODC_MEDIA_ROOT",
                 "OODC_SOURCE_ROOTS"):
        os.environ.pop(name, None)  # under the worker's data folder, as the app's defaults put them
    settings.DATA_DIR = root
    settings.FEATURE_STORE, settings.EXPORT_ROOT, settings.EVAL_ROOT = root / "features", root / "exports", root / "evaluations"
    settings.THUMBNAIL_DIR, settings.MEDIA_ROOT = root / "thumbs", root / "media"
    settings.SOURCE_ALLOWED_ROOTS = [(root / "sources").resolve()]


_keep_xdist_workers_apart()

# The files that take longest, longest first (minutes each took in the whole suite on two processes on
# the 2-core VM, 2026-11-27).
# scripts/test.sh hands out whole files in collection order (--dist loadfile --no-loadscope-reorder):
# started first, these run beside everything else instead of being the last files left.
LONGEST_FIRST = (
    "tests/test_demo.py",  # the demo itself (9 of them), then Chromium on it: about 11 min
    "tests/test_route_fuzz.py",  # about 7 (before its fingerprints were reused)
    "tests/integration/test_kill_resume.py",  # about 4
    "tests/integration/test_celery_worker.py",  # about 3
)


@pytest.hookimpl(trylast=True)  # after pytest-django's own order (transactional tests last)
def pytest_collection_modifyitems(config, items):
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return  # one process: nothing runs beside anything, the order changes nothing
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::", 1)[0], len(rank)))  # stable: the rest keep their order


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
    from pipelines.classes.wordnet import load_wordnet

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
    from pipelines.features.classifiers import load_model

    return load_model("efficientnet_lite0", device="cpu")


def real_photo(name: str, package: str = "skimage") -> Path:
    from fixtures.demo import package_data_file

    return package_data_file(package, name)


ROLE_MIGRATIONS = ("0002_role_groups", "0004_class_filter_permissions", "0006_image_pipeline_permissions", "0008_review_permissions",
                   "0010_export_permissions", "0012_evaluation_permissions")
_role_apps = []  # the migrations' own view of the models, built once


def make_role_groups() -> None:
    """Re-run the migrations' data functions that make the role groups and grant their
    permissions (each is idempotent)."""
    import importlib

    from django.db import connection
    from django.db.migrations.loader import MigrationLoader

    if not _role_apps:
        _role_apps.append(MigrationLoader(connection).project_state(("curation", "0012_evaluation_permissions")).apps)
    for name in ROLE_MIGRATIONS:
        module = importlib.import_module(f"curation.migrations.{name}")
        (getattr(module, "create_groups", None) or module.grant)(_role_apps[0], None)


@pytest.fixture
def role_groups(db):
    """The role groups and their permissions, as the migrations make them. A transactional test
    (real commits) starts after an earlier one's flush has emptied every table, so it re-runs
    the migrations' data functions."""
    make_role_groups()


@pytest.fixture(autouse=True)
def _role_groups_survive_flushes(request):
    """A transactional test ends by flushing every table, the migrations' role groups with them.
    Run on one process, pytest-django puts those tests after all the others; on several
    (scripts/test.sh, pytest-xdist a file at a time), a file of ordinary database tests may follow
    one that flushed, on the same test database: the groups are made again for it first."""
    if not (request.node.get_closest_marker("django_db") or "_django_db_helper" in request.fixturenames):
        return
    request.getfixturevalue("_django_db_helper")
    from django.contrib.auth.models import Group

    if not Group.objects.exists():
        make_role_groups()


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


def follow(page, selector: str) -> None:
    """Click a link or a submit button and return once the page it leads to has loaded. A bare
    click returns when the navigation commits, which can be before the new page's body is parsed:
    a CI run read an empty image grid right after the page jump's Go."""
    with page.expect_navigation(wait_until="load"):
        page.click(selector)


