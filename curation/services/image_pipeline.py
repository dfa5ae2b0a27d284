"""Image pipeline: predictions and features per image (chunked jobs that scale out over
workers), then near-duplicates, duplicates of ID images, similarity to ID and the class-level
visual-ambiguity signal (one job over everything extracted with a model).

Extraction is idempotent at every step: a chunk computes only images that have no embedding for
the model yet, writes its shard file under a name fixed by (job, chunk) with an atomic rename,
and commits its rows together with its done flag; a redelivered chunk that finds itself done
changes nothing, and a killed worker's chunk is simply computed again.
"""
from __future__ import annotations

from collections import Counter, defaultdict
from pathlib import Path
from typing import Callable, Iterable

import numpy as np
from django.conf import settings
from django.contrib.auth.models import User
from django.db import connection, transaction
from django.utils import timezone

from curation.audit import audit_record
from curation.jobs import JobActive, enqueue_on_commit, run_inline
from curation.jobs.chunks import chunk_finish, chunk_start, chunks_to_do, chunks_write, unfinished_chunks
from curation.models import ClassDecision, DuplicateOverride, FeatureShard, Image, ImageEmbedding, Job, JobChunk, Source
from curation.selectors import class_policy
from curation.services.bulk import insert_rows
from curation.services.jobs import job_mark_running
from curation.services.loaded_models import ModelNameError, check_model_name, loaded_model
from curation.version import code_version
from pipelines.features.near_dups import Membership, apply_overrides
from pipelines.names import atomic_write, safe_component
from pipelines.sources.walk import SafeJoiner, UnsafePath


class PipelineError(ValueError):
    pass


class JobAlreadyRunning(JobActive):
    """The same extraction or duplicate search is unfinished (running, queued, or stale: resume it)."""


def _checked_model_name(model_name: str) -> None:
    try:
        check_model_name(model_name)
    except ModelNameError as exc:
        raise PipelineError(str(exc)) from None


# -- extraction -----------------------------------------------------------------------------------


def extract_start(*, source: Source, model_name: str | None = None, weights: str | None = None, user: User | None = None,
                  enqueue: bool = True, decoder: str | None = None, skip_removed_classes: bool = False) -> Job:
    """Queue the extraction of a source's images that lack the model's outputs. With
    ``skip_removed_classes``, images of classes the latest class filter run removed are left out
    (an ImageNet-21K-sized pool loses most of its classes there: no reason to run the model on them)."""
    from pipelines.features.decode import DECODERS

    model_name = model_name or settings.DEFAULT_MODEL
    _checked_model_name(model_name)
    decoder = decoder or settings.DECODER
    if decoder not in DECODERS:
        raise PipelineError(f"decoder {decoder!r}: choose one of {', '.join(DECODERS)}")
    with transaction.atomic():
        Source.objects.select_for_update().get(pk=source.pk)
        active = Job.objects.filter(kind=Job.Kind.EXTRACT, source=source, config__model=model_name,
                                    status__in=[Job.Status.PENDING, Job.Status.RUNNING]).first()
        if active is not None:
            raise JobAlreadyRunning(active)
        job = Job.objects.create(
            kind=Job.Kind.EXTRACT, source=source, created_by=user if getattr(user, "pk", None) else None, code_version=code_version(),
            config={"model": model_name, "weights": weights or "", "chunk_size": settings.EXTRACT_CHUNK_SIZE,
                    "batch_size": settings.EXTRACT_BATCH_SIZE, "topk": 5, "feature_store": str(settings.FEATURE_STORE),
                    "decoder": decoder, "skip_removed_classes": bool(skip_removed_classes)},
        )
        audit_record(actor=user, action="extract_started", target=job, data={"source": source.name, "model": model_name})
        if enqueue:
            enqueue_on_commit(job)
    return job


