"""The duplicate search as a chunked job in phases (issue 56; the computation is
pipelines/features/dup_search.py, the method docs/image_pipeline.md):

- **plan**: the search's rows (every readable candidate and ID image with features from the
  model) read as arrays through one streamed query, a seeded sample's vectors, the quantizer
  trained on it; files under ``FEATURE_STORE/dedup/job_N/``; chunks of rows for the assignment;
- **assign** chunks: each row's cell, a file per chunk;
- **join** chunks (written by the first finalize): ranges of the cell-sorted candidates; each
  compares its candidates with the probed cells, checks the feature matches at the pixel level
  (only the images of matches are read) and writes its pairs and nearest ID images to a file;
- **finalize**: identical bytes (two grouped queries), union-find over the pairs, each group's
  representative, then every candidate's group, drop reason and nearest ID image written back
  in batches (COPY into a temporary table and one UPDATE per batch on PostgreSQL), a curator's
  corrections, the class-level visual signals from one grouped query.

No step holds the pool's features: each reads its rows' vectors from the memory-mapped float16
shards. Every file is written atomically under a name fixed by (job, chunk), so a chunk done
again writes the same bytes, and the job's result does not depend on which or how many workers
ran its chunks.
"""
from __future__ import annotations

import json
import logging
import shutil
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any, Callable

import numpy as np
from django.conf import settings
from django.db import connection, transaction
from django.db.models import BooleanField, Count, ExpressionWrapper, Q
from django.db.models.functions import Substr
from django.utils import timezone

from curation.audit import audit_record
from curation.jobs.chunks import chunk_finish, chunk_start, chunks_add, chunks_to_do, chunks_write
from curation.jobs.protocol import NextPhase
from curation.models import ClassVisualSignal, DuplicateOverride, FeatureShard, Image, ImageEmbedding, Job, JobChunk, Source
from curation.services.bulk import columns_of
from curation.services.class_filter import class_filter_refresh_source
from curation.services.image_pipeline import effective_memberships
from curation.services.jobs import job_mark_running
from pipelines.features.dup_search import CALIBRATION_TARGET
from pipelines.names import atomic_write

log = logging.getLogger("curation.jobs")
ROWS_PER_ASSIGN_CHUNK = 200_000
ROWS_PER_JOIN_CHUNK = 50_000
WRITE_BATCH = 100_000
NPROBE = 16
SEED = 0


class SearchFilesMissing(RuntimeError):
    """The job's work files are gone (FEATURE_STORE moved or cleaned): start the search again."""


def work_dir(job_id: int) -> Path:
    return Path(settings.FEATURE_STORE) / "dedup" / f"job_{job_id}"


def _save(path: Path, **arrays: np.ndarray) -> None:
    atomic_write(path, lambda fh: np.savez(fh, **arrays), root=settings.FEATURE_STORE)


def _load(path: Path) -> dict[str, np.ndarray]:
    try:
        with np.load(path) as z:
            return {k: z[k] for k in z.files}
    except (OSError, ValueError) as exc:
        raise SearchFilesMissing(f"{path}: the duplicate search's work file cannot be read ({exc}); "
                                 "start the search again (run_image_pipeline)") from None


# -- the search's rows ------------------------------------------------------------------------------


def _hash_head(values: list) -> np.ndarray:
    """The first 16 hex digits of SHA-256 hashes as uint64 (0 for a row without a hash)."""
    return np.array([int(v, 16) if v else 0 for v in values], dtype=np.uint64)


def _stream_rows(model_name: str) -> tuple[dict[str, np.ndarray], list[str]]:
    """Every readable candidate and ID image with the model's features, in image-id order, as
    arrays (one streamed query; no model instances), and the shards' paths."""
    qs = (ImageEmbedding.objects.filter(model_name=model_name, ok=True, image__status=Image.Status.OK, shard__isnull=False,
                                        image__source__role__in=[Source.Role.CANDIDATE, Source.Role.ID])
          .annotate(is_ref=ExpressionWrapper(Q(image__source__role=Source.Role.ID), output_field=BooleanField()),
                    sha_head=Substr("image__sha256", 1, 16))
          .order_by("image_id").values_list("pk", "image_id", "shard_id", "row", "is_ref", "sha_head"))
    emb, image, shard, row, is_ref, sha = columns_of(qs.iterator(chunk_size=20_000), (np.int64, np.int64, np.int64, np.int32, bool, _hash_head))
    arrays = {"emb": emb, "image": image, "shard": shard, "row": row, "ref": is_ref, "sha": sha}
    shard_ids = np.unique(arrays["shard"])
    paths = dict(FeatureShard.objects.filter(pk__in=shard_ids.tolist()).values_list("pk", "path"))
    arrays["shard"] = np.searchsorted(shard_ids, arrays["shard"]).astype(np.int32)  # shard ids -> 0..k-1
    return arrays, [paths[int(s)] for s in shard_ids]


