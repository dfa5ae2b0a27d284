"""Ingest: register every file of a source as an Image row with its checks, in chunks.

plan (scan the folder, write chunks) -> process each chunk (inspect files, upsert rows, mark the
chunk done, all in one transaction) -> finalize (missing files, exact duplicates, summary).
Every step is idempotent, so a redelivered or re-run task repeats nothing that was finished.
"""
from __future__ import annotations

from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable

from django.conf import settings
from django.contrib.auth.models import User
from django.db import connection, transaction
from django.db.models import Count
from django.utils import timezone

from curation.audit import audit_record
from curation.jobs import JobActive, enqueue_on_commit, run_inline
from curation.jobs.chunks import chunk_finish, chunk_start, chunks_to_do, chunks_write, unfinished_chunks
from curation.models import CandidateClass, Image, ImageEmbedding, Job, JobChunk, Source
from curation.services.jobs import job_mark_running
from curation.services.sources import source_sync_classes
from curation.version import code_version
from pipelines.sources.images import EMPTY_FILE, FILE_TOO_LARGE, UNREADABLE, inspect_image_bytes
from pipelines.sources.layouts import DEFAULT_MAX_BYTES, MemberOutsideRoot, MemberRef, NotRegularFile, prefetch_members, read_member
from pipelines.sources.layouts.lists import scan_layout
from pipelines.sources.walk import NOT_A_REGULAR_FILE, PATH_ESCAPES_ROOT

ProgressCallback = Callable[[int], None]


class IngestAlreadyRunning(JobActive):
    """This source's ingest job is unfinished (running, queued, or stale: resume it)."""


def ingest_start(*, source: Source, user: User | None = None, rehash: bool = False, enqueue: bool = True) -> Job:
    """Create an ingest job for ``source`` (refusing a second one while one is unfinished).

    With ``enqueue`` the plan task is queued once the transaction commits; without it, the
    caller runs the job itself (``ingest_run_inline``)."""
    with transaction.atomic():
        Source.objects.select_for_update().get(pk=source.pk)  # serialise concurrent starts
        active = Job.objects.filter(source=source, kind=Job.Kind.INGEST, status__in=[Job.Status.PENDING, Job.Status.RUNNING]).first()
        if active is not None:
            raise IngestAlreadyRunning(active)
        job = Job.objects.create(
            kind=Job.Kind.INGEST,
            source=source,
            created_by=user if getattr(user, "pk", None) else None,
            code_version=code_version(),
            config={
                "source": source.name, "root": source.root, "role": source.role, "class_map": source.class_map,
                "layout": source.layout, "layout_options": source.layout_options,
                "chunk_size": settings.INGEST_CHUNK_SIZE, "threads": settings.INGEST_THREADS, "max_pixels": settings.MAX_IMAGE_PIXELS, "rehash": rehash,
            },
        )
        audit_record(actor=user, action="ingest_started", target=job, data={"source": source.name})
        if enqueue:
            enqueue_on_commit(job)
    return job


def ingest_plan(*, job_id: int) -> list[int]:
    """Scan the source and split its files into chunks; return the indices still to do."""
    job = Job.objects.select_related("source").get(pk=job_id)
    planned = chunks_to_do(job)
    if planned is not None:
        return planned
    source = job.source
    # outside any transaction: it may take a while (an archive's headers are read once, here)
    scan = scan_layout(source.layout, Path(source.root), source.layout_options or {})
    classes = {c.folder: c for c in source_sync_classes(source=source, folders=scan.class_keys)}
    size = max(1, int(job.config.get("chunk_size") or settings.INGEST_CHUNK_SIZE))
    rows = [[m.path, m.class_key, m.size, m.mtime_ns, m.container, m.offset] for m in scan.members]
    where = f"{scan.containers} archives" if scan.containers else f"{len(scan.class_keys)} class folders"

    def record(locked: Job) -> None:  # with the chunks, in their transaction
        _record_refusals(source, classes, scan.refused)
        locked.result = {
            "files_found": len(rows),
            "refused_paths": [r.rel_path for r in scan.refused],
            "class_folders": len(scan.class_keys),
            "archives": scan.containers,
        }
        locked.save(update_fields=["result"])
        job_mark_running(job=locked, message=f"{len(rows)} images in {len(scan.class_keys)} classes" + (f" ({where})" if scan.containers else ""))

    return chunks_write(job_id=job.pk, payloads=[rows[start:start + size] for start in range(0, len(rows), size)],
                        total=len(rows), on_written=record)


