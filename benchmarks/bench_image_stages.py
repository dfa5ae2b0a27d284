"""The duplicate search at pool sizes (issue 56): each stage's wall time and every process's peak
resident memory, one worker against two, the planted truth found, and the single-process search
it replaces as the baseline in the same run.

    .venv/bin/python benchmarks/bench_image_stages.py --sizes 50000,200000 --dim 256 [--baseline-up-to 200000]

Also measured at each size: find-similar's index over the candidates (built as the service builds it,
with PQ codes whatever the size: its build time, peak memory, size on disk, recall@20 against brute
force on 200 queries and their latency) and the embedding map (PCA, fitted on a quarter of the
candidates up to 50,000, the rest placed).

Needs PostgreSQL (DATABASE_URL of a user that may create databases; scripts/services.sh starts
one): each size gets a fresh database ``<name>_bench_dup_<n>``, dropped afterwards unless --keep.

The pool (its rows, the ID reference and the features the extraction would have written, as
float16 shards of 50,000 rows): 90% candidates in classes of 200 images (a centre each; images at
cosine about 0.5 to it, about 0.3 to each other), 10% ID images of their own classes; planted
among the candidates: chains of three near-copies (each at cosine 0.90-0.99 to the one before,
the same picture), candidates that copy an ID image (cosine 0.90-0.98), and look-alikes (cosine
0.95 to an image, another picture: the pixel check must refuse them). Only the planted images
are written as files (the pixel check reads only the images of a feature match).

Every stage runs in processes of its own (``--step``), as Celery workers would run them, so each
process's peak resident memory (getrusage) is its own: the plan; the assignment chunks; the first
finalize; the join chunks; the last finalize. With two workers, two processes take the chunks of
each phase (leases keep them apart). The baseline is what the job did before (the rows as model
instances, every feature as one float32 array, near_dups.find_duplicates in one process).
Recall against exact search: for every planted candidate and a seeded sample of 1,000 others, every
candidate at or above the threshold by brute force; the share of those pairs whose cells the
job's plan (same seed, sample, cells and probes) compares, i.e. the feature pairs the join finds.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
SHARD_ROWS = 50_000



def _django(db_url: str, store: Path) -> None:
    os.environ["DATABASE_URL"] = db_url
    os.environ["OODC_FEATURE_STORE"] = str(store)
    os.environ.pop("CELERY_BROKER_URL", None)
    os.environ.setdefault("NLTK_DATA", str(REPO / "var" / "nltk_data"))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "curation.settings")
    import django

    django.setup()


def _rss_mb() -> float:
    """This process's peak resident memory (VmHWM). Not getrusage's ru_maxrss: Linux carries that
    across execve, so a step would report the memory of the benchmark process that started it."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


# -- the pool ----------------------------------------------------------------------------------------


def _unit(x: np.ndarray) -> np.ndarray:
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


def _near(rng, v: np.ndarray, cos: np.ndarray) -> np.ndarray:
    r = rng.standard_normal(v.shape).astype(np.float32)
    r -= (r * v).sum(axis=1, keepdims=True) * v
    r = _unit(r)
    return cos[:, None] * v + np.sqrt(1 - cos[:, None] ** 2) * r


