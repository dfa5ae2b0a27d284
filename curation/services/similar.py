"""Find similar (docs/browse.md, "Find similar"): an image's nearest neighbours among the
candidates and among the ID reference images, from the stored features (the image pipeline's
shards), with a faiss index per feature set (``pipelines.features.similar``); and what a finding does to
the queue: a curator sends neighbours to the front of the review queue (or gives them one more
review, ``images_requeue``), and an annotator who sees an ID object sends the image's 20 nearest
open candidates to the front. Moves are audited."""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

import numpy as np
from django.conf import settings
from django.contrib.auth.models import User
from django.db import transaction
from django.db.models import F, Max, Min

from curation.audit import audit_record
from curation.models import Assignment, FeatureShard, Image, ImageEmbedding, ReviewItem, Source
from curation.selectors import annotator_scope
from curation.services.bulk import columns_of
from curation.services.image_pipeline import PipelineError, load_features
from pipelines.features import similar as sim
from pipelines.features.dup_search import FeatureReader, FeatureShardUnreadable
from pipelines.names import atomic_write

INLINE_BUILD_MAX = 200_000  # above this many vectors the index is built by the command, not in a request
FRONT_DEFAULT = 20


class SimilarError(ValueError):
    """Find similar cannot answer; the message says why and what to run."""


@dataclass
class Neighbour:
    image_id: int
    similarity: float


def _embeddings(model_name: str, role: str):
    return (ImageEmbedding.objects.filter(model_name=model_name, ok=True, shard__isnull=False, image__source__role=role,
                                          image__status=Image.Status.OK))


def _feature_set_key(model_name: str, role: str) -> str:
    """Changes whenever the set of stored vectors does (an extraction added or replaced rows)."""
    agg = _embeddings(model_name, role).aggregate(n=Max("id"), s=Max("shard_id"), lo=Min("id"))
    n = _embeddings(model_name, role).count()
    return f"{n}-{agg['lo'] or 0}-{agg['n'] or 0}-{agg['s'] or 0}"


def _index_path(model_name: str, role: str, key: str) -> Path:
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in model_name)
    return Path(settings.FEATURE_STORE) / "similar" / f"{safe}-{role}-{key}.faiss"


_lock = threading.Lock()
_cache: dict[tuple[str, str], tuple[float, str, sim.SimilarIndex]] = {}
KEY_CHECK_EVERY = 30.0


def similar_index_build(*, model_name: str, role: str, force_inline: bool = True) -> sim.SimilarIndex:
    """Build (or load, when built before) the index of ``role``'s stored features, on disk under
    FEATURE_STORE/similar/ keyed by the feature set. The rows come as arrays and the features a
    block at a time from their shards (``pipelines.features.similar.build_index_streamed``); above
    SIMILAR_FLAT_MAX_BYTES of vectors the index holds PQ codes and re-ranks from the shards."""
    key = _feature_set_key(model_name, role)
    path = _index_path(model_name, role, key)
    if path.exists() and Path(f"{path}.ids.npy").exists() and Path(f"{path}.rows.npz").exists():
        return _with_reranker(sim.load(path), path)
    emb_ids, image_ids, shard, row = columns_of(
        _embeddings(model_name, role).order_by("id").values_list("id", "image_id", "shard_id", "row").iterator(chunk_size=20_000),
        (np.int64, np.int64, np.int64, np.int32))
    if not force_inline and len(emb_ids) > INLINE_BUILD_MAX:
        raise SimilarError(f"{len(emb_ids)} stored {role} features have no find-similar index yet: run "
                           f"`python manage.py similar_index` once (it is kept until the features change)")
    shard_ids = np.unique(shard)
    paths = dict(FeatureShard.objects.filter(pk__in=shard_ids.tolist()).values_list("pk", "path"))
    shards = [paths[int(s)] for s in shard_ids]
    shard_of = np.searchsorted(shard_ids, shard).astype(np.int32)
    reader = FeatureReader([Path(settings.FEATURE_STORE) / p for p in shards])
    try:
        idx = sim.build_index_streamed(len(emb_ids), lambda pos: reader.vectors(shard_of[pos], row[pos]), image_ids,
                                       exact_below=settings.NEAR_DUP_EXACT_BELOW, flat_max_bytes=settings.SIMILAR_FLAT_MAX_BYTES)
    except FeatureShardUnreadable as exc:
        raise SimilarError(str(exc)) from None
    path.parent.mkdir(parents=True, exist_ok=True)
    if len(idx):
        atomic_write(Path(f"{path}.rows.npz"), lambda fh: np.savez(fh, shard=shard_of, row=row, shards=np.array(shards)),
                     root=settings.FEATURE_STORE)
        sim.save(idx, path)
    return idx


def _with_reranker(idx: sim.SimilarIndex, path: Path) -> sim.SimilarIndex:
    """A loaded PQ index re-ranks its candidates from the feature shards (its rows' places saved beside it)."""
    if idx.kind != "ivf_pq":
        return idx
    with np.load(f"{path}.rows.npz") as z:
        shard_of, row, shards = z["shard"], z["row"], [str(s) for s in z["shards"]]
    reader = FeatureReader([Path(settings.FEATURE_STORE) / p for p in shards])
    idx.rerank = lambda rows: reader.vectors(shard_of[rows], row[rows])
    return idx


