"""Find-similar above its byte budget (issue 56): the index is built from rows streamed as arrays and
features read a block at a time, holds PQ codes, and answers with exact cosines re-ranked from the
feature shards, also after it is loaded from disk by another process."""
from __future__ import annotations

import numpy as np
import pytest

from curation.models import Image, ImageEmbedding, Source
from curation.services import similar as svc
from tests.dup_pool import MODEL, make_pool

pytestmark = pytest.mark.django_db


def _vectors(role: str) -> dict[int, np.ndarray]:
    from django.conf import settings

    out = {}
    for image_id, path, row in (ImageEmbedding.objects.filter(image__source__role=role, model_name=MODEL)
                                .values_list("image_id", "shard__path", "row")):
        v = np.load(settings.FEATURE_STORE / path)[row].astype(np.float32)
        out[image_id] = v / np.linalg.norm(v)
    return out


def test_a_pq_index_answers_with_exact_cosines_from_the_shards(tmp_path, settings, isolated_roots, monkeypatch):
    from pipelines.features import similar as sim

    monkeypatch.setattr(sim, "PQ_MIN_ROWS", 256)  # a pool of a few hundred candidates gets codes (faiss's minimum)
    settings.DEFAULT_MODEL = MODEL
    make_pool(tmp_path / "images", settings.FEATURE_STORE, per_class=60)
    settings.SIMILAR_FLAT_MAX_BYTES, settings.NEAR_DUP_EXACT_BELOW = 0, 50
    svc.similar_cache_clear()
    idx = svc.similar_index_build(model_name=MODEL, role=Source.Role.CANDIDATE)
    assert idx.kind == "ivf_pq" and idx.rerank is not None and idx.recall >= 0.95
    vecs = _vectors(Source.Role.CANDIDATE)
    query = Image.objects.filter(source__role=Source.Role.CANDIDATE).order_by("pk")[5].pk
    got = svc.find_similar(image_id=query, k=10, model_name=MODEL)["candidates"]
    exact = sorted(((i, float(v @ vecs[query])) for i, v in vecs.items() if i != query), key=lambda p: -p[1])[:10]
    for n in got:
        assert abs(n.similarity - round(float(vecs[n.image_id] @ vecs[query]), 4)) < 1e-4  # the shards' cosine, not the code's
    assert len({n.image_id for n in got} & {i for i, _s in exact}) >= 9
    svc.similar_cache_clear()  # another process: the index comes from disk and gets its rows again
    again = svc.similar_index_build(model_name=MODEL, role=Source.Role.CANDIDATE)
    assert again.kind == "ivf_pq" and again.rerank is not None
    assert [(n.image_id, n.similarity) for n in svc.find_similar(image_id=query, k=10, model_name=MODEL)["candidates"]] == \
        [(n.image_id, n.similarity) for n in got]