def _record_refusals(source: Source, classes: dict[str, CandidateClass], refused) -> None:
    existing = {i.relative_path: i for i in Image.objects.filter(source=source, relative_path__in=[r.rel_path for r in refused])}
    new, changed = [], []
    for r in refused:
        fields = {"status": Image.Status.BROKEN, "error_code": r.code, "error": r.message, "candidate_class": classes.get(r.class_folder)}
        img = existing.get(r.rel_path)
        if img is None:
            new.append(Image(source=source, relative_path=r.rel_path, **fields))
        elif any(getattr(img, k) != v for k, v in fields.items()):
            for k, v in fields.items():
                setattr(img, k, v)
            changed.append(img)
    Image.objects.bulk_create(new)
    if changed:
        Image.objects.bulk_update(changed, ["status", "error_code", "error", "candidate_class", "updated_at"])


_INSPECTED_FIELDS = ["sha256", "width", "height", "orientation", "format", "mode", "bytes", "mtime_ns", "status", "error_code", "error",
                     "candidate_class", "container", "offset"]


def _row(row: list) -> list:
    """A chunk's row: [path, class key, size, mtime_ns, container, offset] (chunks planned before
    source layouts had the first four)."""
    return list(row) + ["", -1][len(row) - 4:] if len(row) < 6 else list(row)


def ingest_process_chunk(*, job_id: int, index: int, progress: ProgressCallback | None = None) -> bool:
    """Inspect the files of one chunk and write their rows. Returns True when this was the last
    unfinished chunk (the caller then queues the finalize step)."""
    chunk = chunk_start(job_id=job_id, index=index, related=("source",))
    if chunk is None:  # done already, or its job is finished
        return False
    job = chunk.job
    source = job.source
    rehash = bool(job.config.get("rehash"))
    max_pixels = int(job.config.get("max_pixels") or settings.MAX_IMAGE_PIXELS)
    classes = {c.folder: c for c in CandidateClass.objects.filter(source=source)}
    payload = [_row(r) for r in chunk.payload]
    paths = [row[0] for row in payload]
    existing = {i.relative_path: i for i in Image.objects.filter(source=source, relative_path__in=paths)}

    def needs_check(rel, size, mtime_ns, container, offset) -> bool:
        img = existing.get(rel)
        return (
            img is None or rehash or (size >= 0 and img.bytes != size) or img.mtime_ns != mtime_ns
            or img.container != container or img.offset != offset
            or img.status == Image.Status.MISSING or not img.sha256
        )

    # Reading, hashing and decoding release the GIL, so a few threads overlap I/O and decode.
    # Members are read in the order the scan found them (an archive front to back).
    todo = [r for r in payload if needs_check(*r[:1], *r[2:])]
    threads = max(1, int(job.config.get("threads") or settings.INGEST_THREADS))

    refs = [source.member_ref(rel, container=container, offset=offset, size=size) for rel, _c, size, _m, container, offset in todo]
    # an archive's neighbouring members in one read per run (a shard's small JPEGs: one read, not
    # one open each); plain files are read in the threads below, which overlap their opens
    early = prefetch_members(refs)

    def check(k: int) -> dict:
        fields = _inspect(refs[k], max_pixels, early.pop(k, None))
        fields["container"], fields["offset"] = todo[k][4], todo[k][5]
        if progress:
            progress(1)
        return fields

    with ThreadPoolExecutor(max_workers=threads) as pool:
        inspected = dict(zip((r[0] for r in todo), pool.map(check, range(len(todo)))))

    new: list[Image] = []
    changed: list[Image] = []
    stale: list[int] = []
    stats: Counter = Counter()
    for rel, class_folder, size, mtime_ns, _container, _offset in payload:
        img = existing.get(rel)
        if rel not in inspected:
            stats["unchanged"] += 1
            if progress:
                progress(1)
        else:
            fields = inspected[rel]
            fields["mtime_ns"] = mtime_ns
            fields["candidate_class"] = classes.get(class_folder)
            if img is None:
                new.append(Image(source=source, relative_path=rel, **fields))
                stats["added"] += 1
            elif any(getattr(img, k) != v for k, v in fields.items()):
                was_ok = img.sha256 and img.status != Image.Status.MISSING
                stats["changed" if was_ok and img.sha256 != fields["sha256"] else "updated"] += 1
                if img.sha256 != fields["sha256"]:
                    stale.append(img.pk)  # new bytes: predictions and features are recomputed
                for k, v in fields.items():
                    setattr(img, k, v)
                changed.append(img)
            else:
                stats["unchanged"] += 1
            if fields["status"] == Image.Status.BROKEN:
                stats["broken"] += 1

    def write() -> None:  # in the transaction that marks the chunk done
        Image.objects.bulk_create(new, batch_size=500)
        if changed:
            Image.objects.bulk_update(changed, _INSPECTED_FIELDS + ["updated_at"], batch_size=500)
        if stale:
            ImageEmbedding.objects.filter(image_id__in=stale).delete()

    return chunk_finish(chunk, progress=len(chunk.payload), stats=dict(stats), write=write)


