"""The class filter as curators use it: the command, the admin (a job on a source, bulk flag
resolution, pinned overrides), the report page; runs persist and re-runs reproduce them."""
from __future__ import annotations

import csv
import io
import json

import pytest
from django.core.management import CommandError, call_command
from django.test import Client

from curation.models import AuditLog, ClassDecision, ClassFilterRun, ClassOverride, Job
from curation.services.class_filter import class_override_pin, class_override_unpin
from curation.services.users import users_create_demo
from tests.conftest import make_image_folder

pytestmark = pytest.mark.django_db

COLUMNS = ["wnid", "name", "decision", "rule", "related_wnid", "related_name", "detail",
           "semantic_similarity", "closest_id_wnid", "path_distance", "flag_strength", "flag_level"]
CANDIDATES = {
    "n07611358": ("remove", "hypernym_of_id"),  # frozen dessert (ice cream is ID)
    "n07824988": ("flag", "gloss_mentions_id"),  # pickle (cucumbers)
    "n04536335": ("flag", "sister_of_id"),  # viola (violin); the gloss also names the violin
    "n09436708": ("keep", ""),  # sky
    "n99999999": ("flag", "not_in_wordnet"),
}


@pytest.fixture
def users():
    users_create_demo()
    return {name: _client(name) for name in ("curator", "researcher", "annotator")}


def _client(name):
    c = Client()
    assert c.login(username=name, password=f"{name}-demo")
    return c


def read_csv(path):
    with open(path, newline="", encoding="utf-8") as fh:
        reader = csv.DictReader(fh)
        return reader.fieldnames, list(reader)


@pytest.fixture
def wnid_file(tmp_path):
    f = tmp_path / "candidates.txt"
    f.write_text("# my candidates\n" + "\n".join(CANDIDATES) + "\n")
    return f


def test_filter_classes_writes_the_csv_and_persists_the_run(wnid_file, tmp_path):
    out, report = tmp_path / "out.csv", tmp_path / "report.md"
    stdout = io.StringIO()
    call_command("filter_classes", candidates=str(wnid_file), out=str(out), report=str(report), stdout=stdout)
    header, rows = read_csv(out)
    assert header == COLUMNS
    assert [r["wnid"] for r in rows] == list(CANDIDATES)
    for r in rows:
        if r["wnid"] == "n04536335":
            assert r["decision"] == "flag" and "sister_of_id" in r["detail"] and "violin.n.01" in r["detail"]
        else:
            assert (r["decision"], r["rule"]) == CANDIDATES[r["wnid"]], r
    frozen = next(r for r in rows if r["wnid"] == "n07611358")
    assert frozen["related_wnid"] == "n07614500" and frozen["related_name"] == "ice cream"
    assert "ice_cream.n.01 -> frozen_dessert.n.01" in frozen["detail"]
    assert "keep 1   flag 3 (2 strong, 1 weak)   remove 1" in stdout.getvalue()
    run = ClassFilterRun.objects.get()
    assert run.job.status == "done" and run.job.progress == run.job.total == 5
    assert run.policy_name == "imagenet-ood" and len(run.id_wnids) == 1000 and run.wordnet_sha1
    assert run.decisions.count() == 5
    text = report.read_text()
    assert "| gloss_mentions_id | flag |" in text and "## Flagged, strongest first (3)" in text and "pickle" in text


def test_rerun_with_the_same_policy_reproduces_the_csv_exactly(wnid_file, tmp_path):
    call_command("filter_classes", candidates=str(wnid_file), out=str(tmp_path / "a.csv"), policy="cood", stdout=io.StringIO())
    call_command("filter_classes", candidates=str(wnid_file), out=str(tmp_path / "b.csv"), policy="cood", stdout=io.StringIO())
    assert (tmp_path / "a.csv").read_bytes() == (tmp_path / "b.csv").read_bytes()
    a, b = ClassFilterRun.objects.order_by("pk")
    assert a.policy_digest == b.policy_digest and a.counts == b.counts


