"""Covariate-shifted copies of an ID source: ImageNet-C's corruptions (pipelines.evaluation.corruptions),
written in ImageNet-C's layout and registered as ID sources with their provenance, ready to be an
evaluation's ``--id-shifted`` sets."""
from __future__ import annotations

import csv
import io
from collections import Counter
from pathlib import Path
from typing import Callable

from django.conf import settings
from django.contrib.auth.models import User
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from curation.audit import audit_record
from curation.jobs import enqueue_on_commit
from curation.models import Image, Job, Source
from curation.services.ingest import ingest_run_inline, ingest_start
from curation.services.jobs import job_mark_running
from curation.services.sources import SourceError, id_source_named, source_register
from curation.version import code_version
from pipelines.evaluation.corruptions import CorruptionError, parse_corruptions, parse_severities, plan, run_task
from pipelines.export import csv_cells
from pipelines.names import InvalidName, atomic_write, check_name
from pipelines.sources.walk import UnsafePath

PROVENANCE_FILE = "provenance.csv"
IMPLEMENTATION = "imagecorruptions-imaug 1.1.5 (Hendrycks & Dietterich 2019)"


class CovariateShiftError(ValueError):
    pass


def covariate_shift_make(*, from_spec: str, out_dir: Path, corruptions: str, severities: str, seed: int = 0,
                         name: str | None = None, imagenet_c_crop: bool = True, register: bool = True, user: User | None = None,
                         progress: Callable[[int], None] | None = None,
                         on_total: Callable[[int], None] | None = None) -> tuple[list[Source], Counter]:
    """Corrupt every usable image of an ID source at each corruption and severity into
    ``out_dir/<corruption>/<severity>/<class folder>/<stem>.<ext>``; with ``register``, each
    ``<corruption>/<severity>`` folder becomes an ID source ``<name>-<corruption>-<severity>``.
    ``out_dir/provenance.csv`` says for every file which original, corruption, severity and seed
    made it; a file that cannot be corrupted is recorded there as failed and the run goes on;
    files already written (a re-run after an interruption) are kept, not redone."""
    try:
        names, levels = parse_corruptions(corruptions), parse_severities(severities)
    except CorruptionError as exc:
        raise CovariateShiftError(str(exc)) from None
    try:
        source = id_source_named(from_spec, flag="--from")
    except SourceError as exc:
        raise CovariateShiftError(str(exc)) from None
    prefix = name or f"{source.name}-c"
    try:
        check_name(prefix, what="name", max_length=70)
    except InvalidName as exc:
        raise CovariateShiftError(str(exc)) from None
    originals, refused = [], []
    for img in Image.objects.filter(source=source, status=Image.Status.OK).select_related("candidate_class", "source").order_by("relative_path"):
        if source.layout != "folder" and img.candidate_class is not None:
            # an archive member goes to <class>/<member name> (a folder per class, as the outputs are)
            key = f"{img.candidate_class.folder}/{img.relative_path.rsplit('/', 1)[-1]}"
            originals.append((img.ref(), key, img.sha256))
            continue
        try:
            originals.append((img.ref(), img.relative_path, img.sha256))
        except UnsafePath as exc:
            refused.append((img.relative_path, str(exc)))
    if not originals:
        raise CovariateShiftError(f"--from {from_spec}: the source has no usable images (has it been ingested?)")
    sha = {key: digest for _, key, digest in originals}
    tasks = plan([(p, k) for p, k, _ in originals], names, levels, seed)
    if on_total:
        on_total(len(tasks))
    out_dir = Path(out_dir)
    status: dict[str, str] = {}
    counts: Counter = Counter()
    for task in tasks:
        if (out_dir / task.rel_out).is_file():
            status[task.rel_out] = "ok"
            counts["kept from an earlier run"] += 1
        else:
            try:
                run_task(task, out_dir, imagenet_c_crop=imagenet_c_crop)
                status[task.rel_out] = "ok"
                counts["written"] += 1
            except Exception as exc:  # unreadable, too small, a corruption that failed on this image: recorded, go on
                status[task.rel_out] = f"failed: {type(exc).__name__}: {exc}"
                counts["failed"] += 1
        if progress:
            progress(1)
    # one provenance file for the run, next to (not inside) the registered folders, so that
    # ingesting a <corruption>/<severity> folder sees images only
    buf = io.StringIO()
    writer = csv_cells.Writer(buf)
    writer.writerow(["file", "original_source", "original_path", "original_sha256", "corruption", "severity", "seed", "status"])
    writer.writerows([t.rel_out, source.name, t.key, sha[t.key], t.corruption, t.severity, t.seed, status[t.rel_out]] for t in tasks)
    out_dir.mkdir(parents=True, exist_ok=True)
    atomic_write(out_dir / PROVENANCE_FILE, lambda fh: fh.write(buf.getvalue().encode("utf-8")), root=out_dir)
    sources = []
    for corruption in names:
        for level in levels:
            ok = [t for t in tasks if t.corruption == corruption and t.severity == level and status[t.rel_out] == "ok"]
            if register and ok:
                sources.append(_register(out_dir, corruption, level, f"{prefix}-{corruption}-{level}", source, seed,
                                         imagenet_c_crop, user))
    audit_record(actor=user, action="covariate_shift_made", target=source,
                 data={"out": str(out_dir), "corruptions": names, "severities": levels, "seed": seed,
                       "sources": [s.name for s in sources], **{k: v for k, v in counts.items()}, "refused": len(refused)})
    counts["refused at the source"] = len(refused)
    return sources, counts


