"""A pool of ImageNet-21K's shape in PostgreSQL, at any size (issue 45): the rows every stage
would leave, written by COPY with the big tables' indexes and constraints built after.

    bash scripts/services.sh   # PostgreSQL
    .venv/bin/python benchmarks/bench_scale.py --images 1000000 [--seed 0] [--database oodc_scale]

The database (oodc_scale unless --database) is dropped and created again through the server in
DATABASE_URL (default postgres://oodc:oodc@127.0.0.1:5432/oodc; that database itself is never
written), migrated with Django's migrate, then filled:

- one candidate source of 19,167 classes (winter21's count; wnids drawn from the fall11 list,
  ImageNet-1K's 1,000 among them) whose sizes follow a long tail (log-normal, at 13.2M images
  a few hundred to a few thousand per class, scaled down with --images), and an ID reference
  source of ImageNet-1K (5 images per class); ImageNet-1K is the default ID class set;
- one model's prediction row per decoded image (top-5 over ImageNet-1K, max softmax, max
  logit, energy, similarity to the nearest ID image), near-duplicate groups over about 2% of
  the images, a few matches with ID images;
- a finished class filter run (a decision per class: ID classes removed, the rest kept,
  flagged or removed, some flags resolved by a curator) and a visual signal per class;
- the review queue over the accepted classes (2 reviews per image), 20 annotators' reviews of
  its first 10% (agreements, conflicts, adjudications, gold images with right and wrong
  answers, notes), a few open leases;
- one open certification plan over the undecided images (13 strata by score, the pilot
  queued), two versions of a dataset export (their members), the jobs that made all this
  (extraction with its chunks, a stale one among them) and some audit rows.

The shape (class sizes, counts per table, database size) is printed; the same --seed and
--images give the same rows. 13.2M images is --images 13200000.
"""
from __future__ import annotations

import argparse
import io
import os
import resource
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

N_CLASSES = 19_167  # ImageNet-21K winter21
N_ANNOTATORS = 20
ID_PER_CLASS = 5
MODEL = "efficientnet_lite0"
PASSWORD = "scale-bench-pw-1"
T0 = "2026-01-01 00:00:00+00"
BIG_TABLES = ("curation_image", "curation_imageembedding", "curation_reviewitem", "curation_assignment", "curation_review",
              "curation_certificationunit", "curation_exportmember", "curation_jobchunk")
STATUS = ("ok", "broken", "duplicate")
DECISIONS = ("ood", "id", "unclear", "not_target")
ITEM_STATUS = ("open", "complete", "conflict", "adjudicated")
NONE, AGREE, CONFLICT, ADJUD, ONE, GOLD = range(6)  # what happened to a queue item (KIND)
NOTES = ("blurry", "partly occluded by a hand", "two objects, one may be ID", "source label looks wrong", "watermark", "drawing, not a photo")


def database_url(name: str) -> str:
    from urllib.parse import urlparse

    admin = os.environ.get("DATABASE_URL", "postgres://oodc:oodc@127.0.0.1:5432/oodc")
    if not admin.startswith("postgres"):
        raise SystemExit("bench_scale.py measures PostgreSQL: set DATABASE_URL to a PostgreSQL server (bash scripts/services.sh starts one)")
    return urlparse(admin)._replace(path=f"/{name}").geturl()


def recreate_database(url: str) -> None:
    from urllib.parse import urlparse

    import psycopg2

    u = urlparse(url)
    name = u.path.lstrip("/")
    if name in ("oodc", "postgres", "template0", "template1"):
        raise SystemExit(f"refusing to drop {name}: name a database of its own with --database")
    conn = psycopg2.connect(host=u.hostname, port=u.port or 5432, user=u.username, password=u.password, dbname="postgres")
    conn.autocommit = True
    with conn.cursor() as cur:
        cur.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        cur.execute(f'CREATE DATABASE "{name}"')
    conn.close()


def django_setup(url: str) -> None:
    os.environ["DATABASE_URL"] = url
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "curation.settings")
    os.environ.setdefault("NLTK_DATA", str(REPO / "var" / "nltk_data"))
    os.environ["OODC_MODEL"] = MODEL  # the model the rows are written for
    os.environ.setdefault("DJANGO_DEBUG", "0")
    import django

    django.setup()


