"""The review queue as annotators and curators use it, on the test database (PostgreSQL under
scripts/test.sh): building the queue, collision-free leasing under concurrency, idempotent
submissions, undo, multi-review, adjudication, gold, the statistics and the HTTP API's rules."""
from __future__ import annotations

import io
import json
import random
import re
import threading
from datetime import timedelta

import numpy as np
import pytest
from django.core.management import call_command
from django.db import connection
from django.db.models import Count
from django.test import Client
from django.utils import timezone
from PIL import Image as PILImage

from curation import selectors
from curation.models import AnnotatorScope, Assignment, AuditLog, ClassVisualSignal, ImageEmbedding, Review, ReviewItem, ReviewSettings
from curation.roles import ANNOTATOR, CURATOR, RESEARCHER
from curation.services.review import (
    NothingToUndo,
    ReviewError,
    class_signal_resolve,
    review_adjudicate,
    review_cache_clear,
    review_items_set_gold,
    review_next,
    review_queue_sync,
    review_reclaim_expired,
    review_settings_save,
    review_submit,
    review_undo,
)
from curation.services.users import user_create_with_role
from fixtures.images import awkward_images, write
from tests.review_data import FAKE_TOP5, ingest, queue_with_rows, write_candidates

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _fresh_caches():
    review_cache_clear()  # per-process caches (gold rates, ID examples) must not leak between tests
    yield
    review_cache_clear()


def _user(name, role=ANNOTATOR):
    return user_create_with_role(username=name, password="pw-" + name, role=role)[0]


def _client(user):
    c = Client()
    c.force_login(user)
    return c


def _drain(user, decision="ood", wnids=None):
    """Review everything the queue gives ``user``; returns the item ids they decided."""
    seen = []
    while True:
        held = review_next(user=user)
        if not held:
            return seen
        review_submit(user=user, assignment_id=held[0].pk, decision=decision, wnids=wnids)
        seen.append(held[0].item_id)


# -- building the queue ------------------------------------------------------------------------------

def test_queue_holds_only_what_the_automatic_stages_kept_and_is_idempotent(tmp_path):
    call_command("set_id_classes", "imagenet-1k", stdout=io.StringIO())
    write_candidates(tmp_path / "pool", 12, classes=("n09308572", "n02123159", "n08570634"))  # iceberg keep, tiger cat remove, hayfield flag
    write(tmp_path / "pool" / "n09308572" / "broken.jpg", b"\xff\xd8\xff\xe0 cut short")
    source = ingest("pool", tmp_path / "pool")
    with pytest.raises(ReviewError, match="run_image_pipeline --sources pool"):
        review_queue_sync(source=source)
    from tests.review_data import fake_predictions

    fake_predictions(source)
    dropped = ImageEmbedding.objects.filter(image__relative_path="n09308572/img_0003.jpg").update(drop_reason="near_duplicate_of:1")
    assert dropped == 1
    (tmp_path / "policy.yaml").write_text("extends: imagenet-ood\nrules: {too_few_images: off}\n")
    call_command("filter_classes", candidates="source:pool", policy=str(tmp_path / "policy.yaml"), out=str(tmp_path / "d.csv"), stdout=io.StringIO())
    report = review_queue_sync(source=source)
    queued = set(ReviewItem.objects.values_list("image__relative_path", flat=True))
    assert queued == {f"n09308572/img_{i:04d}.jpg" for i in (0, 6, 9)}  # 3 of iceberg's 4, the near-duplicate left out
    assert report.excluded["class_removed"] == 4 and report.excluded["class_flagged"] == 4
    assert report.excluded["dropped_by_duplicate_search"] == 1 and report.excluded["broken_or_duplicate_file"] == 1
    # closest to an ID image first (the default order)
    order = list(ReviewItem.objects.order_by("priority").values_list("image__embeddings__nearest_id_similarity", flat=True))
    assert order == sorted(order, reverse=True)
    again = review_queue_sync(source=source)
    assert again.created == 0 and ReviewItem.objects.count() == 3
    # a curator rejects the iceberg class on the class screen: its open images leave the queue
    sig = ClassVisualSignal.objects.create(candidate_class=source.classes.get(folder="n09308572"), model_name="m", n_images=3,
                                           top_wnid="n09472597", top_share=0.9, threshold=0.5, flagged=True, reason="visually_ambiguous_with:n09472597")
    class_signal_resolve(signal_id=sig.pk, resolution="reject", note="all volcano-like")
    assert review_queue_sync(source=source).withdrawn == 3
    assert not review_next(user=_user("ann"))
    assert AuditLog.objects.filter(action="class_signal_reject").exists()


