"""Every screenshot in docs/, from the demo's data, at 1366x768, in Debian's headless Chromium.

    bash scripts/demo.sh --no-serve --data DIR            # or: OODC_DATA_DIR=DIR python manage.py demo --no-serve
    cp -a DIR DIR.pristine                                # to run it again: rm -rf DIR; cp -a DIR.pristine DIR
    OODC_DATA_DIR=DIR .venv/bin/python scripts/docs_screenshots.py [--out docs/img] [--port 8150] [--seed 1]

It works on the demo's database in OODC_DATA_DIR and changes it as people would, through the
services and the web pages, so run it on a demo made for the purpose (it refuses a database it
ran on before; the demo's files stay where the demo wrote them, so copy back, not elsewhere). The pages, in the order taken (each later state would spoil an
earlier shot), each as the role that uses the screen:

  curator    browse               demo-candidates sorted by similarity to the ID images
  curator    find-similar         from the planted concrete mixer with a toucan in its corner
  curator    embedding-map        the candidate pool's UMAP map, coloured by class (made if missing)
  curator    duplicate-group      misc_uploads' picture saved as CMYK JPEG, palette PNG, WebP, alpha PNG
    (state: the curator queues annotator2's `id` images and two of its `ood` classes for one more
    review, the image browser's *Queue for review*; a new annotator, annotator3, password
    annotator3-demo, calls them all `ood` in under a second each: the `id` ones become conflicts)
  annotator  grid-review          the class the demo leaves for people (trophy, 6 tiles)
  annotator  review-progress      the single-image screen (it serves the grid's leases) after 2 decisions
  annotator  review-end-of-queue  the same screen after the other 4 (keys, 2.5 s each)
  curator    adjudicate           the first conflict: annotator2 saw an ID object, annotator3 none
  curator    annotator-quality    the per-annotator table: annotator3 flagged too fast
  curator    flagged-classes      the flagged-classes screen's first page, 37 classes waiting
    (state: the curator accepts every flagged class that has a WordNet synset, as *Accept* on the
    flagged-classes page does: their images enter the review queue)
  curator    flagged-unmapped     the folder left, misc_uploads: a noun found by search, a note, not sent
  curator    browse-bulk-label    the concrete mixers, the planted one ticked and labelled id (toucan);
                                  the label is then sent
  curator    image-detail         that image's page, with the curator's label
    (state: `manage.py certify plan --source demo-candidates --seed SEED --target 0.40` over the
    accepted classes' images; annotator reviews the sampled ones, answering as the demo data's
    answer key says, until the bound meets the target: 12 reviews with seed 1)
  curator    certify-certified    the certified plan

Each file is docs/img/<name>-1366x768.jpg (JPEG quality 82).
"""
from __future__ import annotations

import argparse
import csv
import os
import random
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
VIEWPORT = {"width": 1366, "height": 768}
QUALITY = 82
MIXER, TOUCAN = "n03087069", "n01843383"  # the planted image the browse.md captions name: a concrete mixer with a toucan
CERTIFY_TARGET = 0.40  # the demo pool is about 10% ID: 25% is met only after nearly all of it (sampler 2, seed 1)
FAST = "annotator3"  # the annotator the script adds: fast and careless


def fail(message: str) -> None:
    print(f"docs_screenshots: {message}", file=sys.stderr)
    sys.exit(1)


def login(browser, base: str, user: str, password: str, then: str):
    page = browser.new_context(viewport=VIEWPORT).new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(f"{user} on {page.url}: {e}"))
    page.js_errors = errors
    page.goto(f"{base}/accounts/login/?next={then}")
    page.fill("#id_username", user)
    page.fill("#id_password", password)
    page.press("#id_password", "Enter")
    page.wait_for_url(f"{base}{then}")
    return page


def all_images_loaded(page, selector: str = "img") -> None:
    page.evaluate("document.querySelectorAll('img[loading=lazy]').forEach((i) => { i.loading = 'eager'; })")
    page.wait_for_function(f"[...document.querySelectorAll('{selector}')].every((i) => i.complete && (i.naturalWidth > 0 || i.hidden))",
                           timeout=60000)


def no_sideways_scroll(page) -> str:
    extra = page.evaluate("document.documentElement.scrollWidth - document.documentElement.clientWidth")
    return f" (scrolls sideways by {extra} px)" if extra > 0 else ""


