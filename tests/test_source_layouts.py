"""Sources in the forms the field ships (issue 44): ImageNet-21K's per-class tars, timm's
WebDataset shards, the hub's Parquet files and published path lists, each written by the tool
that makes the real thing (tarfile, webdataset's TarWriter, datasets), ingested with add_source,
read back in place, reviewed and exported with every byte checked against the source."""
from __future__ import annotations

import csv
import hashlib
import io
import json
import os
import tarfile
from pathlib import Path

import numpy as np
import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from curation.models import CandidateClass, Export, ExportMember, Image, Job, ReviewItem, Source
from curation.services.renditions import RenditionError, rendition
from curation.services.review import review_queue_sync
from fixtures.archives import write_class_tars, write_hf_parquet, write_wds_shards
from fixtures.images import decompression_bomb_png, jpeg_bytes, pattern_image
from pipelines.sources.layouts import MemberChanged
from tests.review_data import KEPT_CLASSES, fake_predictions

pytestmark = pytest.mark.django_db

WNIDS = ["n09308572", "n11517776", "n09270735"]  # iceberg, sunset, dune


def jpeg(i: int, size=(96, 72)) -> bytes:
    rng = np.random.default_rng(i)
    palette = [tuple(int(c) for c in rng.integers(0, 255, 3)) for _ in range(3)]
    return jpeg_bytes(pattern_image(rng, ("dots", "stripes", "checker", "blobs")[i % 4], palette, size))


def add_source(*args, **kw) -> str:
    out, err = io.StringIO(), io.StringIO()
    call_command("add_source", *args, stdout=out, stderr=err, **kw)
    return out.getvalue() + err.getvalue()


def rows(name: str) -> dict[str, Image]:
    return {i.relative_path: i for i in Image.objects.filter(source__name=name).select_related("candidate_class", "source")}


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_class_tars_are_read_in_place_and_a_rescan_notices_changed_and_vanished_archives(tmp_path):
    root = tmp_path / "winter21_whole"
    members = write_class_tars(root, {w: [(f"{w}_{n}.JPEG", jpeg(10 * k + n)) for n in range(4)] for k, w in enumerate(WNIDS)})
    before = set(os.listdir(tmp_path))
    out = add_source("w21", str(root), layout="class-tars")
    assert "layout class-tars" in out and "3 classes, 3 mapped to WordNet" in out
    got = rows("w21")
    assert set(got) == set(members)
    for path, data in members.items():
        img = got[path]
        assert img.status == Image.Status.OK, img.error
        assert img.sha256 == sha(data) and img.bytes == len(data) and (img.width, img.height) == (96, 72)
        assert img.container == path.split("/")[0] and img.offset > 0
        assert img.candidate_class.wnid == path.split(".tar")[0]
        assert img.ref().read() == data  # read back by its recorded offset
    assert set(os.listdir(tmp_path)) == before and sorted(os.listdir(root)) == sorted(f"{w}.tar" for w in WNIDS)  # nothing unpacked

    job = Job.objects.filter(source__name="w21").latest("pk")
    assert job.result["archives"] == 3
    add_source("w21", str(root), layout="class-tars")  # a rerun changes nothing
    assert Job.objects.filter(source__name="w21").latest("pk").result["added"] == 0
    assert Image.objects.filter(source__name="w21").count() == 12

    # one archive rewritten with one member's bytes changed, one archive gone
    changed = {**{f"{WNIDS[0]}_{n}.JPEG": jpeg(n) for n in range(4)}, f"{WNIDS[0]}_2.JPEG": jpeg(99)}
    write_class_tars(root, {WNIDS[0]: list(changed.items())})
    (root / f"{WNIDS[2]}.tar").unlink()
    add_source("w21", str(root), layout="class-tars")
    result = Job.objects.filter(source__name="w21").latest("pk").result
    assert result["changed"] == 1 and result["newly_missing"] == 4, result
    got = rows("w21")
    assert got[f"{WNIDS[0]}.tar/{WNIDS[0]}_2.JPEG"].sha256 == sha(jpeg(99))
    assert {p for p, i in got.items() if i.status == Image.Status.MISSING} == {p for p in members if p.startswith(WNIDS[2])}