def test_settings_apply_to_the_open_queue(tmp_path):
    source = queue_with_rows(tmp_path, n=6)
    review_settings_save(source=source, reviews_required=2, order="random")
    assert set(ReviewItem.objects.values_list("required", flat=True)) == {2}
    pri = list(ReviewItem.objects.order_by("image_id").values_list("priority", flat=True))
    review_queue_sync(source=source)
    assert list(ReviewItem.objects.order_by("image_id").values_list("priority", flat=True)) == pri  # stable, not reshuffled
    cls = source.classes.get(folder="n09308572")
    review_settings_save(source=source, candidate_class=cls, reviews_required=3)
    assert set(ReviewItem.objects.filter(candidate_class=cls).values_list("required", flat=True)) == {3}
    with pytest.raises(ReviewError, match="between 1 and 9"):
        review_settings_save(source=source, reviews_required=0)


def test_classes_come_in_runs_unless_the_source_turns_it_off(tmp_path, settings):
    """9 images over 3 classes (image k in class k mod 3, similarity to ID rising with k): the
    plain "closest to ID first" order switches class at every image; in runs of 2 each class
    gives two images in a row, classes taking turns by their most similar image."""
    settings.REVIEW_CLASS_RUN = 2
    source = queue_with_rows(tmp_path, n=9)
    for e in ImageEmbedding.objects.filter(image__source=source).select_related("image"):  # img_000k.jpg: class k mod 3
        e.nearest_id_similarity = 0.2 + 0.01 * int(re.search(r"img_(\d+)", e.image.relative_path).group(1))
        e.save(update_fields=["nearest_id_similarity"])
    review_queue_sync(source=source)
    folder = dict(ReviewItem.objects.values_list("pk", "candidate_class__folder"))
    by_similarity = [pk for pk, _s in sorted(ReviewItem.objects.values_list("pk", "image__embeddings__nearest_id_similarity"),
                                             key=lambda x: -x[1])]

    def served() -> list[str]:
        return [folder[pk] for pk in ReviewItem.objects.order_by("priority", "id").values_list("pk", flat=True)]

    def runs(classes: list[str]) -> list[int]:
        out = [1]
        for a, b in zip(classes, classes[1:]):
            out[-1:] = [out[-1] + 1] if a == b else [out[-1], 1]
        return out

    assert ReviewSettings.objects.filter(source=source).first() is None  # the default: in runs
    assert runs(served()) == [2, 2, 2, 1, 1, 1]  # three classes of three: a run of 2 each, then the rest
    first = served()[0]
    assert first == folder[by_similarity[0]]  # the class of the most similar image goes first
    review_settings_save(source=source, group_classes=False)
    assert served() == [folder[pk] for pk in by_similarity]  # plain order: most similar first
    assert runs(served()) == [1] * 9


# -- leasing -----------------------------------------------------------------------------------------

def test_leases_are_disjoint_resumable_and_expire(tmp_path, settings):
    queue_with_rows(tmp_path, n=6)
    a, b = _user("a"), _user("b")
    held_a = review_next(user=a)
    held_b = review_next(user=b)
    assert len(held_a) == len(held_b) == 2 and not {x.item_id for x in held_a} & {x.item_id for x in held_b}
    # a closed browser loses nothing: the same images come back, in the same order
    assert [x.pk for x in review_next(user=a)] == [x.pk for x in held_a]
    # b walks away; once the lease expires, the images go to someone else
    Assignment.objects.filter(annotator=b).update(expires_at=timezone.now() - timedelta(seconds=1))
    assert review_reclaim_expired(force=True) == 2
    assert set(ReviewItem.objects.filter(pk__in=[x.item_id for x in held_b]).values_list("leased", flat=True)) == {0}
    c = _user("c")
    taken = set(_drain(c))
    assert {x.item_id for x in held_b} <= taken and not taken & {x.item_id for x in held_a}
    # a decision on an expired lease still counts
    late = review_submit(user=b, assignment_id=held_b[0].pk, decision="ood")
    assert not late.replay and Review.objects.filter(annotator=b).count() == 1


