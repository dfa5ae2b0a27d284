"""The demo's stand-in for people: reviews recorded through the real review service from the
demo data's answer key, so the demo can end with an export. Never used outside the demo."""
from __future__ import annotations

from collections import Counter
from typing import Callable, Iterable

from django.contrib.auth.models import User

from curation.audit import audit_record
from curation.models import ReviewItem, Source
from curation.services.review import review_items_set_gold, review_next, review_settings_save, review_submit


def demo_preflight() -> str:
    """What would stop the demo part-way, found before it builds anything (two minutes of
    composites): the database's tables and WordNet. '' when both are ready, else one line with
    the fix (``scripts/demo.sh`` does both steps; ``manage.py demo`` alone on a new
    OODC_DATA_DIR does not)."""
    from django.conf import settings
    from django.db import connection
    from django.db.migrations.executor import MigrationExecutor

    from pipelines.classes.wordnet import WordNetUnavailable, load_wordnet

    executor = MigrationExecutor(connection)
    if executor.migration_plan(executor.loader.graph.leaf_nodes()):
        where = settings.DATABASES["default"].get("NAME", "")
        return f"the database ({where}) is not migrated: run `python manage.py migrate` first (scripts/demo.sh does it)"
    try:
        load_wordnet(settings.NLTK_DATA)
    except WordNetUnavailable as exc:
        return str(exc).splitlines()[0]
    return ""


def demo_reviews_record(*, user: User, answer: Callable[[str], tuple[str, list[str]]], leave_folders: set[str] = frozenset()) -> Counter:
    """Have ``user`` review every image they are served, deciding by ``answer(relative_path)``;
    images of ``leave_folders`` are skipped (left for people to review in the browser)."""
    decided: Counter = Counter()
    while True:
        batch = review_next(user=user, want=20)
        if not batch:
            break
        for a in batch:
            item = ReviewItem.objects.select_related("image", "candidate_class").get(pk=a.item_id)
            folder = item.candidate_class.folder if item.candidate_class_id else ""
            if folder in leave_folders:
                review_submit(user=user, assignment_id=a.pk, decision="skip")
                decided["left_for_people"] += 1
                continue
            decision, wnids = answer(item.image.relative_path)
            review_submit(user=user, assignment_id=a.pk, decision=decision, wnids=wnids, seconds=4.0,
                          note="demo answer key" if decision != "ood" else "")
            decided[decision] += 1
    audit_record(actor=user, action="demo_reviews_recorded", target=user, data=dict(decided))
    return decided


def demo_gold_set(*, source: Source, per_answer: int = 4, rate: float = 0.1) -> dict[str, int]:
    """Make a few of the stand-in's decided images gold, as a curator would (up to ``per_answer``
    with an ID object and as many without, at most one per class), and serve gold at
    ``rate``: a person who reviews the images left for people is checked against them and sees
    their gold accuracy on their home page. Returns the count per answer."""
    chosen: dict[str, list[int]] = {}
    for decision in ("id", "ood"):
        seen: set[int | None] = set()
        picks: list[int] = []
        rows = (ReviewItem.objects.filter(source=source, status__in=ReviewItem.FINAL, final_decision=decision, is_gold=False)
                .order_by("id").values_list("id", "candidate_class_id"))
        for item_id, cls in rows:
            if len(picks) < per_answer and cls not in seen:
                picks.append(item_id)
                seen.add(cls)
        chosen[decision] = picks
    for decision, ids in chosen.items():
        review_items_set_gold(item_ids=ids, gold=True)
    review_settings_save(source=source, gold_rate=rate)
    return {decision: len(ids) for decision, ids in chosen.items()}


def demo_planted_census(*, source_name: str, relative_paths: Iterable[str], export_name: str) -> dict[str, int]:
    """Where the demo's planted ID objects ended up (a read, for the demo's summary): in classes the
    filter removed, in classes waiting for a curator (flagged), queued for review (then recorded as
    id or still open), dropped as near-duplicates, and carried by the newest export of
    ``export_name`` (0 is right)."""
    from curation.models import Export, ExportMember, Image, Source
    from curation.selectors import class_policy

    source = Source.objects.get(name=source_name)
    policy = class_policy(source=source)
    paths = set(relative_paths)
    images = dict(Image.objects.filter(source=source, relative_path__in=paths).values_list("pk", "candidate_class_id"))
    verdicts = Counter(policy.of(c).verdict for c in images.values())
    items = ReviewItem.objects.filter(image_id__in=list(images)).exclude(status=ReviewItem.Status.WITHDRAWN)
    export = Export.objects.filter(name=export_name, status=Export.Status.DONE).order_by("-version").first()
    return {
        "planted": len(paths),
        "class_removed": verdicts["remove"],
        "class_flagged": verdicts["flag"],
        "queued": items.count(),
        "recorded_id": items.filter(final_decision="id").count(),
        "open": items.filter(final_decision="").count(),
        "in_export": ExportMember.objects.filter(export=export, image_id__in=list(images)).count() if export else 0,
    }
