"""Certification plans (issue 37; docs/review.md, "Review in full or certify"): make a plan over
a source's undecided images, serve its sample in the review queue, compute the bound, and stop
serving once the target is met. The statistics are in pipelines/review/certify.py.

What counts against the pool: a final ``id`` decision, and ``unclear`` unless the plan says
otherwise. The bound uses the longest prefix of the plan's serving order whose images all have
final decisions (a conflict waits for adjudication), so it is the same martingale the proof
follows, however fast reviews come in.
"""
from __future__ import annotations

import io
import itertools
import secrets
import struct
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np
from django.conf import settings
from django.contrib.auth.models import User
from django.db import IntegrityError, connection, transaction
from django.db.models import Count, Q, QuerySet
from django.utils import timezone

from curation.audit import audit_record
from curation.models import CertificationPlan, CertificationUnit, ImageEmbedding, Review, ReviewItem, Source
from curation.models.certification import CertificationStratumCount
from curation.version import code_version
from pipelines.review import certify as C

SEED_MAX = 2**48 - 1  # the largest seed a plan draws for itself; a chosen one is held to the same range

OPEN = (CertificationPlan.Status.PILOT, CertificationPlan.Status.SAMPLING)


class CertificationError(ValueError):
    """A request the certification refuses; the message says why and what to do."""


class CertificationConflict(CertificationError):
    """The source already has an open plan (made before, or by another curator at the same moment)."""


def certification_plan_create(*, source: Source, score: str = CertificationPlan.Score.NEAREST_ID, n_strata: int = C.DEFAULT_STRATA,
                              full_top: float = 0.0, confidence: float = 0.95, target: float = 0.005, seed: int | None = None,
                              pilot: int = C.PILOT_PER_STRATUM, minimum_share: float = 0.02, unclear_is_id: bool = True,
                              model_name: str | None = None, method: str = C.BETTING, user: User | None = None,
                              sampler: int = C.SAMPLER) -> CertificationPlan:
    """Split the source's undecided queue images into score strata, draw a seeded random order
    per stratum and queue the pilot, then the stratum reviewed in full, if any.

    ``method`` ``betting`` (the default; pipelines/review/certify.py): strata finer towards the most
    ID-like scores; the pilot is ``pilot`` x strata draws, each picking a stratum with
    probability in proportion to its size (a simple random sample of the pool); later stages
    are queued as the reviews come in (``certification_refresh``). ``wor-cs/shared`` and
    ``wor-cs/product`` (kept for comparison): equal-count strata, the first ``pilot`` draws of
    every stratum, then Neyman proportions.

    ``sampler``: pipelines.review.certify.SAMPLER; 1 only to redo a plan as it was drawn before issue 50
    (tests of the replay). The check that the source has no open plan and the insert run in one
    transaction holding the source's row, so curators planning at the same moment get one plan
    and a refusal each, never a database error."""
    if score not in CertificationPlan.Score.values:
        raise CertificationError(f"unknown score {score!r}: use one of {', '.join(CertificationPlan.Score.values)}")
    if method not in C.METHODS:
        raise CertificationError(f"unknown method {method!r}: use one of {', '.join(C.METHODS)}")
    if not 0.5 <= confidence < 1:
        raise CertificationError(f"confidence must be at least 0.5 and below 1, not {confidence}")
    if not 0 < target < 1:
        raise CertificationError(f"the target share must be between 0 and 1, not {target}")
    if pilot < 1:
        raise CertificationError(f"the pilot needs at least one review per stratum, not {pilot}")
    if not 0 <= minimum_share <= 0.5:
        raise CertificationError(f"the minimum share per stratum must be between 0 and 0.5, not {minimum_share}")
    if sampler not in C.SAMPLERS:
        raise CertificationError(f"unknown sampler {sampler!r}: use one of {', '.join(map(str, C.SAMPLERS))}")
    _refuse_if_open(source)  # early, before the work below; checked again under the lock
    model_name = model_name or settings.DEFAULT_MODEL
    # the undecided items and their scores as arrays, read in slices (a pool of ImageNet-21K's size
    # has about 9 million: tuples and a dict of them took about 8 GB, issue 45)
    open_items = ReviewItem.objects.filter(source=source, status=ReviewItem.Status.OPEN, is_gold=False)
    ids, image_ids = _int_columns(open_items.order_by("id").values_list("id", "image_id"))
    if not len(ids):
        raise CertificationError(f"{source.name} has no undecided images in its review queue: build the queue first "
                                 f"(`python manage.py review_queue --source {source.name}` or the review dashboard)")
    scored = (ImageEmbedding.objects.filter(model_name=model_name, image_id__in=open_items.values("image_id"))
              .exclude(**{f"{score}__isnull": True}).order_by("image_id").values_list("image_id", score))
    with_score, score_of = _int_float_columns(scored)
    at = np.searchsorted(with_score, image_ids)
    found = (at < len(with_score)) & (with_score[np.minimum(at, max(len(with_score) - 1, 0))] == image_ids) if len(with_score) \
        else np.zeros(len(image_ids), dtype=bool)
    missing = int((~found).sum())
    if missing:
        raise CertificationError(f"{missing} queued images of {source.name} have no {score} from {model_name}: "
                                 f"run `python manage.py run_image_pipeline --sources {source.name}` first")
    betting = method == C.BETTING
    values = score_of[at]
    try:
        st = (C.stratify_quantiles(values, C.tail_quantiles(n_strata, len(values)), full_top=full_top) if betting
              else C.stratify(values, n_strata, full_top=full_top))
    except C.CertifyError as e:
        raise CertificationError(str(e)) from None
    if seed is not None and not 0 <= seed <= SEED_MAX:
        raise CertificationError(f"seed must be a whole number from 0 to {SEED_MAX}, or left out for a random one; not {seed}")
    seed = int(seed if seed is not None else secrets.randbits(48))
    H = len(st.full)
    cov = C.stratum_covariate(values, st.labels, H)
    item_ids = ids
    members = [item_ids[st.labels == h] for h in range(H)]
    orders = [members[h][C.draw_order(len(members[h]), seed=seed, stratum=h, sampler=sampler)] for h in range(H)]
    sampled = [h for h in range(H) if not st.full[h]]
    stages: list[dict] = []
    if betting and sampled:
        sz = np.array([len(members[h]) for h in sampled], dtype=np.int64)
        end = int(C.stage_ends(len(sampled), int(sz.sum()), pilot=pilot)[0])
        base = C.stage_weights(sz, None, None, None, stage=0)
        first = np.array(sampled, dtype=np.int64)[C.draw_strata(sizes=sz, drawn=np.zeros(len(sz)), base=base, n=end, seed=seed,
                                                                 stream=0, sampler=sampler)]
        stages.append({"start": 0, "end": end, "weights": [float(w) for w in base], "sampler": sampler})
    else:
        first = C.interleave([min(pilot, len(orders[h])) if h in sampled else 0 for h in range(H)])
    # serving positions as one array per stratum, aligned with its order (-1: not served yet):
    # the pilot's draws take the next of their stratum's order, then the strata reviewed in full
    serve = [np.full(len(orders[h]), -1, dtype=np.int64) for h in range(H)]
    pos = [0] * H
    for k, h in enumerate(first):
        serve[h][pos[h]] = k
        pos[h] += 1
    k = len(first)
    for h in range(H):
        if st.full[h]:
            serve[h][:] = np.arange(k, k + len(orders[h]))
            k += len(orders[h])
    try:
        with transaction.atomic():
            # the one-open-plan check and the insert under the source's row lock: a second request
            # waits here until the first commits, then sees its plan (PostgreSQL; SQLite writes
            # one at a time anyway, and the unique constraint is the last word on both)
            Source.objects.select_for_update().filter(pk=source.pk).first()
            _refuse_if_open(source)
            plan = _plan_insert(source=source, model_name=model_name, score=score, n_strata=n_strata, full_top=full_top,
                                confidence=confidence, target=target, seed=seed, pilot=pilot, minimum_share=minimum_share,
                                unclear_is_id=unclear_is_id, method=method, betting=betting, stages=stages, user=user, st=st,
                                cov=cov, members=members, orders=orders, serve=serve, items=len(ids), sampler=sampler)
    except IntegrityError:
        if CertificationPlan.objects.filter(source=source, status__in=OPEN).exists():
            raise CertificationConflict(f"{source.name} got an open certification plan from another curator at the same moment: "
                                     "reload the page to see it") from None
        raise
    certification_cache_clear()
    return plan


