"""A worker killed in the middle of each chunked stage: the job is noticed as stale within
seconds (not when Redis redelivers, which is kept at an hour here), resumed by the user's
command, and finished by another worker with nothing done twice and nothing lost.

Real PostgreSQL, Redis and `celery worker` processes; the killed worker has one function of
the code slowed down (tests/integration/slow_worker.py) so the kill lands mid-step."""
from __future__ import annotations

import io
import subprocess
import sys

import pytest
from django.core.management import call_command
from django.utils import timezone

from curation import jobs
from curation.models import AuditLog, Export, ExportMember, FeatureShard, ImageEmbedding, Job, JobChunk
from tests.conftest import REPO, make_image_folder
from tests.integration.test_celery_worker import services_env, wait_until, workers  # noqa: F401  (fixtures)

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

STALE_AFTER = 3


@pytest.fixture
def env(services_env, tmp_path, settings):  # noqa: F811
    settings.JOB_STALE_AFTER_S = STALE_AFTER  # this process judges staleness as the commands do
    settings.FEATURE_STORE = tmp_path / "features"
    settings.EXPORT_ROOT = tmp_path / "exports"
    settings.EVAL_ROOT = tmp_path / "evaluations"
    return {**services_env, "OODC_JOB_HEARTBEAT_S": "0.5", "OODC_JOB_STALE_AFTER_S": str(STALE_AFTER),
            "CELERY_VISIBILITY_TIMEOUT": "3600",  # no redelivery during the test: only a resume can finish the job
            "OODC_FEATURE_STORE": str(tmp_path / "features"), "OODC_EXPORT_ROOT": str(tmp_path / "exports"),
            "OODC_EVAL_ROOT": str(tmp_path / "evaluations")}