class _Search:
    """A job's rows and shards, loaded from its work files, with a reader of their vectors."""

    def __init__(self, job_id: int):
        from pipelines.features.dup_search import FeatureReader

        self.dir = work_dir(job_id)
        self.rows = _load(self.dir / "rows.npz")
        try:
            self.shards = json.loads((self.dir / "shards.json").read_text())
        except (OSError, ValueError) as exc:
            raise SearchFilesMissing(f"{self.dir}: the duplicate search's shard list cannot be read ({exc}); start the search again") from None
        self.reader = FeatureReader([Path(settings.FEATURE_STORE) / p for p in self.shards])

    def vectors(self, positions: np.ndarray) -> np.ndarray:
        return self.reader.vectors(self.rows["shard"][positions], self.rows["row"][positions])


# -- the steps ------------------------------------------------------------------------------------


def dedup_plan(*, job_id: int) -> list[int]:
    from pipelines.features.dup_search import TRAIN_MAX, TRAIN_PER_CELL, calibrate_probes, cells_for, train_cells

    job = Job.objects.get(pk=job_id)
    planned = chunks_to_do(job)
    if planned is not None:
        return planned
    job_mark_running(job=job, message="reading the search's rows")
    cfg = job.config
    arrays, shards = _stream_rows(cfg["model"])
    d = work_dir(job.pk)
    d.mkdir(parents=True, exist_ok=True)
    _save(d / "rows.npz", **arrays)
    atomic_write(d / "shards.json", lambda fh: fh.write(json.dumps(shards).encode()), root=settings.FEATURE_STORE)
    n = len(arrays["image"])
    nlist = cells_for(n, int(cfg.get("exact_below", settings.NEAR_DUP_EXACT_BELOW)))
    rng = np.random.default_rng(int(cfg.get("seed", SEED)))
    take = min(n, max(TRAIN_PER_CELL * nlist, 1) if nlist > 1 else 0, TRAIN_MAX)
    sample_pos = np.sort(rng.choice(n, size=take, replace=False)) if take else np.zeros(0, dtype=np.int64)
    search = _Search(job.pk)
    sample = search.vectors(sample_pos) if take else np.zeros((0, search.reader.dim() or 1), dtype=np.float32)
    centroids = train_cells(sample, nlist, seed=int(cfg.get("seed", SEED))) if n else np.ones((1, 1), dtype=np.float32)
    nprobe, met = calibrate_probes(centroids, sample, at_least=int(cfg.get("nprobe", NPROBE)), seed=int(cfg.get("seed", SEED)))
    _save(d / "cells.npz", centroids=centroids, sample=sample_pos, nprobe=np.array([nprobe]), met=np.array([met]))
    size = int(cfg.get("assign_chunk", ROWS_PER_ASSIGN_CHUNK))
    n_cand = int((~arrays["ref"]).sum())
    payloads = [{"phase": "assign", "lo": s, "hi": min(n, s + size)} for s in range(0, n, size)] or [{"phase": "assign", "lo": 0, "hi": 0}]
    return chunks_write(job_id=job.pk, payloads=payloads, total=n + n_cand,
                        on_written=lambda locked: job_mark_running(
                            job=locked, message=f"{n_cand} candidate and {n - n_cand} ID images in {len(centroids)} cell(s)"))