READ_SLICE = 200_000  # rows read at a time when a plan reads the queue
UNIT_SLICE = 5_000  # units written at a time by bulk_create (SQLite)
COPY_SLICE = 500_000  # units written at a time by COPY (PostgreSQL): 9 MB of binary rows

# COPY's binary rows of curation_certificationunit (plan_id bigint, item_id bigint, stratum
# smallint, draw integer, serve integer): a field count, then each field's length and value, big-endian.
# A unit not served yet has serve NULL: length -1 and no value.
_COPY_COLUMNS = "plan_id, item_id, stratum, draw, serve"
_SERVED_ROW = np.dtype([("fields", ">i2"), ("plan_len", ">i4"), ("plan", ">i8"), ("item_len", ">i4"), ("item", ">i8"),
                        ("stratum_len", ">i4"), ("stratum", ">i2"), ("draw_len", ">i4"), ("draw", ">i4"),
                        ("serve_len", ">i4"), ("serve", ">i4")])
_UNSERVED_ROW = np.dtype([(name, _SERVED_ROW[name]) for name in _SERVED_ROW.names[:-1]])
_COPY_HEADER = b"PGCOPY\n\xff\r\n\x00" + struct.pack(">ii", 0, 0)
_COPY_TRAILER = struct.pack(">h", -1)


def _units_write(*, plan_id: int, orders: list[np.ndarray], serve: list[np.ndarray]) -> None:
    """The plan's units from its arrays: stratum ``h``'s ``d``-th draw is item ``orders[h][d]``,
    served at ``serve[h][d]`` (-1: not yet). PostgreSQL: binary COPY straight from the arrays,
    ``COPY_SLICE`` rows a statement (a plan over 9 million items made 9 million model instances
    and a 5,000-row INSERT per slice, 47 s at 1M images; issue 45). Elsewhere (SQLite, the
    demo): bulk_create, ``UNIT_SLICE`` units at a time, never every unit as an object at once."""
    for h, order in enumerate(orders):
        step = COPY_SLICE if connection.vendor == "postgresql" else UNIT_SLICE
        for a in range(0, len(order), step):
            items, served = order[a:a + step], serve[h][a:a + step]
            draws = np.arange(a, a + len(items), dtype=np.int64)
            if connection.vendor == "postgresql":
                _copy_units(plan_id=plan_id, stratum=h, items=items, draws=draws, served=served)
            else:
                CertificationUnit.objects.bulk_create([
                    CertificationUnit(plan_id=plan_id, item_id=it, stratum=h, draw=d, serve=v if v >= 0 else None)
                    for it, d, v in zip(items.tolist(), draws.tolist(), served.tolist())])


# The advisory lock (first key; the second is the source's id) that migration 0033's trigger takes
# shared before it counts a decision into a plan's strata; a plan being made takes it exclusively.
CERT_LOCK = 4537
FINAL_SQL = "('complete', 'adjudicated')"  # ReviewItem.FINAL, as the trigger spells it


