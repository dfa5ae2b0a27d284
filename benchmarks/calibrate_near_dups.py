"""Calibrate the near-duplicate threshold on real photos.

    .venv/bin/python benchmarks/calibrate_near_dups.py [--model efficientnet_lite0]

For each distinct real photo shipped in the scikit-image / scikit-learn wheels
(fixtures.images.DISTINCT_REAL_PHOTOS), five transformed copies are made (60% resize, JPEG
quality 25, centre crop 85%, mirror, and crop + mirror + half size + JPEG 50). Features come
from the model; the script prints the cosine similarity of every copy to its original, per
transform, and of every pair of distinct photos, and the margin between the two sets. The
default threshold (pipelines.near_dups.DEFAULT_THRESHOLD) must lie inside that margin.
"""
from __future__ import annotations

import argparse
import itertools
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="efficientnet_lite0")
    args = parser.parse_args()
    from PIL import Image

    from fixtures.demo import package_data_file
    from fixtures.images import DISTINCT_REAL_PHOTOS, transformed_copies
    from pipelines.extract import extract
    from pipelines.models import load_model
    from pipelines.near_dups import DEFAULT_THRESHOLD, normalise

    lm = load_model(args.model)
    with tempfile.TemporaryDirectory() as tmp:
        originals, copies = [], []  # paths; copies as (photo index, transform, path)
        for i, (pkg, name) in enumerate(DISTINCT_REAL_PHOTOS):
            src = package_data_file(pkg, name)
            originals.append(str(src))
            with Image.open(src) as im:
                for t, data in transformed_copies(im).items():
                    p = Path(tmp) / f"{i:02d}_{t}"
                    p.write_bytes(data)
                    copies.append((i, t.split(".")[0], str(p)))
        ex = extract(lm, originals + [c[2] for c in copies], batch_size=16)
    feats = normalise(ex.features.astype(np.float32))
    orig, cop = feats[: len(originals)], feats[len(originals):]
    by_transform: dict[str, list[float]] = {}
    for (i, t, _), f in zip(copies, cop):
        by_transform.setdefault(t, []).append(float(f @ orig[i]))
    distinct = [float(orig[a] @ orig[b]) for a, b in itertools.combinations(range(len(orig)), 2)]
    # a copy against every *other* original is also a distinct pair
    cross = [float(f @ orig[j]) for (i, _t, _p), f in zip(copies, cop) for j in range(len(orig)) if j != i]
    print(f"model {args.model}, {len(originals)} distinct real photos, {len(copies)} transformed copies")
    print("copy vs its original (cosine):")
    for t, sims in by_transform.items():
        print(f"  {t:<10} min {min(sims):.3f}  median {np.median(sims):.3f}")
    lowest_copy = min(min(s) for s in by_transform.values())
    highest_distinct = max(max(distinct), max(cross))
    print(f"distinct photos: max {max(distinct):.3f} (originals), {max(cross):.3f} (copies vs other originals); "
          f"median {np.median(distinct):.3f}")
    all_copies = [x for sims in by_transform.values() for x in sims]
    print("recall of copies / false matches among distinct pairs, by threshold:")
    for t in (0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.9):
        rec = np.mean([x >= t for x in all_copies])
        fp = np.mean([x >= t for x in distinct + cross])
        print(f"  {t:.2f}  copies found {rec:6.1%}  distinct pairs matched {fp:6.2%}")
    print(f"margin: lowest copy {lowest_copy:.3f} > highest distinct {highest_distinct:.3f}: "
          f"{'separable' if lowest_copy > highest_distinct else 'NOT separable'}; default threshold {DEFAULT_THRESHOLD}")


if __name__ == "__main__":
    main()
