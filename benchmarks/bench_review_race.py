"""Fifty annotators racing on PostgreSQL behind gunicorn (issue 38): half on the single-image
screen, half on grid pages (when the grid review API exists), each deciding at a person's
fastest pace for a set time. Reports p50/p95/p99 of fetch and submit per request and per
decision (server time from the Server-Timing header, and the client's round trip), and checks:
every decision recorded exactly once, no image over its required reviews, no lease lost (no
submit of a leased image refused).

    bash scripts/services.sh
    .venv/bin/python benchmarks/bench_review_race.py [--annotators 50] [--seconds 600] [--images 100000]

Its own database (oodc_bench_race, dropped and re-created); the rows are made as in
bench_review_load.py (the same populate step)."""
from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import secrets
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from bench_review_load import pct, populate, recreate_database  # noqa: E402

from scripts.serving import free_port, gunicorn_argv, served  # noqa: E402


class Client(threading.Thread):
    """One annotator: ``mode`` single (fetch next, decide, submit) or grid (fetch a page of
    ``page`` tiles, decide each, submit the page)."""

    def __init__(self, port: int, session_key: str, deadline: float, mode: str, page: int, think_single: float, think_tile: float):
        super().__init__(daemon=True)
        self.port, self.deadline, self.mode, self.page = port, deadline, mode, page
        self.think_single, self.think_tile = think_single, think_tile
        self.csrf = secrets.token_hex(16)
        self.cookie = f"sessionid={session_key}; csrftoken={self.csrf}"
        self.fetch: list[tuple[float, float, int]] = []  # (server ms, client ms, decisions served)
        self.submit: list[tuple[float, float, int]] = []  # (server ms, client ms, decisions carried)
        self.decided: list[int] = []  # assignment ids acknowledged
        self.reconnects = 0
        self.errors: list[str] = []

    def request(self, conn, method, path, body=None):
        headers = {"Cookie": self.cookie, "Accept": "application/json"}
        if body is not None:
            headers.update({"Content-Type": "application/json", "X-CSRFToken": self.csrf, "Referer": f"http://127.0.0.1:{self.port}/"})
        t0 = time.perf_counter()
        try:
            conn.request(method, path, body=json.dumps(body) if body is not None else None, headers=headers)
            r = conn.getresponse()
        except (BrokenPipeError, ConnectionResetError, http.client.RemoteDisconnected):
            # the server closed the idle keep-alive connection while the person looked: a new one, as a browser does
            # (a submit sent again is safe: the same assignment is answered as a replay)
            conn.close()
            t0 = time.perf_counter()
            conn.request(method, path, body=json.dumps(body) if body is not None else None, headers=headers)
            r = conn.getresponse()
            self.reconnects += 1
        data = r.read()
        elapsed = (time.perf_counter() - t0) * 1000
        server = float(r.getheader("Server-Timing", "app;dur=nan").split("dur=")[1])
        if r.status != 200:
            raise RuntimeError(f"{method} {path}: {r.status} {data[:300]!r}")
        return json.loads(data), server, elapsed

    def run(self):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        rng = random.Random(self.csrf)
        try:
            if self.mode == "grid":
                self.run_grid(conn, rng)
            else:
                self.run_single(conn, rng)
        except Exception as exc:
            self.errors.append(repr(exc)[:300])
        finally:
            conn.close()

    def run_single(self, conn, rng):
        data, s, c = self.request(conn, "GET", "/api/review/next")
        self.fetch.append((s, c, len(data["items"][:1])))
        while data["items"] and time.monotonic() < self.deadline:
            item = data["items"][0]
            time.sleep(rng.uniform(0.8, 1.2) * self.think_single)
            body = {"assignment": item["assignment"], "decision": "ood", "seconds": self.think_single,
                    "have": [x["assignment"] for x in data["items"][1:]]}
            data, s, c = self.request(conn, "POST", "/api/review/submit", body)  # the answer carries the next image
            self.submit.append((s, c, 1))
            if data["saved"]["replay"]:
                self.errors.append(f"first submit of {item['assignment']} answered as a replay")
            self.decided.append(item["assignment"])

    def run_grid(self, conn, rng):
        data, s, c = self.request(conn, "GET", f"/api/review/grid/next?size={self.page}")
        self.fetch.append((s, c, len(data["tiles"])))
        while data["tiles"] and time.monotonic() < self.deadline:
            tiles = data["tiles"]
            time.sleep(rng.uniform(0.8, 1.2) * self.think_tile * len(tiles))
            marks = [{"assignment": t["assignment"], "decision": "ood"} for t in tiles]
            data, s, c = self.request(conn, "POST", "/api/review/grid/submit",
                                      {"marks": marks, "size": self.page, "seconds": self.think_tile * len(tiles)})
            self.submit.append((s, c, len(marks)))
            if data["saved"]["replays"]:
                self.errors.append(f"{data['saved']['replays']} first submits of a page answered as replays")
            self.decided += [m["assignment"] for m in marks]


