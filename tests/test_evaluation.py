"""Evaluation runs through the service, the commands and the web pages, on PostgreSQL. Model
outputs here are synthetic (imported, or cached as a worker leaves them) so the answers are
known; the real model's end-to-end run is the demo's (tests/test_demo.py)."""
from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import numpy as np
import pytest
from django.contrib.auth.models import Group, User
from django.core.management import call_command
from django.core.management.base import CommandError
from PIL import Image as PILImage

from curation.models import EvalFeatureSet, EvaluationRun, Export, Job
from curation.selectors import evaluation_csv_rows
from curation.services.evaluation import EvaluationError, cache_dir, evaluation_create, evaluation_run_inline, export_set, outputs_import
from pipelines.features.classifiers import imagenet_1k_classes
from tests.review_data import ingest

pytestmark = pytest.mark.django_db
WNIDS = imagenet_1k_classes()[0]
D = 24


@pytest.fixture(autouse=True)
def roots(tmp_path, settings):
    settings.EXPORT_ROOT = tmp_path / "exports"
    settings.EVAL_ROOT = tmp_path / "evaluations"
    settings.FEATURE_STORE = tmp_path / "features"
    return tmp_path


def _id_source(tmp_path: Path, name: str, n: int = 3):
    for c in range(2):
        folder = tmp_path / name / WNIDS[c]
        folder.mkdir(parents=True)
        for i in range(n):
            PILImage.new("RGB", (64, 48), (40 * c + i, 90, 200)).save(folder / f"{i}.jpg")
    return ingest(name, tmp_path / name, role="id")


def _export(name="ood", kind=Export.Kind.DATASET, status=Export.Status.DONE, members=()) -> Export:
    job = Job.objects.create(kind=Job.Kind.EXPORT)
    return Export.objects.create(name=name, version=1, kind=kind, status=status, job=job, path=f"{name}/v1",
                                 manifest_sha256=f"{name}-digest")


def _gaussians(seed=0):
    """A 2-class toy: logits read dims 0-1; OOD images differ only along dim 10 (which the head
    ignores) in class A (easy for Mahalanobis) and sit on the ID data in class B."""
    rng = np.random.default_rng(seed)
    w = np.zeros((1000, D))
    w[0, 0] = w[1, 1] = 4.0
    b = np.zeros(1000)

    def make(n, shift, labels=True):
        y = rng.integers(0, 2, n)
        x = rng.normal(0, 0.5, (n, D))
        x[np.arange(n), y] += 1.0
        x[:, 10] += shift
        return x.astype(np.float32), (x @ w.T + b).astype(np.float32), y

    return w, b, make


def _write_npz(path: Path, **arrays) -> Path:
    np.savez(path, **arrays)
    return path


def _world(tmp_path):
    """Imported ID test and fit sets, and an export whose outputs are already cached."""
    w, b, make = _gaussians()
    fx, fl, fy = make(600, 0.0)
    tx, tl, ty = make(300, 0.0)
    outputs_import(name="fit", path=_write_npz(tmp_path / "fit.npz", features=fx, logits=fl, labels=fy, weight=w, bias=b),
                   model_name="toy")
    outputs_import(name="test", path=_write_npz(tmp_path / "test.npz", features=tx, logits=tl,
                                                labels=np.array([WNIDS[i] for i in ty])), model_name="toy")
    export = _export()
    ax, al, _ = make(100, 8.0)  # class A: far along dim 10
    bx, bl, _ = make(100, 0.0)  # class B: the ID distribution itself
    groups = np.array(["n09999901"] * 100 + ["n09999902"] * 100)
    s = export_set(export)
    folder = cache_dir("toy", s.key, s.version)
    folder.mkdir(parents=True)
    from django.conf import settings

    np.savez(folder / "outputs.npz", features=np.concatenate([ax, bx]), logits=np.concatenate([al, bl]),
             keys=np.array([f"k{i}" for i in range(200)]), wnids=groups, groups=groups, errors=np.zeros(0, dtype=str))
    EvalFeatureSet.objects.create(model_name="toy", dataset=s.key, version=s.version,
                                  path=str((folder / "outputs.npz").relative_to(settings.EVAL_ROOT)), images=200, feature_dim=D)
    return export


def test_a_run_on_known_data_reports_what_the_data_say(tmp_path, role_groups):
    export = _world(tmp_path)
    run = evaluation_create(export=export, id_test="import:test", id_fit="import:fit", models=["toy"],
                            methods=["msp", "mahalanobis", "vim", "knn", "odin"], params={"knn_k": 10, "vim_dim": 4}, enqueue=False)
    run = evaluation_run_inline(run=run)
    assert run.status == "done" and run.job.status == "done" and run.job.total == 0  # nothing to extract: all cached
    r = run.results["models"]["toy"]
    maha, msp = r["detectors"]["mahalanobis"], r["detectors"]["msp"]
    assert maha["classes"]["n09999901"]["auroc"] > 0.999 and maha["classes"]["n09999901"]["fpr95_id_positive"] == 0.0
    assert 0.35 < maha["classes"]["n09999902"]["auroc"] < 0.65  # the ID distribution itself: chance
    assert maha["mean_class"]["fpr95_id_positive"] == pytest.approx(
        (maha["classes"]["n09999901"]["fpr95_id_positive"] + maha["classes"]["n09999902"]["fpr95_id_positive"]) / 2)
    assert 0.35 < msp["pooled"]["auroc"] < 0.65  # logits carry no OOD signal here
    assert r["detectors"]["vim"]["status"] == "ok" and r["detectors"]["vim"]["classes"]["n09999901"]["auroc"] > 0.99
    assert r["id_accuracy"] > 0.8 and r["id_labelled"] == 300  # wnid labels mapped to class indices
    # ODIN needs the images: imported outputs cannot give it, and the page says so per detector
    # ... as a detector that cannot run on these sets: skipped with one line, the run goes on (issue 31.7)
    odin = r["detectors"]["odin"]
    assert odin["status"] == "skipped" and "computed while extracting" in odin["error"] and "\n" not in odin["error"]
    assert "skipped (cannot run on these sets, see each row): toy/odin" in run.message and "failed" not in run.message
    page = _client("res-page", "researcher").get(f"/evaluations/{run.pk}/").content.decode()
    assert 'class="muted detector-skipped">not run: ' in page and "computed while extracting" in page
    assert page.index('id="model-1"') < page.index('id="config"')  # the headline table first
    assert "1000 OOD classes" in r["severity_message"]
    assert run.export_version == f"{export.label} sha256:{export.manifest_sha256}" and run.code_version
    assert run.config["method_params"]["knn"] == {"k": 10} and run.config["sets"]["ood"]["key"] == "export:ood-v1"


