"""Reads of the review (docs/review.md): what the review screen shows, an annotator's queue,
scope and progress, the dashboard, the classes waiting for a curator and the contamination
report."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db.models import Count, Exists, F, OuterRef, Q

from curation.models import AnnotatorScope, Assignment, CandidateClass, Image, Source
from curation.selectors.class_filter import latest_class_filter_run
from curation.selectors.sources import default_id_class_set
from pipelines.names import class_label
from pipelines.review.annotator_quality import AnnotatorQuality

_EXAMPLES_TTL = 300.0
_examples_cache: dict[str, tuple[float, list[int]]] = {}


def id_examples(wnids, *, per_class: int = 4) -> dict[str, list[int]]:
    """Up to ``per_class`` ID reference image ids per wnid (one windowed query for the wnids not
    cached in this process; refreshed every few minutes)."""
    import time

    from django.db.models import F, Window
    from django.db.models.functions import RowNumber

    now = time.monotonic()
    hit = _examples_cache.get("")
    if hit is None or now - hit[0] >= _EXAMPLES_TTL:  # is there an ID reference source at all?
        hit = _examples_cache[""] = (now, [1] if Source.objects.filter(role=Source.Role.ID).exists() else [])
    if not hit[1]:
        return {w: [] for w in wnids}
    out, missing = {}, []
    for w in wnids:
        hit = _examples_cache.get(w)
        if hit and now - hit[0] < _EXAMPLES_TTL:
            out[w] = hit[1]
        else:
            missing.append(w)
    if missing:
        found: dict[str, list[int]] = {w: [] for w in missing}
        # the ID sources' classes of these wnids first (a few), then their images: joined by wnid alone, the
        # planner weighs the candidate pool's classes of the same wnids too (ImageNet-1K's 1,000 are among
        # ImageNet-21K's, ~690,000 images at 13.2M), and each grid page paid for it (issue 45)
        id_classes = CandidateClass.objects.filter(source__role=Source.Role.ID, wnid__in=missing)
        rows = (Image.objects.filter(status=Image.Status.OK, candidate_class__in=id_classes)
                .annotate(rn=Window(RowNumber(), partition_by=F("candidate_class__wnid"), order_by=F("id").asc()))
                .filter(rn__lte=per_class).values_list("candidate_class__wnid", "id"))
        for w, image_id in rows:
            found[w].append(image_id)
        for w, ids in found.items():
            _examples_cache[w] = (now, ids)
            out[w] = ids
    return out


def review_reads_cache_clear() -> None:
    """Forget this process's cached reads of the review screen (ID examples)."""
    _examples_cache.clear()


def review_payload(assignments, *, model_name: str) -> list[dict]:
    """What the review screen shows for each leased image, in the assignments' order: three
    queries whatever the number of images (items, predictions, synset texts)."""
    from curation.models import ImageEmbedding, ReviewItem, SynsetText

    if not assignments:
        return []
    items = {it.pk: it for it in ReviewItem.objects.filter(pk__in=[a.item_id for a in assignments])
             .select_related("image", "source", "candidate_class")}
    emb = {e.image_id: e for e in ImageEmbedding.objects.filter(image_id__in=[it.image_id for it in items.values()], model_name=model_name)
           .only("image_id", "topk", "nearest_id_similarity")}
    wnids = {w for e in emb.values() for w, _p in e.topk} | {it.candidate_class.wnid for it in items.values() if it.candidate_class_id}
    texts = {t.wnid: t for t in SynsetText.objects.filter(wnid__in=wnids)}
    examples = id_examples(sorted({w for e in emb.values() for w, _p in e.topk}))
    out = []
    for a in assignments:
        it = items[a.item_id]
        cc, e = it.candidate_class, emb.get(it.image_id)
        ct = texts.get(cc.wnid) if cc and cc.wnid else None
        top = []
        for rank, (w, p) in enumerate(e.topk if e else [], start=1):
            t = texts.get(w)
            top.append({"rank": rank, "wnid": w, "label": t.label if t else w, "lemmas": t.lemmas if t else [],
                        "gloss": t.gloss if t else "", "prob": round(float(p), 4), "examples": examples.get(w, [])})
        out.append({
            "assignment": a.pk, "item": it.pk, "image": it.image_id, "gold": a.is_gold,
            "width": it.image.width, "height": it.image.height, "path": it.image.relative_path,
            "source": it.source.name,
            "ood_class": {"folder": cc.folder if cc else "", "wnid": cc.wnid if cc else "",
                          "label": class_label(cc.wnid, ct.label if ct else cc.synset_name, cc.folder) if cc else "(no class)",
                          "lemmas": ct.lemmas if ct else (cc.lemmas if cc else []),
                          # a class kept unmapped shows the curator's description in place of a gloss
                          "gloss": ((ct.gloss if ct else cc.gloss) or cc.description) if cc else "",
                          "described": bool(cc and not cc.wnid and cc.description)},
            "nearest_id_similarity": round(e.nearest_id_similarity, 3) if e and e.nearest_id_similarity is not None else None,
            "top5": top, "expires_at": a.expires_at.isoformat(),
        })
    return out