def similar_index(*, model_name: str, role: str) -> sim.SimilarIndex:
    """The index for ``role`` (candidate or id), cached per process and checked against the
    feature set at most every KEY_CHECK_EVERY seconds."""
    now = time.monotonic()
    with _lock:
        hit = _cache.get((model_name, role))
        if hit and now - hit[0] < KEY_CHECK_EVERY:
            return hit[2]
        key = _feature_set_key(model_name, role)
        if hit and hit[1] == key:
            _cache[(model_name, role)] = (now, key, hit[2])
            return hit[2]
        idx = similar_index_build(model_name=model_name, role=role, force_inline=False)
        _cache[(model_name, role)] = (now, key, idx)
        return idx


def similar_cache_clear() -> None:
    with _lock:
        _cache.clear()


def _query_vector(image_id: int, model_name: str) -> np.ndarray:
    emb = (ImageEmbedding.objects.filter(image_id=image_id, model_name=model_name, ok=True, shard__isnull=False)
           .select_related("shard").first())
    if emb is None:
        raise SimilarError(f"image {image_id} has no stored features from {model_name}: run the image pipeline on its source first")
    try:
        return load_features([emb])[0]
    except PipelineError as exc:
        raise SimilarError(str(exc)) from None


def find_similar(*, image_id: int, k: int = 20, model_name: str | None = None) -> dict[str, list[Neighbour]]:
    """The ``k`` nearest candidates and the ``k`` nearest ID reference images to an image, by
    cosine similarity of the stored features, best first (the image itself left out)."""
    if not 1 <= k <= 200:
        raise SimilarError(f"k must be between 1 and 200, not {k}")
    model_name = model_name or settings.DEFAULT_MODEL
    q = _query_vector(image_id, model_name)
    out = {}
    for role, name in ((Source.Role.CANDIDATE, "candidates"), (Source.Role.ID, "id_images")):
        idx = similar_index(model_name=model_name, role=role)
        out[name] = [Neighbour(i, round(s, 4)) for i, s in sim.search(idx, q, k, exclude=image_id)]
    return out


def _to_front(item_ids: list[int]) -> int:
    """Give these open queue rows the smallest priorities, in the order given; remembered, so a
    rebuild of the queue (which re-applies the source's order) keeps them in front."""
    if not item_ids:
        return 0
    low = ReviewItem.objects.filter(status=ReviewItem.Status.OPEN).aggregate(m=Min("priority"))["m"] or 0.0
    step = 1e-6
    base = min(low, 0.0) - 1.0 - step * len(item_ids)
    for rank, pk in enumerate(item_ids):
        ReviewItem.objects.filter(pk=pk).update(priority=base + step * rank, front_priority=base + step * rank)
    return len(item_ids)


def images_to_front(*, image_ids: Iterable[int], user: User | None = None) -> tuple[int, dict[str, int]]:
    """A curator sends images to the front of the review queue (open ones; the others are
    reported with why). They stay in front when the queue is built again."""
    ids = list(dict.fromkeys(int(i) for i in image_ids))
    if not ids:
        raise SimilarError("no image is selected: tick the images first")
    if len(ids) > 1000:
        raise SimilarError(f"{len(ids)} images are selected; send at most 1000 at once")
    with transaction.atomic():
        items = {it.image_id: it for it in ReviewItem.objects.select_for_update().filter(image_id__in=ids)}
        skipped: dict[str, int] = {}
        moving = []
        for i in ids:
            it = items.get(i)
            if it is None or it.status == ReviewItem.Status.WITHDRAWN:
                skipped["not in the review queue"] = skipped.get("not in the review queue", 0) + 1
            elif it.status != ReviewItem.Status.OPEN:
                skipped["already decided (Queue for review gives them one more review)"] = \
                    skipped.get("already decided (Queue for review gives them one more review)", 0) + 1
            else:
                moving.append(it.pk)
        _to_front(moving)
        audit_record(actor=user, action="review_sent_to_front", target=None,
                     data={"images": [i for i in ids if items.get(i) and items[i].pk in moving], "by": "curator"})
    return len(moving), skipped


def review_similar_to_front(*, user: User, assignment_id: int, k: int = FRONT_DEFAULT, model_name: str | None = None) -> list[int]:
    """An annotator saw an ID object: the image's ``k`` nearest open candidates (that still need
    a review, within the annotator's scope) go to the front of the queue. The assignment must be
    theirs. Returns the images moved; audited."""
    a = Assignment.objects.filter(pk=assignment_id, annotator=user).select_related("item").first()
    if a is None:
        raise SimilarError(f"assignment {assignment_id} is not one of yours")
    model_name = model_name or settings.DEFAULT_MODEL
    q = _query_vector(a.item.image_id, model_name)
    idx = similar_index(model_name=model_name, role=Source.Role.CANDIDATE)
    near = sim.search(idx, q, max(k * 5, 100), exclude=a.item.image_id)
    scope = annotator_scope(user)
    open_items = dict(ReviewItem.objects.filter(scope.q(), image_id__in=[i for i, _s in near], status=ReviewItem.Status.OPEN)
                      .alias(slots=F("done") + F("leased")).filter(slots__lt=F("required")).values_list("image_id", "pk"))
    chosen = [(i, s) for i, s in near if i in open_items][:k]
    with transaction.atomic():
        _to_front([open_items[i] for i, _s in chosen])
        audit_record(actor=user, action="review_sent_to_front", target=a.item,
                     data={"image": a.item.image_id, "images": [i for i, _s in chosen],
                           "similarities": [round(s, 4) for _i, s in chosen], "by": "annotator"})
    return [i for i, _s in chosen]
