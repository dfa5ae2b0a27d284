"""Ingest throughput against a bare Pillow loop over the same files, in the same run.

    .venv/bin/python benchmarks/bench_ingest.py [--images 1000] [--repeats 3]

Writes N photo-sized images (500x375 JPEG, every fifth a PNG, like ImageNet val) to a temp
folder, warms the page cache, then alternates, ``repeats`` times each:
  bare-verify : for each file, Image.open + verify()   (the loop the goal is stated against)
  bare-decode : Image.open + verify() for PNG, draft-mode decode for JPEG: the same integrity
                check ingest makes, without hashing, scanning or the database
  ingest      : (default threads, and once with one thread) the real ingest of a fresh source (scan, read, sha256, checks, EXIF, rows in
                SQLite, chunks, finalize), in-process as `add_source` runs it without a broker
and prints the medians and the ratios.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks._sqlite_django import django_in  # noqa: E402


def make_images(root: Path, n: int) -> None:
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(0)
    for i in range(n):
        small = rng.integers(0, 256, size=(24, 32, 3), dtype=np.uint8)
        im = Image.fromarray(small, "RGB").resize((500, 375), Image.Resampling.BICUBIC)
        d = root / f"class_{i % 20:02d}"
        d.mkdir(parents=True, exist_ok=True)
        if i % 5 == 4:
            im.save(d / f"img_{i:05d}.png")
        else:
            im.save(d / f"img_{i:05d}.jpg", quality=90)


def bare_verify(files):
    from PIL import Image

    for f in files:
        with Image.open(f) as im:
            im.verify()


def bare_decode(files):
    from PIL import Image

    for f in files:
        with Image.open(f) as im:
            if im.format == "PNG":
                im.verify()
            else:
                im.draft("RGB", (im.size[0] // 8, im.size[1] // 8))
                im.load()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--images", type=int, default=1000)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="oodc-bench-"))
    django_in(work)
    from curation.services.ingest import ingest_run_inline, ingest_start
    from curation.services.sources import source_register

    root = work / "images"
    t = time.perf_counter()
    make_images(root, args.images)
    print(f"wrote {args.images} images in {time.perf_counter() - t:.1f}s to {root}")
    files = sorted(p for p in root.rglob("*") if p.is_file())
    total_bytes = sum(p.stat().st_size for p in files)
    bare_verify(files)  # warm the page cache
    source_register(name="warmup", root=root)  # loads WordNet once, as a long-lived worker has it

    def run_ingest(name: str, threads: int | None) -> float:
        reg = source_register(name=name, root=root)
        job = ingest_start(source=reg.source, enqueue=False)
        if threads:
            job.config["threads"] = threads
            job.save(update_fields=["config"])
        t = time.perf_counter()
        job = ingest_run_inline(job=job)
        elapsed = time.perf_counter() - t
        assert job.status == "done" and job.result["added"] == len(files), job.message
        return elapsed

    times = {"bare-verify": [], "bare-decode": [], "ingest-1thread": [], "ingest": []}
    for r in range(args.repeats):
        t = time.perf_counter()
        bare_verify(files)
        times["bare-verify"].append(time.perf_counter() - t)
        t = time.perf_counter()
        bare_decode(files)
        times["bare-decode"].append(time.perf_counter() - t)
        times["ingest-1thread"].append(run_ingest(f"bench-1t-{r}", 1))
        times["ingest"].append(run_ingest(f"bench-{r}", None))

    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"{len(files)} files, {total_bytes / 1e6:.1f} MB, median of {args.repeats} runs, {os.cpu_count()} cores")
    for k, v in med.items():
        print(f"  {k:<12} {v:7.3f} s  {len(files) / v:8.0f} images/s")
    from django.conf import settings

    print(f"ingest threads (default OODC_INGEST_THREADS): {settings.INGEST_THREADS}")
    for k in ("ingest-1thread", "ingest"):
        print(f"ratio {k:<14} / bare-verify : {med[k] / med['bare-verify']:6.2f}x")
        print(f"ratio {k:<14} / bare-decode : {med[k] / med['bare-decode']:6.2f}x  (goal: <= 1.5x)")


if __name__ == "__main__":
    main()
