import csv
import sys

from django.core.management.base import BaseCommand, CommandError
from tqdm import tqdm

from pipelines.models import PRODUCTION_MODEL, ModelUnavailable


class Command(BaseCommand):
    help = (
        "Top-k ImageNet-1K predictions for image files or folders (no database needed). CSV columns: "
        "path,rank,wnid,label,prob. Files that cannot be decoded are listed with their reason and skipped."
    )

    def add_arguments(self, parser):
        parser.add_argument("paths", nargs="+", help="image files and/or folders (walked recursively)")
        parser.add_argument("--model", default="efficientnet_lite0",
                            help=f"a registered model or any timm name (production choice: {PRODUCTION_MODEL})")
        parser.add_argument("--weights", help="a checkpoint file for the model (where the hub is unreachable)")
        parser.add_argument("--topk", type=int, default=5)
        parser.add_argument("--out", required=True, help="CSV to write; - for stdout")
        parser.add_argument("--batch-size", type=int, default=32)
        parser.add_argument("--workers", type=int, default=None, help="DataLoader worker processes (default: CPUs - 1, at most 4)")
        parser.add_argument("--device", default=None, help="cpu, cuda, cuda:1 ... (default: cuda when available)")

    def handle(self, *args, paths, model, weights, topk, out, batch_size, workers, device, **opts):
        from pipelines.extract import extract
        from pipelines.models import load_model
        from pipelines.sources import list_files

        if topk < 1 or topk > 1000:
            raise CommandError("--topk must be between 1 and 1000")
        files, problems = list_files(paths)
        for p, why in problems:
            self.stderr.write(f"skipped {p}: {why}")
        if not files:
            raise CommandError("no files to predict on")
        try:
            lm = load_model(model, weights=weights, device=device)
        except ModelUnavailable as exc:
            raise CommandError(str(exc)) from None
        with tqdm(total=len(files), desc=f"predict {model}", unit="img", file=sys.stderr, dynamic_ncols=True) as bar:
            ex = extract(lm, files, batch_size=batch_size, num_workers=workers, topk=topk, progress=bar.update)
        label = dict(zip(lm.wnids, lm.labels))
        fh = sys.stdout if out == "-" else open(out, "w", newline="", encoding="utf-8")
        try:
            w = csv.writer(fh)
            w.writerow(["path", "rank", "wnid", "label", "prob"])
            for path, r in zip(files, ex.results):
                for rank, (wnid, prob) in enumerate(r.topk, start=1):
                    w.writerow([path, rank, wnid, label[wnid], f"{prob:.6f}"])
        finally:
            if fh is not sys.stdout:
                fh.close()
        bad = [(p, r.error) for p, r in zip(files, ex.results) if not r.ok]
        for p, err in bad:
            self.stderr.write(f"skipped {err}")
        if out != "-":
            self.stdout.write(self.style.SUCCESS(
                f"{len(files) - len(bad)} image(s) predicted with {model} ({lm.weights}, {lm.device}); {len(bad)} skipped; wrote {out}"))
