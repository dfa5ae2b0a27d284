"""The route fuzzer (issue 38): every URL the resolver knows, as every role (anonymous,
annotator, researcher, curator, staff) and with GET and POST, is sent hostile values drawn by
Hypothesis: Unicode digits, 2**63, negative and empty numbers, overlong text, NUL, forged page
cursors, path traversal, malformed JSON. For each request:

- never a 5xx (the test client re-raises what a view raised, so the traceback shows);
- the role rules: anonymous users reach nothing but the public pages; a user lacking the role a
  page declares (``role_required``) gets 401/403 (or 404/405), never the page; non-staff users
  are sent to the admin's login;
- a refused request (4xx, or a user refused by role) changes nothing in the database (every
  table but the session store, compared row by row on PostgreSQL).

A new route is fuzzed without anyone writing a test for it: the routes come from the resolver.
Budget: OODC_FUZZ_EXAMPLES examples per app route (default 2) and OODC_FUZZ_ADMIN_EXAMPLES per
admin route (default 1), each example sending every role x method once, plus a sweep of
must-try values over the names each view reads."""
from __future__ import annotations

import json
import os
import string
from dataclasses import dataclass
from urllib.parse import quote

import pytest
from django.contrib.auth.models import Group, User
from django.db import connection
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from curation.models import Export, Image, Source
from curation.roles import ANNOTATOR, CURATOR, RESEARCHER

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("isolated_roots")]

APP_EXAMPLES = int(os.environ.get("OODC_FUZZ_EXAMPLES", "2"))
ADMIN_EXAMPLES = int(os.environ.get("OODC_FUZZ_ADMIN_EXAMPLES", "1"))
ROLES = ("anonymous", "annotator", "researcher", "curator", "staff")
PUBLIC = {"accounts/login/", "accounts/logout/", "healthz", "admin/login/", "admin/logout/"}

# -- hostile values -------------------------------------------------------------------------------
BIG = [str(2**63), str(2**63 - 1), str(2**64 + 1), "9" * 40, "-1", "-" + str(2**63 + 1), "0"]
UNICODE_DIGITS = ["²", "٣", "３", "𝟗", "¹²³", "߁"]
ODD = ["", " ", "\x00", "%00", "a" * 5000, "../../../etc/passwd", "..%2f..%2fetc", "/etc/passwd", "NaN", "Infinity", "-Infinity",
       "1e999", "1.5", "0x10", "1_000", "+5", " 7 ", "1,,2", ",", "\r\nSet-Cookie: x=1", "<script>alert(1)</script>", "' OR 1=1 --",
       "=HYPERLINK(\"x\")", "ｎ01440764", "n0144076４", "null", "true", "[]", "{}"]
CURSORS = ["~", "~1", "1~", "nan~1", "inf~" + str(2**63), "0.5~" + str(2**63), "0.5~-1", "0.5~²", "x~y", "1e999~5", "~" + "9" * 30,
           "0.5~1~2"]
SCALARS = BIG + UNICODE_DIGITS + ODD + CURSORS
hostile = st.one_of(st.sampled_from(SCALARS), st.text(max_size=40), st.integers(min_value=-(2**70), max_value=2**70).map(str))

# names the views read (query strings, forms, JSON bodies): the fuzzer sends these with hostile values
QUERY_NAMES = ["after", "page", "source", "cls", "status", "label", "top1", "group", "export", "dropped", "excluded", "sim_min",
               "sim_max", "msp_min", "msp_max", "sort", "model", "sample", "seed", "q", "decision", "rule", "level", "layout", "next",
               "id__in", "o", "p", "e", "_changelist_filters", "liveness", "method", "size", "ids", "state", "change", "format", "focus",
               "reason", "kind"]