def _inspect(ref: MemberRef, max_pixels: int, early: bytes | OSError | None = None) -> dict:
    """The checks of one member, read through its source's layout (a file, a tar member by its
    offset, a Parquet row), or given as ``early`` (``prefetch_members``: its bytes, or the error
    reading it gave). Never raises for a bad member: its reason is recorded instead."""
    def broken(code: str, message: str, size: int = 0) -> dict:
        return {"sha256": "", "width": 0, "height": 0, "orientation": 1, "format": "", "mode": "", "bytes": size,
                "status": Image.Status.BROKEN, "error_code": code, "error": message}

    if ref.size > DEFAULT_MAX_BYTES:
        return broken(FILE_TOO_LARGE, f"{ref}: {ref.size} bytes is more than the {DEFAULT_MAX_BYTES}-byte limit for one image", ref.size)
    try:
        if isinstance(early, OSError):
            raise early
        data = early if early is not None else read_member(ref, verify=False)
    except MemberOutsideRoot as exc:
        return broken(PATH_ESCAPES_ROOT, str(exc))
    except NotRegularFile as exc:  # its archive became a fifo or device since the scan: refused, never waited on
        return broken(NOT_A_REGULAR_FILE, str(exc))
    except OSError as exc:  # MemberUnreadable says what and why; a plain OSError gets its strerror
        return broken(UNREADABLE, str(exc) if not getattr(exc, "strerror", None) else f"{ref}: cannot read the file ({exc.strerror})")
    if not data:
        return broken(EMPTY_FILE, f"{ref}: the file is empty (0 bytes)")
    r = inspect_image_bytes(data, name=str(ref), max_pixels=max_pixels)
    return {
        "sha256": r.sha256, "width": r.width, "height": r.height, "orientation": r.orientation,
        "format": r.format, "mode": r.mode, "bytes": r.bytes,
        "status": Image.Status.OK if r.ok else Image.Status.BROKEN, "error_code": r.error_code, "error": r.error,
    }


def ingest_finalize(*, job_id: int) -> Job:
    """Mark vanished files missing, resolve exact duplicates, write the summary. Idempotent."""
    with transaction.atomic():
        job = Job.objects.select_for_update(of=("self",)).select_related("source").get(pk=job_id)
        if job.status in (Job.Status.DONE, Job.Status.FAILED):
            return job
        if unfinished_chunks(job.pk):
            return job  # not ready; the last chunk queues this again
        source = job.source
        totals: Counter = Counter()
        for stats in JobChunk.objects.filter(job=job).values_list("stats", flat=True):
            totals.update(stats)
        gone = _mark_missing(job, source)
        duplicates = _resolve_exact_duplicates(source)
        counts = dict(Image.objects.filter(source=source).values_list("status").annotate(n=Count("id")).order_by())
        job.result = {
            **job.result,
            "added": totals["added"], "changed": totals["changed"], "updated": totals["updated"],
            "unchanged": totals["unchanged"], "broken_checked": totals["broken"],
            "refused": len(job.result.get("refused_paths", [])), "newly_missing": gone,
            "duplicates": duplicates, "status_counts": counts,
        }
        job.status = Job.Status.DONE
        job.progress = job.total
        job.finished_at = timezone.now()
        job.message = (
            f"{job.total} files: {totals['added']} added, {totals['changed']} changed, {totals['unchanged']} unchanged, "
            f"{gone} newly missing; now " + (", ".join(f"{n} {status}" for status, n in sorted(counts.items()))
                                                  or "no images (is PATH/<class folder>/<image files> the layout?)")
        )
        job.save()
        audit_record(actor=job.created_by, action="ingest_finished", target=job, data={"source": source.name, "message": job.message})
    return job


