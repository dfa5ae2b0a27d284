"""The queue's bulk writes and the annotators' lease path at a pool's size (issue 45): the
PostgreSQL rebuild applies in keyset batches of the queue rows' ids (statements bounded by the
batch, as many as rows / batch, each a run of the table's rows), a rebuild stopped half-way resumes on its rerun to the queue an uninterrupted
one leaves, and review next / grid next / grid submit make as many statements on a large pool as
on a small one, their main reads going through the open-queue index. Checked by the statements
and plans, not by a timing (13.2M images: one UPDATE of 9.2M rows was cancelled after 15 min)."""
from __future__ import annotations

import json
import math
import random

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from curation.models import CandidateClass, Image, ImageEmbedding, ReviewItem, ReviewSettings, Source
from curation.services import review as review_services
from curation.services.review import queue_batches, review_queue_sync
from tests.sql_plans import plan_without_seq_scans

pytestmark = pytest.mark.django_db
postgres_only = pytest.mark.skipif(connection.vendor != "postgresql", reason="the batched rebuild is PostgreSQL's (SQLite: row by row)")


def _pool(n: int, name: str = "pool") -> Source:
    source = Source.objects.create(name=name, root="/nonexistent")
    classes = CandidateClass.objects.bulk_create([CandidateClass(source=source, folder=f"c{k}", mapping="unmapped") for k in range(3)])
    images = Image.objects.bulk_create([Image(source=source, candidate_class=classes[k % 3], relative_path=f"c/{k}.jpg",
                                              sha256=f"{source.pk:08x}{k:056x}", status="ok" if k % 11 else "broken") for k in range(n)])
    ImageEmbedding.objects.bulk_create([ImageEmbedding(image=i, model_name="m", nearest_id_similarity=(i.pk % 17) / 17,
                                                       drop_reason="" if i.pk % 13 else f"near_duplicate_of:{i.pk - 1}") for i in images])
    return source


def _queue(source: Source) -> list[tuple]:
    return list(ReviewItem.objects.filter(source=source).order_by("image_id")
                .values_list("image_id", "status", "priority", "required", "final_decision", "final_wnids"))


def test_the_batches_cover_every_image_once_and_hold_at_most_the_batch():
    ids = [7, 3, 99, 1, 42, 8, 15, 16, 23]
    for size in (1, 2, 4, 9, 50):
        batches = queue_batches(ids, size)
        assert len(batches) == math.ceil(len(ids) / size)
        for k, (lo, hi) in enumerate(batches):
            assert sum(lo < i <= hi for i in ids) <= size
            if k:
                assert lo == batches[k - 1][1], "the ranges touch: no image falls between two batches"
        assert batches[0][0] < min(ids) and batches[-1][1] == 2**63 - 1  # rows whose image was not listed fall in the last
    assert queue_batches([], 10) == [(-(2**63), 2**63 - 1)]
    with pytest.raises(ValueError):
        queue_batches(ids, 0)