def _client(username, role):
    from django.test import Client

    u = User.objects.create_user(username, password="pw", is_staff=True)
    if role:
        u.groups.add(Group.objects.get(name=role))
    c = Client()
    c.force_login(u)
    return c


def test_result_page_csv_and_json_agree_and_roles_hold(tmp_path, role_groups):
    export = _world(tmp_path)
    run = evaluation_run_inline(run=evaluation_create(export=export, id_test="import:test", id_fit="import:fit", models=["toy"],
                                                      methods=["msp", "mahalanobis"], enqueue=False))
    researcher = _client("res", "researcher")
    page = researcher.get(f"/evaluations/{run.pk}/").content.decode()
    rows = list(csv.DictReader(io.StringIO(researcher.get(f"/evaluations/{run.pk}/results.csv").content.decode())))
    pooled = {r["detector"]: r for r in rows if r["group"] == "pooled"}
    for det in ("msp", "mahalanobis"):
        assert f'data-metric="auroc">{100 * float(pooled[det]["auroc"]):.1f}<' in page
        assert f'data-metric="fpr95_id_positive">{100 * float(pooled[det]["fpr95_id_positive"]):.1f}<' in page
    assert {r["group"] for r in rows} == {"pooled", "mean_over_classes", "n09999901", "n09999902"}
    data = json.loads(researcher.get(f"/evaluations/{run.pk}/results.json").content)
    assert data["config"]["methods"] == ["msp", "mahalanobis"] and data["export"].startswith("ood-v1")
    cdf = run.results["plots"]["toy"]["cdf"]
    svg = researcher.get(f"/evaluations/{run.pk}/plots/{cdf}")
    assert svg.status_code == 200 and svg["Content-Type"] == "image/svg+xml" and b"<svg" in svg.content
    assert researcher.get(f"/evaluations/{run.pk}/plots/../../../etc/passwd").status_code == 404
    assert researcher.get(f"/evaluations/{run.pk}/plots/toy/other.svg").status_code == 404
    assert _client("cur", "curator").get(f"/evaluations/{run.pk}/").status_code == 200
    assert _client("ann", "annotator").get(f"/evaluations/{run.pk}/").status_code == 403
    from django.test import Client

    assert "/accounts/login/" in Client().get(f"/evaluations/{run.pk}/results.csv")["Location"]
    # researchers may start runs in the admin; annotators and curators may not
    assert researcher.get("/admin/curation/evaluationrun/add/").status_code == 200
    assert _client("cur2", "curator").get("/admin/curation/evaluationrun/add/").status_code == 403


def test_admin_form_starts_a_run(tmp_path, role_groups, django_capture_on_commit_callbacks):
    export = _world(tmp_path)
    researcher = _client("res", "researcher")
    with django_capture_on_commit_callbacks(execute=True):
        resp = researcher.post("/admin/curation/evaluationrun/add/", {
            "export": export.pk, "id_test": "import:test", "id_fit": "import:fit", "other_models": "toy",
            "methods": ["msp", "energy"], "knn_k": 1000, "odin_temperature": 2, "odin_epsilon": 1e-5, "react_percentile": 99,
            "ash_percentile": 90, "seed": 0})
    run = EvaluationRun.objects.get()
    assert resp.status_code == 302 and resp["Location"] == f"/evaluations/{run.pk}/"
    run.refresh_from_db()
    assert run.status == "done" and run.created_by.username == "res"  # eager Celery ran plan -> finalize
    assert set(run.results["models"]["toy"]["detectors"]) == {"msp", "energy"}
    # shifted ID sets and the sanity check's seeds are in the form too
    w, b, make = _gaussians(2)
    x, lg, y = make(100, 3.0)
    outputs_import(name="shifted", path=_write_npz(tmp_path / "sh.npz", features=x, logits=lg, labels=np.array([WNIDS[i] for i in y])),
                   model_name="toy")
    with django_capture_on_commit_callbacks(execute=True):
        resp = researcher.post("/admin/curation/evaluationrun/add/", {
            "export": export.pk, "id_test": "import:test", "id_fit": "import:fit", "other_models": "toy", "methods": ["msp"],
            "knn_k": 1000, "odin_temperature": 2, "odin_epsilon": 1e-5, "react_percentile": 99, "ash_percentile": 90, "seed": 0,
            "id_shifted": ["import:shifted"], "sanity_seeds": 0})
    second = EvaluationRun.objects.order_by("-pk").first()
    assert resp.status_code == 302 and "sanity" not in second.config
    assert "import:shifted" in second.results["models"]["toy"]["detectors"]["msp"]["full_spectrum"]
    bad = researcher.post("/admin/curation/evaluationrun/add/", {
        "export": export.pk, "id_test": "import:test", "id_fit": "import:test", "other_models": "toy", "methods": ["msp"],
        "knn_k": 1000, "odin_temperature": 2, "odin_epsilon": 1e-5, "react_percentile": 99, "ash_percentile": 90, "seed": 0})
    assert bad.status_code == 200 and "inflate every feature-based result" in bad.content.decode()