def id_class_list() -> list[list]:
    """[[wnid, label, 'lemma, lemma', gloss], ...] for the ID class search, in class order."""
    from curation.models import SynsetText

    id_set = default_id_class_set()
    if id_set is None:
        return []
    texts = {t.wnid: t for t in SynsetText.objects.filter(wnid__in=id_set.wnids)}
    rows = []
    for w in id_set.wnids:
        t = texts.get(w)
        rows.append([w, t.label if t else w, ", ".join(t.lemmas) if t else "", t.gloss if t else ""])
    return rows


# A page's per-class table shows this many classes (the queue of a pool of ImageNet-21K's size has
# 19,167: rendered whole, the table alone took 2-4 s a request and 2-4 MB of HTML; issue 45).
CLASS_ROWS = 200


def _queued() -> Q:
    """Counter rows with an item that is not withdrawn (what the per-class tables list)."""
    return Q(n_open__gt=0) | Q(n_complete__gt=0) | Q(n_conflict__gt=0) | Q(n_adjudicated__gt=0)


def annotator_queue(*, user, limit: int = CLASS_ROWS) -> dict:
    """An annotator's queue: for the ``limit`` classes in their scope with the most open images,
    the images queued, those still open, those waiting for this annotator (open, and neither held
    nor decided by them) and those finished (``classes``: how many classes there are in all);
    and what they have done. Read from the database's counters (``QueueClassCount`` one row per
    class, ``AnnotatorQueueCount`` the annotator's part; issue 45: aggregating 9.2M items took
    16 s a request)."""
    from curation.models import AnnotatorQueueCount, QueueClassCount, Review

    scope = annotator_scope(user)
    queued = QueueClassCount.objects.filter(scope.q()).filter(_queued())
    rows = []
    for r in (queued.values("source_id", "candidate_class_id", "source__name", "candidate_class__folder", "candidate_class__wnid",
                            "candidate_class__synset_name", "n_open", "n_complete", "n_conflict", "n_adjudicated")
              .order_by("-n_open", "source__name", "candidate_class__folder")[:limit]):
        finished = r["n_complete"] + r["n_conflict"] + r["n_adjudicated"]
        rows.append({"source_id": r["source_id"], "candidate_class_id": r["candidate_class_id"],
                     "source__name": r["source__name"], "candidate_class__folder": r["candidate_class__folder"],
                     "candidate_class__wnid": r["candidate_class__wnid"], "candidate_class__synset_name": r["candidate_class__synset_name"],
                     "total": r["n_open"] + finished, "open": r["n_open"], "finished": finished,
                     "label": class_label(r["candidate_class__wnid"], r["candidate_class__synset_name"], r["candidate_class__folder"])})
    # waiting for this annotator: the open images less those they hold or decided (their counters)
    seen = {(r["source_id"], r["candidate_class_id"]): r["seen_open"]
            for r in AnnotatorQueueCount.objects.filter(annotator=user)
            .filter(Q(candidate_class_id__in=[r["candidate_class_id"] for r in rows]) | Q(candidate_class__isnull=True))
            .values("source_id", "candidate_class_id", "seen_open")}
    for r in rows:
        r["waiting"] = r["open"] - seen.get((r.pop("source_id"), r["candidate_class_id"]), 0)
    mine = Review.objects.filter(annotator=user, is_gold=False)
    return {"rows": rows, "classes": queued.count() if len(rows) >= limit else len(rows), "restricted": not scope.unrestricted,
            "my_reviews": mine.count(), "my_today": mine.filter(today_q()).count()}