@postgres_only
def test_the_rebuild_writes_in_batches_bounded_by_the_batch_size(settings, monkeypatch):
    """Every queue row moves (the case of 13.2M images: 9.2M rows in one UPDATE); the rebuild's
    statements on the queue are one UPDATE per batch of queue rows and one INSERT per batch of new
    images, as many batches as rows / batch, each batch touching at most its rows, and no
    statement's text grows with the pool."""
    settings.DEFAULT_MODEL = "m"
    monkeypatch.setattr(review_services, "QUEUE_BATCH", 10)
    monkeypatch.setattr(review_services, "QUEUE_BATCH_IN_TRANSACTION", 10)  # (a test holds a transaction)
    seen: list[tuple[int, int, int]] = []
    real = review_services._queue_apply_batch

    def spy(cur, source_id, lo, hi, S):
        out = real(cur, source_id, lo, hi, S)
        seen.append((lo, hi, out[0] + out[2]))  # withdrawn + moved: rows the batch wrote
        return out

    monkeypatch.setattr(review_services, "_queue_apply_batch", spy)
    made = {}
    for n in (30, 90):
        source = _pool(n, name=f"pool{n}")
        with CaptureQueriesContext(connection) as ctx:
            first = review_queue_sync(source=source, model_name="m")
        inserts = [q["sql"] for q in ctx.captured_queries if q["sql"].startswith("INSERT INTO curation_reviewitem")]
        assert first.created == ReviewItem.objects.filter(source=source).count() > 10
        assert len(inserts) == math.ceil(first.created / 10), "the first build inserts in batches of new images"
        ReviewItem.objects.filter(source=source).update(priority=-99.5)  # every row out of line
        seen.clear()
        with CaptureQueriesContext(connection) as ctx:
            report = review_queue_sync(source=source, model_name="m")
        assert report.updated == ReviewItem.objects.filter(source=source).count() > 0
        assert not ReviewItem.objects.filter(source=source, priority=-99.5).exists()
        batches = queue_batches(list(ReviewItem.objects.filter(source=source).values_list("id", flat=True)), 10)
        assert len(seen) == len(batches) == math.ceil(report.updated / 10)
        assert all(written <= 10 for _lo, _hi, written in seen)
        on_queue = [q["sql"] for q in ctx.captured_queries if "curation_reviewitem" in q["sql"] and "WITH c AS" in q["sql"]]
        inserts = [q["sql"] for q in ctx.captured_queries if q["sql"].startswith("INSERT INTO curation_reviewitem")]
        assert len(on_queue) == len(batches) and not inserts, "one UPDATE per batch; nothing new to insert"
        assert max(len(q["sql"]) for q in ctx.captured_queries) < 4000, "a statement that grows with the rows"
        statements = [q["sql"] for q in ctx.captured_queries if not q["sql"].startswith(("SAVEPOINT", "RELEASE SAVEPOINT"))]
        made[n] = len(statements) - len(batches)  # (a batch's transaction is a savepoint in the test's)
    assert made[30] == made[90], "besides the batches, the same statements at any size"


@postgres_only
def test_a_batch_is_a_run_of_the_queues_rows_whatever_order_its_images_came_in(settings, monkeypatch):
    """The update batches are ranges of the queue rows' own ids, the order rows are written and
    laid out in, not of image ids: on a queue built in priority order (its ids unrelated to its
    images', as the ImageNet-21K pool's), each batch writes a run of consecutive rows. By image
    ids each batch's rows were spread over the whole table: at 13.2M images every batch read
    pages from all over a 1 GB heap, and the rebuild grew 20x from 1M images."""
    settings.DEFAULT_MODEL = "m"
    monkeypatch.setattr(review_services, "QUEUE_BATCH", 10)
    monkeypatch.setattr(review_services, "QUEUE_BATCH_IN_TRANSACTION", 10)  # (a test holds a transaction)
    source = _pool(90)
    review_queue_sync(source=source, model_name="m")
    rows = list(ReviewItem.objects.filter(source=source))
    random.Random(7).shuffle(rows)  # queued again in an order unrelated to the images' (as by priority)
    ReviewItem.objects.filter(source=source).delete()
    for r in rows:
        r.pk = None
    ReviewItem.objects.bulk_create(rows)
    ids = sorted(ReviewItem.objects.filter(source=source).values_list("id", flat=True))
    by_image = list(ReviewItem.objects.filter(source=source).order_by("image_id").values_list("id", flat=True))
    assert sum(a < b for a, b in zip(by_image, by_image[1:])) < 0.7 * len(by_image), "the queue's ids do not follow its images'"
    ReviewItem.objects.filter(source=source).update(priority=-99.5)
    written: list[list[int]] = []
    real = review_services._queue_apply_batch

    def spy(cur, source_id, lo, hi, S):
        before = set(ReviewItem.objects.filter(source=source, priority=-99.5).values_list("id", flat=True))
        out = real(cur, source_id, lo, hi, S)
        after = set(ReviewItem.objects.filter(source=source, priority=-99.5).values_list("id", flat=True))
        written.append(sorted(before - after))
        return out

    monkeypatch.setattr(review_services, "_queue_apply_batch", spy)
    review_queue_sync(source=source, model_name="m")
    assert [i for batch in written for i in batch] == ids, "each row written once, the batches in the rows' order"
    for batch in written:
        assert 0 < len(batch) <= 10 and batch == ids[ids.index(batch[0]):ids.index(batch[0]) + len(batch)], \
            "a batch's rows are consecutive queue rows"


