"""The datasheet in every export (issue 36.2): README.md with a Hugging Face dataset-card header,
every number in it checked against the database (agreement computed here from Fleiss 1971, not
by the toolkit's helper), the difference from the previous version, and the page that shows it."""
from __future__ import annotations

import io
import random
import re
from collections import Counter
from pathlib import Path

import pytest
import yaml
from django.conf import settings
from django.core.management import call_command
from django.test import Client

from curation.models import ClassDecision, ClassOverride, Export, ExportMember, Image, Review, ReviewItem
from curation.roles import ANNOTATOR, CURATOR, RESEARCHER
from curation.selectors import contamination_report
from curation.services.class_filter import class_decisions_resolve
from curation.services.review import review_adjudicate, review_items_set_gold, review_next, review_queue_sync, review_settings_save, review_submit
from curation.services.users import user_create_with_role
from tests.review_data import KEPT_CLASSES, queue_with_rows
from tests.test_exports import random_features, run_export

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def export_root(tmp_path, settings):
    from curation.services.review import review_cache_clear

    settings.EXPORT_ROOT = tmp_path / "exports"
    settings.FEATURE_STORE = tmp_path / "features"
    review_cache_clear()
    yield settings.EXPORT_ROOT
    review_cache_clear()


def _user(name, role=ANNOTATOR):
    return user_create_with_role(username=name, password="pw-" + name, role=role)[0]


def fleiss_by_hand(ratings: list[list[str]]) -> float:
    """Fleiss (1971): P_i = (sum_j n_ij^2 - n_i) / (n_i (n_i - 1)), P_bar their mean,
    p_j = share of all ratings in category j, P_e = sum_j p_j^2, kappa = (P_bar - P_e) / (1 - P_e)."""
    p_i = []
    all_ratings: list[str] = []
    for r in ratings:
        n = len(r)
        p_i.append((sum(v * v for v in Counter(r).values()) - n) / (n * (n - 1)))
        all_ratings += r
    p_bar = sum(p_i) / len(p_i)
    p_e = sum((v / len(all_ratings)) ** 2 for v in Counter(all_ratings).values())
    return (p_bar - p_e) / (1 - p_e)


@pytest.fixture
def reviewed(tmp_path):
    """Two annotators on every image (b sees an ID object in some), a curator adjudicating one
    conflict, a gold check answered by a third annotator, a class filter run with a pinned override."""
    source = queue_with_rows(tmp_path, n=15)
    ClassOverride.objects.create(wnid=KEPT_CLASSES[0], name="iceberg", action="allow", note="always an OOD class here")
    call_command("filter_classes", candidates="source:pool", out=str(tmp_path / "f.csv"), stdout=io.StringIO())
    # the rules flag the two small classes; a curator keeps one of them and leaves the other flagged
    flagged = ClassDecision.objects.filter(decision="flag").order_by("key")
    assert flagged.count() == 2
    class_decisions_resolve(decision_ids=[flagged[0].pk], resolution="keep", note="enough for a test", user=_user("cf", CURATOR))
    review_queue_sync(source=source)
    random_features(source)
    review_settings_save(source=source, reviews_required=2)
    a, b, c, cur = _user("a"), _user("b"), _user("c"), _user("cur", CURATOR)
    while batch := review_next(user=a, want=10):
        for held in batch:
            review_submit(user=a, assignment_id=held.pk, decision="ood")
    k = 0
    while batch := review_next(user=b, want=10):
        for held in batch:
            review_submit(user=b, assignment_id=held.pk, decision="id" if k % 4 == 1 else "ood", wnids=["n02123045"] if k % 4 == 1 else None)
            k += 1
    assert Review.objects.filter(item__source=source).count() == 2 * ReviewItem.objects.filter(source=source).exclude(status="withdrawn").count()
    conflicts = list(ReviewItem.objects.filter(source=source, status="conflict").order_by("pk"))
    assert len(conflicts) >= 3
    review_adjudicate(item_id=conflicts[0].pk, decision="ood", note="no cat after all", user=cur)
    review_items_set_gold(item_ids=[ReviewItem.objects.filter(source=source, status="complete").first().pk], gold=True, user=cur)
    review_settings_save(source=source, gold_rate=0.5)
    always = random.Random(0)
    always.random = lambda: 0.0
    held = review_next(user=c, want=1, rng=always)
    assert held[0].is_gold
    review_submit(user=c, assignment_id=held[0].pk, decision="ood")
    review_settings_save(source=source, gold_rate=0.0)
    return source, conflicts, cur


def _readme(export: Export) -> tuple[dict, str]:
    text = (Path(settings.EXPORT_ROOT) / export.path / "README.md").read_text()
    m = re.match(r"---\n(.*?)\n---\n", text, flags=re.S)
    assert m, text[:200]
    return yaml.safe_load(m.group(1)), text[m.end():]