def _counts_fill(*, plan: CertificationPlan) -> None:
    """The plan's CertificationStratumCount rows: per stratum, its units whose images are decided
    (its units are the undecided images when they were read, so about none). On PostgreSQL under
    the source's advisory lock, exclusive, held to the commit: a decision made while the plan was
    being made either committed before this count (counted here) or waits for the lock in the
    trigger until the plan's units are visible (counted there), never both or neither. Before
    the lock: the units' foreign-key checks (deferred to the commit otherwise, where they would
    run under the lock: one per unit) and ANALYZE, so the count below is planned for the units
    just written (planned for none, it probed the queue once per unit: 6.6 s at 1M images)."""
    with connection.cursor() as cur:
        if connection.vendor == "postgresql":
            cur.execute("SET CONSTRAINTS ALL IMMEDIATE")
            cur.execute("SET CONSTRAINTS ALL DEFERRED")
            cur.execute("ANALYZE curation_certificationunit")
            cur.execute("SELECT pg_advisory_xact_lock(%s, %s)", [CERT_LOCK, plan.source_id])
        cur.execute(
            "INSERT INTO curation_certificationstratumcount (plan_id, stratum, final, final_id, final_unclear) "
            f"SELECT u.plan_id, u.stratum, sum(CASE WHEN r.status IN {FINAL_SQL} THEN 1 ELSE 0 END), "
            f"sum(CASE WHEN r.status IN {FINAL_SQL} AND r.final_decision = 'id' THEN 1 ELSE 0 END), "
            f"sum(CASE WHEN r.status IN {FINAL_SQL} AND r.final_decision = 'unclear' THEN 1 ELSE 0 END) "
            "FROM curation_certificationunit u JOIN curation_reviewitem r ON r.id = u.item_id WHERE u.plan_id = %s "
            "GROUP BY u.plan_id, u.stratum", [plan.pk])


def _copy_units(*, plan_id: int, stratum: int, items: np.ndarray, draws: np.ndarray, served: np.ndarray) -> None:
    """One binary COPY of a stratum's slice of units (PostgreSQL)."""
    parts = [_COPY_HEADER]
    for dtype, keep, with_serve in ((_SERVED_ROW, served >= 0, True), (_UNSERVED_ROW, served < 0, False)):
        n = int(keep.sum())
        if not n:
            continue
        rows = np.zeros(n, dtype=dtype)
        rows["fields"] = 5
        rows["plan_len"], rows["item_len"], rows["stratum_len"], rows["draw_len"] = 8, 8, 2, 4
        rows["plan"], rows["item"], rows["stratum"], rows["draw"] = plan_id, items[keep], stratum, draws[keep]
        if with_serve:
            rows["serve_len"], rows["serve"] = 4, served[keep]
        else:
            rows["serve_len"] = -1
        parts.append(rows.tobytes())
    parts.append(_COPY_TRAILER)
    with connection.cursor() as cur:
        cur.cursor.copy_expert(f"COPY curation_certificationunit ({_COPY_COLUMNS}) FROM STDIN WITH (FORMAT binary)",
                               io.BytesIO(b"".join(parts)))


def _int_columns(rows: QuerySet) -> tuple[np.ndarray, np.ndarray]:
    """Two integer columns of ``rows`` as int64 arrays, read ``READ_SLICE`` rows at a time."""
    chunk = READ_SLICE
    parts: list[np.ndarray] = []
    it = rows.iterator(chunk_size=chunk)
    while block := list(itertools.islice(it, chunk)):
        parts.append(np.array(block, dtype=np.int64).reshape(-1, 2))
    both = np.concatenate(parts) if parts else np.zeros((0, 2), dtype=np.int64)
    return both[:, 0].copy(), both[:, 1].copy()


def _int_float_columns(rows: QuerySet) -> tuple[np.ndarray, np.ndarray]:
    """(int64 keys, float64 values) of ``rows`` (key, value), read ``READ_SLICE`` rows at a time."""
    chunk = READ_SLICE
    keys: list[np.ndarray] = []
    vals: list[np.ndarray] = []
    it = rows.iterator(chunk_size=chunk)
    while block := list(itertools.islice(it, chunk)):
        keys.append(np.fromiter((k for k, _v in block), dtype=np.int64, count=len(block)))
        vals.append(np.fromiter((v for _k, v in block), dtype=np.float64, count=len(block)))
    return (np.concatenate(keys) if keys else np.zeros(0, dtype=np.int64)), (np.concatenate(vals) if vals else np.zeros(0))


def _refuse_if_open(source: Source) -> None:
    if CertificationPlan.objects.filter(source=source, status__in=OPEN).exists():
        raise CertificationConflict(f"{source.name} already has an open certification plan: close it first (`certify close --source {source.name}`)")


def _plan_insert(*, source: Source, model_name: str, score: str, n_strata: int, full_top: float, confidence: float, target: float,
                 seed: int, pilot: int, minimum_share: float, unclear_is_id: bool, method: str, betting: bool, stages: list[dict],
                 user: User | None, st: C.Stratification, cov: np.ndarray, members: list[np.ndarray], orders: list[np.ndarray],
                 serve: list[np.ndarray], items: int, sampler: int) -> CertificationPlan:
    """The plan's rows (inside the caller's transaction)."""
    H = len(st.full)
    plan = CertificationPlan.objects.create(
        source=source, model_name=model_name, score=score, n_strata=n_strata, full_top=full_top, confidence=confidence,
        target=target, seed=seed, pilot=pilot, minimum_share=minimum_share, unclear_is_id=unclear_is_id,
        prior=C.BETTING if betting else method.split("/")[1], allocation=stages, sampler=sampler,
        code_version=f"{C.CODE_VERSION} {code_version()}", created_by=user if getattr(user, "pk", None) else None,
        strata=[{"size": int(len(members[h])), "edge": float(st.edges[h]), "full": bool(st.full[h]), "covariate": float(cov[h])}
                for h in range(H)])
    _units_write(plan_id=plan.pk, orders=orders, serve=serve)
    _counts_fill(plan=plan)
    audit_record(actor=user, action="certification_planned", target=plan,
                 data={"source": source.name, "images": items, "strata": [s["size"] for s in plan.strata],
                       "score": score, "seed": seed, "target": target, "confidence": confidence, "pilot": pilot,
                       "method": method_name(plan), "sampler": sampler})
    return plan


def method_name(plan: CertificationPlan) -> str:
    """The plan's method as ``pipelines.review.certify.METHODS`` names it."""
    return C.BETTING if plan.prior == C.BETTING else f"wor-cs/{plan.prior}"


def certification_close(*, plan: CertificationPlan, user: User | None = None) -> CertificationPlan:
    if plan.status not in OPEN:
        raise CertificationError(f"plan {plan.pk} is {plan.status}, not open")
    plan.status = CertificationPlan.Status.CLOSED
    plan.save(update_fields=["status"])
    audit_record(actor=user, action="certification_closed", target=plan, data={"source": plan.source.name})
    certification_cache_clear()
    return plan


