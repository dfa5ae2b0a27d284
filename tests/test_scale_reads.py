"""Pages' reads at a pool's size (issue 45), checked by their plans and statements, not timings:
the duplicate groups are read through the partial index of the dropped members, never by a pass
over every prediction."""
from __future__ import annotations

import pytest
from django.db import connection

from curation.models import CandidateClass, Image, ImageEmbedding, Source
from curation.selectors.duplicates import _grouped, duplicate_group_counts, duplicate_group_list

pytestmark = pytest.mark.django_db


def _pool(n: int, group_every: int = 10) -> Source:
    source = Source.objects.create(name="pool", root="/nonexistent")
    cls = CandidateClass.objects.create(source=source, folder="c", mapping="unmapped")
    images = Image.objects.bulk_create([Image(source=source, candidate_class=cls, relative_path=f"c/{k}.jpg", sha256=f"{k:064x}", status="ok")
                                        for k in range(n)])
    rows = []
    for k, image in enumerate(images):
        rep = images[k - 1].pk if k % group_every == 1 else image.pk  # every tenth image a near-duplicate of the one before
        drop = f"near_duplicate_of:{rep}" if rep != image.pk else ""
        rows.append(ImageEmbedding(image=image, model_name="m", search_group=rep, dup_group=rep, search_drop=drop, drop_reason=drop))
    ImageEmbedding.objects.bulk_create(rows)
    return source


def test_the_groups_and_their_counts_are_the_groups_of_more_than_one():
    _pool(100)
    counts = duplicate_group_counts(model_name="m")
    assert counts == {"total": 10, "open": 10, "decided": 0}
    rows, nxt = duplicate_group_list(model_name="m", limit=4)
    assert [r.size for r in rows] == [2, 2, 2, 2] and nxt is not None


@pytest.mark.skipif(connection.vendor != "postgresql", reason="the plan is PostgreSQL's")
def test_the_groups_are_read_through_the_dropped_members_index():
    _pool(300)
    with connection.cursor() as cur:
        cur.execute("ANALYZE curation_imageembedding")
    sql, params = _grouped("m", None).query.sql_with_params()
    with connection.cursor() as cur:
        cur.execute("SET LOCAL enable_seqscan = off")  # a table this small would be read whole whatever the indexes
        cur.execute(f"EXPLAIN {sql}", params)
        plan = "\n".join(r[0] for r in cur.fetchall())
    assert "emb_dup_groups" in plan, plan
