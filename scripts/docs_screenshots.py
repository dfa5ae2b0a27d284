"""Screenshots for docs/ from the demo's data, at 1366x768, in Debian's headless Chromium.

    bash scripts/demo.sh --no-serve --data DIR            # or: OODC_DATA_DIR=DIR python manage.py demo --no-serve
    OODC_DATA_DIR=DIR .venv/bin/python scripts/docs_screenshots.py [--out docs/img] [--port 8150]

It works on the demo's database in OODC_DATA_DIR and changes it as a person would (the
annotator's grid page leases images; the embedding map is made if missing), so run it on a demo
made for the purpose. Pages: the grid review screen (annotator), find similar from a planted
image (curator), the embedding map of the candidate pool (curator, UMAP).
"""
from __future__ import annotations

import argparse
import csv
import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
VIEWPORT = {"width": 1366, "height": 768}


def fail(message: str) -> None:
    print(f"docs_screenshots: {message}", file=sys.stderr)
    sys.exit(1)


def login(page, base: str, user: str, password: str, then: str) -> None:
    page.goto(f"{base}/accounts/login/?next={then}")
    page.fill("#id_username", user)
    page.fill("#id_password", password)
    page.press("#id_password", "Enter")
    page.wait_for_url(f"{base}{then}")


def all_images_loaded(page, selector: str) -> None:
    page.evaluate("document.querySelectorAll('img[loading=lazy]').forEach((i) => { i.loading = 'eager'; })")
    page.wait_for_function(f"[...document.querySelectorAll('{selector}')].every((i) => i.complete && i.naturalWidth > 0)",
                           timeout=60000)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(REPO / "docs" / "img"), help="where the JPEGs go (default docs/img)")
    ap.add_argument("--port", type=int, default=8150)
    args = ap.parse_args()
    data = os.environ.get("OODC_DATA_DIR")
    if not data or not (Path(data) / "db.sqlite3").is_file():
        fail("set OODC_DATA_DIR to a folder the demo ran in (it holds db.sqlite3): bash scripts/demo.sh --no-serve --data DIR")
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    os.environ.pop("DATABASE_URL", None)  # the demo's SQLite database
    os.environ.update({"DJANGO_SETTINGS_MODULE": "curation.settings", "OODC_JOBS_IN_BACKGROUND": "0",
                       "NLTK_DATA": os.environ.get("NLTK_DATA", str(REPO / "var" / "nltk_data"))})
    sys.path.insert(0, str(REPO))
    import django

    from scripts.serving import runserver_argv, served

    django.setup()
    from django.conf import settings

    from curation.models import Image, Source
    from curation.services.embedding_map import embedding_map_points, embedding_map_start

    pool = Source.objects.filter(name="demo-candidates").first()
    if pool is None:
        fail(f"no demo-candidates source in {data}: run the demo there first")
    with_features = Image.objects.filter(source=pool, status="ok", embeddings__model_name=settings.DEFAULT_MODEL)
    key = Path(data) / "demo" / "answer_key.csv"
    planted = None
    if key.is_file():
        with key.open() as fh:
            rows = list(csv.DictReader(fh))
        for row in rows:
            name = row.get("relative_path") or next(iter(row.values()))
            planted = with_features.filter(relative_path__endswith=Path(name).name).first()
            if planted:  # a planted image whose class was kept (a removed class's images are not extracted)
                break
    planted = planted or with_features.order_by("id").first()
    if embedding_map_points(source=pool) is None:
        print("making the embedding map of demo-candidates (UMAP)...", flush=True)
        embedding_map_start(source=pool)

    env = {**os.environ, "DJANGO_DEBUG": "1"}  # runserver serves the static files
    shots = []
    with served(runserver_argv(args.port), env=env, port=args.port, quiet=True) as base:
        from playwright.sync_api import sync_playwright

        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=["--no-sandbox"])

            page = browser.new_context(viewport=VIEWPORT).new_page()
            login(page, base, "annotator", "annotator-demo", "/review/")
            page.goto(f"{base}/review/grid/")
            page.wait_for_function("document.querySelector('#grid-review').dataset.page === '0'")
            all_images_loaded(page, "#tiles .tile img")
            shots.append(out / "grid-review-1366x768.jpg")
            page.screenshot(path=str(shots[-1]), type="jpeg", quality=82)
            page.context.close()

            page = browser.new_context(viewport=VIEWPORT).new_page()
            login(page, base, "curator", "curator-demo", "/curate/images/")
            page.goto(f"{base}/curate/images/{planted.pk}/similar/")
            page.wait_for_selector("#grid li.tile")
            all_images_loaded(page, "#grid img, #id-grid img")
            shots.append(out / "find-similar-1366x768.jpg")
            page.screenshot(path=str(shots[-1]), type="jpeg", quality=82)

            page.goto(f"{base}/curate/map/?source={pool.pk}&method=umap")
            page.wait_for_function("document.querySelector('#map') && document.querySelector('#map').dataset.ready === '1'",
                                   timeout=120000)
            page.select_option("#colour-by", "cls")
            page.wait_for_timeout(300)
            shots.append(out / "embedding-map-1366x768.jpg")
            page.screenshot(path=str(shots[-1]), type="jpeg", quality=82)
            browser.close()
    for s in shots:
        print(f"wrote {s.relative_to(REPO) if s.is_relative_to(REPO) else s}")
    print(f"find similar from image {planted.pk} ({planted.relative_path})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