def manage(env, *args, timeout=300):
    return subprocess.run([sys.executable, "manage.py", *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)


def background(env, tmp_path, name, *args):
    log = open(tmp_path / f"{name}.cmd.log", "w")
    return subprocess.Popen([sys.executable, "manage.py", *args], cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)


def kill_and_see_it_stale(workers, proc, job_id):  # noqa: F811
    workers.kill(proc)
    job = Job.objects.get(pk=job_id)
    assert job.status in ("pending", "running"), "the job finished before the kill; slow the worker down more"
    wait_until(lambda: jobs.is_stale(Job.objects.get(pk=job_id)), 30, f"job #{job_id} to be seen as stale", workers)
    return Job.objects.get(pk=job_id)


def listed_state(env, job_id) -> str:
    out = manage(env, "resume_job", "--list")
    assert out.returncode == 0, out.stderr
    line = next(x for x in out.stdout.splitlines() if x.strip().startswith(f"#{job_id} "))
    return line.split()[2]


def test_extraction_killed_mid_job_is_resumed_by_the_stage_command(env, workers, tmp_path):  # noqa: F811
    root = tmp_path / "pool"
    make_image_folder(root, n_good=40, classes=["sky", "hayfield"])
    call_command("add_source", "pool", str(root), stdout=io.StringIO(), stderr=io.StringIO())  # ingest here, in-process
    env = {**env, "OODC_EXTRACT_CHUNK_SIZE": "4", "OODC_EXTRACT_BATCH_SIZE": "4"}
    workers.env = env
    w1 = workers.start("w1", slow=("pipelines.features.extract:extract", 1.0))
    queued = manage(env, "run_image_pipeline", "--sources", "pool", "--no-dedup", "--no-wait")
    assert queued.returncode == 0, queued.stderr
    job = Job.objects.get(kind="extract")
    wait_until(lambda: JobChunk.objects.filter(job=job, done=True).count() >= 2, 180, "two chunks done", workers)
    job = kill_and_see_it_stale(workers, w1, job.pk)
    done_first = dict(JobChunk.objects.filter(job=job, done=True).values_list("index", "done_at"))
    assert 2 <= len(done_first) < 10 and listed_state(env, job.pk) == "stale"

    refused = manage(env, "run_image_pipeline", "--sources", "pool", "--no-dedup")  # a plain rerun says what to do
    assert refused.returncode == 1 and "is stale" in refused.stderr and "--resume" in refused.stderr, refused.stderr

    workers.start("w2")
    resumed = manage(env, "run_image_pipeline", "--sources", "pool", "--no-dedup", "--resume")
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr + workers.logs()
    job.refresh_from_db()
    assert job.status == "done" and job.progress == job.total == 40
    chunks = list(JobChunk.objects.filter(job=job))
    assert len(chunks) == 10 and all(c.done for c in chunks)
    assert sum(c.stats.get("ok", 0) for c in chunks) == 40
    ids = list(ImageEmbedding.objects.filter(image__source__name="pool").values_list("image_id", flat=True))
    assert len(ids) == len(set(ids)) == 40  # every image once
    assert sum(FeatureShard.objects.values_list("rows", flat=True)) == 40  # no chunk's rows counted twice
    # chunks done before the kill were not redone; the one the killed worker held ran once more
    after = {c.index: c for c in chunks}
    assert all(after[i].done_at == t and after[i].attempts == 1 for i, t in done_first.items())
    assert sum(c.attempts for c in chunks) <= 10 + 1


def test_duplicate_search_killed_mid_step_is_resumed_and_the_waiting_command_finishes(env, workers, tmp_path):  # noqa: F811
    root = tmp_path / "pool"
    make_image_folder(root, n_good=24, classes=["sky", "hayfield"])
    call_command("add_source", "pool", str(root), stdout=io.StringIO(), stderr=io.StringIO())
    call_command("run_image_pipeline", sources=["pool"], no_dedup=True, stdout=io.StringIO(), stderr=io.StringIO())
    workers.env = env
    w1 = workers.start("w1", slow=("pipelines.features.dup_search:join", 120))  # the cells assigned, the join unit in progress
    waiting = background(env, tmp_path, "pipeline", "run_image_pipeline", "--sources", "pool")
    wait_until(lambda: JobChunk.objects.filter(job__kind="dedup", payload__phase="join", lease_owner__gt="").exists(), 120,
               "the duplicate search's join to start", workers)
    job = Job.objects.get(kind="dedup")
    chunk = JobChunk.objects.get(job=job, payload__phase="join")
    assert chunk.lease_owner and not chunk.done  # held by w1
    kill_and_see_it_stale(workers, w1, job.pk)
    assert JobChunk.objects.get(pk=chunk.pk).lease_until < timezone.now()  # the dead worker's lease ran out with it

    workers.start("w2")
    resumed = manage(env, "resume_job", "--stale")
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr + workers.logs()
    assert waiting.wait(timeout=120) == 0, (tmp_path / "pipeline.cmd.log").read_text()
    assert "is stale" in (tmp_path / "pipeline.cmd.log").read_text()  # the waiting command said so meanwhile
    job.refresh_from_db()
    assert job.status == "done" and job.result["candidates"] == 24
    assert JobChunk.objects.filter(job=job).count() == 2  # one assignment unit, one join unit: none written twice
    assert ImageEmbedding.objects.filter(image__source__name="pool", dup_group__isnull=True).count() == 0
    assert AuditLog.objects.filter(action="job_resumed", target_id=str(job.pk)).exists()


def test_export_and_evaluation_killed_mid_step_are_resumed_without_duplicates(env, workers, tmp_path, role_groups):  # noqa: F811
    from curation.models import EvaluationRun
    from curation.services.review import review_cache_clear
    from tests.review_data import id_sets
    from tests.test_exports import reviewed_pool

    review_cache_clear()
    _source, decided = reviewed_pool(tmp_path, n=12, name="wpool", answer=lambda img: ("ood", []))
    review_cache_clear()
    workers.env = env

    # 1. the export's worker dies after moving the folder into place, before recording it
    w1 = workers.start("w1", slow=("curation.services.exports:_finish", 120))
    waiting = background(env, tmp_path, "export", "export", "--name", "resumed", "--source", "wpool", "--queue")
    final = tmp_path / "exports" / "resumed" / "v1"
    wait_until(lambda: (final / "manifest.json").is_file(), 120, "the export folder", workers)
    export = Export.objects.get(name="resumed")
    kill_and_see_it_stale(workers, w1, export.job_id)
    assert Export.objects.get(pk=export.pk).status == "running" and not ExportMember.objects.filter(export=export).exists()
    workers.start("w2")
    resumed = manage(env, "export", "--name", "resumed", "--resume")
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr + workers.logs()
    assert waiting.wait(timeout=120) == 0, (tmp_path / "export.cmd.log").read_text()
    export.refresh_from_db()
    assert export.status == "done" and export.version == 1 and Export.objects.filter(name="resumed").count() == 1
    assert ExportMember.objects.filter(export=export).count() == len(decided)
    assert sorted(p.name for p in final.parent.iterdir()) == ["v1"]  # no second folder, no partial one
    check = manage(env, "verify_export", str(final))
    assert check.returncode == 0, check.stderr

    # 2. an evaluation's worker dies between chunks of model outputs
    id_sets(tmp_path, {"wtest": (5, 96), "wfit": (10, 112)})
    env = {**env, "OODC_EVAL_CHUNK_SIZE": "2"}
    workers.env = env
    w3 = workers.start("w3", slow=("pipelines.features.extract:extract", 1.0))
    args = ["evaluate", "--export", "resumed", "--id-test", "source:wtest", "--id-fit", "source:wfit", "--methods", "msp,energy", "--queue"]
    waiting = background(env, tmp_path, "evaluate", *args)
    wait_until(lambda: JobChunk.objects.filter(job__kind="evaluate", done=True).count() >= 2, 180, "two output chunks", workers)
    job = Job.objects.get(kind="evaluate")
    kill_and_see_it_stale(workers, w3, job.pk)
    done_before = JobChunk.objects.filter(job=job, done=True).count()
    n_chunks = JobChunk.objects.filter(job=job).count()
    assert done_before < n_chunks == 5 + 10 + 6  # 10, 20 and 12 images in chunks of 2
    resumed = manage(env, *args[:-1], "--resume")
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr + workers.logs()
    assert waiting.wait(timeout=120) == 0, (tmp_path / "evaluate.cmd.log").read_text()
    run = EvaluationRun.objects.get()
    assert run.status == "done" and run.job.progress == run.job.total == 10 + 20 + 12
    assert JobChunk.objects.filter(job=job, done=True).count() == n_chunks
    r = run.results["models"]["efficientnet_lite0"]
    assert r["n_ood"] == len(decided) and r["n_fit"] == 20 and r["n_id_test"] == 10
