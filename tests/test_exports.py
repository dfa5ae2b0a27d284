"""Exports (issue 6): selection, layouts, provenance, immutability, verification, leakage,
contamination report, streamed downloads and unit-test exports, on the real database."""
from __future__ import annotations

import csv
import hashlib
import io
import json
import shutil
import tarfile
import zipfile
from pathlib import Path

import numpy as np
import pytest
from django.conf import settings
from django.contrib.auth.models import Group, User
from django.core.management import call_command
from django.core.management.base import CommandError

from curation.models import Export, ExportMember, FeatureShard, Image, ImageEmbedding, ReviewItem, Source
from curation.services.review import review_cache_clear, review_next, review_submit
from pipelines.review.agreement import wilson_interval
from tests.review_data import KEPT_CLASSES, ingest, queue_with_rows

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def export_root(tmp_path, settings):
    settings.EXPORT_ROOT = tmp_path / "exports"
    settings.FEATURE_STORE = tmp_path / "features"
    review_cache_clear()
    yield settings.EXPORT_ROOT
    review_cache_clear()


def user(name, role, staff=False):
    u = User.objects.create_user(name, password="pw", is_staff=staff)
    u.groups.add(Group.objects.get(name=role))
    return u


def random_features(source: Source, seed: int = 0) -> None:
    """Give every embedding of ``source`` a feature row (distinct random directions: nothing is a
    near-duplicate of anything), stored as the image pipeline stores them."""
    embs = list(ImageEmbedding.objects.filter(image__source=source).order_by("id"))
    x = np.random.default_rng(seed).normal(size=(len(embs), 64)).astype(np.float16)
    rel = f"test/{source.name}-{seed}.npy"
    (Path(settings.FEATURE_STORE) / "test").mkdir(parents=True, exist_ok=True)
    np.save(Path(settings.FEATURE_STORE) / rel, x)
    shard = FeatureShard.objects.create(model_name=settings.DEFAULT_MODEL, path=rel, rows=len(embs), dim=64)
    for row, e in enumerate(embs):
        e.shard, e.row = shard, row
    ImageEmbedding.objects.bulk_update(embs, ["shard", "row"])


def review_all(annotator, answer) -> dict[int, str]:
    """Review every image ``annotator`` is served, deciding by ``answer(image)``; returns
    image id -> decision."""
    out = {}
    while batch := review_next(user=annotator, want=10):
        for a in batch:
            img = a.item.image
            decision, wnids = answer(img)
            review_submit(user=annotator, assignment_id=a.pk, decision=decision, wnids=wnids, seconds=3.0)
            out[img.pk] = decision
    return out


def reviewed_pool(tmp_path, n=15, name="pool", answer=None):
    source = queue_with_rows(tmp_path, n=n, name=name)
    random_features(source)
    annotator = User.objects.filter(username="ann").first() or user("ann", "annotator")

    def default(img):
        k = int(img.relative_path.split("_")[-1].split(".")[0])
        if k % 5 == 1:
            return "id", ["n02123045"]
        if k % 7 == 2:
            return "unclear", []
        return "ood", []

    decided = review_all(annotator, answer or default)
    return source, decided