def dedup_process_chunk(*, job_id: int, index: int, progress: Callable[[int], None] | None = None) -> bool:
    chunk = chunk_start(job_id=job_id, index=index)
    if chunk is None:
        return False
    payload = chunk.payload
    if payload.get("phase") not in ("assign", "join"):
        raise SearchFilesMissing(f"chunk {index} of duplicate search #{job_id} was planned by an older version; start the search again")
    search = _Search(job_id)
    if payload["phase"] == "assign":
        from pipelines.features.dup_search import assign_cells

        lo, hi = int(payload["lo"]), int(payload["hi"])
        centroids = _load(search.dir / "cells.npz")["centroids"]
        cells = np.empty(hi - lo, dtype=np.int32)
        for s in range(lo, hi, 32_768):
            e = min(hi, s + 32_768)
            cells[s - lo:e - lo] = assign_cells(search.vectors(np.arange(s, e)), centroids)
        _save(search.dir / f"assign_{index:05d}.npz", cells=cells)
        return chunk_finish(chunk, progress=hi - lo, stats={"rows": hi - lo})
    stats = _join_chunk(chunk.job, search, index, int(payload["lo"]), int(payload["hi"]))
    return chunk_finish(chunk, progress=int(payload["hi"]) - int(payload["lo"]), stats=stats)


def _join_chunk(job: Job, search: _Search, index: int, lo: int, hi: int) -> dict[str, int]:
    from pipelines.features.dup_search import join
    from pipelines.features.near_dups import PixelCheck

    cfg = job.config
    lay = _layout(search)
    res = join(lay, lo, hi, search.vectors, threshold=float(cfg["threshold"]))
    id_cand = np.flatnonzero((res.nearest_ref >= 0) & (res.nearest_sim >= float(cfg["id_threshold"])))
    # the pixel check reads only the images that take part in a feature match
    involved = np.unique(np.concatenate([res.pair_a, res.pair_b, res.query[id_cand], res.nearest_ref[id_cand]]))
    image_ids = search.rows["image"][involved]
    images = {im.pk: im for im in Image.objects.filter(pk__in=image_ids.tolist()).select_related("source")}

    def ref_of(pos: int):
        im = images.get(int(search.rows["image"][pos]))
        try:
            return im.ref() if im is not None else None
        except ValueError:  # UnsafePath: a file that now resolves outside its root never matches by pixels
            return None

    slot = {int(p): i for i, p in enumerate(involved.tolist())}
    check = PixelCheck([ref_of(int(p)) for p in involved], [getattr(images.get(int(search.rows["image"][p])), "sha256", "") or f"?{p}"
                                                              for p in involved], float(cfg["max_pixel_diff"]))
    pair_ok = np.array([check(slot[int(a)], slot[int(b)]) for a, b in zip(res.pair_a, res.pair_b)], dtype=bool)
    id_ok = np.zeros(len(res.query), dtype=bool)
    for q in id_cand.tolist():
        id_ok[q] = check(slot[int(res.query[q])], slot[int(res.nearest_ref[q])])
    _save(search.dir / f"join_{index:05d}.npz", pair_a=res.pair_a[pair_ok], pair_b=res.pair_b[pair_ok], pair_sim=res.pair_sim[pair_ok],
          query=res.query, nearest_ref=res.nearest_ref, nearest_sim=res.nearest_sim, id_ok=id_ok)
    return {"queries": len(res.query), "feature_pairs": len(res.pair_a), "pairs": int(pair_ok.sum()),
            "id_matches": int(id_ok.sum()), "id_feature_matches": len(id_cand)}


def _layout(search: _Search):
    from pipelines.features.dup_search import Layout

    z = _load(search.dir / "layout.npz")
    return Layout(cand=z["cand"], cand_start=z["cand_start"], ref=z["ref"], ref_start=z["ref_start"], probe=z["probe"])


def _assign_done(job: Job, search: _Search) -> NextPhase:
    """The first finalize: the cells of every row, sorted into the layout, and the join's chunks."""
    from pipelines.features.dup_search import join_ranges, layout, probe_table

    n = len(search.rows["image"])
    cells = np.zeros(n, dtype=np.int32)
    for index, payload in JobChunk.objects.filter(job=job, payload__phase="assign").values_list("index", "payload"):
        lo, hi = int(payload["lo"]), int(payload["hi"])
        if hi > lo:
            cells[lo:hi] = _load(search.dir / f"assign_{index:05d}.npz")["cells"]
    z = _load(search.dir / "cells.npz")
    lay = layout(cells, search.rows["ref"], probe_table(z["centroids"], int(z["nprobe"][0])))
    _save(search.dir / "layout.npz", cand=lay.cand, cand_start=lay.cand_start, ref=lay.ref, ref_start=lay.ref_start, probe=lay.probe)
    ranges = join_ranges(lay, int(job.config.get("join_chunk", ROWS_PER_JOIN_CHUNK))) or [(0, 0)]
    return NextPhase(chunks_add(job_id=job.pk, phase="join", payloads=[{"lo": lo, "hi": hi} for lo, hi in ranges]))


