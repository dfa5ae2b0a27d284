"""Chunk bookkeeping (curation/jobs/chunks.py), which every chunked kind uses: a chunk is done
once, a redelivery does nothing, "last chunk" is answered for exactly one chunk even when the
chunks of a job commit at the same moment on several workers, and a chunk whose worker is lost
again and again fails its job with one line instead of coming back for ever. Real PostgreSQL;
the workers are threads with their own connections."""
from __future__ import annotations

import threading

import pytest
from django.db import connections

from curation.jobs import chunks, run_step
from curation.jobs.chunks import MAX_ATTEMPTS, ChunkAttemptsExceeded, chunk_finish, chunk_start, chunks_write
from curation.models import AuditLog, Job, JobChunk
from tests.conftest import make_image_folder


class Killed(BaseException):
    """Stands in for SIGKILL: not an Exception, so no failure handler records it."""


@pytest.fixture(autouse=True)
def roots(tmp_path, settings):
    settings.INGEST_CHUNK_SIZE = 4
    settings.SOURCE_ALLOWED_ROOTS = [tmp_path]


def _job(n_chunks: int, *, rows: int = 3) -> Job:
    job = Job.objects.create(kind=Job.Kind.INGEST)
    chunks_write(job_id=job.pk, payloads=[list(range(rows))] * n_chunks, total=rows * n_chunks)
    return job


def _ingest_job(tmp_path, n: int = 12) -> Job:
    from curation.services.ingest import ingest_start
    from curation.services.sources import source_register

    make_image_folder(tmp_path / "pool", n_good=n, classes=["sky", "hayfield"])
    return ingest_start(source=source_register(name="pool", root=tmp_path / "pool").source, enqueue=False)


def _in_threads(work, n: int) -> list:
    """Run ``work(i)`` in ``n`` threads at once (each its own database connection); their results."""
    results: list = [None] * n
    errors: list = []

    def run(i: int) -> None:
        try:
            results[i] = work(i)
        except BaseException as exc:  # shown by the test
            errors.append(exc)
        finally:
            connections.close_all()  # this thread's connection

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors
    return results


@pytest.mark.django_db
def test_a_plan_writes_its_chunks_once():
    job = Job.objects.create(kind=Job.Kind.INGEST)
    recorded: list[int] = []
    assert chunks.chunks_to_do(job) is None
    assert chunks_write(job_id=job.pk, payloads=[[1], [2], [3]], total=3, on_written=lambda j: recorded.append(j.pk)) == [0, 1, 2]
    # a second plan (a redelivered plan task) keeps the first one's chunks and records nothing
    assert chunks_write(job_id=job.pk, payloads=[[9]] * 5, total=5, on_written=lambda j: recorded.append(j.pk)) == [0, 1, 2]
    assert recorded == [job.pk] and JobChunk.objects.filter(job=job).count() == 3 and Job.objects.get(pk=job.pk).total == 3
    chunk_finish(chunk_start(job_id=job.pk, index=1), progress=1)
    assert chunks.chunks_to_do(job) == [0, 2]
    job.status = Job.Status.FAILED
    assert chunks.chunks_to_do(job) == []


@pytest.mark.django_db
def test_a_done_chunk_is_skipped_and_done_once():
    job = _job(2)
    first = chunk_start(job_id=job.pk, index=0)
    again = chunk_start(job_id=job.pk, index=0)  # a second delivery before the first committed
    assert first is not None and again is not None and (first.attempt, again.attempt) == (1, 2)
    writes: list[str] = []
    assert chunk_finish(first, progress=3, stats={"added": 3}, write=lambda: writes.append("first")) is False  # chunk 1 is left
    assert chunk_finish(again, progress=3, stats={"added": 99}, write=lambda: writes.append("again")) is False
    assert writes == ["first"]  # the second delivery wrote nothing
    assert chunk_start(job_id=job.pk, index=0) is None  # a later delivery: nothing to do
    row = JobChunk.objects.get(job=job, index=0)
    assert row.done and row.stats == {"added": 3} and row.attempts == 2 and row.lease_until is None
    assert Job.objects.get(pk=job.pk).progress == 3
    last = chunk_start(job_id=job.pk, index=1)
    assert chunk_finish(last, progress=3) is True and Job.objects.get(pk=job.pk).progress == 6
    assert chunks.all_chunks_done(job.pk) and chunks.unfinished_chunks(job.pk) == 0