def test_multi_review_never_gives_an_annotator_the_same_image_twice(tmp_path):
    source = queue_with_rows(tmp_path, n=5)
    review_settings_save(source=source, reviews_required=2)
    a, b, c = _user("a"), _user("b"), _user("c")
    assert len(_drain(a)) == 5
    assert len(_drain(b, decision="id", wnids=["n02123045"])) == 5
    assert _drain(c) == []  # every image has its two reviews
    assert Review.objects.count() == 10 and set(ReviewItem.objects.values_list("status", flat=True)) == {"conflict"}
    assert not Review.objects.values("item", "annotator").annotate(n=Count("id")).filter(n__gt=1).exists()


@pytest.mark.django_db(transaction=True)  # real commits: the threads see each other
@pytest.mark.skipif(connection.vendor != "postgresql", reason="row locks need PostgreSQL (scripts/test.sh provides it)")
def test_concurrent_annotators_never_collide(tmp_path, role_groups):
    source = queue_with_rows(tmp_path, n=60)
    review_settings_save(source=source, reviews_required=2)
    users = [_user(f"ann{i}") for i in range(8)]
    errors, per_user = [], {}

    def work(u):
        from django.db import connections

        try:
            per_user[u.username] = _drain(u)
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(repr(exc))
        finally:
            connections.close_all()

    threads = [threading.Thread(target=work, args=(u,)) for u in users]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors
    assert Review.objects.count() == 120  # exactly two reviews per image, none lost, none extra
    assert sorted(ReviewItem.objects.values_list("done", flat=True).distinct()) == [2]
    assert set(ReviewItem.objects.values_list("leased", flat=True)) == {0}
    for name, items in per_user.items():
        assert len(items) == len(set(items)), f"{name} got an image twice"
    assert len([u for u, items in per_user.items() if items]) >= 4  # the work was shared


# -- decisions -----------------------------------------------------------------------------------------

def test_submit_is_idempotent_validated_and_undo_restores_state(tmp_path):
    queue_with_rows(tmp_path, n=4)
    a = _user("a")
    first, second = review_next(user=a)
    done = review_submit(user=a, assignment_id=first.pk, decision="id", wnids=["n02123045", "n07920052"], note="cat on the left")
    again = review_submit(user=a, assignment_id=first.pk, decision="id", wnids=["n02123045", "n07920052"], note="cat on the left")
    assert again.replay and Review.objects.count() == 1
    item = ReviewItem.objects.get(pk=first.item_id)
    assert (item.status, item.final_decision, item.final_wnids, item.done) == ("complete", "id", ["n02123045", "n07920052"], 1)
    for bad, msg in [({"decision": "maybe"}, "unknown decision"), ({"decision": "id"}, "needs the ID class"),
                     ({"decision": "id", "wnids": ["n09308572"]}, "not ID classes"), ({"decision": "ood", "wnids": ["n02123045"]}, "only with an `id`")]:
        with pytest.raises(ReviewError, match=msg):
            review_submit(user=a, assignment_id=second.pk, **bad)
    with pytest.raises(ReviewError, match="not one of yours"):
        review_submit(user=_user("b"), assignment_id=second.pk, decision="ood")
    # undo: the image is leased back, shown first, and the counters are as before
    back = review_undo(user=a)
    assert back.pk == first.pk and review_next(user=a)[0].pk == first.pk
    item.refresh_from_db()
    assert (item.status, item.final_decision, item.done, item.leased) == ("open", "", 0, 1) and Review.objects.count() == 0
    assert AuditLog.objects.filter(action="review_undone", data__undone__decision="id").exists()
    review_submit(user=a, assignment_id=first.pk, decision="ood")
    assert Review.objects.get().decision == "ood" and done.review.pk != Review.objects.get().pk
    with pytest.raises(NothingToUndo):
        review_undo(user=_user("c"))
    # skip: released, never offered to the same annotator again
    review_submit(user=a, assignment_id=second.pk, decision="skip")
    assert second.item_id not in {x.item_id for x in review_next(user=a)}
    assert ReviewItem.objects.get(pk=second.item_id).leased == 0