# -- the bound ------------------------------------------------------------------------------------

@dataclass
class Standing:
    plan: CertificationPlan
    sizes: list[int]
    full: list[bool]
    reviewed: list[int]  # per stratum: decided images in the serving order's decided prefix
    found: list[int]
    served: int  # units with a serving position
    decided_prefix: int
    waiting: int  # units in the serving order after the prefix that have no final decision yet
    cert: C.Certificate
    history: list[tuple[int, float]] = field(default_factory=list)  # (reviews, bound on the remainder's share)
    expected: int | None = None
    gold_miss_rate: float | None = None
    gold_reviews: int = 0
    method: str = C.BETTING
    draw_shares: list[float | None] = field(default_factory=list)  # per stratum: its probability in the current stage (betting)

    @property
    def bound_share(self) -> float:
        return self.cert.remainder_share


def _counts_against(plan: CertificationPlan) -> tuple[str, ...]:
    return ("id", "unclear") if plan.unclear_is_id else ("id",)


def _served_rows(plan: CertificationPlan) -> list[tuple[int, int, str, str]]:
    """(stratum, serve, item status, final decision) in serving order."""
    return list(CertificationUnit.objects.filter(plan=plan, serve__isnull=False).order_by("serve")
                .values_list("stratum", "serve", "item__status", "item__final_decision"))


def certification_standing(*, plan: CertificationPlan, history_points: int = 40) -> Standing:
    sizes = [int(s["size"]) for s in plan.strata]
    full = [bool(s["full"]) for s in plan.strata]
    cov = [float(s["covariate"]) for s in plan.strata]
    H = len(sizes)
    against = _counts_against(plan)
    rows = _served_rows(plan)
    final = set(ReviewItem.FINAL)
    labels: list[int] = []
    xs: list[int] = []
    prefix = 0
    for stratum, _serve, status, decision in rows:
        if full[stratum]:
            continue  # reviewed in full: counted exactly below, never part of the sample
        if status == ReviewItem.Status.WITHDRAWN:  # left the pool before its decision: counted as ID (conservative)
            labels.append(stratum)
            xs.append(1)
        elif status in final:
            labels.append(stratum)
            xs.append(1 if decision in against else 0)
        else:
            break  # the first undecided sampled image: the decided prefix ends before it
        prefix += 1
    sampled_rows = [r for r in rows if not full[r[0]]]
    waiting = sum(1 for _s, _v, status, _d in sampled_rows[prefix:] if status not in final and status != ReviewItem.Status.WITHDRAWN)
    # per stratum, its units whose images are decided and how many count against the pool: kept
    # by the database (CertificationStratumCount, migration 0033), one row a stratum, so no
    # request joins every unit of the plan to the queue (9 million at 13.2M images; issue 45)
    decided, decided_against = _decided_counts(plan)
    # strata reviewed in full: their decided images count exactly, the open ones as ID
    full_found = sum(decided_against[h] for h in range(H) if full[h])
    full_open = sum(sizes[h] - decided[h] for h in range(H) if full[h])
    # decided images of the sampled strata that are not in the decided prefix (served by the
    # ordinary queue, or later in the serving order): they leave the remainder. Those in the
    # prefix are its rows with a final status (the others there were withdrawn).
    in_prefix = sampled_rows[:prefix]
    outside_reviewed = sum(decided[h] for h in range(H) if not full[h]) - sum(1 for _s, _v, status, _d in in_prefix if status in final)
    outside_found = (sum(decided_against[h] for h in range(H) if not full[h])
                     - sum(1 for _s, _v, status, d in in_prefix if status in final and d in against))
    lab = np.array([h for h in labels if not full[h]], dtype=np.int64)
    xv = np.array([x for h, x in zip(labels, xs) if not full[h]], dtype=np.int64)
    samp = [h for h in range(H) if not full[h]]
    remap = {h: j for j, h in enumerate(samp)}
    lab_s = np.array([remap[h] for h in lab], dtype=np.int64)
    sz = np.array([sizes[h] for h in samp], dtype=np.int64)
    cv = np.array([cov[h] for h in samp])
    alpha = 1 - plan.confidence
    if plan.prior == C.BETTING:
        return _betting_standing(plan=plan, sizes=sizes, full=full, samp=samp, sz=sz, lab_s=lab_s, xv=xv, alpha=alpha,
                                 full_found=full_found, full_open=full_open, outside_reviewed=outside_reviewed,
                                 outside_found=outside_found, served=len(sampled_rows), prefix=prefix, waiting=waiting,
                                 history_points=history_points, against=against)

    def cert_at(n: int) -> C.Certificate:
        t = np.bincount(lab_s[:n], minlength=len(samp))
        s = np.bincount(lab_s[:n], weights=xv[:n], minlength=len(samp)).astype(np.int64)
        return C.certificate(sizes=sz, reviewed=t, found=s, alpha=alpha, target=plan.target, full_found=full_found,
                             full_open=full_open, covariate=cv, prior=plan.prior,  # type: ignore[arg-type]
                             outside_reviewed=outside_reviewed if n == len(lab_s) else 0,
                             outside_found=outside_found if n == len(lab_s) else 0)

    cert = cert_at(len(lab_s))
    reviewed = [0] * H
    found = [0] * H
    for j, h in enumerate(samp):
        reviewed[h], found[h] = int(cert.bound.reviewed[j]), int(cert.bound.found[j])
    for h in range(H):
        if full[h]:
            reviewed[h] = sizes[h] - (full_open if sum(full) == 1 else 0)
    history = []
    if len(lab_s):
        pts = sorted({int(x) for x in np.unique(np.geomspace(1, len(lab_s), min(history_points, len(lab_s))).astype(int))} | {len(lab_s)})
        history = [(n, cert_at(n).remainder_share) for n in pts]
    sd = Standing(plan=plan, sizes=sizes, full=full, reviewed=reviewed, found=found, served=len(sampled_rows), decided_prefix=prefix,
                  waiting=waiting, cert=cert, history=history)
    if plan.status in OPEN and not cert.certified and len(lab_s):
        t = cert.bound.reviewed
        rates = C.fitted_rates(t, cert.bound.found, cv)
        w = _weights(plan, sz, rates)
        sd.expected = C.reviews_expected(sizes=sz, rates=rates, weights=w, reviewed=t, alpha=alpha, target=plan.target,
                                         covariate=cv) if cert.full_open == 0 else None
    _gold(sd, against)
    return sd