def dedup_finalize(*, job_id: int) -> Job | NextPhase:
    job = Job.objects.get(pk=job_id)
    if job.status in (Job.Status.DONE, Job.Status.FAILED):
        return job
    if not JobChunk.objects.filter(job=job, payload__phase="join").exists():
        job_mark_running(job=job, message="sorting the rows into cells")
        return _assign_done(job, _Search(job.pk))
    if JobChunk.objects.filter(job=job, done=False).exists():
        return job
    job_mark_running(job=job, message="grouping the duplicates and writing them back")
    return _write_results(job, _Search(job.pk))


# -- the results ------------------------------------------------------------------------------------


DROP_NONE, DROP_NEAR, DROP_ID = 0, 1, 2


def _write_results(job: Job, search: _Search) -> Job:
    from pipelines.features.dup_search import components, unique_pairs

    cfg, model_name = job.config, job.config["model"]
    rows = search.rows
    n = len(rows["image"])
    is_cand = ~rows["ref"]
    cand_pos = np.flatnonzero(is_cand)
    pa, pb, ps, nearest, nsim, id_ok = [], [], [], np.full(n, -1, np.int64), np.full(n, -np.inf, np.float32), np.zeros(n, bool)
    for index in JobChunk.objects.filter(job=job, payload__phase="join").values_list("index", flat=True):
        z = _load(search.dir / f"join_{index:05d}.npz")
        pa.append(z["pair_a"])
        pb.append(z["pair_b"])
        ps.append(z["pair_sim"])
        nearest[z["query"]], nsim[z["query"]], id_ok[z["query"]] = z["nearest_ref"], z["nearest_sim"], z["id_ok"]
    a, b, _s = unique_pairs(np.concatenate(pa) if pa else np.zeros(0, np.int64), np.concatenate(pb) if pb else np.zeros(0, np.int64),
                            np.concatenate(ps) if ps else np.zeros(0, np.float32))

    # identical bytes: candidates that share a SHA-256 are one group; a candidate with an ID image's bytes is its copy.
    # From the rows' 64-bit hash prefixes (read with the rows), confirmed by the full hashes of the few rows whose prefixes
    # meet: no query over the pool (a GROUP BY under IN subqueries took 169 s for 30,000 rows on freshly loaded tables)
    clock = _Clock(job.pk)
    same, byte_copy = _identical_bytes(rows)
    sa = np.array([p for p, _q in same], dtype=np.int64)
    sb = np.array([q for _p, q in same], dtype=np.int64)
    ea, eb = np.concatenate([a, sa]).astype(np.int64), np.concatenate([b, sb]).astype(np.int64)
    clock.lap("identical bytes")
    # groups: union-find over the pairs' nodes only
    nodes = np.unique(np.concatenate([ea, eb]))
    label = components(len(nodes), np.searchsorted(nodes, ea), np.searchsorted(nodes, eb))
    group = rows["image"].copy()  # each candidate stands for itself unless its group keeps another
    drop = np.zeros(n, dtype=np.int8)
    ref_image = np.where(nearest >= 0, rows["image"][np.maximum(nearest, 0)], -1)
    sim = nsim.astype(np.float64)
    if len(nodes):
        node_images = rows["image"][nodes]
        size = {pk: (w or 0) * (h or 0) for pk, w, h in _in_batches(Image.objects.values_list("pk", "width", "height"), node_images)}
        prio = np.array([-size.get(int(i), 0) for i in node_images], dtype=np.int64)
        order = np.lexsort((node_images, prio, label))  # per group: the largest image, then the oldest
        first = np.ones(len(order), dtype=bool)
        first[1:] = label[order][1:] != label[order][:-1]
        rep_of_label = np.empty(label.max() + 1, dtype=np.int64)
        rep_of_label[label[order][first]] = node_images[order][first]
        group[nodes] = rep_of_label[label]
        drop[nodes] = np.where(group[nodes] != node_images, DROP_NEAR, DROP_NONE)
    id_dup = id_ok.copy()
    if byte_copy:
        bc_pos = np.array(list(byte_copy), dtype=np.int64)
        ref_image[bc_pos] = rows["image"][np.array([byte_copy[int(q)] for q in bc_pos], dtype=np.int64)]
        sim[bc_pos] = 1.0
        id_dup[bc_pos] = True
    drop[id_dup & is_cand] = DROP_ID
    has_ref = bool(rows["ref"].any())
    clock.lap("groups")
    written = _write_back(model_name, rows["emb"][cand_pos], group[cand_pos], drop[cand_pos], ref_image[cand_pos] if has_ref else None,
                          sim[cand_pos] if has_ref else None)
    clock.lap("write-back")
    corrected = _apply_overrides(model_name)
    signals = _visual_signals(cfg, model_name)
    clock.lap("overrides and visual signals")
    counts = Counter({"kept": int((drop[cand_pos] == DROP_NONE).sum()), "near_duplicate_of": int((drop[cand_pos] == DROP_NEAR).sum()),
                      "duplicate_of_id": int((drop[cand_pos] == DROP_ID).sum())})
    groups = Counter(group[cand_pos].tolist())
    with transaction.atomic():
        locked = Job.objects.select_for_update().get(pk=job.pk)
        if locked.status == Job.Status.DONE:
            return locked
        chunk_stats: Counter = Counter()
        for st in JobChunk.objects.filter(job=job, payload__phase="join").values_list("stats", flat=True):
            chunk_stats.update({k: v for k, v in st.items() if isinstance(v, int)})
        locked.status, locked.finished_at, locked.progress = Job.Status.DONE, timezone.now(), locked.total
        z = _load(search.dir / "cells.npz")
        nlist, nprobe, met = len(z["centroids"]), int(z["nprobe"][0]), float(z["met"][0])
        locked.result = {"candidates": len(cand_pos), "id_images": n - len(cand_pos), "kept": counts["kept"],
                         "near_duplicate_of": counts["near_duplicate_of"], "duplicate_of_id": counts["duplicate_of_id"],
                         "groups_with_duplicates": sum(1 for v in groups.values() if v > 1), "curator_overrides": corrected,
                         "visually_ambiguous_classes": signals, "cells": nlist, "exact": nlist == 1, "probed_cells": nprobe,
                         "calibration_met": round(met, 4),
                         "feature_pairs": chunk_stats["feature_pairs"], "pairs_after_pixel_check": chunk_stats["pairs"],
                         "rows_written": written}
        locked.message = (f"{len(cand_pos)} candidate images: {counts['kept']} kept, {counts['near_duplicate_of']} near-duplicates, "
                          f"{counts['duplicate_of_id']} duplicates of ID images; {signals} visually ambiguous class(es)"
                          + ("" if nlist == 1 else f" ({nlist} cells, {nprobe} probed: they meet {met:.1%} of copies at cosine 0.90"
                             + ("" if met >= CALIBRATION_TARGET else f", below the {CALIBRATION_TARGET:.0%} aimed at: the features are "
                                "diffuse at this threshold; OODC_NEAR_DUP_EXACT_BELOW above the pool's size makes the search exact") + ")"))
        locked.save()
        audit_record(actor=locked.created_by, action="dedup_finished", target=locked, data=locked.result)
    source_ids = set(Image.objects.filter(pk__in=ImageEmbedding.objects.filter(model_name=model_name, ok=True).values("image_id"),
                                          source__role=Source.Role.CANDIDATE).values_list("source_id", flat=True).distinct())
    for source in Source.objects.filter(pk__in=source_ids):  # image evidence has arrived: re-rank the class filter's flags
        class_filter_refresh_source(source=source, model_name=model_name)
    clock.lap("class filter refresh")
    shutil.rmtree(search.dir, ignore_errors=True)
    return locked


