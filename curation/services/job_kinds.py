"""The built-in job kinds: each stage's steps, from its service, declared once."""
from __future__ import annotations

import os

from curation.jobs.protocol import JobKind, register_kind, single_step
from curation.models import ClassFilterRun, Export, Job
from curation.roles import CURATOR, RESEARCHER


def _cpu(step: str) -> str:
    return "cpu"


def _extract_queue(step: str) -> str:
    # Extraction goes where the models run: "gpu" when GPU workers serve it, else "cpu".
    return os.environ.get("OODC_EXTRACT_QUEUE", "cpu")


def _dedup_queue(step: str) -> str:
    # The join's chunks are matrix products: "gpu" where GPU workers serve them (OODC_DEDUP_QUEUE), else "cpu".
    return os.environ.get("OODC_DEDUP_QUEUE", "cpu") if step == "chunk" else "cpu"


def _eval_queue(step: str) -> str:
    # Model outputs where the models run; detectors and metrics (finalize) on the cpu workers.
    if step == "chunk":
        return os.environ.get("OODC_EVAL_QUEUE", os.environ.get("OODC_EXTRACT_QUEUE", "cpu"))
    return "cpu"


def _job_fail(job_id: int, error) -> None:
    from curation.services.jobs import job_fail

    job_fail(job_id=job_id, error=error)


# -- chunked kinds ------------------------------------------------------------------------------


def _chunked(kind: str, label: str, plan, process, finalize, *, fail=_job_fail, queue=_cpu, resume_hint: str = "",
             role: str = CURATOR) -> JobKind:
    """A kind from a service's keyword-only ``plan(job_id)``, ``process(job_id, index, progress)``
    and ``finalize(job_id)``."""
    return JobKind(
        kind=kind, label=label, plan=lambda job_id: plan(job_id=job_id),
        process=lambda job_id, index, progress=None, on_total=None: process(job_id=job_id, index=index, progress=progress),
        finalize=lambda job_id: finalize(job_id=job_id), fail=fail, queue=queue, resume_hint=resume_hint, role=role)


def _ingest() -> JobKind:
    from curation.services import ingest as s

    return _chunked(Job.Kind.INGEST, "ingest", s.ingest_plan, s.ingest_process_chunk, s.ingest_finalize,
                    resume_hint="`python manage.py add_source NAME PATH --resume`")


def _extract() -> JobKind:
    from curation.services import image_pipeline as s

    return _chunked(Job.Kind.EXTRACT, "extraction", s.extract_plan, s.extract_process_chunk, s.extract_finalize,
                    queue=_extract_queue, resume_hint="`python manage.py run_image_pipeline --resume`")


def _evaluate() -> JobKind:
    from curation.services import evaluation as s

    return _chunked(Job.Kind.EVALUATE, "evaluation", s.evaluation_plan, s.evaluation_process_chunk, s.evaluation_finalize,
                    fail=lambda job_id, error: s.evaluation_fail(job_id=job_id, error=error), queue=_eval_queue,
                    resume_hint="`python manage.py evaluate ... --resume`", role=RESEARCHER)


# -- one-step kinds ---------------------------------------------------------------------------------


def _dedup() -> JobKind:
    # phased: the plan trains the cells, assignment chunks, then (from the first finalize) join chunks
    from curation.services import duplicate_search as s

    return _chunked(Job.Kind.DEDUP, "duplicate search", s.dedup_plan, s.dedup_process_chunk, s.dedup_finalize,
                    queue=_dedup_queue, resume_hint="`python manage.py run_image_pipeline --resume`")


def _export_id(job_id: int) -> int:
    return Export.objects.values_list("pk", flat=True).get(job_id=job_id)


def _exports(kind: str) -> JobKind:
    from curation.services import exports as s

    execute = s.export_execute if kind == Job.Kind.EXPORT else s.unit_tests_execute
    return single_step(
        kind=kind, label="export" if kind == Job.Kind.EXPORT else "unit-test export",
        execute=lambda job_id, progress, on_total: execute(export_id=_export_id(job_id), progress=progress, on_total=on_total),
        fail=lambda job_id, error: s.export_fail(export_id=_export_id(job_id), error=error),
        queue=_cpu, resume_hint="`python manage.py export --name NAME --resume`" if kind == Job.Kind.EXPORT
        else "`python manage.py make_unit_tests --name NAME --resume`")


def _class_filter() -> JobKind:
    from curation.services import class_filter as s

    def execute(job_id, progress, on_total):
        s.class_filter_execute(run_id=ClassFilterRun.objects.values_list("pk", flat=True).get(job_id=job_id), progress=progress)

    return single_step(kind=Job.Kind.CLASS_FILTER, label="class filter", execute=execute, fail=_job_fail, queue=_cpu)


def _covariate_shift() -> JobKind:
    from curation.services import covariate_shift as s

    return single_step(kind=Job.Kind.COVARIATE_SHIFT, label="covariate shift",
                       execute=lambda job_id, progress, on_total: s.covariate_shift_execute(job_id=job_id, progress=progress,
                                                                                           on_total=on_total),
                       fail=_job_fail, queue=_extract_queue)


def _embedding_map() -> JobKind:
    from curation.services import embedding_map as s

    return single_step(kind=Job.Kind.EMBEDDING_MAP, label="embedding map",
                       execute=lambda job_id, progress, on_total: s.embedding_map_execute(job_id=job_id),
                       fail=_job_fail, queue=_cpu, resume_hint="`python manage.py resume_job ID` (or make the map again on its page)")


for _make in (_ingest, _extract, _evaluate, _dedup, lambda: _exports(Job.Kind.EXPORT), lambda: _exports(Job.Kind.UNIT_TESTS),
              _class_filter, _covariate_shift, _embedding_map):
    register_kind(_make())
