"""Kill and resume, job kind by job kind (issue 38): a real `celery worker` (Redis broker,
PostgreSQL) is SIGKILLed in the middle of the kind's work, the job is seen stale, resumed with
`resume_job`, finished by another worker; its result must equal an uninterrupted run's of the
same work (same rows, same files with the same hashes) with nothing duplicated and nothing
half-written left behind.

The killed worker has one function slowed (tests/integration/slow_worker.py) so the kill lands
mid-work; the uninterrupted reference runs in this process. Redis redelivery is kept at an hour:
only the resume can finish the job. Kinds covered here: ingest, class filter, extraction,
export, unit tests, covariate shift, embedding map; duplicate search and evaluation are killed and resumed in
tests/integration/test_resume.py. test_every_kind_is_covered fails when a kind is added without
a kill-and-resume scenario."""
from __future__ import annotations

import hashlib
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.management import call_command

from curation import jobs
from curation.models import ClassFilterRun, Export, Image, ImageEmbedding, Job, JobChunk, Source
from tests.conftest import REPO, make_image_folder
from tests.integration.test_celery_worker import services_env, wait_until, workers  # noqa: F401  (fixtures)

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

STALE_AFTER = 3
COVERED_ELSEWHERE = {"dedup", "evaluate"}  # tests/integration/test_resume.py


@pytest.fixture
def env(services_env, tmp_path, settings):  # noqa: F811
    settings.JOB_STALE_AFTER_S = STALE_AFTER
    settings.FEATURE_STORE = tmp_path / "features"
    settings.EXPORT_ROOT = tmp_path / "exports"
    settings.EVAL_ROOT = tmp_path / "evaluations"
    settings.SOURCE_ALLOWED_ROOTS = [tmp_path / "sources"]
    (tmp_path / "sources").mkdir()
    return {**services_env, "OODC_JOB_HEARTBEAT_S": "0.5", "OODC_JOB_STALE_AFTER_S": str(STALE_AFTER),
            "CELERY_VISIBILITY_TIMEOUT": "3600", "OODC_FEATURE_STORE": str(tmp_path / "features"),
            "OODC_EXPORT_ROOT": str(tmp_path / "exports"), "OODC_EVAL_ROOT": str(tmp_path / "evaluations"),
            "OODC_SOURCE_ROOTS": str(tmp_path / "sources"), "OODC_INGEST_CHUNK_SIZE": "3", "OODC_EXTRACT_CHUNK_SIZE": "4",
            "OODC_EXTRACT_BATCH_SIZE": "4"}


def manage(env, *args, timeout=300):
    return subprocess.run([sys.executable, "manage.py", *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)


def shell(env, code: str):
    out = manage(env, "shell", "-c", code)
    assert out.returncode == 0, out.stdout + out.stderr
    return out


def tree(folder: Path, skip=()) -> dict[str, str]:
    """relative path -> sha256 of every file under ``folder``."""
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file() and p.name not in skip}


def quiet(*args, **kwargs):
    call_command(*args, stdout=io.StringIO(), stderr=io.StringIO(), **kwargs)


# -- the scenarios: prepare, queue on the workers, slow what, when to kill, the result, the reference --


def _images(source: str):
    rows = Image.objects.filter(source__name=source).values_list("relative_path", "sha256", "status", "width", "height", "error_code")
    return sorted(rows)


class Ingest:
    kind = "ingest"
    slow = ("curation.services.ingest:_inspect", 0.3)

    def prepare(self, tmp_path, env):
        make_image_folder(tmp_path / "pool", n_good=30, classes=["sky", "hayfield", "n02084071"])

    def queue(self, tmp_path, env):
        out = manage(env, "add_source", "killed", str(tmp_path / "pool"), "--no-wait")
        assert out.returncode == 0, out.stderr

    def ready(self, job):
        return JobChunk.objects.filter(job=job, done=True).count() >= 2

    def result(self, tmp_path, which):
        rows = _images(which)
        assert len(rows) == len({r[0] for r in rows}) == 30  # every file once
        return rows

    def reference(self, tmp_path):
        quiet("add_source", "reference", str(tmp_path / "pool"))
        return "reference"


