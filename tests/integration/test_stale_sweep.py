"""Stale jobs resumed without a human (curation/jobs/stale.py, issue 38): a worker killed in the
middle of a job, the tasks it held kept in Redis for an hour (the visibility timeout), and two
other workers: their sweeps notice the job is silent and exactly one of them resumes it; the job
finishes with every file once, and the resume is audited. Real PostgreSQL, Redis and
`celery worker` processes. Below it, the sweep's guards on their own: two sweepers racing for
one job, and a job that keeps dying left for a person after JOB_AUTO_RESUME_MAX resumes."""
from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from curation.jobs import stale
from curation.models import AuditLog, Image, Job, JobChunk, Source
from tests.conftest import make_image_folder
from tests.integration.test_celery_worker import queue_ingest, services_env, wait_until, workers  # noqa: F401  (fixtures)

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def _audits(job, action):
    return list(AuditLog.objects.filter(action=action, target_type="curation.job", target_id=str(job.pk)).order_by("id"))


def test_a_killed_workers_job_is_resumed_by_one_of_the_other_workers_sweeps(services_env, workers, tmp_path, settings):  # noqa: F811
    env = {**services_env, "CELERY_VISIBILITY_TIMEOUT": "3600",  # no redelivery in the test: only a resume can finish the job
           "OODC_JOB_HEARTBEAT_S": "0.5", "OODC_JOB_STALE_AFTER_S": "3", "OODC_JOB_AUTO_RESUME_AFTER_S": "4",
           "OODC_JOB_STALE_SWEEP_S": "1", "OODC_INGEST_CHUNK_SIZE": "4", "OODC_INGEST_THREADS": "1"}
    settings.JOB_STALE_AFTER_S = 3
    workers.env = env
    good = make_image_folder(tmp_path / "pool", n_good=40, classes=["sky", "hayfield"])
    w1 = workers.start("w1", slow=("curation.services.ingest:_inspect", 0.3))
    job = queue_ingest(env, "pool", tmp_path / "pool", chunk_size=4)

    def mid_chunk():
        # Killed while a chunk is under way (leased, not done), so w1 dies holding its message. Killed
        # just after a chunk's commit, w1 could have acked it and fetched nothing yet: the chunks left
        # would all wait in the queue, and w2 and w3 would finish the job with no resume (it failed so).
        chunks = JobChunk.objects.filter(job=job)
        # Started, not only claimed: the runner leases a chunk, then counts its attempt as the work
        # begins; killed between the two, the resume's start is the chunk's first (it failed so).
        return chunks.filter(done=True).count() >= 2 and chunks.filter(done=False, lease_until__isnull=False, attempts__gte=1).exists()

    wait_until(mid_chunk, 120, "two chunks done and a third under way", workers)
    workers.kill(w1)
    job.refresh_from_db()
    assert job.status == "running" and JobChunk.objects.filter(job=job, done=True).count() < 10, "finished before the kill"
    held = JobChunk.objects.get(job=job, done=False, lease_until__isnull=False)
    started = held.attempts
    assert not _audits(job, stale.RESUMED)

    w2, w3 = workers.start("w2"), workers.start("w3")  # two sweepers, and no person
    wait_until(lambda: Job.objects.get(pk=job.pk).status in ("done", "failed"), 240, "the job to finish without a resume_job", workers)
    job.refresh_from_db()
    assert job.status == "done", job.message
    resumed = _audits(job, stale.RESUMED)
    assert len(resumed) == 1, [a.data for a in resumed]  # one of the two sweepers, once
    entry = resumed[0].data
    assert entry["attempt"] == 1 and entry["silent_s"] >= 4
    assert int(entry["by"].rsplit(":", 1)[1]) in (w2.pid, w3.pid)  # a sweep of a live worker, not a person
    assert AuditLog.objects.filter(action="job_resumed", target_id=str(job.pk), actor__isnull=True).count() == 1
    paths = list(Image.objects.filter(source=Source.objects.get(name="pool")).values_list("relative_path", flat=True))
    assert len(paths) == len(set(paths)) == len(good)  # every file once: the lost chunk redone, nothing twice
    assert JobChunk.objects.filter(job=job, done=True).count() == 10
    held.refresh_from_db()
    assert started == 1 and held.attempts == 2  # the chunk w1 died in, started again once, by the resume
    assert sum(sum(c.stats.values()) for c in JobChunk.objects.filter(job=job)) == len(good)


@pytest.fixture
def silent_job(settings):
    settings.JOB_STALE_AFTER_S = 60
    settings.JOB_AUTO_RESUME_AFTER_S = 120
    settings.JOB_AUTO_RESUME_MAX = 3
    job = Job.objects.create(kind=Job.Kind.INGEST, status=Job.Status.RUNNING)
    Job.objects.filter(pk=job.pk).update(heartbeat_at=timezone.now() - timedelta(seconds=600))
    return Job.objects.get(pk=job.pk)


def test_two_sweepers_racing_for_one_job_claim_it_once(silent_job):
    """The claim is one conditional UPDATE; PostgreSQL re-checks it on a row a concurrent claim
    changed, so of several sweepers that read the same silent job exactly one takes it."""
    assert list(stale.silent_jobs()) == [silent_job]
    results, start = [], threading.Barrier(4)

    def sweeper():
        try:
            start.wait()
            results.append(stale._claim(silent_job, timezone.now()))
        finally:
            connection.close()

    threads = [threading.Thread(target=sweeper) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == [False, False, False, True]
    assert not stale.silent_jobs().exists()  # it reported just now: no sweep takes it before it is silent again


def test_a_job_that_keeps_dying_is_left_for_a_person_after_the_limit(silent_job):
    for attempt in range(1, 4):  # three automatic resumes already made
        AuditLog.objects.create(action=stale.RESUMED, target_type="curation.job", target_id=str(silent_job.pk), data={"attempt": attempt})
    first = stale.sweep_stale_jobs()
    second = stale.sweep_stale_jobs()
    assert [(s.job_id, s.action) for s in first] == [(silent_job.pk, stale.GAVE_UP)] and second == []
    silent_job.refresh_from_db()
    assert silent_job.status == "running" and "resumed automatically 3 times" in silent_job.message
    assert f"resume_job {silent_job.pk}" in silent_job.message
    assert len(_audits(silent_job, stale.GAVE_UP)) == 1 and len(_audits(silent_job, stale.RESUMED)) == 3


def test_a_job_that_reported_recently_or_finished_is_not_swept(silent_job, settings):
    Job.objects.filter(pk=silent_job.pk).update(heartbeat_at=timezone.now() - timedelta(seconds=90))  # stale, not yet silent enough
    assert not stale.silent_jobs().exists()
    Job.objects.filter(pk=silent_job.pk).update(heartbeat_at=timezone.now() - timedelta(seconds=600), status=Job.Status.DONE)
    assert not stale.silent_jobs().exists() and stale.sweep_stale_jobs() == []
    settings.JOB_AUTO_RESUME_AFTER_S = 10  # never before the job is stale (60 s)
    Job.objects.filter(pk=silent_job.pk).update(heartbeat_at=timezone.now() - timedelta(seconds=30), status=Job.Status.RUNNING)
    assert not stale.silent_jobs().exists()