def wnid_list(wnid: str) -> str:
    return '["' + wnid + '"]'


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def class_sizes(n: int, rng: np.random.Generator) -> np.ndarray:
    """19,167 class sizes summing to n: log-normal (median ~620, the middle 90% between ~150 and
    ~2,600 at 13.2M images, clipped to 50..3,000 there), scaled to n; every class keeps one."""
    raw = np.clip(np.exp(rng.normal(np.log(620), 0.85, N_CLASSES)), 50, 3000)
    want = raw / raw.sum() * n
    sizes = np.maximum(1, np.floor(want)).astype(np.int64)
    short = n - int(sizes.sum())
    if short > 0:
        order = np.argsort(-(want - np.floor(want)))
        sizes[order[:short]] += 1
    elif short < 0:  # tiny n: take from the largest
        for k in np.argsort(-sizes)[: -short]:
            sizes[k] -= 1
    assert sizes.sum() == n and sizes.min() >= 1
    return sizes


class Copier:
    """COPY rows into a table in chunks; ``lines`` is text in COPY's format (tab, \\N)."""

    def __init__(self, cur):
        self.cur = cur
        self.rows: dict[str, int] = {}
        self.seconds: dict[str, float] = {}

    def __call__(self, table: str, columns: str, text: str, rows: int) -> None:
        t = time.perf_counter()
        self.cur.copy_expert(f"COPY {table} ({columns}) FROM STDIN", io.StringIO(text))
        self.rows[table] = self.rows.get(table, 0) + rows
        self.seconds[table] = self.seconds.get(table, 0.0) + time.perf_counter() - t


def drop_indexes(cur, tables) -> list[str]:
    """Drop the tables' secondary indexes and their unique/foreign-key constraints (the primary
    keys stay); returns the statements that build them again."""
    again: list[str] = []
    for table in tables:
        cur.execute("SELECT conname, pg_get_constraintdef(oid), contype FROM pg_constraint WHERE conrelid = %s::regclass AND contype IN ('u', 'f')",
                    [table])
        cons = cur.fetchall()
        for name, definition, kind in sorted(cons, key=lambda r: r[2] != "f"):  # foreign keys first (a unique one may back another's)
            cur.execute(f'ALTER TABLE {table} DROP CONSTRAINT "{name}"')
            again.append(f'ALTER TABLE {table} ADD CONSTRAINT "{name}" {definition}')
        cur.execute("SELECT indexname, indexdef FROM pg_indexes WHERE tablename = %s AND indexname NOT IN "
                    "(SELECT conname FROM pg_constraint WHERE conrelid = %s::regclass)", [table, table])
        for name, definition in cur.fetchall():
            cur.execute(f'DROP INDEX "{name}"')
            again.insert(0, definition)  # indexes before constraints (a foreign key's check reads them)
    return again