def today_q(field: str = "created_at") -> Q:
    """``field`` falls on today (the site's time zone), as a range the (annotator, created_at)
    index answers; ``created_at__date=`` casts every row's time to a date first, and then reads
    every review the annotator ever made (issue 45: 0.25 s a request at 13 million images)."""
    from datetime import datetime, time, timedelta

    from django.utils import timezone

    start = timezone.make_aware(datetime.combine(timezone.localdate(), time.min))
    return Q(**{f"{field}__gte": start, f"{field}__lt": start + timedelta(days=1)})


def review_dashboard(*, snap: Any, after: tuple[str, str] | None = None, limit: int = CLASS_ROWS) -> dict:
    """Progress per class, throughput and gold accuracy per annotator, agreement, and the
    contamination rate per class (images finally decided ``id`` over all finally decided
    images) with its Wilson 95% interval. The classes come ``limit`` at a time in (source name,
    class folder) order, from the one after ``after`` (keyset paging: ``classes_next`` is the
    next page's ``after``, None on the last page; ``classes_count`` counts them all).

    Issue 45: the per-class figures and the totals are the queue's counters (``QueueClassCount``,
    kept by the database: one row per class, not 9.2M items); the figures over every review
    (agreement, each annotator's) are ``snap``, the snapshot ``curation.services.review_stats``
    keeps (``review_stats_current()``: the caller asks for it), shown with its time and number
    of reviews (``stats_at``, ``stats_reviews``)."""
    from django.db.models import Sum
    from django.utils.dateparse import parse_datetime

    from curation.models import QueueClassCount, ReviewSettings
    from pipelines.review.agreement import wilson_interval

    queued = QueueClassCount.objects.filter(_queued())
    page = queued
    if after is not None:
        page = page.filter(Q(source__name__gt=after[0]) | Q(source__name=after[0], candidate_class__folder__gt=after[1]))
    classes = []
    for c in (page
              .values("source__name", "candidate_class_id", "candidate_class__folder", "candidate_class__wnid", "candidate_class__synset_name",
                      "n_open", "n_complete", "n_conflict", "n_adjudicated", "final_id", "done_sum", "required_sum")
              .order_by("source__name", "candidate_class__folder")[:limit + 1]):
        final = c["n_complete"] + c["n_adjudicated"]
        row = {k: c[k] for k in ("source__name", "candidate_class_id", "candidate_class__folder", "candidate_class__wnid",
                                 "candidate_class__synset_name")}
        row.update(total=c["n_open"] + c["n_conflict"] + final, open=c["n_open"], conflict=c["n_conflict"], final=final,
                   n_id=c["final_id"], reviews=c["done_sum"], required=c["required_sum"])
        row["ci"] = wilson_interval(row["n_id"], final)
        row["rate"] = row["n_id"] / final if final else None
        row["percent"] = int(100 * min(row["reviews"], row["required"]) / row["required"]) if row["required"] else 0
        row["label"] = class_label(row["candidate_class__wnid"], row["candidate_class__synset_name"], row["candidate_class__folder"])
        classes.append(row)
    more = len(classes) > limit
    classes = classes[:limit]
    last = classes[-1] if more else None
    classes_next = (last["source__name"], last["candidate_class__folder"] or "") if last else None
    classes_count = queued.count() if more or after is not None else len(classes)

    annotators = []
    for a in snap.figures.get("annotators", []):
        row = dict(a)
        row["last"] = parse_datetime(a["last"]) if a.get("last") else None
        row["sec_per_image"] = row["seconds"] / row["n"] if row["n"] and row["seconds"] else None
        row["per_hour"] = 3600.0 * row["n"] / row["seconds"] if row["seconds"] else None
        row["gold_accuracy"] = row["gold_ok"] / row["gold"] if row["gold"] else None
        row["gold_ci"] = wilson_interval(row["gold_ok"], row["gold"])
        annotators.append(row)

    sums = QueueClassCount.objects.aggregate(**{k: Sum(k, default=0) for k in ("n_open", "n_complete", "n_conflict", "n_adjudicated", "n_gold")})
    final = sums["n_complete"] + sums["n_adjudicated"]
    totals = {"total": sums["n_open"] + sums["n_conflict"] + final, "open": sums["n_open"], "conflict": sums["n_conflict"],
              "final": final, "gold": sums["n_gold"]}
    settings_rows = list(ReviewSettings.objects.select_related("source", "candidate_class").order_by("source__name", "candidate_class__folder"))
    return {"classes": classes, "classes_count": classes_count, "classes_next": classes_next, "annotators": annotators, "fleiss": snap.figures.get("fleiss"),
            "multi_reviewed": snap.figures.get("multi_reviewed", 0), "pairs": snap.figures.get("pairs", []),
            "stats_at": snap.computed_at, "stats_reviews": snap.reviews, "totals": totals, "settings": settings_rows,
            "quality": quality_of(snap.figures), "gold_by_screen": snap.figures.get("gold_by_screen", [])}