def _identical_bytes(rows: dict[str, np.ndarray]) -> tuple[list[tuple[int, int]], dict[int, int]]:
    """Positions of candidates with identical bytes, (first, later) with first the smallest image
    id of its hash, and each candidate that has an ID image's bytes -> that ID image's position
    (the smallest image id among the ID images of its hash). Rows whose 64-bit prefixes meet are
    confirmed with their full SHA-256."""
    prefix, is_ref = rows["sha"], rows["ref"]
    order = np.argsort(prefix, kind="stable")  # rows are in image-id order, so each prefix's rows stay in it
    sp = prefix[order]
    run_start = np.ones(len(sp), dtype=bool)
    run_start[1:] = sp[1:] != sp[:-1]
    run_id = np.cumsum(run_start) - 1
    sizes = np.bincount(run_id) if len(run_id) else np.zeros(0, dtype=np.int64)
    meet = order[(sizes[run_id] > 1) & (sp != 0)]  # rows that share their prefix with another row (0: no hash)
    full: dict[int, str] = {}
    for s in range(0, len(meet), 20_000):
        ids = rows["image"][np.sort(meet[s:s + 20_000])]
        full.update(Image.objects.filter(pk__in=ids.tolist()).values_list("pk", "sha256"))
    by_hash: dict[str, list[int]] = defaultdict(list)
    for pos in np.sort(meet).tolist():
        sha = full.get(int(rows["image"][pos]), "")
        if sha:
            by_hash[sha].append(pos)
    same: list[tuple[int, int]] = []
    copy_of: dict[int, int] = {}
    for members in by_hash.values():  # each in image-id order
        cands = [m for m in members if not is_ref[m]]
        refs = [m for m in members if is_ref[m]]
        same += [(cands[0], c) for c in cands[1:]]
        if refs:
            copy_of.update({c: refs[0] for c in cands})
    return same, copy_of