def build(n: int, dim: int, work: Path, seed: int = 0) -> dict:
    """The pool in the database and the feature store; returns the planted truth (image ids)."""
    import hashlib

    from django.conf import settings

    from curation.models import CandidateClass, FeatureShard, Image, ImageEmbedding, Source
    from tests.dup_pool import picture, png  # the tests' pool's generated pictures

    rng = np.random.default_rng(seed)
    n_ref = n // 10
    n_cand = n - n_ref
    n_classes = max(1, n_cand // 200)
    cand = Source.objects.create(name="bench-cand", role=Source.Role.CANDIDATE, root=str(work / "cand"))
    ref = Source.objects.create(name="bench-ref", role=Source.Role.ID, root=str(work / "ref"))
    classes = CandidateClass.objects.bulk_create([CandidateClass(source=cand, folder=f"c{c}", mapping="unmapped") for c in range(n_classes)])
    centres = _unit(rng.standard_normal((n_classes + 50, dim)).astype(np.float32))
    x = np.empty((n, dim), dtype=np.float32)
    cls = np.empty(n, dtype=np.int64)
    cls[:n_cand] = np.arange(n_cand) % n_classes
    cls[n_cand:] = n_classes + rng.integers(0, 50, n_ref)
    for s in range(0, n, 100_000):
        e = min(n, s + 100_000)
        x[s:e] = _near(rng, centres[cls[s:e]], np.full(e - s, 0.55, dtype=np.float32))
    # planted: chains a -> b -> c, ID copies, look-alikes (positions among the candidates)
    n_chains, n_id, n_look = max(4, n_cand // 1000), max(4, n_cand // 2000), max(4, n_cand // 2000)
    picks = rng.choice(n_cand, size=n_chains * 3 + n_id + n_look * 2, replace=False)
    chains = picks[:n_chains * 3].reshape(n_chains, 3)
    id_c = picks[n_chains * 3:n_chains * 3 + n_id]
    id_r = n_cand + rng.choice(n_ref, size=n_id, replace=False)
    look = picks[n_chains * 3 + n_id:].reshape(n_look, 2)
    for step in (1, 2):
        x[chains[:, step]] = _near(rng, x[chains[:, step - 1]], rng.uniform(0.90, 0.99, n_chains).astype(np.float32))
    x[id_c] = _near(rng, x[id_r], rng.uniform(0.90, 0.98, n_id).astype(np.float32))
    x[look[:, 1]] = _near(rng, x[look[:, 0]], np.full(n_look, 0.95, dtype=np.float32))
    pics: dict[int, np.ndarray] = {}
    for row in chains:
        pics[int(row[0])] = picture(seed * 7 + int(row[0]))
        for p in row[1:]:
            pics[int(p)] = np.clip(pics[int(row[0])].astype(np.int16) + rng.integers(-2, 3, pics[int(row[0])].shape), 0, 255).astype(np.uint8)
    for c, r in zip(id_c.tolist(), id_r.tolist()):
        pics[r] = picture(seed * 7 + r)
        pics[c] = np.clip(pics[r].astype(np.int16) + rng.integers(-2, 3, pics[r].shape), 0, 255).astype(np.uint8)
    for a, b in look.tolist():
        pics[a], pics[b] = picture(seed * 7 + a), picture(seed * 7 + b + 10**7)
    images = []
    for i in range(n):
        source = cand if i < n_cand else ref
        rel = f"c{cls[i]}/{i:08d}.png"
        sha, size = f"{i:064x}", 0
        if i in pics:
            data = png(pics[i])
            path = Path(source.root) / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
            sha, size = hashlib.sha256(data).hexdigest(), len(data)
        images.append(Image(source=source, candidate_class=classes[cls[i]] if i < n_cand else None, relative_path=rel, sha256=sha,
                            width=40, height=32, bytes=size, format="PNG", mode="RGB", status=Image.Status.OK))
        if len(images) == 20_000:
            Image.objects.bulk_create(images, batch_size=5000)
            images = []
    Image.objects.bulk_create(images, batch_size=5000)
    ids = np.array(list(Image.objects.order_by("pk").values_list("pk", flat=True)), dtype=np.int64)
    store = Path(settings.FEATURE_STORE)
    embs = []
    for k, s in enumerate(range(0, n, SHARD_ROWS)):
        e = min(n, s + SHARD_ROWS)
        rel = f"efficientnet_lite0/bench/shard_{k:05d}.npy"
        (store / rel).parent.mkdir(parents=True, exist_ok=True)
        np.save(store / rel, x[s:e].astype(np.float16))
        shard = FeatureShard.objects.create(model_name="efficientnet_lite0", path=rel, rows=e - s, dim=dim)
        for r in range(e - s):
            embs.append(ImageEmbedding(image_id=int(ids[s + r]), model_name="efficientnet_lite0", ok=True, shard=shard, row=r,
                                       top1_wnid="n01440764", top1_prob=0.5, max_softmax=0.5, topk=[]))
        ImageEmbedding.objects.bulk_create(embs, batch_size=5000)
        embs = []
    np.save(work / "x.npy", x.astype(np.float16))
    return {"near": [[int(ids[a]), int(ids[b])] for row in chains for a, b in zip(row[:-1], row[1:])],
            "id": {str(int(ids[c])): int(ids[r]) for c, r in zip(id_c, id_r)},
            "look": [[int(ids[a]), int(ids[b])] for a, b in look], "n_cand": n_cand, "n_ref": n_ref,
            "features_bytes": int(sum(p.stat().st_size for p in store.rglob("*.npy")))}


# -- one step in a process of its own ------------------------------------------------------------------


def step_main(args) -> None:
    _django(args.db, Path(args.store))

    from curation.jobs.protocol import NextPhase
    from curation.jobs.runner import run_step
    from curation.models import JobChunk

    t0 = time.perf_counter()
    out: dict = {}
    if args.step == "plan":
        out["chunks"] = len(run_step(job_id=args.job, step="plan", queue_next=False))
    elif args.step == "chunks":
        done = 0
        while True:  # take the next free chunk; one a live lease holds is another worker's
            todo = list(JobChunk.objects.filter(job_id=args.job, done=False).order_by("index").values_list("index", flat=True))
            took = False
            for index in todo:
                if run_step(job_id=args.job, step="chunk", index=index, queue_next=False) is not None:
                    done += 1
                    took = True
            if not took:
                break
        out["chunks"] = done
    else:
        r = run_step(job_id=args.job, step="finalize", queue_next=False)
        out["next_phase"] = isinstance(r, NextPhase)
    out.update(wall=time.perf_counter() - t0, rss_mb=_rss_mb())
    print("RESULT " + json.dumps(out))


def baseline_main(args) -> None:
    """The search as the job did it before issue 56, in one process."""
    _django(args.db, Path(args.store))
    from django.conf import settings

    from curation.models import Image, ImageEmbedding, Source
    from curation.services.image_pipeline import load_features
    from pipelines.features.near_dups import PixelCheck, find_duplicates

    t0 = time.perf_counter()
    base = (ImageEmbedding.objects.filter(model_name="efficientnet_lite0", ok=True, image__status=Image.Status.OK)
            .select_related("shard", "image__candidate_class", "image__source").order_by("image_id"))
    cands = list(base.filter(image__source__role=Source.Role.CANDIDATE))
    refs = list(base.filter(image__source__role=Source.Role.ID))
    cand_x, ref_x = load_features(cands), load_features(refs)
    everyone = cands + refs
    check = PixelCheck([e.image.ref() for e in everyone], [e.image.sha256 for e in everyone], settings.NEAR_DUP_MAX_PIXEL_DIFF)
    verdicts, grouping = find_duplicates(cand_x, ref_x, cand_sha256=[e.image.sha256 for e in cands], ref_sha256=[e.image.sha256 for e in refs],
                                         priority=[(-(e.image.width * e.image.height), e.image_id) for e in cands],
                                         threshold=settings.NEAR_DUP_THRESHOLD, id_threshold=settings.ID_DUP_THRESHOLD,
                                         exact_below=settings.NEAR_DUP_EXACT_BELOW, looks_same=check)
    print("RESULT " + json.dumps({"wall": time.perf_counter() - t0, "rss_mb": _rss_mb(), "dropped": sum(bool(v.drop) for v in verdicts)}))


def similar_main(args) -> None:
    """Find-similar over the candidates (issue 56): the index built as the service builds it (rows as
    arrays, features in blocks; PQ codes re-ranked from the shards above OODC_SIMILAR_FLAT_MAX_BYTES),
    its peak memory and size, then recall@20 against brute force and the query latency."""
    _django(args.db, Path(args.store))
    from django.conf import settings

    from curation.models import ImageEmbedding, Source
    from curation.services.similar import _feature_set_key, _index_path, similar_index_build
    from pipelines.features import similar as sim

    t0 = time.perf_counter()
    idx = similar_index_build(model_name="efficientnet_lite0", role=Source.Role.CANDIDATE)
    build_s, build_rss = time.perf_counter() - t0, _rss_mb()
    path = _index_path("efficientnet_lite0", Source.Role.CANDIDATE, _feature_set_key("efficientnet_lite0", Source.Role.CANDIDATE))
    size = sum(Path(f"{path}{suffix}").stat().st_size for suffix in ("", ".ids.npy", ".rows.npz"))
    x = np.load(Path(args.work) / "x.npy", mmap_mode="r")
    pos = {int(i): k for k, i in enumerate(ImageEmbedding.objects.order_by("image_id").values_list("image_id", flat=True))}
    cand_rows = np.array([pos[int(i)] for i in idx.ids], dtype=np.int64)  # index row -> row of x
    rng = np.random.default_rng(2)
    queries = rng.choice(len(idx.ids), size=200, replace=False)
    base = np.asarray(x[cand_rows], dtype=np.float32)
    base /= np.linalg.norm(base, axis=1, keepdims=True)
    hits, lat = 0, []
    for r in queries.tolist():
        q = base[r]
        t = time.perf_counter()
        got = sim.search(idx, q, 20, exclude=int(idx.ids[r]))
        lat.append(time.perf_counter() - t)
        s = base @ q
        s[r] = -np.inf
        want = set(idx.ids[np.argpartition(-s, 20)[:20]].tolist())
        hits += len({i for i, _c in got} & want)
    print("RESULT " + json.dumps({"kind": idx.kind, "nprobe": idx.nprobe, "build_s": build_s, "rss_mb": build_rss, "index_bytes": size,
                                  "recall20": hits / (20 * len(queries)), "p50_ms": 1000 * float(np.percentile(lat, 50)),
                                  "p95_ms": 1000 * float(np.percentile(lat, 95)), "flat_max": settings.SIMILAR_FLAT_MAX_BYTES}))


def map_main(args) -> None:
    """The embedding map of the candidate source as its job makes it (PCA; fitted on a sample above OODC_MAP_FIT_MAX)."""
    _django(args.db, Path(args.store))
    from curation.models import Job, Source
    from curation.services.embedding_map import embedding_map_execute

    source = Source.objects.get(name="bench-cand")
    job = Job.objects.create(kind=Job.Kind.EMBEDDING_MAP, source=source, config={"model": "efficientnet_lite0", "method": "pca", "key": ""})
    t0 = time.perf_counter()
    job = embedding_map_execute(job_id=job.pk)
    print("RESULT " + json.dumps({"wall": time.perf_counter() - t0, "rss_mb": _rss_mb(), "fitted": job.result.get("fitted"),
                                  "placed": job.result.get("placed")}))


def _run(cmd: list[str], env: dict) -> subprocess.Popen:
    return subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _result(p: subprocess.Popen) -> dict:
    out, err = p.communicate()
    if p.returncode != 0:
        raise SystemExit(f"a step failed (exit {p.returncode}):\n{err[-3000:]}")
    parts = [line.split("duplicate search #", 1)[1].split(": ", 1)[1] for line in err.splitlines() if "duplicate search #" in line]
    return {**json.loads(next(line for line in out.splitlines() if line.startswith("RESULT "))[7:]), "parts": parts}


# -- one size ----------------------------------------------------------------------------------------


def size_main(args) -> None:
    """Build the pool at one size, then run the search with one and with two workers."""
    work = Path(args.work) / f"n{args.one}"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    store = work / "features"
    _django(args.db, store)
    from django.conf import settings
    from django.core.management import call_command

    from curation.models import ImageEmbedding, Job
    from curation.services.image_pipeline import dedup_start

    call_command("migrate", verbosity=0)
    t0 = time.perf_counter()
    truth = build(args.one, args.dim, work)
    build_s = time.perf_counter() - t0
    me = [sys.executable, str(Path(__file__).resolve())]
    env = {**os.environ, "DATABASE_URL": args.db, "OODC_FEATURE_STORE": str(store)}
    report: dict = {"n": args.one, "dim": args.dim, "build_s": build_s, "features_bytes": truth["features_bytes"], "runs": {}}
    states = {}
    for workers in (1, 2):
        ImageEmbedding.objects.update(search_group=None, search_drop="", dup_group=None, drop_reason="", nearest_id_image=None,
                                      nearest_id_similarity=None)
        job = dedup_start(model_name="efficientnet_lite0", enqueue=False)
        stages = []
        base = [*me, "--db", args.db, "--store", str(store), "--job", str(job.pk)]
        for name, step, n_proc in (("plan", "plan", 1), ("assign", "chunks", workers), ("cells", "finalize", 1),
                                   ("join", "chunks", workers), ("write", "finalize", 1)):
            t = time.perf_counter()
            # each worker gets its share of the cores for BLAS and faiss (two workers with two threads each on two
            # cores would measure oversubscription, not the work)
            threads = str(max(1, (os.cpu_count() or 1) // n_proc))
            step_env = {**env, "OMP_NUM_THREADS": threads, "OPENBLAS_NUM_THREADS": threads, "MKL_NUM_THREADS": threads,
                        "LOG_LEVEL": "INFO"}  # the last finalize logs its parts' times
            procs = [_run([*base, "--step", step], step_env) for _ in range(n_proc)]
            results = [_result(p) for p in procs]
            wall = time.perf_counter() - t
            disk = sum(p.stat().st_size for p in (store / "dedup").rglob("*") if p.is_file()) if (store / "dedup").exists() else 0
            stages.append({"stage": name, "wall": wall, "rss_mb": [r["rss_mb"] for r in results], "parts": [x for r in results for x in r["parts"]],
                           "chunks": [r.get("chunks") for r in results], "work_bytes": disk})
        job.refresh_from_db()
        assert job.status == Job.Status.DONE, job.message
        state = dict((i, (g, d, n)) for i, g, d, n in ImageEmbedding.objects.filter(image__source__role="candidate")
                     .values_list("image_id", "search_group", "search_drop", "nearest_id_image_id"))
        states[workers] = state
        group = {i: s[0] for i, s in state.items()}
        found = sum(group[a] == group[b] for a, b in truth["near"])
        id_found = sum(state[int(c)][1] == f"duplicate_of_id:{r}" for c, r in truth["id"].items())
        look_kept = sum(group[a] != group[b] for a, b in truth["look"])
        report["runs"][workers] = {"stages": stages, "result": job.result, "planted_found": found / len(truth["near"]),
                                   "id_copies_found": id_found / len(truth["id"]), "look_alikes_refused": look_kept / len(truth["look"])}
    report["two_workers_equal_one"] = states[1] == states[2]
    # recall against exact search, on a sample of candidates (pairs before the pixel check: the feature search itself)
    x = np.load(work / "x.npy").astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    n_cand = truth["n_cand"]
    rng = np.random.default_rng(1)
    pos = {int(i): k for k, i in enumerate(np.array(list(ImageEmbedding.objects.order_by("image_id").values_list("image_id", flat=True))))}
    planted = {pos[i] for pair in truth["near"] + truth["look"] for i in pair}
    sample = np.array(sorted(planted | set(rng.choice(n_cand, size=min(1000, n_cand), replace=False).tolist())), dtype=np.int64)
    exact = set()
    for s in range(0, len(sample), 250):
        q = sample[s:s + 250]
        sims = x[q] @ x[:n_cand].T
        r, c = np.nonzero(sims >= settings.NEAR_DUP_THRESHOLD)
        exact |= {(int(q[i]), int(j)) for i, j in zip(r, c) if q[i] != j}
    report["exact_sample_pairs"] = len(exact)
    report["exact_recall"] = _recall_of_cells(work, store, x, sample, exact, settings)
    tail = ["--db", args.db, "--store", str(store), "--work", str(work)]
    # find-similar with PQ codes whatever the size (OODC_SIMILAR_FLAT_MAX_BYTES=0), so the out-of-core index is what is measured
    report["similar"] = _result(_run([*me, *tail, "--similar"], {**env, "OODC_SIMILAR_FLAT_MAX_BYTES": "0"}))
    report["map"] = _result(_run([*me, *tail, "--map"], {**env, "OODC_MAP_FIT_MAX": str(min(50_000, args.one // 4))}))
    if args.one <= args.baseline_up_to:
        report["baseline"] = _result(_run([*me, "--db", args.db, "--store", str(store), "--baseline"], env))
    (Path(args.work) / f"report_{args.one}.json").write_text(json.dumps(report, indent=1, default=str))
    print("REPORT " + json.dumps(report, default=str))


def _recall_of_cells(work: Path, store: Path, x: np.ndarray, sample: np.ndarray, exact: set, settings) -> float | None:
    """The share of the exact pairs of the sample that the cells (the same plan as the job's: seed,
    sample size, 4 sqrt(n) cells, 16 probed) put in probed cells of each other."""
    if not exact:
        return None
    from pipelines.features.dup_search import TRAIN_MAX, TRAIN_PER_CELL, assign_cells, calibrate_probes, cells_for, probe_table, train_cells

    n = len(x)
    nlist = cells_for(n, settings.NEAR_DUP_EXACT_BELOW)
    if nlist == 1:
        return 1.0
    rng = np.random.default_rng(0)
    take = min(n, TRAIN_PER_CELL * nlist, TRAIN_MAX)
    sample = x[np.sort(rng.choice(n, size=take, replace=False))]
    centroids = train_cells(sample, nlist, seed=0)
    cells = assign_cells(x, centroids)
    probe = probe_table(centroids, calibrate_probes(centroids, sample, at_least=settings.NEAR_DUP_NPROBE, seed=0)[0])
    hit = sum(cells[j] in probe[cells[q]] or cells[q] in probe[cells[j]] for q, j in exact)
    return hit / len(exact)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", default="50000,200000")
    p.add_argument("--dim", type=int, default=256)
    p.add_argument("--baseline-up-to", type=int, default=200_000, help="run the single-process baseline up to this size")
    p.add_argument("--work", default=str(REPO / "var" / "bench_image_stages"))
    p.add_argument("--keep", action="store_true")
    p.add_argument("--one", type=int, help=argparse.SUPPRESS)
    p.add_argument("--db", help=argparse.SUPPRESS)
    p.add_argument("--store", help=argparse.SUPPRESS)
    p.add_argument("--job", type=int, help=argparse.SUPPRESS)
    p.add_argument("--step", help=argparse.SUPPRESS)
    p.add_argument("--baseline", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--similar", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--map", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.baseline:
        return baseline_main(args)
    if args.similar:
        return similar_main(args)
    if args.map:
        return map_main(args)
    if args.step:
        return step_main(args)
    if args.one:
        return size_main(args)
    base = os.environ.get("DATABASE_URL", "")
    if not base.startswith("postgres"):
        raise SystemExit("bench_image_stages.py needs PostgreSQL: set DATABASE_URL=postgres://USER:PASS@HOST:PORT/NAME "
                         "(bash scripts/services.sh starts one; its user oodc may create databases)")
    head, _, name = base.rpartition("/")
    reports = []
    for n in [int(s) for s in args.sizes.split(",")]:
        db = f"{name}_bench_dup_{n}"
        _admin(base, f"DROP DATABASE IF EXISTS {db}", f"CREATE DATABASE {db}")
        out = subprocess.run([sys.executable, __file__, "--one", str(n), "--dim", str(args.dim), "--db", f"{head}/{db}", "--work", args.work,
                              "--baseline-up-to", str(args.baseline_up_to)], cwd=REPO, capture_output=True, text=True)
        if out.returncode != 0:
            raise SystemExit(f"size {n} failed:\n{out.stderr[-4000:]}")
        reports.append(json.loads(next(line for line in out.stdout.splitlines() if line.startswith("REPORT "))[7:]))
        if not args.keep:
            _admin(base, f"DROP DATABASE IF EXISTS {db}")
            shutil.rmtree(Path(args.work) / f"n{n}", ignore_errors=True)
        _print(reports[-1])
    if len(reports) > 1:
        a, b = reports[0], reports[-1]
        print(f"\nscaling {a['n']} -> {b['n']} ({b['n'] / a['n']:.1f}x the images), one worker:")
        ra = a["runs"].get("1", a["runs"].get(1))
        rb = b["runs"].get("1", b["runs"].get(1))
        for sa, sb in zip(ra["stages"], rb["stages"]):
            print(f"  {sa['stage']:7s} time {sb['wall'] / max(sa['wall'], 1e-9):5.1f}x   peak memory {max(sb['rss_mb']) / max(sa['rss_mb']):4.2f}x")


def _admin(url: str, *statements: str) -> None:
    import psycopg2

    conn = psycopg2.connect(url)
    conn.autocommit = True  # CREATE / DROP DATABASE run outside a transaction
    try:
        with conn.cursor() as cur:
            for sql in statements:
                cur.execute(sql)
    finally:
        conn.close()


def _print(r: dict) -> None:
    print(f"\n== {r['n']:,} images ({r['dim']}-d float16 features: {r['features_bytes'] / 2**20:.0f} MiB on disk; pool built in {r['build_s']:.0f} s)")
    one, two = r["runs"].get("1", r["runs"].get(1)), r["runs"].get("2", r["runs"].get(2))
    print(f"{'stage':8s} {'1 worker s':>11s} {'peak MB':>9s} {'2 workers s':>12s} {'peak MB (each)':>16s} {'2w/1w':>6s} {'work files MiB':>15s}")
    for s1, s2 in zip(one["stages"], two["stages"]):
        print(f"{s1['stage']:8s} {s1['wall']:11.1f} {max(s1['rss_mb']):9.0f} {s2['wall']:12.1f} {'/'.join(f'{m:.0f}' for m in s2['rss_mb']):>16s} "
              f"{s2['wall'] / max(s1['wall'], 1e-9):6.2f} {s1['work_bytes'] / 2**20:15.1f}")
    for label, run in (("1 worker", one), ("2 workers", two)):
        parts = [x for s in run["stages"] for x in s.get("parts", [])]
        if parts:
            print(f"  last finalize, {label}: {'; '.join(parts)}")
    t1, t2 = sum(s["wall"] for s in one["stages"]), sum(s["wall"] for s in two["stages"])
    print(f"{'total':8s} {t1:11.1f} {'':9s} {t2:12.1f} {'':16s} {t2 / t1:6.2f}")
    print(f"cells {one['result'].get('cells')}, probed {one['result'].get('probed_cells')} (calibrated: they meet "
          f"{one['result'].get('calibration_met')} of synthetic copies at cosine 0.90), planted copies grouped {one['planted_found']:.1%}, ID copies found "
          f"{one['id_copies_found']:.1%}, look-alikes refused {one['look_alikes_refused']:.1%}; exact-search recall on the "
          f"planted and 1,000 sampled candidates: {r['exact_recall']} of {r['exact_sample_pairs']} pairs; two workers equal one: {r['two_workers_equal_one']}")
    if "similar" in r:
        s = r["similar"]
        print(f"find-similar ({s['kind']}, nprobe {s['nprobe']}): built in {s['build_s']:.0f} s, peak {s['rss_mb']:.0f} MB, index "
              f"{s['index_bytes'] / 2**20:.0f} MiB; recall@20 {s['recall20']:.3f}; query p50 {s['p50_ms']:.1f} ms, p95 {s['p95_ms']:.1f} ms")
    if "map" in r:
        m = r["map"]
        print(f"embedding map (pca): {m['wall']:.0f} s, peak {m['rss_mb']:.0f} MB; fitted on {m['fitted']}, placed {m['placed']}")
    if "baseline" in r:
        b = r["baseline"]
        peak = max(max(s["rss_mb"]) for s in one["stages"])
        print(f"baseline (before issue 56: one process, every feature in memory): {b['wall']:.1f} s, peak {b['rss_mb']:.0f} MB; "
              f"the job's largest process: {peak:.0f} MB ({peak / b['rss_mb']:.2f}x), its time {t1 / b['wall']:.2f}x")


if __name__ == "__main__":
    main()
