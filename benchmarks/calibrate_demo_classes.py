"""Measure each offline model on the demo's calibration composites (6 per ImageNet-1K class among
Tux Paint's photo cut-outs, seeded) and record the per-class accuracy in
fixtures/id_calibration.json, which the demo reads to choose its ID classes (classes at >= 70%)
instead of running the model on ~500 images at every fresh start. The demo measures it live when
the record does not match its model and settings.

    .venv/bin/python benchmarks/calibrate_demo_classes.py [--models efficientnet_lite0,efficientnet_lite2]
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

CALIBRATION_PER_CLASS = 6
CALIBRATION_SEED = 7919  # generate_real_demo's default: seed 0 + 7919


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="efficientnet_lite0,efficientnet_lite2")
    args = parser.parse_args()
    from fixtures.real_photos import CALIBRATION, MIN_ID_ACCURACY, calibration_key, check_installed, select_id_classes, stamp_table
    from pipelines.classes.imagenet import named_list
    from pipelines.features.classifiers import load_model, top1_wnids

    check_installed()
    recorded = json.loads(CALIBRATION.read_text()) if CALIBRATION.is_file() else {}
    ids = set(named_list("imagenet-1k"))
    for name in args.models.split(","):
        t0 = time.monotonic()
        lm = load_model(name, device="cpu")
        acc = select_id_classes(stamp_table(), ids, lambda ims: top1_wnids(lm, ims), per_class=CALIBRATION_PER_CLASS,
                                seed=CALIBRATION_SEED)
        kept = sum(1 for a in acc.values() if a >= MIN_ID_ACCURACY)
        mean = sum(acc.values()) / len(acc)
        print(f"{name}: {len(acc)} classes x {CALIBRATION_PER_CLASS} composites in {time.monotonic() - t0:.0f} s; "
              f"mean top-1 {100 * mean:.1f}%; {kept} classes at >= {MIN_ID_ACCURACY:.0%}")
        recorded[name] = {"key": calibration_key(name, per_class=CALIBRATION_PER_CLASS, seed=CALIBRATION_SEED),
                          "mean_accuracy": round(mean, 4), "accuracy": dict(sorted(acc.items()))}
    CALIBRATION.write_text(json.dumps(recorded, indent=1, sort_keys=True) + "\n")
    print(f"wrote {CALIBRATION}")


if __name__ == "__main__":
    main()
