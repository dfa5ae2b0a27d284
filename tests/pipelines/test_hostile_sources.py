"""Hostile sources at the stage level, no database (issue 62, "Nothing silent", rows 2 to 5): a
fifo named like a container, tar headers that stop making sense, pax records that lie, names
longer than the database holds, a list of one endless line. Each is refused with a reason code
and the scan goes on; nothing hangs and nothing is lost without a row saying so."""
from __future__ import annotations

import contextlib
import io
import os
import signal
import tarfile
import threading
import time
import tracemalloc
from collections.abc import Iterator
from pathlib import Path

import pytest

from fixtures.archives import write_class_tars, write_hf_parquet, write_wds_shards
from pipelines.sources.layouts import LayoutError, MemberRef, MemberUnreadable, NotRegularFile, open_regular, read_member
from pipelines.sources.layouts.lists import LIST_LINE_LIMIT, read_path_list, scan_layout
from pipelines.sources.walk import MAX_CLASS_CHARS, MAX_PATH_CHARS

WNID = "n01440764"
JPEG = b"\xff\xd8\xff\xe0" + b"jpeg bytes " * 30  # the scan never decodes: any bytes will do


@contextlib.contextmanager
def deadline(seconds: float) -> Iterator[None]:
    """Fails the test (instead of hanging the run) when the block takes longer than ``seconds``:
    SIGALRM interrupts a blocked open() of a fifo."""
    def expired(signum, frame):
        raise TimeoutError(f"still running after {seconds} s (blocked on a fifo?)")

    old = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


@contextlib.contextmanager
def fifo_watch(*fifos: Path, after: float = 5.0) -> Iterator[list[str]]:
    """Gives a reader blocked on one of ``fifos`` (an open that waits for a writer) an empty
    stream after ``after`` seconds, and says which were opened so: SIGALRM alone cannot undo
    that wait (pyarrow retries an interrupted open). The list yielded is empty when nothing
    opened a fifo."""
    opened: list[str] = []
    stop = threading.Event()

    def watch() -> None:
        if stop.wait(after):
            return
        while not stop.is_set():
            for fifo in fifos:
                try:
                    fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)  # ENXIO while no reader waits
                except OSError:
                    continue
                opened.append(str(fifo))
                os.close(fd)
            stop.wait(0.2)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    try:
        yield opened
    finally:
        stop.set()
        thread.join()


def scan(layout: str, root: Path, options: dict | None = None):
    with deadline(20):
        return scan_layout(layout, root, options or {})


def codes(result) -> dict[str, str]:
    return {r.rel_path: r.code for r in result.refused}


# --- row 2: a fifo named like a container --------------------------------------------------------

@pytest.mark.parametrize("layout, fifo", [("class-tars", f"{WNID}.tar"), ("wds", "shard-0000.tar"),
                                          ("parquet", "data/train-00000.parquet")])
def test_a_fifo_named_like_a_container_is_refused_and_the_scan_goes_on(tmp_path, layout, fifo):
    root = tmp_path / "root"
    if layout == "class-tars":
        good = set(write_class_tars(root, {"n01443537": [("a.JPEG", JPEG), ("b.JPEG", JPEG)]}))
    elif layout == "wds":
        good = set(write_wds_shards(root, [("k0", _jpeg(), "n01443537", 0), ("k1", _jpeg(), "n01443537", 0)], per_shard=2,
                                    prefix="shard-good"))
    else:
        good = set(write_hf_parquet(root, [("a.JPEG", _jpeg(), "dune"), ("b.JPEG", _jpeg(), "dune")], names=["dune"],
                                    split="good"))
    (root / fifo).parent.mkdir(parents=True, exist_ok=True)
    os.mkfifo(root / fifo)
    with fifo_watch(root / fifo) as opened:
        result = scan(layout, root)
    assert not opened, "the scan opened the fifo and waited on it"
    assert {m.path for m in result.members} == good
    assert codes(result) == {fifo: "not_a_regular_file"}
    assert "not a regular file" in result.refused[0].message and "fifo" in result.refused[0].message