class _Clock:
    """Each part of the last finalize's time, logged (curation.jobs, INFO) so a slow part shows where it is."""

    def __init__(self, job_id: int):
        self.job_id, self.t = job_id, time.perf_counter()

    def lap(self, what: str) -> None:
        now = time.perf_counter()
        log.info("duplicate search #%s: %s took %.1f s", self.job_id, what, now - self.t)
        self.t = now


def _in_batches(qs: Any, ids: np.ndarray, size: int = 20_000):
    for s in range(0, len(ids), size):
        yield from qs.filter(pk__in=ids[s:s + size].tolist())


def _write_back(model_name: str, emb: np.ndarray, group: np.ndarray, drop: np.ndarray, ref: np.ndarray | None,
                sim: np.ndarray | None) -> int:
    """Every candidate's group, drop reason and nearest ID image, in batches; then the model's
    other embeddings cleared (an image that left the search keeps no stale group). Each batch is
    its own statement: a finalize killed half-way is run again and writes the same values."""
    n = len(emb)
    ref = ref if ref is not None else np.full(n, -1, dtype=np.int64)
    sim = sim if sim is not None else np.full(n, -np.inf)
    for s in range(0, n, WRITE_BATCH):
        e = min(n, s + WRITE_BATCH)
        _update_batch(emb[s:e], group[s:e], drop[s:e], ref[s:e], sim[s:e])
    # the model's embeddings outside this search (ID images, failed or refused images) hold no result
    stale = (ImageEmbedding.objects.filter(model_name=model_name)
             .exclude(ok=True, image__status=Image.Status.OK, image__source__role=Source.Role.CANDIDATE, shard__isnull=False))
    stale.exclude(search_group=None, dup_group=None, nearest_id_image=None, drop_reason="", search_drop="").update(
        dup_group=None, drop_reason="", search_group=None, search_drop="", nearest_id_image=None, nearest_id_similarity=None)
    return n


def _update_batch(emb: np.ndarray, group: np.ndarray, drop: np.ndarray, ref: np.ndarray, sim: np.ndarray) -> None:
    reason = np.where(drop == DROP_NEAR, "near_duplicate_of:" + group.astype(str),
                      np.where(drop == DROP_ID, "duplicate_of_id:" + ref.astype(str), ""))
    ref_col = np.where(ref >= 0, ref, -1)
    sim_ok = np.isfinite(sim)
    if connection.vendor == "postgresql":
        from curation.services.bulk import copy_text_columns

        table = ImageEmbedding._meta.db_table
        with transaction.atomic(), connection.cursor() as cur:
            cur.execute("CREATE TEMP TABLE IF NOT EXISTS oodc_dup_result (id bigint PRIMARY KEY, grp bigint, reason text, "
                        "ref bigint, sim double precision) ON COMMIT DROP")
            cur.execute("TRUNCATE oodc_dup_result")
            copy_text_columns(cur, "oodc_dup_result", ("id", "grp", "reason", "ref", "sim"),
                              [emb.astype(str), group.astype(str), reason, np.where(ref_col >= 0, ref_col.astype(str), "\\N"),
                               np.where(sim_ok, np.char.mod("%.17g", np.where(sim_ok, sim, 0).astype(np.float64)), "\\N")])
            # a temporary table has no statistics until analysed: without them the planner took it for a few rows and
            # joined the embeddings to it row by row (178 s for 27,000 rows on a table fresh from a bulk load; 4 s after)
            cur.execute("ANALYZE oodc_dup_result")
            cur.execute(f"UPDATE {table} AS e SET dup_group = r.grp, search_group = r.grp, drop_reason = r.reason, "
                        "search_drop = r.reason, nearest_id_image_id = r.ref, nearest_id_similarity = r.sim "
                        "FROM oodc_dup_result AS r WHERE e.id = r.id")
        return
    with transaction.atomic(), connection.cursor() as cur:
        cur.executemany(f"UPDATE {ImageEmbedding._meta.db_table} SET dup_group = %s, search_group = %s, drop_reason = %s, search_drop = %s, "
                        "nearest_id_image_id = %s, nearest_id_similarity = %s WHERE id = %s",
                        [(int(g), int(g), str(r), str(r), int(f) if f >= 0 else None, float(v) if ok else None, int(i))
                         for i, g, r, f, v, ok in zip(emb.tolist(), group.tolist(), reason.tolist(), ref_col.tolist(), sim.tolist(),
                                                       sim_ok.tolist())])