def test_webdataset_shards_written_by_webdataset_with_timm_keys(tmp_path):
    root = tmp_path / "imagenet-w21-wds"
    samples = [(f"{WNIDS[i % 3]}_{i}", jpeg(i), WNIDS[i % 3], i % 3) for i in range(11)]
    members = write_wds_shards(root, samples, per_shard=4)
    assert json.loads((root / "_info.json").read_text())["splits"]["train"]["shard_lengths"] == [4, 4, 3]
    add_source("wds", str(root), layout="wds")
    got = rows("wds")
    assert set(got) == set(members)
    for path, (data, wnid) in members.items():
        assert got[path].status == Image.Status.OK and got[path].sha256 == sha(data)
        assert got[path].candidate_class.wnid == wnid  # from the sample's json class_name
        assert got[path].ref().read() == data

    # shards without json: the class comes from .cls through a wnid list (timm's sorted list)
    bare = tmp_path / "bare-wds"
    write_wds_shards(bare, samples, per_shard=6, with_json=False)
    (tmp_path / "wnids.txt").write_text("\n".join(WNIDS) + "\n")
    out = add_source("bare-nolist", str(bare), layout="wds")  # no class without the list: each sample refused, named
    assert "no_class" in out
    refused = Image.objects.filter(source__name="bare-nolist")
    assert refused.count() == 11 and set(refused.values_list("error_code", flat=True)) == {"no_class"}
    add_source("bare", str(bare), layout="wds", opt_wnid_list=str(tmp_path / "wnids.txt"))
    assert {(i.candidate_class.wnid, i.sha256) for i in rows("bare").values()} == {(w, sha(d)) for _k, d, w, _l in samples}


def test_parquet_written_by_datasets_with_image_and_classlabel(tmp_path):
    root = tmp_path / "hub"
    names = ["iceberg", "sunset", "dune"]
    rows_in = [(f"photo_{i}.JPEG", jpeg(i), names[i % 3]) for i in range(10)]
    members = write_hf_parquet(root, rows_in, names=names, shards=2)
    add_source("hub", str(root), layout="parquet")
    got = rows("hub")
    assert set(got) == set(members)
    for path, (data, cls) in members.items():
        img = got[path]
        assert img.status == Image.Status.OK and img.sha256 == sha(data) and img.candidate_class.folder == cls
        assert img.ref().read() == data  # read by its row group and row
    classes = dict(CandidateClass.objects.filter(source__name="hub").values_list("folder", "wnid"))
    assert set(classes) == set(names) and classes["dune"] == "n09270735"  # names map as folder names do (iceberg: two senses)