class Shots:
    def __init__(self, out: Path):
        self.out, self.written, self.problems = out, [], []

    def take(self, page, name: str) -> None:
        path = self.out / f"{name}-1366x768.jpg"
        page.wait_for_timeout(200)  # let the last layout and paint settle
        page.screenshot(path=str(path), type="jpeg", quality=QUALITY)
        wide = no_sideways_scroll(page)
        if wide:
            self.problems.append(f"{path.name}{wide}")
        self.written.append(path)
        print(f"  {path.name}{wide}", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(REPO / "docs" / "img"), help="where the JPEGs go (default docs/img)")
    ap.add_argument("--port", type=int, default=8150)
    ap.add_argument("--seed", type=int, default=1, help="the certification plan's seed (default 1)")
    args = ap.parse_args()
    data = os.environ.get("OODC_DATA_DIR")
    if not data or not (Path(data) / "db.sqlite3").is_file():
        fail("set OODC_DATA_DIR to a folder the demo ran in (it holds db.sqlite3): bash scripts/demo.sh --no-serve --data DIR")
    key_path = Path(data) / "demo" / "answer_key.csv"
    if not key_path.is_file():
        fail(f"no answer key at {key_path}: run the demo in {data} first")
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    os.environ.pop("DATABASE_URL", None)  # the demo's SQLite database
    os.environ.update({"DJANGO_SETTINGS_MODULE": "curation.settings", "OODC_JOBS_IN_BACKGROUND": "0",
                       "NLTK_DATA": os.environ.get("NLTK_DATA", str(REPO / "var" / "nltk_data"))})
    server_env = {**os.environ, "DJANGO_DEBUG": "1"}  # runserver serves the static files
    # this process calls the services between browser steps, inside Playwright's event loop
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    sys.path.insert(0, str(REPO))
    import django

    from scripts.serving import runserver_argv, served

    django.setup()
    from django.contrib.auth.models import User

    from curation.models import Source

    pool = Source.objects.filter(name="demo-candidates").first()
    if pool is None:
        fail(f"no demo-candidates source in {data}: run the demo there first")
    if User.objects.filter(username=FAST).exists():
        fail(f"{data} was used by this script before ({FAST} exists): copy the demo's untouched folder back first, or make the demo again")
    with key_path.open(newline="") as fh:
        key = {r["relative_path"]: (r["decision"], r["id_wnids"].split()) for r in csv.DictReader(fh)}
    started = time.monotonic()
    shots = Shots(out)
    with served(runserver_argv(args.port), env=server_env, port=args.port, quiet=True) as base:
        from playwright.sync_api import sync_playwright

        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=["--no-sandbox"])
            cur = login(browser, base, "curator", "curator-demo", "/curate/images/")
            mixer = curator_pages(cur, base, pool, key, shots)
            conflicts_made(pool)
            ann = login(browser, base, "annotator", "annotator-demo", "/review/")
            annotator_pages(ann, base, shots)
            curator_review_pages(cur, base, shots)
            cur.goto(f"{base}/curate/classes/")
            shots.take(cur, "flagged-classes")
            flags_accepted()
            cur.goto(f"{base}/curate/classes/")
            cur.fill(".noun-search", "stripe")  # mapped by search: the first noun chosen, a note, not sent
            cur.wait_for_selector(".noun-results li")
            cur.press(".noun-search", "Enter")
            cur.wait_for_selector(".map-button:enabled")
            cur.fill("form.class-map input[name=note]", "the folder holds striped test patterns")
            shots.take(cur, "flagged-unmapped")
            bulk_label(cur, base, pool, key, mixer, shots)
            certified(pool, key, seed=args.seed)
            cur.goto(f"{base}/curate/certify/{pool.pk}/")
            cur.wait_for_selector("#cert-quote")
            shots.take(cur, "certify-certified")
            errors = cur.js_errors + ann.js_errors
            browser.close()
    for s in shots.written:
        print(f"wrote {s.relative_to(REPO) if s.is_relative_to(REPO) else s} ({s.stat().st_size // 1024} KB)")
    print(f"{len(shots.written)} screenshots in {time.monotonic() - started:.0f} s")
    for e in errors:
        print(f"docs_screenshots: JavaScript error: {e}", file=sys.stderr)
    for pr in shots.problems:
        print(f"docs_screenshots: {pr}", file=sys.stderr)
    return 1 if errors or shots.problems else 0


