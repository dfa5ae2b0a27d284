"""An export's selection and decisions.csv at a pool's size (issue 45): the selection is done by
the database (a grouped count for the reasons, a streamed query for the chosen images), the
decisions rows stream in chunks, and no statement grows with the pool (no list of every item).
Checked by the statements made and by the rows fetched at a time, not by a timing; the result is
checked against the row-by-row rule the selection had before, on a pool with every kind of
decision."""
from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import pytest
from django.conf import settings
from django.contrib.auth.models import User
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from curation.models import (
    CandidateClass,
    ClassVisualSignal,
    DuplicateOverride,
    Image,
    ImageEmbedding,
    ReviewItem,
    Source,
)
from curation.selectors import class_policy
from curation.services import exports
from curation.services.exports import export_select
from tests.test_exports import export_root, reviewed_pool, user  # noqa: F401  (export_root: autouse fixture)

pytestmark = pytest.mark.django_db


def every_kind_pool(tmp_path: Path) -> list[Source]:
    """Two reviewed sources whose items carry every kind of outcome: agreed ood / id / unclear,
    not_target, a conflict, adjudications (ood and id), withdrawn and open items, a broken file,
    an image a curator excluded, a near-duplicate drop, an unmapped class, a visually flagged
    class (unresolved) and a rejected one, and a class left with one clean image (below a
    minimum of two)."""
    pool, _ = reviewed_pool(tmp_path, n=30, name="pool")
    pool2, _ = reviewed_pool(tmp_path, n=15, name="pool2")
    curator = User.objects.filter(username="cur").first() or user("cur", "curator")
    items = list(ReviewItem.objects.filter(source=pool, final_decision="ood").order_by("id"))
    ReviewItem.objects.filter(pk=items[0].pk).update(status="conflict", final_decision="")
    ReviewItem.objects.filter(pk=items[1].pk).update(status="adjudicated", final_decision="ood", decided_by=curator,
                                                     final_note="ice, no ID object")
    ReviewItem.objects.filter(pk=items[2].pk).update(status="adjudicated", final_decision="id", final_wnids=["n02123045"],
                                                     decided_by=curator, final_note="a cat on the ice")
    ReviewItem.objects.filter(pk=items[3].pk).update(status="withdrawn", final_decision="")
    ReviewItem.objects.filter(pk=items[4].pk).update(status="open", final_decision="", done=0)
    ReviewItem.objects.filter(pk=items[5].pk).update(final_decision="not_target")
    Image.objects.filter(pk=items[6].image_id).update(status="broken")
    Image.objects.filter(pk=items[7].image_id).update(excluded_reason="blurred")
    ImageEmbedding.objects.filter(image_id=items[8].image_id).update(drop_reason=f"near_duplicate_of:{items[9].image_id}",
                                                                     dup_group=items[9].image_id)
    DuplicateOverride.objects.create(image_id=items[10].image_id, model_name=settings.DEFAULT_MODEL, action="keep",
                                     note="a different view", created_by=curator)
    classes = list(CandidateClass.objects.filter(source=pool2).order_by("wnid"))
    CandidateClass.objects.filter(pk=classes[0].pk).update(wnid="")  # unmapped
    ClassVisualSignal.objects.create(candidate_class=classes[1], model_name=settings.DEFAULT_MODEL, n_images=5, threshold=0.5,
                                     flagged=True, reason="top1_share")
    lone = list(ReviewItem.objects.filter(candidate_class=classes[2], final_decision="ood").order_by("id"))
    ReviewItem.objects.filter(pk__in=[it.pk for it in lone[1:]]).update(final_decision="unclear")
    rejected = CandidateClass.objects.filter(source=pool).order_by("wnid").last()
    ClassVisualSignal.objects.create(candidate_class=rejected, model_name=settings.DEFAULT_MODEL, n_images=5, threshold=0.5,
                                     flagged=True, reason="top1_share", resolution="reject")
    return [pool, pool2]


