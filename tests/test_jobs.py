"""The job protocol, the same checks for every registered kind: a run interrupted in the middle
(the process dies with its chunk unfinished) leaves the job unfinished, not failed; it is
reported stale once nobody reports on it; resuming it finishes it; chunks done before the
interruption are not done again; a second resume of a finished job is refused; a step that
raises fails the job with its message. (Real workers killed mid-chunk: tests/integration/.)"""
from __future__ import annotations

import dataclasses
import io
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.utils import timezone

from curation import jobs
from curation.jobs import protocol
from curation.models import Job, JobChunk
from tests.conftest import make_image_folder

pytestmark = pytest.mark.django_db


class Killed(BaseException):
    """Stands in for SIGKILL: not an Exception, so no failure handler records it."""


@pytest.fixture(autouse=True)
def roots(tmp_path, settings):
    settings.EXPORT_ROOT = tmp_path / "exports"
    settings.FEATURE_STORE = tmp_path / "features"
    settings.EVAL_ROOT = tmp_path / "evaluations"
    settings.EXTRACT_CHUNK_SIZE = 4
    settings.EVAL_CHUNK_SIZE = 4
    settings.INGEST_CHUNK_SIZE = 4
    settings.SOURCE_ALLOWED_ROOTS = [tmp_path / "sources"]
    settings.EVAL_SANITY_SEEDS = 0  # the random-weight check is tested on its own (tests/pipelines/test_sanity.py)


def _source(tmp_path, name="pool", n=12):
    from curation.services.sources import source_register

    make_image_folder(tmp_path / name, n_good=n, classes=["sky", "hayfield"])
    return source_register(name=name, root=tmp_path / name).source


def _extracted(tmp_path):
    _source(tmp_path)
    call_command("add_source", "pool", str(tmp_path / "pool"), stdout=io.StringIO(), stderr=io.StringIO())
    call_command("run_image_pipeline", sources=["pool"], no_dedup=True, stdout=io.StringIO(), stderr=io.StringIO())


def setup_ingest(tmp_path):
    from curation.services.ingest import ingest_start

    return ingest_start(source=_source(tmp_path), enqueue=False)


def setup_extract(tmp_path):
    from curation.services.image_pipeline import extract_start

    source = _source(tmp_path)
    call_command("add_source", "pool", str(tmp_path / "pool"), stdout=io.StringIO(), stderr=io.StringIO())
    return extract_start(source=source, enqueue=False)


def setup_dedup(tmp_path):
    from curation.services.image_pipeline import dedup_start

    _extracted(tmp_path)
    return dedup_start(enqueue=False)


def setup_class_filter(tmp_path):
    from curation.services.class_filter import class_filter_start

    return class_filter_start(candidates_spec="imagenet-21k", enqueue=False).job


def _reviewed(tmp_path):
    from curation.services.review import review_cache_clear
    from tests.test_exports import reviewed_pool

    review_cache_clear()
    source, _ = reviewed_pool(tmp_path, n=8, answer=lambda img: ("ood", []))
    return source


def setup_export(tmp_path):
    from curation.services.exports import export_create

    return export_create(name="prot", sources=[_reviewed(tmp_path)], enqueue=False).job


def setup_unit_tests(tmp_path):
    from curation.services.exports import unit_tests_create
    from tests.review_data import id_sets

    id_sets(tmp_path, {"idref": (2, 64)})
    return unit_tests_create(name="ut", per_test=1, enqueue=False).job


def setup_evaluate(tmp_path):
    from curation.services.evaluation import evaluation_create
    from curation.services.exports import export_create, export_run_inline
    from tests.review_data import id_sets

    export = export_run_inline(export=export_create(name="ev", sources=[_reviewed(tmp_path)], enqueue=False))
    id_sets(tmp_path, {"idt": (3, 96), "idf": (4, 112)})
    return evaluation_create(export=export, id_test="source:idt", id_fit="source:idf", models=["efficientnet_lite0"],
                             methods=["msp", "energy"], enqueue=False).job