def quality_of(figures: dict) -> list[AnnotatorQuality]:
    """The rows ``curation.selectors.adjudication.quality_rows`` gave when the review figures'
    snapshot was summed (``curation.services.review_stats``: it reads every review, so not on a
    request)."""
    return [AnnotatorQuality(**{**q, "gold_ci": tuple(q["gold_ci"]) if q.get("gold_ci") else None}) for q in figures.get("quality", [])]


def agreement_figures() -> tuple[float | None, int, list[dict]]:
    """Fleiss' kappa over the images with two or more (non-gold) reviews, and Cohen's kappa and
    the agreement of every pair of annotators over the images both reviewed (the review progress
    page shows them from ``curation.services.review_stats``' snapshot): summed by the
    database (a count per image and decision; a count per pair of annotators and decisions), so
    millions of reviews never come to Python one by one (issue 45)."""
    from django.db import connection

    from pipelines.review.agreement import cohen_kappa_from_table, fleiss_kappa_from_sums

    multi = ("SELECT r.item_id, r.decision, count(*) AS c FROM curation_review r JOIN curation_reviewitem i ON i.id = r.item_id "
             "WHERE NOT r.is_gold AND i.done >= 2 GROUP BY r.item_id, r.decision")
    with connection.cursor() as cur:
        cur.execute(f"WITH per AS ({multi}), items AS (SELECT item_id, sum(c) AS n, sum(c * c) AS sq FROM per GROUP BY item_id "
                    "HAVING sum(c) >= 2) SELECT count(*), COALESCE(sum((sq - n) * 1.0 / (n * (n - 1))), 0) FROM items")
        n_items, p_sum = cur.fetchone()
        cur.execute(f"WITH per AS ({multi}), items AS (SELECT item_id FROM per GROUP BY item_id HAVING sum(c) >= 2) "
                    "SELECT decision, sum(c) FROM per WHERE item_id IN (SELECT item_id FROM items) GROUP BY decision")
        totals = {d: int(c) for d, c in cur.fetchall()}
        cur.execute("SELECT ua.username, ub.username, a.decision, b.decision, count(*) FROM curation_review a "
                    "JOIN curation_review b ON b.item_id = a.item_id AND NOT b.is_gold "
                    "JOIN auth_user ua ON ua.id = a.annotator_id JOIN auth_user ub ON ub.id = b.annotator_id AND ua.username < ub.username "
                    "JOIN curation_reviewitem i ON i.id = a.item_id WHERE NOT a.is_gold AND i.done >= 2 "
                    "GROUP BY ua.username, ub.username, a.decision, b.decision")
        tables: dict[tuple[str, str], dict[tuple[str, str], int]] = {}
        for a, b, x, y, c in cur.fetchall():
            tables.setdefault((a, b), {})[(x, y)] = int(c)
        # images with reviews from 2+ annotators (what the per-image map held)
        cur.execute("SELECT count(*) FROM (SELECT r.item_id FROM curation_review r JOIN curation_reviewitem i ON i.id = r.item_id "
                    "WHERE NOT r.is_gold AND i.done >= 2 GROUP BY r.item_id) x")
        multi_reviewed = cur.fetchone()[0]
    fleiss = fleiss_kappa_from_sums(n_items=n_items, p_sum=float(p_sum), totals=totals)
    pairs = []
    for (a, b), table in sorted(tables.items()):
        n = sum(table.values())
        pairs.append({"a": a, "b": b, "n": n, "kappa": cohen_kappa_from_table(table),
                      "agreement": sum(c for (x, y), c in table.items() if x == y) / n})
    return fleiss, multi_reviewed, pairs


