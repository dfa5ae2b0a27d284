"""The embedding map per source (docs/browse.md, "Embedding map"): a job projects the source's
stored features to 2-D (``pipelines.features.embedding_map``) and keeps the result under
FEATURE_STORE/maps/, named by the feature set it was made from, so it is computed once per
feature set and method; the page reads it with each point's final label, class and predicted ID
class for colouring."""
from __future__ import annotations

from pathlib import Path

import numpy as np
from django.conf import settings
from django.contrib.auth.models import User
from django.db import transaction
from django.db.models import Max, Min
from django.utils import timezone

from curation.audit import audit_record
from curation.jobs.runner import enqueue_on_commit
from curation.models import FeatureShard, Image, ImageEmbedding, Job, Source
from curation.services.bulk import columns_of
from curation.version import code_version
from pipelines.features.dup_search import FeatureReader, FeatureShardUnreadable
from pipelines.features.embedding_map import METHODS, project_streamed
from pipelines.names import atomic_write

DISPLAY_MAX = 50_000  # points drawn on the page (a stable sample above this)


class MapError(ValueError):
    """The map cannot be made or shown; the message says why and what to run."""


def _embeddings(source: Source, model_name: str):
    return ImageEmbedding.objects.filter(image__source=source, model_name=model_name, ok=True, shard__isnull=False,
                                         image__status=Image.Status.OK)


def _feature_key(source: Source, model_name: str) -> str:
    qs = _embeddings(source, model_name)
    agg = qs.aggregate(lo=Min("id"), hi=Max("id"), s=Max("shard_id"))
    return f"{qs.count()}-{agg['lo'] or 0}-{agg['hi'] or 0}-{agg['s'] or 0}"


def _map_path(source: Source, model_name: str, method: str, key: str) -> Path:
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in model_name)
    return Path(settings.FEATURE_STORE) / "maps" / f"source{source.pk}-{safe}-{method}-{key}.npz"


def embedding_map_start(*, source: Source, method: str = "umap", model_name: str | None = None, user: User | None = None) -> Job | None:
    """Queue the map of ``source`` (None when the current feature set's map exists already)."""
    if method not in METHODS:
        raise MapError(f"unknown map method {method!r}: use one of {', '.join(METHODS)}")
    model_name = model_name or settings.DEFAULT_MODEL
    key = _feature_key(source, model_name)
    if key.startswith("0-"):
        raise MapError(f"{source.name} has no stored features from {model_name}: run "
                       f"`python manage.py run_image_pipeline --sources {source.name}` first")
    if _map_path(source, model_name, method, key).exists():
        return None
    with transaction.atomic():
        active = Job.objects.select_for_update().filter(kind=Job.Kind.EMBEDDING_MAP, source=source, config__model=model_name,
                                                        config__method=method, status__in=[Job.Status.PENDING, Job.Status.RUNNING]).first()
        if active is not None:
            return active
        job = Job.objects.create(kind=Job.Kind.EMBEDDING_MAP, source=source, created_by=user if getattr(user, "pk", None) else None,
                                 code_version=code_version(), config={"model": model_name, "method": method, "key": key})
        audit_record(actor=user, action="embedding_map_started", target=job, data={"source": source.name, "method": method})
        enqueue_on_commit(job)
    return job


def embedding_map_execute(*, job_id: int) -> Job:
    job = Job.objects.select_related("source").get(pk=job_id)
    if job.status in (Job.Status.DONE, Job.Status.FAILED):
        return job
    from curation.services.jobs import job_mark_running

    job_mark_running(job=job, message="loading features")
    source, model_name, method = job.source, job.config["model"], job.config["method"]
    key = _feature_key(source, model_name)
    # the rows as arrays (one streamed query, no model instances) and the features read a block at a time from their shards
    ids, shard, row_of, strata = columns_of(
        _embeddings(source, model_name).order_by("image_id").values_list("image_id", "shard_id", "row", "image__candidate_class_id")
        .iterator(chunk_size=20_000), (np.int64, np.int64, np.int64, np.int64))
    shard_ids = np.unique(shard)
    paths = dict(FeatureShard.objects.filter(pk__in=shard_ids.tolist()).values_list("pk", "path"))
    reader = FeatureReader([Path(settings.FEATURE_STORE) / paths[int(s)] for s in shard_ids])
    shard_of = np.searchsorted(shard_ids, shard)
    job_mark_running(job=job, message=f"projecting {len(ids)} images ({method})")
    try:
        xy, made = project_streamed(len(ids), lambda pos: reader.vectors(shard_of[pos], row_of[pos]), method=method, strata=strata,
                                    fit_max=settings.EMBEDDING_MAP_FIT_MAX)
    except FeatureShardUnreadable as exc:
        raise MapError(str(exc)) from None
    path = _map_path(source, model_name, method, key)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, lambda fh: np.savez(fh, ids=ids, xy=xy), root=settings.FEATURE_STORE)
    job.status, job.finished_at, job.progress, job.total = Job.Status.DONE, timezone.now(), 1, 1
    job.result = {"points": len(ids), "path": str(path.relative_to(settings.FEATURE_STORE)), "method": method, "key": key, **made}
    job.message = f"map of {source.name}: {len(ids)} images ({made['how']})"
    job.save()
    audit_record(actor=job.created_by, action="embedding_map_finished", target=job, data={"source": source.name, "points": len(ids)})
    return job


def embedding_map_points(*, source: Source, method: str = "umap", model_name: str | None = None) -> dict | None:
    """The current feature set's map of ``source`` with what each point is coloured by, or None
    when it has not been made: {"ids", "x", "y", "label", "cls", "top1", "classes", "total"}."""
    model_name = model_name or settings.DEFAULT_MODEL
    path = _map_path(source, model_name, method, _feature_key(source, model_name))
    if not path.exists():
        return None
    with np.load(path) as data:
        ids, xy = data["ids"], data["xy"]
    total = len(ids)
    if total > DISPLAY_MAX:  # a stable sample: the same points every time
        keep = np.sort(np.random.default_rng(0).choice(total, DISPLAY_MAX, replace=False))
        ids, xy = ids[keep], xy[keep]
    facts = {r[0]: r[1:] for r in Image.objects.filter(pk__in=ids.tolist()).values_list(
        "id", "review_item__final_decision", "candidate_class_id")}
    top1 = dict(ImageEmbedding.objects.filter(image_id__in=ids.tolist(), model_name=model_name).values_list("image_id", "top1_wnid"))
    return {"ids": ids.tolist(), "x": [round(float(v), 4) for v in xy[:, 0]], "y": [round(float(v), 4) for v in xy[:, 1]],
            "label": [(facts.get(i, ("", None))[0] or "") for i in ids.tolist()],
            "cls": [facts.get(i, ("", None))[1] for i in ids.tolist()],
            "top1": [top1.get(i, "") for i in ids.tolist()], "total": total}