def test_bad_requests_get_clear_errors(tmp_path):
    export = _world(tmp_path)
    src = _id_source(tmp_path, "idsrc")
    ok = {"export": export, "id_test": "import:test", "id_fit": "import:fit", "models": ["toy"], "enqueue": False}
    cases = [
        ({"id_fit": "import:test"}, "inflate every feature-based result"),
        ({"id_fit": "source:nope"}, "unknown source 'nope'"),
        ({"id_fit": "import:nope"}, "no imported outputs named 'nope'"),
        ({"methods": ["msp", "bogus"]}, "unknown detector(s) bogus"),
        ({"models": ["toy", "other"]}, "holds outputs of toy"),
        ({"models": []}, "at least one model"),
        ({"params": {"knn_k": 0}}, "--knn-k: 0 must be between 1 and 1,000,000"),
        ({"export": _export("blocked", status=Export.Status.BLOCKED)}, "evaluate a finished clean OOD export"),
        ({"unit_tests": _export("ut", kind=Export.Kind.DATASET)}, "not a finished OOD unit-test set"),
    ]
    for change, message in cases:
        with pytest.raises(EvaluationError, match=message.replace("(", r"\(").replace(")", r"\)")):
            evaluation_create(**{**ok, **change})
    cand_root = tmp_path / "cand" / "n09999901"
    cand_root.mkdir(parents=True)
    PILImage.new("RGB", (32, 32)).save(cand_root / "a.png")
    ingest("cand", tmp_path / "cand")
    with pytest.raises(EvaluationError, match="holds OOD candidates"):
        evaluation_create(**{**ok, "models": ["efficientnet_lite0"], "id_test": "source:cand", "id_fit": f"source:{src.name}"})
    # a duplicate submission while the first is pending is refused; the first stands alone
    evaluation_create(**ok)
    with pytest.raises(EvaluationError, match="already pending as run"):
        evaluation_create(**ok)
    assert EvaluationRun.objects.count() == 1
    with pytest.raises(CommandError, match="no dataset export 'missing'"):
        call_command("evaluate", export="missing", id_test="import:test", id_fit="import:fit", stdout=io.StringIO())


def test_importing_outputs_checks_the_file(tmp_path):
    f, lg = np.ones((4, 3), np.float32), np.zeros((4, 1000), np.float32)
    good = _write_npz(tmp_path / "good.npz", features=f, logits=lg, labels=np.array([0, 1, 2, -1]))
    out = io.StringIO()
    call_command("import_outputs", "val", str(good), model="toy", stdout=out)
    assert "import:val: 4 images, 3-d features of toy" in out.getvalue()
    call_command("import_outputs", "val", str(good), model="toy", stdout=io.StringIO())  # the same file again: a no-op
    assert EvalFeatureSet.objects.filter(dataset="import:val").count() == 1
    other = _write_npz(tmp_path / "other.npz", features=f * 2, logits=lg)
    bad = [
        (other, "val", "already exist"),
        (_write_npz(tmp_path / "nologits.npz", features=f), "a", r"nologits.npz: missing array\(s\) logits"),
        (_write_npz(tmp_path / "nan.npz", features=f * np.nan, logits=lg), "b", "NaN or infinite"),
        (_write_npz(tmp_path / "wnid.npz", features=f, logits=lg, labels=np.array(["n00000000"] * 4)), "c", "unknown wnid label"),
        (_write_npz(tmp_path / "shape.npz", features=f, logits=lg[:3]), "d", "for the same n"),
        (_write_npz(tmp_path / "head.npz", features=f, logits=lg, weight=np.ones((3, 3)), bias=np.ones(3)), "e", "must be \\[C, d\\]"),
        (tmp_path / "absent.npz", "f", "absent.npz: no such file"),
    ]
    (tmp_path / "text.npz").write_text("not a zip")
    bad.append((tmp_path / "text.npz", "g", "text.npz: not a readable .npz"))
    for path, name, message in bad:
        with pytest.raises(CommandError, match=message):
            call_command("import_outputs", name, str(path), model="toy", stdout=io.StringIO())


def test_conventions_are_chosen_recorded_and_shown(tmp_path, role_groups):
    export = _world(tmp_path)
    out = io.StringIO()
    call_command("evaluate", export="ood", id_test="import:test", id_fit="import:fit", models="toy", methods="msp,react",
                 fpr_method="ninco-interpolated", oaa_convention="code", react_percentile=90, stdout=out)
    run = EvaluationRun.objects.get()
    conv = run.results["models"]["toy"]["conventions"]
    assert run.config["conventions"]["fpr_method"] == "ninco-interpolated" and conv["oaa_convention"] == "code"
    assert "conventions: FPR@95 ID+ ninco-interpolated; AUPR average-precision; mOAA code; severity c-ood" in out.getvalue()
    # the pooled FPR is NINCO's code's: np.quantile of the ID scores (written here, not our helper)
    from curation.services.evaluation import load_outputs
    from pipelines.evaluation.detectors import get_detector

    fit, _, _, _ = load_outputs(EvalFeatureSet.objects.get(dataset="import:fit"))
    test, _, _, _ = load_outputs(EvalFeatureSet.objects.get(dataset="import:test"))
    ood, _, _, _ = load_outputs(EvalFeatureSet.objects.get(dataset="export:ood-v1"))
    msp = get_detector("msp").fit(fit)
    s_id, s_ood = msp.score(test), msp.score(ood)
    expected = float((s_ood >= np.quantile(s_id, 0.05)).mean())
    assert run.results["models"]["toy"]["detectors"]["msp"]["pooled"]["fpr95_id_positive"] == pytest.approx(expected, abs=1e-12)
    react = run.results["models"]["toy"]["detectors"]["react"]
    assert react["params"] == {"percentile": 90.0} and any("Sun et al." in n for n in react["notes"])
    page = _client("res", "researcher").get(f"/evaluations/{run.pk}/").content.decode()
    assert "ninco-interpolated: threshold at NumPy&#x27;s interpolated 5% quantile" in page
    assert "code: rejected samples with a wrong prediction count as correct" in page and "grid: every pooled score" in page
    assert "C-OOD&#x27;s protocol: 200 images per class, 150 to estimate" in page and "|Y_OOD| - |Y_ID| + 1" in page
    rows = list(csv.DictReader(io.StringIO(_client("res2", "researcher").get(f"/evaluations/{run.pk}/results.csv").content.decode())))
    assert {r["fpr_method"] for r in rows} == {"ninco-interpolated"} and {r["oaa_convention"] for r in rows} == {"code"}
    for bad, message in (({"fpr_method": "median"}, "fpr-method: 'median' is not one of"),
                         ({"severity_protocol": "x"}, "severity-protocol"),
                         ({"severity_per_class": 100, "severity_estimation": 100}, "fewer than the images per class")):
        with pytest.raises(EvaluationError, match=message):
            evaluation_create(export=export, id_test="import:test", id_fit="import:fit", models=["toy"], params=bad, enqueue=False)


