"""Export throughput: 50,000 reviewed images exported through the real service (selection,
leakage check with faiss against 1,000 ID images, three layouts, manifest with every sha256,
decisions.csv), once with hard links and once with copies; then the archive streaming rate of
the download views' generators (.tar.gz and .zip). Baselines measured in the same run on the
same files: sha256 of every source file (what an export must at least read) and a plain copy
of the source tree (what a copy export must at least write).

    .venv/bin/python benchmarks/bench_export.py [--images 50000] [--classes 100] [--keep]

It works in a scratch folder with its own SQLite database (OODC_DATA_DIR), never touching yours.
"""
from __future__ import annotations

import argparse
import hashlib
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
    ap.add_argument("--classes", type=int, default=100)
    ap.add_argument("--id-images", type=int, default=1000)
    ap.add_argument("--keep", action="store_true", help="keep the scratch folder")
    args = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="oodc-bench-export-"))
    os.environ.update({"OODC_DATA_DIR": str(work), "DJANGO_SETTINGS_MODULE": "curation.settings"})
    os.environ.pop("DATABASE_URL", None)
    os.environ.setdefault("NLTK_DATA", str(REPO / "var" / "nltk_data"))
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    try:
        run(work, args)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


def make_files(root: Path, n: int, classes: list[str], seed: int) -> list[tuple[str, str, int, int]]:
    """n small JPEGs (random 64x48 pictures, about 4 KB each, all different) in class folders;
    returns (relative path, sha256, width, height)."""
    import numpy as np
    from PIL import Image as PILImage

    rng = np.random.default_rng(seed)
    out = []
    base = rng.integers(0, 256, size=(48, 64, 3), dtype=np.uint8)
    for i in range(n):
        wnid = classes[i % len(classes)]
        arr = base.copy()
        arr[i % 48, :, :] = rng.integers(0, 256, size=(64, 3), dtype=np.uint8)  # every file different
        buf = io.BytesIO()
        PILImage.fromarray(arr).save(buf, format="JPEG", quality=90)
        data = buf.getvalue()
        rel = f"{wnid}/img_{i:06d}.jpg"
        (root / wnid).mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
        out.append((rel, hashlib.sha256(data).hexdigest(), 64, 48))
    return out