FORM_NAMES = ["ids", "item", "pk", "image", "action", "decision", "wnids", "note", "reason", "next", "kind", "verdict",
              "reviews_required", "gold_rate", "group_classes", "group_classes_shown", "order", "wnid", "description", "gold",
              "_selected_action", "index", "select_across", "post", "name", "root", "role", "username", "password",
              # the newest forms (issue 47): certification, flagged classes, the map and its selection
              "classes", "confirm", "strata", "full_top", "confidence", "target", "pilot", "method", "score", "seed", "source", "back",
              "label_reason", "build"]
JSON_NAMES = ["assignment", "decision", "wnids", "note", "seconds", "have", "progress", "items", "assignments", "page", "decisions",
              "size", "marks", "item", "gold"]
MALFORMED_JSON = ["{", "\x00\xff", "[1,", "NaN", "Infinity", "[]", "1", '"x"', "null", '{"a":' * 200, '{"assignment": 1e999}',
                  '{"assignment": NaN}', '{"assignment": ' + str(2**63) + "}", '{"assignment": -1}', '{"assignment": "٣"}',
                  '{"seconds": 1e999, "assignment": 1}', '{"wnids": [' + ",".join(['"n01440764"'] * 1000) + "]}",
                  '{"items": [{"assignment": "²"}], "decisions": [{"assignment": 18446744073709551617, "decision": "ood"}]}']


def json_body(draw) -> str:
    if draw(st.booleans()):
        return draw(st.sampled_from(MALFORMED_JSON))
    value = st.one_of(hostile, st.integers(min_value=-(2**70), max_value=2**70), st.floats(allow_nan=False, allow_infinity=False),
                      st.lists(st.one_of(hostile, st.integers(min_value=-(2**70), max_value=2**70)), max_size=4), st.none(),
                      st.booleans())
    return json.dumps(draw(st.dictionaries(st.sampled_from(JSON_NAMES), value, max_size=5)))


# -- routes -----------------------------------------------------------------------------------------


@dataclass
class Route:
    pattern: str
    converters: dict
    callback: object

    @property
    def admin(self) -> bool:
        return self.pattern.startswith("admin/")

    @property
    def roles(self) -> tuple | None:
        return getattr(self.callback, "roles", None)


def all_routes() -> list[Route]:
    out: list[Route] = []

    def walk(patterns, prefix, converters):
        for p in patterns:
            conv = {**converters, **getattr(p.pattern, "converters", {})}
            if isinstance(p, URLResolver):
                walk(p.url_patterns, prefix + str(p.pattern), conv)
            elif isinstance(p, URLPattern):
                out.append(Route(prefix + str(p.pattern), conv, p.callback))

    walk(get_resolver().url_patterns, "", {})
    return out


ROUTES = all_routes()


def path_value(draw, name: str, converter, real_ids: dict) -> str:
    kind = type(converter).__name__
    if kind == "IntConverter":
        return draw(st.sampled_from([str(2**63), str(2**63 - 1), "0", "9" * 25, str(2**64), real_ids.get(name, "1")]))
    raw = draw(st.one_of(hostile, st.sampled_from(["1", "thumb", "screen", "zip", "tar.gz", real_ids.get(name, "1")])))
    safe = "/" if kind == "PathConverter" else ""
    return quote(raw, safe=safe) or "x"


def build_path(draw, route: Route, real_ids: dict) -> str:
    import re

    def sub(m):
        name = m.group(2)
        return path_value(draw, name, route.converters[name], real_ids)

    def regex_group(m):  # re_path routes (the admin's app index and catch-all)
        words = m.group(2).split("|")
        if all(re.fullmatch(r"\w+", w) for w in words):
            return draw(st.sampled_from(words))
        return quote(draw(hostile), safe="/")

    path = re.sub(r"\(\?P<(\w+)>([^)]*)\)", regex_group, route.pattern).replace("^", "").replace("$", "")
    return "/" + re.sub(r"<(?:(\w+):)?(\w+)>", sub, path)


# -- the database before and after --------------------------------------------------------------


_last_fingerprint: list = []  # [(the transaction and its write count, the fingerprint then)]