def curator_pages(page, base: str, pool, key: dict, shots: Shots):
    """The curator's read-only pages; returns the planted concrete mixer the captions name."""
    from django.conf import settings

    from curation.models import Image, ImageEmbedding
    from curation.services.embedding_map import embedding_map_points, embedding_map_start

    page.goto(f"{base}/curate/images/?source={pool.name}&sort=-similarity")
    all_images_loaded(page, "#grid img")
    shots.take(page, "browse")

    with_features = Image.objects.filter(source=pool, status="ok", embeddings__model_name=settings.DEFAULT_MODEL)
    mixer = with_features.filter(relative_path__in=[r for r, (d, w) in key.items()
                                                    if r.startswith(f"{MIXER}/") and d == "id" and TOUCAN in w]).order_by("id").first()
    if mixer is None:
        fail(f"the demo has no planted concrete mixer ({MIXER}) with a toucan: the captions in docs/browse.md name it")
    page.goto(f"{base}/curate/images/{mixer.pk}/similar/")
    page.wait_for_selector("#grid li.tile")
    all_images_loaded(page, "#grid img, #id-grid img")
    shots.take(page, "find-similar")

    if embedding_map_points(source=pool) is None:
        print("making the embedding map of demo-candidates (UMAP)...", flush=True)
        embedding_map_start(source=pool)
    page.goto(f"{base}/curate/map/?source={pool.pk}&method=umap")
    page.wait_for_function("document.querySelector('#map') && document.querySelector('#map').dataset.ready === '1'", timeout=120000)
    page.select_option("#colour-by", "cls")
    page.wait_for_timeout(300)
    shots.take(page, "embedding-map")

    # the largest duplicate group among the awkward files of misc_uploads
    groups: dict[int, int] = {}
    for g in (ImageEmbedding.objects.filter(image__source=pool, model_name=settings.DEFAULT_MODEL, dup_group__isnull=False,
                                            image__relative_path__startswith="misc_uploads/").values_list("dup_group", flat=True)):
        groups[g] = groups.get(g, 0) + 1
    if not groups:
        fail("the demo's misc_uploads folder has no duplicate group: docs/browse.md's duplicate-group caption names it")
    group = max(groups, key=lambda g: (groups[g], -g))
    page.goto(f"{base}/curate/duplicates/{group}/")
    all_images_loaded(page)
    shots.take(page, "duplicate-group")
    return mixer


def conflicts_made(pool) -> None:
    """The curator sends annotator2's `id` images and two classes it called `ood` back for one
    more review; annotator3, new, calls them all `ood` in under a second each: the ID images
    become conflicts and annotator3 is flagged as too fast (20+ timed reviews)."""
    from curation.models import ReviewItem
    from curation.roles import ANNOTATOR
    from curation.services.browse import images_requeue
    from curation.services.review import review_next, review_submit
    from curation.services.users import user_create_with_role

    fast = user_create_with_role(username=FAST, password=f"{FAST}-demo", role=ANNOTATOR)[0]
    decided = ReviewItem.objects.filter(source=pool, status=ReviewItem.Status.COMPLETE)
    ids = list(decided.filter(final_decision="id").order_by("id").values_list("image_id", flat=True))
    classes = list(decided.filter(final_decision="ood").order_by("candidate_class_id").values_list("candidate_class_id", flat=True)
                   .distinct()[:2])
    oods = list(decided.filter(final_decision="ood", candidate_class_id__in=classes).values_list("image_id", flat=True))
    wanted = set(ids + oods)
    report = images_requeue(image_ids=sorted(wanted), user=account("curator"))
    rng = random.Random(0)
    while True:
        held = review_next(user=fast, want=20)
        if not held:
            break
        for a in held:
            item = ReviewItem.objects.get(pk=a.item_id)
            if a.is_gold:  # a gold check (the demo serves gold at 10%): called ood like the rest, right or wrong
                review_submit(user=fast, assignment_id=a.pk, decision="ood", seconds=round(rng.uniform(0.5, 0.9), 1))
                continue
            if item.image_id not in wanted:  # the trophy class, left for annotator
                review_submit(user=fast, assignment_id=a.pk, decision="skip")
                continue
            review_submit(user=fast, assignment_id=a.pk, decision="ood", seconds=round(rng.uniform(0.5, 0.9), 1))
    n = ReviewItem.objects.filter(source=pool, status=ReviewItem.Status.CONFLICT).count()
    print(f"  curator requeued {report.done} images; {FAST} called them all ood: {n} conflicts", flush=True)


def account(name: str):
    from django.contrib.auth.models import User

    return User.objects.get(username=name)


def annotator_pages(page, base: str, shots: Shots) -> None:
    """Grid review of the trophy class, then the single-image screen (which serves the grid's
    leases first): two decisions, the progress shot, the rest, the end of the queue."""
    page.goto(f"{base}/review/grid/")
    page.wait_for_function("document.querySelector('#grid-review').dataset.page === '0'")
    all_images_loaded(page, "#tiles .tile img")
    shots.take(page, "grid-review")

    page.goto(f"{base}/review/screen/")
    done = 0
    while True:
        page.wait_for_function("!document.querySelector('#empty').hidden || "
                               "(document.querySelector('#photo').dataset.image && document.querySelector('#top5 li'))")
        if page.is_visible("#empty"):
            break
        all_images_loaded(page, "#photo")
        if done == 2:
            shots.take(page, "review-progress")
        page.wait_for_timeout(2500)  # a person looks at the image before deciding
        page.keyboard.press("o")
        done += 1
        page.wait_for_function(f"document.querySelector('#status').textContent.includes('{done} reviewed this session')")
    page.wait_for_timeout(500)
    shots.take(page, "review-end-of-queue")