def test_conflicts_are_adjudicated_and_gold_measures_annotators(tmp_path):
    source = queue_with_rows(tmp_path, n=6)
    review_settings_save(source=source, reviews_required=2)
    a, b, curator = _user("a"), _user("b"), _user("cur", CURATOR)
    _drain(a, "ood")
    # b agrees on 4 images and sees an ID object in 2
    for k in range(6):
        held = review_next(user=b)
        review_submit(user=b, assignment_id=held[0].pk, decision="ood" if k < 4 else "id", wnids=None if k < 4 else ["n02123045"])
    conflicts = selectors.adjudication_queue()
    assert len(conflicts) == 2 and ReviewItem.objects.filter(status="complete", final_decision="ood").count() == 4
    item = review_adjudicate(item_id=conflicts[0].pk, decision="id", wnids=["n02123045"], note="cat ear at the edge", make_gold=True, user=curator)
    assert (item.status, item.final_decision, item.is_gold) == ("adjudicated", "id", True)
    log = AuditLog.objects.get(action="review_adjudicated")
    assert log.actor == curator and log.data["before"]["status"] == "conflict" and log.data["note"] == "cat ear at the edge"
    assert review_items_set_gold(item_ids=ReviewItem.objects.filter(status="complete").values_list("pk", flat=True)[:1], gold=True, user=curator) == 1
    # gold images are mixed in at the set rate: a new annotator gets them and is scored
    review_settings_save(source=source, gold_rate=0.5)
    c = _user("c")
    always = random.Random(0)
    always.random = lambda: 0.0
    got = []
    for _ in range(2):
        held = review_next(user=c, want=1, rng=always)
        assert held[0].is_gold
        got.append(held[0].item_id)
        review_submit(user=c, assignment_id=held[0].pk, decision="ood")
    assert len(set(got)) == 2
    from curation.services.review_stats import review_stats_current

    d = selectors.review_dashboard(snap=review_stats_current())
    row = next(r for r in d["annotators"] if r["annotator__username"] == "c")
    assert (row["gold"], row["gold_ok"], row["n"]) == (2, 1, 0)  # right on the ood image, wrong on the adjudicated id one
    assert ReviewItem.objects.get(pk=item.pk).done == 2  # gold reviews do not count as reviews of the image
    # statistics: pairwise Cohen and Fleiss over the 6 double-reviewed images; contamination with Wilson
    pair = d["pairs"][0]
    assert (pair["a"], pair["b"], pair["n"]) == ("a", "b", 6) and pair["agreement"] == pytest.approx(4 / 6)
    assert d["fleiss"] is not None and d["fleiss"] < 0.0  # a never says id: agreement below chance on the labels used
    total_final = sum(r["final"] for r in d["classes"])
    assert total_final == 5 and sum(r["n_id"] for r in d["classes"]) == 1


# -- HTTP: roles, CSRF, images, queries ------------------------------------------------------------------

def _sql(fn):
    """The statements ``fn`` sent (the test's own savepoints left out), and its result."""
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as ctx:
        result = fn()
    return [q["sql"] for q in ctx.captured_queries if "SAVEPOINT" not in q["sql"]], result


def test_api_roles_csrf_and_one_round_trip_per_decision(tmp_path):
    queue_with_rows(tmp_path, n=5)
    ann, cur, res = _user("ann"), _user("cur", CURATOR), _user("res", RESEARCHER)
    assert Client().get("/api/review/next").status_code == 401
    assert _client(cur).get("/api/review/next").status_code == 403
    assert _client(res).post("/curate/adjudicate/", {"item": 1, "decision": "ood"}).status_code == 403
    assert _client(ann).get("/curate/reviews/").status_code == 403
    assert _client(res).get("/curate/reviews/").status_code == 200
    c = _client(ann)
    sql, r = _sql(lambda: c.get("/api/review/next"))
    # session, user, roles; expired-lease sweep, held leases, scope, gold rates (the last three cached
    # per process or skipped later); 2 x (lock, guarded update, upsert); payload 3 + "is there an ID source"
    assert len(sql) <= 22, "\n".join(sql)  # 17, and 5 for the progress (scope, open images, my leases, my counts, my times)
    items = r.json()["items"]
    assert len(items) == 2 and [t["wnid"] for t in items[0]["top5"]] == [w for w, _p in FAKE_TOP5]
    assert items[0]["top5"][0]["label"] == "tabby" and "cat" in items[0]["top5"][0]["gloss"]
    assert re.fullmatch(r"(iceberg|sunset|dune) \(n\d{8}\)", items[0]["ood_class"]["label"]) and items[0]["ood_class"]["gloss"]
    body = json.dumps({"assignment": items[0]["assignment"], "decision": "ood", "seconds": 3.2, "have": [items[1]["assignment"]]})
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(ann)
    assert strict.post("/api/review/submit", body, content_type="application/json").status_code == 403
    sql, r = _sql(lambda: c.post("/api/review/submit", body, content_type="application/json"))
    assert len(sql) <= 17, "\n".join(sql)  # the decision in 5 writes and a lock, then the next lease and the payload
    data = r.json()
    assert r.status_code == 200 and data["saved"]["decision"] == "ood" and not data["saved"]["replay"]
    assert data["items"][0] == {"assignment": items[1]["assignment"], "known": True}  # the browser has it: not sent again
    assert "progress" not in data  # the screen asks for it now and then (review.js) and counts by itself in between
    assert len(data["items"]) == 2 and data["items"][1]["top5"]
    assert Review.objects.get().seconds == pytest.approx(3.2)
    r = c.post("/api/review/submit", body, content_type="application/json")
    assert r.json()["saved"]["replay"] and Review.objects.count() == 1
    r = c.post("/api/review/submit", json.dumps({"assignment": items[1]["assignment"], "decision": "id", "wnids": ["n00000001"]}),
               content_type="application/json")
    assert r.status_code == 400 and "not ID classes" in r.json()["error"]
    # a time that is not a number (true would read as 1 s) is not taken: the lease's own time is
    r = c.post("/api/review/submit", json.dumps({"assignment": items[1]["assignment"], "decision": "ood", "seconds": True}),
               content_type="application/json")
    assert r.status_code == 200 and Review.objects.get(assignment_id=items[1]["assignment"]).seconds != 1.0
    classes = c.get("/api/id-classes")
    assert len(classes.json()["classes"]) == 1000 and classes["Cache-Control"].startswith("private")
    assert c.get("/api/id-classes", HTTP_IF_NONE_MATCH=classes["ETag"]).status_code == 304