def fingerprint() -> dict:
    """Every table but the session store, row by row (an md5 of each table's rows on PostgreSQL).
    Taken before and after each of thousands of requests, it is read again only when this
    transaction has written a row since the last one (PostgreSQL counts the rows each transaction
    inserts, updates and deletes, rolled-back ones included, in pg_stat_xact_user_tables):
    otherwise the tables are as they were, and so is their fingerprint."""
    with connection.cursor() as cur:
        writes = None
        if connection.vendor == "postgresql":
            cur.execute("SELECT txid_current(), coalesce(sum(n_tup_ins + n_tup_upd + n_tup_del), 0) FROM pg_stat_xact_user_tables "
                        "WHERE relname <> 'django_session'")
            writes = tuple(cur.fetchone())
            if _last_fingerprint and _last_fingerprint[0][0] == writes:
                return dict(_last_fingerprint[0][1])
        tables = [t for t in connection.introspection.table_names() if t not in ("django_session",)]
        if connection.vendor == "postgresql":
            parts = [f"(SELECT md5(coalesce(string_agg(t::text, '|' ORDER BY t::text), '')) FROM \"{t}\" t)" for t in tables]
        else:
            parts = [f"(SELECT count(*) FROM \"{t}\")" for t in tables]
        cur.execute("SELECT " + ", ".join(parts))
        found = dict(zip(tables, cur.fetchone()))
    if writes is not None:
        _last_fingerprint[:] = [(writes, found)]
    return dict(found)


# -- the data the routes are fuzzed against ----------------------------------------------------------


@pytest.fixture
def world(tmp_path, role_groups):
    """A small installation: a reviewed candidate source, an ID source, an export, and one user
    per role (staff: a superuser)."""
    from tests.test_exports import reviewed_pool, run_export

    source, _ = reviewed_pool(tmp_path, n=6, answer=lambda img: ("ood", []))
    run_export("--name", "fuzzed", "--source", source.name)
    users = {}
    for role in ROLES[1:]:
        u = User.objects.create(username=f"fz-{role}", is_staff=role in ("researcher", "curator", "staff"), is_superuser=role == "staff")
        if role != "staff":
            u.groups.add(Group.objects.get(name=role))
        users[role] = u
    image = Image.objects.filter(source=source).order_by("pk").first()
    export = Export.objects.order_by("pk").first()
    ids = {"image_id": str(image.pk), "source_id": str(source.pk), "export_id": str(export.pk if export else 1), "run_id": "1",
           "object_id": str(image.pk)}
    return users, ids


def expected_refusal(route: Route, role: str) -> bool:
    """Whether the role rules refuse ``role`` on ``route`` whatever is sent."""
    if route.pattern in PUBLIC:
        return False
    if role == "anonymous":
        return True
    if route.admin:
        return role == "annotator"  # not staff
    wanted = route.roles
    if wanted is None or role == "staff":
        return False
    held = {"annotator": {ANNOTATOR}, "researcher": {RESEARCHER}, "curator": {CURATOR}}[role]
    return not (held & set(wanted))


def check_one(client: Client, route: Route, role: str, method: str, url: str, query: dict, body):
    before = fingerprint()
    if method == "GET":
        r = client.get(url, query)
    elif isinstance(body, str):
        r = client.post(url + "?" + "&".join(f"{quote(k)}={quote(str(v))}" for k, v in query.items()), body,
                        content_type="application/json")
    else:
        r = client.post(url, body)
    where = f"{method} {url} as {role} (query {query!r:.200}, body {body!r:.300})"
    assert r.status_code < 500, f"{r.status_code} for {where}"
    refused = expected_refusal(route, role)
    if refused:
        if route.admin or role == "anonymous":
            ok = r.status_code in (401, 403, 404, 405) or (r.status_code == 302 and "login" in r.get("Location", ""))
        else:
            ok = r.status_code in (401, 403, 404, 405)
        assert ok, f"the role rules let {role} through: {r.status_code} for {where}"
    if refused or r.status_code >= 400:
        assert fingerprint() == before, f"a refused request ({r.status_code}) changed the database: {where}"
    return r