def _apply_overrides(model_name: str) -> int:
    """A curator's corrections (DuplicateOverride) hold across re-runs: applied to the groups they
    touch (read as rows: a few groups, not the pool)."""
    corrected = list(DuplicateOverride.objects.filter(model_name=model_name).order_by("created_at", "id").values_list("image_id", "action"))
    if not corrected:
        return 0
    touched = set(ImageEmbedding.objects.filter(model_name=model_name, image_id__in={i for i, _a in corrected}, search_group__isnull=False)
                  .values_list("search_group", flat=True))
    members = list(ImageEmbedding.objects.filter(model_name=model_name, search_group__in=touched))
    effective_memberships(members, corrected)
    ImageEmbedding.objects.bulk_update(members, ["dup_group", "drop_reason"], batch_size=1000)
    return sum(1 for i, _a in corrected if i in {m.image_id for m in members})


def _visual_signals(cfg: dict, model_name: str) -> int:
    """The class-level visual-ambiguity signal from one grouped query: per candidate class, the
    share of its images that stay (duplicates are one picture seen twice) whose top-1 is the
    class's most common top-1. Returns how many classes are flagged."""
    from pipelines.features.classifiers import imagenet_1k_classes

    wnids, labels = imagenet_1k_classes()
    label = dict(zip(wnids, labels))
    counts = (ImageEmbedding.objects.filter(model_name=model_name, ok=True, image__status=Image.Status.OK, drop_reason="",
                                            image__source__role=Source.Role.CANDIDATE, image__candidate_class__isnull=False)
              .values_list("image__candidate_class_id", "top1_wnid").annotate(n=Count("id")).order_by())
    by_class: dict[int, Counter] = defaultdict(Counter)
    for class_id, wnid, k in counts:
        by_class[class_id][wnid] += k
    signals = []
    for class_id, tops in sorted(by_class.items()):
        total = sum(tops.values())
        top, n_top = min(tops.items(), key=lambda kv: (-kv[1], kv[0]))
        share = n_top / total
        flagged = total >= cfg["ambiguity_min_images"] and share > cfg["ambiguity_threshold"]
        signals.append(ClassVisualSignal(
            candidate_class_id=class_id, model_name=model_name, n_images=total, top_wnid=top, top_label=label.get(top, top),
            top_share=share, threshold=cfg["ambiguity_threshold"], flagged=flagged, reason=f"visually_ambiguous_with:{top}" if flagged else ""))
    with transaction.atomic():
        ClassVisualSignal.objects.filter(model_name=model_name).exclude(candidate_class_id__in=list(by_class)).delete()
        fields = ("n_images", "top_wnid", "top_label", "top_share", "threshold", "flagged", "reason")
        have = dict(ClassVisualSignal.objects.filter(model_name=model_name).values_list("candidate_class_id", "pk"))
        new, changed = [], []
        for s in signals:
            if s.candidate_class_id in have:
                s.pk = have[s.candidate_class_id]
                changed.append(s)
            else:
                new.append(s)
        ClassVisualSignal.objects.bulk_create(new, batch_size=1000)
        ClassVisualSignal.objects.bulk_update(changed, list(fields), batch_size=1000)
    return sum(s.flagged for s in signals)