def test_images_are_served_to_allowed_users_with_caching(tmp_path, settings):
    settings.THUMBNAIL_DIR = tmp_path / "thumbs"
    for name, data in awkward_images(np.random.default_rng(0)).items():
        write(tmp_path / "pool" / "n09308572" / f"awk_{name}", data)
    source = queue_with_rows(tmp_path, n=3)
    assert source.images.filter(status="ok").count() > 6
    ann, outsider = _user("ann"), _user("nobody", None)
    c = _client(ann)
    for img in source.images.filter(status="ok"):
        for variant in ("thumb", "view", "full"):
            r = c.get(f"/images/{img.pk}/{variant}")
            assert r.status_code == 200, (img.relative_path, variant, r.content[:200])
            assert "max-age" in r["Cache-Control"] and r["ETag"]
            data = b"".join(r.streaming_content)
            with PILImage.open(io.BytesIO(data)) as im:
                im.load()
                if variant == "thumb":
                    assert max(im.size) <= 224
                if variant != "full" or img.mode not in {"RGB", "RGBA", "L", "LA", "P", "1"}:
                    assert im.mode == "RGB"  # 16-bit, CMYK, alpha, palette: all made displayable
                if img.orientation in (5, 6, 7, 8) and variant == "view":
                    assert (im.width > im.height) == (img.width > img.height)  # EXIF rotation applied
        assert c.get(f"/images/{img.pk}/thumb", HTTP_IF_NONE_MATCH=r["ETag"].replace("full", "thumb")).status_code in (200, 304)
    first = source.images.filter(status="ok").first()
    assert _client(outsider).get(f"/images/{first.pk}/thumb").status_code == 403
    assert Client().get(f"/images/{first.pk}/thumb").status_code == 302
    # an annotator assigned elsewhere cannot see this source's images
    other = queue_with_rows(tmp_path / "o", n=1, name="other")
    AnnotatorScope.objects.create(annotator=ann, source=other)
    assert c.get(f"/images/{first.pk}/thumb").status_code == 403
    assert {x.item.source_id for x in review_next(user=ann)} == {other.pk}
    assert len(list((tmp_path / "thumbs" / "thumb").rglob("*.jpg"))) >= 3  # made once, on disk