def run_export(*args, **kwargs) -> tuple[Export, str]:
    out = io.StringIO()
    try:
        call_command("export", *args, stdout=out, stderr=io.StringIO(), **kwargs)
    except CommandError as exc:
        out.write(f"\nCommandError: {exc}")
    return Export.objects.order_by("-pk").first(), out.getvalue()


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_round_trip_export_verify_reingest(tmp_path):
    source, decided = reviewed_pool(tmp_path, n=15)
    clean = {i for i, d in decided.items() if d == "ood"}
    assert 0 < len(clean) < len(decided)
    export, out = run_export(name="round-trip", sources=[source.name])
    assert export.status == Export.Status.DONE, out
    root = Path(settings.EXPORT_ROOT) / "round-trip" / "v1"
    assert f"Wrote {root}" in out and f"{len(clean)} images in 3 classes" in out
    # the clean images, and only they, in every layout
    members = {m.image_id: m for m in ExportMember.objects.filter(export=export)}
    assert set(members) == clean
    by_id = {i.pk: i for i in Image.objects.filter(pk__in=decided)}
    expected = {(by_id[i].sha256, by_id[i].candidate_class.wnid) for i in clean}
    for layout in ("ninco", "imagenet-ood", "openood"):
        got = {(sha(root / m.files[layout]), m.wnid) for m in members.values()}
        assert got == expected, layout
    imglist = (root / "openood" / "imglist.txt").read_text().splitlines()
    assert len(imglist) == len(clean) and all(line.endswith(" -1") and (root / "openood" / line[:-3]).is_file() for line in imglist)
    assert (root / "openood" / "benchmark_imglist" / "imagenet" / "test_round_trip.txt").read_text().splitlines() == [
        line.removeprefix("images_largescale/") for line in imglist]
    file_list = (root / "imagenet-ood" / "file_list.txt").read_text().splitlines()
    assert sorted(file_list) == sorted(m.files["imagenet-ood"].removeprefix("imagenet-ood/") for m in members.values())
    assert all(f.split("/")[0] in KEPT_CLASSES for f in file_list)  # wnid folders, original names
    assert (root / "imagenet-ood" / "imagenetood.txt").read_text().splitlines() == (root / "imagenet-ood" / "file_list.txt").read_text().splitlines()
    meta = list(csv.DictReader(open(root / "ninco" / "metadata.csv")))
    assert {r["class"] for r in meta} == {"iceberg", "sunset", "dune"}  # readable names
    assert all((root / "ninco" / r["file_name"]).is_file() for r in meta)
    # decisions.csv: every reviewed image with its label, reviews, top-5 and why it is (not) exported
    rows = {int(r["image_id"]): r for r in csv.DictReader(open(root / "decisions.csv"))}
    assert set(rows) == set(decided)
    for i, d in decided.items():
        r = rows[i]
        assert r["final_label"] == d and r["exported"] == ("yes" if d == "ood" else "no")
        assert r["excluded_reason"] == ("" if d == "ood" else f"final_{d}")
        assert [x["annotator"] for x in json.loads(r["reviews"])] == ["ann"] and len(json.loads(r["top5"])) == 5
        assert r["sha256"] == by_id[i].sha256 and r["source_path"] == by_id[i].relative_path
    # the manifest carries the provenance
    m = json.loads((root / "manifest.json").read_text())
    for key in ("id", "version", "created", "creator", "config", "code_version", "class_filter", "review_policy", "model", "wordnet", "counts", "files"):
        assert key in m, key
    assert m["version"] == 1 and m["config"]["sources"] == [source.name] and m["model"]["name"] == settings.DEFAULT_MODEL
    assert sum(c["images"] for c in m["counts"]["per_class"].values()) == len(clean)
    assert m["review_policy"]["sources"][source.name]["reviews_required"] == 1
    assert m["files"]["decisions.csv"] == sha(root / "decisions.csv") and len(m["files"]) == 3 * len(clean) + 9
    # verify, then re-ingest two layouts as sources: the same files with the same labels
    out = io.StringIO()
    call_command("verify_export", str(root), stdout=out, stderr=io.StringIO())
    assert f"OK: {root}: {len(m['files'])} files match" in out.getvalue()
    back = ingest("back-imagenet-ood", root / "imagenet-ood")
    got = {(i.sha256, i.candidate_class.wnid) for i in Image.objects.filter(source=back, status="ok").select_related("candidate_class")}
    assert got == expected
    call_command("add_source", "back-ninco", str(root / "ninco" / "NINCO" / "NINCO_OOD_classes"), class_map=str(root / "ninco_class_map.csv"),
                 stdout=io.StringIO(), stderr=io.StringIO())
    got = {(i.sha256, i.candidate_class.wnid) for i in Image.objects.filter(source__name="back-ninco", status="ok").select_related("candidate_class")}
    assert got == expected


