"""Extraction throughput against the bare model, in the same run, per CPU runtime.

    .venv/bin/python benchmarks/bench_extract.py [--images 384] [--batch-size 32] [--repeats 3] [--workers N]
        [--models efficientnet_lite0,efficientnet_lite2,resnet50]

Data: ``images`` ImageNet-val-like JPEGs (quality 90, shorter side 375, longer side 500 or
so) cut from the real photos shipped in scikit-image / scikit-learn, written to a temp folder
(page cache warm after the first pass).
  bare, per runtime: the forward pass alone (logits and penultimate features) over
         already-transformed tensors, same batch size:
           torch          eager, contiguous (what the CPU path was before issue 51)
           torch-cl       eager, channels_last (the fallback)
           openvino       pipelines.features.cpu_runtime's graph (what extraction runs on the CPU)
           onnxruntime    the same model exported by torch.onnx, CPU provider (only when
                          onnxruntime is installed; not a dependency of the project)
  e2e  : pipelines.features.extract.extract over the files (decode with draft, EXIF, RGB, timm's
         transform in DataLoader workers, forward, softmax/top-k/energy, float16 features)
         plus writing the features shard with np.save: what an extraction chunk does
         besides its database rows; pil decoder (the CPU default) and torchvision decoder.
Models: the registered offline ones with their real weights; ``resnet50`` has RANDOM weights
(pipelines.evaluation.sanity.random_weight_model), labelled so: they time the architecture only.
Alternated ``repeats`` times; medians, images/s, and e2e over the fastest runtime's bare rate
(goal >= 0.8x). The graph conversion (once per model and weights, cached) is not timed.
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


def _model(name: str):
    from pipelines.evaluation.sanity import random_weight_model
    from pipelines.features.classifiers import MODELS, load_model

    if name in MODELS:
        return load_model(name, device="cpu"), "real weights"
    return random_weight_model(name, 0, "cpu"), "RANDOM weights (timing only)"


def _onnxruntime(lm, size: list[int], folder: Path, threads: int):
    """An ONNX Runtime session of the model (logits, features), or None when not installed."""
    try:
        import onnxruntime as ort
    except ImportError:
        return None
    import warnings

    import torch

    from pipelines.features.cpu_runtime import logits_and_features

    path = folder / "model.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(logits_and_features(lm.model), (torch.randn(2, *size),), str(path), input_names=["x"], output_names=["logits", "features"],
                          dynamic_axes={"x": {0: "n"}, "logits": {0: "n"}, "features": {0: "n"}}, opset_version=17, dynamo=False)
    so = ort.SessionOptions()
    so.intra_op_num_threads, so.inter_op_num_threads = threads, 1
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])


def bench_model(name: str, paths: list[str], args, workers: int, tmp: Path) -> dict:
    import copy

    import torch

    from pipelines.features.cpu_runtime import choose
    from pipelines.features.extract import extract
    from pipelines.sources.images import load_rgb_for_model

    lm, label = _model(name)
    size = [int(v) for v in lm.data_config["input_size"]]
    tensors = torch.stack([lm.transform(load_rgb_for_model(p, min_side=lm.resize_side)) for p in paths])
    contiguous = lm.model
    cl = copy.deepcopy(lm.model).to(memory_format=torch.channels_last)
    choice = choose(lm)
    graph = choice.graph
    sess = _onnxruntime(lm, size, tmp, torch.get_num_threads())
    bs = args.batch_size

    def torch_bare(model, layout) -> float:
        t = time.perf_counter()
        with torch.inference_mode():
            for s in range(0, len(tensors), bs):
                x = tensors[s:s + bs].contiguous(memory_format=layout)
                pre = model.forward_head(model.forward_features(x), pre_logits=True)
                model.get_classifier()(pre)
        return time.perf_counter() - t

    def numpy_bare(run) -> float:
        arr = tensors.numpy()
        t = time.perf_counter()
        for s in range(0, len(arr), bs):
            run(np.ascontiguousarray(arr[s:s + bs]))
        return time.perf_counter() - t

    runs = {"torch": lambda: torch_bare(contiguous, torch.contiguous_format),
            "torch-cl": lambda: torch_bare(cl, torch.channels_last)}
    if graph is not None:
        runs["openvino"] = lambda: numpy_bare(graph)
    if sess is not None:
        runs["onnxruntime"] = lambda: numpy_bare(lambda a: sess.run(None, {"x": a}))

    def e2e(decoder: str) -> float:
        t = time.perf_counter()
        ex = extract(lm, paths, batch_size=bs, num_workers=workers if decoder == "pil" else None, decoder=decoder)
        np.save(tmp / "shard.npy", ex.features)
        assert (ex.row_of >= 0).all()
        return time.perf_counter() - t

    runs["e2e-pil"] = lambda: e2e("pil")
    runs["e2e-torchvision"] = lambda: e2e("torchvision")
    for fn in runs.values():  # warm-up: page cache, allocator, worker start-up paths
        fn()
    times: dict[str, list[float]] = {k: [] for k in runs}
    for _ in range(args.repeats):
        for k, fn in runs.items():
            times[k].append(fn())
    rates = {k: len(paths) / statistics.median(v) for k, v in times.items()}
    return {"label": label, "rates": rates, "runtime": choice.runtime, "note": choice.note}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--images", type=int, default=384)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--workers", type=int, default=None, help="DataLoader workers (default: the pipeline's default)")
    parser.add_argument("--models", default="efficientnet_lite0,efficientnet_lite2,resnet50")
    args = parser.parse_args()
    import torch

    from pipelines.features.extract import default_loader_workers

    workers = default_loader_workers() if args.workers is None else args.workers
    print(f"{args.images} JPEGs (~500x375), batch {args.batch_size}, {torch.get_num_threads()} torch threads, {workers} DataLoader "
          f"worker(s), {os.cpu_count()} CPUs, {args.repeats} repeats (medians); load average before: {os.getloadavg()[0]:.2f}")
    with tempfile.TemporaryDirectory() as tmp:
        paths = make_images(Path(tmp), args.images)
        for name in args.models.split(","):
            r = bench_model(name.strip(), paths, args, workers, Path(tmp))
            rates = r["rates"]
            bare = {k: v for k, v in rates.items() if not k.startswith("e2e")}
            best = max(bare, key=lambda k: bare[k])
            print(f"\n{name} ({r['label']}); extraction's CPU runtime: {r['runtime']}" + (f" [{r['note']}]" if r["note"] else ""))
            for k, v in rates.items():
                print(f"  {k:<16} {v:7.1f} images/s" + (f"  ({v / bare['torch']:.1f}x torch)" if k in bare else ""))
            print(f"  e2e / fastest bare ({best}): pil {rates['e2e-pil'] / bare[best]:.2f}x (goal >= 0.8x), "
                  f"torchvision {rates['e2e-torchvision'] / bare[best]:.2f}x")
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