def extract_plan(*, job_id: int) -> list[int]:
    """Split the source's readable images that lack an embedding for the model into chunks."""
    job = Job.objects.select_related("source").get(pk=job_id)
    planned = chunks_to_do(job)
    if planned is not None:
        return planned
    model_name = job.config["model"]
    done = ImageEmbedding.objects.filter(model_name=model_name, image__source=job.source).values("image_id")
    todo = Image.objects.filter(source=job.source, status=Image.Status.OK).exclude(pk__in=done)
    if job.config.get("skip_removed_classes"):
        standing = class_policy(source=job.source)
        if standing.run is not None:
            removed = [cid for cid, c in standing.classes.items() if c.verdict == ClassDecision.Decision.REMOVE]
            todo = todo.exclude(candidate_class_id__in=removed)
    ids = list(todo.order_by("pk").values_list("pk", flat=True))
    size = max(1, int(job.config.get("chunk_size") or settings.EXTRACT_CHUNK_SIZE))
    return chunks_write(job_id=job.pk, payloads=[ids[s:s + size] for s in range(0, len(ids), size)], total=len(ids),
                        on_written=lambda locked: job_mark_running(job=locked, message=f"{len(ids)} images to run through {model_name}"))


def shard_path(*, model_name: str, source_id: int, job_id: int, index: int) -> str:
    return f"{safe_component(model_name)}/source_{source_id}/job_{job_id}_chunk_{index:05d}.npy"


def extract_process_chunk(*, job_id: int, index: int, progress: Callable[[int], None] | None = None,
                          run_model: Callable | None = None) -> bool:
    """Predict and extract features for one chunk. Returns True when it was the last unfinished
    chunk (the caller then queues the finalize step). ``run_model(paths, job)`` stands in for
    the model in benchmarks of the bookkeeping (benchmarks/bench_extract_bookkeeping.py)."""
    chunk = chunk_start(job_id=job_id, index=index, related=("source",))
    if chunk is None:  # done already, or its job is finished
        return False
    job = chunk.job
    model_name, source = job.config["model"], job.source
    decoder = job.config.get("decoder", "pil")
    # a chunk's ids are a sorted run: a range query and a set test cost less than a 1,000-item IN list
    wanted = set(chunk.payload)
    lo, hi = (min(wanted), max(wanted)) if wanted else (0, -1)
    have = {i for i in ImageEmbedding.objects.filter(model_name=model_name, image_id__gte=lo, image_id__lte=hi)
            .values_list("image_id", flat=True) if i in wanted}
    rows = [r for r in Image.objects.filter(pk__gte=lo, pk__lte=hi).order_by("pk")
            .values_list("pk", "relative_path", "container", "offset", "bytes", "sha256") if r[0] in wanted and r[0] not in have]
    # an archive is read front to back (ids follow ingest's member order); a file checked against its root
    rows.sort(key=lambda r: (r[2], r[3], r[0]))
    images = [(r[0], r[1]) for r in rows]
    join = SafeJoiner(source.root)
    paths: list = []
    unsafe = {}
    for pk, rel, container, offset, size, sha in rows:
        try:
            if not container:
                join(rel)
            paths.append(source.member_ref(rel, container=container, offset=offset, size=size, sha256=sha))
        except UnsafePath as exc:
            paths.append("")
            unsafe[pk] = str(exc)
    todo = [p for p in paths if p]
    if run_model is not None:
        ex = run_model(todo, job)
    else:
        from pipelines.features.extract import extract

        lm = loaded_model(model_name, job.config.get("weights", ""))
        ex = extract(lm, todo, batch_size=int(job.config.get("batch_size") or 0) or None,
                     num_workers=settings.EXTRACT_LOADER_WORKERS, topk=int(job.config.get("topk") or 5),
                     max_pixels=settings.MAX_IMAGE_PIXELS, progress=progress, decoder=decoder)
    rel = shard_path(model_name=model_name, source_id=source.pk, job_id=job.pk, index=index)
    if len(ex.features):
        atomic_write(Path(settings.FEATURE_STORE) / rel, lambda fh: np.save(fh, ex.features), root=settings.FEATURE_STORE)
    rows = _embedding_rows(images, paths, unsafe, ex, model_name)
    stats = Counter(ok=int((ex.row_of >= 0).sum()), errors=len(images) - int((ex.row_of >= 0).sum()), skipped_done=len(have))
    stats.update({f"decoded_by_{k}": v for k, v in ex.counts.items() if v})
    notes = list(ex.notes)
    def write() -> None:  # in the transaction that marks the chunk done (not run when another delivery finished it first)
        if connection.vendor == "postgresql":
            # The commit need not wait for its WAL flush: a crash can lose only whole chunks (rows and
            # done flag commit together), which are then computed again; the database stays consistent.
            with connection.cursor() as cur:
                cur.execute("SET LOCAL synchronous_commit TO OFF")
        shard = None
        if len(ex.features):
            shard, _ = FeatureShard.objects.update_or_create(
                path=rel, defaults={"model_name": model_name, "rows": len(ex.features), "dim": ex.features.shape[1], "job": job,
                                    "decoder": ex.decoder})
        shard_id = shard.pk if shard is not None else None
        insert_rows(ImageEmbedding, EMBEDDING_FIELDS, [r + (shard_id if r[2] else None,) for r in rows])

    return chunk_finish(chunk, progress=len(chunk.payload), stats={**dict(stats), **({"notes": notes} if notes else {})}, write=write)


