"""Certification at a pool's size (issue 45): a plan over ImageNet-21K's ~9 million undecided
images is made from arrays of (item, score) and its units written by COPY on PostgreSQL, with
the same statements for any number of items and no model instance per item; the same seed and
pool give the plan the code before issue 45 gave (a reference kept below); the page reads
per-plan counters and the sampled images, never every unit of the plan. Checked by the
statements made and their plans, not by a timing."""
from __future__ import annotations

import numpy as np
import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from curation.models import CandidateClass, CertificationUnit, Image, ImageEmbedding, ReviewItem, Source
from curation.models.certification import CertificationStratumCount
from curation.services import certification as cert_service
from curation.services.certification import (
    certification_close,
    certification_plan_create,
    certification_replays,
    certification_standing,
)
from curation.services.review import review_queue_sync
from tests.sql_plans import plan_without_seq_scans

pytestmark = pytest.mark.django_db

MODEL = "m"


def _score(k: int, n: int) -> float:
    """A score per image that is not in the images' order (every 7th image, mod n, ranks next)."""
    return round(0.05 + 0.9 * ((7 * k) % n) / n, 6)


def _pool(n: int, name: str = "pool") -> Source:
    source = Source.objects.create(name=name, root="/nonexistent")
    classes = CandidateClass.objects.bulk_create([CandidateClass(source=source, folder=f"c{k}", mapping="unmapped") for k in range(3)])
    images = Image.objects.bulk_create([Image(source=source, candidate_class=classes[k % 3], relative_path=f"c/{k}.jpg",
                                              sha256=f"{k + 10**6 * len(name):064x}", status="ok") for k in range(n)])
    ImageEmbedding.objects.bulk_create([ImageEmbedding(image=i, model_name=MODEL, nearest_id_similarity=_score(k, n),
                                                       top1_prob=_score(3 * k + 1, n)) for k, i in enumerate(images)])
    review_queue_sync(source=source, model_name=MODEL)
    return source


def _units_by_image(plan) -> list[tuple[int, int, int, int | None]]:
    """(image number in the pool, stratum, draw, serve) of every unit, by image number."""
    rows = CertificationUnit.objects.filter(plan=plan).values_list("item__image__relative_path", "stratum", "draw", "serve")
    return sorted((int(p.split("/")[1].split(".")[0]), s, d, v) for p, s, d, v in rows)


# The plans the code before issue 45 made on _pool(60) (units in Python, a dict of serving
# positions by item), kept as they were: per image 0..59, (stratum, draw in the stratum's
# seeded order, serving position or None). Betting, 4 strata, pilot 3, seed 12345:
BETTING_REFERENCE = [
    (0, 20, None), (0, 6, None), (0, 10, None), (0, 18, None), (1, 14, None), (1, 13, None), (2, 2, None), (2, 5, None), (3, 4, None),
    (0, 9, None), (0, 3, 7), (0, 8, None), (0, 2, 5), (1, 5, None), (1, 9, None), (2, 3, None), (3, 1, 9), (3, 6, None), (0, 22, None),
    (0, 23, None), (0, 25, None), (1, 11, None), (1, 1, 4), (1, 8, None), (2, 6, None), (3, 3, None), (0, 26, None), (0, 24, None),
    (0, 0, 1), (0, 7, None), (1, 6, None), (1, 10, None), (2, 0, 6), (3, 5, None), (3, 2, None), (0, 5, 10), (0, 13, None), (0, 11, None),
    (0, 17, None), (1, 4, None), (1, 3, None), (2, 1, None), (3, 9, None), (0, 14, None), (0, 21, None), (0, 16, None), (0, 15, None),
    (1, 7, None), (1, 0, 2), (2, 4, None), (3, 7, None), (3, 0, 0), (0, 4, 8), (0, 12, None), (0, 19, None), (0, 1, 3), (1, 12, None),
    (1, 2, 11), (2, 7, None), (3, 8, None)]
