"""What issue 38's probes found, each as the behaviour a user would notice, and the two rules
that fix them at their root: one for integers from a URL or form, one for comma lists in
commands. The expectations are written from the rules (ASCII digits, 64-bit row ids, no empty
list items), not by calling the helpers under test."""
from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.utils import timezone

from curation.models import AuditLog, Job
from tests.test_exports import user
from tests.test_security import cli, one_line_error

pytestmark = [pytest.mark.django_db]

UNICODE_DIGITS = ["²", "٣", "３", "¹²", "߁", "𝟗"]  # superscript, Arabic-Indic, full-width, NKo, maths bold
NOT_IDS = UNICODE_DIGITS + [str(2**63), str(2**64 + 1), "9" * 40, "-1", "0", "+5", " 5", "5 ", "1_000", "1e3", "0x10", "5.0", "", "\x00"]


# -- the rules themselves ----------------------------------------------------------------------------


@pytest.mark.parametrize("raw", NOT_IDS)
def test_row_ids_are_ascii_digits_below_2_63(raw):
    from pipelines.numbers import row_id

    with pytest.raises(ValueError, match="what"):
        row_id(raw, "what")


@pytest.mark.parametrize("raw,value", [("1", 1), ("007", 7), (str(2**63 - 1), 2**63 - 1), (42, 42)])
def test_row_ids_accepted(raw, value):
    from pipelines.numbers import row_id

    assert row_id(raw, "id") == value


def test_whole_numbers_take_a_minus_only_where_allowed():
    from pipelines.numbers import whole_number

    assert whole_number("-3", "n") == -3
    for raw in ("-3", "²", True, 1.0, str(2**63)):
        with pytest.raises(ValueError):
            whole_number(raw, "n", lo=0)


@pytest.mark.parametrize("text", ["1,,2", "1,2,", ",1", " , ", "a, ,b"])
def test_comma_lists_refuse_empty_items(text):
    from pipelines.numbers import comma_list

    with pytest.raises(ValueError, match="is empty"):
        comma_list(text, "--x")


def test_comma_lists_strip_their_items():
    from pipelines.numbers import comma_list

    assert comma_list(" a , b,c ", "--x") == ["a", "b", "c"]
    assert comma_list("", "--x") == [] and comma_list(None, "--x") == []


# -- the findings ----------------------------------------------------------------------------------


@pytest.mark.parametrize("after", UNICODE_DIGITS + [str(2**63), "-1", "1.5", "\x00"])
def test_duplicate_groups_page_refuses_a_non_id_cursor_with_400(client, role_groups, after):
    """Was a 500 for `?after=²`: str.isdigit() accepts digits that int() refuses."""
    client.force_login(user("cur", "curator", staff=True))
    r = client.get("/curate/duplicates/", {"after": after})
    assert r.status_code == 400, (after, r.status_code)
    assert ("NUL character" if after == "\x00" else "is not a group id") in r.content.decode()


@pytest.mark.parametrize("path_id", [str(2**63), str(2**64), "9" * 30])
def test_path_ids_beyond_64_bits_are_404_not_500(client, role_groups, path_id):
    """Was a 500 for /curate/duplicates/9223372036854775808/ (bigint out of range on PostgreSQL,
    OverflowError on SQLite): every <int:...> in a path follows the 64-bit rule."""
    client.force_login(user("cur", "curator", staff=True))
    for url in (f"/curate/duplicates/{path_id}/", f"/curate/images/{path_id}/", f"/images/{path_id}/thumb",
                f"/evaluations/{path_id}/", f"/exports/{path_id}/download.zip", f"/curate/contamination/{path_id}/"):
        assert client.get(url).status_code == 404, url
    assert client.post(f"/curate/duplicates/{path_id}/", {"action": "clear", "image": "1"}).status_code == 404


def test_contamination_page_refuses_bad_numbers_instead_of_guessing(client, role_groups, tmp_path, isolated_roots):
    from tests.test_exports import reviewed_pool

    source, _ = reviewed_pool(tmp_path, n=4, answer=lambda img: ("ood", []))
    client.force_login(user("cur", "curator", staff=True))
    for query in ({"sample": "٣"}, {"seed": "-1"}, {"sample": "1e3"}, {"seed": str(2**40)}):
        r = client.get(f"/curate/contamination/{source.pk}/", query)
        assert r.status_code == 400, query
    assert client.get(f"/curate/contamination/{source.pk}/", {"sample": "3", "seed": "7"}).status_code == 200