def test_the_datasheets_numbers_are_the_databases(reviewed, client):
    source, conflicts, cur = reviewed
    export, out = run_export(name="sheet", sources=[source.name])
    assert export.status == "done", out
    card, body = _readme(export)
    members = list(ExportMember.objects.filter(export=export))
    n = len(members)
    # the card header (Hugging Face dataset card metadata)
    assert card["pretty_name"] == "sheet v1" and card["size_categories"] == ["n<1K"]
    assert "out-of-distribution-detection" in card["tags"] and card["task_categories"] == ["image-classification"]
    assert f"**{n} images in {len({m.wnid for m in members})} classes**" in body
    # composition: images per class, from the export's members
    for wnid, count in Counter(m.wnid for m in members).items():
        assert re.search(rf"\| [^|]+ \| {wnid} \| {count} \| pool \|", body), wnid
    # the source: ingested, readable, final labels, exported
    images = Image.objects.filter(source=source)
    final = ReviewItem.objects.filter(source=source, status__in=["complete", "adjudicated"])
    labels = Counter(final.values_list("final_decision", flat=True))
    row = (f"| pool | {images.count()} | {images.filter(status='ok').count()} | {final.count()} | {labels['ood']} | {labels['id']} | "
           f"{labels['unclear']} | {labels['not_target']} | {n} |")
    assert row in body
    # the class filter: counts per decision and rule, overrides
    run = ClassDecision.objects.filter(candidate_class__source=source).latest("run_id").run
    for (decision, rule), count in Counter(run.decisions.values_list("decision", "rule")).items():
        assert f"| {decision} | {rule or '(no rule fired)'} | {count} |" in body
    assert "override_allow" in {d.rule for d in run.decisions.all()}
    assert f"run {run.pk}, policy `{run.policy_name}`" in body and "Curator overrides: 1 pinned (allow/deny), 1 flags resolved" in body
    # the review protocol: reviews per image, annotators, Fleiss' kappa (by hand), gold, adjudications
    plain = Review.objects.filter(item__source=source, is_gold=False)
    per_item: dict[int, list[str]] = {}
    for item_id, decision in plain.values_list("item_id", "decision"):
        per_item.setdefault(item_id, []).append(decision)
    multi = [r for r in per_item.values() if len(r) >= 2]
    assert "- Reviews per image: pool: 2." in body
    assert f"- Annotators: 3, {plain.count()} reviews" in body
    assert f"Fleiss' kappa {fleiss_by_hand(multi):.3f} over {len(multi)} images" in body
    gold = Review.objects.filter(item__source=source, is_gold=True)
    assert gold.count() == 1 and f"Gold accuracy: {gold.filter(gold_correct=True).count()} of 1 gold checks" in body
    n_conflict = ReviewItem.objects.filter(source=source, status="conflict").count()
    assert f"Adjudicated by a curator: 1 images; still in conflict: {n_conflict}." in body
    # contamination with its interval (NINCO Table 1 on the source), no certificate here
    r = contamination_report(source=source)
    assert f"{r['n_id']} of {r['n']} sampled reviewed images" in body
    assert f"Wilson interval {100 * r['ci_low']:.1f}% to {100 * r['ci_high']:.1f}%" in body
    # what was left out, and checksums of the listings that match the files
    for reason, count in export.counts["excluded"].items():
        assert f"| {reason} | {count} |" in body
    root = Path(settings.EXPORT_ROOT) / export.path
    import hashlib
    for name in ("decisions.csv", "ninco/NINCO/file_list.csv", "openood/imglist.txt"):
        assert f"| `{name}` | `{hashlib.sha256((root / name).read_bytes()).hexdigest()}` |" in body
    assert "This is the first version under this name." in body
    # the manifest carries the same facts and checksums the README
    import json
    manifest = json.loads((root / "manifest.json").read_text())
    assert manifest["datasheet"]["review"]["annotators"] == 3 and "README.md" in manifest["files"]

    # a second version states what changed
    review_adjudicate(item_id=conflicts[1].pk, decision="ood", note="fine", user=cur)
    v2, out = run_export(name="sheet", sources=[source.name])
    assert v2.status == "done" and v2.version == 2, out
    _card, body2 = _readme(v2)
    before = set(ExportMember.objects.filter(export=export).values_list("image_id", flat=True))
    after = set(ExportMember.objects.filter(export=v2).values_list("image_id", flat=True))
    assert f"Against v1: {len(after - before)} images added, {len(before - after)} removed, {len(after & before)} kept" in body2
    assert len(after - before) == 1

    # the page: curators and researchers read it rendered; annotators may not
    page = Client()
    page.force_login(_user("res", RESEARCHER))
    got = page.get(f"/exports/{v2.pk}/datasheet/")
    assert got.status_code == 200
    html = got.content.decode()
    assert "<h1>sheet v2</h1>" in html and "Fleiss&#x27; kappa" in html and "<table" in html and "<script" not in html.split("datasheet")[-1]
    assert f'href="/exports/{v2.pk}/datasheet/"' in page.get("/exports/").content.decode()
    ann = Client()
    ann.force_login(_user("ann2"))
    assert ann.get(f"/exports/{v2.pk}/datasheet/").status_code == 403
    # a README edited after the export is not shown as the export's
    readme = Path(settings.EXPORT_ROOT) / v2.path / "README.md"
    readme.write_text(readme.read_text().replace("sheet v2", "sheet v9"))
    assert page.get(f"/exports/{v2.pk}/datasheet/").status_code == 409
    assert page.get("/exports/999999/datasheet/").status_code == 404


def test_the_datasheet_escapes_what_people_typed():
    from pipelines.export.datasheet import to_html

    text = "---\npretty_name: \"x\"\n---\n\n# a <b>\n\n| class | n |\n|---|---|\n| <img src=x onerror=alert(1)> \\| pipe | 1 |\n\n- `<script>` **<i>**\n"
    out = to_html(text)
    assert "<img" not in out and "<script>" not in out and "<i>" not in out and "<b>" not in out
    assert "&lt;img src=x onerror=alert(1)&gt; | pipe" in out and "<code>&lt;script&gt;</code>" in out