def setup_covariate_shift(tmp_path):
    from curation.models import Source
    from curation.services.covariate_shift import covariate_shift_start
    from tests.review_data import id_sets

    id_sets(tmp_path, {"idref": (2, 64)})
    return covariate_shift_start(source=Source.objects.get(name="idref"), corruptions=["fog"], severities=[1], seed=0,
                                 name="idref-c", enqueue=False)


def setup_embedding_map(tmp_path):
    from curation.models import Source
    from curation.services.embedding_map import embedding_map_start

    _extracted(tmp_path)  # (queued on commit, which a test's transaction never reaches: the job stays pending)
    return embedding_map_start(source=Source.objects.get(name="pool"), method="pca")


SETUPS = {"ingest": setup_ingest, "extract": setup_extract, "dedup": setup_dedup, "class_filter": setup_class_filter,
          "export": setup_export, "unit_tests": setup_unit_tests, "evaluate": setup_evaluate,
          "covariate_shift": setup_covariate_shift, "embedding_map": setup_embedding_map}


def test_every_stage_is_a_registered_kind_with_a_protocol_test():
    assert set(jobs.registered_kinds()) == set(Job.Kind.values) == set(SETUPS)


def _finished(job: Job) -> bool:
    job.refresh_from_db()
    return job.status == Job.Status.DONE


@pytest.mark.parametrize("kind", sorted(SETUPS))
def test_interrupted_job_is_stale_then_resumed_without_redoing_done_chunks(kind, tmp_path, monkeypatch, settings):
    job = SETUPS[kind](tmp_path)
    assert job.kind == kind and job.status == Job.Status.PENDING
    real = jobs.kind_of(kind)
    plan_total = len(real.plan(job.pk))  # plan once, as the runner does, to know the chunks
    stop_at = plan_total // 2  # the chunk the "kill" lands in (0 for one-step kinds)
    seen: list[int] = []

    def dying(job_id, index, progress=None, on_total=None):
        seen.append(index)
        if len(seen) - 1 == stop_at:
            raise Killed()  # the process is gone in the middle of this chunk
        return real.process(job_id, index, progress, on_total)

    monkeypatch.setitem(protocol._KINDS, kind, dataclasses.replace(real, process=dying))
    with pytest.raises(Killed):
        jobs.run_inline(job)
    job.refresh_from_db()
    assert job.status in (Job.Status.PENDING, Job.Status.RUNNING)  # not failed: nobody saw it die
    done_first = dict(JobChunk.objects.filter(job=job, done=True).values_list("index", "attempts"))
    assert len(done_first) == stop_at and all(n <= 1 for n in done_first.values())
    assert not jobs.is_stale(job)  # it just reported
    with pytest.raises(jobs.JobNotResumable, match="not lost"):
        jobs.resume(job)

    monkeypatch.setitem(protocol._KINDS, kind, real)
    Job.objects.filter(pk=job.pk).update(heartbeat_at=timezone.now() - timedelta(seconds=settings.JOB_STALE_AFTER_S + 1))
    job.refresh_from_db()
    assert jobs.is_stale(job) and jobs.state(job) == "stale" and Job.objects.filter(jobs.stale_filter(), pk=job.pk).exists()
    jobs.resume(job)
    assert _finished(job), job.message
    chunks = {c.index: c for c in JobChunk.objects.filter(job=job)}
    # a phased kind (the duplicate search) adds its later phases' chunks after the planned ones
    assert set(range(plan_total)) <= set(chunks) and all(c.done for c in chunks.values())
    assert all(chunks[i].attempts == n for i, n in done_first.items())  # done chunks were not done again
    with pytest.raises(jobs.JobNotResumable, match="nothing to resume"):
        jobs.resume(job)


@pytest.mark.parametrize("kind", ["ingest", "export"])
def test_a_step_that_raises_fails_the_job_with_its_message(kind, tmp_path, monkeypatch):
    job = SETUPS[kind](tmp_path)
    real = jobs.kind_of(kind)

    def broken(job_id, index, progress=None, on_total=None):
        raise RuntimeError("disk on fire")

    monkeypatch.setitem(protocol._KINDS, kind, dataclasses.replace(real, process=broken))
    with pytest.raises(RuntimeError):
        jobs.run_inline(job)
    job.refresh_from_db()
    assert job.status == Job.Status.FAILED and "disk on fire" in job.message
    assert not JobChunk.objects.filter(job=job, lease_until__isnull=False).exists()  # leases released


