"""Ingest through a real Redis broker, real `celery worker` processes and real PostgreSQL.

The test process (eager) only writes the source folder and reads the database; the job is
queued by the user's own command (`manage.py add_source --no-wait`) with CELERY_BROKER_URL set,
and worker processes started here do the work."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
import redis
from django.db import connection

from curation.models import Image, Job, JobChunk, Source
from scripts.serving import stop_group
from tests.conftest import REPO, add_twenty_broken, make_image_folder

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def services_env():
    if connection.vendor != "postgresql":
        pytest.fail("integration tests need PostgreSQL: run scripts/test.sh (it starts PostgreSQL and Redis and sets DATABASE_URL)")
    url = os.environ.get("TEST_REDIS_URL")
    if not url:
        pytest.fail("integration tests need Redis: run scripts/test.sh, or set TEST_REDIS_URL=redis://127.0.0.1:6379/15")
    try:
        redis.Redis.from_url(url).flushdb()
    except redis.RedisError as exc:
        pytest.fail(f"Redis at {url} is unreachable ({exc}); start it with scripts/services.sh")
    s = connection.settings_dict
    env = {
        **os.environ,
        "DATABASE_URL": f"postgres://{s['USER']}:{s['PASSWORD']}@{s['HOST'] or '127.0.0.1'}:{s['PORT'] or 5432}/{s['NAME']}",
        "CELERY_BROKER_URL": url,
        "CELERY_VISIBILITY_TIMEOUT": "4",  # a killed worker's chunk comes back after 4 s ...
        "CELERY_UNACKED_RESTORE_INTERVAL": "1",  # ... found by a sweep every second
        "CELERY_UNACKED_RESTORE_THROTTLE": "1",
        "OODC_JOB_HEARTBEAT_S": "1",  # a killed worker's chunk leases run out after 5 s
        "OODC_JOB_STALE_AFTER_S": "5",
        "PYTHONUNBUFFERED": "1",
    }
    yield env
    redis.Redis.from_url(url).flushdb()


class Workers:
    def __init__(self, env, tmp_path):
        self.env, self.tmp_path, self.procs = env, tmp_path, []

    def start(self, name: str, concurrency: int = 1, slow: tuple[str, float] | None = None) -> subprocess.Popen:
        """A worker on the cpu queue; ``slow=("module:function", seconds)`` delays that function
        in it (tests/integration/slow_worker.py), so a test can kill it mid-step."""
        log = open(self.tmp_path / f"{name}.log", "w")
        worker_args = ["worker", "-Q", "cpu", "-c", str(concurrency), "-n", f"{name}@%h", "--without-gossip", "--without-mingle",
                       "-l", "info"]
        launcher = ([sys.executable, str(REPO / "tests" / "integration" / "slow_worker.py"), slow[0], str(slow[1]), "--"] if slow
                    else [sys.executable, "-m", "celery", "-A", "curation"])
        proc = subprocess.Popen(
            [*launcher, *worker_args],
            cwd=REPO, env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )
        self.procs.append(proc)
        return proc

    def kill(self, proc: subprocess.Popen) -> None:
        os.killpg(proc.pid, signal.SIGKILL)  # the main process and its pool children, no goodbye
        proc.wait(timeout=10)

    def stop_all(self) -> None:
        for p in self.procs:
            stop_group(p, grace_s=15)

    def logs(self) -> str:
        return "\n".join(f"--- {f.name}\n{f.read_text()[-3000:]}" for f in self.tmp_path.glob("*.log"))


@pytest.fixture
def workers(services_env, tmp_path):
    w = Workers(services_env, tmp_path)
    yield w
    w.stop_all()


def queue_ingest(env, name, root, chunk_size):
    out = subprocess.run(
        [sys.executable, "manage.py", "add_source", name, str(root), "--no-wait"],
        cwd=REPO, env={**env, "OODC_INGEST_CHUNK_SIZE": str(chunk_size)}, capture_output=True, text=True, timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert "Queued ingest job" in out.stdout
    return Job.objects.get(source__name=name)


def wait_until(predicate, timeout, what, workers):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    pytest.fail(f"timed out after {timeout}s waiting for {what}\n{workers.logs()}")


def test_ingest_job_through_the_broker_lands_in_postgres(services_env, workers, tmp_path):
    root = tmp_path / "pool"
    good = make_image_folder(root, n_good=180, classes=["sky", "hayfield", "n02084071"])
    broken = add_twenty_broken(root, "sky")
    workers.start("w1", concurrency=2)
    job = queue_ingest(services_env, "pool", root, chunk_size=25)
    wait_until(lambda: Job.objects.get(pk=job.pk).status in ("done", "failed"), 120, "the ingest job", workers)
    job.refresh_from_db()
    assert job.status == "done", job.message
    rows = dict(Image.objects.filter(source__name="pool").values_list("relative_path", "status"))
    assert len(rows) == len(good) + len(broken)
    assert all(rows[r] == "ok" for r in good)
    assert all(rows[r] == "broken" for r in broken)
    assert job.chunks.count() == job.chunks.filter(done=True).count() > 1
    assert job.code_version and job.config["chunk_size"] == 25


def test_killing_the_worker_mid_job_and_starting_another_finishes_without_duplicates(services_env, workers, tmp_path):
    root = tmp_path / "pool"
    good = make_image_folder(root, n_good=600, classes=["sky", "hayfield"])
    w1 = workers.start("w1")
    job = queue_ingest(services_env, "pool", root, chunk_size=5)
    total_chunks = 120
    wait_until(lambda: JobChunk.objects.filter(job=job, done=True).count() >= 3, 120, "the first chunks", workers)
    workers.kill(w1)
    done_at_kill = JobChunk.objects.filter(job=job, done=True).count()
    assert done_at_kill < total_chunks, "the job finished before the kill; make it bigger"
    assert Job.objects.get(pk=job.pk).status == "running"

    workers.start("w2")
    wait_until(lambda: Job.objects.get(pk=job.pk).status in ("done", "failed"), 180, "the job to finish on the new worker", workers)
    job.refresh_from_db()
    assert job.status == "done", job.message
    assert job.progress == job.total == len(good)
    paths = list(Image.objects.filter(source=Source.objects.get(name="pool")).values_list("relative_path", flat=True))
    assert len(paths) == len(set(paths)) == len(good)
    assert set(paths) == set(good)
    assert Image.objects.filter(source__name="pool", status="ok").count() == len(good)
    assert JobChunk.objects.filter(job=job, done=True).count() == total_chunks
    # the chunk the killed worker held was delivered again, and counted once
    assert sum(sum(c.stats.values()) for c in JobChunk.objects.filter(job=job)) == len(good)


def test_class_filter_job_queued_by_the_command_runs_on_a_worker(services_env, workers, tmp_path):
    from curation.models import ClassFilterRun

    workers.start("w1")
    out = tmp_path / "decisions.csv"
    proc = subprocess.run(
        [sys.executable, "manage.py", "filter_classes", "--candidates", "imagenet-21k", "--queue", "--out", str(out)],
        cwd=REPO, env=services_env, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr + workers.logs()
    assert "21843 candidates (imagenet-21k) against imagenet-1k" in proc.stdout
    assert len(out.read_text(encoding="utf-8").splitlines()) == 21844
    run = ClassFilterRun.objects.get()
    assert run.job.status == "done" and run.job.progress == 21843
    assert run.decisions.count() == 21843 and run.decisions.filter(rule="id_class").count() == 999
    assert "curation.class_filter.chunk" in workers.logs()  # it ran in the worker, not in the command


@pytest.mark.slow
def test_two_workers_share_an_extraction_job_and_process_every_image_once(services_env, workers, tmp_path):
    from curation.models import FeatureShard, ImageEmbedding

    root = tmp_path / "pool"
    make_image_folder(root, n_good=96, classes=["sky", "hayfield", "n09403427"])
    workers.env = {**services_env, "OODC_EXTRACT_CHUNK_SIZE": "6", "OODC_EXTRACT_BATCH_SIZE": "6",
                   "OODC_FEATURE_STORE": str(tmp_path / "features")}  # default loader workers: threads in prefork children
    workers.start("w1")
    workers.start("w2")
    for cmd in (["add_source", "pool", str(root)], ["run_image_pipeline", "--sources", "pool", "--no-dedup"]):
        proc = subprocess.run([sys.executable, "manage.py", *cmd], cwd=REPO, env=workers.env, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr[-3000:] + workers.logs()
    job = Job.objects.get(kind="extract")
    assert job.status == "done" and job.progress == job.total == 96
    chunks = list(JobChunk.objects.filter(job=job))
    assert len(chunks) == 16 and all(c.done for c in chunks)
    assert sum(c.stats.get("ok", 0) for c in chunks) == 96
    embeddings = list(ImageEmbedding.objects.filter(image__source__name="pool").values_list("image_id", "shard_id", "row"))
    assert len(embeddings) == len({e[0] for e in embeddings}) == 96  # every image exactly once
    assert len({(s, r) for _i, s, r in embeddings}) == 96  # no two images share a feature row
    assert sum(FeatureShard.objects.values_list("rows", flat=True)) == 96  # nothing computed twice
    logs = {f.stem: f.read_text() for f in tmp_path.glob("w*.log")}
    assert all("curation.extract.chunk" in text and "succeeded" in text for text in logs.values()), "both workers took chunks"
    # prefork children are daemonic: they decode with threads, not DataLoader processes
    assert all("decoding with 1 threads instead of DataLoader workers" in text for text in logs.values())


def test_export_queued_by_the_command_is_written_by_a_worker(services_env, workers, tmp_path, role_groups, settings):
    """The export runs on a real worker (PostgreSQL, Redis), and the folder it writes verifies."""
    from curation.models import Export
    from curation.services.review import review_cache_clear
    from tests.test_exports import reviewed_pool

    services_env.update({"OODC_EXPORT_ROOT": str(tmp_path / "exports"), "OODC_FEATURE_STORE": str(tmp_path / "features")})
    settings.FEATURE_STORE = tmp_path / "features"
    review_cache_clear()
    _source, decided = reviewed_pool(tmp_path, n=12, name="wpool", answer=lambda img: ("ood", []))
    workers.start("w1")
    proc = subprocess.run([sys.executable, "manage.py", "export", "--name", "queued", "--source", "wpool", "--queue"],
                          cwd=REPO, env=services_env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr + workers.logs()
    export = Export.objects.get(name="queued")
    assert export.status == "done" and export.counts["images"] == len(decided)
    assert "curation.export.chunk" in workers.logs()  # written by the worker, not the command
    check = subprocess.run([sys.executable, "manage.py", "verify_export", str(tmp_path / "exports" / "queued" / "v1")],
                           cwd=REPO, env=services_env, capture_output=True, text=True, timeout=120)
    root = tmp_path / "exports" / "queued" / "v1"
    on_disk = [p for p in root.rglob("*") if p.is_file() and p.name != "manifest.json"]
    assert len(on_disk) >= 3 * len(decided)  # the three folder layouts' copies, with their lists and the datasheet
    assert check.returncode == 0 and f"{len(on_disk)} files match" in check.stdout, check.stdout + check.stderr
    review_cache_clear()
    # ... and a researcher evaluates detectors on it: the model's outputs are computed by the
    # worker's chunk tasks, the detectors by its finalize task
    from curation.models import EvaluationRun
    from tests.review_data import id_sets

    id_sets(tmp_path, {"wtest": (4, 96), "wfit": (8, 112)})
    services_env.update({"OODC_EVAL_ROOT": str(tmp_path / "evaluations"), "OODC_EVAL_CHUNK_SIZE": "5"})
    proc = subprocess.run([sys.executable, "manage.py", "evaluate", "--export", "queued", "--id-test", "source:wtest",
                           "--id-fit", "source:wfit", "--methods", "msp,energy,mahalanobis,knn", "--knn-k", "5", "--queue"],
                          cwd=REPO, env=services_env, capture_output=True, text=True, timeout=400)
    assert proc.returncode == 0, proc.stdout + proc.stderr + workers.logs()
    run = EvaluationRun.objects.get()
    n = len(decided)
    assert run.status == "done" and run.job.chunks.count() == 2 + 4 + -(-n // 5)  # 8, 16 and n images in chunks of 5
    assert run.job.progress == run.job.total == 8 + 16 + n
    logs = workers.logs()
    assert "curation.evaluate.chunk" in logs and "curation.evaluate.finalize" in logs
    r = run.results["models"]["efficientnet_lite0"]
    assert r["n_ood"] == len(decided) and r["n_fit"] == 16 and r["n_id_test"] == 8
    assert all(e["status"] == "ok" for e in r["detectors"].values())
