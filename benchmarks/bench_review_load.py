"""Load on the review API: 100,000 queued images in PostgreSQL, N simulated annotators over
loopback against gunicorn, each fetching its next image and submitting a decision as fast as
the server answers. Prints server time (the Server-Timing header) and client round-trip
percentiles for fetch-next and submit, and checks that no decision was lost or duplicated.

    bash scripts/services.sh   # PostgreSQL + Redis
    .venv/bin/python benchmarks/bench_review_load.py [--images 100000] [--annotators 20] [--seconds 60]

It uses its own database (oodc_bench, dropped and re-created) and never touches others.
"""
from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import secrets
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from scripts.serving import free_port, gunicorn_argv, served  # noqa: E402


def pct(values, q):
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q / 100 * (len(values) - 1))))]


def recreate_database(admin_url: str, name: str) -> str:
    from urllib.parse import urlparse

    import psycopg2

    u = urlparse(admin_url)
    conn = psycopg2.connect(host=u.hostname, port=u.port or 5432, user=u.username, password=u.password, dbname=u.path.lstrip("/"))
    conn.autocommit = True
    with conn.cursor() as cur:
        cur.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        cur.execute(f'CREATE DATABASE "{name}"')
    conn.close()
    return u._replace(path=f"/{name}").geturl()


def populate(n_images: int, n_annotators: int, data_dir: Path) -> list[str]:
    """Rows as ingest + the image pipeline leave them, then the real queue build."""
    import django

    django.setup()
    from django.conf import settings
    from django.core.management import call_command

    from curation.models import CandidateClass, Image, ImageEmbedding, Source
    from curation.roles import ANNOTATOR
    from curation.services.review import review_queue_sync
    from curation.services.users import user_create_with_role
    from pipelines.classes.imagenet import named_list

    call_command("set_id_classes", "imagenet-1k", stdout=open(os.devnull, "w"))
    id_wnids = list(named_list("imagenet-1k"))
    root = data_dir / "sources" / "bench"
    root.mkdir(parents=True, exist_ok=True)
    source = Source.objects.create(name="bench", root=str(root))
    classes = CandidateClass.objects.bulk_create([
        CandidateClass(source=source, folder=f"class_{k:03d}", wnid="n09308572" if k % 2 else "n11517776", mapping="wnid_folder")
        for k in range(100)])
    rng = random.Random(0)
    t0 = time.perf_counter()
    batch = 10_000
    for start in range(0, n_images, batch):
        imgs = Image.objects.bulk_create([
            Image(source=source, candidate_class=classes[i % 100], relative_path=f"class_{i % 100:03d}/img_{i:07d}.jpg",
                  sha256=f"{i:064x}", width=500, height=375, format="JPEG", mode="RGB", bytes=40_000, status="ok")
            for i in range(start, min(start + batch, n_images))])
        ImageEmbedding.objects.bulk_create([
            ImageEmbedding(image=img, model_name=settings.DEFAULT_MODEL, topk=[[w, round(rng.random() / 3, 4)] for w in rng.sample(id_wnids, 5)],
                           top1_wnid="", nearest_id_similarity=rng.random()) for img in imgs])
    t_rows = time.perf_counter() - t0
    t0 = time.perf_counter()
    report = review_queue_sync(source=source)
    t_queue = time.perf_counter() - t0
    print(f"populated {n_images:,} images + predictions in {t_rows:.1f} s; review_queue_sync: {t_queue:.1f} s ({report.summary()})")
    users = [user_create_with_role(username=f"bench{k:02d}", password=secrets.token_hex(8), role=ANNOTATOR)[0] for k in range(n_annotators)]
    from django.contrib.sessions.backends.db import SessionStore

    cookies = []
    for u in users:
        s = SessionStore()
        s["_auth_user_id"] = str(u.pk)
        s["_auth_user_backend"] = "django.contrib.auth.backends.ModelBackend"
        s["_auth_user_hash"] = u.get_session_auth_hash()
        s.create()
        cookies.append(s.session_key)
    return cookies