def generate(n: int, seed: int) -> dict:
    from django.conf import settings
    from django.db import connection

    from curation.models import (
        CandidateClass,
        CertificationPlan,
        ClassFilterRun,
        Export,
        IdClassSet,
        Job,
        ReviewSettings,
        Source,
    )
    from curation.roles import ANNOTATOR, CURATOR
    from curation.services.users import user_create_with_role
    from pipelines.classes.imagenet import named_list

    assert settings.DEFAULT_MODEL == MODEL
    rng = np.random.default_rng(seed)
    stamps: dict[str, float] = {}
    t_all = time.perf_counter()

    def stamp(label: str, t: float) -> None:
        stamps[label] = time.perf_counter() - t
        print(f"  {label}: {stamps[label]:.1f} s (peak RSS {peak_rss_mb():.0f} MB)", flush=True)

    # -- people, the ID class set, the sources and their classes (the ORM: a few thousand rows) ----
    t = time.perf_counter()
    id_wnids = list(named_list("imagenet-1k"))
    all21k = list(named_list("imagenet-21k"))
    id_set_of = set(id_wnids)
    others = [w for w in all21k if w not in id_set_of]
    pick = rng.choice(len(others), N_CLASSES - len(id_wnids), replace=False)
    wnids = sorted(id_wnids + [others[k] for k in pick])
    sizes = class_sizes(n, rng)
    annotators = [user_create_with_role(username=f"annotator{k:02d}", password=PASSWORD, role=ANNOTATOR)[0] for k in range(N_ANNOTATORS)]
    curator = user_create_with_role(username="curator", password=PASSWORD, role=CURATOR, is_staff=True)[0]
    user_create_with_role(username="admin", password=PASSWORD, role=None, is_staff=True, is_superuser=True)
    IdClassSet.objects.create(name="imagenet-1k", spec="imagenet-1k", wnids=id_wnids, is_default=True)
    pool = Source.objects.create(name="imagenet21k-winter21", root="/nonexistent/imagenet21k", description="bench_scale.py: rows only, no files")
    ref = Source.objects.create(name="imagenet1k-train", role=Source.Role.ID, root="/nonexistent/imagenet1k")
    CandidateClass.objects.bulk_create([CandidateClass(source=pool, folder=w, wnid=w, synset_name=f"{w}.n.01", lemmas=[f"class {w}"],
                                                       gloss=f"gloss of {w}", mapping="wnid_folder") for w in wnids], batch_size=5000)
    CandidateClass.objects.bulk_create([CandidateClass(source=ref, folder=w, wnid=w, synset_name=f"{w}.n.01", lemmas=[f"class {w}"],
                                                       gloss="", mapping="wnid_folder") for w in id_wnids], batch_size=5000)
    class_ids = np.array(CandidateClass.objects.filter(source=pool).order_by("folder").values_list("pk", flat=True), dtype=np.int64)
    ref_class_ids = np.array(CandidateClass.objects.filter(source=ref).order_by("folder").values_list("pk", flat=True), dtype=np.int64)
    jobs = {}
    for kind, total in (("ingest", n), ("class_filter", N_CLASSES), ("extract", n), ("dedup", n)):
        jobs[kind] = Job.objects.create(kind=kind, source=pool, status="done", progress=total, total=total, config={"bench_scale": True},
                                        started_at="2026-01-01T00:00:00Z", finished_at="2026-01-02T00:00:00Z", created_by=curator)
    stale = Job.objects.create(kind="ingest", source=ref, status="running", progress=3, total=10, config={},
                               started_at="2026-01-01T00:00:00Z", heartbeat_at="2026-01-01T00:05:00Z", worker="gone:1")
    stamp("people, sources, classes, jobs (ORM)", t)

    # -- class filter decisions and visual signals -----------------------------------------------------
    t = time.perf_counter()
    is_id = np.array([w in id_set_of for w in wnids])
    u = rng.random(N_CLASSES)
    verdict = np.where(is_id, "remove", np.where(u < 0.70, "keep", np.where(u < 0.82, "flag", "remove")))
    rule = np.where(is_id, "id_class", np.where(verdict == "keep", "", np.where(verdict == "flag", "head_noun", "hyponym_of_id")))
    rule_verdict = verdict.copy()
    r = rng.random(N_CLASSES)
    resolution = np.where((verdict == "flag") & (r < 0.4), "keep", np.where((verdict == "flag") & (r < 0.6), "remove", ""))
    verdict = np.where(resolution != "", resolution, verdict)
    visual = rng.random(N_CLASSES) < 0.03
    vr = rng.random(N_CLASSES)
    vres = np.where(visual & (vr < 0.5), "accept", np.where(visual & (vr < 0.75), "reject", ""))
    reviewable = (verdict == "keep") & (vres != "reject")
    exportable = reviewable & (~visual | (vres == "accept"))
    run = ClassFilterRun.objects.create(job=jobs["class_filter"], source=pool, candidates_spec=f"source:{pool.name}", id_spec="imagenet-1k",
                                        id_wnids=id_wnids, policy_name="default", policy_origin="built-in", policy={}, policy_digest="0" * 64,
                                        counts={v: int((rule_verdict == v).sum()) for v in ("keep", "flag", "remove")}, created_by=curator)
    with connection.cursor() as cur:
        cp = Copier(cur)
        lines = []
        for k in range(N_CLASSES):
            w = wnids[k]
            res = resolution[k]
            lines.append(f"{k}\t{w}\t{w}\tclass {w}\t{w}.n.01\t{int(sizes[k])}\t{rule_verdict[k]}\t{rule[k]}\t\t\t\t[]\t{verdict[k]}\t{rule[k]}\t\t"
                         f"{res}\t\t{T0 if res else chr(92) + 'N'}\t{class_ids[k]}\t{run.pk}\t\t\t\t[]\t"
                         f"{'medium' if rule_verdict[k] == 'flag' else ''}\t{'0.5' if rule_verdict[k] == 'flag' else chr(92) + 'N'}")
        cp("curation_classdecision", "position, key, wnid, name, synset, n_images, rule_decision, rule_name, rule_related_wnid, rule_related_name, "
           "rule_detail, fired, decision, rule, detail, resolution, resolution_note, resolved_at, candidate_class_id, run_id, closest_id_name, "
           "closest_id_wnid, evidence_model, evidence_wnids, flag_level, flag_strength", "\n".join(lines) + "\n", N_CLASSES)
        fav = rng.integers(0, 1000, N_CLASSES)  # the ID class each candidate class is most often taken for
        fav_share = np.clip(rng.beta(1.2, 5, N_CLASSES) + np.where(visual, 0.45, 0.0), 0, 0.98)
        lines = [f"{MODEL}\t{int(sizes[k])}\t{id_wnids[fav[k]]}\tclass {id_wnids[fav[k]]}\t{fav_share[k]:.3f}\t0.5\t{'t' if visual[k] else 'f'}\t"
                 f"{'visual_ambiguity' if visual[k] else ''}\t{T0}\t{class_ids[k]}\t{vres[k]}\t" for k in range(N_CLASSES)]
        cp("curation_classvisualsignal", "model_name, n_images, top_wnid, top_label, top_share, threshold, flagged, reason, updated_at, "
           "candidate_class_id, resolution, resolution_note", "\n".join(lines) + "\n", N_CLASSES)
        wn = sorted(set(wnids) | id_set_of)
        cp("curation_synsettext", "wnid, name, label, lemmas, gloss",
           "".join(f"{w}\t{w}.n.01\tclass {w}\t[\"class {w}\"]\tgloss of {w}\n" for w in wn), len(wn))
    stamp("class filter decisions, visual signals, synset texts", t)

    # -- images and predictions (COPY, indexes built after) --------------------------------------------
    with connection.cursor() as cur:
        cp.cur = cur
        cur.execute("SET maintenance_work_mem = '1GB'")
        cur.execute("SET synchronous_commit = off")
        t = time.perf_counter()
        rebuild = drop_indexes(cur, BIG_TABLES)
        stamp(f"dropped {len(rebuild)} indexes and constraints of the big tables", t)
        t = time.perf_counter()
        cls = np.repeat(np.arange(N_CLASSES), sizes)  # each image's class (position in wnids)
        starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
        within = np.arange(n) - np.repeat(starts, sizes)
        ids = np.arange(1, n + 1, dtype=np.int64)
        u = rng.random(n)
        scode = np.where(u < 0.0015, 1, np.where(u < 0.002, 2, 0)).astype(np.uint8)  # STATUS (codes keep 13M rows small)
        ok = scode == 0
        excluded = ok & (rng.random(n) < 0.0001)
        widths = rng.choice(np.array([500, 375, 640, 333, 800, 1024]), n)
        heights = rng.choice(np.array([375, 500, 480, 500, 600, 768]), n)
        nbytes = rng.integers(20_000, 400_000, n)
        # near-duplicates: a follower is dropped for the image before it in its class (its group's first)
        follower = ok & (rng.random(n) < 0.011) & (within > 0)
        follower[1:] &= ok[:-1]
        rep = ids.copy()
        lead = np.where(~follower, ids, 0)
        np.maximum.accumulate(lead, out=lead)
        rep[follower] = lead[follower]
        id_leak = ok & ~follower & (rng.random(n) < 0.0005)
        n_ref = 1000 * ID_PER_CLASS
        ref_ids = np.arange(n + 1, n + n_ref + 1, dtype=np.int64)
        sim = np.clip(rng.beta(2.2, 3.5, n) + np.where(follower | id_leak, 0.3, 0.0), 0, 1)
        near = ref_ids[rng.integers(0, n_ref, n)]
        top1 = np.where(rng.random(n) < fav_share[cls], fav[cls], rng.integers(0, 1000, n))
        others5 = rng.integers(0, 1000, (n, 4))
        p1 = np.clip(rng.beta(2, 3, n), 0.05, 0.99)
        decode_failed = ok & (rng.random(n) < 0.0003)
        wn_arr = np.array(wnids)
        idw = np.array(id_wnids)
        CH = 200_000
        for a in range(0, n, CH):
            b = min(n, a + CH)
            hexes = rng.bytes(32 * (b - a)).hex()
            img, emb = [], []
            for j in range(a, b):
                w = wn_arr[cls[j]]
                st = STATUS[scode[j]]
                i = ids[j]
                img.append(f"{i}\t{pool.pk}\t{class_ids[cls[j]]}\t{w}/{w}_{within[j]}.JPEG\t{hexes[64 * (j - a):64 * (j - a + 1)]}\t{widths[j]}\t"
                           f"{heights[j]}\t1\tJPEG\tRGB\t{nbytes[j]}\t1700000000000000000\t{st}\t{'truncated' if st == 'broken' else ''}\t"
                           f"{'image file is truncated' if st == 'broken' else ''}\t{i - 1 if st == 'duplicate' else chr(92) + 'N'}\t"
                           f"{'bench: excluded' if excluded[j] else ''}\t{T0}\t{T0}")
                if st != "ok":
                    continue
                if decode_failed[j]:
                    emb.append(f"{i}\t{i}\t{MODEL}\tf\tcannot decode\t-1\t[]\t\t\\N\t\\N\t\\N\t\\N\t{T0}\t\\N\t\t\\N\t\t\\N\t\\N")
                    continue
                o = others5[j]
                p = p1[j]
                rest = (1 - p)
                drop = f"near_duplicate_of:{rep[j]}" if follower[j] else (f"duplicate_of_id:{near[j]}" if id_leak[j] else "")
                g = rep[j]
                emb.append(f"{i}\t{i}\t{MODEL}\tt\t\t{j}\t[[\"{idw[top1[j]]}\", {p:.4f}], [\"{idw[o[0]]}\", {rest * .4:.4f}], "
                           f"[\"{idw[o[1]]}\", {rest * .2:.4f}], [\"{idw[o[2]]}\", {rest * .1:.4f}], [\"{idw[o[3]]}\", {rest * .05:.4f}]]\t"
                           f"{idw[top1[j]]}\t{p:.4f}\t{p:.4f}\t{8 + 6 * p:.3f}\t{-9 - 6 * p:.3f}\t{T0}\t{g}\t{drop}\t{g}\t{drop}\t{near[j]}\t{sim[j]:.5f}")
            cp("curation_image", "id, source_id, candidate_class_id, relative_path, sha256, width, height, orientation, format, mode, bytes, "
               "mtime_ns, status, error_code, error, duplicate_of_id, excluded_reason, created_at, updated_at", "\n".join(img) + "\n", b - a)
            cp("curation_imageembedding", "id, image_id, model_name, ok, error, row, topk, top1_wnid, top1_prob, max_softmax, max_logit, energy, "
               "created_at, search_group, search_drop, dup_group, drop_reason, nearest_id_image_id, nearest_id_similarity", "\n".join(emb) + "\n",
               len(emb))
            if (a // CH) % 10 == 9:
                print(f"    {b:,} images", flush=True)
        # the ID reference source: 5 images per ImageNet-1K class, and their predictions
        ref_cls = np.repeat(np.arange(1000), ID_PER_CLASS)
        hexes = rng.bytes(32 * n_ref).hex()
        cp("curation_image", "id, source_id, candidate_class_id, relative_path, sha256, width, height, orientation, format, mode, bytes, mtime_ns, "
           "status, error_code, error, excluded_reason, created_at, updated_at",
           "".join(f"{ref_ids[k]}\t{ref.pk}\t{ref_class_ids[ref_cls[k]]}\t{idw[ref_cls[k]]}/{k}.JPEG\t{hexes[64 * k:64 * k + 64]}\t500\t375\t1\tJPEG\t"
                   f"RGB\t100000\t0\tok\t\t\t\t{T0}\t{T0}\n" for k in range(n_ref)), n_ref)
        cp("curation_imageembedding", "id, image_id, model_name, ok, error, row, topk, top1_wnid, top1_prob, max_softmax, max_logit, energy, "
           "created_at, search_group, search_drop, dup_group, drop_reason",
           "".join(f"{ref_ids[k]}\t{ref_ids[k]}\t{MODEL}\tt\t\t{k}\t[[\"{idw[ref_cls[k]]}\", 0.9]]\t{idw[ref_cls[k]]}\t0.9\t0.9\t14\t-15\t{T0}\t"
                   f"{ref_ids[k]}\t\t{ref_ids[k]}\t\n" for k in range(n_ref)), n_ref)
        stamp(f"images and predictions ({n:,} + {n_ref:,} ID images)", t)

        # -- the review queue over the accepted classes, reviews of its first 10% ------------------------
        t = time.perf_counter()
        eligible = ok & ~excluded & ~decode_failed & ~follower & ~id_leak & reviewable[cls]
        e_idx = np.flatnonzero(eligible)
        order = e_idx[np.lexsort((ids[e_idx], -sim[e_idx]))]  # served first: most similar to ID (priority = -similarity)
        m = len(order)
        item_ids = np.arange(1, m + 1, dtype=np.int64)  # item k is order[k-1]
        n_rev = int(round(0.10 * m))
        kind = np.zeros(m, np.uint8)  # what happened to the reviewed ones: KIND
        rr = rng.random(n_rev)
        kind[:n_rev] = np.where(rr < 0.80, AGREE, np.where(rr < 0.85, CONFLICT, np.where(rr < 0.87, ADJUD, ONE)))
        gold = np.zeros(m, bool)
        gold[:n_rev] = rng.random(n_rev) < 0.005
        kind[gold] = GOLD
        truth = np.searchsorted(np.cumsum([0.80, 0.12, 0.05, 0.03]), rng.random(m) * 0.99999).astype(np.uint8)  # DECISIONS
        other = ((truth + rng.integers(1, 4, m)) % 4).astype(np.uint8)
        st_item = np.array([0, 1, 2, 3, 0, 1], np.uint8)[kind]  # ITEM_STATUS by KIND
        decided = np.isin(kind, [AGREE, ADJUD, GOLD])
        done = np.array([0, 2, 2, 2, 1, 5], np.uint8)[kind]
        imgs = ids[order]
        for a in range(0, m, 500_000):
            fin = [DECISIONS[t] if d else "" for t, d in zip(truth[a:a + 500_000].tolist(), decided[a:a + 500_000].tolist())]
            lines = [f"{item_ids[k]}\t{imgs[k]}\t{pool.pk}\t{class_ids[cls[order[k]]]}\t{-sim[order[k]]:.5f}\t2\t{done[k]}\t0\t"
                     f"{ITEM_STATUS[st_item[k]]}\t{fin[k - a]}\t"
                     f"{wnid_list(idw[top1[order[k]]]) if fin[k - a] == 'id' else '[]'}\t\t"
                     f"{T0 if fin[k - a] else chr(92) + 'N'}\t{'t' if gold[k] else 'f'}\t{T0}\t"
                     f"{curator.pk if kind[k] == ADJUD else chr(92) + 'N'}" for k in range(a, min(m, a + 500_000))]
            cp("curation_reviewitem", "id, image_id, source_id, candidate_class_id, priority, required, done, leased, status, final_decision, "
               "final_wnids, final_note, decided_at, is_gold, created_at, decided_by_id", "\n".join(lines) + "\n", len(lines))
        ReviewSettings.objects.create(source=pool, reviews_required=2, order="nearest_id", gold_rate=0.02, updated_by=curator)
        stamp(f"review queue ({m:,} items)", t)
        t = time.perf_counter()
        ann = np.array([a.pk for a in annotators])
        asg, rev = [], []
        aid = 0
        minutes = rng.integers(0, 30 * 24 * 60, 5 * n_rev + 1)
        secs = np.clip(rng.lognormal(np.log(4), 0.7, 5 * n_rev + 1), 0.5, 300)
        note_of = rng.random(5 * n_rev + 1)
        first, step = rng.integers(0, N_ANNOTATORS, n_rev), rng.integers(0, N_ANNOTATORS - 1, n_rev)
        for k in range(n_rev):
            who = rng.choice(N_ANNOTATORS, int(done[k]), replace=False) if done[k] > 2 else \
                (first[k], (first[k] + 1 + step[k]) % N_ANNOTATORS)[: done[k]]
            for q, x in enumerate(who):
                aid += 1
                if kind[k] in (CONFLICT, ADJUD) and q == 1:
                    d = DECISIONS[other[k]]
                elif kind[k] == GOLD and q == 0:
                    d = DECISIONS[other[k]]  # a wrong answer on a gold image
                else:
                    d = DECISIONS[truth[k]]
                when = f"2026-01-{1 + minutes[aid] // 1440:02d} {(minutes[aid] // 60) % 24:02d}:{minutes[aid] % 60:02d}:00+00"
                g = kind[k] == GOLD
                asg.append(f"{aid}\t{item_ids[k]}\t{ann[x]}\tdone\t{'t' if g else 'f'}\t{when}\t{when}\t{when}")
                note = NOTES[int(note_of[aid] * 1000) % len(NOTES)] if note_of[aid] < 0.02 else ""
                rev.append(f"{aid}\t{item_ids[k]}\t{ann[x]}\t{aid}\t{d}\t{wnid_list(idw[top1[order[k]]]) if d == 'id' else '[]'}\t{note}\t"
                           f"{secs[aid]:.2f}\t{'t' if g else 'f'}\t{('t' if d == DECISIONS[truth[k]] else 'f') if g else chr(92) + 'N'}\t{when}")
        # open leases: 10 per annotator on undecided items
        for x in range(N_ANNOTATORS):
            for q in range(10):
                aid += 1
                k = n_rev + x * 10 + q
                if k < m:
                    asg.append(f"{aid}\t{item_ids[k]}\t{ann[x]}\tleased\tf\t2026-01-31 00:00:00+00\t2099-01-01 00:00:00+00\t\\N")
        cp("curation_assignment", "id, item_id, annotator_id, state, is_gold, leased_at, expires_at, finished_at", "\n".join(asg) + "\n", len(asg))
        cp("curation_review", "id, item_id, annotator_id, assignment_id, decision, id_wnids, note, seconds, is_gold, gold_correct, created_at",
           "\n".join(rev) + "\n", len(rev))
        cur.execute("UPDATE curation_reviewitem SET leased = 1 WHERE id IN (SELECT item_id FROM curation_assignment WHERE state = 'leased')")
        del asg, rev
        stamp(f"assignments and reviews ({cp.rows['curation_review']:,} reviews by {N_ANNOTATORS} annotators)", t)

        # -- one open certification plan over the undecided images --------------------------------------
        t = time.perf_counter()
        pop = np.flatnonzero((st_item == 0) & ~gold)
        H = 13
        edges = np.quantile(sim[order[pop]], np.linspace(0, 1, H + 1)[1:-1])
        stratum = np.searchsorted(edges, sim[order[pop]])
        key = rng.random(len(pop))
        srt = np.lexsort((key, stratum))
        draw = np.empty(len(pop), np.int64)
        first_of = np.searchsorted(stratum[srt], np.arange(H))
        draw[srt] = np.arange(len(pop)) - first_of[stratum[srt]]
        serve = np.where(draw < 5, draw * H + stratum, -1)
        plan = CertificationPlan.objects.create(
            source=pool, model_name=MODEL, score="nearest_id_similarity", n_strata=H, seed=seed, pilot=5, prior="betting",
            allocation=[{"start": 0, "end": 5 * H, "weights": [1.0 / H] * H, "sampler": 2}], sampler=2, code_version="bench_scale",
            strata=[{"size": int((stratum == h).sum()), "edge": float(np.r_[edges, 1.0][h]), "full": False, "covariate": 0.0} for h in range(H)],
            created_by=curator)
        for a in range(0, len(pop), 1_000_000):
            sl = slice(a, a + 1_000_000)
            cp("curation_certificationunit", "plan_id, item_id, stratum, draw, serve",
               "".join(f"{plan.pk}\t{i}\t{s}\t{d}\t{v if v >= 0 else chr(92) + 'N'}\n"
                       for i, s, d, v in zip(item_ids[pop[sl]].tolist(), stratum[sl].tolist(), draw[sl].tolist(), serve[sl].tolist())),
               len(pop[sl]))
        stamp(f"certification plan ({len(pop):,} units)", t)

        # -- two export versions ----------------------------------------------------------------------------
        t = time.perf_counter()
        ood = np.flatnonzero(decided & (truth == 0) & exportable[cls[order]])
        for version, share in ((1, 0.6), (2, 1.0)):
            members = ood[: int(len(ood) * share)]
            job = Job.objects.create(kind="export", source=None, status="done", progress=len(members), total=len(members), created_by=curator,
                                     config={"name": "in21k-ood", "version": version}, started_at="2026-01-20T00:00:00Z",
                                     finished_at="2026-01-20T01:00:00Z")
            ex = Export.objects.create(name="in21k-ood", version=version, status="done", job=job, config={"layout": "folder", "sources": [pool.name]},
                                       path=f"in21k-ood/v{version}", manifest_sha256="0" * 64, counts={"images": int(len(members))},
                                       created_by=curator, finished_at="2026-01-20T01:00:00Z")
            cp("curation_exportmember", "export_id, image_id, sha256, wnid, files",
               "".join(f"{ex.pk}\t{i}\t{'%064x' % i}\t{wn_arr[c]}\t{{\"folder\": \"{wn_arr[c]}/{i}.jpg\"}}\n"
                       for i, c in zip(ids[order[members]].tolist(), cls[order[members]].tolist())), len(members))
        # the extraction job's chunks (1,024 images each), and a few hundred audit rows
        n_chunks = (n + 1023) // 1024
        cp("curation_jobchunk", "job_id, index, payload, done, stats, attempts, done_at, lease_owner",
           "".join(f"{jobs['extract'].pk}\t{k}\t{{\"start\": {k * 1024}, \"stop\": {min(n, (k + 1) * 1024)}}}\tt\t{{}}\t1\t{T0}\t\n"
                   for k in range(n_chunks)), n_chunks)
        cp("curation_jobchunk", "job_id, index, payload, done, stats, attempts, lease_owner",
           "".join(f"{stale.pk}\t{k}\t{{}}\t{'t' if k < 3 else 'f'}\t{{}}\t1\t\n" for k in range(10)), 10)
        cp("curation_auditlog", "action, target_type, target_id, data, created_at, actor_id",
           "".join(f"review_queue_synced\tsource\t{pool.pk}\t{{}}\t{T0}\t{curator.pk}\n" for _ in range(500)), 500)
        stamp("exports, job chunks, audit rows", t)

        # -- indexes and constraints, sequences, statistics ----------------------------------------------
        t = time.perf_counter()
        for statement in rebuild:
            cur.execute(statement)
        stamp("indexes and constraints built", t)
        t = time.perf_counter()
        for table in BIG_TABLES + ("curation_classdecision", "curation_classvisualsignal", "curation_synsettext", "curation_auditlog"):
            cur.execute(f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), GREATEST(1, (SELECT COALESCE(MAX(id), 0) FROM {table})))")
        stamp("sequences", t)
    t = time.perf_counter()
    with connection.cursor() as cur:
        cur.execute("VACUUM (ANALYZE)")
    stamp("vacuum analyze", t)
    stamps["total"] = time.perf_counter() - t_all
    return {"stamps": stamps, "rows": cp.rows, "sizes": sizes, "items": m, "reviewed_items": n_rev, "units": int(len(pop))}


