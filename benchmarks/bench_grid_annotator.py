"""A scripted annotator who knows the answers works through 1,000 images of 20 classes of
uneven sizes (23 to 77 images: none a multiple of a page) with 2% ID images planted, once on the
single-image screen (the baseline) and once in grid review, in Debian's headless Chromium at
1366x768 against a live server on PostgreSQL: keys, clicks, server requests, page waits, wall
time, every planted image recorded as id, no image twice, and the person's time by a
keystroke-level model (issues 30 and 48).

Each image is a real JPEG file (generated pictures, 320x240), predictions are rows (top-5 of
real ImageNet-1K wnids). Most planted images have the ID class they show as top-1 (the answer is
I then 1 on the single screen, one click on the tile in the grid); one in five has it nowhere in
its top-5, so the class is searched (I, "tabby", Enter on both screens; in the grid a click on
the tile first). Both annotators review every image (two reviews per image). The annotator waits
for what a person must see before deciding: the image on the single-image screen, every
thumbnail of the page in the grid. The grid runs at its default tile size (128 px: as many tiles
as fit the window).

The keystroke-level model (Card, Moran and Newell's operators, the values of issue 48):
M = 1.35 s per mental step, K = 0.28 s per key or click, G = 0.2 s to glance at an image (also
given at 0.4 s), P = 1.1 s to point the mouse at a tile (given separately: issue 48's figure
leaves it out). Mental steps: one per image decided on the single screen, one per page in the
grid (taking in the page), and on both screens one more for each ID image (recognising it) and
one for choosing its class. Glances: one per image on both screens. Waiting for the server is
not in the model; the page waits and the wall time are reported beside it.

    bash scripts/services.sh
    .venv/bin/python benchmarks/bench_grid_annotator.py [--images 1000] [--classes 20] [--port 8102]
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from scripts.serving import runserver_argv, served  # noqa: E402

PLANTED_WNID = "n02123045"  # tabby cat
M, K, P = 1.35, 0.28, 1.1


def class_sizes(n: int, n_classes: int) -> list[int]:
    """Uneven class sizes summing to ``n`` (for 1,000 over 20: 23 to 77, none a multiple of a page)."""
    base = [23, 77, 41, 58, 37, 66, 29, 53, 71, 44, 35, 62, 47, 55, 31, 69, 39, 50, 57, 56]
    sizes = [max(1, round(b * n / sum(base[:n_classes]))) for b in base[:n_classes]]
    sizes[0] += n - sum(sizes)
    return sizes


def person_seconds(r: dict, glance: float, point: float = 0.0) -> float:
    return M * r["mental"] + K * (r["keys"] + r["clicks"]) + glance * r["glances"] + point * r["clicks"]


def populate(n: int, n_classes: int, root: Path) -> set[int]:
    import numpy as np
    from django.conf import settings
    from django.core.management import call_command

    from curation.models import Image, ImageEmbedding, Source
    from curation.roles import ANNOTATOR
    from curation.services.review import review_queue_sync, review_settings_save
    from curation.services.users import user_create_with_role
    from fixtures.images import jpeg_bytes, pattern_image, write
    from pipelines.classes.imagenet import named_list

    call_command("set_id_classes", "imagenet-1k", stdout=open(os.devnull, "w"))
    wnids = [w for w in named_list("imagenet-1k") if w != PLANTED_WNID]
    classes = ["n09308572", "n11517776", "n09270735", "n09472597", "n09403734", "n09246464", "n09193705", "n09428293",
               "n09288635", "n09332890", "n09399592", "n09421951", "n09433442", "n09444783", "n09468604", "n09475292",
               "n09229709", "n09218315", "n09217230", "n09215664"][:n_classes]
    rng = np.random.default_rng(0)
    kinds = ("dots", "stripes", "checker", "blobs", "gradient")
    i = 0
    for cls, count in zip(classes, class_sizes(n, n_classes)):
        for _ in range(count):
            palette = [tuple(int(c) for c in rng.integers(0, 255, 3)) for _ in range(3)]
            write(root / cls / f"img_{i:05d}.jpg", jpeg_bytes(pattern_image(rng, kinds[i % 5], palette, (320, 240))))
            i += 1
    call_command("add_source", "pool", str(root), stdout=open(os.devnull, "w"), stderr=open(os.devnull, "w"))
    source = Source.objects.get(name="pool")
    images = list(Image.objects.filter(source=source, status="ok").order_by("id"))
    planted_list = [int(im.pk) for im in rng.choice(images, size=max(1, n // 50), replace=False)]
    planted = set(planted_list)
    searched = set(planted_list[::5])  # one in five: the class is not among the top-5
    rows = []
    for k, im in enumerate(images):
        top = [[wnids[(k * 7 + j * 13) % len(wnids)], p] for j, p in enumerate((0.41, 0.22, 0.12, 0.08, 0.05))]
        if im.pk in planted and im.pk not in searched:
            top[0][0] = PLANTED_WNID
        rows.append(ImageEmbedding(image=im, model_name=settings.DEFAULT_MODEL, topk=top, top1_wnid=top[0][0], top1_prob=0.41,
                                   max_softmax=0.41, nearest_id_similarity=float(rng.random())))
    ImageEmbedding.objects.bulk_create(rows)
    review_queue_sync(source=source)
    review_settings_save(source=source, reviews_required=2)
    for name in ("single", "grid"):
        user_create_with_role(username=name, password=f"{name}-pw-bench", role=ANNOTATOR)
    return planted, searched


def login(page, base, user):
    page.goto(f"{base}/accounts/login/?next=/review/")
    page.fill("#id_username", user)
    page.fill("#id_password", f"{user}-pw-bench")
    page.press("#id_password", "Enter")
    page.wait_for_url(f"{base}/review/")


def search_class(page) -> int:
    """I is pressed; the class is searched by name and recorded: the keys it took."""
    page.keyboard.type("tabby")
    page.wait_for_function("[...document.querySelectorAll('#results li')].some((li) => li.textContent.includes('tabby'))")
    page.keyboard.press("Enter")
    return len("tabby") + 1


def run_single(page, base, planted, searched) -> dict:
    requests = []
    page.on("request", lambda r: requests.append(r.url) if "/api/" in r.url else None)
    keys = mental = glances = waits = 0
    waited = 0.0
    page.goto(f"{base}/review/screen/")
    t0 = time.perf_counter()
    done = 0
    while True:
        w0 = time.perf_counter()
        page.wait_for_function("document.querySelector('#review').classList.contains('is-empty') || "
                               "(document.querySelector('#photo').dataset.image && document.querySelector('#photo').complete)")
        waited += time.perf_counter() - w0
        waits += 1
        if page.evaluate("document.querySelector('#review').classList.contains('is-empty')"):
            break
        image = int(page.get_attribute("#photo", "data-image"))
        glances += 1
        mental += 1
        if image in planted:
            mental += 2  # recognising the ID object, choosing its class
            page.keyboard.press("i")
            keys += 1
            if image in searched:
                keys += search_class(page)
            else:
                page.keyboard.press("1")
                keys += 1
        else:
            page.keyboard.press("o")
            keys += 1
        done += 1
        w0 = time.perf_counter()
        page.wait_for_function(f"document.querySelector('#status').textContent.includes('{done} reviewed this session') || "
                               "document.querySelector('#status').classList.contains('error')")
        waited += time.perf_counter() - w0
    return {"wall": time.perf_counter() - t0, "keys": keys, "clicks": 0, "requests": len(requests), "decisions": done,
            "mental": mental, "glances": glances, "waits": waits, "waited": waited, "pages": done, "page_sizes": []}


def run_grid(page, base, planted, searched) -> dict:
    requests = []
    page.on("request", lambda r: requests.append(r.url) if "/api/" in r.url else None)
    keys = clicks = mental = glances = waits = 0
    waited = 0.0
    page_sizes: list[tuple[str, int]] = []
    page.goto(f"{base}/review/grid/")
    t0 = time.perf_counter()
    page.wait_for_function("document.querySelector('#grid-review').dataset.page === '0'")
    pages = 0
    while True:
        w0 = time.perf_counter()
        page.wait_for_function("document.querySelector('#grid-review').classList.contains('is-empty') || "
                               "[...document.querySelectorAll('#tiles .tile img')].every((i) => i.complete && i.naturalWidth > 0)")
        waited += time.perf_counter() - w0
        waits += 1
        tiles = page.eval_on_selector_all("#tiles .tile", "els => els.map(e => +e.dataset.image)")
        if not tiles:
            break
        page_sizes.append((page.inner_text("#ood-label"), len(tiles)))
        mental += 1  # taking in the page (its class, what to watch for)
        glances += len(tiles)
        for pos, image in enumerate(tiles):
            if image not in planted:
                continue
            mental += 2  # recognising the ID object, choosing its class (its caption, or a search)
            page.click(f"#tiles .tile >> nth={pos}")  # id with its top-1
            clicks += 1
            if image in searched:  # the top-1 is not it: I and the class's name, on the tile just clicked
                page.keyboard.press("i")
                keys += 1 + search_class(page)
        pages += 1
        page.keyboard.press("Enter")
        keys += 1
        w0 = time.perf_counter()
        page.wait_for_function(f"document.querySelector('#grid-review').dataset.page === '{pages}' && "
                               "!document.querySelector('#grid-review').classList.contains('saving')")
        waited += time.perf_counter() - w0
    return {"wall": time.perf_counter() - t0, "keys": keys, "clicks": clicks, "requests": len(requests), "pages": pages,
            "mental": mental, "glances": glances, "waits": waits, "waited": waited, "page_sizes": page_sizes,
            "tile": page.inner_text("#size-label")}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--images", type=int, default=1000)
    ap.add_argument("--classes", type=int, default=20)
    ap.add_argument("--port", type=int, default=8102)
    args = ap.parse_args()
    from bench_review_load import recreate_database

    admin = os.environ.get("DATABASE_URL", "postgres://oodc:oodc@127.0.0.1:5432/oodc")
    url = recreate_database(admin, "oodc_bench_grid_ui")
    data = Path(tempfile.mkdtemp(prefix="oodc-bench-grid-ui-"))
    env = {**os.environ, "DATABASE_URL": url, "DJANGO_SETTINGS_MODULE": "curation.settings", "OODC_DATA_DIR": str(data),
           "DJANGO_DEBUG": "1", "NLTK_DATA": os.environ.get("NLTK_DATA", str(REPO / "var" / "nltk_data")), "OODC_JOBS_IN_BACKGROUND": "0"}
    os.environ.update(env)
    subprocess.run([sys.executable, "manage.py", "migrate", "--noinput", "-v", "0"], cwd=REPO, env=env, check=True)
    import django

    django.setup()
    planted, searched = populate(args.images, args.classes, data / "pool")
    results = {}
    with served(runserver_argv(args.port), env=env, port=args.port, quiet=True) as base:
        from playwright.sync_api import sync_playwright

        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=["--no-sandbox"])
            for name, run in (("single", run_single), ("grid", run_grid)):
                page = browser.new_context(viewport={"width": 1366, "height": 768}).new_page()
                login(page, base, name)
                results[name] = run(page, base, planted, searched)
                page.context.close()
            browser.close()

    from django.db.models import Count

    from curation.models import Review

    print(f"{args.images} images of {args.classes} classes, {len(planted)} ID images planted; Chromium 1366x768, runserver, PostgreSQL, "
          f"{os.cpu_count()} CPUs (browser and server share them)")
    for name, r in results.items():
        reviews = Review.objects.filter(annotator__username=name)
        as_id = set(reviews.filter(decision="id").values_list("item__image_id", flat=True))
        twice = reviews.values("item").annotate(n=Count("id")).filter(n__gt=1).count()
        print(f"  {name:6s}: {reviews.count():5d} decisions, {r['keys']:5d} keypresses, {r['requests']:5d} API requests, "
              f"{r['wall']:7.1f} s wall; planted recorded as id {len(as_id & planted)}/{len(planted)}, other ids {len(as_id - planted)}, "
              f"images twice {twice}")
    s, g = results["single"], results["grid"]
    print(f"  class sizes {class_sizes(args.images, args.classes)}; {len(searched)} of the planted need the class search")
    for name, r in results.items():
        print(f"  {name:6s}: keys {r['keys']}, clicks {r['clicks']}, mental steps {r['mental']}, glances {r['glances']}, "
              f"page waits {r['waits']} ({r['waited']:.1f} s waited), pages {r['pages']}")
    sizes = [n for _label, n in g["page_sizes"]]
    by_class: dict[str, list[int]] = {}
    for label, n in g["page_sizes"]:
        by_class.setdefault(label, []).append(n)
    page = max(set(sizes), key=sizes.count) if sizes else 0  # the page size the window holds (the most common)
    stubs = [(label, ns) for label, ns in by_class.items() if len(ns) > 1 and min(ns) * 2 < page]
    print(f"  grid pages ({g.get('tile', '')} at first): sizes {sorted(sizes)}; pages under half a page that are not their "
          f"class's only page: {len(stubs)} {stubs[:3]}")
    print(f"  grid / single-image screen: keys {g['keys'] / s['keys']:.3f}, keys+clicks {(g['keys'] + g['clicks']) / s['keys']:.3f}, "
          f"requests {g['requests'] / s['requests']:.3f}, page waits {g['waits'] / s['waits']:.3f}, "
          f"wall time {g['wall'] / s['wall']:.3f} ({s['wall'] / g['wall']:.1f}x sooner)")
    for glance in (0.2, 0.4):
        ps, pg = person_seconds(s, glance), person_seconds(g, glance)
        pgp = person_seconds(g, glance, P)
        print(f"  person's time (M {M} s, K {K} s, G {glance} s): single {ps:.0f} s, grid {pg:.0f} s = {pg / ps:.3f}x "
              f"({ps / pg:.1f}x sooner); with P {P} s to point at each clicked tile: grid {pgp:.0f} s = {pgp / ps:.3f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