MUST = ["²", "٣", str(2**63), "-1", "\x00", "0.5~" + str(2**63)]  # every name the view reads gets each


class ReadNames:
    """The query and form names a view reads, recorded from QueryDict look-ups during a request."""

    def __init__(self):
        self.names: set[str] = set()

    def __enter__(self):
        from django.http import QueryDict

        self.saved = {m: getattr(QueryDict, m) for m in ("get", "getlist", "__getitem__", "__contains__")}
        for method, original in self.saved.items():
            def recording(qd, key, *args, _original=original, **kwargs):
                if isinstance(key, str):
                    self.names.add(key)
                return _original(qd, key, *args, **kwargs)

            setattr(QueryDict, method, recording)
        return self

    def __exit__(self, *exc):
        from django.http import QueryDict

        for method, original in self.saved.items():
            setattr(QueryDict, method, original)


def sweep_read_names(route: Route, users: dict, ids: dict) -> None:
    """Deterministic part: the names the route's view reads (as staff, GET and POST with every
    known name present) each get every value of MUST, as staff and as the route's own role."""
    import re

    url = "/" + re.sub(r"<(?:(\w+):)?(\w+)>", lambda m: ids.get(m.group(2), "1"), route.pattern)
    url = re.sub(r"\(\?P<(\w+)>([^)]*)\)", lambda m: m.group(2).split("|")[0] if "|" in m.group(2) else "x", url)
    url = url.replace("^", "").replace("$", "")
    client = Client()
    client.force_login(users["staff"])
    with ReadNames() as read_get:
        client.get(url, {n: "1" for n in QUERY_NAMES})
    with ReadNames() as read_post:
        posted = client.post(url, {n: "1" for n in FORM_NAMES if n not in ("action", "_selected_action")})
    get_names = sorted(read_get.names - {"csrfmiddlewaretoken"})
    post_names = sorted(read_post.names - {"csrfmiddlewaretoken", "action"}) if posted.status_code != 405 else []
    for conv_name, conv in route.converters.items():  # each path integer past 64 bits
        if type(conv).__name__ == "IntConverter":
            big = "/" + re.sub(r"<(?:(\w+):)?(\w+)>", lambda m: str(2**63) if m.group(2) == conv_name else ids.get(m.group(2), "1"),
                               route.pattern)
            for method in ("GET", "POST"):
                check_one(client, route, "staff", method, big, {}, {})
    for method, names in (("GET", get_names), ("POST", post_names)):
        for name in names:
            for value in MUST:
                if method == "GET":
                    check_one(client, route, "staff", "GET", url, {name: value}, {})
                else:
                    check_one(client, route, "staff", "POST", url, {}, {name: value})


def fuzz_route(route: Route, users: dict, ids: dict, examples: int) -> None:
    if not route.admin:
        sweep_read_names(route, users, ids)

    @settings(max_examples=examples, deadline=None, database=None, derandomize=True, print_blob=False,
              suppress_health_check=list(HealthCheck))
    @given(st.data())
    def run(data):
        url = build_path(data.draw, route, ids)
        query = data.draw(st.dictionaries(st.sampled_from(QUERY_NAMES), hostile, max_size=4), label="query")
        if data.draw(st.booleans(), label="json"):
            body = json_body(data.draw)
        else:
            body = data.draw(st.dictionaries(st.sampled_from(FORM_NAMES), st.one_of(hostile, st.lists(hostile, max_size=3)), max_size=5),
                             label="form")
        for role in ROLES:
            client = Client()
            if role != "anonymous":
                client.force_login(users[role])
            for method in ("GET", "POST"):
                check_one(client, route, role, method, url, query, body)

    run()


def test_the_resolver_is_walked_whole():
    patterns = {r.pattern for r in ROUTES}
    assert "curate/duplicates/<int:image_id>/" in patterns and "api/review/submit" in patterns
    assert any(r.admin for r in ROUTES) and len(ROUTES) > 100
    role_checked = [r.pattern for r in ROUTES if r.roles]
    assert "api/review/submit" in role_checked and "curate/images/" in role_checked