FLAG_REASONS = {"filter": "class filter", "visual": "visual", "unmapped": "no WordNet synset"}


def flagged_classes(*, samples: int = 8) -> list[dict]:
    """Classes waiting for a curator: unresolved flags of each source's latest class filter run
    and unresolved visual-ambiguity signals, each with sample image ids and its reasons. With
    ``samples=0`` the sample ids are left out (``flagged_class_samples`` adds them to a page)."""
    from curation.models import ClassDecision, ClassVisualSignal

    out: dict[int, dict] = {}
    for source in Source.objects.filter(role=Source.Role.CANDIDATE).order_by("name"):
        run = latest_class_filter_run(source=source)
        if run is None:
            continue
        for d in run.decisions.filter(decision=ClassDecision.Decision.FLAG, candidate_class__isnull=False).select_related("candidate_class"):
            out.setdefault(d.candidate_class_id, {"cc": d.candidate_class, "source": source, "flag": None, "signal": None})["flag"] = d
    for sig in ClassVisualSignal.objects.filter(flagged=True, resolution="").select_related("candidate_class__source"):
        entry = out.setdefault(sig.candidate_class_id, {"cc": sig.candidate_class, "source": sig.candidate_class.source, "flag": None, "signal": None})
        entry["signal"] = sig
    entries = sorted(out.values(), key=lambda e: (e["source"].name, e["cc"].folder))
    for e in entries:
        e["reasons"] = [r for r, on in (("filter", e["flag"] is not None), ("visual", e["signal"] is not None),
                                        ("unmapped", e["flag"] is not None and not e["cc"].wnid)) if on]
    if samples:
        flagged_class_samples(entries, samples=samples)
    return entries


def flagged_class_samples(entries: list[dict], *, samples: int = 8) -> list[dict]:
    """Add each entry's first ``samples`` decodable image ids (``entry["samples"]``), in one query
    for all of them."""
    from django.db.models import Window
    from django.db.models.functions import RowNumber

    by_class = {e["cc"].pk: e for e in entries}
    for e in entries:
        e["samples"] = []
    if by_class:
        rows = (Image.objects.filter(candidate_class_id__in=list(by_class), status=Image.Status.OK)
                .annotate(rn=Window(RowNumber(), partition_by=F("candidate_class_id"), order_by=F("id").asc()))
                .filter(rn__lte=samples).values_list("candidate_class_id", "id"))
        for class_id, image_id in rows:
            by_class[class_id]["samples"].append(image_id)
    return entries