def test_odin_scores_cached_under_the_old_rule_are_computed_again_not_mixed(tmp_path):
    """ODIN's step changed (epsilon now in pixel space): outputs cached with the old key must not be
    reused; the plan schedules ODIN afresh under the new key."""
    from curation.services.evaluation import evaluation_plan, resolve_set
    from pipelines.evaluation.detectors.odin import odin_key

    src = _id_source(tmp_path, "idtest")
    _id_source(tmp_path, "idfit")
    export = _world(tmp_path)
    t = resolve_set(f"source:{src.name}", role="test")
    # the ID test set's outputs are cached, with ODIN scores from an earlier version's rule
    EvalFeatureSet.objects.create(model_name="toy", dataset=t.key, version=t.version, path="old/outputs.npz", images=6,
                                  feature_dim=D, extras={"odin_t2_e1e-05": "old/odin.npz"})
    assert odin_key(2.0, 1e-5) != "odin_t2_e1e-05"
    run = evaluation_create(export=export, id_test=f"source:{src.name}", id_fit="source:idfit", models=["toy"], methods=["odin"],
                            enqueue=False)
    evaluation_plan(job_id=run.job_id)
    whats = {(c.payload["role"], c.payload["what"]) for c in run.job.chunks.all()}
    assert ("id_test", "features") not in whats  # the features are reused...
    assert ("id_test", odin_key(2.0, 1e-5)) in whats  # ...but ODIN is computed again under the new key


def test_the_decoder_is_recorded_keys_the_cache_and_is_never_mixed(tmp_path):
    """Outputs computed through Pillow and through torchvision differ slightly: a run records its
    decoder, finds cached outputs only under it, and refuses sets computed with another."""
    from curation.services.evaluation import _cached, check_one_decoder, export_set

    export = _world(tmp_path)  # the export's outputs are cached from the Pillow path
    entry = {"key": export_set(export).key, "version": export_set(export).version}
    run = evaluation_create(export=export, id_test="import:test", id_fit="import:fit", models=["toy"], methods=["msp"], enqueue=False)
    assert run.config["decoder"] == "pil"  # the deployment's default (OODC_DECODER)
    tv = evaluation_create(export=export, id_test="import:test", id_fit="import:fit", models=["toy"], methods=["msp"],
                           params={"decoder": "torchvision"}, enqueue=False)
    assert tv.config["decoder"] == "torchvision"
    assert _cached("toy", entry, "pil") is not None and _cached("toy", entry, "torchvision") is None  # computed again, not reused
    # an import that says which decoder made it is held to it; one that does not is taken as it is
    w, b, make = _gaussians(1)
    x, lg, y = make(50, 0.0)
    outputs_import(name="fit_pil", path=_write_npz(tmp_path / "fp.npz", features=x, logits=lg, labels=y, weight=w, bias=b),
                   model_name="toy", decoder="pil")
    with pytest.raises(EvaluationError, match="computed with the pil decoder and this run decodes with torchvision"):
        evaluation_create(export=export, id_test="import:test", id_fit="import:fit_pil", models=["toy"], methods=["msp"],
                          params={"decoder": "torchvision"}, enqueue=False)
    rows = {"id_fit": EvalFeatureSet(dataset="import:fit_pil", decoder="pil"), "ood": EvalFeatureSet(dataset="export:x", decoder="torchvision"),
            "id_test": EvalFeatureSet(dataset="import:test", decoder="unknown")}
    with pytest.raises(EvaluationError, match=r"refusing to mix decoders: id_fit \(import:fit_pil\) was computed with pil"):
        check_one_decoder(rows, "torchvision")
    with pytest.raises(EvaluationError, match="decoder 'nvjpeg'"):
        evaluation_create(export=export, id_test="import:test", id_fit="import:fit", models=["toy"], params={"decoder": "nvjpeg"},
                          enqueue=False)
    with pytest.raises(EvaluationError, match="decoder 'x'"):
        outputs_import(name="bad", path=tmp_path / "fp.npz", model_name="toy", decoder="x")


def test_results_per_difficulty_sub_split_of_the_export(tmp_path, role_groups):
    export = _world(tmp_path)
    # the export was written with --difficulty-split: class A is easy, class B hard
    export.counts = {**export.counts, "difficulty": {"classes": {"n09999901": "easy", "n09999902": "hard"}}}
    export.save(update_fields=["counts"])
    run = evaluation_run_inline(run=evaluation_create(export=export, id_test="import:test", id_fit="import:fit", models=["toy"],
                                                      methods=["mahalanobis", "msp"], enqueue=False))
    maha = run.results["models"]["toy"]["detectors"]["mahalanobis"]
    # each sub-split holds one class here, so its figures are that class's, computed apart
    assert maha["subsplits"]["easy"] == maha["classes"]["n09999901"]
    assert maha["subsplits"]["hard"] == maha["classes"]["n09999902"]
    assert maha["subsplits"]["easy"]["auroc"] > 0.999 and maha["subsplits"]["hard"]["auroc"] < 0.65
    rows = [r for r in evaluation_csv_rows(run) if r["set"] == "ood_subsplit"]
    assert {(r["detector"], r["group"]) for r in rows} == {("mahalanobis", "easy"), ("mahalanobis", "hard"), ("msp", "easy"), ("msp", "hard")}
    html = _client("res", "researcher").get(f"/evaluations/{run.pk}/").content.decode()
    assert "Easy / hard OOD classes" in html and 'data-subsplit="hard"' in html


def test_restricting_logits_keeps_those_classes_and_renumbers_labels():
    from pipelines.evaluation.detectors import Head, Outputs
    from pipelines.evaluation.run import restrict_classes

    logits = np.arange(12, dtype=np.float32).reshape(2, 6)
    out = restrict_classes(Outputs(features=np.ones((2, 3)), logits=logits, labels=np.array([4, 1])), np.array([4, 0, 2]))
    assert out.logits.tolist() == [[4, 0, 2], [10, 6, 8]]
    assert out.labels.tolist() == [0, -1]  # class 4 is now 0; class 1 is not kept
    head = Head(weight=np.arange(18).reshape(6, 3), bias=np.arange(6)).restricted(np.array([4, 0]))
    assert head.weight.tolist() == [[12, 13, 14], [0, 1, 2]] and head.bias.tolist() == [4, 0]


