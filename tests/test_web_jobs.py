"""Jobs started from the web without a broker (the embedded default) never block the request:
they run on the web process's background thread (curation/jobs/background.py), report progress
like a worker's, and the admin's messages say truly whether they are queued or done."""
from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from django.contrib.auth.models import Group, User

from curation.jobs import background
from curation.models import Export, Job
from tests.conftest import make_image_folder
from tests.review_data import ingest

# the background thread has its own database connection: the test's rows must be committed
pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def web_jobs(settings, tmp_path):
    settings.JOBS_IN_BACKGROUND = True
    settings.EXPORT_ROOT = tmp_path / "exports"
    assert settings.CELERY_TASK_ALWAYS_EAGER, "these tests are about the set-up without a broker"
    yield
    assert background.wait_idle(120), "the background jobs did not finish"


@pytest.fixture
def curator(client, role_groups):
    u = User.objects.create_user("cur", password="pw", is_staff=True)
    u.groups.add(Group.objects.get(name="curator"))
    client.force_login(u)
    return u


@pytest.fixture
def held(monkeypatch):
    """Hold the background thread at the start of each job until the event is set, so the test
    can see the request return before the work is done (and not by luck of timing)."""
    gate = threading.Event()
    from curation.jobs import runner

    real = runner.run_inline

    def gated(job, **kw):
        assert gate.wait(60), "the test never released the job"
        return real(job, **kw)

    monkeypatch.setattr(runner, "run_inline", gated)
    yield gate
    gate.set()


def test_admin_unit_test_export_returns_at_once_and_finishes_in_the_background(tmp_path, client, curator, web_jobs, held):
    make_image_folder(tmp_path / "ids", n_good=6, classes=["n04485082", "n07920052"], size=(80, 60))
    idsrc = ingest("ids", tmp_path / "ids", role="id")
    gate = held
    started = time.monotonic()
    r = client.post("/admin/curation/export/add/", {"kind": "unit_tests", "name": "ut", "per_test": 3, "seed": 1, "id_source": idsrc.pk,
                                                     "min_per_class": 1, "split": "test", "layouts": ["ninco"], "create": "1"},
                    follow=True)
    took = time.monotonic() - started
    export = Export.objects.get(name="ut")
    assert r.status_code == 200 and took < 1.0, took  # the bound; it was 109 s in the request before
    assert export.status == Export.Status.PENDING  # the request did not run it
    page = r.content.decode()
    assert "Unit-test set ut-v1: queued on the web app&#x27;s background worker; its progress is shown on this list" in page
    assert "requested: the workers write it" not in page
    # the exports page shows it as not finished while it waits
    assert "status-pending" in client.get("/exports/").content.decode()
    gate.set()
    assert background.wait_idle(120)
    export.refresh_from_db()
    assert export.status == Export.Status.DONE and export.counts["images"] == 17 * 3
    assert (Path(export_dir := tmp_path / "exports" / "ut" / "v1") / "manifest.json").is_file(), export_dir
    job = Job.objects.get(pk=export.job_id)
    assert job.status == Job.Status.DONE and job.progress == job.total and job.worker  # a heartbeat, as on a worker


def test_admin_ingest_rescan_is_queued_and_a_failing_job_is_recorded(tmp_path, client, curator, web_jobs, held):
    make_image_folder(tmp_path / "pool", n_good=4, classes=["n09436708"])
    src = ingest("pool", tmp_path / "pool")
    gate = held
    r = client.post("/admin/curation/source/", {"action": "rescan", "_selected_action": [src.pk]}, follow=True)
    assert r.status_code == 200
    job = Job.objects.filter(source=src).order_by("-pk").first()
    assert f"Ingest job #{job.pk} of pool: queued on the web app" in r.content.decode()
    assert job.status == Job.Status.PENDING
    # the source's folder disappears before the job runs: the job fails with its reason, the thread goes on
    (tmp_path / "pool").rename(tmp_path / "gone")
    gate.set()
    assert background.wait_idle(120)
    job.refresh_from_db()
    assert job.status in (Job.Status.FAILED, Job.Status.DONE) and job.finished_at is not None
    make_image_folder(tmp_path / "pool", n_good=2, classes=["n09436708"])
    client.post("/admin/curation/source/", {"action": "rescan", "_selected_action": [src.pk]})
    assert background.wait_idle(120)
    assert Job.objects.filter(source=src).order_by("-pk").first().status == Job.Status.DONE
