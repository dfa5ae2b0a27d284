"""Roles, login and CSRF, enforced by the server (Django test client on the test database)."""
import re
import subprocess
import sys

import pytest
from django.test import Client

from curation.services.users import users_create_demo
from tests.conftest import REPO, make_image_folder

pytestmark = pytest.mark.django_db


@pytest.fixture
def demo_users():
    return users_create_demo()


def _client(username, password):
    c = Client()
    assert c.login(username=username, password=password)
    return c


def test_role_groups_exist_after_migrate(tmp_path):
    """What `migrate` itself makes, on a new database (SQLite in a new data folder): the test
    database's own groups may have been made again by tests/conftest.py after a flush."""
    import json
    import os

    env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "CELERY_BROKER_URL"}}
    env["OODC_DATA_DIR"] = str(tmp_path)
    subprocess.run([sys.executable, "manage.py", "migrate", "--noinput", "-v", "0"], cwd=REPO, env=env, check=True, timeout=300)
    read = ("import json; from django.contrib.auth.models import Group; "
            "print(json.dumps({g.name: sorted(g.permissions.values_list('codename', flat=True)) for g in Group.objects.all()}))")
    out = subprocess.run([sys.executable, "manage.py", "shell", "-c", read], cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    groups = json.loads(out.stdout.strip().splitlines()[-1])
    assert set(groups) >= {"annotator", "curator", "researcher"}
    assert {"view_image", "change_source", "view_auditlog"} <= set(groups["curator"])
    assert "delete_image" not in groups["curator"] and "change_auditlog" not in groups["curator"]
    assert "view_image" in groups["researcher"] and "change_source" not in groups["researcher"]


def test_pages_require_login():
    c = Client()
    r = c.get("/")
    assert r.status_code == 302 and r["Location"].startswith("/accounts/login/")
    assert c.get("/admin/curation/image/").status_code == 302


def test_annotator_sees_no_sources_and_cannot_enter_the_admin(demo_users, tmp_path):
    from curation.services.ingest import ingest_run_inline, ingest_start
    from curation.services.sources import source_register

    make_image_folder(tmp_path / "s", n_good=3, classes=["sky"])
    reg = source_register(name="secret-source", root=tmp_path / "s")
    ingest_run_inline(job=ingest_start(source=reg.source, enqueue=False))

    annotator = _client("annotator", demo_users["annotator"])
    page = annotator.get("/").content.decode()
    assert "secret-source" not in page and "review queue" in page
    assert annotator.get("/admin/curation/image/").status_code == 302  # not staff: sent to admin login

    curator = _client("curator", demo_users["curator"])
    page = curator.get("/").content.decode()
    assert "secret-source" in page
    assert curator.get("/admin/curation/image/").status_code == 200
    assert curator.get("/admin/curation/image/?status__exact=ok").status_code == 200
    assert curator.get("/admin/auth/user/").status_code == 403  # administering users is for staff admins

    researcher = _client("researcher", demo_users["researcher"])
    src = reg.source
    assert researcher.get(f"/admin/curation/source/{src.pk}/change/").status_code == 200  # view only
    r = researcher.post("/admin/curation/source/", {"action": "rescan", "_selected_action": [src.pk]})
    assert r.status_code in (200, 302)
    from curation.models import Job

    assert Job.objects.filter(source=src).count() == 1  # the researcher's re-scan did not start a job

    r = curator.post("/admin/curation/source/", {"action": "rescan", "_selected_action": [src.pk]}, follow=True)
    assert Job.objects.filter(source=src).count() == 2
    assert re.search(r"Ingest job #\d+ of secret-source: (done|queued)", r.content.decode())


def test_csrf_is_enforced_on_login():
    c = Client(enforce_csrf_checks=True)
    r = c.post("/accounts/login/", {"username": "x", "password": "y"})
    assert r.status_code == 403


def test_web_process_does_not_import_heavy_libraries():
    code = (
        "import os, sys; os.environ.setdefault('DJANGO_SETTINGS_MODULE','curation.settings');"
        "import django; django.setup();"
        "import curation.urls, curation.admin, curation.tasks, labeling_ui.views;"
        "from django.test import Client; Client().get('/accounts/login/');"
        "print(sorted(m for m in ('torch','timm','faiss','nltk','sklearn') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "[]"
