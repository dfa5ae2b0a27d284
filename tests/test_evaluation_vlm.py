"""ImageNet-X and ImageNet-FS-X as presets of ``evaluate``, with a vision-language model beside a
classifier (issue 46). The CLIP model is built inside the test with RANDOM WEIGHTS
(tests/vlm_model.py) and saved as a weights file: formula fidelity only, its AUROCs mean nothing.
The classifier is the offline EfficientNet-Lite0 with its real weights."""
from __future__ import annotations

import io

import numpy as np
import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client
from PIL import Image as PILImage

from curation.models import EvalFeatureSet, EvaluationRun, IdClassSet, Job
from pipelines.evaluation.run import leaderboard
from pipelines.features.classifiers import imagenet_1k_classes
from tests.review_data import ingest
from tests.vlm_model import TINY_ARCH, tiny_clip_file

pytestmark = pytest.mark.django_db
WNIDS = imagenet_1k_classes()[0]
CLASSES = [WNIDS[i] for i in (0, 1, 251, 257)]  # tench, goldfish, dalmatian, Great Pyrenees: ID, OOD, ID, OOD in ImageNet-X


@pytest.fixture(autouse=True)
def roots(tmp_path, settings):
    settings.EXPORT_ROOT = tmp_path / "exports"
    settings.EVAL_ROOT = tmp_path / "evaluations"
    settings.FEATURE_STORE = tmp_path / "features"
    settings.DATA_DIR = tmp_path / "data"
    return tmp_path


def _sources(tmp_path, names):
    rng = np.random.default_rng(len(names))
    for name in names:
        for wnid in CLASSES:
            folder = tmp_path / name / wnid
            folder.mkdir(parents=True)
            for i in range(3):
                PILImage.fromarray(rng.integers(0, 255, (40, 52, 3), dtype=np.uint8)).save(folder / f"{i}.png")
        ingest(name, tmp_path / name, role="id")


def _client():
    from django.contrib.auth.models import Group

    user = User.objects.create_user("res", password="pw")
    user.groups.add(Group.objects.get(name="researcher"))
    client = Client()
    client.force_login(user)
    return client


def _evaluate_argv(*argv) -> tuple[int, str]:
    """``manage.py evaluate`` as from the command line: its exit status and stderr."""
    from django.db import connections

    from curation.management.commands.evaluate import Command

    err = io.StringIO()
    close_all, connections.close_all = connections.close_all, lambda: None  # run_from_argv closes them: the test's transaction
    try:
        Command(stdout=io.StringIO(), stderr=err).run_from_argv(["manage.py", "evaluate", *argv])
    except SystemExit as exc:
        return int(exc.code or 0), err.getvalue()
    finally:
        connections.close_all = close_all
    return 0, err.getvalue()


def test_imagenet_x_preset_runs_clip_detectors_beside_a_classifier(tmp_path, role_groups):
    _sources(tmp_path, ("val", "train"))
    clip = f"clip:{TINY_ARCH}:{tiny_clip_file(tmp_path)}"
    out = io.StringIO()
    call_command("evaluate", preset="imagenet-x", id_test="source:val", id_fit="source:train", models=f"{clip},efficientnet_lite0",
                 methods="msp,energy,clip_mcm,gl_mcm,clip_energy,clip_maxlogit", sanity_seeds=0, stdout=out, stderr=io.StringIO())
    run = EvaluationRun.objects.get()
    assert run.status == "done", run.message
    # the published split, registered by the preset: ID = 500 ImageNet-X classes, OOD = the other 500
    ids, oods = IdClassSet.objects.get(name="imagenet-x-id"), IdClassSet.objects.get(name="imagenet-x-ood")
    assert len(ids.wnids) == len(oods.wnids) == 500 and WNIDS[251] in ids.wnids and WNIDS[257] in oods.wnids
    assert run.ood_label == "source:val@imagenet-x-ood" and run.config["preset"] == "imagenet-x"
    assert run.config["clip_template"] == "imagenet-x"
    c, k = run.results["models"][clip], run.results["models"]["efficientnet_lite0"]
    assert c["n_id_test"] == c["n_ood"] == k["n_id_test"] == 6
    # the zero-shot head holds the 500 ID names only; the classifier's logits are restricted to them
    assert c["head_used"]["kind"] == "zero-shot" and "'this is a photo of a {}.'" in c["head_used"]["text"]
    assert "500 ID class names" in c["head_used"]["text"] and "open_clip's curated ImageNet-1K names" in c["head_used"]["text"]
    assert "zero-shot head over the 500 class names of imagenet-x-id only" in c["restricted_logits"]["note"]
    assert k["head_used"]["kind"] == "classifier" and "restricted to the 500 classes" in k["head_used"]["text"]
    for det in ("clip_mcm", "gl_mcm", "clip_energy", "clip_maxlogit", "msp", "energy"):
        assert c["detectors"][det]["status"] == "ok", (det, c["detectors"][det])
    for det in ("clip_mcm", "gl_mcm", "clip_energy"):
        assert any("temperature" in n for n in c["detectors"][det]["notes"])
        assert k["detectors"][det]["status"] == "skipped" and "text head" in k["detectors"][det]["error"]
    # GL-MCM's local tokens are cached with the global embeddings; no classifier head for a CLIP model
    cached = np.load(tmp_path / "evaluations" / EvalFeatureSet.objects.get(model_name=clip, dataset="source:val@imagenet-x-id").path)
    assert cached["local"].shape == (6, 16, 32) and cached["logits"].shape == (6, 0)
    text = out.getvalue()
    assert "head: zero-shot text head: prompt imagenet-x: 'this is a photo of a {}.'" in text
    assert "MCM (zero-shot CLIP)" in text
    # both models in the leaderboard, and the page says which head each used
    board = leaderboard(run.results)
    assert {x["model"] for d in board["detectors"] if d["det"] == "msp" for x in d["rows"]} == {clip, "efficientnet_lite0"}
    html = _client().get(f"/evaluations/{run.pk}/").content.decode()
    assert 'data-head="zero-shot"' in html and "zero-shot text head" in html and "the classifier&#x27;s own 1,000-class head" in html
    # what ran each model's forward passes (issue 51: the classifier on the CPU runtime) is on the page too
    assert k["runtime"].startswith("openvino") and f'data-runtime="{k["runtime"]}"' in html
    assert "last layer was not available" not in html.split(f'data-model="{clip}"')[-1].split("</section>")[0]


