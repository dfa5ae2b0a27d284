"""Kill and resume, job kind by job kind (issue 38): a real `celery worker` (Redis broker,
PostgreSQL) is SIGKILLed in the middle of the kind's work, the job is seen stale, resumed with
`resume_job`, finished by another worker; its result must equal an uninterrupted run's of the
same work (same rows, same files with the same hashes) with nothing duplicated and nothing
half-written left behind.

The killed worker has one function slowed (tests/integration/slow_worker.py) so the kill lands
mid-work; the uninterrupted reference runs in this process. Redis redelivery is kept at an hour:
only the resume can finish the job. Every registered kind has a scenario here: ingest, class
filter, extraction, duplicate search, export, unit tests, covariate shift, evaluation and the
embedding map (tests/integration/test_resume.py adds the stage commands' own --resume paths).
test_every_kind_is_covered fails when a kind is added without a kill-and-resume scenario."""
from __future__ import annotations

import hashlib
import io
import json
import re
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


@pytest.fixture
def env(services_env, tmp_path, settings, monkeypatch):  # noqa: F811
    from curation.version import code_version

    # one code version for the killed run (its worker and commands) and the reference run here,
    # as other commits to the checkout may land between them (exports write it in their README)
    monkeypatch.setenv("OODC_CODE_VERSION", "kill-and-resume-test")
    code_version.cache_clear()
    yield {**_env(services_env, tmp_path, settings), "OODC_CODE_VERSION": "kill-and-resume-test"}
    code_version.cache_clear()


def _env(base, tmp_path, settings):
    settings.JOB_STALE_AFTER_S = STALE_AFTER
    settings.FEATURE_STORE = tmp_path / "features"
    settings.EXPORT_ROOT = tmp_path / "exports"
    settings.EVAL_ROOT = tmp_path / "evaluations"
    settings.SOURCE_ALLOWED_ROOTS = [tmp_path / "sources"]
    settings.EVAL_CHUNK_SIZE, settings.EXTRACT_BATCH_SIZE = 2, 4  # the reference runs as the workers do
    (tmp_path / "sources").mkdir()
    return {**base, "OODC_JOB_HEARTBEAT_S": "0.5", "OODC_JOB_STALE_AFTER_S": str(STALE_AFTER),
            "CELERY_VISIBILITY_TIMEOUT": "3600", "OODC_FEATURE_STORE": str(tmp_path / "features"),
            "OODC_EXPORT_ROOT": str(tmp_path / "exports"), "OODC_EVAL_ROOT": str(tmp_path / "evaluations"),
            "OODC_SOURCE_ROOTS": str(tmp_path / "sources"), "OODC_INGEST_CHUNK_SIZE": "3", "OODC_EXTRACT_CHUNK_SIZE": "4",
            "OODC_EXTRACT_BATCH_SIZE": "4", "OODC_EVAL_CHUNK_SIZE": "2"}


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
        from pipelines.classes.imagenet import resolve_class_list

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
    slow = ("pipelines.features.extract:extract", 1.0)

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


def _names() -> dict[int, str]:
    return {pk: f"{src}/{rel}" for pk, src, rel in Image.objects.values_list("pk", "source__name", "relative_path")}


class Duplicates:
    kind = "dedup"
    slow = ("pipelines.features.dup_search:join", 60)  # the cells assigned, a join unit in progress

    def prepare(self, tmp_path, env):
        from PIL import Image as PILImage

        from fixtures.images import transformed_copies
        from pipelines.features.classifiers import imagenet_1k_classes
        from tests.conftest import real_photo
        from tests.review_data import ingest

        make_image_folder(tmp_path / "pool", n_good=8, classes=["sky", "hayfield"])
        # near-duplicates within the pool (a photo and its copies) and of an ID image (another photo)
        for photo, folder in (("coffee.png", tmp_path / "pool" / "sky"), ("camera.png", tmp_path / "pool" / "hayfield")):
            with PILImage.open(real_photo(photo)) as im:
                for name, data in list(transformed_copies(im).items())[:3]:
                    (folder / f"{Path(photo).stem}_{name}").write_bytes(data)
        id_class = tmp_path / "idref" / imagenet_1k_classes()[0][0]
        id_class.mkdir(parents=True)
        (id_class / "camera.png").write_bytes(real_photo("camera.png").read_bytes())
        quiet("add_source", "pool", str(tmp_path / "pool"))
        ingest("idref", tmp_path / "idref", role="id")
        quiet("run_image_pipeline", sources=["pool", "idref"], no_dedup=True)

    def queue(self, tmp_path, env):
        shell(env, "from curation.services.image_pipeline import dedup_start; dedup_start()")

    def ready(self, job):
        return JobChunk.objects.filter(job=job, payload__phase="join").exists()  # the worker is in the join

    def killed_id(self, job):
        return job.pk

    def result(self, tmp_path, which):
        from curation.models import ClassVisualSignal

        job = Job.objects.get(pk=which)
        assert job.status == "done"
        names = _names()
        rows = sorted((names[image], names.get(group), re.sub(r"\d+$", lambda m: names[int(m.group())], drop), names.get(near),
                       None if sim is None else round(sim, 4))
                      for image, group, drop, near, sim in ImageEmbedding.objects.filter(image__source__name="pool").values_list(
                          "image_id", "dup_group", "drop_reason", "nearest_id_image_id", "nearest_id_similarity"))
        assert len(rows) == len({r[0] for r in rows}) == 14
        drops = {r[2].partition(":")[0] for r in rows}
        assert {"near_duplicate_of", "duplicate_of_id"} <= drops, rows  # the search found something to compare
        signals = sorted(ClassVisualSignal.objects.values_list("candidate_class__folder", "n_images", "top_wnid", "flagged", "reason"))
        return {"rows": rows, "signals": signals, "result": job.result}

    def reference(self, tmp_path):
        from curation.models import ClassVisualSignal
        from curation.services.image_pipeline import dedup_run_inline, dedup_start

        ImageEmbedding.objects.update(dup_group=None, drop_reason="", search_group=None, search_drop="", nearest_id_image=None,
                                      nearest_id_similarity=None)  # nothing of the killed run's search left to find
        ClassVisualSignal.objects.all().delete()
        return dedup_run_inline(job=dedup_start(enqueue=False)).pk