def test_hostile_archives_are_refused_item_by_item_and_the_batch_goes_on(tmp_path, monkeypatch):
    import pipelines.sources.layouts as layouts

    monkeypatch.setattr(layouts, "DEFAULT_MAX_BYTES", 200_000)
    root = tmp_path / "hostile"
    root.mkdir()
    outside = tmp_path / "outside.txt"
    outside.write_text("secret")
    good = jpeg(1)

    def add(tf, name, data=b"", kind=tarfile.REGTYPE, link=""):
        info = tarfile.TarInfo(name)
        info.type, info.linkname, info.size = kind, link, len(data)
        tf.addfile(info, io.BytesIO(data) if data else None)

    with tarfile.open(root / f"{WNIDS[0]}.tar", "w", format=tarfile.GNU_FORMAT) as tf:
        add(tf, "good.JPEG", good)
        add(tf, "../escape.JPEG", good)
        add(tf, "/etc/absolute.JPEG", good)
        add(tf, "sym.JPEG", kind=tarfile.SYMTYPE, link=str(outside))
        add(tf, "hard.JPEG", kind=tarfile.LNKTYPE, link="good.JPEG")
        add(tf, "dev.JPEG", kind=tarfile.CHRTYPE)
        add(tf, "good.JPEG", jpeg(2))  # the same name again
        add(tf, "huge.JPEG", b"\xff" * 300_000)
        add(tf, "text.JPEG", b"<html>404</html>")
        add(tf, "bomb.JPEG", decompression_bomb_png())
    data = (root / f"{WNIDS[0]}.tar").read_bytes()
    write_class_tars(tmp_path / "tmp", {WNIDS[1]: [(f"a{n}.JPEG", jpeg(n)) for n in range(3)]})
    whole = tmp_path / "tmp" / f"{WNIDS[1]}.tar"
    with tarfile.open(whole) as tf:
        second = tf.getmember("a1.JPEG").offset_data
    (root / f"{WNIDS[1]}.tar").write_bytes(whole.read_bytes()[: second + 100])  # the first member whole, the second cut
    import gzip

    (root / f"{WNIDS[2]}.tar.gz").write_bytes(gzip.compress(data))
    out = add_source("hostile", str(root), layout="class-tars")
    got = {i.relative_path: (i.status, i.error_code) for i in Image.objects.filter(source__name="hostile")}
    codes = sorted(code for _s, code in got.values())
    assert got[f"{WNIDS[0]}.tar/good.JPEG"] == ("ok", "")
    assert got[f"{WNIDS[1]}.tar/a0.JPEG"] == ("ok", "")
    expected = {"unsafe_member_name": 2, "link_member": 2, "not_a_regular_file": 1, "duplicate_member": 1, "file_too_large": 1,
                "not_an_image": 1, "decompression_bomb": 1, "compressed_archive": 1,
                "truncated_archive": 2}  # the member cut off, and the end of the archive
    for code, n in expected.items():
        assert codes.count(code) == n, (code, got)
    assert "gunzip -k" in Image.objects.get(source__name="hostile", error_code="compressed_archive").error
    assert "broken or refused" in out
    assert outside.read_text() == "secret" and sorted(os.listdir(tmp_path)) == sorted(["hostile", "outside.txt", "tmp"])

    # a Parquet file of another schema: refused whole, in one line naming the columns
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq_root = tmp_path / "foreign"
    pq_root.mkdir()
    pq.write_table(pa.table({"text": ["a", "b"], "score": [1, 2]}), pq_root / "x.parquet")
    add_source("foreign", str(pq_root), layout="parquet")
    refused = Image.objects.get(source__name="foreign")
    assert refused.error_code == "foreign_schema" and "--image-column" in refused.error
    assert Image.objects.filter(source__name="foreign").count() == 1


