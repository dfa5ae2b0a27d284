"""A full disk (issue 38): OSError ENOSPC injected at every write site of an export, a unit-test
export and the feature store, the disk full from one site on, per run. The job fails with one line that names the
error, leaves nothing half-written (no version folder, no temporary folder, no partial shard),
and the same job run with space again writes a complete, verifying result.

The write sites are found, not listed: a first run counts every file opened for writing (and
every hard link made) under the export root or the feature store; then run k fails from the k-th."""
from __future__ import annotations

import builtins
import errno
import io
import os
from pathlib import Path

import pytest
from django.conf import settings
from django.core.management import call_command

from curation.models import Export, FeatureShard, ImageEmbedding, Job

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("isolated_roots")]


class DiskFull:
    """Counts writes under ``roots``; with ``fail_at`` = k, the disk is full from the k-th on:
    it and every later write raise ENOSPC (a hard link then falls back to a copy, which fails)."""

    def __init__(self, monkeypatch, roots, fail_at: int | None = None):
        self.roots = [str(Path(r).resolve()) for r in roots]
        self.count, self.fail_at, self.sites = 0, fail_at, []
        real_open, real_fdopen, real_link = builtins.open, os.fdopen, os.link

        def hit(where: str, target) -> None:
            path = str(Path(str(target)).resolve()) if not isinstance(target, int) else ""
            if isinstance(target, int) or any(path.startswith(r) for r in self.roots):
                self.count += 1
                self.sites.append(where)
                if self.fail_at is not None and self.count >= self.fail_at:  # full from the k-th write on
                    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), path or None)

        def open_(file, mode="r", *args, **kwargs):
            if any(c in mode for c in "wxa+") and not isinstance(file, int):
                hit(f"open({mode})", file)
            return real_open(file, mode, *args, **kwargs)

        def fdopen(fd, mode="r", *args, **kwargs):
            if any(c in mode for c in "wxa+"):
                try:
                    target = os.readlink(f"/proc/self/fd/{fd}")
                except OSError:
                    target = ""
                if any(target.startswith(r) for r in self.roots):
                    hit(f"fdopen({mode})", target)
            return real_fdopen(fd, mode, *args, **kwargs)

        def link(src, dst, *args, **kwargs):
            hit("link", dst)
            return real_link(src, dst, *args, **kwargs)

        monkeypatch.setattr(builtins, "open", open_)
        monkeypatch.setattr(os, "fdopen", fdopen)
        monkeypatch.setattr(os, "link", link)


def files_under(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*")) if root.exists() else []


@pytest.fixture
def pool(tmp_path, role_groups):
    from curation.services.review import review_cache_clear
    from tests.test_exports import reviewed_pool

    review_cache_clear()
    source, decided = reviewed_pool(tmp_path, n=6, name="dpool", answer=lambda img: ("ood", []))
    return source, decided


def run(*args) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    try:
        call_command(*args, stdout=out, stderr=err)
        return 0, out.getvalue()
    except Exception as exc:  # CommandError: what the user sees
        return 1, str(exc)


def test_an_export_on_a_full_disk_fails_at_every_write_site_with_one_line_and_leaves_nothing(pool, monkeypatch):
    root = Path(settings.EXPORT_ROOT)
    with monkeypatch.context() as m:
        counter = DiskFull(m, [root])
        status, _ = run("export", "--name", "count", "--source", "dpool")
    assert status == 0
    sites = counter.count
    assert sites >= 10 and {"link", "open(xb)"} <= set(counter.sites)  # images linked, manifest and lists written
    before = files_under(root)
    for k in range(1, sites + 1):
        with monkeypatch.context() as m:
            DiskFull(m, [root], fail_at=k)
            status, message = run("export", "--name", f"full{k}", "--source", "dpool")
        assert status == 1, f"write {k} of {sites} failed silently"
        assert "No space left on device" in message and "\n" not in message.strip(), (k, message)
        export = Export.objects.get(name=f"full{k}")
        assert export.status == "failed" and "No space left on device" in export.message
        assert Job.objects.get(pk=export.job_id).status == "failed"
        assert files_under(root) == before, f"write {k}: something half-written was left: {set(files_under(root)) - set(before)}"
    # space again: the same export completes and verifies
    status, _ = run("export", "--name", "full1", "--source", "dpool")
    assert status == 0
    done = Export.objects.filter(name="full1", status="done").get()
    status, out = run("verify_export", str(root / done.path))
    assert status == 0, out


def test_feature_extraction_on_a_full_disk_fails_with_one_line_and_leaves_no_shard(tmp_path, monkeypatch):
    from tests.conftest import make_image_folder

    make_image_folder(tmp_path / "fpool", n_good=6, classes=["sky", "hayfield"])
    call_command("add_source", "fpool", str(tmp_path / "fpool"), stdout=io.StringIO(), stderr=io.StringIO())
    store = Path(settings.FEATURE_STORE)
    with monkeypatch.context() as m:
        DiskFull(m, [store], fail_at=1)
        status, message = run("run_image_pipeline", "--sources", "fpool", "--no-dedup")
    assert status == 1 and "No space left on device" in message and "\n" not in message.strip(), message
    job = Job.objects.get(kind="extract")
    assert job.status == "failed" and "No space left on device" in job.message
    assert [f for f in files_under(store) if Path(store / f).is_file()] == []  # no shard, no temporary file
    assert not FeatureShard.objects.exists() and not ImageEmbedding.objects.filter(image__source__name="fpool").exists()


def test_a_unit_test_export_on_a_full_disk_fails_with_one_line_and_leaves_nothing(tmp_path, monkeypatch, role_groups):
    from tests.review_data import id_sets

    id_sets(tmp_path, {"dref": (1, 64)})
    root = Path(settings.EXPORT_ROOT)
    args = ("make_unit_tests", "--per-test", "1", "--workers", "1", "--name")
    with monkeypatch.context() as m:
        counter = DiskFull(m, [root])
        status, _ = run(*args, "ucount")
    assert status == 0 and counter.count >= 17  # an image per test, its list, the manifest
    before = files_under(root)
    for k in range(1, counter.count + 1, 3):  # every third write site: the same code paths, a third of the time
        with monkeypatch.context() as m:
            DiskFull(m, [root], fail_at=k)
            status, message = run(*args, f"ufull{k}")
        assert status == 1 and "No space left on device" in message and "\n" not in message.strip(), (k, message)
        assert Export.objects.get(name=f"ufull{k}").status == "failed"
        assert files_under(root) == before, f"write {k}: left {set(files_under(root)) - set(before)}"
