"""Every database-bound page and stage over a pool that benchmarks/bench_scale.py wrote (issue 45):
time per page (p50/p95 over --reps requests through the whole Django stack: test Client, the
right role logged in, middleware, templates), the queries each made, each stage's database work
(in a child process, in a transaction rolled back after, so every stage sees the same rows) with
its peak resident memory, and the database's size.

    .venv/bin/python benchmarks/bench_scale.py --images 1000000 --database oodc_scale_1m
    .venv/bin/python benchmarks/bench_scale_pages.py --database oodc_scale_1m [--reps 5] [--only PATTERN] [--skip-stages]
    .venv/bin/python benchmarks/bench_scale_pages.py --report var/bench_scale/*.json   # the table for all sizes, and the plot

Results go to var/bench_scale/<images>.json (one file per pool size); --report prints the table
with the issue's goals and writes docs/img/scale_pages.png (time against pool size).
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time
import traceback
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

PAGE_GOAL_MS, API_GOAL_MS, SLOW_MS = 300.0, 150.0, 10_000.0
QUEUE_TABLES = ("curation_reviewitem", "curation_queueclasscount")
STAGE_LIMIT_S = int(os.environ.get("BENCH_SCALE_STAGE_LIMIT", "300"))


def pct(values, q):
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q / 100 * (len(values) - 1))))]


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class Pages:
    def __init__(self, reps: int, only: str, warm: bool = True):
        self.reps, self.only, self.warm = reps, only, warm
        self.rows: list[dict] = []

    def time(self, name: str, call, *, api: bool = False, reps: int | None = None) -> None:
        """``call`` makes one request and returns the response; repeated ``reps`` times (once when
        a request takes over 10 s)."""
        from django.db import connection
        from django.test.utils import CaptureQueriesContext

        if self.only and not any(part and part in name for part in self.only.split(",")):
            return
        times, queries, status = [], 0, None
        if self.warm:  # one request first, not timed: the process's first use of a template or a code path is not the page's cost
            try:
                r = call()
                if getattr(r, "streaming", False):
                    b"".join(r.streaming_content)
            except Exception:  # noqa: BLE001 - the timed requests below record the error
                pass
        for k in range(reps or self.reps):
            with CaptureQueriesContext(connection) as ctx:
                t = time.perf_counter()
                try:
                    r = call()
                    if getattr(r, "streaming", False):
                        b"".join(r.streaming_content)
                    status = r.status_code
                except Exception as exc:  # noqa: BLE001 - a page that fails is a row of the table, with its error
                    status = f"{type(exc).__name__}: {str(exc).splitlines()[0][:120] if str(exc) else ''}"
                    traceback.print_exc(limit=3)
                times.append(1000 * (time.perf_counter() - t))
            queries = max(queries, len(ctx.captured_queries))
            if times[-1] > SLOW_MS:
                break
        row = {"kind": "api" if api else "page", "name": name, "p50_ms": pct(times, 50), "p95_ms": pct(times, 95), "n": len(times),
               "queries": queries, "status": status, "rss_mb": peak_rss_mb()}
        self.rows.append(row)
        print(f"  {row['kind']:5s} {name:52s} p50 {row['p50_ms']:9.1f} ms  p95 {row['p95_ms']:9.1f} ms  n={row['n']}  "
              f"{queries:3d} queries  {status}", flush=True)


def vacuum(*tables: str) -> None:
    """After a rolled-back stage that wrote these tables: their dead row versions and index
    entries removed (not timed), so the next stage does not read what this one left."""
    from django.db import connection

    t = time.perf_counter()
    with connection.cursor() as cur:
        for table in tables:
            cur.execute(f"VACUUM (ANALYZE) {table}")
    print(f"        (vacuumed {', '.join(tables)}: {time.perf_counter() - t:.1f} s, not timed)", flush=True)


def run_stage(name: str, fn, only: str, *, timed: str = "call", after: tuple[str, ...] = ()) -> dict | None:
    """``fn`` in a forked child, inside a transaction rolled back after: its time, its peak RSS.
    ``only``: a comma-separated list of parts of stage names. ``timed="note"``: the stage's set-up
    is not part of the figure: ``fn`` returns a note ending in "; <seconds> s" of the timed part."""
    from django.db import connections

    if only and not any(part and part in name for part in only.split(",")):
        return None
    connections.close_all()
    rfd, wfd = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child
        os.close(rfd)
        out: dict = {}
        try:
            from django.db import transaction

            signal_alarm(STAGE_LIMIT_S)
            with transaction.atomic():
                t = time.perf_counter()
                note = fn()
                seconds = time.perf_counter() - t
                if timed == "note":
                    seconds = float(str(note).rsplit("; ", 1)[1].rstrip(" s"))
                out = {"seconds": seconds, "note": str(note or "")[:300]}
                transaction.set_rollback(True)
        except BaseException as exc:  # noqa: BLE001 - reported as the stage's result
            out = {"seconds": None, "note": f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"}
        out["rss_mb"] = peak_rss_mb()
        os.write(wfd, json.dumps(out).encode())
        os.close(wfd)
        os._exit(0)
    os.close(wfd)
    data = b""
    while chunk := os.read(rfd, 65536):
        data += chunk
    os.close(rfd)
    _pid, status = os.waitpid(pid, 0)
    try:
        out = json.loads(data.decode())
    except ValueError:
        out = {"seconds": None, "note": f"the child ended with status {status} (killed: out of memory or over {STAGE_LIMIT_S} s?)", "rss_mb": None}
    row = {"kind": "stage", "name": name, **out}
    if after:
        vacuum(*after)
    secs = f"{out['seconds']:9.2f} s" if out.get("seconds") is not None else "   failed"
    print(f"  stage {name:52s} {secs}  peak RSS {out.get('rss_mb') or 0:7.0f} MB  {out.get('note', '')}", flush=True)
    return row


def signal_alarm(seconds: int) -> None:
    import signal

    def stop(_signum, _frame):
        raise TimeoutError(f"over {seconds} s")

    signal.signal(signal.SIGALRM, stop)
    signal.alarm(seconds)


def measure(args) -> dict:
    from bench_scale import MODEL, database_url, django_setup

    url = database_url(args.database)
    os.environ["OODC_DATA_DIR"] = os.environ.get("OODC_DATA_DIR", "/tmp/oodc-bench-scale")
    django_setup(url)
    from django.conf import settings
    from django.contrib.auth.models import User
    from django.db import connection
    from django.test import Client

    from curation import selectors
    from curation.models import ClassFilterRun, Export, Image, ReviewItem, Source
    from curation.services.review import review_cache_clear

    settings.ALLOWED_HOSTS = ["*"]
    settings.DEBUG = False
    with connection.cursor() as cur:
        cur.execute("SELECT count(*) FROM curation_image WHERE source_id = (SELECT id FROM curation_source WHERE name = 'imagenet21k-winter21')")
        n = cur.fetchone()[0]
        cur.execute("SELECT pg_database_size(current_database())")
        db_bytes = cur.fetchone()[0]
    print(f"{args.database}: {n:,} candidate images; database {db_bytes / 2**30:.2f} GiB ({db_bytes / 2**30 / (n / 1e6):.2f} GiB per million)",
          flush=True)
    pool = Source.objects.get(name="imagenet21k-winter21")
    clients = {}
    for name in ("annotator00", "annotator01", "curator", "admin"):
        c = Client()
        c.force_login(User.objects.get(username=name))
        clients[name] = c
    ann, ann2, cur_c, adm = clients["annotator00"], clients["annotator01"], clients["curator"], clients["admin"]
    P = Pages(args.reps, "\x00" if args.skip_pages else args.only, warm=not args.cold)
    # -- annotators ----------------------------------------------------------------------------------
    print("pages and API calls:", flush=True)
    review_cache_clear()
    P.time("review queue (/review/)", lambda: ann.get("/review/"))
    state: dict = {}

    def next_single():
        r = ann.get("/api/review/next")
        state["items"] = r.json().get("items") or []
        return r

    def submit_single():
        items = state.get("items") or []
        if not items:
            return next_single()
        a = items[0]["assignment"]
        r = ann.post("/api/review/submit", json.dumps({"assignment": a, "decision": "ood", "have": [x["assignment"] for x in items[1:]]}),
                     content_type="application/json")
        known = {x["assignment"]: x for x in items}
        state["items"] = [known.get(x["assignment"], x) if x.get("known") else x for x in r.json().get("items", [])]
        return r

    P.time("review next (GET /api/review/next)", next_single, api=True)
    P.time("review submit (POST /api/review/submit)", submit_single, api=True, reps=max(args.reps, 10))
    grid: dict = {}

    def grid_next():
        r = ann2.get("/api/review/grid/next?size=48")
        grid["page"] = r.json()
        return r

    def grid_submit():
        page = grid.get("page") or {}
        tiles = page.get("tiles") or []
        marks = [{"assignment": t["assignment"], "decision": "ood"} for t in tiles]
        r = ann2.post("/api/review/grid/submit", json.dumps({"marks": marks, "size": 48, "seconds": 30}), content_type="application/json")
        grid["page"] = r.json()
        return r

    P.time("grid next (GET /api/review/grid/next, 48 tiles)", grid_next, api=True)
    P.time("grid submit (POST /api/review/grid/submit, 48)", grid_submit, api=True)
    # -- curators: the image browser ---------------------------------------------------------------------
    some_class = Image.objects.filter(source=pool, status="ok").order_by("id")[n // 2:n // 2 + 1].values_list("candidate_class__wnid", flat=True)[0]
    first = selectors.image_browse(filters=selectors.browse_filters_from({}), page_size=settings.BROWSE_PAGE_SIZE)
    P.time("browser: first page", lambda: cur_c.get("/curate/images/"))
    P.time("browser: next page (cursor)", lambda: cur_c.get(f"/curate/images/?after={first.next_cursor}&page=2"))
    P.time("browser: jump to page 1000", lambda: cur_c.get("/curate/images/?page=1000"))
    P.time("browser: jump to page 10000", lambda: cur_c.get("/curate/images/?page=10000"))
    P.time("browser: class by name", lambda: cur_c.get(f"/curate/images/?cls_name=class+{some_class}"))
    P.time("browser: top-1 (an ID wnid)", lambda: cur_c.get("/curate/images/?top1=n02085620"))
    P.time("browser: annotator", lambda: cur_c.get("/curate/images/?annotator=annotator03"))
    P.time("browser: with a note", lambda: cur_c.get("/curate/images/?note=yes"))
    P.time("browser: decided by adjudication", lambda: cur_c.get("/curate/images/?decided=adjudication"))
    P.time("browser: final label id", lambda: cur_c.get("/curate/images/?label=id"))
    P.time("browser: most similar to ID first", lambda: cur_c.get("/curate/images/?sort=-similarity"))
    img = ReviewItem.objects.filter(source=pool, status="complete").order_by("id").values_list("image_id", flat=True)[100]
    P.time("image page", lambda: cur_c.get(f"/curate/images/{img}/"))
    P.time("duplicate groups (list)", lambda: cur_c.get("/curate/duplicates/"))
    grp = Image.objects.filter(embeddings__drop_reason__startswith="near_duplicate_of:").order_by("id").values_list("embeddings__dup_group", flat=True)[5]
    P.time("duplicate group page", lambda: cur_c.get(f"/curate/duplicates/{grp}/"))
    P.time("flagged classes (/curate/classes/)", lambda: cur_c.get("/curate/classes/"))
    run = ClassFilterRun.objects.order_by("-pk").first()
    P.time("class filter report", lambda: cur_c.get(f"/class-filter/{run.pk}/"))
    P.time("review progress + annotator quality (/curate/reviews/)", lambda: cur_c.get("/curate/reviews/"))
    P.time("adjudication (/curate/adjudicate/)", lambda: cur_c.get("/curate/adjudicate/"))
    P.time("contamination report", lambda: cur_c.get(f"/curate/contamination/{pool.pk}/"))
    P.time("certification page", lambda: cur_c.get(f"/curate/certify/{pool.pk}/"))
    P.time("exports page", lambda: cur_c.get("/exports/"))
    v2 = Export.objects.filter(version=2).first()
    P.time("export diff (v2 against v1)", lambda: cur_c.get(f"/exports/{v2.pk}/diff/"))
    P.time("evaluations page", lambda: cur_c.get("/evaluations/"))
    P.time("home", lambda: cur_c.get("/"))
    # -- the admin's change lists ------------------------------------------------------------------------
    for model in ("image", "imageembedding", "reviewitem", "review", "assignment", "job", "exportmember", "certificationunit", "auditlog"):
        P.time(f"admin: {model} list", lambda model=model: adm.get(f"/admin/curation/{model}/"))
    P.time("admin: image list, page 1000", lambda: adm.get("/admin/curation/image/?p=1000"))
    P.time("admin: image list, search", lambda: adm.get("/admin/curation/image/?q=n02085620"))
    P.time("admin: review list, filtered by decision", lambda: adm.get("/admin/curation/review/?decision__exact=id"))
    rows = list(P.rows)
    if not args.skip_stages:
        rows += stages(pool, args.stages or args.only)
    return {"images": n, "database": args.database, "db_bytes": db_bytes, "gib_per_million": db_bytes / 2**30 / (n / 1e6),
            "rows": rows, "model": MODEL, "cpus": os.cpu_count(), "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}


def stages(pool, only: str) -> list[dict]:
    from django.db import connection

    from curation.models import CertificationPlan, ClassFilterRun, Export, Job

    print("stages (database work, each rolled back):", flush=True)
    # the stale job: an ingest of the ID source, whose resume (run here: no workers) fails at once on its missing root
    Job.objects.filter(status="running", worker="gone:1").update(kind="ingest", config={})
    out = []

    def ingest_bookkeeping():
        from curation.services.ingest import ingest_finalize

        job = Job.objects.create(kind="ingest", source=pool, status="running", total=1)
        with connection.cursor() as cur:  # the chunks a scan of every file left (not timed apart: part of the set-up)
            cur.execute("INSERT INTO curation_jobchunk (job_id, index, payload, done, stats, attempts, lease_owner) "
                        "SELECT %s, id / 1024, json_agg(json_build_array(relative_path)), true, '{\"unchanged\": 1}', 1, '' "
                        "FROM curation_image WHERE source_id = %s GROUP BY id / 1024", [job.pk, pool.pk])
        t = time.perf_counter()
        ingest_finalize(job_id=job.pk)
        return f"finalize {time.perf_counter() - t:.1f} s of it"

    out.append(run_stage("ingest bookkeeping (chunks + finalize)", ingest_bookkeeping, only, after=("curation_image", "curation_jobchunk")))

    def class_filter_write():
        from curation.models import ClassDecision
        from curation.services.class_filter import class_filter_candidates

        cands = class_filter_candidates(spec=f"source:{pool.name}")
        run = ClassFilterRun.objects.order_by("-pk").first()
        job = Job.objects.create(kind="class_filter", source=pool, status="done")
        new = ClassFilterRun.objects.create(job=job, source=pool, candidates_spec=run.candidates_spec, id_spec=run.id_spec, id_wnids=run.id_wnids,
                                            policy_name=run.policy_name, policy_origin=run.policy_origin, policy=run.policy,
                                            policy_digest=run.policy_digest)
        rows = list(run.decisions.all())
        for d in rows:
            d.pk, d.run = None, new
        ClassDecision.objects.bulk_create(rows, batch_size=2000)
        return f"{len(cands.candidates):,} candidates counted, {len(rows):,} decisions written"

    out.append(run_stage("class filter: candidates and decisions written", class_filter_write, only))

    def queue_rebuild():
        from curation.services.review import review_queue_sync

        return review_queue_sync(source=pool).summary()[:200]

    out.append(run_stage("review queue rebuild", queue_rebuild, only, after=QUEUE_TABLES))

    def queue_build():
        # the first build: every queue row of the pool removed (inside the rolled-back
        # transaction; the delete is not timed), then the queue built from the filter's decisions
        from curation.services.review import review_queue_sync

        with connection.cursor() as cur:
            cur.execute("SET CONSTRAINTS ALL DEFERRED")  # reviews and leases point at the removed rows until the rollback
            cur.execute("DELETE FROM curation_reviewitem WHERE source_id = %s", [pool.pk])
        t = time.perf_counter()
        note = review_queue_sync(source=pool).summary()[:160]
        return f"{note}; {time.perf_counter() - t:.1f} s"

    out.append(run_stage("review queue build (first, every item new)", queue_build, only, timed="note", after=QUEUE_TABLES))

    def settings_change():
        from curation.services.review import review_settings_impact, review_settings_save

        impact = review_settings_impact(source=pool, reviews_required=3)
        review_settings_save(source=pool, reviews_required=3)
        return str(impact)[:200]

    out.append(run_stage("settings change: 2 -> 3 reviews (impact + save)", settings_change, only, after=QUEUE_TABLES))

    def cert_bound():
        from curation.services.certification import certification_standing

        plan = CertificationPlan.objects.filter(source=pool).order_by("-pk").first()
        sd = certification_standing(plan=plan)
        return f"bound {getattr(sd, 'bound_share', '?')}"

    out.append(run_stage("certification bound (standing)", cert_bound, only))

    def cert_plan():
        from curation.services.certification import certification_plan_create

        CertificationPlan.objects.filter(source=pool).update(status="closed")
        plan = certification_plan_create(source=pool, seed=1)
        return f"{sum(s['size'] for s in plan.strata):,} units"

    out.append(run_stage("certification plan (create)", cert_plan, only, after=("curation_certificationunit",)))

    def export_selection():
        from curation.services.exports import _decisions_rows, export_select

        sel = export_select(config={"sources": [pool.name], "model": "efficientnet_lite0", "min_per_class": 1})
        t = time.perf_counter()
        n_rows = sum(1 for _ in _decisions_rows(sel, {}, "efficientnet_lite0"))
        return f"{len(sel.items):,} selected of {len(sel.rows):,}; manifest rows {n_rows:,} in {time.perf_counter() - t:.1f} s"

    out.append(run_stage("export selection + decisions rows (no files)", export_selection, only))

    def datasheet():
        from curation.services.export_datasheet import _review
        from curation.services.exports import previous_version

        ex = Export.objects.filter(version=2).first()
        prev = previous_version(ex)
        r = _review([pool.name], {pool.name: {"reviews_required": 2}})
        return f"kappa {r['fleiss_kappa']:.3f} over {r['multi_reviewed']:,} items; previous {getattr(prev, 'export', prev)}"

    out.append(run_stage("datasheet figures (Fleiss' kappa, previous version)", datasheet, only))

    def sweep():
        from curation.jobs.stale import sweep_stale_jobs

        return f"{len(sweep_stale_jobs())} swept"

    out.append(run_stage("stale-job sweep", sweep, only))
    out.append(backup_restore(only))
    return [r for r in out if r]


def backup_restore(only: str) -> dict | None:
    """docs/backup.md's commands on the pool: ``pg_dump --format=custom`` to a file, then
    ``pg_restore`` into a new database (dropped after), each timed; the clients' peak RSS. Set
    BENCH_SCALE_BACKUP_DIR for where the dump goes (it needs about a fifth of the database's size)."""
    import subprocess
    import tempfile

    from django.db import connection

    name = "backup and restore (pg_dump -Fc, pg_restore -j 2)"
    if only and not any(part and part in name for part in only.split(",")):
        return None
    url = connection.settings_dict
    base = f"postgresql://{url['USER']}:{url['PASSWORD']}@{url['HOST']}:{url['PORT']}"
    target = f"{url['NAME']}_restored"
    folder = Path(os.environ.get("BENCH_SCALE_BACKUP_DIR") or tempfile.gettempdir())
    dump = folder / f"{url['NAME']}.dump"
    row = {"kind": "stage", "name": name}
    peak = 0.0

    def client(cmd: list[str]) -> None:  # one client program; its own peak RSS (os.wait4), not earlier children's
        nonlocal peak
        proc = subprocess.Popen(cmd)
        _pid, status, usage = os.wait4(proc.pid, 0)
        peak = max(peak, usage.ru_maxrss / 1024)
        if os.waitstatus_to_exitcode(status) != 0:
            raise subprocess.CalledProcessError(os.waitstatus_to_exitcode(status), cmd)

    try:
        t = time.perf_counter()
        client(["pg_dump", "--format=custom", "--no-owner", f"--file={dump}", f"{base}/{url['NAME']}"])
        t_dump = time.perf_counter() - t
        size = dump.stat().st_size
        subprocess.run(["psql", "-q", f"{base}/postgres", "-c", f'DROP DATABASE IF EXISTS "{target}"', "-c", f'CREATE DATABASE "{target}"'],
                       check=True)
        t = time.perf_counter()
        client(["pg_restore", "--no-owner", "--jobs=2", f"--dbname={base}/{target}", str(dump)])
        t_restore = time.perf_counter() - t
        row.update(seconds=t_dump + t_restore, rss_mb=peak,
                   note=f"dump {t_dump:.0f} s ({size / 2**30:.2f} GiB), restore {t_restore:.0f} s")
    except (subprocess.CalledProcessError, OSError) as exc:
        row.update(seconds=None, rss_mb=None, note=f"{type(exc).__name__}: {exc}"[:200])
    finally:
        dump.unlink(missing_ok=True)
        subprocess.run(["psql", "-q", f"{base}/postgres", "-c", f'DROP DATABASE IF EXISTS "{target}"'], check=False)
    print(f"  stage {name:52s} {row.get('seconds') or 0:9.2f} s  {row['note']}", flush=True)
    return row


def report(paths: list[str], plot: str) -> None:
    runs = sorted((json.loads(Path(p).read_text()) for p in paths), key=lambda r: r["images"])
    names: list[tuple[str, str]] = []
    for r in runs:
        for row in r["rows"]:
            if (row["kind"], row["name"]) not in names:
                names.append((row["kind"], row["name"]))
    sizes = [r["images"] for r in runs]
    head = " | ".join(f"{s / 1e6:g}M" for s in sizes)
    print(f"| kind | step | {head} | goal | met |")
    print("|---|---|" + "---|" * len(sizes) + "---|---|")
    series = {}
    for kind, name in names:
        cells, vals = [], []
        for r in runs:
            row = next((x for x in r["rows"] if x["kind"] == kind and x["name"] == name), None)
            if row is None:
                cells.append("-")
                vals.append(None)
            elif kind == "stage":
                v = row.get("seconds")
                vals.append(v)
                cells.append(f"{v:.1f} s, {row['rss_mb']:.0f} MB" if v is not None
                             else f"failed: {row.get('note', '')[:40]}, {row.get('rss_mb') or 0:.0f} MB")
            else:
                vals.append(row["p95_ms"])
                cells.append(f"{row['p95_ms']:.0f} ({row['queries']} q)" + ("" if row["status"] == 200 else f" [{row['status']}]"))
        series[(kind, name)] = vals
        if kind == "stage":
            goal = "<= 1.3 x linear, < 4 GB"
            v0, v1 = vals[0], vals[-1]
            rss = max((x.get("rss_mb") or 0) for r in runs for x in r["rows"] if x["kind"] == kind and x["name"] == name)
            ran_last = any(x["kind"] == kind and x["name"] == name for x in runs[-1]["rows"])
            if rss > 4096 or (ran_last and v1 is None):
                met = "no"
            elif not ran_last:
                met = "not run at the largest size"
            elif len(sizes) < 2 or v0 is None:
                met = "-"
            else:
                met = "yes" if v1 <= 1.3 * (sizes[-1] / sizes[0]) * max(v0, 0.05) else "no"
        else:
            g = API_GOAL_MS if kind == "api" else PAGE_GOAL_MS
            goal = f"p95 <= {g:.0f} ms"
            met = "yes" if vals[-1] is not None and vals[-1] <= g else "no"
        print(f"| {kind} | {name} | " + " | ".join(cells) + f" | {goal} | {met} |")
    print("\n" + ", ".join(f"{r['images'] / 1e6:g}M: {r['db_bytes'] / 2**30:.1f} GiB ({r['gib_per_million']:.2f} GiB per million images)"
                           for r in runs))
    if plot:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, axes = plt.subplots(1, 2, figsize=(14, 6))
        for (kind, name), vals in series.items():
            xs = [s / 1e6 for s, v in zip(sizes, vals) if v is not None]
            ys = [(v / 1000 if kind != "stage" else v) for v in vals if v is not None]
            if len(xs) >= 1:
                ax = axes[1] if kind == "stage" else axes[0]
                ax.plot(xs, ys, marker="o", linewidth=1, label=name[:40])
        axes[0].axhline(PAGE_GOAL_MS / 1000, color="red", linestyle="--", linewidth=1)
        axes[0].set(xscale="log", yscale="log", xlabel="pool size (million images)", ylabel="p95 seconds", title="pages and API calls")
        axes[1].set(xscale="log", yscale="log", xlabel="pool size (million images)", ylabel="seconds", title="stages' database work")
        for ax in axes:
            ax.legend(fontsize=5, ncol=2)
            ax.grid(True, which="both", alpha=0.3)
        fig.tight_layout()
        fig.savefig(plot, dpi=110)
        print(f"wrote {plot}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--database", default="oodc_scale")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--only", default="", help="only the rows whose name holds one of these (comma-separated)")
    ap.add_argument("--cold", action="store_true", help="no untimed warm-up request before each page's timed ones")
    ap.add_argument("--skip-stages", action="store_true")
    ap.add_argument("--skip-pages", action="store_true")
    ap.add_argument("--stages", default="", help="only these stages (comma-separated parts of their names)")
    ap.add_argument("--out", default="", help="results file (default var/bench_scale/<images>.json)")
    ap.add_argument("--report", nargs="*", help="print the table for these results files and write the plot")
    ap.add_argument("--plot", default=str(REPO / "docs" / "img" / "scale_pages.png"))
    args = ap.parse_args()
    if args.report is not None:
        report(args.report, args.plot)
        return 0
    result = measure(args)
    if args.stages or args.skip_pages:
        args.only = args.only or "-"  # keep the rows of the earlier run that this one did not measure
    out = Path(args.out or REPO / "var" / "bench_scale" / f"{result['images']}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    if args.only and out.exists():  # a partial run updates the rows it measured
        old = json.loads(out.read_text())
        keep = [r for r in old["rows"] if (r["kind"], r["name"]) not in {(x["kind"], x["name"]) for x in result["rows"]}]
        result["rows"] = keep + result["rows"]
    out.write_text(json.dumps(result, indent=1))
    print(f"wrote {out}; peak RSS of this process {peak_rss_mb():.0f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
