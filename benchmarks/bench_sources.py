"""The same images as folders, per-class tars, WebDataset shards and Parquet: ingest, extraction's
data loading and renditions per form, each against folders in the same run (issue 44).

    .venv/bin/python benchmarks/bench_sources.py [--images 200000] [--classes 200] [--load 5000] [--views 200]

Writes N small JPEGs (64x48, about 1.5 KB: the many-small-files case, where per-file overhead
shows) once, then the same bytes in each form: ``folder`` (ROOT/<class>/<file>), ``class-tars``
(ROOT/<class>.tar, tarfile), ``wds`` (webdataset's TarWriter, 1,000 samples a shard, timm's
json) and ``parquet`` (the ``datasets`` library, the hub's Image + ClassLabel, 1,000 rows a
row group). Then, for each form:

  ingest : the real in-process ingest of a new source (scan, read, sha256, checks, rows in
           SQLite, chunks, finalize), images/s; goal: every archive form >= folders
  load   : extraction's data loading without the model, over ``--load`` images in the order
           extraction reads them (MemberRefs from the rows, read, checked against the ingest
           hash, decoded, resized and cropped by timm's transform), images/s; goal: >= folders
  views  : ``--views`` thumbnails and full views made cold (empty cache), then asked again
           (warm), p95 ms; goal: <= 50 ms

Page cache warm (each form is read once before it is timed). Ingest runs once per form (with
``--ingest-rounds``, in ``--rounds`` rounds as well, each a new source per form); the load and
view timings run in ``--rounds`` rounds with the forms taking turns (medians and p95s
over the rounds), so a change in the machine's load falls on every form alike. Prints a table
and the ratios.
"""
from __future__ import annotations

import argparse
import io
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks._sqlite_django import django_in  # noqa: E402

FORMS = ("folder", "class-tars", "wds", "parquet")


