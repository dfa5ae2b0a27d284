"""Scaling out extraction: wall time of one job with one and with two Celery worker processes.

    bash scripts/services.sh     # PostgreSQL and Redis, as the tests use them
    .venv/bin/python benchmarks/bench_extract_scaling.py [--images 384] [--chunk 32] [--threads-per-worker 0]

A source of ImageNet-val-like JPEGs (see bench_extract.py) is ingested into a scratch
PostgreSQL database (oodc_bench), then the same extraction job (run_image_pipeline --no-dedup,
queued on Redis) runs with 1 worker process and again, from scratch, with 2. Wall time from
queueing to the job's done status, model loading in each worker included. On this 2-core
machine both workers share the same two cores, so the figure shows how the job splits, not
extra hardware; on machines with more cores or GPUs each worker brings its own.
"""
from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

DB = "oodc_bench"
PG = "postgres://oodc:oodc@127.0.0.1:5432"
REDIS = "redis://127.0.0.1:6379/14"


def sh(cmd: list[str], env: dict, **kw) -> subprocess.CompletedProcess:
    out = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, **kw)
    if out.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{out.stdout[-2000:]}\n{out.stderr[-2000:]}")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--images", type=int, default=384)
    parser.add_argument("--chunk", type=int, default=32)
    parser.add_argument("--threads-per-worker", type=int, default=0, help="torch threads per worker (0: torch's default)")
    args = parser.parse_args()
    from benchmarks.bench_extract import make_images

    subprocess.run(["su", "postgres", "-c", f"dropdb --if-exists {DB}"], capture_output=True)
    sh(["su", "postgres", "-c", f"createdb -O oodc {DB}"], os.environ.copy())
    import redis

    redis.Redis.from_url(REDIS).flushdb()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "pool" / "n09436708"
        root.mkdir(parents=True)
        make_images(root, args.images)
        base = {**os.environ, "DATABASE_URL": f"{PG}/{DB}", "OODC_FEATURE_STORE": f"{tmp}/features",
                "OODC_EXTRACT_CHUNK_SIZE": str(args.chunk), "PYTHONUNBUFFERED": "1"}
        base.pop("CELERY_BROKER_URL", None)
        py = str(REPO / ".venv" / "bin" / "python") if (REPO / ".venv").is_dir() else sys.executable
        sh([py, "manage.py", "migrate", "-v0"], base)
        sh([py, "manage.py", "add_source", "pool", str(Path(tmp) / "pool")], base)  # ingest in-process
        broker = {**base, "CELERY_BROKER_URL": REDIS}
        if args.threads_per_worker:
            broker["OODC_TORCH_THREADS"] = str(args.threads_per_worker)
        results = {}
        for n_workers in (1, 2):
            sh([py, "manage.py", "shell", "-c",
                "from curation.models import ImageEmbedding, FeatureShard, Job; ImageEmbedding.objects.all().delete(); "
                "FeatureShard.objects.all().delete(); Job.objects.filter(kind='extract').delete()"], base)
            procs = [subprocess.Popen([py, "-m", "celery", "-A", "curation", "worker", "-Q", "cpu", "-c", "1", "-n", f"b{i}@%h",
                                       "--without-gossip", "--without-mingle", "-l", "warning"],
                                      cwd=REPO, env=broker, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
                     for i in range(n_workers)]
            try:
                time.sleep(3)  # let the workers connect before the clock starts
                t = time.perf_counter()
                sh([py, "manage.py", "run_image_pipeline", "--sources", "pool", "--no-dedup"], broker, timeout=1800)
                results[n_workers] = time.perf_counter() - t
            finally:
                for p in procs:
                    os.killpg(p.pid, signal.SIGTERM)
                for p in procs:
                    p.wait(timeout=60)
            print(f"{n_workers} worker(s): {results[n_workers]:.1f} s ({args.images / results[n_workers]:.1f} images/s)", flush=True)
    print(f"\n{args.images} images, chunks of {args.chunk}, {os.cpu_count()} CPUs, torch threads per worker: "
          f"{args.threads_per_worker or 'default'}")
    print(f"  1 worker : {results[1]:6.1f} s")
    print(f"  2 workers: {results[2]:6.1f} s   speed-up {results[1] / results[2]:.2f}x")
    subprocess.run(["su", "postgres", "-c", f"dropdb --if-exists {DB}"], capture_output=True)


if __name__ == "__main__":
    main()