def flagged_classes_matching(entries: list[dict], *, source_id: int | None = None, reason: str = "", text: str = "") -> list[dict]:
    """The entries of one source, with one reason (``FLAG_REASONS``) and whose label, folder,
    wnid or synset name holds ``text`` (case-insensitive); an empty filter matches all."""
    needle = text.strip().casefold()

    def hit(e: dict) -> bool:
        cc = e["cc"]
        return needle in " ".join((cc.label, cc.folder, cc.wnid or "", cc.synset_name or "")).casefold()

    return [e for e in entries
            if (source_id is None or e["source"].pk == source_id) and (not reason or reason in e["reasons"]) and (not needle or hit(e))]


def contamination_report(*, source: Source, sample: int = 400, seed: int = 0) -> dict:
    """NINCO's Table 1 for one source: from a random sample (seeded) of its reviewed images
    with a final decision, the share that show an ID object (final decision ``id``) and its
    Wilson 95% interval, overall and per class; shares of ``unclear`` and ``not_target`` too."""
    import random

    from django.db.models import Sum, Window
    from django.db.models.functions import RowNumber

    from curation.models import QueueClassCount, ReviewItem
    from pipelines.review.agreement import wilson_interval

    S = ReviewItem.Status
    # The sample is the one ``random.Random(seed).sample(pool, k)`` draws from the finally decided
    # items in id order: the positions it picks depend only on the pool's size, which the queue's
    # counters hold, so the database returns the ids at those positions and the pool's
    # (at 13.2M images: ~900,000) ids never come to Python (issue 45).
    reviewed = int(QueueClassCount.objects.filter(source=source).aggregate(n=Sum("final_decided", default=0))["n"])
    positions = random.Random(seed).sample(range(reviewed), min(sample, reviewed))
    ranked = (ReviewItem.objects.filter(source=source, status__in=[S.COMPLETE, S.ADJUDICATED]).exclude(final_decision="")
              .annotate(rank=Window(RowNumber(), order_by=F("pk").asc())))
    chosen = list(ranked.filter(rank__in=[p + 1 for p in positions]).values_list("pk", flat=True)) if positions else []
    rows = (ReviewItem.objects.filter(pk__in=chosen)
            .values("candidate_class__wnid", "candidate_class__folder", "candidate_class__synset_name")
            .annotate(n=Count("id"), n_id=Count("id", filter=Q(final_decision="id")), n_ood=Count("id", filter=Q(final_decision="ood")),
                      n_unclear=Count("id", filter=Q(final_decision="unclear")), n_not_target=Count("id", filter=Q(final_decision="not_target")))
            .order_by("candidate_class__folder"))
    classes = []
    for r in rows:
        lo, hi = wilson_interval(r["n_id"], r["n"])
        classes.append({"wnid": r["candidate_class__wnid"], "folder": r["candidate_class__folder"], "synset": r["candidate_class__synset_name"],
                        "label": class_label(r["candidate_class__wnid"], r["candidate_class__synset_name"], r["candidate_class__folder"]),
                        "n": r["n"], "n_id": r["n_id"], "n_ood": r["n_ood"], "n_unclear": r["n_unclear"], "n_not_target": r["n_not_target"],
                        "share": r["n_id"] / r["n"], "ci_low": lo, "ci_high": hi})
    n, n_id = sum(c["n"] for c in classes), sum(c["n_id"] for c in classes)
    lo, hi = wilson_interval(n_id, n) or (None, None)
    return {"source": source.name, "sample": sample, "seed": seed, "reviewed": reviewed, "n": n, "n_id": n_id,
            "n_unclear": sum(c["n_unclear"] for c in classes), "n_not_target": sum(c["n_not_target"] for c in classes),
            "share": n_id / n if n else None, "ci_low": lo, "ci_high": hi, "classes": classes}


# -- what an annotator may see (used by the review service and the pages) -----------------------


