"""Celery tasks: thin. They take ids, call one service, and record failures on the Job row."""
from __future__ import annotations

from celery import shared_task

from curation.services import ingest as ingest_services
from curation.services.jobs import job_fail

TASK_OPTIONS = {"acks_late": True, "reject_on_worker_lost": True}


@shared_task(name="curation.ingest.plan", **TASK_OPTIONS)
def ingest_plan_task(job_id: int) -> int:
    try:
        indices = ingest_services.ingest_plan(job_id=job_id)
    except Exception as exc:
        job_fail(job_id=job_id, error=exc)
        raise
    if not indices:
        ingest_finalize_task.delay(job_id)
    for index in indices:
        ingest_chunk_task.delay(job_id, index)
    return len(indices)


@shared_task(name="curation.ingest.chunk", **TASK_OPTIONS)
def ingest_chunk_task(job_id: int, index: int) -> None:
    try:
        last = ingest_services.ingest_process_chunk(job_id=job_id, index=index)
    except Exception as exc:
        job_fail(job_id=job_id, error=exc)
        raise
    if last:
        ingest_finalize_task.delay(job_id)


@shared_task(name="curation.ingest.finalize", **TASK_OPTIONS)
def ingest_finalize_task(job_id: int) -> None:
    try:
        ingest_services.ingest_finalize(job_id=job_id)
    except Exception as exc:
        job_fail(job_id=job_id, error=exc)
        raise


@shared_task(name="curation.class_filter.run", **TASK_OPTIONS)
def class_filter_task(run_id: int) -> None:
    from curation.models import ClassFilterRun
    from curation.services.class_filter import class_filter_execute

    try:
        class_filter_execute(run_id=run_id)
    except Exception as exc:
        job_id = ClassFilterRun.objects.filter(pk=run_id).values_list("job_id", flat=True).first()
        if job_id:
            job_fail(job_id=job_id, error=exc)
        raise


# -- image pipeline: extraction goes to settings' extract queue (cpu or gpu), dedup to cpu ----


@shared_task(name="curation.extract.plan", **TASK_OPTIONS)
def extract_plan_task(job_id: int) -> int:
    from curation.services import image_pipeline as ip

    try:
        indices = ip.extract_plan(job_id=job_id)
    except Exception as exc:
        job_fail(job_id=job_id, error=exc)
        raise
    if not indices:
        extract_finalize_task.delay(job_id)
    for index in indices:
        extract_chunk_task.delay(job_id, index)
    return len(indices)


@shared_task(name="curation.extract.chunk", **TASK_OPTIONS)
def extract_chunk_task(job_id: int, index: int) -> None:
    from curation.services import image_pipeline as ip

    try:
        last = ip.extract_process_chunk(job_id=job_id, index=index)
    except Exception as exc:
        job_fail(job_id=job_id, error=exc)
        raise
    if last:
        extract_finalize_task.delay(job_id)


@shared_task(name="curation.extract.finalize", **TASK_OPTIONS)
def extract_finalize_task(job_id: int) -> None:
    from curation.services import image_pipeline as ip

    try:
        ip.extract_finalize(job_id=job_id)
    except Exception as exc:
        job_fail(job_id=job_id, error=exc)
        raise


@shared_task(name="curation.dedup.run", **TASK_OPTIONS)
def dedup_task(job_id: int) -> None:
    from curation.services import image_pipeline as ip

    try:
        ip.dedup_execute(job_id=job_id)
    except Exception as exc:
        job_fail(job_id=job_id, error=exc)
        raise


# -- exports: written by cpu workers -------------------------------------------------------------


@shared_task(name="curation.export.run", **TASK_OPTIONS)
def export_task(export_id: int) -> None:
    from curation.services.exports import export_execute, export_fail

    try:
        export_execute(export_id=export_id)
    except Exception as exc:
        export_fail(export_id=export_id, error=exc)
        raise


@shared_task(name="curation.unit_tests.run", **TASK_OPTIONS)
def unit_tests_task(export_id: int) -> None:
    from curation.services.exports import export_fail, unit_tests_execute

    try:
        unit_tests_execute(export_id=export_id)
    except Exception as exc:
        export_fail(export_id=export_id, error=exc)
        raise


# -- evaluation runs: outputs where the models run (settings' eval queue), the rest on cpu ----------


@shared_task(name="curation.evaluate.plan", **TASK_OPTIONS)
def evaluation_plan_task(job_id: int) -> int:
    from curation.services import evaluation as ev

    try:
        indices = ev.evaluation_plan(job_id=job_id)
    except Exception as exc:
        ev.evaluation_fail(job_id=job_id, error=exc)
        raise
    if not indices:
        evaluation_finalize_task.delay(job_id)
    for index in indices:
        evaluation_chunk_task.delay(job_id, index)
    return len(indices)


@shared_task(name="curation.evaluate.chunk", **TASK_OPTIONS)
def evaluation_chunk_task(job_id: int, index: int) -> None:
    from curation.services import evaluation as ev

    try:
        last = ev.evaluation_process_chunk(job_id=job_id, index=index)
    except Exception as exc:
        ev.evaluation_fail(job_id=job_id, error=exc)
        raise
    if last:
        evaluation_finalize_task.delay(job_id)


@shared_task(name="curation.evaluate.finalize", **TASK_OPTIONS)
def evaluation_finalize_task(job_id: int) -> None:
    from curation.services import evaluation as ev

    try:
        ev.evaluation_finalize(job_id=job_id)
    except Exception as exc:
        ev.evaluation_fail(job_id=job_id, error=exc)
        raise