def _decided_counts(plan: CertificationPlan) -> tuple[list[int], list[int]]:
    """Per stratum: units whose images are decided, and those decided ``id`` (or ``unclear``
    where the plan counts it against the pool), from the plan's CertificationStratumCount rows."""
    H = len(plan.strata)
    decided, against = [0] * H, [0] * H
    for h, n, n_id, n_unclear in (CertificationStratumCount.objects.filter(plan=plan)
                                  .values_list("stratum", "final", "final_id", "final_unclear")):
        decided[h] = int(n)
        against[h] = int(n_id) + (int(n_unclear) if plan.unclear_is_id else 0)
    return decided, against


def _gold(sd: Standing, against: tuple[str, ...]) -> None:
    """The gold reviews of images whose answer counts against the pool, and the share missed:
    one pass (two counts over the same reviews took two, issue 45)."""
    got = (Review.objects.filter(item__source=sd.plan.source, is_gold=True, gold_correct__isnull=False, item__final_decision__in=against)
           .aggregate(n=Count("id"), missed=Count("id", filter=Q(gold_correct=False))))
    if got["n"]:
        sd.gold_reviews = got["n"]
        sd.gold_miss_rate = got["missed"] / got["n"]


def _betting_standing(*, plan: CertificationPlan, sizes: list[int], full: list[bool], samp: list[int], sz: np.ndarray,
                      lab_s: np.ndarray, xv: np.ndarray, alpha: float, full_found: int, full_open: int, outside_reviewed: int,
                      outside_found: int, served: int, prefix: int, waiting: int, history_points: int,
                      against: tuple[str, ...]) -> Standing:
    """The betting bound (pipelines.review.certify.betting_upper) on the decided prefix of the plan's
    draws, each under the base weights of the stage that drew it."""
    H = len(sizes)
    n = len(lab_s)
    stages = list(plan.allocation or [])
    bases = C.stage_bases(stages, n, len(samp)) if n else np.zeros((0, len(samp)))
    pts: list[int] = []
    if n:
        pts = sorted({int(x) for x in np.unique(np.geomspace(1, n, min(history_points, n)).astype(int))})
    bb = C.betting_upper(sz, lab_s, xv, bases, alpha, history_at=pts)
    t = np.bincount(lab_s, minlength=len(samp)).astype(np.int64)
    s = np.bincount(lab_s, weights=xv, minlength=len(samp)).astype(np.int64)
    bound = C.Bound(total=bb.total, split=np.zeros(0, dtype=np.int64), mle=np.zeros(0, dtype=np.int64), found=s, reviewed=t,
                    sizes=sz, alpha=alpha, method=C.BETTING, extra={"draws": n})
    rem = int(np.sum(sz - t)) - outside_reviewed

    def cert_of(total: int, tt: np.ndarray, ss: np.ndarray, with_outside: bool) -> C.Certificate:
        b = C.Bound(total=total, split=bound.split, mle=bound.mle, found=ss, reviewed=tt, sizes=sz, alpha=alpha, method=C.BETTING)
        return C.Certificate(alpha=alpha, target=plan.target, bound=b, full_found=full_found, full_open=full_open,
                             remainder_size=int(np.sum(sz - tt)) - (outside_reviewed if with_outside else 0),
                             outside_found=outside_found if with_outside else 0)

    cert = C.Certificate(alpha=alpha, target=plan.target, bound=bound, full_found=full_found, full_open=full_open,
                         remainder_size=rem, outside_found=outside_found)
    history = []
    for k, total in bb.history:
        tt = np.bincount(lab_s[:k], minlength=len(samp)).astype(np.int64)
        ss = np.bincount(lab_s[:k], weights=xv[:k], minlength=len(samp)).astype(np.int64)
        history.append((k, cert_of(total, tt, ss, k == n).remainder_share))
    reviewed = [0] * H
    found = [0] * H
    for j, h in enumerate(samp):
        reviewed[h], found[h] = int(t[j]), int(s[j])
    for h in range(H):
        if full[h]:
            reviewed[h] = sizes[h] - (full_open if sum(full) == 1 else 0)
    current = stages[-1]["weights"] if stages else []
    shares: list[float | None] = [None] * H
    if len(current) == len(samp):
        pi = C.draw_probabilities(np.asarray(current, dtype=np.float64), (sz - t).astype(np.float64))
        for j, h in enumerate(samp):
            shares[h] = float(pi[j])
    sd = Standing(plan=plan, sizes=sizes, full=full, reviewed=reviewed, found=found, served=served, decided_prefix=prefix,
                  waiting=waiting, cert=cert, history=history, method=C.BETTING, draw_shares=shares)
    if plan.status in OPEN and not cert.certified and n and full_open == 0 and len(current) == len(samp):
        # certified when the bound on the total, less every ID image found, is <= target x remainder
        goal = plan.target * rem + int(s.sum()) + outside_found
        sd.expected = C.betting_expected(sz, lab_s, xv, current, bb, goal)
    _gold(sd, against)
    return sd


@dataclass
class Hold:
    """A sampled image the bound waits for: it is next in the serving order after the decided
    prefix (or behind one that is), with no final decision yet, and why."""
    serve: int
    item_id: int
    image_id: int
    path: str
    why: str  # "leased", "conflict" (awaiting adjudication), "queued" (nobody holds it now)
    done: int  # reviews so far
    required: int  # reviews the image needs
    holders: list[tuple[str, object, object]] = field(default_factory=list)  # (username, leased at, expiry) for "leased"


