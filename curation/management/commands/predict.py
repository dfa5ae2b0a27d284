import sys

from django.core.management.base import BaseCommand, CommandError
from tqdm import tqdm

from curation.management.cli import output_file
from curation.management.model_cli import add_model_arguments, files_and_model
from pipelines.export import csv_cells


class Command(BaseCommand):
    help = (
        "Top-k ImageNet-1K predictions for image files or folders (no database needed). CSV columns: "
        "path,rank,wnid,label,prob. Files that cannot be decoded are listed with their reason and skipped."
    )

    def add_arguments(self, parser):
        parser.add_argument("paths", nargs="+", help="image files and/or folders (walked recursively)")
        add_model_arguments(parser)
        parser.add_argument("--topk", type=int, default=5)
        parser.add_argument("--out", required=True, help="CSV to write; - for stdout")

    def handle(self, *args, paths, model, weights, topk, out, batch_size, workers, device, decoder, **opts):
        out = output_file(out, "--out")
        from pipelines.features.extract import extract

        if topk < 1 or topk > 1000:
            raise CommandError("--topk must be between 1 and 1000")
        files, lm = files_and_model(self, paths, model=model, weights=weights, device=device, what="predict on", decoder=decoder,
                                    batch_size=batch_size)
        with tqdm(total=len(files), desc=f"predict {model}", unit="img", file=sys.stderr, dynamic_ncols=True) as bar:
            ex = extract(lm, files, batch_size=batch_size, num_workers=workers, topk=topk, progress=bar.update, decoder=decoder)
        label = dict(zip(lm.wnids, lm.labels))
        fh = sys.stdout if out == "-" else open(out, "w", newline="", encoding="utf-8")
        try:
            w = csv_cells.Writer(fh)
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
        for note in ex.notes:
            self.stderr.write(f"note: {note}")
        if out != "-":
            by = ", ".join(f"{v} by {k}" for k, v in ex.counts.items() if v)
            self.stdout.write(self.style.SUCCESS(
                f"{len(files) - len(bad)} image(s) predicted with {model} ({lm.weights}, {lm.device}, decoder {ex.decoder}"
                f"{': ' + by if by else ''}); {len(bad)} skipped; wrote {out}"))
