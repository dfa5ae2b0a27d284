"""Paging the image browser over 1,000,000 images in PostgreSQL: keyset pages (what
/curate/images/ does) against OFFSET pages of the same query (the baseline), deep into the
result, for the browser's filters and sorts. Prints per-query p50/p95 in ms and the ratio.

    bash scripts/services.sh   # PostgreSQL
    .venv/bin/python benchmarks/bench_browse.py [--images 1000000] [--pages 40]

It uses its own database (oodc_bench_browse, dropped and re-created) and never touches others.
The rows are written with SQL (generate_series) as ingest and the image pipeline would leave
them; no file is read. Each page is the real selector (curation.selectors.image_browse), with
the count of matching images it shows.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

N_SOURCES, N_CLASSES = 10, 1000


def pct(values, q):
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q / 100 * (len(values) - 1))))]


def populate(n: int) -> None:
    from django.db import connection

    t0 = time.perf_counter()
    with connection.cursor() as cur:
        cur.execute("INSERT INTO curation_source (name, role, root, class_map, description, provenance, created_at) "
                    "SELECT 'src' || g, 'candidate', '/nonexistent/src' || g, '{}', '', '{}', now() FROM generate_series(0, %s) g",
                    [N_SOURCES - 1])
        cur.execute("INSERT INTO curation_candidateclass (source_id, folder, wnid, synset_name, lemmas, gloss, mapping, mapping_note, description) "
                    "SELECT s.id, 'class' || g, 'n' || lpad((1000000 + g)::text, 8, '0'), 'class_' || g || '.n.01', '[]', '', 'wnid_folder', '', '' "
                    "FROM generate_series(0, %s) g JOIN curation_source s ON s.name = 'src' || (g %% %s)", [N_CLASSES - 1, N_SOURCES])
        cur.execute("""
            INSERT INTO curation_image (source_id, candidate_class_id, relative_path, sha256, width, height, orientation, format, mode,
                                        bytes, mtime_ns, status, error_code, error, excluded_reason, created_at, updated_at)
            SELECT c.source_id, c.id, c.folder || '/img_' || g || '.jpg', md5(g::text) || md5((g + 1)::text), 320, 240, 1, 'JPEG', 'RGB',
                   30000, 0, CASE WHEN g %% 500 = 0 THEN 'broken' ELSE 'ok' END, '', '', '', now(), now()
            FROM generate_series(0, %s) g JOIN curation_candidateclass c ON c.folder = 'class' || (g %% %s)
        """, [n - 1, N_CLASSES])
        # predictions: top-1 among 1000 ImageNet-like wnids, similarities and softmax spread over their ranges; groups of 2
        cur.execute("""
            INSERT INTO curation_imageembedding (image_id, model_name, ok, error, row, topk, top1_wnid, top1_prob, max_softmax, max_logit,
                                                 energy, created_at, search_group, search_drop, dup_group, drop_reason, nearest_id_similarity)
            SELECT i.id, 'efficientnet_lite0', true, '', -1, '[]', 'n' || lpad((2000000 + (i.id * 7919) %% 1000)::text, 8, '0'),
                   ((i.id * 104729) %% 1000) / 1000.0, ((i.id * 104729) %% 1000) / 1000.0, 10.0, -10.0, now(),
                   CASE WHEN i.id %% 50 = 1 THEN i.id - 1 ELSE i.id END, CASE WHEN i.id %% 50 = 1 THEN 'near_duplicate_of:' || (i.id - 1) ELSE '' END,
                   CASE WHEN i.id %% 50 = 1 THEN i.id - 1 ELSE i.id END, CASE WHEN i.id %% 50 = 1 THEN 'near_duplicate_of:' || (i.id - 1) ELSE '' END,
                   ((i.id * 15485863) %% 100000) / 100000.0
            FROM curation_image i
        """, [])
        cur.execute("""
            INSERT INTO curation_reviewitem (image_id, source_id, candidate_class_id, priority, required, extra_reviews, done, leased, status,
                                             final_decision, final_wnids, final_note, is_gold, created_at)
            SELECT i.id, i.source_id, i.candidate_class_id, 0, 1, 0, CASE WHEN i.id %% 3 = 0 THEN 1 ELSE 0 END, 0,
                   CASE WHEN i.id %% 3 = 0 THEN 'complete' ELSE 'open' END,
                   CASE WHEN i.id %% 3 = 0 THEN (CASE WHEN i.id %% 30 = 0 THEN 'id' ELSE 'ood' END) ELSE '' END, '[]', '', false, now()
            FROM curation_image i WHERE i.status = 'ok'
        """, [])
        cur.execute("ANALYZE")
    print(f"wrote {n:,} images with predictions and review items in {time.perf_counter() - t0:.1f} s")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--images", type=int, default=1_000_000)
    ap.add_argument("--pages", type=int, default=40, help="pages walked per query (each page follows the last)")
    ap.add_argument("--reuse", action="store_true", help="keep the database a previous run wrote (if it has --images images)")
    args = ap.parse_args()

    from bench_review_load import recreate_database

    admin = os.environ.get("DATABASE_URL", "postgres://oodc:oodc@127.0.0.1:5432/oodc")
    if not admin.startswith("postgres"):
        print("bench_browse.py measures PostgreSQL: set DATABASE_URL to a PostgreSQL server (bash scripts/services.sh starts one)", file=sys.stderr)
        return 1
    if args.reuse:
        from urllib.parse import urlparse

        os.environ["DATABASE_URL"] = urlparse(admin)._replace(path="/oodc_bench_browse").geturl()
    else:
        os.environ["DATABASE_URL"] = recreate_database(admin, "oodc_bench_browse")
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "curation.settings")
    os.environ.setdefault("NLTK_DATA", str(REPO / "var" / "nltk_data"))
    os.environ["OODC_MODEL"] = "efficientnet_lite0"  # the model the rows below are written for (the app reads its rows)
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connection, reset_queries
    from django.db.models import F, Q

    from curation import selectors

    call_command("migrate", verbosity=0)
    from curation.models import Image

    if args.reuse:
        held = Image.objects.count()
        if held != args.images:
            print(f"--reuse: oodc_bench_browse holds {held:,} images, not {args.images:,}; run without --reuse to write them", file=sys.stderr)
            return 1
    else:
        populate(args.images)
    with connection.cursor() as cur:
        cur.execute("SELECT id FROM curation_candidateclass ORDER BY id LIMIT 1 OFFSET 500")
        cls = cur.fetchone()[0]
    page_size = 60
    queries = {
        "everything, oldest first": {},
        "one source": {"source": "src3"},
        "one class": {"cls": str(cls)},
        "final label ood": {"label": "ood"},
        "predicted top-1": {"top1": "n02000007"},
        "most similar to ID first": {"sort": "-similarity"},
        "lowest max softmax first": {"sort": "msp"},
        "source + similarity >= 0.9, most similar first": {"source": "src3", "sim_min": "0.9", "sort": "-similarity"},
        "duplicates (dropped)": {"dropped": "yes"},
    }
    print(f"{args.images:,} images, {page_size} per page, {args.pages} pages walked per query (keyset: each page follows the "
          f"last; OFFSET: the same pages by offset)")
    print(f"{'query':50s} {'keyset p50':>10s} {'p95':>8s} {'OFFSET p50':>11s} {'p95':>8s} {'deepest page: OFFSET/keyset':>28s}")
    all_keyset = []
    for label, params in queries.items():
        f = selectors.browse_filters_from(params)
        keyset, cursor = [], ""
        for _ in range(args.pages):
            t = time.perf_counter()
            page = selectors.image_browse(filters=f, after=cursor, page_size=page_size)
            keyset.append(1000 * (time.perf_counter() - t))
            cursor = page.next_cursor or ""
            if not cursor:
                break
        all_keyset += keyset
        # the baseline: the same query by OFFSET (the Django paginator's way), at the same depths
        field_name, desc = selectors.BROWSE_SORTS[f.sort]
        offset_times = []
        if field_name:
            qs = selectors.browse_queryset(f, Q(**{f"emb__{field_name}__isnull": False}))
            order = [F(f"emb__{field_name}").desc(), F("id").desc()] if desc else [F(f"emb__{field_name}").asc(), F("id").asc()]
        else:
            qs = selectors.browse_queryset(f)
            order = [F("id").asc()]
        for k in range(len(keyset)):
            t = time.perf_counter()
            list(qs.order_by(*order).values("id", "relative_path")[k * page_size:(k + 1) * page_size])
            qs.order_by().count()  # the page count a paginator shows
            offset_times.append(1000 * (time.perf_counter() - t))
        reset_queries()
        ratio = (offset_times[-1] / keyset[-1]) if offset_times and keyset else float("nan")
        print(f"{label:50s} {statistics.median(keyset):10.1f} {pct(keyset, 95):8.1f} {statistics.median(offset_times):11.1f} "
              f"{pct(offset_times, 95):8.1f} {ratio:27.1f}x")
    print(f"all keyset pages: n={len(all_keyset)} p50 {statistics.median(all_keyset):.1f} ms, p95 {pct(all_keyset, 95):.1f} ms, "
          f"max {max(all_keyset):.1f} ms (goal: p95 <= 300 ms)")
    # a numbered link or the jump box (page=N, no cursor): the page's start is read by OFFSET once
    # (sort value and id only), then the page is shown by cursor; against page 1 of the same query
    depths = (2, 10, 100, 1000, 5000)
    print(f"jump to page N (ms, median of 3; x = against page 1 of the same query, same run): {', '.join(map(str, depths))}")
    for label in ("everything, oldest first", "most similar to ID first", "one source"):
        f = selectors.browse_filters_from(queries[label])

        def timed(n: int) -> float:
            runs = []
            for _ in range(3):
                t = time.perf_counter()
                selectors.image_browse(filters=f, page=n, page_size=page_size)
                runs.append(1000 * (time.perf_counter() - t))
            return statistics.median(runs)

        first = timed(1)
        cells = [timed(n) for n in depths]
        print(f"{label:50s} page 1 {first:7.1f}  " + "  ".join(f"p{n} {ms:7.1f} ({ms / first:4.1f}x)" for n, ms in zip(depths, cells)))
        # from the deepest page reached, "previous" reads backwards by cursor (as "next" reads forwards)
        deep = selectors.image_browse(filters=f, page=max(depths), page_size=page_size)
        while not deep.prev_cursor and deep.number > 1:  # past the end: the last page that has rows
            deep = selectors.image_browse(filters=f, page=deep.number // 2, page_size=page_size)
        runs = []
        for _ in range(3):
            t = time.perf_counter()
            selectors.image_browse(filters=f, before=deep.prev_cursor, page=deep.number - 1, page_size=page_size)
            runs.append(1000 * (time.perf_counter() - t))
        print(f"{'':50s} previous from page {deep.number}: {statistics.median(runs):.1f} ms ({statistics.median(runs) / first:.1f}x page 1)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
