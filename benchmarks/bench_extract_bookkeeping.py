"""Bookkeeping rate of the extraction task: everything ``extract_process_chunk`` does around the
model (reading the chunk, path checks, the feature shard, one ImageEmbedding row per image with
its top-5, the chunk's done flag and the job's progress), on PostgreSQL, with the model call
replaced by precomputed outputs. This stand-in exists only here, to time the part a GPU worker
must never wait for: the goal is >= 10,000 images/s, twice the GPU pipeline's target.

Baseline in the same run: the same rows written with PostgreSQL's COPY (what the database
takes at best), so the ratio says how much the task adds on top.

    bash scripts/services.sh    # PostgreSQL and Redis
    DATABASE_URL=postgres://oodc:oodc@127.0.0.1:5432/oodc .venv/bin/python benchmarks/bench_extract_bookkeeping.py [--images 50000]

BENCH_PROFILE=1 (and BENCH_PROFILE_SORT=tottime) prints a cProfile of the chunk loop.
It creates and drops its own scratch database (``<name>_bench_bookkeeping``) beside DATABASE_URL's.
"""
from __future__ import annotations

import argparse
import io
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--images", type=int, default=50_000)
    ap.add_argument("--chunk", type=int, default=1024, help="images per chunk (OODC_EXTRACT_CHUNK_SIZE's default)")
    args = ap.parse_args()
    url = os.environ.get("DATABASE_URL", "")
    if not url.startswith("postgres"):
        sys.exit("benchmarks/bench_extract_bookkeeping.py: set DATABASE_URL to a PostgreSQL server (bash scripts/services.sh starts one)")
    import psycopg2

    base, _, dbname = url.rpartition("/")
    scratch = f"{dbname}_bench_bookkeeping"
    admin = psycopg2.connect(url)
    admin.autocommit = True
    with admin.cursor() as cur:
        cur.execute(f'DROP DATABASE IF EXISTS "{scratch}"')
        cur.execute(f'CREATE DATABASE "{scratch}"')
    work = Path(tempfile.mkdtemp(prefix="oodc-bench-bookkeeping-"))
    os.environ.update({"OODC_DATA_DIR": str(work), "DJANGO_SETTINGS_MODULE": "curation.settings", "DATABASE_URL": f"{base}/{scratch}"})
    try:
        import django

        django.setup()
        from django.core.management import call_command

        call_command("migrate", verbosity=0)
        run(work, args)
    finally:
        from django.db import connections

        connections.close_all()
        with admin.cursor() as cur:
            cur.execute(f'DROP DATABASE IF EXISTS "{scratch}"')
        admin.close()
        shutil.rmtree(work, ignore_errors=True)


def precomputed(n: int, seed: int):
    """Outputs shaped like a real extraction of n images (1,280-d float16 features, top-5)."""
    import numpy as np

    from pipelines.features.classifiers import imagenet_1k_classes
    from pipelines.features.extract import Extraction

    rng = np.random.default_rng(seed)
    probs = np.sort(rng.dirichlet(np.ones(1000) * 0.05, size=n).astype(np.float32), axis=1)[:, ::-1][:, :5]
    return Extraction(row_of=np.arange(n, dtype=np.int64), errors={}, features=rng.standard_normal((n, 1280)).astype(np.float16),
                      top_index=rng.integers(0, 1000, size=(n, 5)), top_prob=np.ascontiguousarray(probs),
                      max_logit=rng.normal(10, 2, n).astype(np.float32), energy=rng.normal(11, 2, n).astype(np.float32),
                      wnids=imagenet_1k_classes()[0], decoder="pil")


def run(work: Path, args) -> None:
    from django.db import connection
    from django.test.utils import override_settings

    from curation.models import Image, ImageEmbedding, JobChunk, Source
    from curation.services.image_pipeline import extract_finalize, extract_plan, extract_process_chunk, extract_start

    root = work / "images"
    root.mkdir()
    src = Source.objects.create(name="bench", root=str(root))
    Image.objects.bulk_create([Image(source=src, relative_path=f"c{i % 100:03d}/img_{i:07d}.jpg", sha256=f"{i:064x}",
                                     status=Image.Status.OK, width=500, height=375, format="JPEG", mode="RGB")
                               for i in range(args.images)], batch_size=5000)
    outputs = precomputed(args.chunk, seed=0)

    def stand_in(paths, job):  # benchmark only: the model's outputs, already computed
        from dataclasses import replace

        n = len(paths)
        return replace(outputs, row_of=outputs.row_of[:n], features=outputs.features[:n], top_index=outputs.top_index[:n],
                       top_prob=outputs.top_prob[:n], max_logit=outputs.max_logit[:n], energy=outputs.energy[:n])

    with override_settings(EXTRACT_CHUNK_SIZE=args.chunk):
        job = extract_start(source=src, enqueue=False)
        t0 = time.perf_counter()
        chunks = extract_plan(job_id=job.pk)
        import cProfile
        prof = cProfile.Profile() if os.environ.get("BENCH_PROFILE") else None
        if prof:
            prof.enable()
        for index in chunks:
            extract_process_chunk(job_id=job.pk, index=index, run_model=stand_in)
        if prof:
            prof.disable()
            import pstats
            pstats.Stats(prof).sort_stats(os.environ.get("BENCH_PROFILE_SORT", "cumulative")).print_stats(30)
        extract_finalize(job_id=job.pk)
        task_s = time.perf_counter() - t0
    n = ImageEmbedding.objects.filter(model_name=job.config["model"]).count()
    assert n == args.images and not JobChunk.objects.filter(job=job, done=False).exists(), (n, args.images)

    # baseline: the same rows through COPY into a scratch copy of the table
    fields = [f for f in ImageEmbedding._meta.concrete_fields if not f.primary_key]
    rows = list(ImageEmbedding.objects.values_list(*[f.attname for f in fields]))
    import json

    table = ImageEmbedding._meta.db_table
    t0 = time.perf_counter()
    buf = io.StringIO()
    for r in rows:
        buf.write("\t".join(["\\N" if v is None else (json.dumps(v) if isinstance(v, list) else str(v)) for v in r]) + "\n")
    buf.seek(0)
    with connection.cursor() as cur:
        cur.execute(f"CREATE TEMP TABLE bench_copy (LIKE {table} INCLUDING ALL)")
        cur.cursor.copy_expert(f"COPY bench_copy ({', '.join(f.column for f in fields)}) FROM STDIN", buf)
    copy_s = time.perf_counter() - t0
    print(f"images: {args.images:,} in chunks of {args.chunk:,}; PostgreSQL {connection.pg_version}; {os.cpu_count()} CPU(s)")
    print(f"extraction task bookkeeping: {task_s:7.2f} s = {args.images / task_s:9,.0f} images/s (goal >= 10,000)")
    print(f"baseline, COPY of the rows:  {copy_s:7.2f} s = {args.images / copy_s:9,.0f} images/s")
    print(f"ratio task / COPY time: {task_s / copy_s:.2f}x")


if __name__ == "__main__":
    main()
