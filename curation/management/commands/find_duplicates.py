import sys

from django.core.management.base import BaseCommand, CommandError
from tqdm import tqdm

from curation.management.cli import output_file
from curation.management.model_cli import add_model_arguments, files_and_model
from pipelines.export import csv_cells
from pipelines.features.near_dups import DEFAULT_MAX_PIXEL_DIFF, DEFAULT_THRESHOLD


class Command(BaseCommand):
    help = (
        "Group near-duplicate images in files or folders (no database needed): identical bytes first, "
        "then cosine similarity of the model's features (faiss) confirmed by a pixel check. CSV columns: group,path,similarity, one row "
        "per image of a group of near-duplicates, the group's representative (its largest image) first; similarity is to the "
        "representative. Images without a near-duplicate are left out (--singletons lists them, with an empty similarity)."
    )

    def add_arguments(self, parser):
        parser.add_argument("paths", nargs="+")
        parser.add_argument("--out", required=True, help="CSV to write; - for stdout")
        parser.add_argument("--threshold", type=float, default=DEFAULT_THRESHOLD, help=f"cosine similarity (default {DEFAULT_THRESHOLD})")
        parser.add_argument("--max-pixel-diff", type=float, default=DEFAULT_MAX_PIXEL_DIFF,
                            help=f"the pixel check: largest mean absolute difference of 16x16 signatures, 0-255 "
                                 f"(default {DEFAULT_MAX_PIXEL_DIFF}); inf turns it off")
        parser.add_argument("--singletons", action="store_true",
                            help="also list the images without a near-duplicate, each as its own group with an empty similarity")
        add_model_arguments(parser)

    def handle(self, *args, paths, out, threshold, max_pixel_diff, singletons=False, model, weights, batch_size, workers, device, decoder, **opts):
        out = output_file(out, "--out")
        import numpy as np

        from pipelines.features.extract import extract
        from pipelines.features.near_dups import PixelCheck, find_duplicates
        from pipelines.sources.images import sha256_file

        if not 0 < threshold <= 1:
            raise CommandError("--threshold is a cosine similarity in (0, 1]")
        files, lm = files_and_model(self, paths, model=model, weights=weights, device=device, what="compare", decoder=decoder,
                                    batch_size=batch_size)
        digests = [sha256_file(f) for f in files]
        with tqdm(total=len(files), desc="features", unit="img", file=sys.stderr, dynamic_ncols=True) as bar:
            ex = extract(lm, files, batch_size=batch_size, num_workers=workers, progress=bar.update, decoder=decoder)
        ok = [i for i, r in enumerate(ex.results) if r.ok]
        for i, r in enumerate(ex.results):
            if not r.ok:
                self.stderr.write(f"skipped {r.error}")
        feats = ex.features[[ex.results[i].row for i in ok]]
        pixels = [_pixels(files[i]) for i in ok]
        sha = [digests[i] for i in ok]
        # the duplicate search's own computation (identical bytes first, then features confirmed by
        # the pixel check), with no ID images to compare against
        _verdicts, grouping = find_duplicates(feats, np.zeros((0, feats.shape[1]), dtype=np.float32), cand_sha256=sha, ref_sha256=[],
                                              priority=[(-pixels[j], j) for j in range(len(ok))], threshold=threshold,
                                              id_threshold=1.0, looks_same=PixelCheck([files[i] for i in ok], sha, max_pixel_diff))
        sizes: dict[int, int] = {}
        for g in grouping.group_of:
            sizes[g] = sizes.get(g, 0) + 1
        multi = [n for n in sizes.values() if n > 1]
        listed = [j for j in range(len(ok)) if singletons or sizes[grouping.group_of[j]] > 1]
        # groups numbered 1.. in the order they are listed: near-duplicate groups first, then singletons
        order = sorted(listed, key=lambda j: (sizes[grouping.group_of[j]] == 1, grouping.group_of[j],
                                              j != grouping.representative[grouping.group_of[j]], j))
        number: dict[int, int] = {}
        fh = sys.stdout if out == "-" else open(out, "w", newline="", encoding="utf-8")
        try:
            w = csv_cells.Writer(fh)
            w.writerow(["group", "path", "similarity"])
            for j in order:
                g = grouping.group_of[j]
                number.setdefault(g, len(number) + 1)
                w.writerow([number[g], files[ok[j]], f"{grouping.similarity[j]:.4f}" if sizes[g] > 1 else ""])
        finally:
            if fh is not sys.stdout:
                fh.close()
        if out != "-":
            alone = len(sizes) - len(multi)
            self.stdout.write(self.style.SUCCESS(
                f"{len(ok)} image(s): {len(multi)} group(s) of near-duplicates ({sum(multi) - len(multi)} duplicate image(s) "
                f"besides their representatives); {alone} image(s) without a near-duplicate"
                + (", listed as their own groups" if singletons else ", not listed (--singletons lists them)")
                + f"; {len(files) - len(ok)} skipped; threshold {threshold}; wrote {out}"))

def _pixels(path: str) -> int:
    from PIL import Image

    try:
        with Image.open(path) as im:
            return im.width * im.height
    except Exception:
        return 0
