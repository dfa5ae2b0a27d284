"""The image pipeline as users run it: the file-level commands (no database), and the jobs on
ingested sources with the real offline model (eager Celery, the test database)."""
from __future__ import annotations

import csv
import io
import shutil
from pathlib import Path

import numpy as np
import pytest
from django.conf import settings
from django.core.management import CommandError, call_command
from PIL import Image as PILImage

from curation.models import ClassVisualSignal, FeatureShard, Image, ImageEmbedding, Job, JobChunk
from fixtures.images import transformed_copies
from tests.conftest import real_photo

SLOW = pytest.mark.slow  # the real model


def _rows(path):
    with open(path, newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def _copies_of(src: Path, folder: Path, n: int = 4) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    out = [folder / src.name]
    shutil.copy(src, out[0])
    with PILImage.open(src) as im:
        for t, data in list(transformed_copies(im).items())[:n]:
            p = folder / f"{src.stem}_{t}"
            p.write_bytes(data)
            out.append(p)
    return out


@SLOW
def test_predict_command_writes_topk_rows_and_skips_bad_files(tmp_path, capsys):
    shutil.copy(real_photo("coffee.png"), tmp_path / "coffee.png")
    shutil.copy(real_photo("camera.png"), tmp_path / "sub_camera.png")
    (tmp_path / "notes.txt").write_text("not an image")
    out = tmp_path / "preds.csv"
    call_command("predict", str(tmp_path), "--topk", "3", "--out", str(out), "--workers", "0")
    rows = _rows(out)
    assert list(rows[0]) == ["path", "rank", "wnid", "label", "prob"]
    assert [(r["rank"], r["wnid"], r["label"]) for r in rows if r["path"].endswith("coffee.png")][0] == ("1", "n07920052", "espresso")
    assert [r["label"] for r in rows if r["path"].endswith("sub_camera.png") and r["rank"] == "1"] == ["tripod"]
    assert len(rows) == 6 and not any("notes.txt" in r["path"] for r in rows)
    err = capsys.readouterr().err
    assert "notes.txt: cannot decode it for the model" in err
    with pytest.raises(CommandError, match="unknown model"):
        call_command("predict", str(tmp_path), "--model", "no_such_net", "--out", str(out))
    # the torchvision decoder on the CPU: the same files answered, the same top-1, the decoder named
    out_tv = tmp_path / "preds_tv.csv"
    said = io.StringIO()
    call_command("predict", str(tmp_path), "--topk", "3", "--out", str(out_tv), "--decoder", "torchvision", stdout=said)
    top1 = lambda rows: {r["path"]: r["wnid"] for r in rows if r["rank"] == "1"}  # noqa: E731
    assert top1(_rows(out_tv)) == top1(rows)
    assert "decoder torchvision" in said.getvalue() and "2 by pillow" in said.getvalue()  # the PNGs
    with pytest.raises(CommandError, match="--batch-size 0"):
        call_command("predict", str(tmp_path), "--out", str(out_tv), "--batch-size", "0")


@SLOW
def test_find_duplicates_command_lists_groups_not_singletons(tmp_path):
    files = _copies_of(real_photo("chelsea.png"), tmp_path / "a") + _copies_of(real_photo("china.jpg", "sklearn"), tmp_path / "b", n=2)
    shutil.copy(files[0], tmp_path / "a" / "same_bytes.png")
    shutil.copy(real_photo("coffee.png"), tmp_path / "b" / "alone.png")
    (tmp_path / "b" / "broken.jpg").write_bytes(b"\xff\xd8\xff\xe0 truncated")
    out, said = tmp_path / "groups.csv", io.StringIO()
    call_command("find_duplicates", str(tmp_path / "a"), str(tmp_path / "b"), "--out", str(out), "--workers", "0", stdout=said)
    rows = _rows(out)
    assert list(rows[0]) == ["group", "path", "similarity"]
    names = [Path(r["path"]).name for r in rows]
    assert "alone.png" not in names and "broken.jpg" not in names  # a singleton is not a duplicate group; broken: skipped
    assert len(rows) == len(files) + 1 and all(r["similarity"] for r in rows)
    group = {Path(r["path"]).name: r["group"] for r in rows}
    cats = {group[p.name] for p in files[:5]} | {group["same_bytes.png"]}
    assert len(cats) == 1 and group["china.jpg"] not in cats and {r["group"] for r in rows} == {"1", "2"}
    first = rows[0]
    assert Path(first["path"]).name == "chelsea.png" and float(first["similarity"]) == 1.0  # the representative leads
    assert "1 image(s) without a near-duplicate, not listed (--singletons lists them)" in said.getvalue()
    # --singletons: each as its own group, after the near-duplicate groups, with no similarity
    call_command("find_duplicates", str(tmp_path / "a"), str(tmp_path / "b"), "--out", str(out), "--workers", "0",
                 "--singletons", stdout=io.StringIO())
    last = _rows(out)[-1]
    assert Path(last["path"]).name == "alone.png" and last["group"] == "3" and last["similarity"] == ""


@SLOW
@pytest.mark.django_db
def test_pipeline_on_ingested_sources(tmp_path, settings):
    settings.AMBIGUITY_MIN_IMAGES = 1  # one real cat photo is all the wheels ship
    cands, ids = tmp_path / "pool", tmp_path / "imagenet_ref"
    _copies_of(real_photo("chelsea.png"), cands / "n02121808")  # domestic cat: a photo and 4 copies
    for pkg, name, wnid in [("sklearn", "china.jpg", "n03874965"), ("sklearn", "flower.jpg", "n11669921"),
                            ("skimage", "rocket.jpg", "n04099429"), ("skimage", "astronaut.png", "n09818022"),
                            ("skimage", "coffee.png", "n07920052")]:
        (cands / wnid).mkdir(parents=True, exist_ok=True)
        shutil.copy(real_photo(name, pkg), cands / wnid / name)
    (cands / "n09818022" / "truncated.jpg").write_bytes(b"\xff\xd8\xff\xe0 cut short")
    shutil.copy(real_photo("motorcycle_left.png"), cands / "n09818022" / "later_broken.png")
    for name, wnid in [("coffee.png", "n07920052"), ("camera.png", "n04485082")]:
        (ids / wnid).mkdir(parents=True, exist_ok=True)
        shutil.copy(real_photo(name), ids / wnid / name)
    call_command("add_source", "pool", str(cands), stdout=io.StringIO(), stderr=io.StringIO())
    call_command("add_source", "ref", str(ids), role="id", stdout=io.StringIO(), stderr=io.StringIO())
    (cands / "n09818022" / "later_broken.png").write_bytes(b"garbage now")  # changed after ingest

    out = io.StringIO()
    call_command("run_image_pipeline", stdout=out, stderr=io.StringIO())
    text = out.getvalue()
    ok_images = Image.objects.filter(status="ok")
    assert ImageEmbedding.objects.count() == ok_images.count() == 13  # 11 candidates (the later-broken one too) + 2 ID
    assert not ImageEmbedding.objects.filter(image__status="broken").exists()
    bad = ImageEmbedding.objects.get(image__relative_path="n09818022/later_broken.png")
    assert not bad.ok and "cannot decode it for the model" in bad.error and bad.shard is None
    # predictions stored with their scores; features on disk as float16, indexed in the database
    coffee = ImageEmbedding.objects.get(image__source__name="pool", image__relative_path="n07920052/coffee.png")
    assert coffee.top1_wnid == "n07920052" and len(coffee.topk) == 5 and coffee.energy >= coffee.max_logit
    shard = np.load(Path(settings.FEATURE_STORE) / coffee.shard.path)
    assert shard.dtype == np.float16 and shard.shape[1] == 1280 and FeatureShard.objects.count() == 2
    # the decoder is recorded with the job, its result and every shard
    assert set(FeatureShard.objects.values_list("decoder", flat=True)) == {"pil"}
    assert all(j.config["decoder"] == j.result["decoder"] == "pil" for j in Job.objects.filter(kind="extract"))
    # near-duplicates: the original (largest, then oldest) stays, its copies point to it
    cat = {e.image.relative_path: e for e in ImageEmbedding.objects.filter(image__relative_path__startswith="n02121808/").select_related("image")}
    rep = cat["n02121808/chelsea.png"]
    assert rep.drop_reason == "" and rep.dup_group == rep.image_id
    others = [e for p, e in cat.items() if p != "n02121808/chelsea.png"]
    assert len(others) == 4 and all(e.drop_reason == f"near_duplicate_of:{rep.image_id}" for e in others)
    # a candidate that copies an ID image is dropped; every candidate knows its nearest ID image
    ref_coffee = Image.objects.get(source__name="ref", relative_path="n07920052/coffee.png")
    assert coffee.drop_reason == f"duplicate_of_id:{ref_coffee.pk}" and coffee.nearest_id_similarity == 1.0
    china = ImageEmbedding.objects.get(image__relative_path="n03874965/china.jpg")
    assert china.drop_reason == "" and china.nearest_id_image is not None and china.nearest_id_similarity < 0.8
    # the cat class: most of its images are called one ID class
    signal = ClassVisualSignal.objects.get(candidate_class__folder="n02121808")
    assert signal.flagged and signal.reason == f"visually_ambiguous_with:{signal.top_wnid}"
    assert signal.top_wnid in {"n02123045", "n02123159", "n02124075"} and signal.top_share > 0.5
    assert signal.n_images == 1  # the four copies are not counted again
    pagoda = ClassVisualSignal.objects.get(candidate_class__folder="n03874965")
    assert pagoda.n_images == 1 and pagoda.flagged == (pagoda.top_share > 0.5)
    assert "visually_ambiguous_with" in text and "5 near-duplicates" not in text

    # a second run computes nothing again and reproduces the decisions exactly
    before = {e.pk: (e.drop_reason, e.dup_group, e.nearest_id_image_id) for e in ImageEmbedding.objects.all()}
    call_command("run_image_pipeline", stdout=io.StringIO(), stderr=io.StringIO())
    assert {e.pk: (e.drop_reason, e.dup_group, e.nearest_id_image_id) for e in ImageEmbedding.objects.all()} == before
    latest = Job.objects.filter(kind="extract").order_by("-pk")[:2]
    assert all(j.status == "done" and j.total == 0 for j in latest)
    assert JobChunk.objects.filter(job__kind="extract").count() == 2  # one chunk per source, from the first run


@pytest.mark.django_db
def test_admin_actions_start_jobs_for_curators_only(tmp_path, django_capture_on_commit_callbacks):
    from django.test import Client

    from curation.services.sources import source_register
    from curation.services.users import users_create_demo
    from tests.conftest import make_image_folder

    users_create_demo()
    make_image_folder(tmp_path / "s", n_good=2, classes=["sky"])
    source = source_register(name="s", root=tmp_path / "s").source
    clients = {}
    for name in ("curator", "researcher"):
        clients[name] = Client()
        assert clients[name].login(username=name, password=f"{name}-demo")
    for action in ("extract", "find_near_duplicates"):
        with django_capture_on_commit_callbacks(execute=False) as queued:
            clients["researcher"].post("/admin/curation/source/", {"action": action, "_selected_action": [source.pk]})
        assert not queued and not Job.objects.filter(kind__in=["extract", "dedup"]).exists()
    with django_capture_on_commit_callbacks(execute=False) as queued:
        r = clients["curator"].post("/admin/curation/source/", {"action": "extract", "_selected_action": [source.pk]}, follow=True)
    assert b"Extraction job #" in r.content and len(queued) == 1
    job = Job.objects.get(kind="extract")
    assert job.source == source and job.config["model"] == settings.DEFAULT_MODEL and job.created_by.username == "curator"
    r = clients["curator"].post("/admin/curation/source/", {"action": "extract", "_selected_action": [source.pk]}, follow=True)
    assert b"already pending" in r.content and Job.objects.filter(kind="extract").count() == 1


@SLOW
@pytest.mark.django_db
def test_the_model_can_skip_the_classes_the_filter_removed(tmp_path):
    """--skip-removed-classes: the images of classes the latest class filter run removed are not
    run through the model; the rest are, and the review queue holds them."""
    cands = tmp_path / "pool"
    for pkg, name, wnid in [("skimage", "coffee.png", "n07920052"),  # espresso: an ImageNet-1K class, removed
                            ("skimage", "astronaut.png", "n09818022"),  # astronaut: a person, removed as an organism
                            ("skimage", "rocket.jpg", "n04099429"),  # rocket: a hypernym of missile, removed
                            ("sklearn", "china.jpg", "n03874965")]:  # pagoda: kept or flagged, never removed
        (cands / wnid).mkdir(parents=True, exist_ok=True)
        shutil.copy(real_photo(name, pkg), cands / wnid / name)
    call_command("add_source", "pool", str(cands), stdout=io.StringIO(), stderr=io.StringIO())
    call_command("filter_classes", candidates="source:pool", id_spec="imagenet-1k", out=str(tmp_path / "f.csv"),
                 policy="imagenet-ood", stdout=io.StringIO())
    call_command("run_image_pipeline", sources=["pool"], skip_removed_classes=True, no_dedup=True, stdout=io.StringIO(),
                 stderr=io.StringIO())
    from curation.models import ClassDecision

    removed = set(ClassDecision.objects.filter(decision="remove").values_list("candidate_class__folder", flat=True))
    assert removed == {"n07920052", "n09818022", "n04099429"}
    extracted = set(ImageEmbedding.objects.values_list("image__relative_path", flat=True))
    assert extracted == {"n03874965/china.jpg"}
    job = Job.objects.get(kind="extract")
    assert job.config["skip_removed_classes"] is True and job.total == 1
    # without the option the rest is extracted too (a later run fills in only what is missing)
    call_command("run_image_pipeline", sources=["pool"], no_dedup=True, stdout=io.StringIO(), stderr=io.StringIO())
    assert ImageEmbedding.objects.count() == 4 and Job.objects.filter(kind="extract").order_by("-pk")[0].total == 3