def old_rule(config: dict) -> tuple[list[tuple[int, str]], Counter]:
    """The selection as it was written before issue 45, item by item over model instances: every
    item considered (image id, reason; '' = exported) in decisions.csv's order, and the counts."""
    rows: list[tuple[ReviewItem, str]] = []
    model = config.get("model") or settings.DEFAULT_MODEL
    for source in Source.objects.filter(name__in=config["sources"]):
        policy = class_policy(source=source)
        items = (ReviewItem.objects.filter(source=source).select_related("image", "candidate_class")
                 .order_by("candidate_class__wnid", "image__relative_path"))
        if config.get("wnids"):
            items = items.filter(candidate_class__wnid__in=config["wnids"])
        dropped = dict(ImageEmbedding.objects.filter(image__source=source, model_name=model, drop_reason__startswith="near_duplicate_of:")
                       .values_list("image_id", "drop_reason"))
        for item in items:
            cc = item.candidate_class
            if item.status not in ReviewItem.FINAL:
                reason = f"review_{item.status}"
            elif item.final_decision != "ood":
                reason = f"final_{item.final_decision}"
            elif item.image.status != "ok":
                reason = f"image_{item.image.status}"
            elif item.image.excluded_reason:
                reason = "excluded_by_curator"
            elif item.image_id in dropped:
                reason = f"duplicate_{dropped[item.image_id]}"
            elif cc is None or not cc.wnid:
                reason = "class_unmapped"
            else:
                reason = policy.of(cc.pk).reason
            rows.append((item, reason))
    minimum = int(config.get("min_per_class", 1))
    clean = Counter(it.candidate_class_id for it, reason in rows if not reason)
    out = [(it.image_id, reason or ("" if clean[it.candidate_class_id] >= minimum else f"below_min_per_class_{minimum}"))
           for it, reason in rows]
    return out, Counter(reason.split(":")[0] for _i, reason in out if reason)


@pytest.mark.parametrize("config", [{"min_per_class": 1}, {"min_per_class": 2}, {"min_per_class": 1, "wnids": ["n09308572", "n11517776"]}])
def test_the_selection_equals_the_row_by_row_rule(tmp_path, config):
    sources = every_kind_pool(tmp_path)
    config = {"sources": [s.name for s in sources], "model": settings.DEFAULT_MODEL, **config}
    expected, excluded = old_rule(config)
    sel = export_select(config=config)
    got = [(it.image_id, reason) for it, reason in sel.rows]
    assert got == expected and len(sel.rows) == len(expected)
    assert [it.image_id for it in sel.items] == [i for i, reason in expected if not reason]
    assert sel.excluded == excluded
    if "wnids" not in config:  # every kind of outcome is among them
        assert len({reason.split(":")[0] for _i, reason in expected if reason}) == (12 if config["min_per_class"] == 1 else 13)
    per_class = Counter(it.candidate_class.wnid for it in sel.items)
    assert {w: c["images"] for w, c in sel.classes.items()} == per_class
    # decisions.csv's rows: the same items in the same order, each with its reviews and prediction
    rows = list(exports._decisions_rows(sel, {}, settings.DEFAULT_MODEL))
    assert [r[0] for r in rows] == [i for i, _r in expected]
    from curation.models import Review

    reviewed = Counter(Review.objects.filter(item__source__in=sources).values_list("item__image_id", flat=True))
    assert all(len(json.loads(cells[11])) == reviewed[image_id] for image_id, cells in rows) and sum(reviewed.values()) > 0


def rows_pool(n: int) -> Source:
    """A pool written as rows (no files): ``n`` reviewed images over three classes, a fifth of
    them id, one in thirteen a near-duplicate, one review each."""
    from curation.models import Assignment, Review

    annotator = User.objects.filter(username="ann").first() or user("ann", "annotator")
    source = Source.objects.get_or_create(name="rows", defaults={"root": "/nonexistent"})[0]
    classes = list(CandidateClass.objects.filter(source=source).order_by("pk")) or CandidateClass.objects.bulk_create(
        [CandidateClass(source=source, folder=f"c{k}", wnid=w, mapping="exact") for k, w in enumerate(("n09308572", "n11517776", "n09270735"))])
    start = Image.objects.filter(source=source).count()
    images = Image.objects.bulk_create([Image(source=source, candidate_class=classes[k % 3], relative_path=f"c/{k}.jpg", sha256=f"{k:064x}",
                                              status="ok") for k in range(start, n)])
    ImageEmbedding.objects.bulk_create([ImageEmbedding(image=i, model_name=settings.DEFAULT_MODEL, topk=[["n02123045", 0.4]],
                                                       drop_reason="" if i.pk % 13 else f"near_duplicate_of:{i.pk - 1}") for i in images])
    items = ReviewItem.objects.bulk_create([ReviewItem(image=i, source=source, candidate_class=i.candidate_class, status="complete", done=1,
                                                       final_decision="id" if i.pk % 5 == 0 else "ood") for i in images])
    now = timezone.now()
    leases = Assignment.objects.bulk_create([Assignment(item=it, annotator=annotator, state="done", leased_at=now, expires_at=now)
                                             for it in items])
    Review.objects.bulk_create([Review(item=a.item, annotator=annotator, assignment=a, decision=a.item.final_decision, seconds=2.0)
                                for a in leases])
    return source


