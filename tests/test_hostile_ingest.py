"""Hostile sources through add_source and the database (issue 62, "Nothing silent", rows 2 to
5): a fifo named like a container, a tar whose headers stop making sense or whose pax records
lie, a member path longer than its column (PostgreSQL refuses such an insert; run with
DATABASE_URL to see it), a list of one endless line. Every bad item is a row with its reason
code, the ingest goes on, and bad input is one line."""
from __future__ import annotations

import io
import os
import tarfile
import time

import numpy as np
import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from curation.models import CandidateClass, Image, Source
from fixtures.archives import write_class_tars, write_hf_parquet, write_wds_shards
from fixtures.images import jpeg_bytes, pattern_image
from pipelines.sources.walk import MAX_CLASS_CHARS, MAX_PATH_CHARS
from tests.pipelines.test_hostile_sources import deadline, fifo_watch

pytestmark = pytest.mark.django_db

WNIDS = ["n09308572", "n11517776"]


def jpeg(i: int) -> bytes:
    rng = np.random.default_rng(i)
    palette = [tuple(int(c) for c in rng.integers(0, 255, 3)) for _ in range(3)]
    return jpeg_bytes(pattern_image(rng, ("dots", "stripes", "checker", "blobs")[i % 4], palette, (64, 48)))


def add_source(*args, **kw) -> str:
    out, err = io.StringIO(), io.StringIO()
    with deadline(120):
        call_command("add_source", *args, stdout=out, stderr=err, **kw)
    return out.getvalue() + err.getvalue()


def rows(name: str) -> dict[str, tuple[str, str]]:
    return {i.relative_path: (i.status, i.error_code) for i in Image.objects.filter(source__name=name)}


@pytest.mark.parametrize("layout, fifo", [("class-tars", "n01440764.tar"), ("wds", "shard-0000.tar"),
                                          ("parquet", "train-00000.parquet")])
def test_add_source_refuses_a_fifo_named_like_a_container_and_goes_on(tmp_path, layout, fifo):
    root = tmp_path / "root"
    if layout == "class-tars":
        good = write_class_tars(root, {WNIDS[0]: [(f"a{n}.JPEG", jpeg(n)) for n in range(3)]})
    elif layout == "wds":
        good = write_wds_shards(root, [(f"k{n}", jpeg(n), WNIDS[0], 0) for n in range(3)], per_shard=3, prefix="shard-good")
    else:
        good = write_hf_parquet(root, [(f"a{n}.JPEG", jpeg(n), "dune") for n in range(3)], names=["dune"], split="good")
    os.mkfifo(root / fifo)
    with fifo_watch(root / fifo) as opened:
        out = add_source("fifo", str(root), layout=layout)
    assert not opened, "add_source opened the fifo and waited on it"
    got = rows("fifo")
    assert got.pop(fifo) == ("broken", "not_a_regular_file")
    assert got == {p: ("ok", "") for p in good}
    assert "not_a_regular_file" in out and "fifo" in out


def _member(name: str, data: bytes) -> bytes:
    info = tarfile.TarInfo(name)
    info.size, info.mtime, info.mode = len(data), 1_600_000_000, 0o644
    return info.tobuf(tarfile.USTAR_FORMAT) + data + b"\0" * (-len(data) % 512)


def _pax_size(value: str) -> bytes:
    body = f" size={value}\n".encode()
    payload = str(len(body) + 2).encode() + body
    info = tarfile.TarInfo("././@PaxHeader")
    info.type, info.size = tarfile.XHDTYPE, len(payload)
    return info.tobuf(tarfile.USTAR_FORMAT) + payload + b"\0" * (-len(payload) % 512)


def test_a_broken_header_and_a_lying_pax_size_leave_rows_with_their_reasons(tmp_path):
    root = tmp_path / "root"
    root.mkdir()
    first = _member("a.JPEG", jpeg(1))
    bad = bytearray(_member("c.JPEG", jpeg(3)))
    bad[0] ^= 0x01  # a header whose checksum no longer adds up
    (root / f"{WNIDS[0]}.tar").write_bytes(first + _member("b.JPEG", jpeg(2)) + bytes(bad) + _member("d.JPEG", jpeg(4)) + bytes(1024))
    lying = _pax_size("abc")
    other = _member("a.JPEG", jpeg(5))
    (root / f"{WNIDS[1]}.tar").write_bytes(other + lying + _member("b.JPEG", jpeg(6)) + _member("c.JPEG", jpeg(7)) + bytes(1024))
    add_source("broken", str(root), layout="class-tars")
    got = rows("broken")
    assert got == {
        f"{WNIDS[0]}.tar/a.JPEG": ("ok", ""), f"{WNIDS[0]}.tar/b.JPEG": ("ok", ""),
        f"{WNIDS[0]}.tar#tail": ("broken", "bad_tar_header"),
        f"{WNIDS[1]}.tar/a.JPEG": ("ok", ""), f"{WNIDS[1]}.tar#{len(other)}": ("broken", "bad_pax_record"),
        f"{WNIDS[1]}.tar/c.JPEG": ("ok", ""),
    }
    tail = Image.objects.get(source__name="broken", error_code="bad_tar_header")
    assert "bytes not read" in tail.error and tail.candidate_class.folder == WNIDS[0]
    assert "'abc' is not a number of bytes" in Image.objects.get(source__name="broken", error_code="bad_pax_record").error


def test_the_name_limits_are_the_columns_own():
    assert Image._meta.get_field("relative_path").max_length == MAX_PATH_CHARS
    assert Image._meta.get_field("container").max_length == MAX_PATH_CHARS
    assert CandidateClass._meta.get_field("folder").max_length == MAX_CLASS_CHARS


def test_a_member_path_longer_than_its_column_is_refused_before_the_insert(tmp_path):
    root = tmp_path / "root"
    root.mkdir()
    long = "x" * 3000 + ".JPEG"
    with tarfile.open(root / f"{WNIDS[0]}.tar", "w", format=tarfile.PAX_FORMAT) as tf:
        for n, name in enumerate(("a.JPEG", long, "c.JPEG")):
            data = jpeg(n)
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    add_source("long", str(root), layout="class-tars")  # PostgreSQL refused the whole chunk before
    got = rows("long")
    assert all(len(p) <= MAX_PATH_CHARS for p in got)
    assert sorted(got.values()) == [("broken", "name_too_long"), ("ok", ""), ("ok", "")]
    refused = Image.objects.get(source__name="long", error_code="name_too_long")
    assert "3,019 characters" in refused.error and f"{MAX_PATH_CHARS:,}" in refused.error
    add_source("long", str(root), layout="class-tars")  # a rescan finds the same row again: nothing missing, nothing twice
    assert rows("long") == got


def test_a_list_of_one_endless_line_is_refused_in_one_line_at_once(tmp_path):
    (tmp_path / "root" / WNIDS[0]).mkdir(parents=True)
    listing = tmp_path / "huge.txt"
    with open(listing, "wb") as fh:
        for _ in range(30):
            fh.write(b"n09308572/n09308572_1.JPEG " * 40_000)
    started = time.perf_counter()
    with pytest.raises(CommandError) as exc:
        add_source("endless", str(tmp_path / "root"), list_path=str(listing), list_format="paths")
    assert time.perf_counter() - started < 5
    message = str(exc.value)
    assert "\n" not in message and "--list" in message and "line 1 is longer than" in message and str(listing) in message
    assert not Source.objects.filter(name="endless").exists()