def _split_world(tmp_path, sources):
    """A two-and-two semantic split "x" of four ImageNet classes, and ID sources holding three
    images of each of the four classes."""
    from curation.models import IdClassSet

    halves = {"x-id": [WNIDS[0], WNIDS[251]], "x-ood": [WNIDS[1], WNIDS[257]]}  # tench, dalmatian | goldfish, Great Pyrenees
    for name, wnids in halves.items():
        IdClassSet.objects.get_or_create(name=name, defaults={"spec": "test", "wnids": wnids})
    rng = np.random.default_rng(len(sources))
    for source in sources:
        for wnid in halves["x-id"] + halves["x-ood"]:
            folder = tmp_path / source / wnid
            folder.mkdir(parents=True)
            for i in range(3):  # distinct noise: no two images are duplicates
                PILImage.fromarray(rng.integers(0, 255, (56, 72, 3), dtype=np.uint8)).save(folder / f"{i}.png")
        ingest(source, tmp_path / source, role="id")
    return halves


def test_imagenet_fs_x_pools_id_class_images_of_every_source_against_their_ood_class_images(tmp_path, role_groups):
    _split_world(tmp_path, ("val", "train", "variant"))
    out = io.StringIO()
    call_command("evaluate", fs_x="x", id_test="source:val", id_fit="source:train", variant=["source:variant"],
                 models="efficientnet_lite0", methods="msp,energy", sanity_seeds=0, stdout=out, stderr=io.StringIO())
    run = EvaluationRun.objects.get()
    assert run.status == "done", run.message
    assert run.config["fs_x"] == {"split": "x", "variants": ["source:variant"]} and "sanity" not in run.config
    assert run.ood_label == "source:val@x-ood" and run.config["restrict_logits"]["set"] == "x-id"
    e = run.results["models"]["efficientnet_lite0"]["detectors"]["msp"]
    fs = e["fs_x"]
    assert set(fs["per_source"]) == {"ID source", "source:variant@x-id"}
    assert (fs["pooled"]["n_id"], fs["pooled"]["n_ood"]) == (12, 12)  # 6 ID-class and 6 OOD-class images per source
    assert fs["per_source"]["ID source"] == e["pooled"]  # the ID source's own figure is the standard one
    assert e["full_spectrum"]["source:variant@x-id"]["full_spectrum"]["n_id"] == 12
    assert "ImageNet-FS-X AUROC: pooled" in out.getvalue()
    html = _client("res", "researcher").get(f"/evaluations/{run.pk}/").content.decode()
    assert "ImageNet-FS-X" in html and 'data-metric="fs_x_pooled"' in html
    assert {r["group"] for r in evaluation_csv_rows(run) if r["set"] == "fs_x"} == {"pooled", "ID source", "source:variant@x-id"}
    with pytest.raises(CommandError, match="--fs-x needs at least one variant source"):
        call_command("evaluate", fs_x="x", id_test="source:val", id_fit="source:train", stdout=io.StringIO())


def test_a_semantic_split_is_evaluated_on_one_source_with_restricted_logits(tmp_path, role_groups):
    """ImageNet-X's protocol on a small scale: one ID source holds both halves; the OOD half is the
    OOD set, the ID half the ID test set, and the classifier decides among the ID half only."""
    halves = _split_world(tmp_path, ("val", "train"))
    out = io.StringIO()
    call_command("evaluate", ood="source:val@x-ood", id_test="source:val@x-id", id_fit="source:train@x-id", models="efficientnet_lite0",
                 methods="msp,energy,mahalanobis", restrict_logits="x-id", stdout=out, stderr=io.StringIO())
    run = EvaluationRun.objects.get()
    assert run.export is None and run.ood_label == "source:val@x-ood" and run.status == "done", run.message
    r = run.results["models"]["efficientnet_lite0"]
    assert r["n_ood"] == 6 and r["n_id_test"] == 6 and r["n_fit"] == 6
    assert set(r["detectors"]["msp"]["classes"]) == set(halves["x-ood"])  # per OOD class, as for an export
    assert r["id_labelled"] == 6  # every ID test image's class is one of the two kept logits
    assert r["restricted_logits"]["classes"] == 2 and "not novelty" in r["restricted_logits"]["note"]
    assert "note: logits restricted to the 2 classes of x-id" in out.getvalue()
    cache = EvalFeatureSet.objects.get(dataset="source:val@x-id")
    assert cache.images == 6
    html = _client("res", "researcher").get(f"/evaluations/{run.pk}/").content.decode()
    assert "Restricted logits:" in html and "source:val@x-ood" in html
    # the random-weight sanity check ran by default on the images of the three sets, labelled as random
    sanity = run.results["sanity"]
    assert sanity["status"] == "done" and sanity["seeds"] == 5 and "RANDOM WEIGHTS" in sanity["weights"]
    assert set(sanity["sets"]) == {"ood"} and set(sanity["sets"]["ood"]["detectors"]) == {"msp", "energy", "mahalanobis"}
    assert sanity["low_level"]["ood"]["n"] == 6 and sanity["low_level"]["id_test"]["jpeg_share"] == 0.0
    assert "Random-weight sanity check" in html and "RANDOM WEIGHTS" in html
    assert "random-weight sanity check (RANDOM WEIGHTS" in out.getvalue()
    # mistakes are one line each
    for kwargs, message in (({"ood": "source:val@nope"}, "names the class set 'nope', which is not registered"),
                            ({"ood": "source:val@x-id"}, "the OOD set source:val@x-id is also the ID test or fit set"),
                            ({"ood": "source:val@x-ood", "restrict_logits": "nope"}, "no ID class set named 'nope'")):
        with pytest.raises(CommandError, match=message):
            call_command("evaluate", **{"id_test": "source:val@x-id", "id_fit": "source:train@x-id", "models": "efficientnet_lite0",
                                        "methods": "msp", **kwargs}, stdout=io.StringIO(), stderr=io.StringIO())
    with pytest.raises(CommandError, match="--export NAME .* or --ood"):
        call_command("evaluate", id_test="source:val@x-id", id_fit="source:train@x-id", stdout=io.StringIO())


