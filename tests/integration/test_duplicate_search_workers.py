"""The duplicate search on two real `celery worker` processes (Redis broker, PostgreSQL): the
phases' chunks are shared between them, and the result equals one process's, pair for pair
(issue 56). The pool is tests/dup_pool.py's: synthetic features with a planted truth."""
from __future__ import annotations

import subprocess
import sys

import pytest

from curation.models import Job, JobChunk
from tests.conftest import REPO
from tests.dup_pool import MODEL, make_pool, search_state
from tests.integration.test_celery_worker import services_env, wait_until, workers  # noqa: F401  (fixtures)

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def test_two_workers_share_the_duplicate_search_and_find_what_one_process_finds(services_env, workers, tmp_path, settings):  # noqa: F811
    settings.FEATURE_STORE = tmp_path / "features"
    settings.NEAR_DUP_EXACT_BELOW, settings.DEDUP_ASSIGN_CHUNK, settings.DEDUP_JOIN_CHUNK = 100, 40, 30
    truth = make_pool(tmp_path / "images", settings.FEATURE_STORE)
    workers.env = {**services_env, "OODC_FEATURE_STORE": str(settings.FEATURE_STORE), "OODC_NEAR_DUP_EXACT_BELOW": "100",
                   "OODC_DEDUP_ASSIGN_CHUNK": "40", "OODC_DEDUP_JOIN_CHUNK": "30"}
    workers.start("w1")
    workers.start("w2")
    out = subprocess.run([sys.executable, "manage.py", "shell", "-c",
                          f"from curation.services.image_pipeline import dedup_start; print(dedup_start(model_name={MODEL!r}).pk)"],
                         cwd=REPO, env=workers.env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    job = Job.objects.get(pk=int(out.stdout.split()[-1]))
    wait_until(lambda: Job.objects.filter(pk=job.pk, status__in=["done", "failed"]).exists(), 240, "the duplicate search", workers)
    job.refresh_from_db()
    assert job.status == "done", job.message + workers.logs()
    joins = JobChunk.objects.filter(job=job, payload__phase="join")
    assert joins.count() > 5 and all(c.done and c.attempts == 1 for c in joins)  # each unit done once
    logs = {f.stem: f.read_text() for f in tmp_path.glob("w*.log")}
    assert all("curation.dedup.chunk" in text and "succeeded" in text for text in logs.values()), "both workers took chunks"
    on_workers = search_state()
    group_of = {i: s[0] for i, s in on_workers.items()}
    assert all(group_of[a] == group_of[b] for a, b in truth.near_pairs)

    from curation.models import ImageEmbedding
    from curation.services.image_pipeline import dedup_run_inline, dedup_start

    ImageEmbedding.objects.update(search_group=None, search_drop="", dup_group=None, drop_reason="", nearest_id_image=None,
                                  nearest_id_similarity=None)
    one = dedup_run_inline(job=dedup_start(model_name=MODEL, enqueue=False))
    assert one.status == "done" and search_state() == on_workers
    assert {k: v for k, v in one.result.items()} == {k: v for k, v in job.result.items()}
