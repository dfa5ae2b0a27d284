"""Issue 62, rows 6 and 7: a vision-language model whose weights file cannot be loaded, or whose
path cannot even be checked, is refused before any run exists, on the command line (one line,
exit status 1, no traceback, no EvaluationRun row) and in the admin form (the form again with the
message, never a 500). The CLIP file is the tests' tiny model with RANDOM WEIGHTS
(tests/vlm_model.py): formula fidelity only."""
from __future__ import annotations

import errno
import io
import pickle
import zipfile

import numpy as np
import pytest
from django.contrib.auth.models import Group, User
from django.test import Client
from PIL import Image as PILImage

from curation.models import EvaluationRun, Job
from pipelines.features.classifiers import imagenet_1k_classes
from tests.review_data import ingest
from tests.vlm_model import TINY_ARCH, tiny_clip_file

pytestmark = pytest.mark.django_db
WNIDS = imagenet_1k_classes()[0]
CLASSES = [WNIDS[i] for i in (0, 1, 251, 257)]  # ID, OOD, ID, OOD in ImageNet-X


@pytest.fixture(autouse=True)
def roots(tmp_path, settings):
    settings.EXPORT_ROOT = tmp_path / "exports"
    settings.EVAL_ROOT = tmp_path / "evaluations"
    settings.FEATURE_STORE = tmp_path / "features"
    settings.DATA_DIR = tmp_path / "data"
    return tmp_path


def _sources(tmp_path, names=("val", "train")):
    rng = np.random.default_rng(len(names))
    for name in names:
        for wnid in CLASSES:
            folder = tmp_path / name / wnid
            folder.mkdir(parents=True)
            for i in range(2):
                PILImage.fromarray(rng.integers(0, 255, (40, 52, 3), dtype=np.uint8)).save(folder / f"{i}.png")
        ingest(name, tmp_path / name, role="id")


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


def _bad_files(tmp_path):
    """Existing files that are not a checkpoint open_clip can load into the tiny architecture."""
    import torch

    good = tiny_clip_file(tmp_path).read_bytes()
    out = {}
    out["pickle.bin"] = pickle.dumps({"visual.proj": [1.0, 2.0]})
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("readme.txt", "not weights")
    out["archive.pt"] = buf.getvalue()
    buf = io.BytesIO()
    np.savez(buf, w=np.zeros(3))
    out["weights.npz"] = buf.getvalue()
    out["truncated.bin"] = good[: len(good) // 2]
    out["bad.safetensors"] = b"\xff" * 64
    buf = io.BytesIO()
    torch.save({"epoch": 3, "note": "no tensors"}, buf)
    out["not-a-state-dict.pt"] = buf.getvalue()
    paths = {}
    for name, data in out.items():
        (tmp_path / "bad").mkdir(exist_ok=True)
        paths[name] = tmp_path / "bad" / name
        paths[name].write_bytes(data)
    return paths


def test_a_clip_file_that_does_not_load_is_refused_in_one_line_before_any_run(tmp_path, role_groups):
    _sources(tmp_path)
    for name, path in _bad_files(tmp_path).items():
        status, err = _evaluate_argv("--preset", "imagenet-x", "--id-test", "source:val", "--id-fit", "source:train",
                                     "--methods", "clip_mcm", "--sanity-seeds", "0", "--models", f"clip:{TINY_ARCH}:{path}")
        assert status == 1, (name, err)
        assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, (name, err)
        assert str(path) in err and "pass" in err, (name, err)
        assert not EvaluationRun.objects.exists() and not Job.objects.filter(kind=Job.Kind.EVALUATE).exists(), name


def test_the_loadability_check_passes_a_real_checkpoint(tmp_path):
    from pipelines.evaluation.vlm import check_weights_file, resolve_weights

    name = f"clip:{TINY_ARCH}:{tiny_clip_file(tmp_path)}"
    check_weights_file(name, resolve_weights(name))  # no error: the tiny model's torch.save state dict


def _staff_researcher() -> Client:
    user = User.objects.create_user("res", password="pw", is_staff=True)
    user.groups.add(Group.objects.get(name="researcher"))
    client = Client()
    client.force_login(user)
    return client


@pytest.mark.parametrize("problem", ["too-long", "permission", "not-loadable"])
def test_the_admin_form_answers_a_bad_weights_path_with_a_form_error(tmp_path, role_groups, monkeypatch, problem):
    _sources(tmp_path)
    client = _staff_researcher()
    if problem == "too-long":  # ENAMETOOLONG from the file system
        model = "clip:ViT-B-32:/" + "a" * 300
        message = "File name too long"
    elif problem == "permission":  # EACCES (the tests run as root, so the file system is told to refuse)
        path = tiny_clip_file(tmp_path)
        model = f"clip:{TINY_ARCH}:{path}"

        def refuse(p):
            raise PermissionError(errno.EACCES, "Permission denied", str(p))

        monkeypatch.setattr("pipelines.evaluation.vlm.file_digest", refuse)
        message = "Permission denied"
    else:
        model = f"clip:{TINY_ARCH}:{_bad_files(tmp_path)['truncated.bin']}"
        message = "is not a checkpoint open_clip can load"
    form = {"preset": "imagenet-x", "id_test": "source:val", "id_fit": "source:train", "other_models": model,
            "methods": ["clip_mcm"], "seed": 0, "sanity_seeds": 0}
    resp = client.post("/admin/curation/evaluationrun/add/", form)
    assert resp.status_code == 200, resp.status_code
    assert message in resp.content.decode()
    assert not EvaluationRun.objects.exists()
