"""One class-eligibility policy (issue 18): the review queue and exports read a class's standing
from the same place (curation.selectors.class_policy), so they cannot disagree. The rule,
written here from docs/exports.md: kept classes are reviewed; of those, a class with a visual-
ambiguity flag still open is reviewed but not exported; a rejected flag removes the class;
flagged and removed classes, and folders newer than the class filter run, are neither."""
from __future__ import annotations

import io

import pytest
from django.core.management import call_command

from curation.models import ClassVisualSignal, Export, ReviewItem
from curation.selectors import class_policy
from curation.services.review import review_queue_sync
from tests.review_data import fake_predictions, ingest, write_candidates
from tests.test_exports import random_features, review_all, user

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("isolated_roots")]

FOLDERS = {
    "n09308572": "iceberg: kept, visual flag open",
    "n11517776": "sunset: kept, visual flag rejected",
    "n09270735": "dune: kept, visual flag accepted",
    "n09436708": "sky: kept, no flag",
    "n02123045": "tabby: an ID class, removed",
}


def _signal(source, folder, resolution):
    ClassVisualSignal.objects.create(candidate_class=source.classes.get(folder=folder), model_name="m", n_images=3, top_wnid="n04285008",
                                     top_label="sports car", top_share=0.9, threshold=0.5, flagged=True, reason="visually_ambiguous",
                                     resolution=resolution)


def test_review_and_export_follow_one_class_policy(tmp_path):
    call_command("set_id_classes", "imagenet-1k", stdout=io.StringIO())
    write_candidates(tmp_path / "pool", 20, classes=tuple(FOLDERS))
    source = ingest("pool", tmp_path / "pool")
    fake_predictions(source)
    random_features(source)
    (tmp_path / "policy.json").write_text('{"rules": {"too_few_images": "off"}}')  # a handful of images per class here
    call_command("filter_classes", candidates="source:pool", policy=str(tmp_path / "policy.json"), out=str(tmp_path / "d.csv"),
                 stdout=io.StringIO())
    _signal(source, "n09308572", "")
    _signal(source, "n11517776", "reject")
    _signal(source, "n09270735", "accept")
    # a folder that arrives after the class filter ran
    write_candidates(tmp_path / "pool", 4, classes=("n09403427",), seed=3)
    source = ingest("pool", tmp_path / "pool")
    assert source.images.filter(candidate_class__folder="n09403427").count() == 4

    policy = class_policy(source=source)
    standing = {cc.folder: policy.of(cc.pk) for cc in source.classes.all()}
    expected = {  # (reviewable, exportable, reason)
        "n09308572": (True, False, "class_visual_flag_unresolved"),
        "n11517776": (False, False, "class_visual_flag_rejected"),
        "n09270735": (True, True, ""),
        "n09436708": (True, True, ""),
        "n02123045": (False, False, "class_remove"),
        "n09403427": (False, False, "class_not_in_filter_run"),
    }
    assert {f: (s.reviewable, s.exportable, s.reason) for f, s in standing.items()} == expected

    review_queue_sync(source=source)
    queued = set(ReviewItem.objects.filter(source=source).exclude(status=ReviewItem.Status.WITHDRAWN)
                 .values_list("candidate_class__folder", flat=True))
    assert queued == {f for f, (reviewable, _e, _r) in expected.items() if reviewable}
    review_all(user("ann", "annotator"), lambda img: ("ood", []))
    call_command("export", name="policy", sources=["pool"], stdout=io.StringIO(), stderr=io.StringIO())
    export = Export.objects.get(name="policy")
    assert set(export.counts["per_class"]) == {f for f, (_r, exportable, _x) in expected.items() if exportable}
    assert export.counts["excluded"].get("class_visual_flag_unresolved") == ReviewItem.objects.filter(
        source=source, candidate_class__folder="n09308572").count()