def test_make_covariate_shift_refuses_an_empty_severity_with_one_line(tmp_path):
    """Was exit 0 with the empty item skipped, where `0`, `6`, `-1`, `a` and `3.5` were refused."""
    proc = cli("make_covariate_shift", "--from", "source:nothing", "--out", str(tmp_path / "out"), "--severities", "1,,2",
               data_dir=tmp_path / "data")
    one_line_error(proc, "--severities", "'1,,2'", "item 2 is empty")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("flag,value", [("--severities", "1,2,"), ("--severities", "٣"), ("--corruptions", "gaussian_noise,,fog")])
def test_make_covariate_shift_comma_lists(tmp_path, flag, value):
    with pytest.raises(CommandError) as exc:
        call_command("make_covariate_shift", "--from", "source:nothing", "--out", str(tmp_path / "out"), flag, value)
    assert "\n" not in str(exc.value)


@pytest.mark.parametrize("command,args", [
    ("evaluate", ["--export", "x", "--id-test", "source:a", "--id-fit", "source:b", "--models", "efficientnet_lite0,,resnet18"]),
    ("evaluate", ["--export", "x", "--id-test", "source:a", "--id-fit", "source:b", "--methods", "msp,"]),
    ("export", ["--name", "x", "--source", "s", "--classes", "n01440764,,n01443537"]),
    ("make_unit_tests", ["--out", "OUT", "--tests", "black,,white"]),
])
def test_every_commands_comma_list_refuses_empty_items(tmp_path, command, args):
    args = [str(tmp_path / "out") if a == "OUT" else a for a in args]
    with pytest.raises(CommandError, match="is empty"):
        call_command(command, *args)


def _stale_job(kind: str) -> Job:
    old = timezone.now() - timedelta(hours=1)
    job = Job.objects.create(kind=kind, status=Job.Status.RUNNING, total=1)
    Job.objects.filter(pk=job.pk).update(created_at=old, started_at=old, heartbeat_at=old)
    return job


@pytest.mark.parametrize("kind,allowed,refused", [
    ("export", "curator", "researcher"), ("extract", "curator", "researcher"), ("unit_tests", "curator", "researcher"),
    ("evaluate", "researcher", "curator"),
])
def test_admin_resume_needs_the_role_whose_work_the_job_is(client, role_groups, kind, allowed, refused):
    """Was: any staff user could resume any job (a researcher resumed a stale export)."""
    job = _stale_job(kind)
    client.force_login(user(refused, refused, staff=True))
    r = client.post("/admin/curation/job/", {"action": "resume_jobs", "_selected_action": [job.pk]}, follow=True)
    assert r.status_code == 200
    assert f"needs the {allowed} role" in r.content.decode()
    assert not AuditLog.objects.filter(action="job_resumed", target_id=str(job.pk)).exists()
    assert Job.objects.get(pk=job.pk).heartbeat_at == job.created_at or Job.objects.get(pk=job.pk).heartbeat_at < timezone.now() - timedelta(minutes=30)

    client.force_login(user(allowed, allowed, staff=True))
    r = client.post("/admin/curation/job/", {"action": "resume_jobs", "_selected_action": [job.pk]}, follow=True)
    assert r.status_code == 200 and "needs the" not in r.content.decode()
    assert AuditLog.objects.filter(action="job_resumed", target_id=str(job.pk)).exists()


@pytest.mark.parametrize("error,status", [("db", 503), ("redis", 503), ("kombu", 503), ("bug", 500)])
def test_an_outage_of_the_database_or_redis_is_a_503_with_retry_after(error, status):
    """A page whose database or broker is restarting answers 503 with Retry-After (the review
    screen and browsers retry), in JSON on the API; a bug is still the 500 it is."""
    import sys
    import types

    import kombu.exceptions
    import redis
    from django.db import OperationalError
    from django.test import Client, override_settings
    from django.urls import path

    def view(request):
        if error == "db":
            raise OperationalError("connection to server at \"127.0.0.1\", port 5432 failed: Connection refused")
        if error == "redis":
            raise redis.exceptions.ConnectionError("Error 111 connecting to 127.0.0.1:6379. Connection refused.")
        if error == "kombu":
            try:
                raise redis.exceptions.ConnectionError("refused")
            except redis.exceptions.ConnectionError as exc:
                raise kombu.exceptions.OperationalError("broker") from exc
        raise ZeroDivisionError("a bug")

    module = types.ModuleType(f"tests.outage_urls_{error}")
    module.urlpatterns = [path("api/x", view), path("page/", view)]
    module.handler500 = "labeling_ui.http.server_error"
    sys.modules[module.__name__] = module
    client = Client(raise_request_exception=False)
    with override_settings(ROOT_URLCONF=module.__name__):
        api, page = client.get("/api/x"), client.get("/page/")
    assert api.status_code == page.status_code == status
    if status == 503:
        assert api["Retry-After"] == page["Retry-After"] == "15"
        assert api.json()["retry_after"] == 15 and "try again" in api.json()["error"]
        assert "try again in 15 s" in page.content.decode()