class Annotator(threading.Thread):
    def __init__(self, port: int, session_key: str, deadline: float, replay_every: int, think: float):
        super().__init__(daemon=True)
        self.port, self.deadline, self.replay_every, self.think = port, deadline, replay_every, think
        self.csrf = secrets.token_hex(16)  # 32 characters: Django accepts it unmasked in the header
        self.cookie = f"sessionid={session_key}; csrftoken={self.csrf}"
        self.next_server, self.next_client, self.submit_server, self.submit_client = [], [], [], []
        self.submitted: list[int] = []
        self.replays = 0
        self.errors: list[str] = []

    def request(self, conn, method, path, body=None):
        headers = {"Cookie": self.cookie, "Accept": "application/json"}
        if body is not None:
            headers.update({"Content-Type": "application/json", "X-CSRFToken": self.csrf, "Referer": f"http://127.0.0.1:{self.port}/"})
        t0 = time.perf_counter()
        conn.request(method, path, body=json.dumps(body) if body is not None else None, headers=headers)
        r = conn.getresponse()
        data = r.read()
        elapsed = (time.perf_counter() - t0) * 1000
        timing = r.getheader("Server-Timing", "app;dur=nan")
        server = float(timing.split("dur=")[1])
        if r.status != 200:
            raise RuntimeError(f"{method} {path}: {r.status} {data[:300]!r}")
        return json.loads(data), server, elapsed

    def run(self):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        rng = random.Random(self.csrf)
        try:
            self.request(conn, "GET", "/api/review/next")  # warm-up, not measured: the worker's first request imports and connects
            while time.monotonic() < self.deadline:
                data, s, c = self.request(conn, "GET", "/api/review/next")
                self.next_server.append(s)
                self.next_client.append(c)
                if not data["items"]:
                    break
                item = data["items"][0]
                decision = rng.choice(["ood", "ood", "ood", "unclear", "not_target", "id"])
                body = {"assignment": item["assignment"], "decision": decision, "seconds": 4.0,
                        "wnids": [item["top5"][0]["wnid"]] if decision == "id" else [],
                        "have": [x["assignment"] for x in data["items"][1:]]}  # as the browser does
                out, s, c = self.request(conn, "POST", "/api/review/submit", body)
                self.submit_server.append(s)
                self.submit_client.append(c)
                if out["saved"]["replay"]:
                    self.errors.append(f"first submission of {item['assignment']} answered as a replay")
                self.submitted.append(item["assignment"])
                if self.think:  # looking at the next image
                    time.sleep(rng.uniform(0.5, 1.5) * self.think)
                if self.replay_every and len(self.submitted) % self.replay_every == 0:
                    out, _s, _c = self.request(conn, "POST", "/api/review/submit", body)  # a redelivered POST
                    self.replays += 1
                    if not out["saved"]["replay"]:
                        self.errors.append(f"repeated submission of {item['assignment']} was counted again")
        except Exception as exc:
            self.errors.append(repr(exc))
        finally:
            conn.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--images", type=int, default=100_000)
    ap.add_argument("--annotators", type=int, default=20)
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--workers", type=int, default=2 * (os.cpu_count() or 1) + 1, help="gunicorn worker processes")
    ap.add_argument("--think", type=float, default=0.0,
                    help="mean seconds an annotator looks at an image before deciding (0: as fast as the server answers)")
    ap.add_argument("--replay-every", type=int, default=50, help="repeat every Nth submission (0: never)")
    args = ap.parse_args()

    admin_url = os.environ.get("DATABASE_URL", "postgres://oodc:oodc@127.0.0.1:5432/oodc")
    bench_url = recreate_database(admin_url, "oodc_bench")
    data_dir = Path(os.environ.get("OODC_BENCH_DIR", "/tmp/oodc-bench"))
    env = {**os.environ, "DATABASE_URL": bench_url, "DJANGO_SETTINGS_MODULE": "curation.settings", "DJANGO_DEBUG": "0",
           "DB_CONN_MAX_AGE": "60", "DJANGO_SECRET_KEY": secrets.token_hex(32), "OODC_DATA_DIR": str(data_dir),
           "NLTK_DATA": os.environ.get("NLTK_DATA", str(REPO / "var" / "nltk_data"))}
    subprocess.run([sys.executable, "manage.py", "migrate", "--noinput", "-v", "0"], cwd=REPO, env=env, check=True)
    os.environ.update(env)
    cookies = populate(args.images, args.annotators, data_dir)

    port = free_port()
    with served(gunicorn_argv(port, workers=args.workers), env=env, port=port, settle_s=1.0):
        deadline = time.monotonic() + args.seconds
        clients = [Annotator(port, c, deadline, args.replay_every, args.think) for c in cookies]
        t0 = time.perf_counter()
        for c in clients:
            c.start()
        for c in clients:
            c.join()
        wall = time.perf_counter() - t0

    from django.db.models import Count, F, Sum

    from curation.models import Assignment, Review, ReviewItem

    errors = [e for c in clients for e in c.errors]
    submitted = [a for c in clients for a in c.submitted]
    reviews = Review.objects.count()
    lost = len(set(submitted) - set(Review.objects.filter(assignment_id__in=submitted).values_list("assignment_id", flat=True)))
    dup_pairs = Review.objects.values("item", "annotator").annotate(n=Count("id")).filter(n__gt=1).count()
    over = ReviewItem.objects.filter(done__gt=F("required")).count()
    done_sum = ReviewItem.objects.aggregate(s=Sum("done"))["s"] or 0
    leased_now = Assignment.objects.filter(state="leased").count()

    def row(name, server, client):
        return (f"  {name:<11} n={len(server):>6}  server p50 {pct(server, 50):6.2f} ms  p99 {pct(server, 99):6.2f} ms  |  "
                f"client p50 {pct(client, 50):6.2f} ms  p99 {pct(client, 99):6.2f} ms  mean {statistics.fmean(client):6.2f} ms")

    pace = f"think time {args.think:g} s" if args.think else "no think time (saturating)"
    print(f"\n{args.annotators} annotators ({pace}), {args.images:,} queued images, {wall:.1f} s, gunicorn {args.workers} workers, "
          f"{os.cpu_count()} CPUs (clients and server share them)")
    print(row("fetch-next", [x for c in clients for x in c.next_server], [x for c in clients for x in c.next_client]))
    print(row("submit", [x for c in clients for x in c.submit_server], [x for c in clients for x in c.submit_client]))
    print(f"  decisions: {len(submitted):,} submitted ({len(submitted) / wall:.0f}/s), {sum(c.replays for c in clients)} repeated POSTs; "
          f"{reviews:,} review rows, sum of per-image counters {done_sum:,}")
    print(f"  lost decisions: {lost}   duplicated (image, annotator): {dup_pairs}   images over their required reviews: {over}   "
          f"leases still held: {leased_now} (the images on screen when the run stopped)")
    if errors:
        print(f"  client errors ({len(errors)}): {errors[:5]}")
    ok = not errors and lost == 0 and dup_pairs == 0 and over == 0 and reviews == len(submitted) == done_sum
    print("  consistency:", "OK" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
