"""make_covariate_shift as a user runs it: ImageNet-C's layout, sources registered with their
provenance, the same files under the same seed, an interrupted run resumed, clear errors."""
from __future__ import annotations

import io

import numpy as np
import pytest
from django.core.management import CommandError, call_command
from PIL import Image

from curation.models import AuditLog, Source
from curation.models import Image as ImageRow
from curation.services.covariate_shift import read_provenance
from tests.review_data import ingest

pytestmark = pytest.mark.django_db


def _id_source(tmp_path):
    rng = np.random.default_rng(0)
    for wnid in ("n01440764", "n01443537"):
        (tmp_path / "val" / wnid).mkdir(parents=True)
        for i in range(2):
            Image.fromarray(rng.integers(0, 255, (90, 120, 3), dtype=np.uint8)).save(tmp_path / "val" / wnid / f"{i}.png")
    return ingest("val", tmp_path / "val", role="id")


def test_make_covariate_shift_writes_imagenet_c_layout_and_registers_sources(tmp_path):
    _id_source(tmp_path)
    out = io.StringIO()
    call_command("make_covariate_shift", from_spec="source:val", out=str(tmp_path / "c"), corruptions="gaussian_noise,defocus_blur",
                 severities="1,5", seed=3, stdout=out, stderr=io.StringIO())
    text = out.getvalue()
    assert "written 16" in text and "--id-shifted source:val-c-gaussian_noise-1" in text
    files = sorted(p.relative_to(tmp_path / "c").as_posix() for p in (tmp_path / "c").rglob("*.png"))
    assert len(files) == 16 and files[0] == "defocus_blur/1/n01440764/0.png"
    sources = {s.name: s for s in Source.objects.filter(name__startswith="val-c-")}
    assert set(sources) == {f"val-c-{c}-{s}" for c in ("gaussian_noise", "defocus_blur") for s in (1, 5)}
    s5 = sources["val-c-gaussian_noise-5"]
    assert s5.role == "id" and s5.provenance["corruption"] == "gaussian_noise" and s5.provenance["severity"] == 5
    assert s5.provenance["from"] == "val" and s5.provenance["seed"] == 3
    assert set(ImageRow.objects.filter(source=s5).values_list("status", flat=True)) == {"ok"}  # images only, 4 of them
    assert ImageRow.objects.filter(source=s5).count() == 4
    rows = read_provenance(tmp_path / "c")
    assert len(rows) == 16 and {r["status"] for r in rows} == {"ok"}
    row = next(r for r in rows if r["file"] == "gaussian_noise/5/n01443537/1.png")
    assert row["original_path"] == "n01443537/1.png" and row["original_source"] == "val" and len(row["original_sha256"]) == 64
    assert AuditLog.objects.filter(action="covariate_shift_made").count() == 1

    # the same seed gives the same bytes; another seed other noise
    call_command("make_covariate_shift", from_spec="source:val", out=str(tmp_path / "again"), corruptions="gaussian_noise",
                 severities="5", seed=3, no_register=True, stdout=io.StringIO(), stderr=io.StringIO())
    call_command("make_covariate_shift", from_spec="source:val", out=str(tmp_path / "other"), corruptions="gaussian_noise",
                 severities="5", seed=4, no_register=True, stdout=io.StringIO(), stderr=io.StringIO())
    rel = "gaussian_noise/5/n01440764/0.png"
    assert (tmp_path / "again" / rel).read_bytes() == (tmp_path / "c" / rel).read_bytes()
    assert (tmp_path / "other" / rel).read_bytes() != (tmp_path / "c" / rel).read_bytes()

    # an interrupted run: a file is missing; --resume writes it and keeps the rest
    (tmp_path / "again" / rel).unlink()
    out = io.StringIO()
    call_command("make_covariate_shift", from_spec="source:val", out=str(tmp_path / "again"), corruptions="gaussian_noise",
                 severities="5", seed=3, no_register=True, resume=True, stdout=out, stderr=io.StringIO())
    assert "written 1" in out.getvalue() and "kept from an earlier run 3" in out.getvalue()
    assert (tmp_path / "again" / rel).read_bytes() == (tmp_path / "c" / rel).read_bytes()


def test_bad_requests_are_one_line_errors(tmp_path):
    _id_source(tmp_path)
    for kwargs, message in (
            ({"from_spec": "source:nope"}, "--from source:nope: not an ID reference source"),
            ({"corruptions": "rain"}, "unknown corruption 'rain'"),
            ({"severities": "9"}, "give a comma-separated list of 1..5"),
            ({"name": "../x"}, "name '../x' is not allowed")):
        args = {"from_spec": "source:val", "out": str(tmp_path / "o"), "corruptions": "fog", "severities": "1", **kwargs}
        with pytest.raises(CommandError, match=message):
            call_command("make_covariate_shift", stdout=io.StringIO(), stderr=io.StringIO(), **args)
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    with pytest.raises(CommandError, match="the folder is not empty"):
        call_command("make_covariate_shift", from_spec="source:val", out=str(tmp_path / "full"), stdout=io.StringIO())


def test_the_admin_action_runs_it_as_a_job(tmp_path, settings, django_capture_on_commit_callbacks):
    from django.test import Client

    from curation.models import Job
    from curation.services.users import users_create_demo

    settings.SOURCE_ALLOWED_ROOTS = [tmp_path / "sources"]
    source = _id_source(tmp_path)
    users_create_demo()
    curator = Client()
    assert curator.login(username="curator", password="curator-demo")
    with django_capture_on_commit_callbacks(execute=True):  # eager Celery: the job runs on commit
        r = curator.post("/admin/curation/source/", {"action": "make_covariate_shift", "_selected_action": [str(source.pk)],
                                                     "apply": "1", "name": "val-shift", "corruptions": ["fog"],
                                                     "severities": ["2"], "seed": "1"}, follow=True)
    assert r.status_code == 200
    job = Job.objects.get(kind="covariate_shift")
    assert job.status == "done" and job.result["sources"] == ["val-shift-fog-2"] and job.created_by.username == "curator"
    assert (tmp_path / "sources" / "val-shift" / "fog" / "2" / "n01440764" / "0.png").is_file()
    assert Source.objects.get(name="val-shift-fog-2").provenance["from"] == "val"
    # the same name again is refused before any work
    r = curator.post("/admin/curation/source/", {"action": "make_covariate_shift", "_selected_action": [str(source.pk)],
                                                 "apply": "1", "name": "val-shift", "corruptions": ["fog"], "severities": ["2"],
                                                 "seed": "1"}, follow=True)
    assert b"already holds files; choose another name" in r.content and Job.objects.filter(kind="covariate_shift").count() == 1