@postgres_only
def test_a_rebuild_stopped_half_way_resumes_to_the_queue_an_uninterrupted_one_leaves(settings, monkeypatch):
    """A worker killed after a few batches (of the updates, or of the inserts): what they wrote
    stays, the rerun writes the rest and duplicates nothing; the queue ends as one rebuild would
    leave it (new images, withdrawals, restores, re-openings, priorities and reviews required)."""
    settings.DEFAULT_MODEL = "m"
    monkeypatch.setattr(review_services, "QUEUE_BATCH", 8)
    monkeypatch.setattr(review_services, "QUEUE_BATCH_IN_TRANSACTION", 8)  # (a test holds a transaction)
    source = _pool(80)
    review_queue_sync(source=source, model_name="m")
    items = list(ReviewItem.objects.filter(source=source).order_by("image_id"))
    # out of line in every way a rebuild puts right
    ReviewItem.objects.filter(pk__in=[i.pk for i in items[0::5]]).update(priority=-99.5)
    ReviewItem.objects.filter(pk__in=[i.pk for i in items[1::7]]).update(status="complete", done=2, final_decision="ood",
                                                                            final_wnids=[])
    ReviewItem.objects.filter(pk__in=[i.pk for i in items[2::9]]).update(status="withdrawn")
    ReviewItem.objects.filter(pk__in=[i.pk for i in items[3::4]]).delete()
    Image.objects.filter(pk__in=[i.image_id for i in items[4::13]]).update(excluded_reason="curator")
    ReviewSettings.objects.update_or_create(source=source, candidate_class=None, defaults={"reviews_required": 3})
    before = _queue(source)
    gone = len(items[3::4])
    assert gone > 8, "more new images than one insert batch"

    with transaction.atomic():  # the uninterrupted rebuild, taken back after
        review_queue_sync(source=source, model_name="m")
        want = _queue(source)
        transaction.set_rollback(True)
    assert _queue(source) == before != want

    for stage in ("_queue_apply_batch", "_queue_insert_batch"):
        real = getattr(review_services, stage)
        calls = {"n": 0}

        def killed_after_one(*args, real=real, calls=calls):
            if calls["n"] == 1:
                raise KeyboardInterrupt("the worker is stopped")
            calls["n"] += 1
            return real(*args)

        monkeypatch.setattr(review_services, stage, killed_after_one)
        with pytest.raises(KeyboardInterrupt):
            review_queue_sync(source=source, model_name="m")
        monkeypatch.setattr(review_services, stage, real)
        half = _queue(source)
        assert half != before and half != want, f"{stage}: the first batch was written, not the rest"
        before = half
    again = review_queue_sync(source=source, model_name="m")
    assert _queue(source) == want
    assert 0 < again.created < gone, "created once: the killed run's first insert batch had made some"
    assert ReviewItem.objects.filter(source=source).count() == len(want)
    assert review_queue_sync(source=source, model_name="m").updated == 0, "a rebuild of a queue in line writes nothing"


def test_a_lowered_setting_decides_the_images_that_have_their_reviews_as_one_would_by_one(settings, django_user_model):
    """Reviews per image 3 -> 2: the open images with two reviews are decided by the rule one
    submit applies (agree -> complete with their ID classes' union; disagree -> conflict; gold
    reviews do not count), and on PostgreSQL by statements whose number does not grow with the
    images decided (two per image before)."""
    from datetime import datetime, timezone

    from curation.models import Assignment, Review
    from curation.services.review import _finalize, review_settings_save

    settings.DEFAULT_MODEL = "m"
    source = _pool(60)
    ReviewSettings.objects.update_or_create(source=source, candidate_class=None, defaults={"reviews_required": 3})
    review_queue_sync(source=source, model_name="m")
    people = [django_user_model.objects.create(username=f"r{k}") for k in range(3)]
    at = datetime(2026, 1, 1, tzinfo=timezone.utc)
    plans = [(("ood", []), ("ood", [])), (("id", ["n02123045"]), ("id", ["n07920052", "n02123045"])), (("ood", []), ("unclear", [])),
             (("id", ["n02123045"]), ("ood", []))]
    want = {}
    items = list(ReviewItem.objects.filter(source=source, status="open").order_by("id"))
    for k, item in enumerate(items):
        plan = plans[k % len(plans)]
        for who, (decision, wnids) in zip(people, plan):
            a = Assignment.objects.create(item=item, annotator=who, state="done", leased_at=at, expires_at=at)
            Review.objects.create(item=item, annotator=who, assignment=a, decision=decision, id_wnids=wnids, seconds=1.0)
        g = Assignment.objects.create(item=item, annotator=people[2], state="done", is_gold=True, leased_at=at, expires_at=at)
        Review.objects.create(item=item, annotator=people[2], assignment=g, decision="not_target", seconds=1.0, is_gold=True)
        ReviewItem.objects.filter(pk=item.pk).update(done=2)
        probe = ReviewItem(pk=item.pk)
        _finalize(probe, list(plan))
        want[item.pk] = (probe.status, probe.final_decision, probe.final_wnids)
    with CaptureQueriesContext(connection) as ctx:
        review_settings_save(source=source, reviews_required=2)
    got = {pk: (st, d, w) for pk, st, d, w in ReviewItem.objects.filter(pk__in=want).values_list("pk", "status", "final_decision", "final_wnids")}
    assert got == want and {s for s, _d, _w in got.values()} == {"complete", "conflict"}
    if connection.vendor == "postgresql":
        reads = [q["sql"] for q in ctx.captured_queries if 'FROM "curation_review"' in q["sql"]]
        assert not reads, f"reviews read per image: {reads[:2]}"
        assert len(ctx.captured_queries) < len(items), "\n".join(q["sql"][:160] for q in ctx.captured_queries)


