"""Grid review and find similar at scale (issue 30). Prints figures for docs/benchmarks.md.

Part 1, grid pages over 1,000,000 queued images in PostgreSQL (its own database, oodc_bench_grid,
dropped and re-created; rows written as ingest and the image pipeline leave them, then the real
queue build): through the whole Django stack in-process (test Client: middleware, session, JSON),
an annotator's first grid page of 96 tiles (GET /api/review/grid/next, leasing 96 images), then
page after page (POST /api/review/grid/submit: 96 decisions recorded and the next 96 leased), and
the 96 thumbnails of a page served from the thumbnail cache (made once per file content) in one
request (/api/images/thumbs?ids=..., what the screen asks), beside one request per tile
(/images/<id>/thumb, the screen's fallback) as its baseline. Baseline in the same run: the same 96 decisions on the single-image screen's API
(one POST /api/review/submit each, which also leases the next image).

Part 2, find similar over 1,000,000 stored feature vectors (synthetic: 1,000 Gaussian clusters
in 1,280 dimensions, the pipeline model's width; no real feature set of that size exists here):
the index pipelines/features/similar.py builds (faiss inverted file above 50,000 vectors), one query at a
time on 2 threads, its latency and recall@20 against exact search (brute force, the baseline).

    bash scripts/services.sh
    .venv/bin/python benchmarks/bench_grid.py [--images 1000000] [--pages 20] [--vectors 1000000] [--skip-db] [--skip-similar]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))


def pct(values, q):
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q / 100 * (len(values) - 1))))]


def fmt(values) -> str:
    return f"p50 {pct(values, 50):7.1f} ms  p95 {pct(values, 95):7.1f} ms  (n={len(values)})"


def populate(n: int, data_dir: Path) -> None:
    """1000 classes of one candidate source, predictions as rows (top-5 of real ImageNet wnids),
    then the real queue build."""
    from django.conf import settings
    from django.core.management import call_command
    from django.db import connection

    from curation.models import Source
    from curation.services.review import review_queue_sync
    from pipelines.classes.imagenet import named_list

    call_command("set_id_classes", "imagenet-1k", stdout=open(os.devnull, "w"))
    wnids = list(named_list("imagenet-1k"))
    t0 = time.perf_counter()
    source = Source.objects.create(name="bench", root=str(data_dir / "sources" / "bench"))
    with connection.cursor() as cur:
        cur.execute("INSERT INTO curation_candidateclass (source_id, folder, wnid, synset_name, lemmas, gloss, mapping, mapping_note, description) "
                    "SELECT %s, 'class' || g, 'n' || lpad((9000000 + g)::text, 8, '0'), 'class_' || g || '.n.01', '[]', '', 'wnid_folder', '', '' "
                    "FROM generate_series(0, 999) g", [source.pk])
        cur.execute("""
            INSERT INTO curation_image (source_id, candidate_class_id, relative_path, sha256, width, height, orientation, format, mode,
                                        bytes, mtime_ns, status, error_code, error, excluded_reason, created_at, updated_at)
            SELECT %s, c.id, c.folder || '/img_' || g || '.jpg', md5(g::text) || md5((g + 1)::text), 500, 375, 1, 'JPEG', 'RGB',
                   40000, 0, 'ok', '', '', '', now(), now()
            FROM generate_series(0, %s) g JOIN curation_candidateclass c ON c.source_id = %s AND c.folder = 'class' || (g %% 1000)
        """, [source.pk, n - 1, source.pk])
        cur.execute("CREATE TEMP TABLE w (k int, wnid text)")
        cur.executemany("INSERT INTO w VALUES (%s, %s)", list(enumerate(wnids)))
        cur.execute("""
            INSERT INTO curation_imageembedding (image_id, model_name, ok, error, row, topk, top1_wnid, top1_prob, max_softmax, max_logit,
                                                 energy, created_at, search_group, search_drop, dup_group, drop_reason, nearest_id_similarity)
            SELECT i.id, %s, true, '', -1,
                   json_build_array(json_build_array(a.wnid, 0.41), json_build_array(b.wnid, 0.22), json_build_array(c.wnid, 0.12),
                                    json_build_array(d.wnid, 0.08), json_build_array(e.wnid, 0.05)),
                   a.wnid, 0.41, 0.41, 10.0, -10.0, now(), i.id, '', i.id, '', ((i.id * 15485863) %% 100000) / 100000.0
            FROM curation_image i
            JOIN w a ON a.k = (i.id * 7) %% 1000 JOIN w b ON b.k = (i.id * 11 + 1) %% 1000 JOIN w c ON c.k = (i.id * 13 + 2) %% 1000
            JOIN w d ON d.k = (i.id * 17 + 3) %% 1000 JOIN w e ON e.k = (i.id * 19 + 4) %% 1000
        """, [settings.DEFAULT_MODEL])
        cur.execute("ANALYZE")
    t_rows = time.perf_counter() - t0
    t0 = time.perf_counter()
    report = review_queue_sync(source=source)
    print(f"populated {n:,} images + predictions in {t_rows:.0f} s; queue build {time.perf_counter() - t0:.0f} s ({report.eligible:,} queued)")


def part_db(args) -> None:
    from bench_review_load import recreate_database

    admin = os.environ.get("DATABASE_URL", "postgres://oodc:oodc@127.0.0.1:5432/oodc")
    if not admin.startswith("postgres"):
        print("bench_grid.py measures PostgreSQL: set DATABASE_URL to a PostgreSQL server (bash scripts/services.sh)", file=sys.stderr)
        sys.exit(1)
    data_dir = Path(tempfile.mkdtemp(prefix="oodc-bench-grid-"))
    if args.reuse:
        from urllib.parse import urlparse

        os.environ["DATABASE_URL"] = urlparse(admin)._replace(path="/oodc_bench_grid").geturl()
    else:
        os.environ["DATABASE_URL"] = recreate_database(admin, "oodc_bench_grid")
    os.environ.update({"DJANGO_SETTINGS_MODULE": "curation.settings", "OODC_DATA_DIR": str(data_dir), "DJANGO_DEBUG": "0",
                       "NLTK_DATA": os.environ.get("NLTK_DATA", str(REPO / "var" / "nltk_data"))})
    import django

    django.setup()
    from django.conf import settings
    from django.core.management import call_command
    from django.test import Client
    from PIL import Image as PILImage

    from curation.models import Image, ReviewItem
    from curation.roles import ANNOTATOR
    from curation.services.review import review_cache_clear
    from curation.services.users import user_create_with_role

    settings.ALLOWED_HOSTS = ["*"]
    call_command("migrate", verbosity=0)
    if not args.reuse:
        populate(args.images, data_dir)
    thumb = data_dir / "one-thumb.jpg"
    PILImage.new("RGB", (224, 168), (90, 120, 160)).save(thumb, quality=85)

    def cache_thumbs(image_ids):  # as the first view of each would leave them: made once per content
        for sha in Image.objects.filter(pk__in=image_ids).values_list("sha256", flat=True):
            out = Path(settings.THUMBNAIL_DIR) / "thumb" / sha[:2] / f"{sha}.jpg"
            out.parent.mkdir(parents=True, exist_ok=True)
            if not out.exists():
                shutil.copyfile(thumb, out)

    run = int(time.time())  # fresh annotators on every run (--reuse keeps the earlier ones' work)

    def client_for(name):
        user = user_create_with_role(username=f"{name}-{run}", password="bench-pw-12345", role=ANNOTATOR)[0]
        c = Client()
        c.force_login(user)
        return c

    def timed(fn):
        t = time.perf_counter()
        r = fn()
        ms = 1000 * (time.perf_counter() - t)
        assert r.status_code == 200, (r.status_code, r.content[:300])
        return ms, r

    open_before = ReviewItem.objects.filter(status="open").count()
    print(f"\n{open_before:,} open images in the queue; 96 tiles per page; in-process Django (test Client), PostgreSQL, "
          f"{os.cpu_count()} CPUs")
    firsts, nexts, thumbs, batches, per_decision_grid = [], [], [], [], []
    for k in range(args.annotators):
        review_cache_clear()
        c = client_for(f"grid{k:02d}")
        ms, r = timed(lambda: c.get("/api/review/grid/next?size=96"))
        firsts.append(ms)
        page = r.json()
        assert page["tiles"], "nothing to review"
        for _ in range(args.pages):
            ids = [t["image"] for t in page["tiles"]]
            cache_thumbs(ids)
            ms, _r = timed(lambda: c.get(f"/api/images/thumbs?ids={','.join(map(str, ids))}"))
            batches.append(ms)
            if len(batches) <= 3:  # the baseline: one request per tile (the screen's fallback)
                for i in ids:
                    t = time.perf_counter()
                    resp = c.get(f"/images/{i}/thumb")
                    b"".join(resp.streaming_content)
                    thumbs.append(1000 * (time.perf_counter() - t))
            marks = [{"assignment": t["assignment"], "decision": "ood"} for t in page["tiles"]]
            marks[5] = {**marks[5], "decision": "id", "wnids": [page["tiles"][5]["top5"][0]["wnid"]]}
            ms, r = timed(lambda: c.post("/api/review/grid/submit", json.dumps({"marks": marks, "size": 96, "seconds": 30}),
                                         content_type="application/json"))
            nexts.append(ms)
            per_decision_grid.append(ms / 96)
            page = r.json()
    # the baseline: the same decisions one by one on the single-image screen's API
    singles = []
    for k in range(args.annotators):
        c = client_for(f"single{k:02d}")
        items = c.get("/api/review/next").json()["items"]
        for _ in range(args.pages * 96 // 4):
            a = items[0]["assignment"]
            ms, r = timed(lambda: c.post("/api/review/submit", json.dumps({"assignment": a, "decision": "ood",
                                                                          "have": [x["assignment"] for x in items[1:]]}),
                                         content_type="application/json"))
            singles.append(ms)
            known = {x["assignment"]: x for x in items}
            items = [known.get(x["assignment"], x) if x.get("known") else x for x in r.json()["items"]]
    print(f"grid, first page (96 leased):            {fmt(firsts)}")
    print(f"grid, next page (96 recorded + 96 leased): {fmt(nexts)}")
    print(f"a page's 96 thumbnails, one request:      {fmt(batches)}")
    print(f"  baseline, one request per tile:         {fmt(thumbs)}  -> 96 tiles on one connection "
          f"{statistics.median(thumbs) * 96:.0f} ms ({statistics.median(thumbs) * 96 / statistics.median(batches):.1f}x the one request)")
    print(f"first paint, API side (first page + its thumbnails): ~{statistics.median(firsts) + statistics.median(batches):.0f} ms "
          "at the medians")
    print(f"per decision: grid {statistics.median(per_decision_grid):.2f} ms (median of pages / 96); single-image screen "
          f"{statistics.median(singles):.2f} ms per submit (baseline) -> {statistics.median(singles) / statistics.median(per_decision_grid):.1f}x "
          f"less server time per decision on the grid")
    dup = Image.objects.raw("SELECT 1 AS id FROM curation_review GROUP BY item_id, annotator_id HAVING count(*) > 1")
    print(f"consistency: {len(list(dup))} (image, annotator) pairs recorded twice; "
          f"{ReviewItem.objects.filter(done__gt=1).count()} images over 1 review")
    shutil.rmtree(data_dir, ignore_errors=True)


def part_similar(args) -> None:
    import faiss
    import numpy as np

    from pipelines.features import similar

    faiss.omp_set_num_threads(2)
    n, d, k = args.vectors, 1280, 20
    rng = np.random.default_rng(0)
    t0 = time.perf_counter()
    if args.spectrum_of:
        # no cluster structure at all, the hard case for an inverted file: a Gaussian with the mean
        # and covariance of real stored features (their principal axes and variances)
        real = np.load(args.spectrum_of).astype(np.float64)
        d = real.shape[1]
        mean = real.mean(axis=0)
        _u, sv, vt = np.linalg.svd(real - mean, full_matrices=False)
        scale = (sv / np.sqrt(max(len(real) - 1, 1)))[:, None] * vt
        kind = f"synthetic: a Gaussian with the mean and covariance of {len(real):,} real feature vectors ({Path(args.spectrum_of).name})"
    else:
        centres = rng.standard_normal((1000, d), dtype=np.float32)
        kind = "synthetic, 1,000 clusters"
    x = np.empty((n, d), dtype=np.float32)
    for s in range(0, n, 50_000):
        m = min(50_000, n - s)
        if args.spectrum_of:
            block = (mean + rng.standard_normal((m, len(scale))) @ scale).astype(np.float32)
        else:  # clusters with within-cluster spread comparable to the distance between them
            block = centres[rng.integers(0, 1000, m)] + 0.9 * rng.standard_normal((m, d), dtype=np.float32)
        x[s:s + m] = block / np.linalg.norm(block, axis=1, keepdims=True)
    ids = np.arange(n, dtype=np.int64)
    queries = rng.choice(n, args.queries, replace=False)
    print(f"\n{n:,} vectors x {d} ({kind}), {args.queries} queries, k={k}, faiss on 2 threads; "
          f"made in {time.perf_counter() - t0:.0f} s")
    exact, exact_ms = [], []
    for q in queries:  # the baseline: brute force over all vectors
        t = time.perf_counter()
        scores = x @ x[q]
        scores[q] = -np.inf
        top = np.argpartition(-scores, k)[:k]
        exact_ms.append(1000 * (time.perf_counter() - t))
        exact.append(set(top[np.argsort(-scores[top])].tolist()))
    t0 = time.perf_counter()
    idx = similar.build_index(x, ids)
    build = time.perf_counter() - t0
    print(f"index: {'exact' if idx.exact else 'inverted file'}, {idx.index.nlist if not idx.exact else 0} cells, built in {build:.0f} s "
          f"(with the measurement of its nprobe: {idx.nprobe} cells for recall@20 {idx.recall:.3f} on 64 of its vectors)")
    print(f"exact search (numpy brute force, baseline): {fmt(exact_ms)}")
    for nprobe in sorted(set(args.nprobe) | ({idx.nprobe} if not idx.exact else set())):
        lat, rec = [], []
        for q, truth in zip(queries, exact):
            t = time.perf_counter()
            got = similar.search(idx, x[q], k, nprobe=nprobe, exclude=int(q))
            lat.append(1000 * (time.perf_counter() - t))
            rec.append(len({i for i, _s in got} & truth) / k)
        own = " <- the index's own" if nprobe == idx.nprobe else ""
        print(f"index, nprobe {nprobe:4d}: {fmt(lat)}  recall@20 {statistics.fmean(rec):.3f} (min {min(rec):.2f})  "
              f"-> {statistics.median(exact_ms) / statistics.median(lat):.0f}x faster than exact{own}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--images", type=int, default=1_000_000)
    ap.add_argument("--pages", type=int, default=20, help="grid pages each annotator sends")
    ap.add_argument("--annotators", type=int, default=3)
    ap.add_argument("--reuse", action="store_true", help="keep the database a previous run wrote")
    ap.add_argument("--vectors", type=int, default=1_000_000)
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--nprobe", type=int, nargs="+", default=[16, 48, 96])
    ap.add_argument("--spectrum-of", metavar="NPY", help="find similar on a Gaussian with the mean and covariance of these real "
                    "feature vectors (an n x d float array) instead of clusters: no cluster structure, the hard case")
    ap.add_argument("--skip-db", action="store_true")
    ap.add_argument("--skip-similar", action="store_true")
    args = ap.parse_args()
    if not args.skip_db:
        part_db(args)
    if not args.skip_similar:
        part_similar(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