BETTING_STRATA = [(27, 0.05, False), (15, 0.455, False), (8, 0.68, False), (10, 0.8, False)]
BETTING_STAGES = [{"start": 0, "end": 12, "weights": [0.45, 0.25, 0.13333333333333333, 0.16666666666666666], "sampler": 2}]
# wor-cs/shared by top-1 probability, 3 strata, the top 10% reviewed in full, pilot 2, seed 7:
WOR_REFERENCE = [
    (0, 17, None), (1, 4, None), (2, 11, None), (0, 4, None), (1, 16, None), (2, 6, None), (0, 6, None), (1, 8, None), (3, 5, 11),
    (0, 11, None), (2, 17, None), (3, 2, 8), (1, 10, None), (2, 1, 5), (0, 9, None), (1, 12, None), (2, 0, 2), (0, 8, None), (1, 1, 4),
    (2, 4, None), (0, 3, None), (1, 13, None), (2, 8, None), (0, 1, 3), (1, 0, 1), (2, 15, None), (0, 0, 0), (1, 15, None), (3, 1, 7),
    (0, 2, None), (2, 16, None), (3, 4, 10), (1, 14, None), (2, 14, None), (0, 7, None), (1, 6, None), (2, 9, None), (0, 14, None),
    (1, 7, None), (2, 10, None), (0, 15, None), (1, 5, None), (2, 13, None), (0, 13, None), (1, 17, None), (2, 12, None), (0, 5, None),
    (1, 2, None), (3, 0, 6), (0, 12, None), (2, 3, None), (3, 3, 9), (1, 11, None), (2, 2, None), (0, 10, None), (1, 9, None),
    (2, 7, None), (0, 16, None), (1, 3, None), (2, 5, None)]
WOR_STRATA = [(18, 0.065, False), (18, 0.335, False), (18, 0.605, False), (6, 0.875, True)]


def test_the_same_seed_and_pool_give_the_plan_the_code_before_issue_45_gave(settings):
    """Strata, each stratum's seeded order, the pilot's draws and the strata reviewed in full
    (served after the pilot) are what the row-by-row code gave; both methods."""
    settings.DEFAULT_MODEL = MODEL
    source = _pool(60)
    plan = certification_plan_create(source=source, model_name=MODEL, n_strata=4, pilot=3, seed=12345)
    assert [(s["size"], s["edge"], s["full"]) for s in plan.strata] == BETTING_STRATA
    assert plan.allocation == BETTING_STAGES
    assert [u[1:] for u in _units_by_image(plan)] == BETTING_REFERENCE
    certification_close(plan=plan)
    plan = certification_plan_create(source=source, model_name=MODEL, n_strata=3, pilot=2, seed=7, method="wor-cs/shared",
                                     full_top=0.1, score="top1_prob")
    assert [(s["size"], s["edge"], s["full"]) for s in plan.strata] == WOR_STRATA
    assert [u[1:] for u in _units_by_image(plan)] == WOR_REFERENCE
    assert certification_replays(plan=plan)


def test_a_plan_makes_the_same_statements_for_any_number_of_items_and_no_object_per_item(settings, monkeypatch):
    """30 and 90 undecided images: as many statements, none longer for more items, no ReviewItem
    or ImageEmbedding made; on PostgreSQL no unit either (COPY from the arrays), on SQLite units
    only a slice at a time."""
    settings.DEFAULT_MODEL = MODEL
    made: dict[str, int] = {}
    for model in (ReviewItem, ImageEmbedding, CertificationUnit):
        real = model.__init__

        def counting(self, *a, _real=real, _name=model.__name__, **kw):
            made[_name] = made.get(_name, 0) + 1
            _real(self, *a, **kw)

        monkeypatch.setattr(model, "__init__", counting)
    monkeypatch.setattr(cert_service, "UNIT_SLICE", 20)
    statements = []
    for n in (30, 90):
        source = _pool(n, name=f"pool{n}")
        made.clear()
        with CaptureQueriesContext(connection) as ctx:
            plan = certification_plan_create(source=source, model_name=MODEL, n_strata=3, pilot=2, seed=1)
        assert CertificationUnit.objects.filter(plan=plan).count() == n
        assert "ReviewItem" not in made and "ImageEmbedding" not in made
        if connection.vendor == "postgresql":
            assert "CertificationUnit" not in made
            inserts = [q["sql"] for q in ctx.captured_queries if q["sql"].replace('"', "").startswith("INSERT INTO curation_certificationunit ")]
            assert not inserts, "units written by INSERT statements"
        else:
            assert made["CertificationUnit"] == n
        statements.append([q["sql"] for q in ctx.captured_queries])
    if connection.vendor == "postgresql":
        assert len(statements[0]) == len(statements[1])
        assert max(map(len, statements[1])) <= max(map(len, statements[0])) + 20, "a statement that grows with the items"


