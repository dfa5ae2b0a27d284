"""Walking sources safely and mapping class folders (real WordNet 3.0, no database)."""
import os

import pytest

from pipelines.classes.folders import ClassMapError, map_class_folders, read_class_map
from pipelines.sources.walk import SafeJoiner, UnsafePath, safe_join, scan_source


def test_scan_lists_files_in_class_folders_and_refuses_what_must_not_be_read(tmp_path):
    root = tmp_path / "src"
    (root / "n01440764" / "sub").mkdir(parents=True)
    (root / "n01440764" / "a.jpg").write_bytes(b"a")
    (root / "n01440764" / "sub" / "b.jpg").write_bytes(b"b")
    (root / "café").mkdir()
    (root / "café" / "日本.jpg").write_bytes(b"c")
    (root / "loose.jpg").write_bytes(b"d")
    secret = tmp_path / "secret.jpg"
    secret.write_bytes(b"s")
    os.symlink(secret, root / "café" / "escape.jpg")
    os.symlink(root / "n01440764" / "a.jpg", root / "café" / "inside_link.jpg")
    os.symlink(root / "n01440764", root / "café" / "dirlink")
    os.mkdir(os.fsencode(root / "café") + b"/bad_\xff")
    open(os.fsencode(root / "café") + b"/bad_\xfe.jpg", "wb").close()

    scan = scan_source(root)
    assert scan.class_folders == ["café", "n01440764"]
    assert {f.rel_path for f in scan.files} == {"n01440764/a.jpg", "n01440764/sub/b.jpg", "café/日本.jpg", "café/inside_link.jpg"}
    assert all(f.class_folder in {"café", "n01440764"} for f in scan.files)
    refused = {r.rel_path: r.code for r in scan.refused}
    assert refused["café/escape.jpg"] == "path_escapes_root"
    assert refused["café/dirlink"] == "symlinked_directory"
    assert refused["loose.jpg"] == "not_in_class_folder"
    assert sorted(c for p, c in refused.items() if "bad_" in p) == ["undecodable_name", "undecodable_name"]
    assert str(secret) in next(r.message for r in scan.refused if r.rel_path == "café/escape.jpg")


def test_safe_join_refuses_paths_that_leave_the_root(tmp_path):
    (tmp_path / "cls").mkdir()
    (tmp_path / "cls" / "ok.jpg").write_bytes(b"x")
    assert safe_join(tmp_path, "cls/ok.jpg") == tmp_path / "cls" / "ok.jpg"
    for bad in ["../etc/passwd", "/etc/passwd", "cls/../../x", ""]:
        with pytest.raises(UnsafePath):
            safe_join(tmp_path, bad)
    os.symlink("/etc/passwd", tmp_path / "cls" / "pw.jpg")
    with pytest.raises(UnsafePath, match="outside the source root"):
        safe_join(tmp_path, "cls/pw.jpg")


def test_the_many_files_joiner_refuses_what_safe_join_refuses(tmp_path):
    root = tmp_path / "root"
    (root / "cls").mkdir(parents=True)
    (root / "cls" / "ok.jpg").write_bytes(b"x")
    (tmp_path / "outside").mkdir()
    os.symlink(tmp_path / "outside", root / "linked")  # a folder that leads out
    os.symlink("/etc/passwd", root / "cls" / "pw.jpg")  # a file that leads out
    os.symlink(root / "cls" / "ok.jpg", root / "cls" / "inside.jpg")  # a link that stays in
    join = SafeJoiner(root)
    for rel in ["cls/ok.jpg", "cls/inside.jpg", "cls/missing.jpg", "cls/./ok.jpg", "top.jpg"]:
        assert join(rel) == str(safe_join(root, rel)), rel
    for rel in ["../etc/passwd", "/etc/passwd", "cls/../../x", "", "cls/pw.jpg", "linked/a.jpg", "cls/a\x00.jpg"]:
        with pytest.raises(UnsafePath):
            safe_join(root, rel)
        with pytest.raises(UnsafePath):
            join(rel)


def test_class_folders_map_by_wnid_class_map_and_unambiguous_lemma(wn, tmp_path):
    cm = tmp_path / "map.csv"
    cm.write_text("folder,wnid\nevening_glow,n11517776\n", encoding="utf-8")
    mapping = {m.folder: m for m in map_class_folders(
        ["n02084071", "hayfield", "Polka-Dot", "crane", "n99999999", "evening_glow", "asdfgh"], wn, read_class_map(cm, wn)
    )}
    assert (mapping["n02084071"].wnid, mapping["n02084071"].method, mapping["n02084071"].name) == ("n02084071", "wnid_folder", "dog.n.01")
    assert (mapping["hayfield"].wnid, mapping["hayfield"].method) == ("n08570634", "lemma")
    assert mapping["Polka-Dot"].wnid == "n03978300"
    assert mapping["evening_glow"].method == "class_map" and mapping["evening_glow"].wnid == "n11517776"
    assert mapping["crane"].method == "unmapped" and "ambiguous" in mapping["crane"].note
    assert mapping["n99999999"].method == "unmapped" and "not a WordNet 3.0 noun" in mapping["n99999999"].note
    assert mapping["asdfgh"].method == "unmapped"
    assert "domestic dog" in " ".join(mapping["n02084071"].lemmas).replace("_", " ")


def test_class_map_errors_name_the_file_and_line(wn, tmp_path):
    cm = tmp_path / "bad.csv"
    cm.write_text("folder,wnid\nok,n02084071\nbroken,n99999999\n", encoding="utf-8")
    with pytest.raises(ClassMapError, match=r"bad.csv, line 3: 'n99999999' is not a WordNet 3.0 noun id"):
        read_class_map(cm, wn)
    cm.write_text("a,n02084071\na,n02123159\n", encoding="utf-8")
    with pytest.raises(ClassMapError, match="line 2: folder 'a' is mapped twice"):
        read_class_map(cm, wn)