@pytest.mark.parametrize("route", [r for r in ROUTES if not r.admin], ids=lambda r: r.pattern or "home")
def test_app_route_survives_hostile_values_for_every_role(route, world):
    users, ids = world
    fuzz_route(route, users, ids, APP_EXAMPLES)


def test_admin_routes_survive_hostile_values_for_every_role(world):
    """Every admin route (Django's admin plus our model admins' actions and forms), on a smaller
    budget, in one test (one data set for all of them)."""
    users, ids = world
    failures = []
    for route in (r for r in ROUTES if r.admin):
        try:
            fuzz_route(route, users, ids, ADMIN_EXAMPLES)
        except Exception as exc:  # collect them all: one line each
            failures.append(f"{route.pattern}: {str(exc).splitlines()[0][:400]}")
    assert not failures, "\n".join(failures)


def test_the_fuzzer_catches_what_it_is_for(world):
    """The checks fail on a 500, on a role leak and on a refused request that wrote: each is
    planted in turn on a one-route URLconf and sent through the fuzzer's own check."""
    import sys
    import types

    from django.http import HttpResponse
    from django.test import override_settings
    from django.urls import path

    users, _ids = world

    def boom(request):
        raise ZeroDivisionError("planted")

    def leak(request):
        return HttpResponse("ok")

    def writes_then_refuses(request):
        Source.objects.create(name="planted", root="/tmp/planted")
        return HttpResponse("no", status=400)

    for view, role, message in ((boom, "curator", "planted"), (leak, "anonymous", "the role rules let"),
                                (writes_then_refuses, "curator", "changed the database")):
        module = types.ModuleType(f"tests.fuzz_planted_{view.__name__}")
        module.urlpatterns = [path("planted/", view)]
        sys.modules[module.__name__] = module
        client = Client()
        if role != "anonymous":
            client.force_login(users[role])
        with override_settings(ROOT_URLCONF=module.__name__), pytest.raises(Exception, match=message):
            check_one(client, Route("planted/", {}, view), role, "GET", "/planted/", {}, {})


def test_hostile_values_hold_what_the_issue_lists():
    text = "".join(SCALARS)
    assert "²" in text and str(2**63) in text and "-1" in SCALARS and "" in SCALARS and "\x00" in SCALARS
    assert any(len(v) >= 5000 for v in SCALARS) and any("~" in v for v in CURSORS) and "{" in MALFORMED_JSON
    assert set(string.digits) <= set(text)


# -- the newest routes' forms, field by field (issue 47) -------------------------------------------------

# (url, method, role, a valid request, {enumerated field: its choices}, [integer fields], ours): each
# enumerated field gets values outside its choices and each integer field hostile numbers, the
# others staying valid. Never a 5xx, and a refused request writes nothing; on the views of
# this toolkit's labeling_ui pages (``ours``) a value outside the choices is a 400 (a value of
# no form is not read as another choice: kind=zzz was taken as a signal, issue 47 row 3).
NOT_CHOICES = ["zzz", "", "\x00", " accept", "ACCEPT", "a" * 300, "²"]
NOT_NUMBERS = MUST + ["1_0", "1.5", "", " ", "9" * 25, "0", "1,,2", "NaN"]
BLANK_IS_DEFAULT = {("/curate/map/", "method")}  # (url prefix, field): an empty method is the map's default, umap