class Executed:
    """Every statement the ORM runs, with whether its rows were fetched in chunks (a server-side
    cursor on PostgreSQL) and how many at a time."""

    def __init__(self, monkeypatch):
        from django.db.models.sql import compiler

        self.calls: list[tuple[str, bool, int]] = []
        original = compiler.SQLCompiler.execute_sql

        def execute_sql(this, result_type="multi", chunked_fetch=False, chunk_size=100):
            sql, _params = this.as_sql()
            self.calls.append((sql, chunked_fetch, chunk_size))
            return original(this, result_type, chunked_fetch, chunk_size)

        monkeypatch.setattr(compiler.SQLCompiler, "execute_sql", execute_sql)


def in_lists(sql: str) -> list[int]:
    """How many values each IN (...) list of a statement holds."""
    return [m.group(1).count(",") + 1 for m in re.finditer(r" IN \(([^()]*)\)", sql)]


def test_the_selection_makes_the_same_statements_at_any_size_and_streams_its_rows(monkeypatch):
    monkeypatch.setattr(exports, "CHUNK", 16)
    config = {"sources": ["rows"], "model": settings.DEFAULT_MODEL, "min_per_class": 1}
    made = []
    for size in (30, 90):
        rows_pool(size)
        with CaptureQueriesContext(connection) as ctx:
            sel = export_select(config=config)
        assert len(sel.rows) == size and 0 < len(sel.items) < size
        statements = [q["sql"] for q in ctx.captured_queries]
        assert max(len(s) for s in statements) < 4000, "a statement that grows with the pool"
        assert all(n <= 16 for s in statements for n in in_lists(s))
        made.append(len(statements))
        # decisions.csv: one streamed query for the items and one for their reviews, in the same order
        executed = Executed(monkeypatch)
        with CaptureQueriesContext(connection) as ctx:
            rows = list(exports._decisions_rows(sel, {}, settings.DEFAULT_MODEL))
        monkeypatch.undo()
        monkeypatch.setattr(exports, "CHUNK", 16)
        assert len(rows) == size and all(len(json.loads(cells[11])) == 1 for _i, cells in rows)
        statements = [q["sql"] for q in ctx.captured_queries]
        assert all(n <= 16 for s in statements for n in in_lists(s)) and max(len(s) for s in statements) < 4000
        reads = [(sql, chunked, chunk) for sql, chunked, chunk in executed.calls]
        assert len(reads) == 2 and all(r[1:] == (True, 16) for r in reads), "the items or their reviews read all at once"
        made.append(len(statements))
    assert made[0] == made[2] and made[1] == made[3]


def test_the_chosen_images_are_streamed_and_the_reasons_counted_by_the_database(monkeypatch):
    monkeypatch.setattr(exports, "CHUNK", 16)
    rows_pool(60)
    executed = Executed(monkeypatch)
    sel = export_select(config={"sources": ["rows"], "model": settings.DEFAULT_MODEL, "min_per_class": 1})
    items = [(sql, chunked, chunk) for sql, chunked, chunk in executed.calls if 'FROM "curation_reviewitem"' in sql]
    grouped = [c for c in items if "GROUP BY" in c[0]]
    streamed = [c for c in items if "GROUP BY" not in c[0]]
    assert len(grouped) == 1 and len(streamed) == 1 and streamed[0][1:] == (True, 16)
    assert sel.excluded["final_id"] == ReviewItem.objects.filter(source__name="rows", final_decision="id").count()
    assert sel.excluded["duplicate_near_duplicate_of"] > 0


def test_an_export_writes_its_members_a_chunk_at_a_time(tmp_path, monkeypatch):
    """A whole export, with chunks of three: every INSERT of members holds at most three."""
    from curation.models import ExportMember
    from curation.services.exports import export_create, export_execute

    sources = every_kind_pool(tmp_path)
    monkeypatch.setattr(exports, "CHUNK", 3)
    export = export_create(name="chunked", sources=sources, enqueue=False)
    with CaptureQueriesContext(connection) as ctx:
        export_execute(export_id=export.pk)
    export.refresh_from_db()
    assert export.status == "done", export.message
    inserts = [q["sql"] for q in ctx.captured_queries if 'INTO "curation_exportmember"' in q["sql"]]
    members = ExportMember.objects.filter(export=export).count()
    assert members == export.counts["images"] > 3 and len(inserts) == -(-members // 3)
    assert all(q["sql"].count("), (") <= 2 for q in ctx.captured_queries if 'INTO "curation_exportmember"' in q["sql"])