def test_imagenet_fs_x_preset_and_runs_without_weights_stop_in_one_line(tmp_path, role_groups, monkeypatch):
    _sources(tmp_path, ("val", "train", "v2"))
    clip = f"clip:{TINY_ARCH}:{tiny_clip_file(tmp_path)}"
    call_command("evaluate", preset="imagenet-fs-x", id_test="source:val", id_fit="source:train", variant=["source:v2"],
                 models=clip, methods="clip_mcm,gl_mcm", clip_template="mcm", sanity_seeds=0, stdout=io.StringIO(),
                 stderr=io.StringIO())
    run = EvaluationRun.objects.get()
    assert run.status == "done", run.message
    assert run.config["fs_x"] == {"split": "imagenet-x", "variants": ["source:v2"]}
    e = run.results["models"][clip]["detectors"]["gl_mcm"]
    assert (e["fs_x"]["pooled"]["n_id"], e["fs_x"]["pooled"]["n_ood"]) == (12, 12)
    assert "'a photo of a {}'" in run.results["models"][clip]["head_used"]["text"]
    # the cache is keyed by the model's name: other weights under the same path are refused, not mixed
    import torch

    from tests.vlm_model import tiny_clip_module

    weights = clip.split(":", 2)[2]
    torch.save(tiny_clip_module(tmp_path, seed=1)[0].state_dict(), weights)
    with pytest.raises(CommandError, match="were computed from weights sha256:"):
        call_command("evaluate", preset="imagenet-x", id_test="source:val", id_fit="source:train", models=clip, methods="clip_mcm",
                     sanity_seeds=0, stdout=io.StringIO(), stderr=io.StringIO())
    # no weights: one line naming the model and how to supply the file, exit status 1, no run left
    monkeypatch.setattr("pipelines.evaluation.vlm.unreachable", lambda url: "OSError: network unreachable")
    monkeypatch.setattr("pipelines.evaluation.vlm._cached_tag_file", lambda cfg: None)
    for models, message in (("clip:ViT-B-16-quickgelu:openai", "pass clip:ViT-B-16-quickgelu:/path/to/open_clip_pytorch_model.bin"),
                            (f"clip:ViT-B-16-quickgelu:{tmp_path}/nothing.bin", "no weights file")):
        status, err = _evaluate_argv("--preset", "imagenet-x", "--id-test", "source:val", "--id-fit", "source:train",
                                     "--methods", "clip_mcm", "--models", models)
        assert status == 1 and message in err and len(err.strip().splitlines()) == 1, err
    assert EvaluationRun.objects.count() == 1 and Job.objects.filter(kind=Job.Kind.EVALUATE).count() == 1
    with pytest.raises(CommandError, match="--preset imagenet-x makes the split itself"):
        call_command("evaluate", preset="imagenet-x", fs_x="x", id_test="source:val", id_fit="source:train", stdout=io.StringIO())


def test_the_admin_form_starts_an_imagenet_x_run_with_a_clip_model(tmp_path, role_groups, django_capture_on_commit_callbacks):
    """The issue's "or the admin form": a preset, a clip: model in "other models" and a template;
    refusals for an export given with a preset, no export without one, and variants without FS-X."""
    _sources(tmp_path, ("val", "train"))
    clip = f"clip:{TINY_ARCH}:{tiny_clip_file(tmp_path)}"
    client = _client()
    User.objects.filter(username="res").update(is_staff=True)  # the admin's forms are for staff researchers
    form = {"preset": "imagenet-x", "id_test": "source:val", "id_fit": "source:train", "other_models": clip, "clip_template": "mcm",
            "methods": ["clip_mcm", "clip_maxlogit"], "seed": 0, "sanity_seeds": 0}
    page = client.get("/admin/curation/evaluationrun/add/").content.decode()
    assert 'name="preset"' in page and "imagenet-fs-x" in page and "clip:ARCH:/path/to/weights" in page
    bad = client.post("/admin/curation/evaluationrun/add/", {**form, "preset": ""})
    assert bad.status_code == 200 and "choose the export to evaluate on, or a preset" in bad.content.decode()
    bad = client.post("/admin/curation/evaluationrun/add/", {**form, "variants": ["source:val"]})
    assert bad.status_code == 200 and "variants go with the imagenet-fs-x preset" in bad.content.decode()
    assert not EvaluationRun.objects.exists()
    with django_capture_on_commit_callbacks(execute=True):
        resp = client.post("/admin/curation/evaluationrun/add/", form)
    run = EvaluationRun.objects.get()
    assert resp.status_code == 302 and resp["Location"] == f"/evaluations/{run.pk}/"
    run.refresh_from_db()
    assert run.status == "done", run.message
    assert run.config["preset"] == "imagenet-x" and run.config["clip_template"] == "mcm"
    assert run.ood_label == "source:val@imagenet-x-ood"
    assert run.results["models"][clip]["detectors"]["clip_mcm"]["status"] == "ok"