def certification_holds(*, plan: CertificationPlan, limit: int = 10) -> list[Hold]:
    """What the bound waits for: the first ``limit`` sampled images in serving order that have no
    final decision yet, each with why (issue 50's finding: a draw leased by a person who left, or
    in conflict, stops the bound at the decided prefix while the queue serves other images). One
    query for the units, one for their leases."""
    from curation.models import Assignment

    full = {h for h, s in enumerate(plan.strata) if s["full"]}
    final = list(ReviewItem.FINAL) + [ReviewItem.Status.WITHDRAWN]
    rows = list(CertificationUnit.objects.filter(plan=plan, serve__isnull=False).exclude(stratum__in=full)
                .exclude(item__status__in=final).order_by("serve")
                .values_list("serve", "item_id", "item__image_id", "item__image__relative_path", "item__status",
                             "item__done", "item__required")[:limit])
    leases: dict[int, list[tuple[str, object, object]]] = {}
    for item_id, who, since, until in (Assignment.objects.filter(item_id__in=[r[1] for r in rows], state=Assignment.State.LEASED)
                                       .order_by("expires_at").values_list("item_id", "annotator__username", "leased_at", "expires_at")):
        leases.setdefault(item_id, []).append((who, since, until))
    holds = []
    for serve, item_id, image_id, path, status, done, required in rows:
        if status == ReviewItem.Status.CONFLICT:
            why = "conflict"
        elif item_id in leases:
            why = "leased"
        else:
            why = "queued"
        holds.append(Hold(serve=serve, item_id=item_id, image_id=image_id, path=path, why=why, done=done, required=required,
                          holders=leases.get(item_id, [])))
    return holds


def certification_leased_draws(*, plan: CertificationPlan) -> list[int]:
    """The open plan's sampled images that are leased and undecided (review items), for a
    curator to hand back to the queue (``review_release_leases``) so the next annotator reviews
    them instead of waiting for the leases to run out."""
    if plan.status not in OPEN:
        raise CertificationError(f"plan {plan.pk} is {plan.status}: only an open plan's sample is handed back")
    full = {h for h, s in enumerate(plan.strata) if s["full"]}
    return list(CertificationUnit.objects.filter(plan=plan, serve__isnull=False, item__leased__gt=0).exclude(stratum__in=full)
                .exclude(item__status__in=list(ReviewItem.FINAL)).values_list("item_id", flat=True))


def _weights(plan: CertificationPlan, sizes: np.ndarray, rates: np.ndarray) -> np.ndarray:
    w = sizes * np.sqrt(rates * (1 - rates))
    w = w / w.sum() if w.sum() > 0 else np.ones(len(sizes)) / len(sizes)
    w = np.maximum(w, plan.minimum_share)
    return w / w.sum()


def certification_refresh(*, plan: CertificationPlan, user: User | None = None) -> Standing:
    """Bring an open plan forward: once the pilot is decided, queue the main sample in Neyman
    proportions; once the bound meets the target, mark the plan certified (audited) so the queue
    stops serving its sample."""
    sd = certification_standing(plan=plan)
    if plan.status not in OPEN:
        return sd
    if sd.cert.certified:
        with transaction.atomic():
            p = CertificationPlan.objects.select_for_update().get(pk=plan.pk)
            if p.status in OPEN:
                p.status, p.certified_at = CertificationPlan.Status.CERTIFIED, timezone.now()
                p.certificate = certificate_record(sd)
                p.save(update_fields=["status", "certified_at", "certificate"])
                audit_record(actor=user, action="certification_certified", target=p, data=p.certificate)
                plan.status, plan.certificate, plan.certified_at = p.status, p.certificate, p.certified_at
        certification_cache_clear()
        return sd
    if plan.prior == C.BETTING:
        if _next_stage_due(plan, sd) and _queue_stage(plan, sd):
            sd = certification_standing(plan=plan)
        return sd
    if plan.status == CertificationPlan.Status.PILOT and sd.waiting == 0 and sd.decided_prefix == sd.served:
        _allocate(plan, sd)
        sd = certification_standing(plan=plan)
    return sd


def _next_stage_due(plan: CertificationPlan, sd: Standing) -> bool:
    """The next stage is queued once the pilot is decided, and for later stages once half the
    current stage is, so the queue does not run dry while the last reviews come in."""
    stages = plan.allocation or []
    if not stages:
        return False
    last = stages[-1]
    decided = sum(sd.reviewed[h] for h in range(len(sd.sizes)) if not sd.full[h])
    if len(stages) == 1:
        return decided >= int(last["end"])
    return decided >= (int(last["start"]) + int(last["end"])) // 2


