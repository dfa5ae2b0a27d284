"""Issue 47 row 3 and its audit: every enumerated field a page's form posts (or a query names) is
checked against its choices. A value no form of ours offers is refused with 400 and changes
nothing (no row, no audit line), never read as another choice; every integer and share from a
request goes through the one rule (digits 0-9, in range)."""
from __future__ import annotations

import pytest
from django.test import Client

from curation.models import AuditLog, ClassVisualSignal, ReviewItem, ReviewSettings
from curation.roles import CURATOR
from curation.services.users import user_create_with_role
from tests.review_data import queue_with_rows

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("isolated_roots")]


@pytest.fixture
def pool(tmp_path, role_groups):
    source = queue_with_rows(tmp_path, n=6)
    cc = source.classes.order_by("pk").first()
    signal = ClassVisualSignal.objects.create(candidate_class=cc, model_name="m", n_images=2, top_wnid="n09472597", top_share=0.9,
                                              threshold=0.5, flagged=True, reason="visually_ambiguous_with:n09472597")
    user_create_with_role(username="probe-cur", password="pw", role=CURATOR)
    client = Client()
    client.login(username="probe-cur", password="pw")
    return source, signal, client


def _state(signal) -> tuple:
    signal.refresh_from_db()
    return (signal.resolution, AuditLog.objects.count(), ReviewSettings.objects.count(),
            tuple(ReviewItem.objects.order_by("pk").values_list("status", "final_decision")))


def test_a_class_answer_of_no_known_kind_is_refused_not_taken_as_a_signal(pool):
    """Row 3: kind=zzz with an open signal's id and verdict=accept used to accept the signal."""
    _source, signal, client = pool
    before = _state(signal)
    for form in ({"kind": "zzz", "pk": signal.pk, "verdict": "accept"},
                 {"kind": "", "pk": signal.pk, "verdict": "accept"},
                 {"pk": signal.pk, "verdict": "accept"},
                 {"kind": "signal", "pk": signal.pk, "verdict": "zzz"},
                 {"kind": "signal", "pk": signal.pk},
                 {"kind": "flag", "pk": signal.pk, "verdict": "ACCEPT"}):
        r = client.post("/curate/classes/", form)
        assert r.status_code == 400, (form, r.status_code)
        assert "nothing was recorded" in r.content.decode(), form
        assert _state(signal) == before, form
    # known words in the wrong place: said why, nothing recorded
    for form, why in (({"kind": "signal", "pk": signal.pk, "verdict": "map"}, "accepted or rejected, not map"),
                      ({"kind": "bulk", "classes": signal.candidate_class_id, "verdict": "reject"}, "only accepting is done in bulk")):
        page = client.post("/curate/classes/", form, follow=True).content.decode()
        assert why in page and _state(signal) == before, form
    assert signal.resolution == ""
    # the right kind still works
    r = client.post("/curate/classes/", {"kind": "signal", "pk": signal.pk, "verdict": "accept"})
    assert r.status_code == 302 and _state(signal)[0] == "accept"


def test_enumerated_fields_of_every_page_are_checked_against_their_choices(pool):
    source, signal, client = pool
    image = source.images.order_by("pk").first()
    before = _state(signal)
    posts = [
        ("/curate/images/action", {"action": "zzz", "ids": image.pk}),
        ("/curate/images/action", {"action": "label", "decision": "skip", "ids": image.pk, "label_reason": "x"}),
        ("/curate/images/action", {"action": "label", "decision": "zzz", "ids": image.pk, "label_reason": "x"}),
        (f"/curate/duplicates/{image.pk}/", {"action": "zzz", "image": image.pk}),
        ("/curate/map/", {"source": source.pk, "method": "zzz"}),
        (f"/curate/reviews/source/{source.pk}/", {"order": "zzz", "reviews_required": "1", "gold_rate": "0"}),
        ("/curate/adjudicate/", {"item": ReviewItem.objects.filter(source=source).first().pk, "decision": "zzz"}),
        ("/curate/adjudicate/", {"item": ReviewItem.objects.filter(source=source).first().pk, "decision": "skip"}),
    ]
    for url, form in posts:
        r = client.post(url, form)
        assert r.status_code == 400, (url, form, r.status_code)
        assert _state(signal) == before, (url, form)
    for url in ("/curate/map/?method=zzz", f"/curate/map/{source.pk}/points.json?method=zzz"):
        assert client.get(url).status_code == 400, url


def test_integers_and_shares_from_requests_go_through_the_one_rule(pool):
    source, signal, client = pool
    image = source.images.order_by("pk").first()
    before = _state(signal)
    for raw in ("nan", "inf", "٠.٥", "1_0", "0.5e0", "-0.1", "2", " 0.1"):
        r = client.post(f"/curate/reviews/source/{source.pk}/", {"order": ReviewSettings.Order.values[0], "reviews_required": "1",
                                                                  "gold_rate": raw}, follow=True)
        assert "gold rate must be a number from 0 to 1" in r.content.decode(), raw
        assert _state(signal) == before, raw
    for raw in ("٣", "1_0", "+2", "0", "10"):
        r = client.post(f"/curate/reviews/source/{source.pk}/", {"order": ReviewSettings.Order.values[0], "reviews_required": raw,
                                                                  "gold_rate": "0"}, follow=True)
        assert "reviews required must be" in r.content.decode(), raw
        assert _state(signal) == before, raw
    for url in (f"/curate/images/{image.pk}/?page=²", f"/curate/images/{image.pk}/?page=-1", "/curate/images/?page=1_0"):
        assert client.get(url).status_code == 400, url
    r = client.post("/curate/map/selection", {"ids": f"{image.pk},,{image.pk}"})
    assert r.status_code == 400
    r = client.post("/curate/map/selection", {"ids": f"{image.pk}, {image.pk}"})
    assert r.status_code == 200


def test_the_admin_forms_numbers_follow_the_one_rule():
    """Django's IntegerField takes int()'s text (``٣``, ``1_000``, ``5.0``) and FloatField
    float()'s (``١.٥``, ``1_0``): the admin's forms refuse them; ranges hold."""
    from curation.admin.evaluation import EvaluationCreateForm
    from curation.admin.exports import ExportCreateForm

    seed = EvaluationCreateForm().fields["seed"]
    for bad in ("٣", "1_000", "5.0", "+5", str(2**32), "-1", "9" * 30):
        with pytest.raises(Exception, match="whole number|less than or equal|greater than or equal"):
            seed.clean(bad)
    assert seed.clean("42") == 42 and seed.clean(" 7 ") == 7
    warn = ExportCreateForm().fields["warn_loss"]
    for bad in ("١.٥", "1_0", "nan", "inf", "0x1", "1.5"):
        with pytest.raises(Exception, match="digits 0-9|less than or equal"):
            warn.clean(bad)
    assert warn.clean("0.25") == 0.25 and warn.clean("") is None
    knn = EvaluationCreateForm().fields["knn_k"]
    with pytest.raises(Exception, match="whole number"):
        knn.clean("٣")
    assert knn.clean("10") == 10