def test_the_admin_shows_stale_jobs_and_resumes_them(tmp_path, client, settings):
    from django.contrib.auth.models import User

    job = setup_ingest(tmp_path)
    Job.objects.filter(pk=job.pk).update(status=Job.Status.RUNNING,
                                         heartbeat_at=timezone.now() - timedelta(seconds=settings.JOB_STALE_AFTER_S + 5))
    client.force_login(User.objects.create_superuser("root", password="pw"))
    page = client.get("/admin/curation/job/?liveness=stale").content.decode()
    assert "stale" in page and f'value="{job.pk}"' in page
    r = client.post("/admin/curation/job/", {"action": "resume_jobs", "_selected_action": [job.pk]}, follow=True)
    assert r.status_code == 200 and "Resumed" in r.content.decode()
    assert _finished(job) and job.progress == job.total == 12
    r = client.post("/admin/curation/job/", {"action": "resume_jobs", "_selected_action": [job.pk]}, follow=True)
    assert "nothing to resume" in r.content.decode()


@pytest.mark.django_db(transaction=True)
def test_a_step_that_reports_no_progress_still_beats(tmp_path, settings):
    import time

    from curation.jobs.heartbeat import Heartbeat

    settings.JOB_HEARTBEAT_S = 0.2
    job = Job.objects.create(kind=Job.Kind.DEDUP, status=Job.Status.RUNNING)
    with Heartbeat(job.pk):
        first = Job.objects.get(pk=job.pk).heartbeat_at
        time.sleep(1.0)  # a long computation with no progress callback
        later = Job.objects.get(pk=job.pk).heartbeat_at
    assert first is not None and (later - first).total_seconds() >= 0.4


@pytest.mark.parametrize("how", ["redelivered", "two_at_once"])
def test_a_lost_finalize_step_is_queued_again_by_the_next_chunk_delivery(tmp_path, monkeypatch, how):
    """Every chunk done but the finalize step never queued: a finalize message lost while Redis
    restarted (the chunk's delivery comes again and finds its chunk done), or two chunks that
    committed at once (each saw the other unfinished, so neither was the last). The delivery
    that finds all chunks done queues the finalize step; a job already done is left alone."""
    from curation.jobs import runner
    from curation.services.ingest import ingest_start

    job = ingest_start(source=_source(tmp_path), enqueue=False)
    indices = runner.run_step(job_id=job.pk, step="plan", queue_next=False)
    assert len(indices) == 3
    for index in indices if how == "redelivered" else indices[:-1]:
        runner.run_step(job_id=job.pk, step="chunk", index=index, queue_next=False)  # no finalize queued
    if how == "two_at_once":  # the last chunk commits while another chunk's commit is landing
        kind = jobs.kind_of("ingest")
        JobChunk.objects.filter(job=job, index=indices[0]).update(done=False)

        def process(*args, **kwargs):
            last = kind.process(*args, **kwargs)
            JobChunk.objects.filter(job=job, index=indices[0]).update(done=True)  # the other commit
            return last

        monkeypatch.setattr(runner, "kind_of", lambda name: dataclasses.replace(kind, process=process))
        runner.run_step(job_id=job.pk, step="chunk", index=indices[-1])  # as a worker runs it: it was not the last
    else:
        assert Job.objects.get(pk=job.pk).status == "running"
        runner.run_step(job_id=job.pk, step="chunk", index=indices[0])  # delivered again, as a worker runs it
    job.refresh_from_db()
    assert job.status == "done" and job.progress == job.total == 12  # finalize ran (inline: no broker here)
    runner.run_step(job_id=job.pk, step="chunk", index=indices[1])  # a later delivery of a finished job: nothing
    assert Job.objects.get(pk=job.pk).finished_at == job.finished_at