def _queue_stage(plan: CertificationPlan, sd: Standing) -> bool:
    """Draw the next stage's strata (pipelines.review.certify.draw_strata, stream = stage number) with
    base weights from every draw decided so far (all of them before the stage: predictable) and
    give its images serving positions after the last one."""
    samp = [h for h in range(len(sd.sizes)) if not sd.full[h]]
    sz = np.array([sd.sizes[h] for h in samp], dtype=np.int64)
    cv = np.array([plan.strata[h]["covariate"] for h in samp])
    with transaction.atomic():
        p = CertificationPlan.objects.select_for_update().get(pk=plan.pk)
        stages = list(p.allocation or [])
        if p.status not in OPEN or len(stages) != len(plan.allocation or []):
            return False
        k = len(stages)
        start = int(stages[-1]["end"])
        ends = C.stage_ends(len(samp), int(sz.sum()), pilot=p.pilot)
        if start >= int(sz.sum()):
            return False
        # the stage ends at the schedule's first end past the draws queued (a plan whose earlier
        # stages followed an older schedule, oodc-certify/2's doubling, goes on from where it is)
        end = int(ends[ends > start][0])
        # counts of the draws queued so far, and the outcomes of those decided
        index = {h: j for j, h in enumerate(samp)}
        rows = [index[h] for h in CertificationUnit.objects.filter(plan=p, serve__isnull=False, stratum__in=samp)
                .values_list("stratum", flat=True)]
        queued = np.bincount(np.array(rows, dtype=np.int64), minlength=len(samp)).astype(np.int64)
        t = np.array([sd.reviewed[h] for h in samp], dtype=np.int64)
        s = np.array([sd.found[h] for h in samp], dtype=np.int64)
        base = C.stage_weights(sz, t, s, cv, stage=k)
        # every new stage uses the current sampler, also in a plan begun before issue 50 (its
        # stages so far keep theirs): its draws follow the probabilities the bound assumes
        lab = C.draw_strata(sizes=sz, drawn=queued, base=base, n=end - start, seed=p.seed, stream=k, sampler=C.SAMPLER)
        nxt = {h: int(queued[j]) for j, h in enumerate(samp)}
        by_key = _next_draws(p, first=nxt, count={samp[j]: int(c) for j, c in enumerate(np.bincount(lab, minlength=len(samp)))})
        top = CertificationUnit.objects.filter(plan=p, serve__isnull=False).order_by("-serve").values_list("serve", flat=True).first()
        pos = (top if top is not None else -1) + 1
        updates = []
        for j in lab:
            h = samp[int(j)]
            u = by_key[(h, nxt[h])]
            nxt[h] += 1
            u.serve = pos
            pos += 1
            updates.append(u)
        CertificationUnit.objects.bulk_update(updates, ["serve"], batch_size=5000)
        stages.append({"start": start, "end": start + len(lab), "weights": [float(w) for w in base], "sampler": C.SAMPLER})
        p.allocation = stages
        p.status = CertificationPlan.Status.SAMPLING
        p.save(update_fields=["status", "allocation"])
        audit_record(actor=None, action="certification_allocated", target=p,
                     data={"stage": k, "queued": len(updates), "weights": [round(float(w), 5) for w in base],
                           "found_so_far": [int(x) for x in s]})
        plan.status, plan.allocation = p.status, p.allocation
    return True


def _next_draws(plan: CertificationPlan, *, first: dict[int, int], count: dict[int, int]) -> dict[tuple[int, int], CertificationUnit]:
    """(stratum, draw) -> unit for the units a stage takes: per stratum ``h`` the draws from
    ``first[h]`` on, ``count[h]`` of them, not served yet; read through the (plan, stratum, draw)
    index. (All the plan's unserved units were read as objects: 9 million at ImageNet-21K's size.)"""
    ranges = Q()
    for h, n in count.items():
        if n:
            ranges |= Q(stratum=h, draw__gte=first[h], draw__lt=first[h] + n)
    if not ranges:
        return {}
    return {(u.stratum, u.draw): u for u in CertificationUnit.objects.filter(ranges, plan=plan, serve__isnull=True).only("id", "stratum", "draw")}


def _allocate(plan: CertificationPlan, sd: Standing) -> None:
    samp = [h for h in range(len(sd.sizes)) if not sd.full[h]]
    sz = np.array([sd.sizes[h] for h in samp], dtype=np.int64)
    cv = np.array([plan.strata[h]["covariate"] for h in samp])
    t = np.array([sd.reviewed[h] for h in samp])
    rates = C.fitted_rates(t, [sd.found[h] for h in samp], cv)
    w = _weights(plan, sz, rates)
    need = sd.expected
    room = int((sz - t).sum())
    total = room if need is None else min(room, int(need * 1.5) + 10)
    counts = np.minimum(sz - t, np.ceil(w * total).astype(np.int64))
    order = C.interleave(counts.tolist())
    with transaction.atomic():
        p = CertificationPlan.objects.select_for_update().get(pk=plan.pk)
        if p.status != CertificationPlan.Status.PILOT:
            return
        start = CertificationUnit.objects.filter(plan=p, serve__isnull=False).order_by("-serve").values_list("serve", flat=True).first()
        k = (start or 0) + 1
        nxt = {h: int(t[j]) for j, h in enumerate(samp)}
        updates = []
        by_key = _next_draws(p, first=nxt, count={samp[j]: int(c) for j, c in enumerate(np.bincount(order, minlength=len(samp)))})
        for j in order:
            h = samp[int(j)]
            u = by_key.get((h, nxt[h]))
            nxt[h] += 1
            if u is None:
                continue
            u.serve = k
            k += 1
            updates.append(u)
        CertificationUnit.objects.bulk_update(updates, ["serve"], batch_size=5000)
        p.status, p.allocation = CertificationPlan.Status.SAMPLING, [round(float(x), 5) for x in w]
        p.save(update_fields=["status", "allocation"])
        audit_record(actor=None, action="certification_allocated", target=p,
                     data={"queued": len(updates), "shares": p.allocation, "pilot_found": [sd.found[h] for h in samp]})
        plan.status, plan.allocation = p.status, p.allocation


def stage_samplers(plan: CertificationPlan) -> list[int]:
    """The sampler that drew each stage of a betting plan (stages stored before issue 50 carry no
    ``sampler``: the plan's own, 1 for plans made then)."""
    return [int(st.get("sampler", plan.sampler)) for st in (plan.allocation or []) if isinstance(st, dict)]


def sampler_note(plan: CertificationPlan) -> str:
    """What the plan page and the certificate say about the sampler that drew the plan."""
    used = stage_samplers(plan) or [plan.sampler]
    if all(v == C.SAMPLER for v in used) and plan.sampler == C.SAMPLER:
        return (f"sampler {C.SAMPLER}: every draw picks its stratum with exactly the probability the bound uses, also after a "
                "stratum runs out")
    old = [k for k, v in enumerate(used) if v == 1]
    return (f"sampler {plan.sampler} drew this plan's stratum orders; stages {', '.join(map(str, old))} were drawn by sampler 1, "
            "made before issue 50 and kept so the plan replays: after a stratum ran out in the middle of a stage, the next draws "
            "could pick the other strata with probabilities other than the ones the bound uses, so its guarantee is not proved "
            "for those draws" + (f"; later stages use sampler {C.SAMPLER}" if any(v != 1 for v in used) else ""))


def guarantee_text(confidence: float) -> str:
    """What a certificate guarantees, in words (docs/review.md, "Why the bound holds")."""
    alpha = 1 - confidence
    return (f"The chance that the bound was ever below the true number of ID images, at any look (after any review, at the "
            f"certification or after it, however the curator chose when to stop), is at most {alpha:.3g}. So up to "
            f"{100 * alpha:.3g}% of certified remainders may really hold more ID images than the target. It counts the reviewers' "
            "decisions as right.")


