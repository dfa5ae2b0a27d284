"""How small an ID object can be before the classifier's top-5 stops naming it, and how large
such an object is on a grid tile of each size (issue 48): where the top-5 misses it, only a
person's eye on the tile finds it, so the tile must show it large enough to see.

The demo's own photos and offline model: real cut-out photos of ImageNet-1K classes (Tux Paint's
stamps, fixtures/stamps.csv) pasted onto real background photos (fixtures.real_photos.composite)
with the object's longer side a fixed share of the frame's shorter side, classified by the demo's
model (efficientnet_lite2 when its weights are installed, else efficientnet_lite0). A grid tile
shows the image cropped to a square of its shorter side, so an object of share s is about s x T
pixels on a tile of T pixels. A few minutes of CPU at most (stamps x shares images, one pass).

    .venv/bin/python benchmarks/bench_grid_tile_study.py [--stamps 60] [--seed 0]
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

SHARES = (0.08, 0.12, 0.18, 0.25, 0.35, 0.5, 0.7)
TILES = (96, 128, 160, 192, 256)
SEEN_PX = 24  # an object under about this many pixels on a tile is easily passed over (a rule of thumb, not measured here)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--stamps", type=int, default=60)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    import torch

    from fixtures.real_photos import BACKGROUNDS, _Cache, check_installed, composite, stamp_table
    from pipelines.features.classifiers import load_model, offline_model_installed

    check_installed()
    model_name = "efficientnet_lite2" if offline_model_installed("efficientnet_lite2") else "efficientnet_lite0"
    lm = load_model(model_name, device="cpu")
    rng = np.random.default_rng(args.seed)
    wnids = set(lm.wnids)
    stamps = [s for s in stamp_table() if s.wnid in wnids]
    rng.shuffle(stamps)
    stamps = stamps[:args.stamps]
    cache = _Cache()
    backgrounds = sorted(BACKGROUNDS)
    t0 = time.perf_counter()
    rows = []
    with torch.inference_mode():
        for share in SHARES:
            images, truth = [], []
            for k, stamp in enumerate(stamps):
                bg = cache.background(backgrounds[k % len(backgrounds)])
                images.append(composite(cache.stamp(stamp), bg, rng, scale=(share, share)))
                truth.append(stamp.wnid)
            top1 = top5 = 0
            for start in range(0, len(images), 32):
                x = torch.stack([lm.transform(im.convert("RGB")) for im in images[start:start + 32]])
                best = lm.model(x).topk(5, dim=1).indices.numpy()
                for row, want in zip(best, truth[start:start + 32]):
                    named = [lm.wnids[int(i)] for i in row]
                    top1 += named[0] == want
                    top5 += want in named
            rows.append((share, top1 / len(images), top5 / len(images)))
    took = time.perf_counter() - t0

    print(f"{len(stamps)} real cut-out photos of ImageNet-1K classes on real backgrounds, {model_name} on the CPU, {took:.0f} s")
    print("object's share of the frame's shorter side | top-1 names it | top-5 names it | "
          + " | ".join(f"px on a {t} px tile" for t in TILES))
    for share, t1, t5 in rows:
        print(f"  {share:4.2f} | {t1:5.0%} | {t5:5.0%} | " + " | ".join(f"{share * t:4.0f}" for t in TILES))
    print(f"objects the top-5 misses, and under {SEEN_PX} px on the tile (left to a person's eye, and small on screen):")
    for t in TILES:
        small = [(1 - t5) for share, _t1, t5 in rows if share * t < SEEN_PX]
        missed = [(1 - t5) for _share, _t1, t5 in rows]
        print(f"  {t} px tiles: objects under {SEEN_PX / t:.2f} of the frame are under {SEEN_PX} px; "
              f"of the planted objects the top-5 misses (all shares alike), {sum(small) / max(1e-9, sum(missed)):.0%} are that small")
    return 0


if __name__ == "__main__":
    sys.exit(main())
