"""A scripted annotator who knows the answers works through 1,000 images of 20 classes with 2%
ID images planted, once on the single-image screen (the baseline) and once in grid review, in
Debian's headless Chromium at 1366x768 against a live server on PostgreSQL (issue 30's numbers:
keypresses, server requests, wall time; every planted image recorded as id, no image twice).

Each image is a real JPEG file (generated pictures, 320x240), predictions are rows (top-5 of
real ImageNet-1K wnids; a planted image's top-1 is the ID class it shows, so the annotator's
answer is I then 1). Both annotators review every image (two reviews per image). The annotator
waits for what a person must see before deciding: the image on the single-image screen, every
thumbnail of the page in the grid.

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


def populate(n: int, n_classes: int, root: Path) -> set[int]:
    import numpy as np
    from django.conf import settings
    from django.core.management import call_command

    from curation.models import Image, ImageEmbedding, Source
    from curation.roles import ANNOTATOR
    from curation.services.review import review_queue_sync, review_settings_save
    from curation.services.users import user_create_with_role
    from fixtures.images import jpeg_bytes, pattern_image, write
    from pipelines.imagenet import named_list

    call_command("set_id_classes", "imagenet-1k", stdout=open(os.devnull, "w"))
    wnids = [w for w in named_list("imagenet-1k") if w != PLANTED_WNID]
    classes = ["n09308572", "n11517776", "n09270735", "n09472597", "n09403734", "n09246464", "n09193705", "n09428293",
               "n09288635", "n09332890", "n09399592", "n09421951", "n09433442", "n09444783", "n09468604", "n09475292",
               "n09229709", "n09218315", "n09217230", "n09215664"][:n_classes]
    rng = np.random.default_rng(0)
    kinds = ("dots", "stripes", "checker", "blobs", "gradient")
    for i in range(n):
        palette = [tuple(int(c) for c in rng.integers(0, 255, 3)) for _ in range(3)]
        write(root / classes[i % n_classes] / f"img_{i:05d}.jpg", jpeg_bytes(pattern_image(rng, kinds[i % 5], palette, (320, 240))))
    call_command("add_source", "pool", str(root), stdout=open(os.devnull, "w"), stderr=open(os.devnull, "w"))
    source = Source.objects.get(name="pool")
    images = list(Image.objects.filter(source=source, status="ok").order_by("id"))
    planted = {im.pk for im in rng.choice(images, size=max(1, n // 50), replace=False)}
    rows = []
    for k, im in enumerate(images):
        top = [[wnids[(k * 7 + j * 13) % len(wnids)], p] for j, p in enumerate((0.41, 0.22, 0.12, 0.08, 0.05))]
        if im.pk in planted:
            top[0][0] = PLANTED_WNID
        rows.append(ImageEmbedding(image=im, model_name=settings.DEFAULT_MODEL, topk=top, top1_wnid=top[0][0], top1_prob=0.41,
                                   max_softmax=0.41, nearest_id_similarity=float(rng.random())))
    ImageEmbedding.objects.bulk_create(rows)
    review_queue_sync(source=source)
    review_settings_save(source=source, reviews_required=2)
    for name in ("single", "grid"):
        user_create_with_role(username=name, password=f"{name}-pw-bench", role=ANNOTATOR)
    return planted


def login(page, base, user):
    page.goto(f"{base}/accounts/login/?next=/review/")
    page.fill("#id_username", user)
    page.fill("#id_password", f"{user}-pw-bench")
    page.press("#id_password", "Enter")
    page.wait_for_url(f"{base}/review/")


def run_single(page, base, planted) -> dict:
    requests = []
    page.on("request", lambda r: requests.append(r.url) if "/api/" in r.url else None)
    keys = 0
    page.goto(f"{base}/review/screen/")
    t0 = time.perf_counter()
    done = 0
    while True:
        page.wait_for_function("document.querySelector('#review').classList.contains('is-empty') || "
                               "(document.querySelector('#photo').dataset.image && document.querySelector('#photo').complete)")
        if page.evaluate("document.querySelector('#review').classList.contains('is-empty')"):
            break
        image = int(page.get_attribute("#photo", "data-image"))
        if image in planted:
            page.keyboard.press("i")
            page.keyboard.press("1")
            keys += 2
        else:
            page.keyboard.press("o")
            keys += 1
        done += 1
        page.wait_for_function(f"document.querySelector('#status').textContent.includes('{done} reviewed this session') || "
                               "document.querySelector('#status').classList.contains('error')")
    return {"wall": time.perf_counter() - t0, "keys": keys, "requests": len(requests), "decisions": done}


def run_grid(page, base, planted) -> dict:
    requests = []
    page.on("request", lambda r: requests.append(r.url) if "/api/" in r.url else None)
    keys = 0
    page.goto(f"{base}/review/grid/")
    t0 = time.perf_counter()
    page.wait_for_function("document.querySelector('#grid-review').dataset.page === '0'")
    page.keyboard.press("+")  # 60 tiles a page: a class of 50 fits on one
    keys += 1
    page.wait_for_function("document.querySelector('#size-label').textContent.startsWith('60') && "
                           "!document.querySelector('#grid-review').classList.contains('saving')")
    pages = 0
    while True:
        page.wait_for_function("document.querySelector('#grid-review').classList.contains('is-empty') || "
                               "[...document.querySelectorAll('#tiles .tile img')].every((i) => i.complete && i.naturalWidth > 0)")
        tiles = page.eval_on_selector_all("#tiles .tile", "els => els.map(e => +e.dataset.image)")
        if not tiles:
            break
        cols = int(page.get_attribute("#tiles", "data-cols"))
        cursor = 0
        for pos, image in enumerate(tiles):
            if image not in planted:
                continue
            dr, dc = pos // cols - cursor // cols, pos % cols - cursor % cols
            for _ in range(abs(dr)):
                page.keyboard.press("ArrowDown" if dr > 0 else "ArrowUp")
            for _ in range(abs(dc)):
                page.keyboard.press("ArrowRight" if dc > 0 else "ArrowLeft")
            page.keyboard.press("i")
            page.keyboard.press("1")
            keys += abs(dr) + abs(dc) + 2
            cursor = min(pos + 1, len(tiles) - 1)
        pages += 1
        page.keyboard.press("Enter")
        keys += 1
        page.wait_for_function(f"document.querySelector('#grid-review').dataset.page === '{pages}' && "
                               "!document.querySelector('#grid-review').classList.contains('saving')")
    return {"wall": time.perf_counter() - t0, "keys": keys, "requests": len(requests), "pages": pages}


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
    planted = populate(args.images, args.classes, data / "pool")
    results = {}
    with served(runserver_argv(args.port), env=env, port=args.port, quiet=True) as base:
        from playwright.sync_api import sync_playwright

        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=["--no-sandbox"])
            for name, run in (("single", run_single), ("grid", run_grid)):
                page = browser.new_context(viewport={"width": 1366, "height": 768}).new_page()
                login(page, base, name)
                results[name] = run(page, base, planted)
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
    print(f"  grid / single-image screen: keypresses {g['keys'] / s['keys']:.3f}, requests {g['requests'] / s['requests']:.3f}, "
          f"wall time {g['wall'] / s['wall']:.3f} ({s['wall'] / g['wall']:.1f}x sooner)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