def _mark_missing(job: Job, source: Source) -> int:
    """Images of ``source`` no chunk of the scan saw (nor its refusals) become ``missing``; how
    many. On PostgreSQL the scan's paths are read out of the chunks into a temporary table and
    the images matched against it by the database: a pool of 13 million paths never comes to
    Python (issue 45: 1.6 GB resident at 4 million images). Elsewhere, in Python."""
    refused = list(job.result.get("refused_paths", []))
    fields = {"status": Image.Status.MISSING, "error_code": "missing", "error": "the file was not found on the last scan",
              "updated_at": timezone.now()}
    if connection.vendor == "postgresql":
        with connection.cursor() as cur:
            cur.execute("CREATE TEMP TABLE oodc_scan_seen ON COMMIT DROP AS SELECT DISTINCT r.value ->> 0 AS path "
                        "FROM curation_jobchunk c CROSS JOIN LATERAL jsonb_array_elements(CASE WHEN jsonb_typeof(c.payload) = 'array' "
                        "THEN c.payload ELSE '[]'::jsonb END) r WHERE c.job_id = %s "
                        "UNION SELECT unnest(%s::text[])", [job.pk, refused])
            cur.execute("CREATE INDEX ON oodc_scan_seen (path)")
            cur.execute("ANALYZE oodc_scan_seen")
            cur.execute("UPDATE curation_image i SET status = %s, error_code = %s, error = %s, updated_at = %s "
                        "WHERE i.source_id = %s AND i.status <> %s AND NOT EXISTS (SELECT 1 FROM oodc_scan_seen s WHERE s.path = i.relative_path)",
                        [fields["status"], fields["error_code"], fields["error"], fields["updated_at"], source.pk, Image.Status.MISSING])
            gone = cur.rowcount
            cur.execute("DROP TABLE oodc_scan_seen")
        return gone
    seen: set[str] = set(refused)
    for payload in JobChunk.objects.filter(job=job).values_list("payload", flat=True):
        seen.update(row[0] for row in payload)
    ids = [pk for pk, rel in Image.objects.filter(source=source).exclude(status=Image.Status.MISSING).values_list("pk", "relative_path")
           if rel not in seen]
    for start in range(0, len(ids), 1000):
        Image.objects.filter(pk__in=ids[start:start + 1000]).update(**fields)
    return len(ids)


def _resolve_exact_duplicates(source: Source) -> int:
    """Among readable images with the same bytes, the one with the smallest path stays ``ok`` and
    the others become ``duplicate`` of it. Independent of the order in which chunks ran."""
    live = Image.objects.filter(source=source, status__in=[Image.Status.OK, Image.Status.DUPLICATE])
    dup_hashes = set(live.values("sha256").annotate(n=Count("id")).filter(n__gt=1).values_list("sha256", flat=True))
    to_update = []
    for img in live.filter(status=Image.Status.DUPLICATE).exclude(sha256__in=dup_hashes):
        img.status, img.duplicate_of, img.error_code, img.error = Image.Status.OK, None, "", ""
        to_update.append(img)
    groups: dict[str, list[Image]] = {}
    for img in live.filter(sha256__in=dup_hashes).order_by("relative_path"):
        groups.setdefault(img.sha256, []).append(img)
    n_dups = 0
    for members in groups.values():
        keeper, rest = members[0], members[1:]
        if keeper.status != Image.Status.OK or keeper.duplicate_of_id is not None:
            keeper.status, keeper.duplicate_of, keeper.error_code, keeper.error = Image.Status.OK, None, "", ""
            to_update.append(keeper)
        for img in rest:
            n_dups += 1
            want = (Image.Status.DUPLICATE, keeper.pk)
            if (img.status, img.duplicate_of_id) != want:
                img.status, img.duplicate_of = Image.Status.DUPLICATE, keeper
                img.error_code, img.error = "exact_duplicate", f"same bytes as {keeper.relative_path}"
                to_update.append(img)
    if to_update:
        Image.objects.bulk_update(to_update, ["status", "duplicate_of", "error_code", "error", "updated_at"], batch_size=500)
    return n_dups


def ingest_run_inline(*, job: Job, progress: ProgressCallback | None = None, on_total: Callable[[int], None] | None = None) -> Job:
    """Run a whole ingest job in this process (no broker configured, or a CLI run)."""
    return run_inline(job, progress=progress, on_total=on_total)