def test_exports_are_versioned_never_rewritten_and_tampering_is_named(tmp_path):
    source, decided = reviewed_pool(tmp_path, n=10)
    first, _ = run_export(name="ver", sources=[source.name], copy=True)
    root1 = Path(settings.EXPORT_ROOT) / "ver" / "v1"
    before = {p: p.stat().st_mtime_ns for p in root1.rglob("*")}
    second, out = run_export(name="ver", sources=[source.name], copy=True, layouts=["openood"])
    assert (first.version, second.version) == (1, 2) and second.status == Export.Status.DONE, out
    assert {p: p.stat().st_mtime_ns for p in root1.rglob("*")} == before  # v1 untouched
    v2_files = sorted(p.name for p in (Path(settings.EXPORT_ROOT) / "ver" / "v2").iterdir())
    assert v2_files == ["README.md", "decisions.csv", "diff.csv", "manifest.json", "openood"]
    assert first.counts["placed_by"] == {"copy": first.counts["images"]}

    def verify(target):
        out, err = io.StringIO(), io.StringIO()
        with pytest.raises(CommandError, match="problem"):
            call_command("verify_export", str(target), stdout=out, stderr=err)
        return err.getvalue()

    victim = next((root1 / "imagenet-ood").glob("*/*.jpg"))
    rel = victim.relative_to(root1).as_posix()
    original = victim.read_bytes()
    data = bytearray(original)
    data[len(data) // 2] ^= 0xFF
    victim.write_bytes(bytes(data))
    err = verify(root1)
    # the three layouts share one copy inside the export (hard links), so all three are named
    assert f"FAIL {rel}: sha256" in err and err.count("FAIL") == 3 and err.count(victim.name) == 3
    victim.write_bytes(original)
    victim.unlink()
    assert f"FAIL {rel}: missing" in verify(root1)
    (root1 / "extra.txt").write_text("x")
    assert "FAIL extra.txt: not listed in the manifest" in verify(root1)
    # a rewritten manifest that hides all of it is caught against the database's record
    m = json.loads((root1 / "manifest.json").read_text())
    m["files"] = {k: v for k, v in m["files"].items() if k != rel}
    m["files"]["extra.txt"] = sha(root1 / "extra.txt")
    m["counts"]["files_per_layout"]["imagenet-ood"] -= 1
    (root1 / "manifest.json").write_text(json.dumps(m))
    err = verify(root1)
    assert err.count("FAIL") == 1 and "manifest.json: sha256" in err and "recorded when ver-v1 was written" in err
    # by name/version too
    out = io.StringIO()
    call_command("verify_export", "ver/v2", stdout=out, stderr=io.StringIO())
    assert "OK:" in out.getvalue()


def test_leakage_blocks_unless_overridden(tmp_path):
    source, decided = reviewed_pool(tmp_path, n=10)
    test_split, _ = run_export(name="leak-test", sources=[source.name], split="test")
    assert test_split.status == Export.Status.DONE
    n = test_split.counts["images"]
    # the same images as another split: blocked, nothing written
    val, out = run_export(name="leak-val", sources=[source.name], split="val")
    assert val.status == Export.Status.BLOCKED and "blocked" in out
    assert {v["kind"] for v in val.leakage["violations"]} == {"same_image"} and len(val.leakage["violations"]) == n
    assert "export leak-test-v1 (split test)" in out
    assert not (Path(settings.EXPORT_ROOT) / "leak-val").exists()
    # the same split may share images; an override note lets the curator export anyway
    same, _ = run_export(name="leak-test2", sources=[source.name], split="test")
    assert same.status == Export.Status.DONE
    forced, out = run_export(name="leak-val", sources=[source.name], split="val", override_leakage="deliberate overlap for a calibration study")
    assert forced.status == Export.Status.DONE and forced.version == 2, out
    m = json.loads((Path(settings.EXPORT_ROOT) / "leak-val" / "v2" / "manifest.json").read_text())
    assert m["leakage"]["override"] == "deliberate overlap for a calibration study" and len(m["leakage"]["violations"]) == n
    # an ID reference image identical to a candidate (added after review) blocks too
    clean_img = Image.objects.get(pk=ExportMember.objects.filter(export=test_split).first().image_id)
    (tmp_path / "idref" / "n02123045").mkdir(parents=True)
    shutil.copy(Path(source.root) / clean_img.relative_path, tmp_path / "idref" / "n02123045" / "copy.jpg")
    ingest("idref", tmp_path / "idref", role="id")
    again, out = run_export(name="leak-test", sources=[source.name], split="test")
    assert again.status == Export.Status.BLOCKED
    hits = [v for v in again.leakage["violations"] if v["kind"] == "identical_file"]
    assert len(hits) == 1 and hits[0]["image"] == clean_img.pk and hits[0]["with"] == "idref:n02123045/copy.jpg"


def test_unchecked_images_block_and_changed_files_are_left_out(tmp_path):
    source, decided = reviewed_pool(tmp_path, n=10)
    clean = sorted(i for i, d in decided.items() if d == "ood")
    # an image whose features are gone cannot be checked for leakage
    ImageEmbedding.objects.filter(image_id=clean[0]).update(shard=None, ok=False)
    blocked, out = run_export(name="chk", sources=[source.name])
    assert blocked.status == Export.Status.BLOCKED and [v["kind"] for v in blocked.leakage["violations"]] == ["no_features"]
    ImageEmbedding.objects.filter(image_id=clean[0]).update(ok=True)
    random_features(source, seed=1)
    # a source file edited after review is left out, named, and the rest exported
    changed = Image.objects.get(pk=clean[1])
    (Path(source.root) / changed.relative_path).write_bytes(b"\xff\xd8 edited")
    # and a file replaced by a link out of its source is refused, not followed
    escaped = Image.objects.get(pk=clean[2])
    (Path(source.root) / escaped.relative_path).unlink()
    (Path(source.root) / escaped.relative_path).symlink_to("/etc/hostname")
    export, out = run_export(name="chk", sources=[source.name])
    assert export.status == Export.Status.DONE and export.counts["images"] == len(clean) - 2
    assert export.counts["excluded"]["changed_since_ingest"] == 1 and "changed or vanished since ingest" in export.message
    assert export.counts["excluded"]["unsafe_path"] == 1
    row = next(r for r in csv.DictReader(open(Path(settings.EXPORT_ROOT) / "chk" / "v2" / "decisions.csv")) if int(r["image_id"]) == changed.pk)
    assert row["exported"] == "no" and row["excluded_reason"] == "changed_since_ingest"


def test_class_choice_minimum_and_bad_requests(tmp_path):
    source, decided = reviewed_pool(tmp_path, n=15)
    per_class = {}
    for i in Image.objects.filter(pk__in=[k for k, d in decided.items() if d == "ood"]).select_related("candidate_class"):
        per_class[i.candidate_class.wnid] = per_class.get(i.candidate_class.wnid, 0) + 1
    smallest = min(per_class.values())
    export, _ = run_export(name="min", sources=[source.name], min_per_class=smallest + 1)
    assert export.counts["classes"] == sum(1 for v in per_class.values() if v > smallest)
    assert export.counts["excluded"][f"below_min_per_class_{smallest + 1}"] == sum(v for v in per_class.values() if v <= smallest)
    export, _ = run_export(name="one", sources=[source.name], classes=KEPT_CLASSES[0])
    assert list(export.counts["per_class"]) == [KEPT_CLASSES[0]]
    for kwargs, message in [({"classes": "n99999999"}, "unknown class"), ({"min_per_class": 0}, "at least 1"),
                            ({"sources": ["nope"]}, "unknown source")]:
        with pytest.raises(CommandError, match=message):
            call_command("export", name="bad", **{"sources": [source.name], **kwargs}, stdout=io.StringIO())
    ingest("refs", tmp_path / "pool", role="id")
    with pytest.raises(CommandError, match="never exported as OOD"):
        call_command("export", name="bad", sources=["refs"], stdout=io.StringIO())
    with pytest.raises(CommandError, match="nothing to export"):
        ReviewItem.objects.filter(source=source).update(final_decision="id")
        call_command("export", name="empty", sources=[source.name], stdout=io.StringIO(), stderr=io.StringIO())


def test_contamination_report_is_ninco_table_1(tmp_path, client):
    source, decided = reviewed_pool(tmp_path, n=30)
    n_id = sum(d == "id" for d in decided.values())
    out = io.StringIO()
    call_command("contamination_report", source.name, stdout=out)
    lo, hi = wilson_interval(n_id, 30)
    assert f"{n_id}/30 = {100 * n_id / 30:5.1f}%" in out.getvalue() and f"{100 * lo:5.1f}%" in out.getvalue() and f"{100 * hi:5.1f}%" in out.getvalue()
    # a sample smaller than the pool: seeded, so the same sample twice; per class adds up
    from curation.selectors import contamination_report

    a, b = contamination_report(source=source, sample=12, seed=5), contamination_report(source=source, sample=12, seed=5)
    assert a == b and a["n"] == 12 and sum(c["n"] for c in a["classes"]) == 12
    user("cur", "curator", staff=True)
    client.login(username="cur", password="pw")
    page = client.get(f"/curate/contamination/{source.pk}/").content.decode()
    assert f"{n_id} of 30</strong>" in page and page.count("<tr data-wnid=") == len(KEPT_CLASSES)


def test_downloads_stream_the_export_to_allowed_roles(tmp_path, client):
    source, decided = reviewed_pool(tmp_path, n=10)
    export, _ = run_export(name="dl", sources=[source.name])
    root = Path(settings.EXPORT_ROOT) / "dl" / "v1"
    manifest = json.loads((root / "manifest.json").read_text())
    user("res", "researcher")
    user("ann2", "annotator")
    url = f"/exports/{export.pk}/download.tar.gz"
    assert client.get(url).status_code == 302  # login first
    client.login(username="ann2", password="pw")
    assert client.get(url).status_code == 403
    client.login(username="res", password="pw")
    listing = client.get("/exports/").content.decode()
    assert "dl-v1" in listing and url in listing
    r = client.get(url)
    assert r.status_code == 200 and r.streaming and r["Content-Disposition"] == 'attachment; filename="dl-v1.tar.gz"'
    with tarfile.open(fileobj=io.BytesIO(b"".join(r.streaming_content)), mode="r:gz") as tar:
        names = {m.name.removeprefix("dl-v1/"): m for m in tar.getmembers()}
        assert set(names) == set(manifest["files"]) | {"manifest.json", "SHA256SUMS"}
        for name, digest in manifest["files"].items():
            assert hashlib.sha256(tar.extractfile(names[name]).read()).hexdigest() == digest
    r = client.get(f"/exports/{export.pk}/download.zip?layout=openood")
    with zipfile.ZipFile(io.BytesIO(b"".join(r.streaming_content))) as zf:
        names = set(zf.namelist())
        assert names == {f"dl-v1-openood/{n}" for n in manifest["files"] if n.startswith("openood/") or "/" not in n} | {
            "dl-v1-openood/manifest.json", "dl-v1-openood/SHA256SUMS"}
        assert zf.testzip() is None
    assert client.get(f"/exports/{export.pk}/download.rar").status_code == 404
    # an export whose manifest was rewritten is not served
    (root / "manifest.json").write_text((root / "manifest.json").read_text().replace('"dl"', '"dl "'))
    assert client.get(url).status_code == 409


def test_unit_test_exports_from_the_command_and_the_admin(tmp_path, client, django_capture_on_commit_callbacks):
    from tests.conftest import real_photo

    (tmp_path / "ids" / "n07920052").mkdir(parents=True)
    shutil.copy(real_photo("coffee.png"), tmp_path / "ids" / "n07920052" / "coffee.png")
    (tmp_path / "ids" / "n04485082").mkdir(parents=True)
    shutil.copy(real_photo("rocket.jpg"), tmp_path / "ids" / "n04485082" / "rocket.jpg")
    idsrc = ingest("ids", tmp_path / "ids", role="id")
    out = io.StringIO()
    call_command("make_unit_tests", name="ut", per_test=3, workers=1, stdout=out, stderr=io.StringIO())
    export = Export.objects.get(name="ut")
    assert export.kind == Export.Kind.UNIT_TESTS and export.status == Export.Status.DONE and export.counts["images"] == 51
    root = Path(settings.EXPORT_ROOT) / "ut" / "v1"
    assert sorted(p.name for p in root.iterdir() if p.is_dir())[:3] == ["black", "blobs", "gaussian_noise"]
    sizes = {(i.width, i.height) for i in Image.objects.filter(source=idsrc)}
    rows = list(csv.DictReader(open(root / "unit_tests.csv")))
    assert len(rows) == 51 and {(int(r["width"]), int(r["height"])) for r in rows} <= sizes
    call_command("verify_export", str(root), stdout=io.StringIO(), stderr=io.StringIO())
    # --out with a folder of ID images
    target = tmp_path / "plain"
    call_command("make_unit_tests", out=str(target), per_test=2, id_images=str(tmp_path / "ids"), tests="black,white", stdout=io.StringIO(),
                 stderr=io.StringIO())
    assert sorted(p.name for p in target.iterdir()) == ["black", "file_list.csv", "manifest.json", "ninco_names.csv", "unit_tests.csv", "white"]
    with pytest.raises(CommandError, match="not empty"):
        call_command("make_unit_tests", out=str(target), per_test=2, id_images=str(tmp_path / "ids"), stdout=io.StringIO(), stderr=io.StringIO())
    # the admin's form queues the same job (eager here), as a new version
    cur = user("cur", "curator", staff=True)
    client.force_login(cur)
    page = client.get("/admin/curation/export/add/")
    assert page.status_code == 200 and b"Create export" in page.content
    with django_capture_on_commit_callbacks(execute=True):
        r = client.post("/admin/curation/export/add/", {"kind": "unit_tests", "name": "ut", "per_test": 2, "seed": 1, "id_source": idsrc.pk,
                                                         "min_per_class": 1, "split": "test", "layouts": ["ninco"], "create": "1"})
    assert r.status_code == 302
    v2 = Export.objects.get(name="ut", version=2)
    assert v2.status == Export.Status.DONE and v2.created_by == cur and v2.counts["images"] == 34
    assert v2.config["convention"] == "paper"
    # NINCO's generator's convention, chosen on the form: recorded in the config and the manifest
    with django_capture_on_commit_callbacks(execute=True):
        r = client.post("/admin/curation/export/add/", {"kind": "unit_tests", "name": "ut", "per_test": 2, "seed": 1, "id_source": idsrc.pk,
                                                         "min_per_class": 1, "split": "test", "layouts": ["ninco"], "create": "1",
                                                         "convention": "ninco"})
    v3 = Export.objects.get(name="ut", version=3)
    assert v3.status == Export.Status.DONE and v3.config["convention"] == "ninco"
    manifest = json.loads((Path(settings.EXPORT_ROOT) / "ut" / "v3" / "manifest.json").read_text())
    assert "NINCO's published generator" in manifest["recipe"]
    rows = list(csv.DictReader(open(Path(settings.EXPORT_ROOT) / "ut" / "v3" / "unit_tests.csv")))
    for r in rows:  # NINCO's format rule: PNG for an even ID sample index, JPEG for an odd one
        assert r["format"] == ("PNG" if json.loads(r["params"])["sample_index"] % 2 == 0 else "JPEG")
    ninco_dir = tmp_path / "ninco-out"
    call_command("make_unit_tests", out=str(ninco_dir), per_test=2, id_images=str(tmp_path / "ids"), tests="tricolour",
                 convention="ninco", stdout=io.StringIO(), stderr=io.StringIO())
    assert json.loads((ninco_dir / "manifest.json").read_text())["config"]["convention"] == "ninco"
    with pytest.raises(CommandError):
        call_command("make_unit_tests", out=str(tmp_path / "bad"), per_test=2, id_images=str(tmp_path / "ids"), convention="bogus",
                     stdout=io.StringIO(), stderr=io.StringIO())
    # a dataset export without sources is refused on the form, naming the field
    r = client.post("/admin/curation/export/add/", {"kind": "dataset", "name": "x", "per_test": 2, "seed": 0, "min_per_class": 1, "split": "test",
                                                     "create": "1"})
    assert r.status_code == 200 and b"choose at least one candidate source" in r.content
    # researchers read exports but cannot create them
    client.force_login(user("res", "researcher", staff=True))
    assert client.get("/admin/curation/export/").status_code == 200
    assert client.get("/admin/curation/export/add/").status_code == 403


@pytest.mark.slow
def test_near_duplicate_of_an_id_image_added_after_review_blocks_the_export(tmp_path):
    """Real model features: a resized, recompressed copy of an exported candidate, added to the
    ID reference set later, is caught by the feature + pixel check."""
    from PIL import Image as PILImage

    from tests.review_data import queue_with_real_model

    source = queue_with_real_model(tmp_path, n=12)
    annotator = user("ann", "annotator")
    review_all(annotator, lambda img: ("ood", []))
    first, out = run_export(name="nd", sources=[source.name])
    assert first.status == Export.Status.DONE, out
    victim = Image.objects.get(pk=ExportMember.objects.filter(export=first).order_by("image_id").first().image_id)
    (tmp_path / "ref2" / "n09229709").mkdir(parents=True)
    with PILImage.open(Path(source.root) / victim.relative_path) as im:
        im.convert("RGB").resize((im.width * 3 // 4, im.height * 3 // 4)).save(tmp_path / "ref2" / "n09229709" / "later.jpg", quality=80)
    ingest("ref2", tmp_path / "ref2", role="id")
    call_command("run_image_pipeline", sources=["ref2"], stdout=io.StringIO(), stderr=io.StringIO())
    again, out = run_export(name="nd", sources=[source.name])
    assert again.status == Export.Status.BLOCKED
    hits = [v for v in again.leakage["violations"] if v["kind"] == "near_duplicate"]
    assert [h["image"] for h in hits] == [victim.pk] and hits[0]["with"] == "ref2:n09229709/later.jpg" and hits[0]["similarity"] >= 0.7
    assert f"{source.name}:{victim.relative_path}: near_duplicate ref2:n09229709/later.jpg" in out


def test_difficulty_split_writes_easy_and_hard_sub_splits(tmp_path):
    import csv
    import json

    source, decided = reviewed_pool(tmp_path, n=15)
    export, out = run_export(name="by-difficulty", sources=[source.name], difficulty_split="median")
    assert export.status == Export.Status.DONE, out
    root = Path(settings.EXPORT_ROOT) / "by-difficulty" / "v1"
    with open(root / "difficulty.csv", newline="") as fh:
        classes = list(csv.DictReader(fh))
    # iceberg, sunset, dune: three classes, ranked by similarity, the median (the higher one for an
    # even count) is the cut and a class at or above it is hard
    assert len(classes) == 3
    sims = [float(c["semantic_similarity"]) for c in classes]
    assert sims == sorted(sims, reverse=True) and all(0 <= s <= 1 for s in sims)
    manifest = json.loads((root / "manifest.json").read_text())
    d = manifest["difficulty"]
    assert d["cut"] == pytest.approx(sorted(sims)[1], abs=1e-4) and d["id_classes"] == "imagenet-1k"
    assert [c["difficulty"] for c in classes] == ["hard" if s >= d["cut"] else "easy" for s in sims]
    assert all(c["closest_id_wnid"].startswith("n") and int(c["path_distance"]) >= 1 for c in classes)
    side = {c["wnid"]: c["difficulty"] for c in classes}
    # per layout, the two sub-split lists partition the full list, class by class
    full = (root / "openood" / "imglist.txt").read_text().splitlines()
    hard = (root / "openood" / "imglist_hard.txt").read_text().splitlines()
    easy = (root / "openood" / "imglist_easy.txt").read_text().splitlines()
    assert sorted(hard + easy) == sorted(full) and hard and easy
    assert all(side[line.split("/")[2]] == "hard" for line in hard)
    for listing in ("imagenet-ood/file_list_{}.txt", "ninco/NINCO/file_list_{}.csv", "openood/benchmark_imglist/imagenet/test_by_difficulty_{}.txt"):
        parts = [(root / listing.format(s)).read_text().splitlines() for s in ("hard", "easy")]
        if listing.endswith(".csv"):  # NINCO's two-column list, each with its header
            parts = [p[1:] for p in parts]
        assert len(parts[0]) + len(parts[1]) == len(full)
    with open(root / "ninco" / "metadata.csv", newline="") as fh:
        meta = list(csv.DictReader(fh))
    assert all(m["difficulty"] == side[m["wnid"]] and m["semantic_similarity"] for m in meta)
    # every file is in the manifest (verify_export passes) and the command says what it did
    assert "difficulty split (hard: semantic similarity >=" in out
    assert export.counts["difficulty"]["hard"]["images"] + export.counts["difficulty"]["easy"]["images"] == len(full)
    verify = io.StringIO()
    call_command("verify_export", str(root), stdout=verify)
    assert "OK" in verify.getvalue() or "ok" in verify.getvalue()

    # a threshold puts every class on one side; a bad spec is one line naming the forms
    export2, out2 = run_export(name="all-easy", sources=[source.name], difficulty_split="1.0")
    assert export2.status == Export.Status.DONE and export2.counts["difficulty"]["hard"]["classes"] == 0, out2
    _, out3 = run_export(name="bad-spec", sources=[source.name], difficulty_split="hardest")
    assert "CommandError: difficulty split 'hardest': use median (default), quantile:Q" in out3