def _register(out_dir: Path, corruption: str, severity: int, name: str, original: Source, seed: int, crop: bool, user) -> Source:
    try:
        reg = source_register(name=name, root=out_dir / corruption / str(severity), role=Source.Role.ID, class_map_path=None, user=user)
    except SourceError as exc:
        raise CovariateShiftError(str(exc)) from None
    src = reg.source
    src.provenance = {"kind": "covariate_shift", "from": original.name, "corruption": corruption, "severity": severity,
                      "seed": seed, "geometry": "resize 256, centre crop 224 (ImageNet-C)" if crop else "full image",
                      "implementation": IMPLEMENTATION, "per_file": str(Path(out_dir) / PROVENANCE_FILE)}
    src.description = f"{corruption} at severity {severity} of {original.name} (ImageNet-C corruption, seed {seed})"
    src.save(update_fields=["provenance", "description"])
    ingest_run_inline(job=ingest_start(source=src, enqueue=False))
    return src


def read_provenance(out_dir: Path) -> list[dict]:
    with open(Path(out_dir) / PROVENANCE_FILE, newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


# -- as a job (the admin's action; the command runs covariate_shift_make directly) -----------------


def covariate_shift_start(*, source: Source, corruptions: list[str], severities: list[int], seed: int, name: str,
                          user: User | None = None, enqueue: bool = True) -> Job:
    """Queue the corruption of ``source`` into ``<first allowed source root>/<name>``; the inputs
    are checked now, the work runs on the workers (or in this process without a broker)."""
    try:
        check_name(name, what="name", max_length=70)
        parse_corruptions(",".join(corruptions))
        parse_severities(",".join(str(s) for s in severities))
    except (InvalidName, CorruptionError) as exc:
        raise CovariateShiftError(str(exc)) from None
    if source.role != Source.Role.ID:
        raise CovariateShiftError(f"{source.name} holds OOD candidates; covariate-shifted copies are made of ID sources")
    out = Path(settings.SOURCE_ALLOWED_ROOTS[0]) / name
    if out.exists() and any(out.iterdir()):
        raise CovariateShiftError(f"{out} already holds files; choose another name")
    with transaction.atomic():
        job = Job.objects.create(kind=Job.Kind.COVARIATE_SHIFT, source=source, code_version=code_version(),
                                 created_by=user if getattr(user, "pk", None) else None,
                                 config={"from": f"source:{source.name}", "out": str(out), "corruptions": list(corruptions),
                                         "severities": [int(s) for s in severities], "seed": int(seed), "name": name})
        if enqueue:
            enqueue_on_commit(job)
    return job


def covariate_shift_execute(*, job_id: int, progress: Callable[[int], None] | None = None,
                            on_total: Callable[[int], None] | None = None) -> Job:
    """The job's work; idempotent (files already written are kept, sources re-registered)."""
    job = Job.objects.get(pk=job_id)
    if job.status == Job.Status.DONE:
        return job
    job_mark_running(job=job, message="corrupting images")
    cfg = job.config

    def tick(n: int) -> None:
        Job.objects.filter(pk=job.pk).update(progress=F("progress") + n)
        if progress:
            progress(n)

    def total(n: int) -> None:
        Job.objects.filter(pk=job.pk).update(total=n, progress=0)
        if on_total:
            on_total(n)

    sources, counts = covariate_shift_make(
        from_spec=cfg["from"], out_dir=Path(cfg["out"]), corruptions=",".join(cfg["corruptions"]),
        severities=",".join(str(s) for s in cfg["severities"]), seed=cfg["seed"], name=cfg["name"], user=job.created_by,
        progress=tick, on_total=total)
    job.refresh_from_db()
    job.status, job.finished_at = Job.Status.DONE, timezone.now()
    job.result = {"sources": [s.name for s in sources], **counts}
    job.message = (f"{len(sources)} shifted source(s) in {cfg['out']}: " + ", ".join(f"{k} {v}" for k, v in counts.items() if v))[:1000]
    job.save(update_fields=["status", "finished_at", "result", "message"])
    return job
