"""Issue 31.3: every export states its difference from the previous version of its name (images
and classes added and removed, with reasons) in its manifest, diff.csv, the command's output,
the datasheet and the exports page; an export that loses more than a set share says so. The
expected differences are computed here from the database's members, not by the code under test."""
from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from django.conf import settings

from curation.models import Export, ExportMember, ReviewItem
from curation.services.review import review_settings_impact, review_settings_save
from tests.test_exports import export_root, reviewed_pool, run_export, user  # noqa: F401  (export_root: autouse fixture)

pytestmark = pytest.mark.django_db


def members(export: Export) -> set[int]:
    return set(ExportMember.objects.filter(export=export).values_list("image_id", flat=True))


def diff_rows(export: Export) -> list[dict]:
    root = Path(settings.EXPORT_ROOT) / export.path
    with open(root / "diff.csv", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def test_reopening_decided_images_shows_as_a_large_loss_everywhere(tmp_path, client):
    source, decided = reviewed_pool(tmp_path, n=20)
    v1, out1 = run_export(name="ver", sources=[source.name])
    assert v1.status == "done" and "the first version of ver: nothing to compare with" in out1
    assert "diff" not in v1.counts and not (Path(settings.EXPORT_ROOT) / v1.path / "diff.csv").exists()
    # the trap of the issue: 1 -> 2 reviews per image re-opens every decided image
    impact = review_settings_impact(source=source, reviews_required=2)
    review_settings_save(source=source, reviews_required=2, impact=impact)
    reopened = set(ReviewItem.objects.filter(source=source, status="open").values_list("image_id", flat=True))
    assert reopened >= members(v1)
    v2, out2 = run_export(name="ver", sources=[source.name], min_per_class=1)
    # nothing left to export: a failed export writes nothing and compares with nothing
    assert v2.status == "failed" and "nothing to export" in v2.message

    # some images decided again (a second review): v3 holds them, loses the rest
    from curation.services.review import review_next, review_submit
    ann2 = user("ann2", "annotator")
    again = set()
    for a in review_next(user=ann2, want=4):
        review_submit(user=ann2, assignment_id=a.pk, decision="ood", seconds=3.0)
        again.add(a.item.image_id)
    v3, out3 = run_export(name="ver", sources=[source.name])
    assert v3.status == "done", out3
    before, now = members(v1), members(v3)
    removed, added = before - now, now - before
    assert removed and v3.version == 2
    d = v3.counts["diff"]
    assert d["previous"]["label"] == v1.label and d["previous"]["images"] == len(before)
    assert d["images"] == {"added": len(added), "removed": len(removed), "kept": len(before & now)}
    rows = diff_rows(v3)
    assert {int(r["image_id"]) for r in rows if r["change"] == "removed"} == removed
    assert {int(r["image_id"]) for r in rows if r["change"] == "added"} == added
    # the reason of each removed image is the selection's: still open for its second review
    assert {r["reason"] for r in rows if r["change"] == "removed"} == {"review_open"}
    share = len(removed) / len(before)
    assert share > 0.2 and d["warning"].startswith(f"this export loses {len(removed)} of the {len(before)} images of {v1.label}")
    assert f"WARNING: {d['warning']}" in out3 and f"{len(removed)} removed" in out3 and "diff.csv" in out3
    assert f"loses {100 * share:.0f}% of {v1.label}" in v3.message
    manifest = json.loads((Path(settings.EXPORT_ROOT) / v3.path / "manifest.json").read_text())
    assert manifest["diff"]["images"] == d["images"] and manifest["diff"]["removed_by_reason"] == {"review_open": len(removed)}
    assert "sample_removed" not in manifest["diff"] and "diff.csv" in manifest["files"]
    readme = (Path(settings.EXPORT_ROOT) / v3.path / "README.md").read_text()
    assert f"Against v1: {len(added)} images added, {len(removed)} removed" in readme and "**Warning:**" in readme
    # the layouts' own decisions.csv columns and manifest entries
    with open(Path(settings.EXPORT_ROOT) / v3.path / "decisions.csv", encoding="utf-8") as fh:
        header = next(csv.reader(fh))
    assert header[-3:] == ["ninco_file", "imagenet_ood_file", "openood_file"]
    assert manifest["layouts"]["openood"]["lists"] == ["openood/benchmark_imglist/imagenet/test_ver.txt", "openood/imglist.txt"]
    assert all(set(e["lists"]) <= set(manifest["files"]) for e in manifest["layouts"].values())

    # the pages: a curator sees the summary, the warning and the removed images by name
    client.force_login(user("cur", "curator"))
    page = client.get("/exports/").content.decode()
    some = ReviewItem.objects.filter(image_id__in=removed).select_related("image").first().image.relative_path
    assert "Large loss:" in page and some in page and f"/exports/{v3.pk}/diff/" in page
    got = client.get(f"/exports/{v3.pk}/diff/?change=removed").content.decode()
    assert all(f'data-image="{i}"' in got for i in removed) and not any(f'data-image="{i}"' in got for i in added)
    csv_body = client.get(f"/exports/{v3.pk}/diff/?format=csv")
    assert csv_body.status_code == 200 and csv_body.content == (Path(settings.EXPORT_ROOT) / v3.path / "diff.csv").read_bytes()
    assert client.get(f"/exports/{v1.pk}/diff/").status_code == 404  # the first version has nothing to compare with
    assert client.get(f"/exports/{v3.pk}/diff/?page=%C2%B2").status_code == 400
    assert client.get(f"/exports/{v3.pk}/diff/?change=both").status_code == 400
    # a tampered diff.csv is refused, not shown
    (Path(settings.EXPORT_ROOT) / v3.path / "diff.csv").write_text("change,image_id\nremoved,1\n")
    assert client.get(f"/exports/{v3.pk}/diff/").status_code == 409
    ann = user("ann3", "annotator")
    client.force_login(ann)
    assert client.get(f"/exports/{v3.pk}/diff/").status_code == 403


def test_the_loss_warned_about_is_a_setting_and_an_option(tmp_path):
    source, _ = reviewed_pool(tmp_path, n=12)
    v1, _ = run_export(name="w", sources=[source.name])
    # a second version of fewer classes: every image of the others is "not selected"
    wnid = sorted(v1.counts["per_class"])[0]
    v2, out = run_export(name="w", sources=[source.name], classes=wnid, warn_loss=1.0)
    d = v2.counts["diff"]
    assert d["images"]["removed"] > 0 and d["warning"] == "" and "WARNING" not in out
    assert set(d["removed_by_reason"]) == {"not_selected"}
    assert {c["wnid"] for c in d["classes_removed"]} == set(v1.counts["per_class"]) - {wnid}
    v3, out = run_export(name="w", sources=[source.name], warn_loss=0.0)
    assert v3.counts["diff"]["images"]["added"] == d["images"]["removed"] and v3.counts["diff"]["warning"] == ""  # a gain is no loss
    _, out = run_export(name="w", sources=[source.name], warn_loss=1.5)
    assert "CommandError: the loss warned about must be a share between 0 and 1" in out