@pytest.mark.django_db
def test_a_finished_job_starts_no_chunk():
    job = _job(2)
    Job.objects.filter(pk=job.pk).update(status=Job.Status.FAILED)
    assert chunk_start(job_id=job.pk, index=0) is None
    assert JobChunk.objects.get(job=job, index=0).attempts == 0


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("workers", [2, 4])
def test_chunks_committing_at_once_name_exactly_one_last(workers):
    """Every worker holds its chunk's transaction open until all of them are inside theirs,
    then they mark their chunks done together: exactly one is told it was the last."""
    for _round in range(3):
        job = _job(workers)
        together = threading.Barrier(workers, timeout=60)

        def work(i: int) -> bool:
            chunk = chunk_start(job_id=job.pk, index=i)
            return chunk_finish(chunk, progress=3, write=together.wait)

        lasts = _in_threads(work, workers)
        assert sorted(lasts) == [False] * (workers - 1) + [True]
        assert Job.objects.get(pk=job.pk).progress == 3 * workers


@pytest.mark.django_db(transaction=True)
def test_two_workers_on_the_last_chunks_of_an_ingest_finish_it_once(tmp_path, monkeypatch):
    """Through the runner, as workers run it: the two last chunks of an ingest commit at once;
    one of them queues the finalize step, the job is finished once, every file counted once."""
    from curation.services import ingest

    job = _ingest_job(tmp_path)
    indices = run_step(job_id=job.pk, step="plan", queue_next=False)
    assert len(indices) == 3
    run_step(job_id=job.pk, step="chunk", index=indices[0], queue_next=False)
    together = threading.Barrier(2, timeout=60)
    real_finish = ingest.chunk_finish

    def finish_together(chunk, *, progress, stats=None, write=None):
        def both():
            together.wait()
            write()
        return real_finish(chunk, progress=progress, stats=stats, write=both)

    monkeypatch.setattr(ingest, "chunk_finish", finish_together)
    lasts = _in_threads(lambda i: run_step(job_id=job.pk, step="chunk", index=indices[1 + i]), 2)  # queue_next, as a worker
    assert sorted(lasts) == [False, True]
    job.refresh_from_db()
    assert job.status == Job.Status.DONE and job.progress == job.total == 12
    assert AuditLog.objects.filter(action="ingest_finished", target_id=str(job.pk)).count() == 1
    assert list(JobChunk.objects.filter(job=job).values_list("attempts", flat=True)) == [1, 1, 1]


@pytest.mark.django_db
def test_a_chunk_whose_worker_is_lost_every_time_fails_its_job_in_one_line(tmp_path, monkeypatch):
    from curation.services import ingest

    job = _ingest_job(tmp_path)
    run_step(job_id=job.pk, step="plan", queue_next=False)

    def killed(*args, **kwargs):
        raise Killed()  # the worker dies while reading the chunk's images (out of memory, say)

    monkeypatch.setattr(ingest, "_inspect", killed)
    for attempt in range(1, MAX_ATTEMPTS + 1):
        with pytest.raises(Killed):
            run_step(job_id=job.pk, step="chunk", index=0, queue_next=False)  # redelivered, or resumed
        assert JobChunk.objects.get(job=job, index=0).attempts == attempt
        assert Job.objects.get(pk=job.pk).status == Job.Status.RUNNING  # nobody saw it die
    with pytest.raises(ChunkAttemptsExceeded):
        run_step(job_id=job.pk, step="chunk", index=0, queue_next=False)
    job.refresh_from_db()
    assert job.status == Job.Status.FAILED
    assert job.message == (f"ChunkAttemptsExceeded: chunk 0 of job #{job.pk} was started {MAX_ATTEMPTS} times and never finished "
                           "(its worker was lost each time: killed, out of memory, or a crash in a library it runs); "
                           "fix the cause and start the work again")
    assert JobChunk.objects.get(job=job, index=0).attempts == MAX_ATTEMPTS and not JobChunk.objects.filter(done=True).exists()
    assert run_step(job_id=job.pk, step="chunk", index=1, queue_next=False) is False  # the failed job does no more work
    assert JobChunk.objects.get(job=job, index=1).attempts == 0


@pytest.mark.django_db
def test_the_evaluation_and_extraction_chunks_use_the_one_bookkeeping():
    """No kind keeps its own copy: the services call curation/jobs/chunks.py for the done check,
    the attempts, the done flag and the last-chunk answer."""
    import inspect

    from curation.services import evaluation, image_pipeline, ingest

    for module in (ingest, image_pipeline, evaluation):
        text = inspect.getsource(module)
        assert "chunk_start(" in text and "chunk_finish(" in text, module.__name__
        for copy in ('F("attempts")', "select_for_update().get(pk=chunk.pk)", "locked.done", "done=False).exists()"):
            assert copy not in text, (module.__name__, copy)