def test_published_lists_become_sources_of_just_their_images(tmp_path):
    # an OpenOOD imglist and a NINCO file_list.csv over a folder root, as their releases ship them
    large = tmp_path / "images_largescale"
    files = {}
    for k, cls in enumerate(("iceberg", "sunset", "dune")):
        for n in range(3):
            rel = f"ninco/NINCO_OOD_classes/{cls}/{cls}_{n}.jpg"
            files[rel] = jpeg(10 * k + n)
            (large / rel).parent.mkdir(parents=True, exist_ok=True)
            (large / rel).write_bytes(files[rel])
    listed = sorted(files)[:6]
    imglist = tmp_path / "test_ninco.txt"
    imglist.write_text("".join(f"{p} -1\n" for p in listed) + "ninco/NINCO_OOD_classes/dune/gone.jpg -1\n../../etc/passwd -1\n")
    out = add_source("openood-ninco", str(large), list_path=str(imglist), list_format="openood")
    got = rows("openood-ninco")
    ok = {p for p, i in got.items() if i.status == Image.Status.OK}
    assert ok == set(listed)
    assert {i.error_code for p, i in got.items() if p not in ok} == {"listed_not_found", "bad_list_line"}
    assert {got[p].candidate_class.folder for p in ok} <= {"iceberg", "sunset", "dune"}
    source = Source.objects.get(name="openood-ninco")
    assert source.layout_options["list"]["sha256"] == sha(imglist.read_bytes()) and "sha256" in out

    ninco = tmp_path / "file_list.csv"
    ninco.write_text("image_location,class\n" + "".join(f"{p.removeprefix('ninco/')},{p.split('/')[2]}\n" for p in listed[:4]))
    add_source("ninco-list", str(large / "ninco"), list_path=str(ninco), list_format="ninco")
    assert {i.relative_path for i in rows("ninco-list").values() if i.status == "ok"} == {p.removeprefix("ninco/") for p in listed[:4]}

    # ImageNet-OOD's release: <wnid>/<wnid>_<n>.JPEG over ImageNet-21K's per-class tars (only the named tars are read)
    w21 = tmp_path / "w21"
    write_class_tars(w21, {w: [(f"{w}_{n}.JPEG", jpeg(n + 5 * k)) for n in range(5)] for k, w in enumerate(WNIDS)})
    paths = tmp_path / "imagenet_ood.txt"
    paths.write_text(f"{WNIDS[0]}/{WNIDS[0]}_1.JPEG\n{WNIDS[0]}/{WNIDS[0]}_3.JPEG\n{WNIDS[1]}/{WNIDS[1]}_0.JPEG\n")
    add_source("inood", str(w21), layout="class-tars", list_path=str(paths), list_format="paths")
    assert set(rows("inood")) == {f"{WNIDS[0]}.tar/{WNIDS[0]}_1.JPEG", f"{WNIDS[0]}.tar/{WNIDS[0]}_3.JPEG", f"{WNIDS[1]}.tar/{WNIDS[1]}_0.JPEG"}
    assert Job.objects.filter(source__name="inood").latest("pk").result["archives"] == 2


def test_bad_layout_input_is_one_line(tmp_path):
    (tmp_path / "empty").mkdir()
    for kwargs, needle in [({"layout": "wds", "opt_wnid_list": str(tmp_path / "nope.txt")}, "--wnid-list"),
                           ({"list_path": str(tmp_path / "nope.txt"), "list_format": "openood"}, "--list"),
                           ({"list_format": "ninco"}, "--list-format needs --list")]:
        with pytest.raises(CommandError) as exc:
            add_source("bad", str(tmp_path / "empty"), **kwargs)
        assert needle in str(exc.value) and "\n" not in str(exc.value)
    assert not Source.objects.filter(name="bad").exists()


def _pool_in(form: str, tmp_path: Path) -> tuple[Path, dict, dict[str, bytes]]:
    """The same 12 photos-sized images in ``form``: (root, add_source options, member path -> bytes).
    The class-tars pool is audited as a published list names it (ImageNet-OOD's form:
    <wnid>/<file>), with one member left out."""
    root = tmp_path / "pool"
    images = [(w, f"img_{k}_{n:04d}", jpeg(20 * k + n, (200, 150))) for k, w in enumerate(KEPT_CLASSES) for n in range(4)]
    if form == "class-tars":
        members = write_class_tars(root, {w: [(f"{stem}.JPEG", d) for c, stem, d in images if c == w] for w in KEPT_CLASSES})
        listed = sorted(members)[1:]
        (tmp_path / "published.txt").write_text("".join(p.replace(".tar/", "/") + "\n" for p in listed))
        return root, {"layout": form, "list_path": str(tmp_path / "published.txt"), "list_format": "paths"}, {p: members[p] for p in listed}
    if form == "wds":
        written = write_wds_shards(root, [(stem, d, w, KEPT_CLASSES.index(w)) for w, stem, d in images], per_shard=5)
    else:
        written = write_hf_parquet(root, [(f"{stem}.JPEG", d, w) for w, stem, d in images], names=list(KEPT_CLASSES), shards=2)
    return root, {"layout": form}, {p: data for p, (data, _cls) in written.items()}