def certification_replays(*, plan: CertificationPlan) -> bool:
    """Whether the plan's stored draws are what its seed gives under the samplers it records:
    each stratum's order, and for betting plans each stage's strata in serving order."""
    units = list(CertificationUnit.objects.filter(plan=plan).values_list("item_id", "stratum", "draw", "serve"))
    H = len(plan.strata)
    for h in range(H):
        mine = sorted((d, i) for i, s, d, _v in units if s == h)
        members = sorted(i for _d, i in mine)
        order = C.draw_order(len(members), seed=plan.seed, stratum=h, sampler=plan.sampler)
        if [i for _d, i in mine] != [members[int(j)] for j in order]:
            return False
    if plan.prior != C.BETTING:
        return True
    samp = [h for h in range(H) if not plan.strata[h]["full"]]
    index = {h: j for j, h in enumerate(samp)}
    served = [index[s] for _v, s in sorted((v, s) for _i, s, _d, v in units if v is not None and s in index)]
    sz = np.array([plan.strata[h]["size"] for h in samp], dtype=np.int64)
    drawn = np.zeros(len(samp), dtype=np.int64)
    for k, (st, sampler) in enumerate(zip(plan.allocation, stage_samplers(plan))):
        lo, hi = int(st["start"]), int(st["end"])
        lab = C.draw_strata(sizes=sz, drawn=drawn, base=st["weights"], n=hi - lo, seed=plan.seed, stream=k, sampler=sampler)
        if [int(x) for x in lab] != served[lo:hi]:
            return False
        drawn += np.bincount(lab, minlength=len(samp))
    return len(served) == int(drawn.sum())


def certificate_record(sd: Standing) -> dict:
    """What an export's manifest carries."""
    plan, c = sd.plan, sd.cert
    if plan.prior == C.BETTING:
        method = ("betting confidence sequence for the ID total (method 'betting'): one test supermartingale per candidate total on "
                  "importance-weighted draws from score strata, stratum probabilities fixed before each draw, Ville's inequality; "
                  "no split over strata to pay for")
    else:
        method = (f"confidence sequence for sampling without replacement (Waudby-Smith & Ramdas 2020), strata combined by "
                  f"an intersection-union test, prior {plan.prior} (method '{method_name(plan)}')")
    return {
        "method": method, "method_name": method_name(plan),
        "confidence": plan.confidence, "target": plan.target, "counts_as_id": list(_counts_against(plan)),
        "score": plan.score, "model": plan.model_name, "seed": plan.seed, "plan": plan.pk,
        "strata": [{"size": sd.sizes[h], "reviewed": sd.reviewed[h], "id_found": sd.found[h], "full": sd.full[h],
                    "edge": plan.strata[h]["edge"]} for h in range(len(sd.sizes))],
        "split_of_bound": [int(x) for x in c.bound.split],
        "reviews_used": int(sum(c.bound.reviewed)), "remainder_images": c.remainder_size,
        "remainder_id_bound": c.remainder_bound, "remainder_id_share_bound": round(c.remainder_share, 6),
        "remainder_id_share_estimate": round(c.estimate, 6),
        "gold_miss_rate": sd.gold_miss_rate, "code_version": plan.code_version,
        "guarantee": guarantee_text(plan.confidence),
        **({"stages": plan.allocation, "sampler": plan.sampler, "sampler_note": sampler_note(plan)} if plan.prior == C.BETTING else {}),
    }


def certified_plans(*, sources: Iterable[Source]) -> dict[str, CertificationPlan]:
    """Source name -> its latest certified plan (certificates are read, never recomputed, here)."""
    out: dict[str, CertificationPlan] = {}
    for plan in (CertificationPlan.objects.filter(source__in=list(sources), status=CertificationPlan.Status.CERTIFIED)
                 .select_related("source").order_by("certified_at")):
        out[plan.source.name] = plan
    return out


# -- the queue ------------------------------------------------------------------------------------

_lock = threading.Lock()
_last_tick = float("-inf")
_serving = False  # some plan is open: its sample goes first
_withholding = False  # some plan is certified: its remainder is not served


def certification_cache_clear() -> None:
    """The next lease in this process looks at the plans again (after a plan changed here)."""
    global _last_tick
    _last_tick = float("-inf")


def certification_quiet() -> None:
    """Forget what this process knew of the plans and look again only after the usual interval
    (review_cache_clear: a lease right after it costs no extra query)."""
    global _last_tick, _serving, _withholding
    _last_tick, _serving, _withholding = time.monotonic(), False, False


def certification_tick() -> None:
    """At most every REVIEW_RECLAIM_EVERY seconds per process (called when the queue leases):
    move open plans on (allocate after the pilot, certify when the target is met) and note
    which plans the queue must honour."""
    global _last_tick, _serving, _withholding
    now = time.monotonic()
    with _lock:
        if now - _last_tick < settings.REVIEW_RECLAIM_EVERY:
            return
        _last_tick = now
    plans = list(CertificationPlan.objects.filter(status__in=(*OPEN, CertificationPlan.Status.CERTIFIED)).select_related("source"))
    for plan in plans:
        if plan.status in OPEN:
            certification_refresh(plan=plan)
    _serving = any(p.status in OPEN for p in plans)
    _withholding = any(p.status == CertificationPlan.Status.CERTIFIED for p in plans)


def certification_lease_orders(qs: QuerySet) -> list[QuerySet]:
    """The orders the queue tries, first to last: an open plan's sample in serving order, then
    the queue's own order; a certified plan's remainder left out of both."""
    if _withholding:
        qs = qs.exclude(certification_units__plan__status=CertificationPlan.Status.CERTIFIED)
    orders = [qs.order_by("priority", "id")]
    if _serving:
        orders.insert(0, qs.filter(certification_units__plan__status__in=OPEN, certification_units__serve__isnull=False)
                      .order_by("certification_units__serve", "id"))
    return orders