def test_bad_inputs_are_command_errors_that_say_what_to_fix(tmp_path):
    out = str(tmp_path / "o.csv")
    with pytest.raises(CommandError, match="unknown class list"):
        call_command("filter_classes", candidates="imagenet-99k", out=out)
    with pytest.raises(CommandError, match="no source named 'nope'"):
        call_command("filter_classes", candidates="source:nope", out=out)
    bad = tmp_path / "policy.yaml"
    bad.write_text("rules:\n  organism: sometimes\n")
    with pytest.raises(CommandError, match=r"policy.yaml: rules.organism.severity is 'sometimes'"):
        call_command("filter_classes", candidates="imagenet-21k", policy=str(bad), out=out)
    ids = tmp_path / "ids.txt"
    ids.write_text("n02084071\nn99999999\n")
    with pytest.raises(CommandError, match="not WordNet 3.0 nouns: n99999999"):
        call_command("filter_classes", candidates="imagenet-21k", id_spec=str(ids), out=out)
    assert not ClassFilterRun.objects.exists() and not Job.objects.exists()


def test_overrides_win_are_audited_apply_to_stored_runs_and_survive_reruns(wnid_file, tmp_path, users):
    from django.contrib.auth.models import User

    curator = User.objects.get(username="curator")
    call_command("filter_classes", candidates=str(wnid_file), out=str(tmp_path / "1.csv"), stdout=io.StringIO())
    class_override_pin(wnid="n09436708", action="deny", note="planes everywhere", user=curator)
    sky = ClassDecision.objects.get(wnid="n09436708")
    assert (sky.decision, sky.rule, sky.rule_decision) == ("remove", "override_deny", "keep")
    assert "pinned by curator (planes everywhere)" in sky.detail
    log = AuditLog.objects.get(action="class_override_deny")
    assert log.actor == curator and log.data["decisions_updated"] == 1

    call_command("filter_classes", candidates=str(wnid_file), out=str(tmp_path / "2.csv"), stdout=io.StringIO())
    rows = {r["wnid"]: r for r in read_csv(tmp_path / "2.csv")[1]}
    assert (rows["n09436708"]["decision"], rows["n09436708"]["rule"]) == ("remove", "override_deny")
    assert rows["n09436708"]["related_wnid"] == ""

    assert class_override_unpin(wnid="n09436708", user=curator) == 2
    assert set(ClassDecision.objects.filter(wnid="n09436708").values_list("decision", "rule")) == {("keep", "")}
    assert AuditLog.objects.filter(action="class_override_removed").exists()


def _source(tmp_path):
    from curation.services.ingest import ingest_run_inline, ingest_start
    from curation.services.sources import source_register

    root = tmp_path / "pool"
    # folders named by wnid, one by lemma, one that maps to nothing
    make_image_folder(root, n_good=12, classes=["n09436708", "n07614500", "n07824988", "hayfield", "mystery-stuff", "n04536335"])
    reg = source_register(name="pool", root=root)
    ingest_run_inline(job=ingest_start(source=reg.source, enqueue=False))
    return reg.source


def _admin_action(client, url, action, ids, **data):
    return client.post(url, {"action": action, "_selected_action": [str(i) for i in ids], "apply": "1", **data}, follow=True)