# -- the lease path: review next, grid next, grid submit -----------------------------------------------


@pytest.fixture
def queue_of(tmp_path, role_groups):
    """A queue of ``n`` images and two annotators to lease from it: one on the grid, one on the
    single-image screen."""
    from curation.roles import ANNOTATOR
    from curation.services.users import user_create_with_role
    from tests.review_data import queue_with_rows

    def make(n: int, name: str):
        queue_with_rows(tmp_path / name, n=n, name=name)
        return [user_create_with_role(username=f"{screen}-{name}", password="a-pw-12345", role=ANNOTATOR)[0] for screen in ("g", "s")]
    return make


def _captured(call) -> list[dict]:
    """``call``'s statements, the per-process caches cold (the expired-lease sweep, the
    certification tick, gold rates: each runs at most every few seconds, so a warm one would
    make the count depend on the clock)."""
    from curation.services.review import review_cache_clear
    from curation.services.review_grid import grid_cache_clear

    review_cache_clear()
    grid_cache_clear()
    with CaptureQueriesContext(connection) as ctx:
        r = call()
    assert r.status_code == 200, r.content[:300]
    return ctx.captured_queries


def _lease_calls(grid, single) -> dict[str, list[dict]]:
    """A new annotator's first grid page and its submit (the next page and the one after leased
    with it); another's first images on the single-image screen: each call's statements."""
    page: dict = {}

    def first_page():
        r = grid.get("/api/review/grid/next?size=4")
        page.update(r.json())
        return r

    out = {"grid next": _captured(first_page)}
    assert len(page["tiles"]) == 4
    marks = [{"assignment": t["assignment"], "decision": "ood"} for t in page["tiles"]]
    out["grid submit"] = _captured(lambda: grid.post("/api/review/grid/submit", json.dumps({"marks": marks, "size": 4}),
                                                     content_type="application/json"))
    out["review next"] = _captured(lambda: single.get("/api/review/next"))
    return out


def _clients(users) -> tuple:
    from django.test import Client

    clients = (Client(), Client())
    for c, u in zip(clients, users):
        c.force_login(u)
    return clients


def test_the_lease_calls_make_as_many_statements_on_a_five_times_larger_pool(queue_of):
    """Grid next, grid submit and review next of new annotators: the same number of statements on
    a queue of 30 and one of 150 (classes of 10 and of 50 images), nothing per image of the pool."""
    made = {}
    for n, name in ((30, "small"), (150, "large")):
        calls = _lease_calls(*_clients(queue_of(n, name)))
        made[name] = {k: len(v) for k, v in calls.items()}
    assert made["small"] == made["large"], made