def test_shifted_id_sets_give_standard_full_spectrum_and_shift_results(tmp_path, role_groups):
    export = _world(tmp_path)
    w, b, make = _gaussians(5)
    for name, shift in (("same", 0.0), ("far", 6.0)):  # "far": the shift moves the images along dim 10 (a covariate shift)
        x, lg, y = make(200, shift)
        outputs_import(name=name, path=_write_npz(tmp_path / f"{name}.npz", features=x, logits=lg,
                                                  labels=np.array([WNIDS[i] for i in y])), model_name="toy")
    run = evaluation_run_inline(run=evaluation_create(
        export=export, id_test="import:test", id_fit="import:fit", models=["toy"], methods=["mahalanobis", "msp"],
        id_shifted=["import:same", "import:far"], enqueue=False))
    assert run.status == "done", run.message
    r = run.results["models"]["toy"]
    assert r["shifted"]["import:far"]["n"] == 200 and r["shifted"]["import:far"]["accuracy"] > 0.8  # the head ignores dim 10
    maha = r["detectors"]["mahalanobis"]["full_spectrum"]
    assert set(maha) == {"import:same", "import:far", "all shifted sets"}
    # the standard view is the run's pooled result; the shift alone is chance for a copy of the ID
    # distribution and near-perfect separation for the far shift; counting that shift as ID costs AUROC
    assert maha["import:far"]["standard"] == r["detectors"]["mahalanobis"]["pooled"]
    assert 0.4 < maha["import:same"]["shift"]["auroc"] < 0.6 and maha["import:far"]["shift"]["auroc"] > 0.95
    assert maha["import:far"]["full_spectrum"]["auroc"] < maha["import:far"]["standard"]["auroc"] - 0.05
    assert maha["all shifted sets"]["full_spectrum"]["n_id"] == 300 + 400
    # page, CSV, plot
    researcher = _client("res", "researcher")
    html = researcher.get(f"/evaluations/{run.pk}/").content.decode()
    assert "Covariate shift: standard vs full-spectrum" in html and 'data-shifted="import:far"' in html
    assert run.results["plots"]["toy"]["full_spectrum"].endswith("full_spectrum.svg")
    rows = [x for x in evaluation_csv_rows(run) if x["set"] in ("full_spectrum", "shift")]
    assert {(x["detector"], x["set"], x["group"]) for x in rows} >= {("mahalanobis", "full_spectrum", "import:far"),
                                                                      ("msp", "shift", "import:same")}
    with pytest.raises(EvaluationError, match="shifted ID set import:test: it is also the ID test"):
        evaluation_create(export=export, id_test="import:test", id_fit="import:fit", models=["toy"], id_shifted=["import:test"],
                          enqueue=False)


def test_export_page_warns_when_random_networks_separate_the_ood_set(tmp_path, role_groups):
    export = _world(tmp_path)
    run = evaluation_run_inline(run=evaluation_create(export=export, id_test="import:test", id_fit="import:fit", models=["toy"],
                                                      methods=["msp"], enqueue=False))
    # imported outputs carry no images: the check says it was skipped rather than guessing
    assert run.results["sanity"]["status"] == "skipped" and "imported outputs" in run.results["sanity"]["note"]
    researcher = _client("res", "researcher")
    assert "Random-weight sanity check" not in researcher.get("/exports/").content.decode()
    # a later run whose random networks told the OOD set apart (the shape pipelines.evaluation.sanity returns)
    det = {"aurocs": [0.81, 0.79], "mean": 0.8, "std": 0.01}
    run.results = {**run.results, "sanity": {
        "status": "done", "weights": "RANDOM WEIGHTS (sanity check only): resnet18, Kaiming normal, seeds 0..1", "threshold": 0.1,
        "sets": {"ood": {"detectors": {"msp": det, "energy": det}, "off_chance": ["msp", "energy"], "separable": True}},
        "differs": {"ood": ["resolution (megapixels): ID 0.1 vs 0.4"]}, "notes": [], "errors": {}, "n": {"id_test": 2, "ood": 2}}}
    run.save(update_fields=["results"])
    page = researcher.get("/exports/").content.decode()
    assert "Separable by random networks." in page and "2 of\n          2 detectors" in page
    assert "resolution (megapixels): ID 0.1 vs 0.4" in page and f"/evaluations/{run.pk}/" in page
    html = researcher.get(f"/evaluations/{run.pk}/").content.decode()
    assert 'data-sanity-set="ood"' in html and "separable by random networks" in html
    rows = [r for r in evaluation_csv_rows(run) if r["set"] == "sanity_random_weights"]
    assert rows and rows[0]["auroc"] == 0.8 and "RANDOM WEIGHTS" in rows[0]["name"]


def test_models_from_a_file_or_a_pattern_and_the_aupr_convention_reach_results_and_csv(tmp_path, role_groups):
    """--models takes a file of names (or a timm pattern); --aupr-method openood is named on the
    results, the page and in the CSV (issue 32)."""
    from django.core.management.base import CommandError

    export = _world(tmp_path)
    listing = tmp_path / "models.txt"
    listing.write_text("# the imported model\ntoy\n", encoding="utf-8")
    out = io.StringIO()
    call_command("evaluate", export=export.name, id_test="import:test", id_fit="import:fit", models=str(listing), methods="msp",
                 aupr_method="openood", stdout=out)
    run = EvaluationRun.objects.get()
    assert run.model_names == ["toy"]
    conv = run.results["models"]["toy"]["conventions"]
    assert conv["aupr_method"] == "openood" and "OpenOOD" in conv["aupr"]
    assert "AUPR openood" in out.getvalue()
    rows = list(csv.DictReader(io.StringIO(_client("res3", "researcher").get(f"/evaluations/{run.pk}/results.csv").content.decode())))
    assert {r["aupr_method"] for r in rows} == {"openood"}
    page = _client("res4", "researcher").get(f"/evaluations/{run.pk}/").content.decode()
    assert 'data-convention="aupr_method">openood' in page
    with pytest.raises(CommandError, match="matches no registered model and no timm model"):
        call_command("evaluate", export=export.name, id_test="import:test", id_fit="import:fit", models="nosuchnet*", stdout=io.StringIO())