def curator_review_pages(page, base: str, shots: Shots) -> None:
    page.goto(f"{base}/curate/adjudicate/")
    page.wait_for_selector("#adj-reviews li")
    all_images_loaded(page, "#photo")
    shots.take(page, "adjudicate")

    page.goto(f"{base}/curate/reviews/")
    page.evaluate("document.querySelector('#annotator-quality').scrollIntoView()")
    shots.take(page, "annotator-quality")


def bulk_label(page, base: str, pool, key: dict, mixer, shots: Shots) -> None:
    """The concrete mixers (queued once their class was accepted), the planted ones ticked and
    labelled id (toucan) with a reason; the shot before Label is pressed, then it is."""
    page.goto(f"{base}/curate/images/?source={pool.name}&cls={mixer.candidate_class_id}&size=24")
    all_images_loaded(page, "#grid img")
    for i in _planted_ids(pool, key):
        box = page.locator(f"#grid input[name=ids][value='{i}']")
        if box.count():
            box.check()
    page.select_option("select[name=decision]", "id")
    page.click("input.id-class-search")
    page.keyboard.type("toucan")
    page.wait_for_selector("#label-id-results li")
    page.keyboard.press("Enter")
    page.wait_for_function(f"document.querySelector('#label-id-picked').textContent.includes('{TOUCAN}')")
    page.fill("input[name=label_reason]", "a toucan in the corner")
    shots.take(page, "browse-bulk-label")
    page.click("button[name=action][value=label]")
    page.wait_for_load_state()
    # the image's own page, now with the curator's label in its review box
    page.goto(f"{base}/curate/images/{mixer.pk}/")
    all_images_loaded(page)
    shots.take(page, "image-detail")


def _planted_ids(pool, key: dict) -> list[int]:
    from curation.models import Image

    return list(Image.objects.filter(source=pool, relative_path__in=[r for r, (d, _w) in key.items() if d == "id"])
                .order_by("id").values_list("id", flat=True))


def flags_accepted() -> None:
    """The curator accepts every flagged class that has a WordNet synset (the flagged-classes
    page's *Accept selected*), leaving the unmapped folder for its own shot."""
    from curation import selectors
    from curation.services.class_filter import flagged_classes_accept

    ids = [e["cc"].pk for e in selectors.flagged_classes(samples=0) if e["cc"].wnid]
    done = flagged_classes_accept(class_ids=ids, note="looked at the samples", user=account("curator"))
    print(f"  accepted {len(done.accepted)} flagged classes; queue: {' / '.join(done.queues) or '-'}", flush=True)


def certified(pool, key: dict, *, seed: int) -> None:
    """Plan a certification of the source's unreviewed images (the accepted classes) and have
    annotator review the sampled ones, as the answer key says, until the bound meets the target."""
    from django.core.management import call_command

    from curation.models import CertificationPlan, ReviewItem
    from curation.services.certification import certification_cache_clear, certification_leased_draws, certification_refresh
    from curation.services.review import review_next, review_release_leases, review_submit

    call_command("certify", "plan", source=pool.name, seed=seed, target=CERTIFY_TARGET)
    plan = CertificationPlan.objects.filter(source=pool).order_by("-created_at").first()
    annotator = account("annotator")
    rng = random.Random(seed)
    reviews = 0
    while plan.status != CertificationPlan.Status.CERTIFIED:
        certification_cache_clear()
        if reviews % 8 == 0:  # the curator hands back sampled images the earlier screens left leased (the page's button)
            review_release_leases(item_ids=certification_leased_draws(plan=plan), why="docs screenshots")
        held = review_next(user=annotator, want=1)
        if not held:
            fail(f"certification plan {plan.pk} ran out of images before it was certified ({reviews} reviews): try another --seed")
        item = ReviewItem.objects.select_related("image").get(pk=held[0].item_id)
        decision, wnids = key.get(item.image.relative_path, ("ood", []))
        review_submit(user=annotator, assignment_id=held[0].pk, decision=decision, wnids=wnids, seconds=round(rng.uniform(3, 7), 1))
        reviews += 1
        certification_refresh(plan=plan)
    print(f"  certification plan {plan.pk} certified after {reviews} reviews (seed {seed})", flush=True)


if __name__ == "__main__":
    sys.exit(main())