EMBEDDING_FIELDS = ("image_id", "model_name", "ok", "error", "row", "topk", "top1_wnid", "top1_prob", "max_softmax", "max_logit",
                    "energy", "created_at", "drop_reason", "shard_id")


def _embedding_rows(images: list[tuple[int, str]], paths: list[str], unsafe: dict[int, str], ex, model_name: str) -> list[tuple]:
    """One ImageEmbedding row per image (``EMBEDDING_FIELDS`` but the shard), built from the
    extraction's arrays: one conversion to Python lists per chunk, no model instance per image."""
    now = timezone.now()
    k = ex.top_index.shape[1]
    wnids = ex.wnids
    top_i, top_p = ex.top_index.tolist(), np.round(ex.top_prob.astype(np.float64), 6).tolist()
    max_logit, energy = ex.max_logit.tolist(), ex.energy.tolist()
    rows, done = [], 0
    row_of = ex.row_of.tolist()
    for (pk, _rel), path in zip(images, paths):
        if not path:
            rows.append((pk, model_name, False, unsafe[pk], -1, [], "", None, None, None, None, now, ""))
            continue
        r = row_of[done]
        if r < 0:
            rows.append((pk, model_name, False, ex.errors.get(done, ""), -1, [], "", None, None, None, None, now, ""))
        else:
            ti, tp = top_i[r], top_p[r]
            rows.append((pk, model_name, True, "", r, [[wnids[ti[c]], tp[c]] for c in range(k)], wnids[ti[0]], tp[0], tp[0],
                         max_logit[r], energy[r], now, ""))
        done += 1
    return rows


def extract_finalize(*, job_id: int) -> Job:
    with transaction.atomic():
        job = Job.objects.select_for_update(of=("self",)).select_related("source").get(pk=job_id)
        if job.status in (Job.Status.DONE, Job.Status.FAILED) or unfinished_chunks(job.pk):
            return job
        totals: Counter = Counter()
        notes: list[str] = []
        for stats in JobChunk.objects.filter(job=job).values_list("stats", flat=True):
            stats = dict(stats)
            notes.extend(n for n in stats.pop("notes", []) if n not in notes)
            totals.update(stats)
        job.status, job.progress, job.finished_at = Job.Status.DONE, job.total, timezone.now()
        decoder = job.config.get("decoder", "pil")
        job.result = {**job.result, **totals, "decoder": decoder, **({"notes": notes} if notes else {})}
        job.message = (f"{job.config['model']} (decoder {decoder}): {totals['ok']} images predicted, "
                       f"{totals['errors']} could not be decoded" + (f"; {'; '.join(notes)}" if notes else ""))
        job.save()
        audit_record(actor=job.created_by, action="extract_finished", target=job, data={"source": job.source.name, "message": job.message})
    return job