def test_a_container_is_opened_only_as_a_regular_file(tmp_path):
    os.mkfifo(tmp_path / "pipe.tar")
    with fifo_watch(tmp_path / "pipe.tar", after=2) as opened, pytest.raises(NotRegularFile, match="not a regular file"):
        open_regular(tmp_path / "pipe.tar")
    assert not opened
    (tmp_path / "plain.tar").write_bytes(b"x" * 10)
    with open_regular(tmp_path / "plain.tar") as fh:
        assert fh.read() == b"x" * 10 and os.get_blocking(fh.fileno())
    # a member whose archive became a fifo after ingest: refused at once, not read forever
    ref = MemberRef("class-tars", str(tmp_path), "pipe.tar/a.JPEG", container="pipe.tar", offset=512, size=10)
    with fifo_watch(tmp_path / "pipe.tar", after=2) as opened, pytest.raises(MemberUnreadable, match="not a regular file"):
        read_member(ref)
    assert not opened


def _jpeg() -> bytes:
    import numpy as np

    from fixtures.images import jpeg_bytes, pattern_image

    rng = np.random.default_rng(0)
    return jpeg_bytes(pattern_image(rng, "dots", [(10, 20, 30), (200, 100, 50), (0, 0, 0)], (32, 24)))


# --- row 3: tar headers that stop making sense, pax records that lie ----------------------------

def _block(data: bytes) -> bytes:
    return data + b"\0" * (-len(data) % 512)


def _member(name: str, data: bytes, *, size: int | None = None) -> bytes:
    info = tarfile.TarInfo(name)
    info.size = len(data) if size is None else size
    info.mtime, info.mode = 1_600_000_000, 0o644
    return info.tobuf(tarfile.USTAR_FORMAT) + _block(data)


def _pax(records: dict[str, str] | bytes) -> bytes:
    """A pax extended header (typeflag x) holding ``records`` ("<length> <key>=<value>\\n"), or
    the raw payload given."""
    payload = records if isinstance(records, bytes) else b"".join(_record(k, v) for k, v in records.items())
    info = tarfile.TarInfo("././@PaxHeader")
    info.type, info.size = tarfile.XHDTYPE, len(payload)
    return info.tobuf(tarfile.USTAR_FORMAT) + _block(payload)


def _record(key: str, value: str) -> bytes:
    body = f" {key}={value}\n".encode()
    n = len(body) + 1
    while len(str(n).encode()) + len(body) != n:
        n += 1
    return str(n).encode() + body


END = b"\0" * 1024


def _tar(root: Path, name: str, *parts: bytes) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / name).write_bytes(b"".join(parts))
    return root / name


def test_a_broken_header_refuses_the_archives_tail_as_one_item_with_its_size(tmp_path):
    root = tmp_path / "root"
    good = _member("a.JPEG", JPEG)
    bad = bytearray(_member("b.JPEG", JPEG))
    bad[0] ^= 0x01  # the name changed, the checksum not: a header that does not add up
    path = _tar(root, f"{WNID}.tar", good, bytes(bad), _member("c.JPEG", JPEG), _member("d.JPEG", JPEG), END)
    result = scan("class-tars", root)
    assert [m.path for m in result.members] == [f"{WNID}.tar/a.JPEG"]
    (tail,) = result.refused
    assert (tail.rel_path, tail.code, tail.class_folder) == (f"{WNID}.tar#tail", "bad_tar_header", WNID)
    left = path.stat().st_size - len(good)
    assert f"after byte {len(good)} is unreadable (bad header checksum)" in tail.message
    assert f"about {left:,} bytes not read" in tail.message and "1 member" in tail.message


def test_the_tail_is_refused_when_tarfile_reads_the_archive_too(tmp_path):
    """A global pax header sends the archive to tarfile (the fast reader leaves those to it):
    tarfile stops at a bad header as if the archive ended there; the tail is refused all the same."""
    root = tmp_path / "root"
    bad = bytearray(_member("b.JPEG", JPEG))
    bad[0] ^= 0x01
    glob = tarfile.TarInfo("././@PaxHeader")
    payload = _record("comment", "made by hand")
    glob.type, glob.size = tarfile.XGLTYPE, len(payload)
    good = glob.tobuf(tarfile.USTAR_FORMAT) + _block(payload) + _member("a.JPEG", JPEG)
    _tar(root, f"{WNID}.tar", good, bytes(bad), _member("c.JPEG", JPEG), END)
    result = scan("class-tars", root)
    assert [m.path for m in result.members] == [f"{WNID}.tar/a.JPEG"]
    assert codes(result) == {f"{WNID}.tar#tail": "bad_tar_header"}
    assert f"after byte {len(good)}" in result.refused[0].message


