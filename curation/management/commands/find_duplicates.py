import sys

from django.core.management.base import BaseCommand, CommandError
from curation.management.cli import output_file
from tqdm import tqdm

from curation.management.model_cli import add_model_arguments, files_and_model
from pipelines.near_dups import DEFAULT_MAX_PIXEL_DIFF, DEFAULT_THRESHOLD
from pipelines import csv_cells


class Command(BaseCommand):
    help = (
        "Group near-duplicate images in files or folders (no database needed): identical bytes first, "
        "then cosine similarity of the model's features (faiss) confirmed by a pixel check. CSV columns: group,path,similarity, one row "
        "per readable image; a singleton is its own group; similarity is to the group's representative "
        "(its largest image)."
    )

    def add_arguments(self, parser):
        parser.add_argument("paths", nargs="+")
        parser.add_argument("--out", required=True, help="CSV to write; - for stdout")
        parser.add_argument("--threshold", type=float, default=DEFAULT_THRESHOLD, help=f"cosine similarity (default {DEFAULT_THRESHOLD})")
        parser.add_argument("--max-pixel-diff", type=float, default=DEFAULT_MAX_PIXEL_DIFF,
                            help=f"the pixel check: largest mean absolute difference of 16x16 signatures, 0-255 (default {DEFAULT_MAX_PIXEL_DIFF}); inf turns it off")
        add_model_arguments(parser)

    def handle(self, *args, paths, out, threshold, max_pixel_diff, model, weights, batch_size, workers, device, decoder, **opts):
        out = output_file(out, "--out")
        from pipelines.extract import extract
        from pipelines.images import sha256_file
        from pipelines.near_dups import group_near_duplicates, pixel_difference, pixel_signature

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
        first_with_digest: dict[str, int] = {}
        same = []
        for j, i in enumerate(ok):  # identical bytes are duplicates whatever the features say
            if digests[i] in first_with_digest:
                same.append((first_with_digest[digests[i]], j))
            else:
                first_with_digest[digests[i]] = j
        pixels = [_pixels(files[i]) for i in ok]
        signatures: dict[int, object] = {}

        def sig(j):
            if j not in signatures:
                signatures[j] = pixel_signature(files[ok[j]])
            return signatures[j]

        def looks_same(a, b):
            return digests[ok[a]] == digests[ok[b]] or pixel_difference(sig(a), sig(b)) <= max_pixel_diff

        grouping = group_near_duplicates(feats, threshold=threshold, same=same, priority=[(-pixels[j], j) for j in range(len(ok))],
                                         verify=looks_same)
        fh = sys.stdout if out == "-" else open(out, "w", newline="", encoding="utf-8")
        try:
            w = csv_cells.Writer(fh)
            w.writerow(["group", "path", "similarity"])
            order = sorted(range(len(ok)), key=lambda j: (grouping.group_of[j], j != grouping.representative[grouping.group_of[j]], j))
            for j in order:
                w.writerow([grouping.group_of[j] + 1, files[ok[j]], f"{grouping.similarity[j]:.4f}"])
        finally:
            if fh is not sys.stdout:
                fh.close()
        sizes = {}
        for g in grouping.group_of:
            sizes[g] = sizes.get(g, 0) + 1
        multi = [n for n in sizes.values() if n > 1]
        if out != "-":
            self.stdout.write(self.style.SUCCESS(
                f"{len(ok)} image(s): {len(sizes)} group(s), {len(multi)} with near-duplicates ({sum(multi) - len(multi)} "
                f"duplicate image(s)); {len(files) - len(ok)} skipped; threshold {threshold}; wrote {out}"))


def _pixels(path: str) -> int:
    from PIL import Image

    try:
        with Image.open(path) as im:
            return im.width * im.height
    except Exception:
        return 0