class ClassFilter:
    kind = "class_filter"
    slow = ("curation.services.class_filter:class_filter_execute", 3.0)

    def prepare(self, tmp_path, env):
        from pipelines.imagenet import resolve_class_list

        (tmp_path / "cands.txt").write_text("\n".join(resolve_class_list("imagenet-21k")[:400]) + "\n")

    def queue(self, tmp_path, env):
        self.waiting = subprocess.Popen([sys.executable, "manage.py", "filter_classes", "--candidates", str(tmp_path / "cands.txt"),
                                         "--queue", "--out", str(tmp_path / "killed.csv")], cwd=REPO, env=env,
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def ready(self, job):
        return job.heartbeat_at is not None

    def after_resume(self):
        assert self.waiting.wait(timeout=180) == 0  # the command that queued it saw it finish

    def result(self, tmp_path, which):
        run = ClassFilterRun.objects.get(pk=which)
        rows = sorted(run.decisions.values_list("key", "rule_decision", "rule_name"))
        assert len(rows) == len({r[0] for r in rows}) == 400
        return rows

    def killed_id(self, job):
        return ClassFilterRun.objects.get(job=job).pk

    def reference(self, tmp_path):
        quiet("filter_classes", "--candidates", str(tmp_path / "cands.txt"), "--out", str(tmp_path / "reference.csv"))
        return ClassFilterRun.objects.order_by("-pk").first().pk


def _features(source: str):
    from curation.services.image_pipeline import load_features

    embs = list(ImageEmbedding.objects.filter(image__source__name=source).select_related("image").order_by("image__relative_path"))
    vectors = load_features(embs)
    return [(e.image.relative_path, e.top1_wnid, round(e.max_softmax, 4), hashlib.sha256(v.tobytes()).hexdigest()[:16])
            for e, v in zip(embs, vectors)]


class Extract:
    kind = "extract"
    slow = ("pipelines.extract:extract", 1.0)

    def prepare(self, tmp_path, env):
        make_image_folder(tmp_path / "pool", n_good=24, classes=["sky", "hayfield"])
        quiet("add_source", "killed", str(tmp_path / "pool"))
        quiet("add_source", "reference", str(tmp_path / "pool"))

    def queue(self, tmp_path, env):
        out = manage(env, "run_image_pipeline", "--sources", "killed", "--no-dedup", "--no-wait")
        assert out.returncode == 0, out.stderr

    def ready(self, job):
        return JobChunk.objects.filter(job=job, done=True).count() >= 2

    def result(self, tmp_path, which):
        rows = _features(which)
        assert len(rows) == len({r[0] for r in rows}) == 24
        return rows

    def reference(self, tmp_path):
        quiet("run_image_pipeline", sources=["reference"], no_dedup=True)
        return "reference"


def _export_files(export: Export) -> dict:
    from curation.services.exports import export_path

    folder = Path(export_path(export))
    manifest = json.loads((folder / "manifest.json").read_text())
    files = tree(folder, skip=("manifest.json", "decisions.csv"))
    leftovers = [p.name for p in folder.parent.iterdir() if p.name != folder.name]
    assert not leftovers, f"half-written folders left next to {folder}: {leftovers}"
    return {"files": files, "manifest_files": manifest.get("files"), "counts": manifest.get("counts")}


class ExportKind:
    kind = "export"
    slow = ("curation.services.exports:_finish", 60)

    def prepare(self, tmp_path, env):
        from curation.services.review import review_cache_clear
        from tests.test_exports import reviewed_pool

        review_cache_clear()
        reviewed_pool(tmp_path, n=10, name="wpool", answer=lambda img: ("ood", []))
        review_cache_clear()

    def queue(self, tmp_path, env):
        self.waiting = subprocess.Popen([sys.executable, "manage.py", "export", "--name", "killed", "--source", "wpool", "--queue"],
                                        cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def ready(self, job):
        return (Path(str(tmp_root(job))) / "killed" / "v1" / "manifest.json").is_file()

    def after_resume(self):
        assert self.waiting.wait(timeout=180) == 0

    def result(self, tmp_path, which):
        export = Export.objects.get(name=which)
        assert export.status == "done" and Export.objects.filter(name=which).count() == 1
        return _export_files(export)

    def reference(self, tmp_path):
        quiet("export", "--name", "reference", "--source", "wpool")
        return "reference"


def tmp_root(job):
    from django.conf import settings

    return settings.EXPORT_ROOT


class UnitTests:
    kind = "unit_tests"
    slow = ("curation.services.exports:_finish", 60)  # the folder is in place, the export not yet recorded

    def prepare(self, tmp_path, env):
        from tests.review_data import id_sets

        id_sets(tmp_path, {"idref": (3, 96)})

    def queue(self, tmp_path, env):
        shell(env, "from curation.services.exports import unit_tests_create; "
                   "unit_tests_create(name='killed', per_test=2, workers=1, enqueue=True)")

    def ready(self, job):
        return (Path(str(tmp_root(job))) / "killed" / "v1" / "manifest.json").is_file()

    def result(self, tmp_path, which):
        export = Export.objects.get(name=which)
        assert export.status == "done" and Export.objects.filter(name=which).count() == 1
        return _export_files(export)

    def reference(self, tmp_path):
        quiet("make_unit_tests", "--name", "reference", "--per-test", "2", "--workers", "1")
        return "reference"


class CovariateShift:
    kind = "covariate_shift"
    slow = ("curation.services.covariate_shift:run_task", 0.4)

    def prepare(self, tmp_path, env):
        from tests.review_data import id_sets

        id_sets(tmp_path, {"idtest": (3, 96)})

    def queue(self, tmp_path, env):
        shell(env, "from curation.models import Source; from curation.services.covariate_shift import covariate_shift_start; "
                   "covariate_shift_start(source=Source.objects.get(name='idtest'), corruptions=['gaussian_noise'], "
                   "severities=[1, 3], seed=0, name='killed')")

    def ready(self, job):
        return job.progress >= 3

    def result(self, tmp_path, which):
        folder = tmp_path / "sources" / which
        files = tree(folder)
        assert len([f for f in files if f.endswith(".png") or f.endswith(".jpg") or f.endswith(".JPEG")]) == 12
        sources = sorted(s.name.split("-", 1)[1] for s in Source.objects.filter(name__startswith=f"{which}-"))
        return {"files": files, "sources": sources}

    def reference(self, tmp_path):
        quiet("make_covariate_shift", "--from", "source:idtest", "--out", str(tmp_path / "sources" / "reference"),
              "--corruptions", "gaussian_noise", "--severities", "1,3", "--seed", "0", "--name", "reference")
        return "reference"


class EmbeddingMap:
    kind = "embedding_map"
    slow = ("curation.services.embedding_map:project", 60)  # features loaded, the projection not yet written

    def prepare(self, tmp_path, env):
        make_image_folder(tmp_path / "pool", n_good=12, classes=["sky", "hayfield"])
        quiet("add_source", "killed", str(tmp_path / "pool"))
        quiet("add_source", "reference", str(tmp_path / "pool"))
        quiet("run_image_pipeline", sources=["killed", "reference"], no_dedup=True)

    def queue(self, tmp_path, env):
        shell(env, "from curation.models import Source; from curation.services.embedding_map import embedding_map_start; "
                   "embedding_map_start(source=Source.objects.get(name='killed'), method='pca')")

    def ready(self, job):
        return job.message.startswith("projecting")

    def result(self, tmp_path, which):
        import numpy as np
        from django.conf import settings

        job = Job.objects.get(kind="embedding_map", source__name=which, status="done")
        data = np.load(Path(settings.FEATURE_STORE) / job.result["path"])
        paths = dict(Image.objects.filter(source__name=which).values_list("pk", "relative_path"))
        points = {paths[int(i)]: tuple(np.round(xy, 3).tolist()) for i, xy in zip(data["ids"], data["xy"])}
        assert len(points) == len(data["ids"]) == 12
        return points

    def reference(self, tmp_path):
        from curation.services.embedding_map import embedding_map_start

        embedding_map_start(source=Source.objects.get(name="reference"), method="pca")  # no broker here: runs now
        return "reference"


SCENARIOS = [Ingest(), ClassFilter(), Extract(), ExportKind(), UnitTests(), CovariateShift(), EmbeddingMap()]


def test_every_kind_is_covered():
    covered = {s.kind for s in SCENARIOS} | COVERED_ELSEWHERE
    assert covered == set(jobs.registered_kinds()), f"add a kill-and-resume scenario for {set(jobs.registered_kinds()) - covered}"


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.kind)
def test_killed_mid_work_and_resumed_equals_an_uninterrupted_run(scenario, env, workers, tmp_path, role_groups):  # noqa: F811
    scenario.prepare(tmp_path, env)
    workers.env = env
    w1 = workers.start("w1", slow=scenario.slow)
    scenario.queue(tmp_path, env)
    wait_until(lambda: Job.objects.filter(kind=scenario.kind).exists(), 60, "the job to be queued", workers)
    job = Job.objects.filter(kind=scenario.kind).order_by("-pk").first()
    wait_until(lambda: scenario.ready(Job.objects.get(pk=job.pk)), 180, f"{scenario.kind} to be mid-work", workers)
    workers.kill(w1)
    assert Job.objects.get(pk=job.pk).status in ("pending", "running"), "the job finished before the kill: slow it more"
    wait_until(lambda: jobs.is_stale(Job.objects.get(pk=job.pk)), 30, "the job to be seen stale", workers)

    workers.start("w2")
    resumed = manage(env, "resume_job", str(job.pk))
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr + workers.logs()
    wait_until(lambda: Job.objects.get(pk=job.pk).status in ("done", "failed"), 240, "the resumed job to finish", workers)
    job.refresh_from_db()
    assert job.status == "done", job.message + workers.logs()
    if hasattr(scenario, "after_resume"):
        scenario.after_resume()
    killed = scenario.result(tmp_path, scenario.killed_id(job) if hasattr(scenario, "killed_id") else "killed")
    chunks = list(JobChunk.objects.filter(job=job))
    assert chunks and all(c.done for c in chunks)

    workers.stop_all()
    reference = scenario.result(tmp_path, scenario.reference(tmp_path))
    assert killed == reference
