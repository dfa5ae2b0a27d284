"""Certification at a pool's size (issue 45): a plan over ImageNet-21K's ~9 million undecided
images is made from arrays of (item, score) and its units written by COPY on PostgreSQL, with
the same statements for any number of items and no model instance per item; the same seed and
pool give the plan the code before issue 45 gave (a reference kept below); the page reads
per-plan counters and the sampled images, never every unit of the plan. Checked by the
statements made and their plans, not by a timing."""
from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from curation.models import CandidateClass, CertificationUnit, Image, ImageEmbedding, ReviewItem, Source
from curation.services import certification as cert_service
from curation.services.certification import certification_close, certification_plan_create, certification_replays
from curation.services.review import review_queue_sync

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
            assert not [q for q in ctx.captured_queries if "curation_certificationunit" in q["sql"]], "units written by statements"
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