@pytest.mark.parametrize("records, why", [
    ({"size": "abc"}, "pax size record"),
    ({"size": "-5"}, "pax size record"),
    (b"99 size=12\n", "does not fit"),  # a record longer than the header holds
    (b"x size=12\n", "no length"),
    ({"path": "x\0y.JPEG"}, "NUL"),
    (b"x" * (2 << 20), "more than the 1,048,576"),  # an extended header of 2 MiB: never read into memory
])
def test_a_member_whose_pax_records_lie_is_refused_and_the_members_after_it_are_read(tmp_path, records, why):
    root = tmp_path / "root"
    first = _member("a.JPEG", JPEG)
    _tar(root, f"{WNID}.tar", first, _pax(records), _member("b.JPEG", JPEG), _member("c.JPEG", JPEG), END)
    result = scan("class-tars", root)
    assert [m.path for m in result.members] == [f"{WNID}.tar/a.JPEG", f"{WNID}.tar/c.JPEG"]
    (refused,) = result.refused
    assert refused.code == "bad_pax_record" and refused.rel_path == f"{WNID}.tar#{len(first)}"
    assert why in refused.message and "b.JPEG" in refused.message


def test_a_pax_path_that_is_not_utf8_is_refused(tmp_path):
    root = tmp_path / "root"
    body = b" path=caf\xe9.JPEG\n"
    payload = str(len(body) + 2).encode() + body
    _tar(root, f"{WNID}.tar", _pax(payload), _member("b.JPEG", JPEG), _member("c.JPEG", JPEG), END)
    result = scan("class-tars", root)
    assert [m.path for m in result.members] == [f"{WNID}.tar/c.JPEG"]
    assert list(codes(result).values()) == ["bad_pax_record"] and "not UTF-8" in result.refused[0].message


def test_good_pax_records_are_still_read(tmp_path):
    root = tmp_path / "root"
    long = "d" * 150 + "/photo.JPEG"
    _tar(root, f"{WNID}.tar", _pax({"path": long, "size": str(len(JPEG)), "mtime": "1600000000.5"}), _member("short", JPEG),
         _member("c.JPEG", JPEG), END)
    result = scan("class-tars", root)
    assert [m.path for m in result.members] == [f"{WNID}.tar/{long}", f"{WNID}.tar/c.JPEG"] and not result.refused


def test_a_webdataset_shard_with_a_broken_header_says_so(tmp_path):
    root = tmp_path / "wds"
    write_wds_shards(root, [(f"k{i}", _jpeg(), "n01443537", 0) for i in range(4)], per_shard=4)
    shard = next(root.glob("*.tar"))
    with tarfile.open(shard) as tf:
        third = [m for m in tf.getmembers() if m.name.startswith("k2")][0].offset
    raw = bytearray(shard.read_bytes())
    raw[third + 148] ^= 0x07  # the checksum field itself
    shard.write_bytes(bytes(raw))
    result = scan("wds", root)
    assert sorted(m.path.rsplit("/", 1)[1] for m in result.members) == ["k0.jpg", "k1.jpg"]
    assert list(codes(result).values()) == ["bad_tar_header"] and "bytes not read" in result.refused[0].message


# --- row 4: names longer than the database column ------------------------------------------------

def test_a_3000_character_pax_path_is_refused_at_scan_time_naming_the_limit(tmp_path):
    root = tmp_path / "root"
    long = "x" * 2990 + ".JPEG"
    root.mkdir()
    with tarfile.open(root / f"{WNID}.tar", "w", format=tarfile.PAX_FORMAT) as tf:
        for name in ("a.JPEG", long, "c.JPEG"):
            info = tarfile.TarInfo(name)
            info.size = len(JPEG)
            tf.addfile(info, io.BytesIO(JPEG))
    result = scan("class-tars", root)
    assert [m.path for m in result.members] == [f"{WNID}.tar/a.JPEG", f"{WNID}.tar/c.JPEG"]
    (refused,) = result.refused
    assert refused.code == "name_too_long" and f"{MAX_PATH_CHARS:,}" in refused.message and "3,009 characters" in refused.message
    assert len(refused.rel_path) <= MAX_PATH_CHARS and refused.rel_path.startswith(f"{WNID}.tar/xxx")
    assert refused.class_folder == WNID
    # the same name twice gives the same row (a rescan updates it, never a second one)
    assert scan("class-tars", root).refused[0].rel_path == refused.rel_path