@pytest.mark.parametrize("outage", [True, False])
def test_a_job_step_hit_by_an_outage_is_not_failed(monkeypatch, outage):
    """PostgreSQL or Redis restarting under a job: the step raises, but the job is not marked
    failed (the worker's task retries it when the service is back, or it is resumed once
    stale); a real error still fails the job."""
    from django.db import OperationalError

    from curation.jobs import runner
    from curation.jobs.protocol import JobKind

    failed = []

    def plan(job_id):
        raise OperationalError("server closed the connection unexpectedly") if outage else ValueError("a bug")

    kind = JobKind(kind="ingest", label="ingest", plan=plan, process=lambda *a, **k: True, finalize=lambda job_id: None,
                   fail=lambda job_id, error: failed.append(error), queue=lambda step: "cpu")
    monkeypatch.setattr(runner, "kind_of", lambda name: kind)
    job = Job.objects.create(kind="ingest", status=Job.Status.RUNNING)
    with pytest.raises(OperationalError if outage else ValueError):
        runner.run_step(job_id=job.pk, step="plan", queue_next=False)
    assert bool(failed) is not outage


@pytest.mark.parametrize("error", ["postgres", "redis", "bug"])
def test_the_worker_task_retries_a_step_hit_by_an_outage_in_itself(monkeypatch, error):
    """The task tries the step again until the service is back, without the broker (a retry
    message could not be published while Redis is down, and Celery would drop the task); a bug
    is raised at once, and an outage that lasts too long ends the task (the job turns stale)."""
    import kombu.exceptions
    from django.db import OperationalError

    from curation import tasks
    from curation.jobs import runner

    calls = []
    outage = {"postgres": OperationalError("could not connect to server: Connection refused"),
              "redis": kombu.exceptions.OperationalError("Error 111 connecting to 127.0.0.1:6379. Connection refused."),
              "bug": ValueError("a bug")}[error]

    def flaky(**kwargs):
        calls.append(kwargs)
        if len(calls) < 3:
            raise outage
        return [0, 1]

    monkeypatch.setattr(runner, "run_step", flaky)
    monkeypatch.setattr(tasks, "OUTAGE_RETRY_S", 0)
    task = tasks.TASKS[("ingest", "plan")]
    if error == "bug":
        with pytest.raises(ValueError):
            task.apply(args=(1,), throw=True)
        assert len(calls) == 1
        return
    assert task.apply(args=(1,), throw=True).get() == 2 and len(calls) == 3
    calls.clear()
    monkeypatch.setattr(tasks, "OUTAGE_GIVE_UP_S", 0)
    with pytest.raises(type(outage)):
        task.apply(args=(1,), throw=True)
    assert len(calls) == 1


@pytest.mark.parametrize("url,query", [("/curate/images/", {"source": "a\x00b"}), ("/curate/duplicates/", {"source": "\x00"}),
                                       ("/curate/images/", {"model": "x\x00"})])
def test_a_nul_character_anywhere_is_400_not_500(client, role_groups, url, query):
    """Found by the route fuzzer: PostgreSQL refuses NUL in any string ("A string literal cannot
    contain NUL"), so a NUL in a query, form or JSON body was a 500."""
    client.force_login(user("cur", "curator", staff=True))
    assert client.get(url, query).status_code == 400
    assert client.post("/curate/images/action", {"action": "exclude", "ids": "1", "reason": "a\x00"}).status_code == 400
    assert client.post("/api/review/submit", '{"note": "\\u0000"}', content_type="application/json").status_code == 400


def test_a_form_posted_to_a_json_api_is_400_not_500(client, role_groups):
    """Found by the route fuzzer once every form was checked for NUL: a multipart form posted to
    the review API left its raw body unreadable for the view (RawPostDataException: 500)."""
    client.force_login(user("ann", "annotator"))
    r = client.post("/api/review/submit", {"assignment": "1", "decision": "ood"})  # multipart, not JSON
    assert r.status_code == 400 and "not JSON" in r.json()["error"]