def form_cases(ids: dict) -> list[tuple]:
    from curation.models import CertificationPlan, ReviewSettings
    from labeling_ui.browse_views import DUPLICATE_ACTIONS, IMAGE_ACTIONS, LABEL_DECISIONS
    from labeling_ui.review_views import CLASS_KINDS, CLASS_VERDICTS
    from pipelines.features.embedding_map import METHODS

    image, source, signal = ids["image_id"], ids["source_id"], ids["signal_id"]
    return [
        ("/curate/classes/", "POST", "curator", {"kind": "signal", "pk": signal, "verdict": "accept"},
         {"kind": CLASS_KINDS, "verdict": CLASS_VERDICTS}, ["pk", "classes"], True),
        ("/curate/classes/", "POST", "curator", {"kind": "bulk", "classes": signal, "verdict": "accept"}, {}, ["classes"], True),
        (f"/curate/certify/{source}/", "POST", "curator",
         {"strata": "4", "full_top": "0", "confidence": "0.95", "target": "0.5", "pilot": "5", "method": "betting",
          "score": CertificationPlan.Score.values[0], "seed": "1"},
         {"method": ("betting",), "score": tuple(CertificationPlan.Score.values)}, ["strata", "pilot", "seed"], False),
        ("/review/grid/", "GET", "annotator", {"size": "48"}, {}, ["size"], False),
        ("/api/review/grid/next", "GET", "annotator", {"size": "48"}, {}, ["size"], False),
        ("/curate/map/", "POST", "curator", {"source": source, "method": "umap"}, {"method": METHODS}, ["source"], True),
        ("/curate/map/", "GET", "curator", {"source": source, "method": "umap"}, {"method": METHODS}, ["source"], True),
        (f"/curate/map/{source}/points.json", "GET", "curator", {"method": "umap"}, {"method": METHODS}, [], True),
        ("/curate/map/selection", "POST", "curator", {"ids": image}, {}, ["ids"], True),
        ("/api/images/thumbs", "GET", "curator", {"ids": image}, {}, ["ids"], True),
        ("/curate/images/action", "POST", "curator", {"action": "requeue", "ids": image}, {"action": IMAGE_ACTIONS}, ["ids"], True),
        ("/curate/images/action", "POST", "curator", {"action": "label", "ids": image, "decision": "ood", "label_reason": "x"},
         {"decision": LABEL_DECISIONS}, ["ids"], True),
        (f"/curate/duplicates/{image}/", "POST", "curator", {"action": "clear", "image": image}, {"action": DUPLICATE_ACTIONS},
         ["image"], True),
        (f"/curate/reviews/source/{source}/", "POST", "curator", {"order": ReviewSettings.Order.values[0], "reviews_required": "1",
                                                                  "gold_rate": "0"},
         {"order": tuple(ReviewSettings.Order.values)}, ["reviews_required"], True),
        (f"/curate/images/{image}/", "GET", "curator", {"page": "2"}, {}, ["page"], True),
        ("/curate/images/", "GET", "curator", {"page": "1"}, {}, ["page"], True),
    ]


def test_the_newest_forms_hold_field_by_field(world):
    users, ids = world
    from curation.models import ClassVisualSignal, Image

    cc = Image.objects.get(pk=ids["image_id"]).candidate_class
    signal = ClassVisualSignal.objects.create(candidate_class=cc, model_name="m", n_images=2, top_wnid="n09472597", top_share=0.9,
                                              threshold=0.5, flagged=True, reason="visually_ambiguous_with:n09472597")
    ids = {**ids, "signal_id": str(signal.pk)}
    wrong = []
    for url, method, role, valid, enums, integers, ours in form_cases(ids):
        client = Client()
        client.force_login(users[role])
        route = Route(url.lstrip("/"), {}, None)
        cases = [(name, value) for name, choices in enums.items() for value in NOT_CHOICES
                 if value not in choices and not (value == "" and any(url.startswith(u) and name == n for u, n in BLANK_IS_DEFAULT))]
        cases += [(name, value) for name in integers for value in NOT_NUMBERS]
        for name, value in cases:
            data = {**valid, name: value}
            r = check_one(client, route, role, method, url, data if method == "GET" else {}, data if method == "POST" else {})
            if ours and name in enums and r.status_code != 400:
                wrong.append(f"{method} {url} {name}={value!r}: {r.status_code}, not 400")
    assert not wrong, "\n".join(wrong[:20])