def print_shape(n: int, seed: int, result: dict) -> None:
    from django.db import connection

    sizes = result["sizes"]
    q = np.percentile(sizes, [0, 5, 50, 95, 100]).astype(int)
    print(f"\nshape (seed {seed}): {n:,} candidate images in {N_CLASSES:,} classes; per class min {q[0]:,}, 5% {q[1]:,}, median {q[2]:,}, "
          f"95% {q[3]:,}, max {q[4]:,}")
    with connection.cursor() as cur:
        cur.execute("SELECT relname, n_live_tup FROM pg_stat_user_tables WHERE relname LIKE 'curation_%%' AND n_live_tup > 0 ORDER BY n_live_tup DESC")
        for name, rows in cur.fetchall():
            print(f"  {name:34s} {rows:>12,}")
        cur.execute("SELECT status, count(*) FROM curation_reviewitem GROUP BY 1 ORDER BY 2 DESC")
        print("  review items by status: " + ", ".join(f"{s} {c:,}" for s, c in cur.fetchall()))
        cur.execute("SELECT pg_database_size(current_database())")
        size = cur.fetchone()[0]
    print(f"database size {size / 2**30:.2f} GiB ({size / 2**30 / (n / 1e6):.2f} GiB per million images); "
          f"generated in {result['stamps']['total']:.0f} s; peak RSS {peak_rss_mb():.0f} MB")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--images", type=int, default=1_000_000, help="candidate images (13,200,000 = ImageNet-21K winter21)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--database", default="oodc_scale", help="the database to drop, create and fill (never the one in DATABASE_URL)")
    args = ap.parse_args()
    if args.images < N_CLASSES:
        print(f"--images must be at least {N_CLASSES:,} (one per class)", file=sys.stderr)
        return 1
    url = database_url(args.database)
    recreate_database(url)
    django_setup(url)
    from django.core.management import call_command

    t = time.perf_counter()
    call_command("migrate", verbosity=0)
    print(f"{args.database}: migrated in {time.perf_counter() - t:.1f} s; writing {args.images:,} images (seed {args.seed})", flush=True)
    result = generate(args.images, args.seed)
    print_shape(args.images, args.seed, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
