"""Calibrate the near-duplicate threshold on real photos.

    .venv/bin/python benchmarks/calibrate_near_dups.py [--model efficientnet_lite0]

For each distinct real photo shipped in the scikit-image / scikit-learn wheels
(fixtures.images.DISTINCT_REAL_PHOTOS), five transformed copies are made (60% resize, JPEG
quality 25, centre crop 85%, mirror, and crop + mirror + half size + JPEG 50). Features come
from the model; the script prints the cosine similarity of every copy to its original, per
transform, and of every pair of distinct photos, with the recall/false-match trade-off by
threshold; then the pixel check (pipelines.features.near_dups.pixel_difference) on the copies, and on
look-alikes: the demo's generated pictures (flat gradients, stripes, noise) against its
generated ID pictures, which classifier features rate as similar as real copies.
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
    from pipelines.features.classifiers import load_model
    from pipelines.features.extract import extract
    from pipelines.features.near_dups import DEFAULT_THRESHOLD, normalise

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

    # the pixel check
    from fixtures.demo import GENERATED_CLASSES, generate_demo
    from pipelines.features.near_dups import DEFAULT_MAX_PIXEL_DIFF, pixel_difference, pixel_signature

    sig_orig = [pixel_signature(p) for p in originals]
    with tempfile.TemporaryDirectory() as tmp:
        diffs: dict[str, list[float]] = {}
        for i, (pkg, name) in enumerate(DISTINCT_REAL_PHOTOS):
            with Image.open(package_data_file(pkg, name)) as im:
                for t, data in transformed_copies(im).items():
                    p = Path(tmp) / f"{i:02d}_{t}"
                    p.write_bytes(data)
                    diffs.setdefault(t.split(".")[0], []).append(pixel_difference(sig_orig[i], pixel_signature(p)))
        demo = generate_demo(Path(tmp) / "demo")
        gen = [str(p) for c in GENERATED_CLASSES for p in sorted((demo.candidates / c).glob("*"))[:8] if p.is_file()]
        real = {name for _pkg, name in DISTINCT_REAL_PHOTOS}
        ref = [str(p) for p in sorted(demo.id_reference.glob("*/*")) if p.name not in real]
        ex2 = extract(lm, gen + ref, batch_size=16)
        f2 = normalise(ex2.features.astype(np.float32))
        ok2 = [i for i, r in enumerate(ex2.results) if r.ok]
        g_rows = [ex2.results[i].row for i in ok2 if i < len(gen)]
        r_rows = [ex2.results[i].row for i in ok2 if i >= len(gen)]
        g_paths = [gen[i] for i in ok2 if i < len(gen)]
        r_paths = [ref[i - len(gen)] for i in ok2 if i >= len(gen)]
        sims2 = f2[g_rows] @ f2[r_rows].T
        pairs = np.argwhere(sims2 >= DEFAULT_THRESHOLD)
        sg = {p: pixel_signature(p) for p in set(g_paths) | set(r_paths)}
        passed = sum(pixel_difference(sg[g_paths[a]], sg[r_paths[b]]) <= DEFAULT_MAX_PIXEL_DIFF for a, b in pairs)
    print(f"pixel check (max difference {DEFAULT_MAX_PIXEL_DIFF}):")
    for t, d in diffs.items():
        print(f"  copy {t:<10} max {max(d):5.1f}  median {np.median(d):5.1f}")
    print(f"  distinct real photos: min {min(pixel_difference(sig_orig[a], sig_orig[b]) for a, b in itertools.combinations(range(len(sig_orig)), 2)):.1f}")
    print(f"look-alikes: {len(g_rows)} generated candidates x {len(r_rows)} generated ID pictures: {len(pairs)} pairs reach cosine "
          f">= {DEFAULT_THRESHOLD}; {passed} of them also pass the pixel check (would be dropped as duplicates of ID images)")


if __name__ == "__main__":
    main()