def extract_run_inline(*, job: Job, progress: Callable[[int], None] | None = None, on_total: Callable[[int], None] | None = None) -> Job:
    return run_inline(job, progress=progress, on_total=on_total)


# -- near-duplicates, duplicates of ID images, similarity to ID, visual ambiguity -----------------
# (the job's steps are in curation/services/duplicate_search.py)


def dedup_start(*, model_name: str | None = None, user: User | None = None, enqueue: bool = True) -> Job:
    model_name = model_name or settings.DEFAULT_MODEL
    _checked_model_name(model_name)
    with transaction.atomic():
        active = Job.objects.select_for_update().filter(kind=Job.Kind.DEDUP, config__model=model_name,
                                                        status__in=[Job.Status.PENDING, Job.Status.RUNNING]).first()
        if active is not None:
            raise JobAlreadyRunning(active)
        job = Job.objects.create(
            kind=Job.Kind.DEDUP, created_by=user if getattr(user, "pk", None) else None, code_version=code_version(),
            config={"model": model_name, "threshold": settings.NEAR_DUP_THRESHOLD, "id_threshold": settings.ID_DUP_THRESHOLD,
                    "max_pixel_diff": settings.NEAR_DUP_MAX_PIXEL_DIFF,
                    "ambiguity_threshold": settings.AMBIGUITY_THRESHOLD, "ambiguity_min_images": settings.AMBIGUITY_MIN_IMAGES,
                    "exact_below": settings.NEAR_DUP_EXACT_BELOW, "nprobe": settings.NEAR_DUP_NPROBE,
                    "assign_chunk": settings.DEDUP_ASSIGN_CHUNK, "join_chunk": settings.DEDUP_JOIN_CHUNK, "seed": 0},
        )
        audit_record(actor=user, action="dedup_started", target=job, data={"model": model_name})
        if enqueue:
            enqueue_on_commit(job)
    return job


def load_features(embeddings: list[ImageEmbedding]) -> np.ndarray:
    """float32 features for ``embeddings`` (in order), gathered from their shards."""
    out = None
    by_shard: dict[int, list[tuple[int, int]]] = defaultdict(list)
    shards = {}
    for pos, e in enumerate(embeddings):
        by_shard[e.shard_id].append((pos, e.row))
        shards[e.shard_id] = e.shard
    for shard_id, items in by_shard.items():
        path = Path(settings.FEATURE_STORE) / shards[shard_id].path
        try:
            data = np.load(path, mmap_mode="r")
        except (OSError, ValueError) as exc:
            raise PipelineError(f"feature shard {path} cannot be read ({exc}); re-run extraction for its source") from None
        if out is None:
            out = np.zeros((len(embeddings), data.shape[1]), dtype=np.float32)
        pos, rows = zip(*items)
        out[list(pos)] = data[list(rows)].astype(np.float32)
    return out if out is not None else np.zeros((0, 1), dtype=np.float32)


def effective_memberships(embeddings: list[ImageEmbedding], overrides: Iterable[tuple[int, str]]) -> None:
    """Set ``dup_group`` / ``drop_reason`` of ``embeddings`` (whole groups of the search) from
    their ``search_*`` fields and the overrides (oldest first)."""
    raw = {e.image_id: Membership(group=e.search_group if e.search_group is not None else e.image_id, drop=e.search_drop)
           for e in embeddings}
    eff = apply_overrides(raw, list(overrides))
    for e in embeddings:
        m = eff[e.image_id]
        e.dup_group, e.drop_reason = m.group, m.drop


def duplicate_overrides_of(images: Iterable[int], model_name: str) -> list[tuple[int, str]]:
    return list(DuplicateOverride.objects.filter(image_id__in=list(images), model_name=model_name)
                .order_by("created_at", "id").values_list("image_id", "action"))


def dedup_run_inline(*, job: Job) -> Job:
    run_inline(job)
    return Job.objects.get(pk=job.pk)
