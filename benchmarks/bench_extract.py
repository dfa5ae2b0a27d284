"""Extraction throughput against the bare model, in the same run.

    .venv/bin/python benchmarks/bench_extract.py [--images 384] [--batch-size 32] [--repeats 3] [--workers N]

Data: ``images`` ImageNet-val-like JPEGs (quality 90, shorter side 375, longer side 500 or
so) cut from the real photos shipped in scikit-image / scikit-learn, written to a temp folder
(page cache warm after the first pass).
  bare : the model's forward pass alone (forward_features + pre-logits + classifier) over
         already-transformed tensors, same batch size: the ceiling.
  e2e  : pipelines.extract.extract over the files (decode with draft, EXIF, RGB, timm's
         transform in DataLoader workers, forward, softmax/top-k/energy, float16 features)
         plus writing the features shard with np.save: what an extraction chunk does
         besides its database rows; with the pil decoder (the CPU default) and with the
         torchvision decoder (pipelines/decode.py, libjpeg on the CPU).
Alternated ``repeats`` times; medians, images/s and e2e/bare.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def make_images(folder: Path, n: int) -> list[str]:
    from PIL import Image

    from fixtures.demo import package_data_file
    from fixtures.images import DISTINCT_REAL_PHOTOS

    rng = np.random.default_rng(0)
    photos = []
    for pkg, name in DISTINCT_REAL_PHOTOS:
        with Image.open(package_data_file(pkg, name)) as im:
            photos.append(im.convert("RGB"))
    paths = []
    for i in range(n):
        im = photos[i % len(photos)]
        scale = 500 / max(im.size) * rng.uniform(1.0, 1.3)
        big = im.resize((max(1, int(im.width * scale)), max(1, int(im.height * scale))), Image.Resampling.BICUBIC)
        w, h = min(big.width, 500), min(big.height, 375)
        x, y = int(rng.integers(0, big.width - w + 1)), int(rng.integers(0, big.height - h + 1))
        p = folder / f"img_{i:05d}.jpg"
        big.crop((x, y, x + w, y + h)).save(p, quality=90)
        paths.append(str(p))
    return paths


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--images", type=int, default=384)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--workers", type=int, default=None, help="DataLoader workers (default: the pipeline's default)")
    parser.add_argument("--model", default="efficientnet_lite0")
    args = parser.parse_args()
    import torch

    from pipelines.classifiers import load_model
    from pipelines.extract import default_loader_workers, extract
    from pipelines.images import load_rgb_for_model

    lm = load_model(args.model, device="cpu")
    workers = default_loader_workers() if args.workers is None else args.workers
    with tempfile.TemporaryDirectory() as tmp:
        paths = make_images(Path(tmp), args.images)
        tensors = torch.stack([lm.transform(load_rgb_for_model(p, min_side=lm.resize_side)) for p in paths])
        model = lm.model

        def bare() -> float:
            t = time.perf_counter()
            with torch.inference_mode():
                for s in range(0, len(tensors), args.batch_size):
                    pre = model.forward_head(model.forward_features(tensors[s:s + args.batch_size]), pre_logits=True)
                    model.get_classifier()(pre).softmax(dim=1)
            return time.perf_counter() - t

        def e2e(decoder: str) -> float:
            t = time.perf_counter()
            ex = extract(lm, paths, batch_size=args.batch_size, num_workers=workers if decoder == "pil" else None, decoder=decoder)
            np.save(Path(tmp) / "shard.npy", ex.features)
            assert (ex.row_of >= 0).all()
            return time.perf_counter() - t

        bare(), e2e("pil"), e2e("torchvision")  # warm-up: page cache, allocator, worker start-up paths
        times = {"bare": [], "e2e": [], "tv": []}
        for _ in range(args.repeats):
            times["bare"].append(bare())
            times["e2e"].append(e2e("pil"))
            times["tv"].append(e2e("torchvision"))
    med = {k: statistics.median(v) for k, v in times.items()}
    n = args.images
    print(f"\n{args.model}, {n} JPEGs (~500x375), batch {args.batch_size}, {torch.get_num_threads()} torch threads, "
          f"{workers} DataLoader worker(s), {os.cpu_count()} CPUs, {args.repeats} repeats (medians)")
    print(f"  bare forward      {med['bare']:6.2f} s  {n / med['bare']:6.1f} images/s")
    print(f"  end-to-end, pil   {med['e2e']:6.2f} s  {n / med['e2e']:6.1f} images/s")
    print(f"  end-to-end, torchvision decoder (threads) {med['tv']:6.2f} s  {n / med['tv']:6.1f} images/s")
    print(f"  e2e / bare throughput: pil {med['bare'] / med['e2e']:.2f}x (goal >= 0.8x), torchvision {med['bare'] / med['tv']:.2f}x")


if __name__ == "__main__":
    main()