def grid_available() -> bool:
    from django.urls import NoReverseMatch, reverse

    try:
        reverse("labeling_ui:api_review_grid_submit")
        return True
    except NoReverseMatch:
        return False


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--images", type=int, default=100_000)
    ap.add_argument("--annotators", type=int, default=50)
    ap.add_argument("--seconds", type=float, default=600.0)
    ap.add_argument("--workers", type=int, default=2 * (os.cpu_count() or 1) + 1, help="gunicorn worker processes")
    ap.add_argument("--threads", type=int, default=4, help="threads per gunicorn worker (50 clients wait on their people)")
    ap.add_argument("--page", type=int, default=24, help="tiles per grid page")
    ap.add_argument("--think-single", type=float, default=0.5, help="seconds a fast person takes per image on the single screen")
    ap.add_argument("--think-tile", type=float, default=0.2, help="seconds a fast person takes per tile on a grid page")
    ap.add_argument("--no-grid", action="store_true", help="everyone on the single-image screen")
    args = ap.parse_args()

    admin_url = os.environ.get("DATABASE_URL", "postgres://oodc:oodc@127.0.0.1:5432/oodc")
    bench_url = recreate_database(admin_url, "oodc_bench_race")
    data_dir = Path(os.environ.get("OODC_BENCH_DIR", "/tmp/oodc-bench-race"))
    env = {**os.environ, "DATABASE_URL": bench_url, "DJANGO_SETTINGS_MODULE": "curation.settings", "DJANGO_DEBUG": "0",
           "DB_CONN_MAX_AGE": "60", "DJANGO_SECRET_KEY": secrets.token_hex(32), "OODC_DATA_DIR": str(data_dir),
           "NLTK_DATA": os.environ.get("NLTK_DATA", str(REPO / "var" / "nltk_data"))}
    env.pop("CELERY_BROKER_URL", None)
    subprocess.run([sys.executable, "manage.py", "migrate", "--noinput", "-v", "0"], cwd=REPO, env=env, check=True)
    os.environ.update(env)
    cookies = populate(args.images, args.annotators, data_dir)
    grid = grid_available() and not args.no_grid

    port = free_port()
    with served(gunicorn_argv(port, workers=args.workers, threads=args.threads, keep_alive=30), env=env, port=port, settle_s=1.0):
        deadline = time.monotonic() + args.seconds
        clients = [Client(port, c, deadline, "grid" if grid and k % 2 else "single", args.page, args.think_single, args.think_tile)
                   for k, c in enumerate(cookies)]
        t0 = time.perf_counter()
        for c in clients:
            c.start()
        for c in clients:
            c.join()
        wall = time.perf_counter() - t0

    from django.db.models import Count, F, Sum

    from curation.models import Review, ReviewItem

    errors = [e for c in clients for e in c.errors]
    decided = [a for c in clients for a in c.decided]
    reviews = Review.objects.count()
    recorded = set(Review.objects.filter(assignment_id__in=decided).values_list("assignment_id", flat=True))
    lost = len(set(decided) - recorded)
    dup_pairs = Review.objects.values("item", "annotator").annotate(n=Count("id")).filter(n__gt=1).count()
    over = ReviewItem.objects.filter(done__gt=F("required")).count()
    done_sum = ReviewItem.objects.aggregate(s=Sum("done"))["s"] or 0

    print(f"\n{args.annotators} annotators ({'half single, half grid pages of %d' % args.page if grid else 'all single-image'}; "
          f"{args.think_single:g} s per image, {args.think_tile:g} s per tile), {args.images:,} queued images, {wall:.0f} s, "
          f"gunicorn {args.workers} workers x {args.threads} threads, {os.cpu_count()} CPUs shared with the clients")
    for mode in ("single", "grid"):
        group = [c for c in clients if c.mode == mode]
        if not group:
            continue
        for what in ("fetch", "submit"):  # fetch: the first page (cold, all clients at once); later ones come with each submit
            rows = [x for c in group for x in getattr(c, what)]
            server, client = [r[0] for r in rows], [r[1] for r in rows]
            per_decision = [r[1] / r[2] for r in rows if r[2]]
            print(f"  {mode:<6} {what:<6} n={len(rows):>6}  per request: server p50 {pct(server, 50):6.1f} p95 {pct(server, 95):6.1f} "
                  f"p99 {pct(server, 99):6.1f} ms | client p50 {pct(client, 50):6.1f} p95 {pct(client, 95):6.1f} ms  "
                  f"| per decision (client) p95 {pct(per_decision, 95):6.1f} ms")
    print(f"  reconnects after an idle keep-alive was closed: {sum(c.reconnects for c in clients)}")
    print(f"  decisions: {len(decided):,} acknowledged ({len(decided) / wall:.1f}/s); {reviews:,} review rows; counters {done_sum:,}")
    print(f"  lost: {lost}   recorded twice (image, annotator): {dup_pairs}   images over their required reviews: {over}   "
          f"client errors: {len(errors)} {errors[:3]}")
    ok = not errors and lost == 0 and dup_pairs == 0 and over == 0 and reviews == len(decided) == done_sum
    print("  consistency:", "OK" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