def _rewrite_member(form: str, root: Path, img: Image) -> None:
    """Other bytes for one member, where it lies: a tar rewritten in place at the same size, a
    Parquet file written again with that row's image changed."""
    if form != "parquet":
        tar = root / img.container
        blob = bytearray(tar.read_bytes())
        blob[img.offset + 100] ^= 0xFF  # same size, other bytes: nothing but the hash can tell
        tar.write_bytes(bytes(blob))
        return
    import pyarrow.parquet as pq

    table = pq.read_table(root / img.container)
    rows = table.to_pylist()
    rows[img.offset]["image"]["bytes"] = jpeg(999, (200, 150))
    import pyarrow as pa

    pq.write_table(pa.Table.from_pylist(rows, schema=table.schema), root / img.container)


@pytest.mark.parametrize("form", ["class-tars", "wds", "parquet"])
def test_an_archive_source_is_reviewed_and_exported_byte_for_byte_and_a_changed_member_is_never_shown(form, tmp_path, settings, client):
    settings.EXPORT_ROOT = tmp_path / "exports"
    settings.THUMBNAIL_DIR = tmp_path / "thumbs"
    call_command("set_id_classes", "imagenet-1k", stdout=io.StringIO())
    root, options, members = _pool_in(form, tmp_path)
    add_source("pool", str(root), **options)
    source = Source.objects.get(name="pool")
    n = len(members)
    assert Image.objects.filter(source=source, status="ok").count() == n
    fake_predictions(source)
    review_queue_sync(source=source)
    assert ReviewItem.objects.filter(source=source).count() == n
    from tests.test_exports import random_features, run_export, user

    random_features(source)
    # reviewed on the grid, as an annotator would: each page's thumbnails come out of the archive
    client.force_login(user("ann", "annotator"))
    page, decided = client.get("/api/review/grid/next?size=6").json(), set()
    while page["tiles"]:
        for t in page["tiles"]:
            thumb = client.get(f"/images/{t['image']}/thumb")
            assert thumb.status_code == 200 and b"".join(thumb.streaming_content if thumb.streaming else [thumb.content])[:3] == b"\xff\xd8\xff"
            decided.add(t["image"])
        marks = [{"assignment": t["assignment"], "decision": "ood"} for t in page["tiles"]]
        r = client.post("/api/review/grid/submit", json.dumps({"marks": marks, "size": 6, "seconds": 1.0}), content_type="application/json")
        assert r.status_code == 200, r.content
        page = r.json()
    assert len(decided) == n
    export, out = run_export(name="from-archive", sources=["pool"])
    assert export.status == Export.Status.DONE, out
    export_root = Path(settings.EXPORT_ROOT) / "from-archive" / "v1"
    by_id = {i.pk: i for i in Image.objects.filter(source=source)}
    exported = list(ExportMember.objects.filter(export=export))
    assert len(exported) == n
    for m in exported:
        for layout in ("ninco", "imagenet-ood", "openood"):
            assert (export_root / m.files[layout]).read_bytes() == members[by_id[m.image_id].relative_path]
    decisions = (export_root / "decisions.csv").read_text()
    assert all(p in decisions for p in members)  # provenance names the archive and the member
    datasheet = (export_root / "README.md").read_text()
    assert f"read as `{form}`" in datasheet
    if form == "class-tars":
        assert "published.txt" in datasheet and hashlib.sha256((tmp_path / "published.txt").read_bytes()).hexdigest() in datasheet

    # the image page names the archive and the member (and the list an audited source came from)
    img = by_id[min(by_id)]
    client.force_login(user("cur", "curator"))
    detail = client.get(f"/curate/images/{img.pk}/").content.decode()
    assert f"<code>{img.container}</code>" in detail and f"<code>{img.member}</code>" in detail and img.relative_path == f"{img.container}/{img.member}"
    if form == "class-tars":
        assert "published.txt" in detail
    # thumbnails and the full view come from the archive; a member rewritten in place is refused
    path, ctype = rendition(img, "thumb")
    assert path.is_file() and ctype == "image/jpeg"
    _rewrite_member(form, root, img)
    with pytest.raises(MemberChanged):
        img.ref().read()
    with pytest.raises(RenditionError, match="changed since ingest"):
        rendition(img, "view")
    export2, out2 = run_export(name="after-change", sources=["pool"])
    assert img.pk not in set(ExportMember.objects.filter(export=export2).values_list("image_id", flat=True))
    rows = {r["image_id"]: r for r in csv.DictReader(open(Path(settings.EXPORT_ROOT) / "after-change" / "v1" / "decisions.csv"))}
    assert "changed_since_ingest" in rows[str(img.pk)]["excluded_reason"], rows[str(img.pk)]