TEXT = (".md", ".txt", ".csv", ".json", ".yaml", ".yml")


def _export_files(export: Export) -> dict:
    """The export's files and their sha256, its manifest's file list and counts. Its name and
    the moment it was made are part of some paths and texts (the datasheet README, lists): they
    are written NAME and CREATED before hashing those, so two exports of the same images under
    two names compare equal, and anything else that differs does not."""
    from curation.services.exports import export_path

    folder = Path(export_path(export))
    manifest = json.loads((folder / "manifest.json").read_text())
    created = ((manifest.get("datasheet") or {}).get("export") or {}).get("created") or ""
    assert tree(folder, skip=("manifest.json",)) == manifest["files"]  # the manifest tells the truth about the files

    def plain(rel: str, data: bytes | None = None):
        rel = rel.replace(export.name, "NAME")
        if data is None:
            return rel
        if rel.endswith(TEXT):
            text = data.decode("utf-8").replace(export.name, "NAME")
            text = text.replace(created, "CREATED") if created else text
            if rel.endswith(".md"):  # the datasheet's table of sha256 (of files that hold the name): checked above
                text = re.sub(r"\b[0-9a-f]{64}\b", "SHA256", text)
            data = text.encode("utf-8")
        return rel, hashlib.sha256(data).hexdigest()

    files = dict(plain(str(p.relative_to(folder)), p.read_bytes()) for p in sorted(folder.rglob("*"))
                 if p.is_file() and p.name not in ("manifest.json", "decisions.csv"))
    leftovers = [p.name for p in folder.parent.iterdir() if p.name != folder.name]
    assert not leftovers, f"half-written folders left next to {folder}: {leftovers}"
    return {"files": files, "manifest_files": sorted(plain(rel) for rel in manifest["files"]), "counts": manifest.get("counts")}


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
        quiet("export", "--name", "uninterrupted", "--source", "wpool")  # (a name no fixed text of the export holds)
        return "uninterrupted"


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


def _drawing(svg: str) -> str:
    """An SVG plot without what matplotlib makes differently each time: the date in its metadata
    and the random ids of clip paths and markers (numbered here in order of appearance)."""
    svg = re.sub(r"<metadata>.*?</metadata>", "", svg, flags=re.S)
    ids = {old: f"id{i}" for i, old in enumerate(dict.fromkeys(re.findall(r'id="([^"]+)"', svg)))}
    if ids:
        svg = re.sub("|".join(re.escape(i) for i in sorted(ids, key=len, reverse=True)), lambda m: ids[m.group()], svg)
    return svg


def _without_timings(value):
    """Results without the seconds each detector took."""
    if isinstance(value, dict):
        return {k: _without_timings(v) for k, v in value.items() if k != "seconds"}
    if isinstance(value, list):
        return [_without_timings(v) for v in value]
    return value