def run(work: Path, args) -> None:
    import numpy as np
    from django.conf import settings
    from django.contrib.auth.models import User
    from django.db import transaction

    from curation.models import CandidateClass, FeatureShard, Image, ImageEmbedding, ReviewItem, Source
    from curation.services.exports import export_create, export_path, export_run_inline
    from pipelines.export.write import archive_members, iter_tar_gz, iter_zip, read_manifest
    from pipelines.features.classifiers import imagenet_1k_classes

    wnids_1k, _labels = imagenet_1k_classes()
    # candidate classes: real WordNet nouns outside ImageNet-1K would need WordNet; any 9-char ids do for throughput
    cand_wnids = [f"n9{k:07d}" for k in range(args.classes)]
    t = time.perf_counter()
    cand_root, id_root = work / "sources" / "cands", work / "sources" / "ids"
    files = make_files(cand_root, args.images, cand_wnids, seed=0)
    id_files = make_files(id_root, args.id_images, list(wnids_1k[:50]), seed=1)
    print(f"generated {len(files):,} candidate and {len(id_files):,} ID files "
          f"({sum((cand_root / r).stat().st_size for r, *_ in files) / 1e6:.0f} MB) in {time.perf_counter() - t:.1f} s")

    t = time.perf_counter()
    reviewer = User.objects.create_user("bench-reviewer")
    with transaction.atomic():
        cands = Source.objects.create(name="bench-cands", root=str(cand_root))
        ids = Source.objects.create(name="bench-ids", root=str(id_root), role=Source.Role.ID)
        cc = {w: CandidateClass.objects.create(source=cands, folder=w, wnid=w, synset_name=f"class_{w}", lemmas=[f"class {w}"], mapping="wnid_folder")
              for w in cand_wnids}
        idc = {w: CandidateClass.objects.create(source=ids, folder=w, wnid=w, mapping="wnid_folder") for w in wnids_1k[:50]}
        Image.objects.bulk_create([Image(source=cands, candidate_class=cc[r.split("/")[0]], relative_path=r, sha256=s, width=w, height=h,
                                         format="JPEG", mode="RGB", status="ok") for r, s, w, h in files], batch_size=5000)
        Image.objects.bulk_create([Image(source=ids, candidate_class=idc[r.split("/")[0]], relative_path=r, sha256=s, width=w, height=h,
                                         format="JPEG", mode="RGB", status="ok") for r, s, w, h in id_files], batch_size=5000)
        images = list(Image.objects.order_by("id"))
        feats = np.random.default_rng(2).normal(size=(len(images), 256)).astype(np.float16)
        (Path(settings.FEATURE_STORE) / "bench").mkdir(parents=True, exist_ok=True)
        np.save(Path(settings.FEATURE_STORE) / "bench" / "all.npy", feats)
        shard = FeatureShard.objects.create(model_name=settings.DEFAULT_MODEL, path="bench/all.npy", rows=len(images), dim=256)
        ImageEmbedding.objects.bulk_create([ImageEmbedding(image=img, model_name=settings.DEFAULT_MODEL, shard=shard, row=k,
                                                           topk=[["n01440764", 0.5]] * 5, top1_wnid="n01440764", top1_prob=0.5)
                                            for k, img in enumerate(images)], batch_size=5000)
        ReviewItem.objects.bulk_create([ReviewItem(image=img, source=cands, candidate_class_id=img.candidate_class_id, status="complete",
                                                   done=1, required=1, final_decision="ood") for img in images if img.source_id == cands.pk],
                                       batch_size=5000)
    print(f"database rows written in {time.perf_counter() - t:.1f} s (reviewed by {reviewer.username}: final label ood)")

    # baselines: read + hash every file; plain copy of the tree
    t = time.perf_counter()
    for rel, *_ in files:
        hashlib.sha256((cand_root / rel).read_bytes()).hexdigest()
    hash_s = time.perf_counter() - t
    t = time.perf_counter()
    shutil.copytree(cand_root, work / "plain-copy")
    copy_s = time.perf_counter() - t
    shutil.rmtree(work / "plain-copy")
    n = len(files)
    print(f"baseline sha256 of every file: {hash_s:.1f} s ({n / hash_s:,.0f} files/s); shutil.copytree: {copy_s:.1f} s ({n / copy_s:,.0f} files/s)")

    results = {}
    for mode, link in (("hard links", True), ("copies", False)):
        export = export_create(name=f"bench-{'link' if link else 'copy'}", sources=[cands], link=link, enqueue=False)
        t = time.perf_counter()
        export = export_run_inline(export=export)
        secs = time.perf_counter() - t
        assert export.status == "done", export.message
        results[mode] = (export, secs)
        files_written = len(read_manifest(export_path(export))["files"])
        print(f"export with {mode}: {export.counts['images']:,} images x 3 layouts ({files_written:,} files) in {secs:.1f} s "
              f"= {export.counts['images'] / secs:,.0f} images/s ({secs / hash_s:.2f}x the hashing baseline, "
              f"{secs / copy_s:.2f}x the copytree baseline); placed by {export.counts['placed_by']}")

    export, _ = results["hard links"]
    root = export_path(export)
    manifest = read_manifest(root)
    members = archive_members(root, manifest, layout="imagenet-ood")
    size = sum((root / m).stat().st_size for m in members)
    t = time.perf_counter()
    for m in members:
        (root / m).read_bytes()
    read_s = time.perf_counter() - t
    print(f"archive of one layout: {len(members):,} files, {size / 1e6:.0f} MB; baseline read of those files: {size / 1e6 / read_s:,.0f} MB/s")
    for name, writer in (("tar.gz (gzip level 1)", iter_tar_gz), ("zip (stored)", iter_zip)):
        t = time.perf_counter()
        streamed, biggest = 0, 0
        for chunk in writer(root, members, prefix="bench"):
            streamed += len(chunk)
            biggest = max(biggest, len(chunk))
        secs = time.perf_counter() - t
        print(f"streamed {name}: {streamed / 1e6:.0f} MB in {secs:.1f} s = {size / 1e6 / secs:,.0f} MB/s of files "
              f"({secs / read_s:.2f}x the read baseline); largest chunk held in memory {biggest / 1e6:.2f} MB")


if __name__ == "__main__":
    main()