def test_curator_pages_build_the_queue_set_settings_and_adjudicate(tmp_path):
    source = queue_with_rows(tmp_path, n=4)
    cur = _client(_user("cur", CURATOR))
    r = cur.post(f"/curate/reviews/source/{source.pk}/", {"reviews_required": "2", "order": "random", "gold_rate": "0.1"}, follow=True)
    assert r.status_code == 200 and b"saved and applied" in r.content
    s = ReviewSettings.objects.get(source=source, candidate_class=None)
    assert (s.reviews_required, s.order, s.gold_rate) == (2, "random", 0.1)
    r = cur.post(f"/curate/reviews/source/{source.pk}/", {"reviews_required": "12", "order": "random"}, follow=True)
    assert b"between 1 and 9" in r.content
    r = cur.post(f"/curate/reviews/source/{source.pk}/", {"build": "1"}, follow=True)
    assert b"4 images to review" in r.content
    a, b = _user("a"), _user("b")
    _drain(a, "ood")
    _drain(b, "unclear")
    page = cur.get("/curate/adjudicate/")
    assert page.status_code == 200 and b"4 images waiting" in page.content
    item = selectors.adjudication_queue()[0]
    r = cur.post("/curate/adjudicate/", {"item": item.pk, "decision": "ood", "note": "clean"}, follow=True)
    assert r.status_code == 200 and b"3 images waiting" in r.content
    item.refresh_from_db()
    assert item.status == "adjudicated" and item.final_note == "clean"
    dash = cur.get("/curate/reviews/").content.decode()
    assert "Fleiss" in dash and 'data-annotator="a"' in dash and "1/1 = 0%" not in dash


def test_a_curator_sends_reviewed_images_back_and_excludes_others(tmp_path):
    from curation.services.browse import BrowseActionError, images_exclude, images_include, images_requeue

    source = queue_with_rows(tmp_path, n=6)
    ann, cur = _user("ann"), _user("cur", CURATOR)
    _drain(ann)
    done = list(ReviewItem.objects.filter(status="complete").order_by("id"))
    report = images_requeue(image_ids=[done[0].image_id, done[1].image_id], user=cur)
    assert report.done == 2
    again = ReviewItem.objects.get(pk=done[0].pk)
    assert (again.status, again.required, again.extra_reviews, again.final_decision) == ("open", 2, 1, "")
    review_queue_sync(source=source)  # a rebuild keeps the extra review asked for
    assert ReviewItem.objects.get(pk=done[0].pk).required == 2 and ReviewItem.objects.get(pk=done[0].pk).status == "open"
    assert images_requeue(image_ids=[done[0].image_id], user=cur).skipped == {"already waiting for review": 1}
    ann2 = _user("ann2")
    _drain(ann2, decision="unclear")  # the second review disagrees: adjudication
    assert ReviewItem.objects.get(pk=done[0].pk).status == "conflict"
    with pytest.raises(BrowseActionError, match="say why"):
        images_exclude(image_ids=[done[2].image_id], reason=" ", user=cur)
    images_exclude(image_ids=[done[2].image_id], reason="watermark", user=cur)
    assert images_requeue(image_ids=[done[2].image_id], user=cur).skipped == {"excluded by a curator (include them first)": 1}
    assert "excluded_by_curator" in review_queue_sync(source=source).summary()
    assert images_include(image_ids=[done[2].image_id], user=cur).done == 1
    assert AuditLog.objects.filter(action__in=["image_requeued", "image_excluded", "image_included"]).count() == 4


@pytest.mark.django_db
def test_a_settings_change_counts_conflicts_apart_from_decided_images(tmp_path, role_groups):
    """Raising reviews per image sends decided images and images in conflict back to the queue;
    the confirmation counted both as "decided images re-opened" (the walk of issue 31: 161 said,
    of which 13 were conflicts waiting for a curator). Now each is its own count and token part."""
    from curation.services.review import review_settings_impact
    from tests.review_data import queue_with_rows

    source = queue_with_rows(tmp_path, n=6)
    review_settings_save(source=source, reviews_required=2)
    a1, a2 = (user_create_with_role(username=f"c{i}", password="pw", role=ANNOTATOR)[0] for i in (1, 2))
    for n in range(3):  # both annotators see the same first images: two agree, one disagrees
        x = review_next(user=a1, want=1)[0]
        review_submit(user=a1, assignment_id=x.pk, decision="ood")
        y = next(a for a in review_next(user=a2, want=6) if a.item_id == x.item_id)
        review_submit(user=a2, assignment_id=y.pk, decision="id" if n == 0 else "ood", wnids=["n01440764"] if n == 0 else [])
    assert ReviewItem.objects.filter(source=source, status="conflict").count() == 1
    assert ReviewItem.objects.filter(source=source, status="complete").count() == 2
    impact = review_settings_impact(source=source, reviews_required=3)
    assert (impact.reopen, impact.conflicts, impact.decide) == (2, 1, 0)
    assert impact.token == "2-3-2-0-1"
    assert "re-opens 2 decided images" in impact.summary() and "sends 1 image in conflict back" in impact.summary()
