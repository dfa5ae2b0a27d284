"""Which temperature a CLIP figure used is on the result page, in the leaderboard and in
results.csv (issue 60): MCM's own code runs energy at T = 1, ImageNet-X's (our default) at 0.01."""
from __future__ import annotations

import csv
import io

import pytest
from django.contrib.auth.models import Group, User
from django.test import Client

from curation.models import EvaluationRun, Job
from pipelines.evaluation.run import detector_info

pytestmark = pytest.mark.django_db


def _entry(auroc: float) -> dict:
    figures = {"auroc": auroc, "aupr_in": 0.5, "aupr_out": 0.5, "fpr95_id_positive": 0.4, "fpr95_ood_positive": 0.4}
    return {"status": "ok", "pooled": {**figures, "n_ood": 6}, "mean_class": figures, "classes": {}, "notes": []}


def _run(method_params: dict) -> EvaluationRun:
    methods = ["clip_mcm", "clip_energy", "clip_maxlogit"]
    models = {m: {"detectors": {d: _entry(a) for d in methods}, "id_accuracy": 0.5, "head_used": {"kind": "zero-shot", "text": "t"}}
              for m, a in (("clip:A:x", 0.7), ("clip:B:y", 0.6))}
    results = {"models": models, "detectors": detector_info(methods, method_params), "class_names": {}}
    return EvaluationRun.objects.create(id_test="source:a", id_fit="source:b", model_names=list(models), methods=methods,
                                        job=Job.objects.create(kind=Job.Kind.EXPORT), status=EvaluationRun.Status.DONE,
                                        results=results)


def _client() -> Client:
    user = User.objects.create_user("temps", password="pw")
    user.groups.add(Group.objects.get(name="researcher"))
    client = Client()
    client.force_login(user)
    return client


def test_each_clip_result_and_the_leaderboard_say_which_temperature(role_groups):
    run = _run({"clip_energy": {"temperature": 1.0}})
    html = _client().get(f"/evaluations/{run.pk}/").content.decode()
    board = html.split('id="leaderboard"')[1].split("</section>")[0]
    for det, setting in (("clip_energy", "temperature=1"), ("clip_mcm", "temperature=1")):
        figure = board.split(f'data-detector="{det}"')[1].split("</figure>")[0]
        assert f'<div class="small muted detector-settings">{setting}</div>' in figure, det
    assert "detector-settings" not in board.split('data-detector="clip_maxlogit"')[1].split("</figure>")[0]  # it has no temperature
    table = html.split('data-model="clip:A:x"')[1]
    assert "temperature=1</div>" in table.split('data-detector="clip_energy"')[1].split("</tr>")[0]


def test_results_csv_has_each_detectors_settings(role_groups):
    run = _run({})
    rows = list(csv.DictReader(io.StringIO(_client().get(f"/evaluations/{run.pk}/results.csv").content.decode())))
    by_detector = {r["detector"]: r["settings"] for r in rows}
    assert by_detector == {"clip_mcm": "temperature=1", "clip_energy": "temperature=0.01", "clip_maxlogit": ""}


def test_leaderboard_csv_has_each_detectors_settings(role_groups):
    run = _run({"clip_energy": {"temperature": 1.0}})
    rows = list(csv.DictReader(io.StringIO(_client().get(f"/evaluations/{run.pk}/leaderboard.csv").content.decode())))
    assert {(r["detector"], r["settings"]) for r in rows} == {("clip_mcm", "temperature=1"), ("clip_energy", "temperature=1"),
                                                              ("clip_maxlogit", "")}
    assert len(rows) == 6  # two models for each of the three detectors