@pytest.mark.skipif(connection.vendor != "postgresql", reason="COPY is PostgreSQL's")
def test_the_copy_writes_slices_with_their_serving_positions(settings, monkeypatch):
    """Slices smaller than a stratum: every unit once, served ones with their position, the rest NULL."""
    settings.DEFAULT_MODEL = MODEL
    monkeypatch.setattr(cert_service, "COPY_SLICE", 4)
    source = _pool(60)
    plan = certification_plan_create(source=source, model_name=MODEL, n_strata=4, pilot=3, seed=12345)
    assert [u[1:] for u in _units_by_image(plan)] == BETTING_REFERENCE


def _recount(plan) -> dict[int, tuple[int, int, int]]:
    """Per stratum: (decided, decided id, decided unclear), counted from every unit and its item."""
    out: dict[int, list[int]] = {}
    for h, status, decision in CertificationUnit.objects.filter(plan=plan).values_list("stratum", "item__status", "item__final_decision"):
        row = out.setdefault(h, [0, 0, 0])
        if status in ReviewItem.FINAL:
            row[0] += 1
            row[1] += decision == "id"
            row[2] += decision == "unclear"
    return {h: tuple(v) for h, v in out.items()}


def _counts(plan) -> dict[int, tuple[int, int, int]]:
    return {h: (n, i, u) for h, n, i, u in CertificationStratumCount.objects.filter(plan=plan)
            .values_list("stratum", "final", "final_id", "final_unclear")}


def _old_outside(plan) -> tuple[int, int, int, int]:
    """(full_found, full_open, outside_reviewed, outside_found) as the code before issue 45
    counted them: every unit of the plan joined to its item."""
    full = [bool(s["full"]) for s in plan.strata]
    against = ("id", "unclear") if plan.unclear_is_id else ("id",)
    units = list(CertificationUnit.objects.filter(plan=plan).values_list("stratum", "serve", "item__status", "item__final_decision"))
    stop_at = None
    for h, v, status, _d in sorted((u for u in units if u[1] is not None), key=lambda u: u[1]):
        if not full[h] and status not in ReviewItem.FINAL and status != "withdrawn":
            stop_at = v
            break
    full_found = sum(1 for h, _v, s, d in units if full[h] and s in ReviewItem.FINAL and d in against)
    full_open = sum(1 for h, _v, s, _d in units if full[h] and s not in ReviewItem.FINAL)
    outside = [(v, d) for h, v, s, d in units if not full[h] and s in ReviewItem.FINAL and (v is None or (stop_at is not None and v >= stop_at))]
    return full_found, full_open, len(outside), sum(1 for _v, d in outside if d in against)