class Evaluation:
    kind = "evaluate"
    slow = ("pipelines.features.extract:extract", 1.0)
    args = ["evaluate", "--export", "wexp", "--id-test", "source:wtest", "--id-fit", "source:wfit", "--methods", "msp,energy,knn",
            "--sanity-seeds", "0"]

    def prepare(self, tmp_path, env):
        from curation.services.review import review_cache_clear
        from tests.review_data import id_sets
        from tests.test_exports import reviewed_pool

        review_cache_clear()
        reviewed_pool(tmp_path, n=10, name="wpool", answer=lambda img: ("ood", []))
        review_cache_clear()
        quiet("export", "--name", "wexp", "--source", "wpool")
        id_sets(tmp_path, {"wtest": (3, 96), "wfit": (6, 112)})

    def queue(self, tmp_path, env):
        self.waiting = subprocess.Popen([sys.executable, "manage.py", *self.args, "--queue"], cwd=REPO, env=env,
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def ready(self, job):
        return JobChunk.objects.filter(job=job, done=True).count() >= 2

    def after_resume(self):
        assert self.waiting.wait(timeout=180) == 0

    def killed_id(self, job):
        from curation.models import EvaluationRun

        return EvaluationRun.objects.get(job=job).pk

    def result(self, tmp_path, which):
        import numpy as np
        from django.conf import settings

        from curation.models import EvalFeatureSet, EvaluationRun

        run = EvaluationRun.objects.get(pk=which)
        assert run.status == "done" and run.job.progress == run.job.total == 10 + 6 + 12
        assert sorted(JobChunk.objects.filter(job=run.job).values_list("index", flat=True)) == list(range(14))  # none twice
        root = Path(settings.EVAL_ROOT)
        results = json.loads(json.dumps(run.results))
        outputs = {}
        for model, r in results["models"].items():
            for role, pk in r.pop("cache").items():  # the cache rows' ids differ between runs; their arrays must not
                row = EvalFeatureSet.objects.get(pk=pk)
                with np.load(root / row.path) as data:
                    outputs[(model, role)] = {k: hashlib.sha256(np.ascontiguousarray(data[k]).tobytes()).hexdigest() for k in data.files}
                    assert len(set(data["keys"].tolist())) == len(data["keys"]) == row.images  # every image once
        files = {str(p.relative_to(root / "runs" / str(run.pk))): hashlib.sha256(_drawing(p.read_text()).encode()).hexdigest()
                 for p in sorted((root / "runs" / str(run.pk)).rglob("*")) if p.is_file()}
        assert files and all(f.endswith(".svg") for f in files)
        return {"results": _without_timings(results), "outputs": outputs, "files": files}

    def reference(self, tmp_path):
        import shutil

        from django.conf import settings

        from curation.models import EvalFeatureSet, EvaluationRun

        EvalFeatureSet.objects.all().delete()  # the reference computes every output again, uninterrupted
        shutil.rmtree(Path(settings.EVAL_ROOT) / "cache")
        quiet(*self.args)
        return EvaluationRun.objects.order_by("-pk").first().pk


class EmbeddingMap:
    kind = "embedding_map"
    slow = ("curation.services.embedding_map:project_streamed", 60)  # the rows read, the projection not yet written

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


def _as_class_tars(folder: Path, out: Path) -> None:
    """The same images as ImageNet-21K ships them: one ``<class>.tar`` per class folder."""
    from fixtures.archives import write_class_tars

    write_class_tars(out, {d.name: [(f.name, f.read_bytes()) for f in sorted(d.iterdir())] for d in sorted(folder.iterdir())})


class IngestArchive(Ingest):
    """Ingest of per-class tars, read in place (issue 44)."""

    def prepare(self, tmp_path, env):
        make_image_folder(tmp_path / "files", n_good=30, classes=["sky", "hayfield", "n02084071"])
        _as_class_tars(tmp_path / "files", tmp_path / "pool")

    def queue(self, tmp_path, env):
        out = manage(env, "add_source", "killed", str(tmp_path / "pool"), "--layout", "class-tars", "--no-wait")
        assert out.returncode == 0, out.stderr

    def result(self, tmp_path, which):
        rows = super().result(tmp_path, which)
        assert all(".tar/" in r[0] and r[2] == "ok" for r in rows)
        return rows

    def reference(self, tmp_path):
        quiet("add_source", "reference", str(tmp_path / "pool"), layout="class-tars")
        return "reference"


class ExtractArchive(Extract):
    """Extraction reading per-class tars in member order (issue 44)."""

    def prepare(self, tmp_path, env):
        make_image_folder(tmp_path / "files", n_good=24, classes=["sky", "hayfield"])
        _as_class_tars(tmp_path / "files", tmp_path / "pool")
        quiet("add_source", "killed", str(tmp_path / "pool"), layout="class-tars")
        quiet("add_source", "reference", str(tmp_path / "pool"), layout="class-tars")


SCENARIOS = [Ingest(), ClassFilter(), Extract(), Duplicates(), ExportKind(), UnitTests(), CovariateShift(), Evaluation(),
             EmbeddingMap(), IngestArchive(), ExtractArchive()]


def test_every_kind_is_covered():
    covered = {s.kind for s in SCENARIOS}
    assert covered == set(jobs.registered_kinds()), f"add a kill-and-resume scenario for {set(jobs.registered_kinds()) - covered}"


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.kind + ("-archive" if "Archive" in type(s).__name__ else ""))
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
    assert killed == reference, differences(killed, reference)


def differences(a, b, where="") -> list[str]:
    """Where two results differ (for the failure message)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return [d for k in sorted(set(a) | set(b), key=str) for d in differences(a.get(k), b.get(k), f"{where}/{k}")]
    if isinstance(a, list | tuple) and isinstance(b, list | tuple) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in differences(x, y, f"{where}[{i}]")]
    return [] if a == b else [f"{where}: {a!r:.200} != {b!r:.200}"]
