"""Ingest through the services and the add_source command, on the test database."""
import hashlib
import os

import pytest
from django.core.management import CommandError, call_command

from curation.models import AuditLog, CandidateClass, Image, Job, Source
from curation.services.ingest import IngestAlreadyRunning, ingest_run_inline, ingest_start
from curation.services.sources import SourceError, source_register
from tests.conftest import add_twenty_broken, make_image_folder

pytestmark = pytest.mark.django_db

CLASSES = ["n02084071", "hayfield", "sky", "n09403427", "misc"]


def _ingest(name, root, **kw):
    reg = source_register(name=name, root=root, **kw)
    return ingest_run_inline(job=ingest_start(source=reg.source, enqueue=False))


def _snapshot(source):
    return {i.relative_path: (i.sha256, i.width, i.height, i.status, i.error_code, i.bytes, i.updated_at)
            for i in Image.objects.filter(source=source)}


def test_thousand_images_with_twenty_broken_are_all_recorded_and_a_rerun_changes_nothing(tmp_path):
    root = tmp_path / "pool"
    good = make_image_folder(root, n_good=980, classes=CLASSES)
    expected_broken = add_twenty_broken(root, "misc")
    assert len(good) + len(expected_broken) == 1000

    job = _ingest("pool", root)
    assert job.status == Job.Status.DONE
    source = Source.objects.get(name="pool")
    rows = {i.relative_path: i for i in Image.objects.filter(source=source)}
    assert len(rows) == 1000
    for rel, data in good.items():
        img = rows[rel]
        assert img.status == Image.Status.OK, (rel, img.error)
        assert img.sha256 == hashlib.sha256(data).hexdigest()
        assert (img.width, img.height, img.bytes) == (64, 48, len(data))
        assert img.candidate_class.folder == rel.split("/")[0]
    for rel, code in expected_broken.items():
        assert rows[rel].status == Image.Status.BROKEN, rel
        assert rows[rel].error_code == code, (rel, rows[rel].error)
        assert rows[rel].error  # a sentence a person can act on
    mapped = dict(CandidateClass.objects.filter(source=source).values_list("folder", "wnid"))
    assert mapped == {"n02084071": "n02084071", "hayfield": "n08570634", "sky": "n09436708", "n09403427": "n09403427", "misc": ""}

    before = _snapshot(source)
    job2 = _ingest("pool", root)
    assert job2.result["added"] == 0 and job2.result["changed"] == 0 and job2.result["newly_missing"] == 0
    assert _snapshot(source) == before  # not one row touched
    assert Image.objects.filter(source=source).count() == 1000


def test_rescan_notices_new_changed_missing_and_returning_files(tmp_path):
    root = tmp_path / "pool"
    good = make_image_folder(root, n_good=40, classes=["sky", "hayfield"])
    _ingest("pool", root)
    src = Source.objects.get(name="pool")
    first = sorted(good)[0]
    gone = sorted(good)[1]
    old_sha = Image.objects.get(source=src, relative_path=first).sha256

    (root / first).write_bytes((root / sorted(good)[2]).read_bytes())  # content changes
    os.utime(root / first, ns=(1, 1))
    moved = (root / gone).read_bytes()
    (root / gone).unlink()
    (root / "sky" / "new.jpg").write_bytes((root / sorted(good)[3]).read_bytes())

    job = _ingest("pool", root)
    assert (job.result["added"], job.result["changed"], job.result["newly_missing"]) == (1, 1, 1)
    changed = Image.objects.get(source=src, relative_path=first)
    assert changed.sha256 != old_sha
    assert Image.objects.get(source=src, relative_path=gone).status == Image.Status.MISSING
    # same bytes as another file: exact duplicate, pointing at the first by path
    dup = Image.objects.get(source=src, relative_path="sky/new.jpg")
    assert dup.status == Image.Status.DUPLICATE and dup.duplicate_of.relative_path == sorted(good)[3]
    # the changed file now has the bytes of [2]: the smaller path stays ok, the other is the duplicate
    assert Image.objects.get(source=src, relative_path=first).status == Image.Status.OK
    twin = Image.objects.get(source=src, relative_path=sorted(good)[2])
    assert twin.status == Image.Status.DUPLICATE and twin.duplicate_of.relative_path == first

    (root / gone).write_bytes(moved)
    job = _ingest("pool", root)
    assert Image.objects.get(source=src, relative_path=gone).status == Image.Status.OK
    assert Image.objects.filter(source=src).count() == 41


def test_a_second_ingest_of_the_same_source_is_refused_while_one_is_unfinished(tmp_path):
    root = tmp_path / "pool"
    make_image_folder(root, n_good=3, classes=["sky"])
    reg = source_register(name="pool", root=root)
    job = ingest_start(source=reg.source, enqueue=False)
    with pytest.raises(IngestAlreadyRunning, match=f"job #{job.pk}"):
        ingest_start(source=reg.source, enqueue=False)
    ingest_run_inline(job=job)
    assert ingest_start(source=reg.source, enqueue=False).pk != job.pk


def test_registration_errors_are_clear(tmp_path):
    with pytest.raises(SourceError, match="no such folder"):
        source_register(name="x", root=tmp_path / "nope")
    (tmp_path / "a" / "sky").mkdir(parents=True)
    (tmp_path / "b" / "sky").mkdir(parents=True)
    source_register(name="x", root=tmp_path / "a")
    with pytest.raises(SourceError, match="registered at"):
        source_register(name="x", root=tmp_path / "b")
    with pytest.raises(SourceError, match="role"):
        source_register(name="x", root=tmp_path / "a", role="id")
    with pytest.raises(SourceError, match="outside the folders sources may come from"):
        source_register(name="y", root=tmp_path / "b", restrict_to_allowed_roots=True)


def test_add_source_command_reports_unmapped_folders_and_broken_files(tmp_path, capsys):
    root = tmp_path / "pool"
    make_image_folder(root, n_good=10, classes=["sky", "mystery_folder", "crane"])
    (root / "sky" / "empty.jpg").write_bytes(b"")
    call_command("add_source", "pool", str(root))
    out, err = capsys.readouterr()
    assert "3 class folders, 1 mapped to WordNet" in out
    assert "mystery_folder: no WordNet noun has this name" in err
    assert "crane: ambiguous lemma" in err
    assert "[empty_file] sky/empty.jpg" in out
    assert AuditLog.objects.filter(action="source_registered").count() == 1
    assert AuditLog.objects.filter(action="ingest_finished").count() == 1

    call_command("add_source", "ref", str(root), role="id")
    assert Source.objects.get(name="ref").role == "id"
    with pytest.raises(CommandError, match="not a WordNet 3.0 noun id"):
        bad = tmp_path / "map.csv"
        bad.write_text("crane,n12345678\n")
        call_command("add_source", "pool2", str(root), class_map=str(bad))


def test_id_class_set_defaults_to_imagenet_1k_or_comes_from_a_file(tmp_path):
    from curation.models import IdClassSet

    call_command("set_id_classes")
    s = IdClassSet.objects.get(is_default=True)
    assert s.name == "imagenet-1k" and len(s.wnids) == 1000
    f = tmp_path / "mine.txt"
    f.write_text("n02084071\nn02123159\n")
    call_command("set_id_classes", str(f), name="dogs-and-cats")
    assert IdClassSet.objects.get(is_default=True).wnids == ["n02084071", "n02123159"]
    assert IdClassSet.objects.filter(is_default=True).count() == 1
    f.write_text("n02084071\nn99999999\n")
    with pytest.raises(CommandError, match="n99999999"):
        call_command("set_id_classes", str(f), name="bad")