def make_jpegs(n: int, classes: int) -> list[tuple[str, str, bytes]]:
    """(class wnid-like key, file name, bytes): small distinct JPEGs."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(0)
    out = []
    for i in range(n):
        small = rng.integers(0, 256, size=(6, 8, 3), dtype=np.uint8)
        buf = io.BytesIO()
        Image.fromarray(small, "RGB").resize((64, 48), Image.Resampling.BILINEAR).save(buf, "JPEG", quality=85)
        cls = f"n{9_000_000 + i % classes:08d}"
        out.append((cls, f"{cls}_{i}.JPEG", buf.getvalue()))
    return out


def write_forms(root: Path, images: list[tuple[str, str, bytes]]) -> dict[str, Path]:
    from fixtures.archives import write_class_tars, write_hf_parquet, write_wds_shards

    by_class: dict[str, list[tuple[str, bytes]]] = {}
    for cls, name, data in images:
        by_class.setdefault(cls, []).append((name, data))
    out = {f: root / f for f in FORMS}
    for cls, files in by_class.items():
        (out["folder"] / cls).mkdir(parents=True, exist_ok=True)
        for name, data in files:
            (out["folder"] / cls / name).write_bytes(data)
    write_class_tars(out["class-tars"], by_class)
    classes = sorted(by_class)
    write_wds_shards(out["wds"], ((name.removesuffix(".JPEG"), data, cls, classes.index(cls)) for cls, name, data in images),
                     per_shard=1000)
    write_hf_parquet(out["parquet"], [(name, data, cls) for cls, name, data in images], names=classes,
                     shards=max(1, len(images) // 20_000))
    return out


def warm(root: Path) -> None:
    for p in root.rglob("*"):
        if p.is_file():
            with open(p, "rb") as fh:
                while fh.read(1 << 20):
                    pass


def p95(values: list[float]) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(round(0.95 * (len(values) - 1))))]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--images", type=int, default=200_000)
    ap.add_argument("--classes", type=int, default=200)
    ap.add_argument("--load", type=int, default=5000, help="images per form for the data-loading rate")
    ap.add_argument("--views", type=int, default=200, help="images per form for the rendition times")
    ap.add_argument("--rounds", type=int, default=3, help="rounds of the load and view timings, the forms taking turns")
    ap.add_argument("--ingest-rounds", action="store_true", help="ingest in --rounds rounds too (each a new source per form)")
    args = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="oodc-bench-sources-"))
    django_in(work)
    from django.conf import settings

    from curation.models import Image
    from curation.services.ingest import ingest_run_inline, ingest_start
    from curation.services.renditions import rendition
    from curation.services.sources import source_register
    from pipelines.features.extract import _Files

    t = time.perf_counter()
    images = make_jpegs(args.images, args.classes)
    roots = write_forms(work / "forms", images)
    size = sum(len(d) for _c, _n, d in images)
    print(f"wrote {args.images} JPEGs ({size / 1e6:.1f} MB, {args.classes} classes) in each of {len(FORMS)} forms "
          f"in {time.perf_counter() - t:.0f} s under {work}")
    source_register(name="warmup", root=roots["folder"])  # loads WordNet once, as a long-lived worker has it

    from timm.data import create_transform

    transform = create_transform(input_size=(3, 224, 224), interpolation="bicubic", crop_pct=0.875)
    rows: dict[str, dict[str, float]] = {}
    sources = {}
    rates: dict[str, list[float]] = {f: [] for f in FORMS}
    for f in FORMS:
        warm(roots[f])
    for n in range(args.rounds if args.ingest_rounds else 1):
        for form in FORMS:  # each round ingests every form as a new source, the forms taking turns
            reg = source_register(name=f"bench-{form}-{n}", root=roots[form], layout=form)
            job = ingest_start(source=reg.source, enqueue=False)
            t = time.perf_counter()
            job = ingest_run_inline(job=job)
            elapsed = time.perf_counter() - t
            assert job.status == "done" and job.result["added"] == args.images, (form, job.message)
            rates[form].append(args.images / elapsed)
            sources[form] = reg.source
    for form in FORMS:
        rows[form] = {"ingest": statistics.median(rates[form])}
        print(f"  {form:<10} ingest {rows[form]['ingest']:7.0f} img/s (median of {len(rates[form])}: "
              + ", ".join(f"{r:.0f}" for r in rates[form]) + ")")

    def loader(form):
        src = sources[form]
        picked = list(Image.objects.filter(source=src, status="ok").order_by("pk")
                      .values_list("relative_path", "container", "offset", "bytes", "sha256")[: args.load])
        picked.sort(key=lambda x: (x[1], x[2]))  # as extraction reads them: an archive front to back
        refs = [src.member_ref(p, container=c, offset=o, size=b, sha256=s) for p, c, o, b, s in picked]
        return _Files(refs, transform, 224, settings.MAX_IMAGE_PIXELS)

    # the forms take turns, round after round, so a change in the machine's load falls on all of them
    loads: dict[str, list[float]] = {f: [] for f in FORMS}
    views: dict[str, dict[str, list[float]]] = {f: {} for f in FORMS}
    samples = {f: list(Image.objects.filter(source=sources[f], status="ok").select_related("source").order_by("?")[: args.views])
               for f in FORMS}
    for _round in range(args.rounds):
        for form in FORMS:
            files = loader(form)
            t = time.perf_counter()
            for i in range(len(files)):
                _i, x, err = files[i]
                assert x is not None, err
            loads[form].append(len(files) / (time.perf_counter() - t))
            shutil.rmtree(settings.THUMBNAIL_DIR, ignore_errors=True)  # the same bytes in every form: each starts cold
            for variant in ("thumb", "full"):
                for phase in ("cold", "warm"):
                    ms = views[form].setdefault(f"{variant}-{phase}", [])
                    for img in samples[form]:
                        t = time.perf_counter()
                        rendition(img, variant)
                        ms.append(1000 * (time.perf_counter() - t))
    for form in FORMS:
        r = rows[form]
        r["load"] = statistics.median(loads[form])
        r.update({k: p95(v) for k, v in views[form].items()})
        print(f"  {form:<10} load {r['load']:6.0f} img/s (median of {args.rounds} rounds)   "
              f"thumb p95 cold {r['thumb-cold']:5.1f} ms warm {r['thumb-warm']:5.1f} ms   "
              f"full p95 cold {r['full-cold']:5.1f} ms warm {r['full-warm']:5.1f} ms")

    print(f"\n{args.images} images, {os.cpu_count()} cores, SQLite; ratios against folders in this run:")
    print(f"  {'form':<10} {'ingest':>8} {'load':>8}")
    for form in FORMS:
        print(f"  {form:<10} {rows[form]['ingest'] / rows['folder']['ingest']:7.2f}x {rows[form]['load'] / rows['folder']['load']:7.2f}x")
    worst = max(v for r in rows.values() for k, v in r.items() if k.startswith(("thumb", "full")))
    print(f"  worst view p95: {worst:.1f} ms (goal <= 50 ms)")
    print(f"  median ingest of the archive forms / folders: "
          f"{statistics.median(rows[f]['ingest'] for f in FORMS[1:]) / rows['folder']['ingest']:.2f}x")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