def test_auditing_a_published_list_ends_in_a_certificate(tmp_path, settings):
    """docs/sources.md's audit: a published list over ImageNet-21K's tars becomes a source, its
    images are reviewed as served, and the certification bounds the contamination of the rest."""
    settings.EXPORT_ROOT = tmp_path / "exports"
    call_command("set_id_classes", "imagenet-1k", stdout=io.StringIO())
    root = tmp_path / "w21"
    members = write_class_tars(root, {w: [(f"{w}_{n}.JPEG", jpeg(40 * k + n)) for n in range(20)] for k, w in enumerate(KEPT_CLASSES)})
    (tmp_path / "imagenet_ood.txt").write_text("".join(p.replace(".tar/", "/") + "\n" for p in sorted(members)[::2]))
    add_source("audit", str(root), layout="class-tars", list_path=str(tmp_path / "imagenet_ood.txt"), list_format="paths")
    source = Source.objects.get(name="audit")
    assert Image.objects.filter(source=source, status="ok").count() == 30
    fake_predictions(source, similarity_step=0.02)
    review_queue_sync(source=source)
    out = io.StringIO()
    call_command("certify", "plan", source="audit", strata=2, pilot=3, target=0.2, seed=7, stdout=out)
    assert "plan" in out.getvalue() and "30 undecided images" in out.getvalue(), out.getvalue()
    from tests.test_exports import review_all, user

    review_all(user("ann", "annotator"), lambda img: ("ood", []))
    status = io.StringIO()
    call_command("certify", "status", source="audit", stdout=status)
    assert "remainder" in status.getvalue() and "bound" in status.getvalue(), status.getvalue()


@pytest.mark.parametrize("fmt", [tarfile.GNU_FORMAT, tarfile.PAX_FORMAT, tarfile.USTAR_FORMAT])
def test_the_fast_header_reader_reads_what_tarfile_reads(tmp_path, fmt):
    """pipelines/sources/layouts/_tar.py reads headers itself (tarfile's Python is 5x slower on
    webdataset's pax shards); every member, name, kind, offset and size must be tarfile's own."""
    from pipelines.sources.layouts._tar import _fast_headers, _tarfile_headers

    path = tmp_path / "a.tar"
    with tarfile.open(path, "w", format=fmt) as tf:
        for name, data in [("plain.JPEG", jpeg(1)), ("d" * 90 + "/" + "e" * 60 + ".jpg", jpeg(2)), ("x" * 99 + ".jpg", b"x" * 513),
                           ("empty.txt", b""), ("sub/ä-é.png", jpeg(3))]:
            if fmt == tarfile.USTAR_FORMAT and len(name.encode()) > 100 and "/" not in name:
                continue  # ustar cannot hold a long name without a folder to split at
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
        for name, kind, link in [("folder/", tarfile.DIRTYPE, ""), ("sym.jpg", tarfile.SYMTYPE, "/etc/passwd"),
                                 ("hard.jpg", tarfile.LNKTYPE, "plain.JPEG"), ("fifo", tarfile.FIFOTYPE, "")]:
            info = tarfile.TarInfo(name)
            info.type, info.linkname = kind, link
            tf.addfile(info)
    fast = list(_fast_headers(str(path)))
    assert fast == list(_tarfile_headers(str(path))) and len(fast) >= 8
    # webdataset's own shards (pax headers for every member)
    shards = tmp_path / "wds"
    write_wds_shards(shards, [(f"k{i}", jpeg(i), WNIDS[0], 0) for i in range(7)], per_shard=7)
    shard = str(next(shards.glob("*.tar")))
    assert list(_fast_headers(shard)) == list(_tarfile_headers(shard))
    # a header whose checksum does not add up is not read as one (tarfile then says what is wrong)
    raw = bytearray(Path(shard).read_bytes())
    raw[5] ^= 0x01
    bad = tmp_path / "bad.tar"
    bad.write_bytes(bytes(raw))
    with pytest.raises(ValueError, match="checksum"):
        list(_fast_headers(str(bad)))