def test_leaderboard_ranks_models_per_detector_on_the_page_and_in_its_csv(tmp_path, role_groups):
    """Issue 32: many models at once; the run page ranks them per detector with AUROC against ID
    accuracy, and leaderboard.csv has the same ranks. (A second model's results are written here
    from the first's, AUROC lowered: the ranking is what is checked.)"""
    from pipelines.evaluation.run import leaderboard

    export = _world(tmp_path)
    call_command("evaluate", export=export.name, id_test="import:test", id_fit="import:fit", models="toy", methods="msp,energy",
                 stdout=io.StringIO())
    run = EvaluationRun.objects.get()
    res = run.results
    other = json.loads(json.dumps(res["models"]["toy"]))
    other["id_accuracy"] = 0.5
    other["detectors"]["msp"]["pooled"]["auroc"] = res["models"]["toy"]["detectors"]["msp"]["pooled"]["auroc"] - 0.1
    other["detectors"]["energy"]["pooled"]["auroc"] = res["models"]["toy"]["detectors"]["energy"]["pooled"]["auroc"] + 0.001
    res["models"]["other"] = other
    EvaluationRun.objects.filter(pk=run.pk).update(results=res)
    board = leaderboard(res)
    msp = next(d for d in board["detectors"] if d["det"] == "msp")
    assert [(x["model"], x["rank"]) for x in msp["rows"]] == [("toy", 1), ("other", 2)]
    energy = next(d for d in board["detectors"] if d["det"] == "energy")
    assert [x["model"] for x in energy["rows"]] == ["other", "toy"]
    assert [m["mean_rank"] for m in board["models"]] == [1.5, 1.5]
    page = _client("res5", "researcher").get(f"/evaluations/{run.pk}/").content.decode()
    assert 'id="leaderboard"' in page and 'data-detector="msp"' in page and "<circle" in page
    rows = list(csv.DictReader(io.StringIO(_client("res6", "researcher").get(f"/evaluations/{run.pk}/leaderboard.csv").content.decode())))
    assert [(r["detector"], r["rank"], r["model"]) for r in rows if r["detector"] == "msp"] == [("msp", "1", "toy"), ("msp", "2", "other")]
    assert _client("ann", "annotator").get(f"/evaluations/{run.pk}/leaderboard.csv").status_code in (302, 403)


def test_admin_choices_are_the_pipelines_constants():
    """The admin form offers exactly the conventions, protocols and decoders the pipelines define
    (as the evaluate command's choices), and each detector's named conventions (issue 32)."""
    from curation.admin.evaluation import EvaluationCreateForm
    from pipelines.evaluation.detectors.ash import TIE_RULES
    from pipelines.evaluation.detectors.odin import GRADIENTS
    from pipelines.evaluation.metrics import AUPR_METHODS, FPR_METHODS, OAA_CONVENTIONS
    from pipelines.evaluation.severity import PROTOCOLS
    from pipelines.features.decode import DECODERS

    form = EvaluationCreateForm()
    values = {name: [c for c, _ in form.fields[name].choices] for name in
              ("fpr_method", "aupr_method", "oaa_convention", "severity_protocol", "decoder", "ash_ties", "odin_gradient")}
    assert values == {"fpr_method": list(FPR_METHODS), "aupr_method": list(AUPR_METHODS), "oaa_convention": list(OAA_CONVENTIONS),
                      "severity_protocol": list(PROTOCOLS), "decoder": ["", *DECODERS], "ash_ties": list(TIE_RULES),
                      "odin_gradient": list(GRADIENTS)}
    # the unit tests' conventions on the export form, as make_unit_tests --convention offers them
    from curation.admin.exports import ExportCreateForm
    from pipelines.export.unit_tests import CONVENTIONS

    field = ExportCreateForm().fields["convention"]
    assert [c for c, _ in field.choices] == list(CONVENTIONS) and field.initial == CONVENTIONS[0]
    # and the corruptions' severities on the covariate-shift form, as make_covariate_shift's
    from curation.admin.sources import CovariateShiftForm
    from pipelines.evaluation.corruptions import CORRUPTIONS, SEVERITIES

    form = CovariateShiftForm()
    assert [c for c, _ in form.fields["corruptions"].choices] == list(CORRUPTIONS)
    assert [c for c, _ in form.fields["severities"].choices] == [str(s) for s in SEVERITIES]


def test_per_layer_outputs_are_planned_for_the_fit_set_too_and_loaded_with_their_widths(tmp_path):
    """The Mahalanobis ensemble needs its layers' pooled maps for the ID fit set as well (input_fit):
    the plan schedules them there, and cached per-layer rows come back with their widths."""
    from curation.services.evaluation import evaluation_plan, load_outputs, resolve_set
    from pipelines.evaluation.detectors.mds_ensemble import mds_key

    src = _id_source(tmp_path, "idtest")
    _id_source(tmp_path, "idfit")
    export = _world(tmp_path)
    run = evaluation_create(export=export, id_test=f"source:{src.name}", id_fit="source:idfit", models=["toy"],
                            methods=["mds_ensemble", "odin"], enqueue=False)
    evaluation_plan(job_id=run.job_id)
    whats = {(c.payload["role"], c.payload["what"]) for c in run.job.chunks.all()}
    key = mds_key(3)
    assert {("id_fit", key), ("id_test", key), ("id_fit", "features")} <= whats
    assert ("id_fit", "odin-px_t2_e1e-05") not in whats  # ODIN's scores are not needed for the fit set
    # a cached set with per-layer rows (one key missing from them) loads as rows, NaN where missing, with the widths
    t = resolve_set(f"source:{src.name}", role="test")
    folder = cache_dir("toy2", t.key, t.version)
    folder.mkdir(parents=True)
    keys = np.array(["a", "b", "c"])
    np.savez(folder / "outputs.npz", features=np.zeros((3, 4), np.float32), logits=np.zeros((3, 2), np.float32), keys=keys,
             wnids=np.array(["", "", ""]), groups=np.array(["", "", ""]))
    np.savez(folder / f"{key}.npz", scores=np.array([[1.0, 2, 3], [4, 5, 6]]), keys=np.array(["c", "a"]), widths=np.array([1, 2]))
    root = cache_dir("toy2", t.key, t.version).parents[2]
    row = EvalFeatureSet.objects.create(model_name="toy2", dataset=t.key, version=t.version, path=str((folder / "outputs.npz").relative_to(root)),
                                        images=3, feature_dim=4, extras={key: str((folder / f"{key}.npz").relative_to(root))})
    out, _, _, _ = load_outputs(row, extras=[key])
    np.testing.assert_array_equal(out.extra[key][[0, 2]], [[4, 5, 6], [1, 2, 3]])
    assert np.isnan(out.extra[key][1]).all() and out.extra[f"{key}:widths"].tolist() == [1, 2]