def test_admin_runs_the_filter_on_a_source_and_curators_resolve_flags(tmp_path, users, django_capture_on_commit_callbacks):
    source = _source(tmp_path)
    with django_capture_on_commit_callbacks(execute=True):  # the job is queued on commit (eager Celery here)
        r = _admin_action(users["curator"], "/admin/curation/source/", "run_class_filter", [source.pk],
                      policy="imagenet-ood", policy_text="extends: imagenet-ood\nrules:\n  too_few_images: {min_images: 2}\n")
    assert r.status_code == 200 and b"Class filter job" in r.content
    run = ClassFilterRun.objects.get()
    assert run.source == source and run.job.status == "done" and run.candidates_spec == "source:pool"
    assert run.created_by.username == "curator" and run.policy["rules"]["too_few_images"]["min_images"] == 2
    by_folder = {d.key: d for d in run.decisions.select_related("candidate_class")}
    assert set(by_folder) == {"n09436708", "n07614500", "n07824988", "hayfield", "mystery-stuff", "n04536335"}
    assert by_folder["n07614500"].decision == "remove" and by_folder["n07614500"].rule == "id_class"
    assert by_folder["n09436708"].decision == "keep" and by_folder["n09436708"].n_images == 2
    assert by_folder["hayfield"].rule == "gloss_mentions_id" and by_folder["hayfield"].wnid == "n08570634"
    assert by_folder["mystery-stuff"].rule == "not_in_wordnet"
    assert all(d.candidate_class and d.candidate_class.folder == d.key for d in by_folder.values())

    # the admin's list, filtered by decision and rule
    r = users["curator"].get(f"/admin/curation/classdecision/?run__id__exact={run.pk}&decision__exact=flag&rule__exact=gloss_mentions_id")
    assert r.status_code == 200 and b"3 class decisions" in r.content
    assert b"hayfield" in r.content and b"pickle" in r.content and b"mystery-stuff" not in r.content

    # bulk: keep the viola and the pickle folder with a note; the sky (not a flag) is left alone
    ids = [by_folder[k].pk for k in ("n04536335", "n07824988", "n09436708")]
    r = _admin_action(users["curator"], "/admin/curation/classdecision/", "resolve_keep", ids, note="instrument, not a violin")
    assert b"2 flagged class(es) resolved: keep; 1 not flagged, left alone" in r.content
    viola = ClassDecision.objects.get(pk=by_folder["n04536335"].pk)
    assert (viola.decision, viola.resolution, viola.rule_decision) == ("keep", "keep", "flag")
    assert viola.resolved_by.username == "curator" and "instrument, not a violin" in viola.detail
    assert AuditLog.objects.filter(action="class_flag_keep").count() == 2

    # a re-run carries the resolutions over (same rules, same paths) and reproduces the rest
    with django_capture_on_commit_callbacks(execute=True):
        r = _admin_action(users["curator"], "/admin/curation/source/", "run_class_filter", [source.pk],
                      policy="imagenet-ood", policy_text="extends: imagenet-ood\nrules:\n  too_few_images: {min_images: 2}\n")
    run2 = ClassFilterRun.objects.exclude(pk=run.pk).get()
    again = {d.key: d for d in run2.decisions.all()}
    assert again["n04536335"].decision == "keep" and again["n04536335"].resolution_from_id == viola.pk
    assert [(d.key, d.decision, d.rule) for d in run.decisions.order_by("position")] == \
        [(d.key, d.decision, d.rule) for d in run2.decisions.order_by("position")]

    # pin an override from the decisions list: it wins in both runs
    r = _admin_action(users["curator"], "/admin/curation/classdecision/", "pin_deny", [by_folder["n09436708"].pk], note="planes")
    assert b"1 override(s) pinned: deny" in r.content
    assert set(ClassDecision.objects.filter(wnid="n09436708").values_list("decision", "rule")) == {("remove", "override_deny")}
    assert ClassOverride.objects.get().created_by.username == "curator"


def test_report_page_and_csv_for_curators_and_researchers_not_annotators(tmp_path, users, wnid_file):
    call_command("filter_classes", candidates=str(wnid_file), out=str(tmp_path / "o.csv"), stdout=io.StringIO())
    run = ClassFilterRun.objects.get()
    for who in ("curator", "researcher"):
        r = users[who].get(f"/class-filter/{run.pk}/")
        assert r.status_code == 200
        html = r.content.decode()
        assert "keep 1" in html and "flag 3" in html and "remove 1" in html
        assert "gloss mentions &#x27;cucumber&#x27;" in html and "hypernym_of_id" in html
        r = users[who].get(f"/class-filter/{run.pk}/decisions.csv")
        body = b"".join(r.streaming_content).decode()
        assert r.status_code == 200 and body.replace("\r\n", "\n") == (tmp_path / "o.csv").read_text().replace("\r\n", "\n")
    assert users["annotator"].get(f"/class-filter/{run.pk}/").status_code == 403
    assert users["annotator"].get(f"/class-filter/{run.pk}/decisions.csv").status_code == 403
    assert Client().get(f"/class-filter/{run.pk}/").status_code == 302
    home = users["curator"].get("/").content.decode()
    assert f'href="/class-filter/{run.pk}/"' in home