def test_a_folder_file_deeper_than_the_column_is_refused(tmp_path):
    root = tmp_path / "root"
    deep = root / WNID
    for i in range(5):
        deep = deep / (f"{i}" * 240)
    deep.mkdir(parents=True)
    (deep / "x.JPEG").write_bytes(JPEG)
    (root / WNID / "ok.JPEG").write_bytes(JPEG)
    result = scan("folder", root)
    assert [m.path for m in result.members] == [f"{WNID}/ok.JPEG"]
    assert list(codes(result).values()) == ["name_too_long"] and all(len(r.rel_path) <= MAX_PATH_CHARS for r in result.refused)


def test_a_class_name_longer_than_its_column_is_refused(tmp_path):
    import json

    root = tmp_path / "wds"
    root.mkdir()
    with tarfile.open(root / "shard-0000.tar", "w") as tf:
        for key, cls in (("k0", "n01443537"), ("k1", "c" * (MAX_CLASS_CHARS + 1))):
            for ext, data in (("jpg", JPEG), ("json", json.dumps({"class_name": cls}).encode())):
                info = tarfile.TarInfo(f"{key}.{ext}")
                info.size = len(data)
                tf.addfile(info, io.BytesIO(data))
    result = scan("wds", root)
    assert [m.path for m in result.members] == ["shard-0000.tar/k0.jpg"]
    assert codes(result) == {"shard-0000.tar/k1.jpg": "name_too_long"} and f"{MAX_CLASS_CHARS:,}" in result.refused[0].message
    assert result.class_keys == ["n01443537"]


def test_a_list_entry_longer_than_the_column_is_a_bad_line(tmp_path):
    listing = tmp_path / "list.txt"
    listing.write_text(f"{WNID}/a.JPEG\n{WNID}/{'y' * 1100}.JPEG\n")
    got = read_path_list(listing, "paths")
    assert [e for e, _c in got.entries] == [f"{WNID}/a.JPEG"]
    assert [(r.rel_path, r.code) for r in got.bad] == [("list.txt#line2", "bad_list_line")] and "1,024" in got.bad[0].message


# --- row 5: a list of one endless line -----------------------------------------------------------

def test_a_list_of_one_endless_line_is_refused_at_once_without_reading_it_into_memory(tmp_path):
    listing = tmp_path / "huge.txt"
    with open(listing, "wb") as fh:
        block = b"n01440764/n01440764_1.JPEG " * 40_000  # ~1 MB, no newline
        for _ in range(40):
            fh.write(block)
    size = listing.stat().st_size
    assert size > 40_000_000
    tracemalloc.start()
    started = time.perf_counter()
    try:
        with pytest.raises(LayoutError) as exc:
            read_path_list(listing, "paths")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    took = time.perf_counter() - started
    message = str(exc.value)
    assert "\n" not in message and str(listing) in message and "line 1" in message and f"{LIST_LINE_LIMIT:,}" in message
    assert peak < 1_000_000 < size // 40, peak  # a line's worth, not the file
    assert took < 2.0, took


def test_a_long_line_further_down_names_its_line_and_a_normal_list_still_reads(tmp_path):
    listing = tmp_path / "l.txt"
    listing.write_bytes(b"\xef\xbb\xbf" + b"a/1.JPEG\r\n# a comment\n\nb/2.JPEG\n" + b"c" * (LIST_LINE_LIMIT + 5) + b"\n")
    with pytest.raises(LayoutError, match="line 5 is longer than"):
        read_path_list(listing, "paths")
    listing.write_bytes(b"\xef\xbb\xbf" + b"a/1.JPEG\r\n# a comment\n\nb/2.JPEG\nc/3.JPEG")
    got = read_path_list(listing, "paths")
    import hashlib

    assert got.entries == [("a/1.JPEG", ""), ("b/2.JPEG", ""), ("c/3.JPEG", "")]
    assert got.sha256 == hashlib.sha256(listing.read_bytes()).hexdigest()
    ninco = tmp_path / "file_list.csv"
    ninco.write_text('image_location,class\n"x/1.jpg",dune\n\ny/2.jpg,iceberg\n')
    assert read_path_list(ninco, "ninco").entries == [("x/1.jpg", "dune"), ("y/2.jpg", "iceberg")]
    os.mkfifo(tmp_path / "pipe.txt")
    with fifo_watch(tmp_path / "pipe.txt", after=2) as opened, pytest.raises(LayoutError, match="not a regular file"):
        read_path_list(tmp_path / "pipe.txt", "paths")
    assert not opened
