"""Issue 62, rows 10 and 14: renditions are keyed by the member's verified hash. An exact
duplicate is a readable file and is shown (thumbnail, view, full) from its own bytes, read through
the checked path; a broken or missing file keeps its 404 with the reason; a member changed in
place after its renditions were made is refused (409, re-run add_source), never served old."""
from __future__ import annotations

import io
import os
import shutil
from pathlib import Path

import pytest
from django.core.management import call_command
from PIL import Image as PILImage

from curation.models import Image
from curation.services.renditions import RenditionChanged, rendition
from fixtures.archives import write_class_tars
from tests.conftest import make_image_folder, real_photo
from tests.test_exports import user

pytestmark = pytest.mark.django_db


def add_source(name: str, root: Path, **kw) -> None:
    call_command("add_source", name, str(root), stdout=io.StringIO(), stderr=io.StringIO(), **kw)


def body(r) -> bytes:
    return b"".join(r.streaming_content) if r.streaming else r.content


def edit_in_place(path: Path, at: int, recorded_mtime_ns: int) -> None:
    """Other bytes at the same size, as an in-place edit makes them (its mtime moves on: set
    explicitly, so a coarse clock cannot leave it equal to ingest's)."""
    blob = bytearray(path.read_bytes())
    blob[at] ^= 0xFF
    path.write_bytes(bytes(blob))
    os.utime(path, ns=(recorded_mtime_ns + 2_000_000_000, recorded_mtime_ns + 2_000_000_000))


def test_an_exact_duplicate_is_shown_and_broken_or_missing_files_keep_their_404(tmp_path, client, role_groups):
    root = tmp_path / "pool"
    written = make_image_folder(root, n_good=4, classes=["n09308572"], size=(80, 60))
    photo = real_photo("astronaut.png").read_bytes()
    (root / "n09308572" / "a_photo.png").write_bytes(photo)
    (root / "n09308572" / "z_copy.png").write_bytes(photo)  # same bytes: the later path is the duplicate
    (root / "n09308572" / "broken.jpg").write_bytes(b"\xff\xd8 not a jpeg")
    gone = sorted(written)[0]
    add_source("pool", root)
    (root / gone).unlink()
    add_source("pool", root)  # the rescan marks it missing
    rows = {i.relative_path: i for i in Image.objects.filter(source__name="pool").select_related("source")}
    dup, kept = rows["n09308572/z_copy.png"], rows["n09308572/a_photo.png"]
    assert dup.status == Image.Status.DUPLICATE and dup.duplicate_of_id == kept.pk
    assert rows["n09308572/broken.jpg"].status == Image.Status.BROKEN and rows[gone].status == Image.Status.MISSING

    client.force_login(user("cur", "curator"))
    for variant in ("thumb", "view", "full"):
        r = client.get(f"/images/{dup.pk}/{variant}")
        assert r.status_code == 200, (variant, r.content[:200])
        data = body(r)
        if variant == "full":
            assert data == photo  # its own bytes, as ingested
        else:
            with PILImage.open(io.BytesIO(data)) as im:
                assert im.format == "JPEG" and max(im.size) <= {"thumb": 224, "view": 1400}[variant]
    thumbs = client.get("/api/images/thumbs", {"ids": f"{dup.pk},{rows['n09308572/broken.jpg'].pk}"}).json()
    assert str(dup.pk) in thumbs["thumbs"] and "broken or refused" in thumbs["missing"][str(rows["n09308572/broken.jpg"].pk)]
    for rel, why in (("n09308572/broken.jpg", "not a readable image (broken or refused)"), (gone, "not a readable image (missing on disk)")):
        for variant in ("thumb", "full"):
            r = client.get(f"/images/{rows[rel].pk}/{variant}")
            assert r.status_code == 404 and why in r.content.decode(), (rel, variant, r.content)

    # the duplicate is read through its own file, checked against the ingest hash
    (root / "n09308572" / "z_copy.png").write_bytes(photo[:-1] + bytes([photo[-1] ^ 0xFF]))
    r = client.get(f"/images/{dup.pk}/full")
    assert r.status_code == 409 and "re-run add_source" in r.content.decode()
    assert client.get(f"/images/{kept.pk}/full").status_code == 200  # the one it copies is untouched


@pytest.mark.parametrize("where", ["archive", "folder"])
def test_a_member_changed_after_its_renditions_were_made_is_refused_not_served_old(where, tmp_path, client, role_groups):
    root = tmp_path / "pool"
    if where == "archive":
        jpegs = []
        with PILImage.open(real_photo("astronaut.png")) as im:
            for quality in (90, 70):
                buf = io.BytesIO()
                im.convert("RGB").resize((256, 256)).save(buf, "JPEG", quality=quality)
                jpegs.append(buf.getvalue())
        members = write_class_tars(root, {"n09308572": [("a.JPEG", jpegs[0]), ("b.JPEG", jpegs[1])]})
        add_source("pool", root, layout="class-tars")
    else:
        members = make_image_folder(root, n_good=2, classes=["n09308572"], seed=3, size=(120, 90))
        members = {p: d for p, d in members.items() if p.endswith(".jpg")} or members
        add_source("pool", root)
    rel = sorted(members)[0]
    img = Image.objects.select_related("source").get(source__name="pool", relative_path=rel)
    assert img.status == Image.Status.OK, img.error
    holder = root / (img.container or img.relative_path)

    client.force_login(user("cur", "curator"))
    etags = {}
    for variant in ("thumb", "full"):  # made and cached from the verified bytes
        r = client.get(f"/images/{img.pk}/{variant}")
        assert r.status_code == 200, r.content[:200]
        etags[variant] = r["ETag"]
        if variant == "full":
            assert body(r) == members[rel]
    cached = {v: rendition(img, v)[0] for v in ("thumb", "full")}
    assert all(img.sha256 in p.name for p in cached.values())  # keyed by the ingest hash

    # touched, same bytes: re-verified and still served
    st = holder.stat()
    os.utime(holder, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    assert client.get(f"/images/{img.pk}/thumb").status_code == 200

    edit_in_place(holder, max(img.offset, 0) + 200, img.mtime_ns)
    for variant in ("thumb", "full", "view"):
        r = client.get(f"/images/{img.pk}/{variant}")
        assert r.status_code == 409, (variant, r.status_code)
        assert "changed since ingest" in r.content.decode() and "re-run add_source" in r.content.decode()
        # nor a 304 telling the browser its old copy is still good
        if variant in etags:
            assert client.get(f"/images/{img.pk}/{variant}", HTTP_IF_NONE_MATCH=etags[variant]).status_code == 409
    assert all(p.is_file() for p in cached.values())  # the old renditions are still there, unserved
    with pytest.raises(RenditionChanged, match="changed since ingest"):
        rendition(img, "thumb")
    missing = client.get("/api/images/thumbs", {"ids": str(img.pk)}).json()["missing"]
    assert "changed since ingest" in missing[str(img.pk)]

    # re-running add_source takes the new bytes in: a new hash, new renditions
    add_source("pool", root, **({"layout": "class-tars"} if where == "archive" else {}))
    img.refresh_from_db()
    if img.status == Image.Status.OK:
        r = client.get(f"/images/{img.pk}/full")
        assert r.status_code == 200 and body(r) == holder.read_bytes()[max(img.offset, 0):max(img.offset, 0) + img.bytes]
        assert rendition(img, "thumb")[0] != cached["thumb"]
    shutil.rmtree(root)