def test_researchers_cannot_run_resolve_or_pin(tmp_path, users):
    source = _source(tmp_path)
    _admin_action(users["researcher"], "/admin/curation/source/", "run_class_filter", [source.pk], policy="imagenet-ood")
    assert not ClassFilterRun.objects.exists()
    call_command("filter_classes", candidates="source:pool", out=str(tmp_path / "o.csv"), stdout=io.StringIO())
    flag = ClassDecision.objects.filter(decision="flag").first()
    _admin_action(users["researcher"], "/admin/curation/classdecision/", "resolve_remove", [flag.pk], note="x")
    _admin_action(users["researcher"], "/admin/curation/classdecision/", "pin_allow", [flag.pk], note="x")
    flag.refresh_from_db()
    assert flag.resolution == "" and not ClassOverride.objects.exists()
    r = users["researcher"].post("/admin/curation/classoverride/add/", {"wnid": "n09436708", "action": "deny", "note": ""})
    assert r.status_code == 403 and not ClassOverride.objects.exists()


def test_overrides_added_in_the_admin_are_validated(users):
    r = users["curator"].post("/admin/curation/classoverride/add/", {"wnid": "n99999999", "action": "deny", "note": ""})
    assert r.status_code == 200 and b"not a WordNet 3.0 noun id" in r.content
    r = users["curator"].post("/admin/curation/classoverride/add/", {"wnid": "n09436708", "action": "deny", "note": "planes"}, follow=True)
    assert r.status_code == 200
    o = ClassOverride.objects.get()
    assert (o.wnid, o.name, o.action, o.created_by.username) == ("n09436708", "sky", "deny", "curator")
    assert AuditLog.objects.filter(action="class_override_deny", actor__username="curator").exists()


def test_flags_rank_by_strength_and_image_evidence_recomputes_it(tmp_path, users):
    from curation.models import Image, ImageEmbedding
    from curation.services.class_filter import class_filter_refresh_source, class_filter_run_inline, class_filter_start

    source = _source(tmp_path)
    run = class_filter_run_inline(run=class_filter_start(candidates_spec="source:pool", enqueue=False))
    rows = {d.key: d for d in run.decisions.all()}
    viola, pickle, ice_cream, sky = rows["n04536335"], rows["n07824988"], rows["n07614500"], rows["n09436708"]
    # WordNet alone: the viola (gloss names the violin, sister of the violin) and the pickle (gloss: cucumbers) are strong
    assert (viola.flag_level, pickle.flag_level) == ("strong", "strong")
    assert viola.closest_id_wnid == "n04536866" and 0.8 < viola.semantic_similarity < 0.9 and viola.path_distance == 2
    assert "n04536866" in viola.evidence_wnids and "n02992211" in viola.evidence_wnids  # violin and its ID sister, the cello
    assert ice_cream.flag_strength is None and ice_cream.flag_level == "" and ice_cream.semantic_similarity == 1.0
    assert sky.rule == "too_few_images" and sky.flag_level == "weak"  # two images: a flag that says nothing of contamination

    # images arrive: the model calls every viola image a violin or cello, and no pickle image anything near a cucumber
    def predict(folder, topk):
        for image in Image.objects.filter(candidate_class__folder=folder, status="ok"):
            ImageEmbedding.objects.create(image=image, model_name="m", topk=[[w, 0.1] for w in topk], top1_wnid=topk[0])

    predict("n04536335", ["n02992211", "n04536866", "n03272010"])
    predict("n07824988", ["n07714571", "n07697537", "n07753592"])
    assert class_filter_refresh_source(source=source) == 2  # viola and pickle; hayfield has no predictions: unchanged
    viola2, pickle2 = ClassDecision.objects.get(pk=viola.pk), ClassDecision.objects.get(pk=pickle.pk)
    assert (viola2.image_top1_share, viola2.image_top5_share, viola2.evidence_model) == (1.0, 1.0, "m")
    assert viola2.flag_strength > viola.flag_strength and viola2.flag_level == "strong"
    assert pickle2.image_top5_share == 0.0 and pickle2.flag_strength < pickle.flag_strength and pickle2.flag_level == "weak"

    # the report lists strong flags first, ranked, and weak ones collapsed; the CSV carries the columns
    html = users["curator"].get(f"/class-filter/{run.pk}/").content.decode()
    strong_part, weak_part = html.split('id="weak-flags"')
    assert strong_part.index(">viola<") < strong_part.index(">hayfield<")
    assert ">pickle<" in weak_part and "images: top-1 1.00, top-5 1.00" in strong_part
    body = b"".join(users["curator"].get(f"/class-filter/{run.pk}/decisions.csv").streaming_content).decode()
    header, *lines = body.splitlines()
    assert header.endswith("semantic_similarity,closest_id_wnid,path_distance,flag_strength,flag_level")
    viola_line = next(x for x in lines if x.startswith("n04536335,"))
    assert viola_line.endswith(f",n04536866,2,{viola2.flag_strength:.4f},strong")
    # the admin sorts by strength and filters by level
    r = users["curator"].get(f"/admin/curation/classdecision/?run__id__exact={run.pk}&flag_level__exact=weak")
    assert r.status_code == 200 and b"pickle" in r.content and b"viola" not in r.content