def test_neighbouring_archive_members_are_read_together_with_the_bytes_reading_each_gives(tmp_path, monkeypatch):
    """Ingest reads a chunk's members of a shard in one read per run of neighbours
    (pipelines.sources.layouts.prefetch_members): the same bytes as reading each alone, one open
    per container, and a member the archive no longer holds gets the error reading it alone gives."""
    import builtins

    from pipelines.sources.layouts import MemberUnreadable, prefetch_members, read_member

    root = tmp_path / "wds"
    samples = [(f"{WNIDS[i % 3]}_{i}", jpeg(i), WNIDS[i % 3], i % 3) for i in range(30)]
    write_wds_shards(root, samples, per_shard=12)
    add_source("pre", str(root), layout="wds")
    refs = [i.ref() for i in Image.objects.filter(source__name="pre").select_related("source").order_by("?")]
    opened: list[str] = []
    real_open = builtins.open

    def counting_open(file, *a, **kw):
        opened.append(str(file))
        return real_open(file, *a, **kw)

    monkeypatch.setattr(builtins, "open", counting_open)
    got = prefetch_members(refs)
    monkeypatch.setattr(builtins, "open", real_open)
    assert set(got) == set(range(len(refs)))
    assert all(got[k] == read_member(r) for k, r in enumerate(refs))
    assert sorted(opened) == sorted(str(root / s) for s in {r.container for r in refs})  # one open per shard
    # the last shard cut short: its members past the cut get read_member's own error, the rest their bytes
    last = max({r.container for r in refs})
    cut = root / last
    data = cut.read_bytes()
    cut.write_bytes(data[: len(data) // 2])
    got = prefetch_members(refs)
    for k, r in enumerate(refs):
        if r.container == last and r.offset + r.size > len(data) // 2:
            assert isinstance(got[k], MemberUnreadable) and "short of the member" in str(got[k])
        else:
            assert got[k] == read_member(r)
    # a Parquet source's rows come out of their row groups at once, the same bytes as one by one
    names = sorted({w for _k, _d, w, _l in samples})
    write_hf_parquet(tmp_path / "pq", [(f"{k}.JPEG", d, w) for k, d, w, _l in samples], names=names, shards=2)
    add_source("pq", str(tmp_path / "pq"), layout="parquet")
    prefs = [i.ref() for i in Image.objects.filter(source__name="pq").select_related("source").order_by("?")]
    got = prefetch_members(prefs)
    assert set(got) == set(range(len(prefs))) and all(got[k] == read_member(r) for k, r in enumerate(prefs))
    # a folder source's members are left to read_member (threads overlap their opens)
    (tmp_path / "f" / WNIDS[0]).mkdir(parents=True)
    (tmp_path / "f" / WNIDS[0] / "a.jpg").write_bytes(jpeg(1))
    add_source("plain", str(tmp_path / "f"))
    assert prefetch_members([Image.objects.get(source__name="plain").ref()]) == {}