@postgres_only
def test_the_lease_calls_read_the_queue_through_its_indexes(queue_of):
    """Every read of the queue and the leases those calls make is planned on an index (tables
    this small would be read whole whatever the indexes: sequential scans are priced out, so a
    read with no index to use still shows one): the queue's order from the open-queue partial
    index, and the annotator's last page from the end of the (annotator, state, leased_at) index,
    not a sort of all their finished tiles (about 170,000 at 13.2M images); a class's waiting
    images are counted only as far as a page's decisions need (a LIMIT), not all of them."""
    import re

    calls = _lease_calls(*_clients(queue_of(150, "large")))
    with connection.cursor() as cur:
        cur.execute("ANALYZE curation_reviewitem")
        cur.execute("ANALYZE curation_assignment")
    by_open_queue = class_counts = 0
    for name, queries in calls.items():
        for q in queries:
            sql = q["sql"]
            if not sql.startswith("SELECT") or not re.search(r'"?curation_(reviewitem|assignment)"?', sql):
                continue
            plan = plan_without_seq_scans(re.sub(r"\s+FOR UPDATE.*$", "", sql, flags=re.S))
            assert "Seq Scan on curation_reviewitem" not in plan and "Seq Scan on curation_assignment" not in plan, f"{name}: {sql[:300]}\n{plan}"
            assert not re.search(r"Sort Key:.*finished_at", plan), f"{name}: every finished tile sorted\n{plan}"
            if "COUNT(" in sql and '"curation_reviewitem"."candidate_class_id" =' in sql:  # a class's waiting images
                class_counts += 1
                assert re.search(r"LIMIT \d+", sql), f"{name}: every waiting image of the class counted (3,000 at 13.2M)\n{sql[:300]}"
            if '"priority" ASC' in sql and '"candidate_class_id" =' not in sql:
                assert "review_item_open_queue" in plan, f"{name}: {sql[:300]}\n{plan}"
                by_open_queue += 1
    assert by_open_queue >= 2, "the single screen's lease and a first page's class are read in the queue's order"
    assert class_counts >= 2, "a page's class and the next page's counted"


@postgres_only
def test_a_batch_reads_only_its_range_of_the_queue(settings, monkeypatch):
    """Each batch's statements reach the queue's rows through the batch's range of queue row ids: no
    plan reads the whole queue (at 1M images a batch's UPDATE joined its rows back to the queue by
    a scan of all 694,000: the batches together quadratic)."""
    import re

    settings.DEFAULT_MODEL = "m"
    monkeypatch.setattr(review_services, "QUEUE_BATCH", 10)
    monkeypatch.setattr(review_services, "QUEUE_BATCH_IN_TRANSACTION", 10)  # (a test holds a transaction)
    source = _pool(90)
    review_queue_sync(source=source, model_name="m")
    ReviewItem.objects.filter(source=source).update(priority=-99.5)
    plans = []
    real = review_services._queue_apply_batch

    class Recording:
        """The batch's cursor, its statements kept to be explained."""
        def __init__(self, cur):
            self.cur, self.made = cur, []

        def execute(self, sql, params=None):
            self.made.append((sql, params))
            return self.cur.execute(sql, params)

        def __getattr__(self, name):
            return getattr(self.cur, name)

    def explained(cur, source_id, lo, hi, S):
        rec = Recording(cur)
        out = real(rec, source_id, lo, hi, S)
        for sql, params in rec.made:
            plans.append(plan_without_seq_scans(sql, params))
        return out

    monkeypatch.setattr(review_services, "_queue_apply_batch", explained)
    with connection.cursor() as cur:
        cur.execute("ANALYZE curation_reviewitem")
    review_queue_sync(source=source, model_name="m")
    assert plans
    for plan in plans:
        lines = plan.splitlines()
        for k, line in enumerate(lines):
            if re.search(r"Scan (using \S+ )?on curation_reviewitem", line) and "Bitmap Heap" not in line:
                conds = " ".join(lines[k + 1:k + 3])
                assert "Seq Scan" not in line and "Cond:" in conds, f"a read of the whole queue:\n{plan}"


@postgres_only
def test_the_queue_table_has_no_index_another_index_leads_with():
    """Every index of the queue table is written on each update of a row (a priority is in an
    index, so no update is HOT), and a rebuild in which every priority moves updates 9.2M rows at
    13.2M images. An index whose columns (and operator classes) lead another's serves no lookup
    the longer one does not: the foreign keys' own indexes on source and class (beside
    (source, status) and (candidate_class, status)) were two of the fourteen; the class one,
    in an order unrelated to the queue's, was a third of the batches' reads from disk."""
    with connection.cursor() as cur:
        cur.execute(
            "SELECT i.relname, x.indisunique, x.indpred IS NOT NULL, x.indkey::text, x.indclass::text"
            " FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid JOIN pg_am am ON am.oid = i.relam"
            " WHERE x.indrelid = 'curation_reviewitem'::regclass AND am.amname = 'btree' AND x.indexprs IS NULL")
        rows = [(name, unique, partial, list(zip(keys.split(), classes.split()))) for name, unique, partial, keys, classes in cur.fetchall()]
    assert len(rows) >= 8, rows
    led = [(a, b) for a, ua, pa, ka in rows for b, _ub, pb, kb in rows
           if a != b and not ua and not pa and not pb and len(ka) <= len(kb) and kb[:len(ka)] == ka]
    assert not led, f"indexes another index leads with (each costs a write per row updated): {led}"