def test_semantic_split_command_and_admin_write_the_lists_and_register_the_halves(tmp_path, users):
    from curation.models import IdClassSet

    out = tmp_path / "x"
    stdout = io.StringIO()
    call_command("semantic_split", id_spec="imagenet-1k", out=str(out), register="imagenet-x", stdout=stdout)
    text = stdout.getvalue()
    assert "500 ID / 500 OOD classes under 558 parents" in text and "213 of them are split across the sides" in text
    ids = (out / "id_classes.txt").read_text().split()
    oods = (out / "ood_classes.txt").read_text().split()
    assert len(ids) == len(oods) == 500 and ids[0] == "n01440764" and oods[0] == "n01443537"
    with open(out / "parents.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == 1000 and rows[0] == {"parent_wnid": "n01439121", "parent_name": "cyprinid", "child_wnid": "n01440764",
                                             "child_name": "tench, Tinca tinca", "side": "id"}
    summary = json.loads((out / "summary.json").read_text())
    assert summary["parents"] == 558 and summary["single_child_parents"] == 345
    assert summary["parent_choices"]["n03773504"]["parent"] == "n04565375"  # missile -> weapon, ImageNet's choice
    assert IdClassSet.objects.get(name="imagenet-x-id").wnids == ids and len(IdClassSet.objects.get(name="imagenet-x-ood").wnids) == 500
    # the halves are ID class sets the class filter can use
    call_command("filter_classes", candidates=str(tmp_path / "x" / "ood_classes.txt"), id_spec="imagenet-x-id",
                 out=str(tmp_path / "d.csv"), stdout=io.StringIO())
    assert ClassFilterRun.objects.get().id_spec == "imagenet-x-id"

    for kwargs, message in (({"out": str(out)}, "the folder is not empty"),
                            ({"out": str(tmp_path / "y"), "id_spec": str(tmp_path / "none.txt")}, "no such file"),
                            ({"out": str(tmp_path / "z"), "register": "../up"}, "split name '../up' is not allowed")):
        with pytest.raises(CommandError, match=message):
            call_command("semantic_split", **kwargs)

    # the image lists of an ID source's two halves (tench: ID class 0 of the split; goldfish: OOD)
    from PIL import Image as PILImage

    from tests.review_data import ingest

    for wnid in ("n01440764", "n01443537"):
        (tmp_path / "val" / wnid).mkdir(parents=True)
        PILImage.new("RGB", (40, 30), (200, 10, 10) if wnid == "n01440764" else (10, 10, 200)).save(tmp_path / "val" / wnid / "a.png")
    ingest("val", tmp_path / "val", role="id")
    stdout = io.StringIO()
    call_command("semantic_split", out=str(tmp_path / "xi"), images="val", register="xi", stdout=stdout)
    assert (tmp_path / "xi" / "images_id.txt").read_text() == "n01440764/a.png 0\n"
    assert (tmp_path / "xi" / "images_ood.txt").read_text() == "n01443537/a.png -1\n"
    assert "evaluate --ood source:val@xi-ood --id-test source:val@xi-id" in stdout.getvalue()
    with pytest.raises(CommandError, match="--images nope: not an ID reference source"):
        call_command("semantic_split", out=str(tmp_path / "xj"), images="nope")

    # from the admin: split a registered set with a seed
    source_set = IdClassSet.objects.get(name="imagenet-x-id")
    r = _admin_action(users["curator"], "/admin/curation/idclassset/", "semantic_split", [source_set.pk], name="x-half", seed="3")
    assert r.status_code == 200 and b"250 ID / 250 OOD classes" in r.content
    assert len(IdClassSet.objects.get(name="x-half-id").wnids) == 250
    assert AuditLog.objects.filter(action="semantic_split_created").count() == 3  # two commands, one admin action