@dataclass
class Scope:
    sources: set[int]
    classes: set[int]

    @property
    def unrestricted(self) -> bool:
        return not self.sources and not self.classes

    def q(self) -> Q:
        """The queue rows this annotator may get."""
        if self.unrestricted:
            return Q()  # only candidate sources have queue rows
        return Q(source_id__in=self.sources) | Q(candidate_class_id__in=self.classes)


def annotator_scope(user) -> Scope:
    sources, classes = set(), set()
    for source_id, class_id in AnnotatorScope.objects.filter(annotator=user).values_list("source_id", "candidate_class_id"):
        (classes.add(class_id) if class_id else sources.add(source_id))
    return Scope(sources, classes)


def not_seen_by(user):
    """Queue rows this annotator holds no live or finished assignment on."""
    return ~Exists(Assignment.objects.filter(item=OuterRef("pk"), annotator=user).exclude(state=Assignment.State.EXPIRED))


def _open_with_free_slots(scope: Scope, user=None) -> tuple[int, int]:
    """Open images in ``scope`` that still need a review (free slots), and among them those
    ``user`` decided or skipped (0 without a user): sums of the database's counters over the
    classes in scope (``QueueClassCount.open_free``, ``AnnotatorQueueCount.seen_free``), exact and
    current, in one statement. Counting the 9.2M-item queue took up to 2.5 s and joining the
    annotator's assignments to it 0.74 s (issue 45)."""
    from django.db import connection

    where, params = [], []
    for column, ids in (("source_id", sorted(scope.sources)), ("candidate_class_id", sorted(scope.classes))):
        if ids:
            where.append(f"{column} IN ({', '.join(['%s'] * len(ids))})")
            params += ids
    in_scope = f"({' OR '.join(where)})" if where else "1 = 1"
    with connection.cursor() as cur:
        cur.execute(f"SELECT (SELECT COALESCE(SUM(open_free), 0) FROM curation_queueclasscount WHERE {in_scope}), "
                    f"(SELECT COALESCE(SUM(seen_free), 0) FROM curation_annotatorqueuecount WHERE annotator_id = %s AND {in_scope})",
                    [*params, user.pk if user is not None else 0, *params])
        free, seen = cur.fetchone()
    return int(free), int(seen)


def annotator_progress(user) -> dict:
    """Bearings for the review screen: images still waiting for a review this annotator could
    give (``left``: open images with a free slot, less those they already reviewed or skipped,
    plus those they hold), out of those plus the ones they reviewed (``total``); their reviews
    today, and their median seconds per image today (their last 200). The open count and their
    part of it are the database's counters (exact, current); the rest is from their own rows."""
    import statistics

    from django.utils import timezone

    from curation.models import Review, ReviewItem

    scope = annotator_scope(user)
    item_in_scope = Q() if scope.unrestricted else Q(item__source_id__in=scope.sources) | Q(item__candidate_class_id__in=scope.classes)
    # held and filling the item's last slot (otherwise the open count has it already): their live
    # leases only, a few rows through the (annotator, state, leased_at) index
    held = Assignment.objects.filter(item_in_scope, annotator=user, state=Assignment.State.LEASED, expires_at__gt=timezone.now(),
                                     item__status=ReviewItem.Status.OPEN, item__done__gte=F("item__required") - F("item__leased")).count()
    # theirs among the open images with a free slot: the database's per-annotator counters (joining
    # their 90,000 assignments to the queue took 0.74 s a request at 13.2M images; issue 45)
    free, seen = _open_with_free_slots(scope, user)
    left = max(0, free - seen) + held
    reviews = Review.objects.filter(annotator=user, is_gold=False)
    today = today_q()
    totals = reviews.aggregate(reviewed=Count("id", filter=item_in_scope), done_today=Count("id", filter=today))
    today = list(reviews.filter(today).order_by("-created_at").values_list("seconds", flat=True)[:200])
    return {"left": left, "total": left + totals["reviewed"], "done_today": totals["done_today"],
            "median_seconds": round(statistics.median(today), 1) if today else None}