def test_the_decided_counts_follow_every_change_of_an_items_decision(settings):
    """The counts the database keeps per stratum equal a count over every unit after decisions
    by bulk UPDATE and by save, a changed decision, a re-opened and a withdrawn image; the
    standing's figures equal the ones the join over every unit gave."""
    settings.DEFAULT_MODEL = MODEL
    source = _pool(60)
    plan = certification_plan_create(source=source, model_name=MODEL, n_strata=3, pilot=2, seed=7, method="wor-cs/shared", full_top=0.1)
    assert _counts(plan) == _recount(plan) and all(n == 0 for n, _i, _u in _counts(plan).values())
    units = list(CertificationUnit.objects.filter(plan=plan).order_by("serve", "stratum", "draw").values_list("item_id", "stratum", "serve"))
    served = [i for i, _h, v in units if v is not None]
    unserved = [i for i, _h, v in units if v is None]
    full_h = next(h for h, s in enumerate(plan.strata) if s["full"])
    in_full = [i for i, h, _v in units if h == full_h]

    def check():
        assert _counts(plan) == _recount(plan)
        sd = certification_standing(plan=plan)
        c = sd.cert
        assert (c.full_found, c.full_open) == _old_outside(plan)[:2]
        outside_reviewed = int(np.sum(c.bound.sizes - c.bound.reviewed)) - c.remainder_size
        assert _old_outside(plan)[2:] == (outside_reviewed, c.outside_found)

    ReviewItem.objects.filter(pk__in=served[:2] + unserved[:5]).update(status="complete", final_decision="id")  # bulk UPDATE
    ReviewItem.objects.filter(pk__in=served[3:5] + in_full[:2]).update(status="complete", final_decision="ood")  # after a gap in the prefix
    check()
    item = ReviewItem.objects.get(pk=unserved[5])
    item.status, item.final_decision = "adjudicated", "unclear"
    item.save()  # one row
    ReviewItem.objects.filter(pk=unserved[0]).update(final_decision="ood")  # a decision changed
    ReviewItem.objects.filter(pk=unserved[1]).update(status="open", final_decision="")  # re-opened
    ReviewItem.objects.filter(pk=unserved[6]).update(status="withdrawn")  # withdrawn undecided: not decided
    ReviewItem.objects.filter(pk=served[2]).update(status="complete", final_decision="unclear")  # the prefix closes its gap
    check()
    ReviewItem.objects.filter(source=source).update(priority=5)  # no decision changes
    check()


def _page_pool(n: int, client_user) -> tuple[str, list[dict]]:
    """A pool of ``n`` with a betting plan (its top 10% reviewed in full), some images decided in
    and out of the sample; the page's URL and the statements one GET made."""
    from django.test import Client

    source = _pool(n, name=f"pool{n}")
    plan = certification_plan_create(source=source, model_name=MODEL, n_strata=3, pilot=2, seed=3, full_top=0.1)
    served = list(CertificationUnit.objects.filter(plan=plan, serve__isnull=False).order_by("serve").values_list("item_id", flat=True))
    unserved = list(CertificationUnit.objects.filter(plan=plan, serve__isnull=True).values_list("item_id", flat=True))
    ReviewItem.objects.filter(pk__in=served[:2] + served[3:4] + unserved[:3]).update(status="complete", final_decision="ood")
    c = Client()
    c.force_login(client_user)
    url = f"/curate/certify/{source.pk}/"
    assert c.get(url).status_code == 200  # the first request moves the plan on where it is due
    with CaptureQueriesContext(connection) as ctx:
        assert c.get(url).status_code == 200
    return url, list(ctx.captured_queries)


def test_the_page_makes_as_many_queries_at_three_times_the_images(settings):
    from curation.roles import CURATOR
    from curation.services.users import user_create_with_role

    settings.DEFAULT_MODEL = MODEL
    cur = user_create_with_role(username="cur", password="pw-cur", role=CURATOR)[0]
    made = [len(_page_pool(n, cur)[1]) for n in (30, 90)]
    assert made[0] == made[1]


