"""Adjudication and its undo on the test database: a decision through the JSON API, then undo
puts every field of the image's review item back as it was (checked column by column), audited;
undo goes further back one step at a time, refuses an image changed since, and the API answers
bad requests with 4xx."""
from __future__ import annotations

import json

import pytest
from django.forms.models import model_to_dict
from django.test import Client

from curation.models import AuditLog, ReviewItem
from curation.roles import ANNOTATOR, CURATOR
from curation.services.adjudication import NothingToUndo, adjudication_decide, adjudication_undo
from curation.services.review import ReviewError, review_adjudicate, review_cache_clear, review_next, review_settings_save, review_submit
from curation.services.users import user_create_with_role
from tests.review_data import queue_with_rows

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _fresh_caches():
    review_cache_clear()
    yield
    review_cache_clear()


def _user(name, role=ANNOTATOR):
    return user_create_with_role(username=name, password="pw-" + name, role=role)[0]


def _drain(user, decision, wnids=None):
    while held := review_next(user=user):
        review_submit(user=user, assignment_id=held[0].pk, decision=decision, wnids=wnids, note=f"{user.username} says {decision}")


@pytest.fixture
def conflicts(tmp_path):
    source = queue_with_rows(tmp_path, n=4)
    review_settings_save(source=source, reviews_required=2)
    _drain(_user("a"), "ood")
    _drain(_user("b"), "id", ["n02123045"])
    assert ReviewItem.objects.filter(status="conflict").count() == 4
    return list(ReviewItem.objects.filter(status="conflict").order_by("pk"))


def _row(pk):
    return model_to_dict(ReviewItem.objects.get(pk=pk)) | {"decided_at": ReviewItem.objects.get(pk=pk).decided_at}


def test_decide_by_json_then_undo_restores_every_field_and_is_audited(conflicts):
    cur = _user("cur", CURATOR)
    c = Client()
    c.force_login(cur)
    first = conflicts[0]
    before = _row(first.pk)
    r = c.post("/api/adjudicate/decide", json.dumps({"item": first.pk, "decision": "id", "wnids": ["n02123045"], "note": "ear at the left",
                                                       "gold": True}), content_type="application/json")
    assert r.status_code == 200, r.content
    data = r.json()
    assert data["decided"]["decision"] == "id" and data["waiting"] == 3 and data["undoable"] == 1
    assert data["decided"]["classes"][0].startswith("tabby") and data["decided"]["classes"][0].endswith("(n02123045)")
    assert data["item"]["item"] != first.pk and {rv["annotator"] for rv in data["item"]["reviews"]} == {"a", "b"}
    # the reviews come by class name and wnid, with note and time
    b_review = next(rv for rv in data["item"]["reviews"] if rv["annotator"] == "b")
    assert b_review["classes"][0]["wnid"] == "n02123045" and "tabby" in b_review["classes"][0]["label"]
    assert b_review["note"] == "b says id" and b_review["at"]
    after = _row(first.pk)
    assert (after["status"], after["final_decision"], after["final_wnids"], after["final_note"], after["is_gold"], after["decided_by"]) == \
        ("adjudicated", "id", ["n02123045"], "ear at the left", True, cur.pk)

    r = c.post("/api/adjudicate/undo", "{}", content_type="application/json")
    assert r.status_code == 200, r.content
    data = r.json()
    assert data["undone"]["item"] == first.pk and data["item"]["item"] == first.pk and data["waiting"] == 4 and data["undoable"] == 0
    assert _row(first.pk) == before  # every column as it was before the adjudication
    log = AuditLog.objects.get(action="review_adjudication_undone")
    adj = AuditLog.objects.get(action="review_adjudicated")
    assert log.actor == cur and log.data["undoes"] == adj.pk and log.data["undone"]["decision"] == "id"
    assert log.data["restored"]["status"] == "conflict"
    # nothing more to undo
    r = c.post("/api/adjudicate/undo", "{}", content_type="application/json")
    assert r.status_code == 409 and "no adjudication" in r.json()["error"]


def test_undo_steps_back_one_adjudication_at_a_time_and_keeps_other_curators_apart(conflicts):
    cur, other = _user("cur", CURATOR), _user("cur2", CURATOR)
    rows = {it.pk: _row(it.pk) for it in conflicts}
    adjudication_decide(item_id=conflicts[0].pk, decision="ood", user=cur)
    adjudication_decide(item_id=conflicts[1].pk, decision="unclear", note="blurry", user=cur)
    adjudication_decide(item_id=conflicts[2].pk, decision="not_target", user=other)
    assert adjudication_undo(user=cur).pk == conflicts[1].pk
    assert _row(conflicts[1].pk) == rows[conflicts[1].pk] and _row(conflicts[0].pk)["status"] == "adjudicated"
    assert adjudication_undo(user=cur).pk == conflicts[0].pk
    assert _row(conflicts[0].pk) == rows[conflicts[0].pk]
    with pytest.raises(NothingToUndo):
        adjudication_undo(user=cur)
    assert _row(conflicts[2].pk)["final_decision"] == "not_target"  # the other curator's stays


def test_undo_refuses_an_image_changed_since_and_decide_refuses_a_decided_one(conflicts):
    cur, other = _user("cur", CURATOR), _user("cur2", CURATOR)
    adjudication_decide(item_id=conflicts[0].pk, decision="ood", user=cur)
    with pytest.raises(ReviewError, match="no longer waiting"):
        adjudication_decide(item_id=conflicts[0].pk, decision="unclear", user=other)
    review_adjudicate(item_id=conflicts[0].pk, decision="unclear", note="from the browser", user=other)  # e.g. the image browser's label
    with pytest.raises(ReviewError, match=f"image {conflicts[0].image_id} was changed"):
        adjudication_undo(user=cur)
    assert _row(conflicts[0].pk)["final_decision"] == "unclear"


@pytest.mark.parametrize("body", ['{"item": "x", "decision": "ood"}', '{"item": 1}', "[1]", "not json", '{"item": 1, "decision": "ood", "wnids": 5}',
                                  '{"item": 99999999, "decision": "ood"}', '{"item": 1, "decision": "maybe"}', '{"item": 1, "decision": 3}'])
def test_bad_requests_are_4xx(conflicts, body):
    c = Client()
    c.force_login(_user("cur", CURATOR))
    r = c.post("/api/adjudicate/decide", body, content_type="application/json")
    assert 400 <= r.status_code < 500, (body, r.status_code, r.content)
    assert "error" in r.json()


def test_annotators_cannot_adjudicate(conflicts):
    c = Client()
    c.force_login(_user("ann"))
    assert c.post("/api/adjudicate/decide", '{"item": 1, "decision": "ood"}', content_type="application/json").status_code == 403
    assert c.post("/api/adjudicate/undo", "{}", content_type="application/json").status_code == 403
