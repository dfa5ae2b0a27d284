"""Plug-ins describe themselves (issue 18): a detector with a parameter, registered in this test
and nowhere else, appears in the evaluate command's flags, the admin form, the run's checks and
the result table; the docs' detector table is the one the declarations give."""
from __future__ import annotations

import io

import numpy as np
import pytest
from django.core.management import call_command

from curation.models import EvaluationRun
from curation.services.evaluation import EvaluationError, evaluation_create, evaluation_run_inline
from pipelines.evaluation.detectors import DETECTORS, Detector, Param, register_detector, softmax
from tests.conftest import REPO
from tests.test_evaluation import _client, _world

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("isolated_roots")]


@pytest.fixture
def sharpened_msp():
    """A detector that exists only for this test: MSP of logits multiplied by ``gain``."""

    @register_detector
    class SharpenedMSP(Detector):
        name = "sharpened_msp"
        label = "Sharpened MSP"
        paper = "this test"
        parameters = (Param("gain", float, 1.0, 0.1, 10.0, help="logit multiplier", source="a guess"),)

        def score(self, data):
            return softmax(data.logits * self.params["gain"]).max(axis=1)

    yield SharpenedMSP
    DETECTORS.pop("sharpened_msp")


def test_a_detector_declared_in_one_place_reaches_the_cli_the_admin_and_the_results(tmp_path, role_groups, sharpened_msp,
                                                                                      django_capture_on_commit_callbacks):
    # the command line: a flag with the declared type, default and help
    from curation.management.commands.evaluate import Command

    parser = Command().create_parser("manage.py", "evaluate")
    action = next(a for a in parser._actions if "--sharpened-msp-gain" in a.option_strings)
    assert action.type is float and "logit multiplier (default 1; a guess)" in action.help
    # the admin form: a field with the declared range
    export = _world(tmp_path)
    researcher = _client("res", "researcher")
    form = researcher.get("/admin/curation/evaluationrun/add/").content.decode()
    assert 'name="sharpened_msp_gain"' in form and "Sharpened MSP: gain" in form
    from curation.admin.evaluation import EvaluationCreateForm

    field = EvaluationCreateForm().fields["sharpened_msp_gain"]
    assert (field.min_value, field.max_value, field.initial, field.required) == (0.1, 10.0, 1.0, False)
    with django_capture_on_commit_callbacks(execute=True):
        resp = researcher.post("/admin/curation/evaluationrun/add/", {
            "export": export.pk, "id_test": "import:test", "id_fit": "import:fit", "other_models": "toy",
            "methods": ["msp", "sharpened_msp"], "sharpened_msp_gain": 3, "seed": 0, "sanity_seeds": 0})
    assert resp.status_code == 302, resp.content.decode()[-3000:]
    run = EvaluationRun.objects.get()
    assert run.config["method_params"]["sharpened_msp"] == {"gain": 3.0}
    # the result table: its label, and the setting it ran with
    page = researcher.get(f"/evaluations/{run.pk}/").content.decode()
    row = page.split('data-detector="sharpened_msp"')[1][:600]
    assert "Sharpened MSP" in row and "gain=3" in row
    assert run.results["models"]["toy"]["detectors"]["sharpened_msp"]["status"] == "ok"
    # the checks: the declared range, named by the flag
    with pytest.raises(EvaluationError, match=r"--sharpened-msp-gain: 50 must be between 0.1 and 10"):
        evaluation_create(export=export, id_test="import:test", id_fit="import:fit", models=["toy"], methods=["sharpened_msp"],
                          params={"sharpened_msp_gain": 50}, enqueue=False)
    with pytest.raises(EvaluationError, match=r"--knn-k: 'many' is not a whole number"):
        evaluation_create(export=export, id_test="import:test", id_fit="import:fit", models=["toy"], methods=["knn"],
                          params={"knn_k": "many"}, enqueue=False)
    # from the command line, the flag sets it
    out = io.StringIO()
    call_command("evaluate", "--export", export.label, "--id-test", "import:test", "--id-fit", "import:fit", "--models", "toy",
                 "--methods", "sharpened_msp", "--sharpened-msp-gain", "0.5", "--sanity-seeds", "0", stdout=out, stderr=io.StringIO())
    last = EvaluationRun.objects.order_by("-pk").first()
    assert last.config["method_params"]["sharpened_msp"] == {"gain": 0.5} and "Sharpened MSP" in out.getvalue()
    gains = {r.pk: r.results["models"]["toy"]["detectors"]["sharpened_msp"]["pooled"]["auroc"] for r in (run, last)}
    assert all(np.isfinite(v) for v in gains.values())