def _evaluate_argv(*extra, sets=("import:test", "import:fit"), models="toy") -> tuple[int, str]:
    """``manage.py evaluate`` as from the command line (run_from_argv): its exit status and stderr."""
    from django.db import connections

    from curation.management.commands.evaluate import Command

    err = io.StringIO()
    cmd = Command(stdout=io.StringIO(), stderr=err)
    close_all, connections.close_all = connections.close_all, lambda: None  # run_from_argv closes them: the test's transaction
    try:
        cmd.run_from_argv(["manage.py", "evaluate", "--export", "ood", "--id-test", sets[0], "--id-fit", sets[1],
                           "--models", models, *extra])
    except SystemExit as exc:
        return int(exc.code or 0), err.getvalue()
    finally:
        connections.close_all = close_all
    return 0, err.getvalue()


def test_evaluate_refuses_bad_arguments_before_a_run_exists(tmp_path, capsys):
    """Issue 47 rows 5 and 6: an unknown model, an unknown detector, a number out of range or not
    written in digits is one line and exit status 1, and no evaluation run (or job) is left."""
    _world(tmp_path)
    idt, idf = _id_source(tmp_path, "idt"), _id_source(tmp_path, "idf")
    status, err = _evaluate_argv(sets=(f"source:{idt.name}", f"source:{idf.name}"), models="nosuch_model_xyz")
    assert status == 1 and "unknown model 'nosuch_model_xyz'" in err and len(err.strip().splitlines()) == 1, err
    capsys.readouterr()  # the ingests' progress bars
    cases = [
        (("--methods", "msp", "--severity-window", "-1"), "--severity-window must be between 0"),
        (("--methods", "msp", "--severity-window", "٣"), "--severity-window must be a whole number written in digits"),
        (("--methods", "msp", "--seed", "1_000"), "--seed must be a whole number"),
        (("--methods", "msp", "--seed", str(2**32)), "--seed must be between 0 and 4294967295"),
        (("--methods", "msp", "--sanity-seeds", "21"), "--sanity-seeds must be between 0 and 20"),
        (("--methods", "knn", "--knn-k", "0"), "--knn-k: 0 must be between"),
        (("--methods", "knn", "--knn-k", "1.5"), "argument --knn-k: invalid int value: '1.5'"),
        (("--methods", "odin", "--odin-temperature", "nan"), "--odin-temperature must be a finite number"),
        (("--methods", "msp,bogus"), "unknown detector(s) bogus"),
        (("--methods", "msp", "--export", "²"), "no dataset export '²'"),
        (("--methods", "msp", "--export", "ood-v٣"), "no dataset export 'ood-v٣'"),
        (("--methods", "msp", "--fpr-method", "zzz"), "invalid choice: 'zzz'"),
    ]
    for argv, message in cases:
        status, err = _evaluate_argv(*argv)
        err = err + capsys.readouterr().err
        assert status == 1, (argv, status, err)
        assert message in err and len(err.strip().splitlines()) == 1, (argv, err)
    assert EvaluationRun.objects.count() == 0 and not Job.objects.filter(kind=Job.Kind.EVALUATE).exists()


def test_a_detector_failing_inside_a_run_fails_the_run_and_names_it(tmp_path, role_groups, monkeypatch):
    """A detector that raises inside a run marks the run failed as ``partial:`` naming the
    detector and its error; the other detectors' results stand and show; the command exits 1
    with that message. (Issue 47 row 6 was MSP failing on a negative window, the run "done".)"""
    from pipelines.evaluation.detectors import DETECTORS

    export = _world(tmp_path)

    def broken(self, data):
        raise ValueError("need at least one array to concatenate")

    monkeypatch.setattr(DETECTORS["msp"], "score", broken)
    run = evaluation_create(export=export, id_test="import:test", id_fit="import:fit", models=["toy"], methods=["msp", "mahalanobis"],
                            enqueue=False)
    run = evaluation_run_inline(run=run)
    assert run.status == "failed" and run.job.status == "failed", (run.status, run.message)
    assert run.message.startswith("partial: 1 of 2 detector result(s) failed: toy/msp (") and "concatenate" in run.message
    assert run.results["models"]["toy"]["detectors"]["mahalanobis"]["status"] == "ok"  # what was computed stays
    page = _client("res-partial", "researcher").get(f"/evaluations/{run.pk}/").content.decode()
    assert "The run failed:" in page and "toy/msp" in page and "Mahalanobis" in page
    with pytest.raises(CommandError, match=r"failed: partial: 1 of 1 detector result\(s\) failed: toy/msp \(ValueError"):
        call_command("evaluate", export="ood", id_test="import:test", id_fit="import:fit", models="toy", methods="msp", seed="7",
                     stdout=io.StringIO())
    # a negative window (the row's own cause) in a run's record, as an older version could write it,
    # fails every detector it reaches the same way, never "done"
    monkeypatch.undo()
    run = evaluation_create(export=export, id_test="import:test", id_fit="import:fit", models=["toy"], methods=["msp"], enqueue=False)
    bad = {**run.config, "severity_window": -1}
    EvaluationRun.objects.filter(pk=run.pk).update(config=bad)
    Job.objects.filter(pk=run.job_id).update(config=bad)
    run = evaluation_run_inline(run=EvaluationRun.objects.get(pk=run.pk))
    assert run.status == "failed" and "toy/msp (ValueError: need at least one array to concatenate)" in run.message