@pytest.mark.skipif(connection.vendor != "postgresql", reason="the plans are PostgreSQL's")
def test_the_page_reads_a_plans_units_only_through_its_serving_order(settings):
    """Every statement of the page that reads the plan's units reads them through the serving
    index (the sampled images, however many the pool holds), never every unit of the plan; the
    decided counts come from the per-stratum rows."""
    from curation.roles import CURATOR
    from curation.services.users import user_create_with_role

    settings.DEFAULT_MODEL = MODEL
    cur = user_create_with_role(username="cur", password="pw-cur", role=CURATOR)[0]
    _url, queries = _page_pool(90, cur)
    with connection.cursor() as c:
        c.execute("ANALYZE curation_certificationunit")
        c.execute("ANALYZE curation_reviewitem")
    reads = [q["sql"] for q in queries if q["sql"].startswith("SELECT") and "curation_certificationunit" in q["sql"]]
    assert reads
    with connection.cursor() as c:
        c.execute("SELECT indexname FROM pg_indexes WHERE tablename = 'curation_certificationunit'")
        unit_indexes = {r[0] for r in c.fetchall()}
    for sql in reads:
        text = "\n".join([sql, plan_without_seq_scans(sql)])
        assert "Seq Scan on curation_certificationunit" not in text, text
        used = {name for name in unit_indexes if f" {name} " in text or text.endswith(f" {name}")}
        assert used == {"cert_unit_serving"}, text
    assert any("curation_certificationstratumcount" in q["sql"] for q in queries)


@pytest.mark.skipif(connection.vendor != "postgresql", reason="EXPLAIN's wording and partial indexes' use are PostgreSQL's")
def test_the_pages_gold_figures_read_the_answered_gold_reviews_not_every_review(settings):
    """The gold figures count the answered gold reviews (0.5% of a pool's reviews) through the
    partial index ``review_gold_answered``; before it, the count read the whole review table
    (about 0.3 s a request at 13.2M images)."""
    from curation.roles import CURATOR
    from curation.services.users import user_create_with_role

    settings.DEFAULT_MODEL = MODEL
    cur = user_create_with_role(username="cur", password="pw-cur", role=CURATOR)[0]
    _url, queries = _page_pool(30, cur)
    reads = [q["sql"] for q in queries if q["sql"].startswith("SELECT") and '"curation_review"' in q["sql"] and "is_gold" in q["sql"]]
    assert reads
    for sql in reads:
        text = plan_without_seq_scans(sql)
        assert "review_gold_answered" in text and "Seq Scan on curation_review " not in text, text


@pytest.mark.skipif(connection.vendor != "postgresql", reason="the advisory lock is PostgreSQL's (SQLite writes one at a time)")
@pytest.mark.django_db(transaction=True)
def test_a_decision_sent_while_a_plan_counts_its_units_waits_for_that_count(settings):
    """While a plan being made holds its source's lock (from counting its units' decisions to its
    commit), a change of an item's decision waits in the trigger, so it is counted after the
    plan's units are visible; other changes (priorities, a withdrawal of an open item) do not wait."""
    import threading

    from django.db import OperationalError, transaction

    settings.DEFAULT_MODEL = MODEL
    source = _pool(12)
    items = list(ReviewItem.objects.filter(source=source).order_by("id").values_list("id", flat=True))
    outcome: dict[str, str] = {}

    def change(name: str, **values) -> None:
        try:
            with transaction.atomic():
                with connection.cursor() as c:
                    c.execute("SET LOCAL lock_timeout = '300ms'")
                ReviewItem.objects.filter(pk=items[len(outcome)]).update(**values)
            outcome[name] = "done"
        except OperationalError as exc:
            outcome[name] = str(exc)
        finally:
            connection.close()

    with transaction.atomic():
        with connection.cursor() as c:
            c.execute("SELECT pg_advisory_xact_lock(%s, %s)", [cert_service.CERT_LOCK, source.pk])
        for name, values in (("decision", {"status": "complete", "final_decision": "id"}), ("priority", {"priority": 7}),
                             ("withdrawal", {"status": "withdrawn"})):
            t = threading.Thread(target=change, args=(name,), kwargs=values)
            t.start()
            t.join()
    assert "lock timeout" in outcome["decision"] and outcome["priority"] == outcome["withdrawal"] == "done", outcome