def test_the_docs_detector_table_is_the_declarations():
    from curation.management.commands.detectors import detectors_table

    assert detectors_table() in (REPO / "docs" / "evaluation.md").read_text()


def test_an_evaluation_run_without_parameters_takes_the_declared_defaults(tmp_path):
    export = _world(tmp_path)
    run = evaluation_run_inline(run=evaluation_create(export=export, id_test="import:test", id_fit="import:fit", models=["toy"],
                                                      methods=["knn", "react"], enqueue=False))
    assert run.config["method_params"]["knn"] == {"k": 1000} and run.config["method_params"]["react"] == {"percentile": 99.0}
    assert "vim" not in run.config["method_params"]  # worked out from the data: nothing stored
    assert run.results["detectors"]["knn"]["settings"] == "k=1000"


@pytest.fixture
def flat_layout():
    """A layout that exists only for this test: every image in one folder, with a file list."""
    from pipelines.export.layouts import LAYOUTS, Layout, register_layout, write_list

    @register_layout
    class Flat(Layout):
        name = "flat"
        description = "flat: every image in flat/all/, listed in flat/files.txt"

        def folder(self, item, ctx):
            return "flat/all"

        def write_lists(self, root, placed, subsets, difficulty=None):
            write_list(root / "flat" / "files.txt", (self.inside(p) for p in placed))

    yield Flat
    LAYOUTS.pop("flat")


def test_an_export_layout_declared_in_one_place_reaches_the_cli_the_admin_and_the_export(tmp_path, client, flat_layout):
    from curation.management.commands.export import Command
    from curation.models import Export
    from tests.test_exports import reviewed_pool, user

    parser = Command().create_parser("manage.py", "export")
    action = next(a for a in parser._actions if "--layout" in a.option_strings)
    assert "flat" in action.choices and "every image in flat/all/" in action.help
    from curation.admin.exports import ExportCreateForm

    assert ("flat", flat_layout.description) in ExportCreateForm().fields["layouts"].choices
    source, decided = reviewed_pool(tmp_path, n=15)
    out = io.StringIO()
    call_command("export", name="flat-one", sources=[source.name], layouts=["flat", "ninco"], stdout=out, stderr=io.StringIO())
    export = Export.objects.get(name="flat-one")
    root = tmp_path / "exports" / "flat-one" / "v1"
    listed = (root / "flat" / "files.txt").read_text().split()
    assert export.status == "done" and len(listed) == export.counts["images"] == sum(d == "ood" for d in decided.values())
    assert all((root / "flat" / name).is_file() for name in listed) and (root / "ninco" / "metadata.csv").is_file()
    assert not (root / "openood").exists()
    # the layout's own decisions.csv column and manifest entry, with nothing written for it elsewhere
    import csv
    import json

    with open(root / "decisions.csv", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    assert "flat_file" in rows[0] and "openood_file" not in rows[0]
    assert sorted(r["flat_file"].removeprefix("flat/") for r in rows if r["exported"] == "yes") == sorted(listed)
    assert all(r["flat_file"] == "" for r in rows if r["exported"] == "no")
    entry = json.loads((root / "manifest.json").read_text())["layouts"]["flat"]
    assert entry["description"] == flat_layout.description and entry["decisions_column"] == "flat_file" and entry["places_files"]
    said = io.StringIO()
    call_command("verify_export", str(root), stdout=said, stderr=io.StringIO())  # the manifest counts the new layout's images too
    assert "OK:" in said.getvalue()
    cur = user("cur", "curator", staff=True)
    client.force_login(cur)
    assert client.get(f"/exports/{export.pk}/download.zip?layout=flat").status_code == 200