def test_the_services_script_sizes_postgresqls_buffer_pool_to_the_machine():
    """scripts/services.sh gives PostgreSQL a quarter of the memory (a container's limit where
    lower) for its buffer pool (at most 8 GB; OODC_PG_SHARED_BUFFERS overrides): with Debian's 128 MB the queue's indexes at 13.2M
    images did not fit, and each batch of a rebuild read and wrote about two index pages per row
    (105,000 pages per 50,000 rows, against 6,000 at 1M: measured with EXPLAIN (ANALYZE, BUFFERS))."""
    import os
    import shutil
    import subprocess
    from pathlib import Path

    if not Path("/usr/lib/postgresql").is_dir() or shutil.which("bash") is None:
        pytest.skip("PostgreSQL is not installed from Debian's packages here")
    script = Path(__file__).resolve().parents[1] / "scripts" / "services.sh"
    mem_mb = next(int(line.split()[1]) // 1024 for line in Path("/proc/meminfo").read_text().splitlines() if line.startswith("MemTotal:"))
    for limit in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):  # a container's limit
        text = Path(limit).read_text().strip() if Path(limit).is_file() else ""
        if text.isdigit():
            mem_mb = min(mem_mb, int(text) // 2**20)
    want = min(max(mem_mb // 4, 128), 8192)

    def printed(**env) -> str:
        out = subprocess.run(["bash", str(script), "--print-pg-config"], capture_output=True, text=True, timeout=60,
                             env={k: v for k, v in os.environ.items() if k != "OODC_PG_SHARED_BUFFERS"} | env)
        assert out.returncode == 0, out.stderr
        return out.stdout

    assert f"shared_buffers = '{want}MB'" in printed()
    assert "shared_buffers = '2GB'" in printed(OODC_PG_SHARED_BUFFERS="2GB")


@postgres_only
def test_inside_a_callers_transaction_the_rebuild_takes_fewer_larger_batches(settings, monkeypatch):
    """A rebuild run inside the caller's transaction (the admin's save of a setting) cannot commit
    its batches, and each batch leaves a version of every counter row it touched that the open
    transaction cannot prune: it takes batches of ``QUEUE_BATCH_IN_TRANSACTION`` rows, and in its
    own transactions of ``QUEUE_BATCH``. (At 13.2M images: 184 batches in one transaction made a
    settings change 800 s, 19 made it 317 s.)"""
    settings.DEFAULT_MODEL = "m"
    monkeypatch.setattr(review_services, "QUEUE_BATCH", 10)
    monkeypatch.setattr(review_services, "QUEUE_BATCH_IN_TRANSACTION", 40)
    source = _pool(90)
    review_queue_sync(source=source, model_name="m")
    rows = ReviewItem.objects.filter(source=source).count()
    ReviewItem.objects.filter(source=source).update(priority=-99.5)
    calls = []
    real = review_services._queue_apply_batch

    def spy(*args):
        calls.append(args[2:4])
        return real(*args)

    monkeypatch.setattr(review_services, "_queue_apply_batch", spy)
    assert connection.in_atomic_block  # the test's transaction: the caller's
    assert review_queue_sync(source=source, model_name="m").updated == rows
    assert len(calls) == math.ceil(rows / 40) < math.ceil(rows / 10)


@postgres_only
def test_the_rebuilds_lock_is_taken_before_it_reads_the_images(settings):
    """The wanted state is keyed by the queue rows the rebuild read: one that read the images
    while another rebuild was inserting would find the other's new rows missing from it and
    withdraw them. So the advisory lock comes before the image stream, not just before the
    batches, and is let go after the last statement on the queue."""
    settings.DEFAULT_MODEL = "m"
    source = _pool(30)
    review_queue_sync(source=source, model_name="m")
    with CaptureQueriesContext(connection) as ctx:
        review_queue_sync(source=source, model_name="m")
    sqls = [q["sql"] for q in ctx.captured_queries]
    lock = next(k for k, s in enumerate(sqls) if "pg_advisory" in s and "lock(" in s)
    stream = next(k for k, s in enumerate(sqls) if 'FROM "curation_image"' in s and '"curation_reviewitem"' in s)
    last_write = max(k for k, s in enumerate(sqls) if s.startswith(("WITH c AS", "WITH batch AS")))
    assert lock < stream < last_write, (lock, stream, last_write)
