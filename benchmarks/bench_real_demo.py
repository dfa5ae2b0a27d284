"""The demo's real-photo data as a benchmark: ID accuracy of each offline model, detector AUROCs on
the clean export, and how many of the planted ID objects each detector and the similarity-to-ID
ranking (the duplicate search's nearest ID image) put in the top 5% of the candidate pool (the
images of the classes the class filter kept or flagged: the ones the review can meet).

Run after the demo, on its data folder (it runs the demo first when there is none)::

    OODC_DATA_DIR=/tmp/demo-bench .venv/bin/python benchmarks/bench_real_demo.py [--models efficientnet_lite0,efficientnet_lite2]

Every model sees the same files through its own timm transform (Pillow path, the CPU). The
detectors are fitted on the demo's ID fit set (``demo-id-fit``) and scored on the ID test set, the
clean export's images and the whole candidate pool. Prints tables; writes nothing in the database.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "curation.settings")


# the demo's own settings for the few detectors whose defaults need more ID fit images than it has
DEMO_PARAMS = {"vim": {"dim": 64}}


def outputs(lm, paths: list[str], batch: int = 32):
    """Penultimate features and logits of ``lm`` for image files (float32)."""
    import torch
    from PIL import Image

    feats, logits = [], []
    with torch.inference_mode():
        for start in range(0, len(paths), batch):
            ims = []
            for p in paths[start:start + batch]:
                with Image.open(p) as im:
                    ims.append(lm.transform(im.convert("RGB")))
            x = torch.stack(ims)
            f = lm.model.forward_head(lm.model.forward_features(x), pre_logits=True)
            feats.append(f.float().numpy())
            logits.append(lm.model.get_classifier()(f).float().numpy())
    return np.concatenate(feats), np.concatenate(logits)


def auroc(id_scores: np.ndarray, ood_scores: np.ndarray) -> float:
    from sklearn.metrics import roc_auc_score

    y = np.r_[np.ones(len(id_scores)), np.zeros(len(ood_scores))]
    return float(roc_auc_score(y, np.r_[id_scores, ood_scores]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="efficientnet_lite0,efficientnet_lite2")
    parser.add_argument("--top", type=float, default=0.05, help="share of the pool counted as surfaced (default 0.05)")
    args = parser.parse_args()
    import django

    django.setup()
    from django.conf import settings

    from curation.models import ExportMember, Image, ImageEmbedding, Source
    from fixtures.real_photos import read_answer_key
    from pipelines.evaluation.detectors import DetectorError, Head, Outputs, detector_names, get_detector
    from pipelines.features.classifiers import linear_head, load_model

    demo = Path(settings.DATA_DIR) / "demo"
    if not (demo / "answer_key.csv").is_file() or not Source.objects.filter(name="demo-candidates").exists():
        print(f"no demo data in {settings.DATA_DIR}: running `manage.py demo --no-serve` first", flush=True)
        subprocess.run([sys.executable, "manage.py", "migrate", "-v", "0"], cwd=REPO, check=True)
        subprocess.run([sys.executable, "manage.py", "demo", "--no-serve"], cwd=REPO, check=True, stdout=subprocess.DEVNULL)
    key = read_answer_key(demo / "answer_key.csv")
    planted = {rel for rel, (d, _w) in key.items() if d == "id"}

    def files(source: str, **filters) -> list[tuple[str, str, str]]:
        src = Source.objects.get(name=source)
        rows = Image.objects.filter(source=src, status=Image.Status.OK, **filters).select_related("candidate_class").order_by("pk")
        return [(str(Path(src.root) / i.relative_path), i.relative_path, i.candidate_class.wnid if i.candidate_class else "")
                for i in rows]

    # the pool: the candidates the demo ran the model on (the classes the filter kept or flagged)
    extracted = ImageEmbedding.objects.filter(image__source__name="demo-candidates", model_name=settings.DEFAULT_MODEL, ok=True)
    fit, test = files("demo-id-fit"), files("demo-id-test")
    pool = files("demo-candidates", pk__in=extracted.values("image_id"))
    export_ids = set(ExportMember.objects.filter(export__name="demo-clean", export__status="done").values_list("image_id", flat=True))
    clean = files("demo-candidates", pk__in=export_ids)
    print(f"demo data in {demo}: ID fit {len(fit)}, ID test {len(test)} in {len({w for _p, _r, w in test})} classes, "
          f"candidate pool {len(pool)} with {len(planted)} planted ID objects, clean export {len(clean)}")

    # the similarity-to-ID ranking the review queue uses (nearest ID image, from the duplicate search)
    sims = dict(ImageEmbedding.objects.filter(image__source__name="demo-candidates", model_name=settings.DEFAULT_MODEL)
                .values_list("image__relative_path", "nearest_id_similarity"))
    top_n = max(1, int(round(args.top * len(pool))))
    in_pool = [rel for _p, rel, _w in pool]
    planted_in_pool = [r for r in in_pool if r in planted]

    def surfaced(scores: np.ndarray) -> int:
        order = np.argsort(-scores, kind="stable")[:top_n]
        return sum(1 for i in order if in_pool[i] in planted)

    ranked = np.array([sims.get(r) if sims.get(r) is not None else -1.0 for r in in_pool])
    print(f"\nplanted ID objects in the top {args.top:.0%} ({top_n} of {len(pool)} images; {len(planted_in_pool)} planted, "
          f"chance {len(planted_in_pool) * args.top:.1f}):")
    print(f"  similarity to the nearest ID image ({settings.DEFAULT_MODEL}, the review queue's order): {surfaced(ranked)}")

    for name in args.models.split(","):
        t0 = time.monotonic()
        lm = load_model(name, device="cpu")
        sets = {k: outputs(lm, [p for p, _r, _w in v]) for k, v in (("fit", fit), ("test", test), ("pool", pool), ("clean", clean))}
        index = {w: i for i, w in enumerate(lm.wnids)}
        labels = np.array([index.get(w, -1) for _p, _r, w in fit])
        truth = np.array([index.get(w, -1) for _p, _r, w in test])
        accuracy = float((sets["test"][1].argmax(1) == truth).mean())
        weight, bias = linear_head(lm)
        head = Head(weight=weight, bias=bias)
        print(f"\n{name}: ID accuracy {100 * accuracy:.1f}% on {len(test)} ID test images "
              f"({time.monotonic() - t0:.0f} s to extract {sum(len(v[0]) for v in sets.values())} images)")
        print(f"  {'detector':<24} {'AUROC clean':>11} {'planted in top':>15}")
        for det in detector_names():
            try:
                d = get_detector(det, **DEMO_PARAMS.get(det, {})).fit(Outputs(*sets["fit"], labels=labels), head)
                s_test = d.score(Outputs(*sets["test"]))
                s_clean = d.score(Outputs(*sets["clean"]))
                s_pool = d.score(Outputs(*sets["pool"]))
            except (DetectorError, KeyError, NotImplementedError) as exc:
                reason = "input-level (computed while extracting; the demo leaves it out)" if getattr(
                    get_detector(det), "input_level", False) else str(exc).splitlines()[0][:90]
                print(f"  {det:<24} skipped: {reason}")
                continue
            print(f"  {det:<24} {100 * auroc(s_test, s_clean):11.1f} {surfaced(np.asarray(s_pool, dtype=float)):>15}")


if __name__ == "__main__":
    main()
