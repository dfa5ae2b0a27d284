"""Every export layout loads, unchanged, in the client it is named after (issue 36).

Real loaders where the client is a package here: torchvision's ImageFolder, pytorch-ood 0.4.0
(``NINCO``, ``ImageListDataset``) and Hugging Face ``datasets`` 5.2.0 (imagefolder). NINCO's and
OpenOOD's own readers are not packages; their list contracts are checked by readers written
here from their code:

- NINCO, github.com/j-cb/NINCO at 92fe0c67de6f6211e052a3d55ac44f7c31167810, ``datasets.py``
  ``ImageCSVDataset``: a CSV with a header row of 1 or 2 columns (else ValueError); the first
  column a location joined to ``paths_prefix`` (the unpacked ``NINCO`` folder), the second the
  class; ``NINCO_OOD_classes.csv`` (data/, at 11bf339e) has the header ``image_location,class``.
- OpenOOD, github.com/Jingkang50/OpenOOD: ``openood/evaluation_api/datasets.py`` at
  c1e7f4c8a75014edd399681aa024df50f4af3c09 joins ``data_root`` with a ``DATA_INFO`` entry's
  ``imglist_path`` and ``data_dir``; ``openood/datasets/imglist_dataset.py`` at
  03b665f16f288555645b7f1a324494c7b3ec60a5 splits each line once at ``' '``, joins the first
  part to ``data_dir`` (refusing a leading ``/``) and reads the label with ``ast.literal_eval``.
"""
from __future__ import annotations

import ast
import csv
import hashlib
import io
import os
import re
import sys
import types
from pathlib import Path

import pytest
from django.conf import settings
from django.core.management import call_command

from curation.models import ExportMember
from curation.services.review import review_cache_clear
from tests.test_exports import reviewed_pool, run_export

pytestmark = pytest.mark.django_db

# what NINCO's release calls its 17 unit tests (j-cb/NINCO data/NINCO_class_names.csv at 73476cbd,
# the rows whose benchmark status is "unit test")
NINCO_UNIT_TEST_NAMES = {"uni", "Gaussian", "Rademacher", "pixel_perm", "white", "black", "grey", "monochrome", "tricolour",
                         "tricolour_primary", "horizontal_stripes", "vertical_stripes", "low_freq", "low_freq_channelfullscale",
                         "low_freq_colorrange", "low_freq_pixel_perm", "blobs"}


@pytest.fixture(autouse=True)
def export_root(tmp_path, settings, monkeypatch):
    settings.EXPORT_ROOT = tmp_path / "exports"
    settings.FEATURE_STORE = tmp_path / "features"
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "hf-cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    review_cache_clear()
    yield settings.EXPORT_ROOT
    review_cache_clear()


def sha(path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def ninco_csv_reader(image_table_csv: Path, paths_prefix: Path, name: str | None = None) -> list[tuple[str, str]]:
    """(path, class) as NINCO's ImageCSVDataset builds its samples (see the module docstring)."""
    with open(image_table_csv) as fh:
        reader = csv.reader(fh)
        columns = len(next(reader, None))  # the header
        if columns == 1:
            table = {row[0]: name for row in reader}
        elif columns == 2:
            table = {row[0]: row[1] for row in reader}
        else:
            raise ValueError("The csv should have 1 or 2 columns.")
    return [(os.path.join(paths_prefix, loc), c) for loc, c in table.items()]


def openood_imglist_reader(imglist_pth: str, data_dir: str) -> list[tuple[str, int]]:
    """(path, label) as OpenOOD's ImglistDataset reads each line (see the module docstring)."""
    out = []
    with open(imglist_pth) as fh:
        for line in fh.readlines():
            line = line.strip("\n")
            image_name, extra = line.split(" ", 1)
            if data_dir != "" and image_name.startswith("/"):
                raise RuntimeError('image_name starts with "/"')
            value = ast.literal_eval(extra)
            label = value["label"] if isinstance(value, dict) else int(extra)
            out.append((os.path.join(data_dir, image_name), label))
    return out


def python_blocks(readme: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", readme, flags=re.S)


def reviewed_shards(tmp_path, n=15):
    """``reviewed_pool``'s images shipped as WebDataset shards (webdataset's TarWriter) and read in
    place (issue 44): every export layout must carry the archive members' bytes unchanged."""
    from django.contrib.auth.models import Group, User

    from curation.models import Source
    from curation.services.review import review_queue_sync
    from fixtures.archives import folder_to_wds
    from tests.review_data import fake_predictions, write_candidates
    from tests.test_exports import random_features, review_all

    call_command("set_id_classes", "imagenet-1k", stdout=io.StringIO())
    write_candidates(tmp_path / "files", n)
    folder_to_wds(tmp_path / "files", tmp_path / "shards", per_shard=4)
    call_command("add_source", "pool", str(tmp_path / "shards"), layout="wds", stdout=io.StringIO(), stderr=io.StringIO())
    source = Source.objects.get(name="pool")
    assert source.images.filter(status="ok").count() == n and all(".tar/" in p for p in source.images.values_list("relative_path", flat=True))
    fake_predictions(source)
    review_queue_sync(source=source)
    random_features(source)
    annotator = User.objects.create_user("ann", password="pw")
    annotator.groups.add(Group.objects.get(name="annotator"))
    decided = review_all(annotator, lambda img: ("id", ["n02123045"]) if img.pk % 5 == 1 else ("ood", []))
    return source, decided


@pytest.fixture(params=["folder", "wds"])
def export(request, tmp_path):
    source, decided = (reviewed_pool if request.param == "folder" else reviewed_shards)(tmp_path, n=15)
    export, out = run_export(name="Clients-1", sources=[source.name], difficulty_split="median")
    assert export.status == "done", out
    root = Path(settings.EXPORT_ROOT) / "Clients-1" / "v1"
    members = list(ExportMember.objects.filter(export=export))
    return root, {m.sha256: m.wnid for m in members}


def test_ninco_layout_loads_in_nincos_reader_pytorch_ood_torchvision_and_hf(export, monkeypatch):
    from datasets import load_dataset
    from pytorch_ood.dataset.img import NINCO
    from torchvision.datasets import ImageFolder

    root, expected = export
    n = len(expected)
    release = root / "ninco" / "NINCO"
    # NINCO's own reader: every listed file is there, every image is listed, classes are the folders
    samples = ninco_csv_reader(release / "file_list.csv", release)
    assert len(samples) == n and all(Path(p).is_file() for p, _c in samples)
    assert {sha(p) for p, _c in samples} == set(expected)
    assert all(Path(p).parent.name == c for p, c in samples)
    hard = ninco_csv_reader(release / "file_list_hard.csv", release)
    easy = ninco_csv_reader(release / "file_list_easy.csv", release)
    assert hard and easy and sorted(hard + easy) == sorted(samples)
    # only class folders inside the class tree (pytorch-ood lists every entry there as a class)
    assert all(p.is_dir() for p in (release / "NINCO_OOD_classes").iterdir())
    # pytorch-ood 0.4.0: NINCO(root) reads root/NINCO/NINCO_OOD_classes/<class>/<file>; its check
    # for NINCO's downloaded archive is the user's one line, as the README says
    monkeypatch.setattr(NINCO, "_check_integrity", lambda self: True)
    ds = NINCO(root=str(root / "ninco"))
    assert len(ds) == n and {sha(f) for f in ds.files} == set(expected)
    img, label = ds[0]
    assert label == -1 and img.size[0] > 0
    # torchvision
    folder = ImageFolder(str(release / "NINCO_OOD_classes"))
    assert len(folder) == n and folder[n - 1][0].size[0] > 0
    # Hugging Face: metadata.csv (file_name outside the image tree) labels every image
    hf = load_dataset("imagefolder", data_dir=str(root / "ninco"), split="train")
    assert hf.num_rows == n
    assert sorted(zip(hf["sha256"], hf["wnid"])) == sorted(expected.items())
    assert hf[0]["image"].size[0] > 0


def test_openood_layout_is_a_drop_in_for_openoods_data_root(export):
    from datasets import load_dataset
    from pytorch_ood.dataset.img import ImageListDataset
    from torchvision.datasets import ImageFolder

    root, expected = export
    n = len(expected)
    data_root = root / "openood"
    readme = (root / "README.md").read_text()
    # the README's DATA_INFO snippet, run against OpenOOD's table as it stands (a stub module
    # holding its 'imagenet' entry's shape), then read as its evaluation API reads it
    snippet = next(b for b in python_blocks(readme) if "DATA_INFO" in b)
    DATA_INFO = {"imagenet": {"num_classes": 1000, "ood": {"near": {"datasets": ["ssb_hard", "ninco"]}, "far": {"datasets": []}}}}
    stub = types.ModuleType("openood.evaluation_api.datasets")
    stub.DATA_INFO = DATA_INFO
    for name in ("openood", "openood.evaluation_api"):
        sys.modules.setdefault(name, types.ModuleType(name))
    sys.modules["openood.evaluation_api.datasets"] = stub
    try:
        exec(snippet, {})
    finally:
        for name in ("openood.evaluation_api.datasets", "openood.evaluation_api", "openood"):
            sys.modules.pop(name, None)
    near = DATA_INFO["imagenet"]["ood"]["near"]
    assert near["datasets"][-1] == "clients_1"
    entry = near["clients_1"]
    lines = openood_imglist_reader(os.path.join(data_root, entry["imglist_path"]), os.path.join(data_root, entry["data_dir"]))
    assert len(lines) == n and all(label == -1 for _p, label in lines)
    assert {sha(p) for p, _label in lines} == set(expected)
    # the list relative to openood/ itself, and the sub-splits
    assert sorted(p for p, _l in openood_imglist_reader(data_root / "imglist.txt", str(data_root))) == sorted(p for p, _l in lines)
    parts = [openood_imglist_reader(data_root / "benchmark_imglist" / "imagenet" / f"test_clients_1_{s}.txt", str(data_root / "images_largescale"))
             for s in ("hard", "easy")]
    assert sorted(parts[0] + parts[1]) == sorted(lines)
    # pytorch-ood 0.4.0's reader of OpenOOD lists
    ds = ImageListDataset(root=str(data_root / "images_largescale"),
                          imglist_path=str(data_root / "benchmark_imglist" / "imagenet" / "test_clients_1.txt"))
    assert len(ds) == n and set(ds.labels) == {-1} and ds[0][0].size[0] > 0
    # torchvision and Hugging Face on the set's own folder: one class per wnid
    folder = ImageFolder(str(data_root / "images_largescale" / "clients_1"))
    assert len(folder) == n and set(folder.classes) == set(expected.values())
    hf = load_dataset("imagefolder", data_dir=str(data_root / "images_largescale" / "clients_1"), split="train")
    assert hf.num_rows == n and set(hf.features["label"].names) == set(expected.values())


def test_imagenet_ood_layout_and_the_readmes_code_runs(export, monkeypatch):
    from datasets import load_dataset
    from pytorch_ood.dataset.img import NINCO
    from torchvision.datasets import ImageFolder

    root, expected = export
    n = len(expected)
    lines = (root / "imagenet-ood" / "imagenetood.txt").read_text().splitlines()
    assert lines == (root / "imagenet-ood" / "file_list.txt").read_text().splitlines() and len(lines) == n
    assert all(re.fullmatch(r"n\d{8}/[^/]+", line) and (root / "imagenet-ood" / line).is_file() for line in lines)
    assert {sha(root / "imagenet-ood" / line) for line in lines} == set(expected)
    assert {line.split("/")[0] for line in lines} == set(expected.values())  # the wnid is the folder
    assert len(ImageFolder(str(root / "imagenet-ood"))) == n
    hf = load_dataset("imagefolder", data_dir=str(root / "imagenet-ood"), split="train")
    assert hf.num_rows == n and set(hf.features["label"].names) == set(expected.values())
    # every loading snippet in the README runs from the export's folder as written, but NINCO's
    # own (its datasets.py is not a package; checked by the reader above) and OpenOOD's (above)
    monkeypatch.chdir(root)
    monkeypatch.setattr(NINCO, "_check_integrity", NINCO._check_integrity)  # the README's line patches it: undone after the test
    ran = 0
    for block in python_blocks((root / "README.md").read_text()):
        if "ImageCSVDataset" in block or "DATA_INFO" in block:
            continue
        scope: dict = {}
        exec(block, scope)
        assert len(scope["ood"]) == n, block
        ran += 1
    assert ran == 7  # ninco: pytorch-ood, torchvision, HF; imagenet-ood: torchvision, HF; openood: pytorch-ood, HF


def test_unit_tests_carry_nincos_two_column_list_under_nincos_names(tmp_path):
    from datasets import load_dataset
    from torchvision.datasets import ImageFolder

    from tests.conftest import real_photo

    ids = tmp_path / "ids" / "n07920052"
    ids.mkdir(parents=True)
    (ids / "coffee.png").write_bytes(Path(real_photo("coffee.png")).read_bytes())
    out = tmp_path / "ut"
    call_command("make_unit_tests", out=str(out), per_test=2, id_images=str(tmp_path / "ids"), stdout=io.StringIO(), stderr=io.StringIO())
    samples = ninco_csv_reader(out / "file_list.csv", out)
    assert len(samples) == 34 and all(Path(p).is_file() for p, _c in samples)
    assert {c for _p, c in samples} == NINCO_UNIT_TEST_NAMES
    names = dict(csv.reader(open(out / "ninco_names.csv")))
    assert names.pop("test") == "ninco_name" and set(names.values()) == NINCO_UNIT_TEST_NAMES
    assert all(names[Path(p).parent.name] == c for p, c in samples)
    assert names["uniform_noise"] == "uni" and names["smooth_noise"] == "low_freq" and names["pixel_permutation"] == "pixel_perm"
    assert len(ImageFolder(str(out))) == 34
    assert load_dataset("imagefolder", data_dir=str(out), split="train").num_rows == 34


@pytest.mark.parametrize("form", ["folder", "wds"])
def test_hf_layout_writes_parquet_shards_that_load_dataset_reads(tmp_path, form):
    from datasets import load_dataset

    source, decided = (reviewed_pool if form == "folder" else reviewed_shards)(tmp_path, n=15)
    export, out = run_export(name="tables", sources=[source.name], layouts=["hf"], difficulty_split="median")
    assert export.status == "done", out
    root = Path(settings.EXPORT_ROOT) / "tables" / "v1"
    members = {m.image_id: m for m in ExportMember.objects.filter(export=export)}
    assert members and not (root / "ninco").exists() and sorted(p.name for p in (root / "hf" / "data").iterdir()) == ["test-00000-of-00001.parquet"]
    ds = load_dataset("parquet", data_files=str(root / "hf" / "data" / "*.parquet"), split="train")
    assert ds.num_rows == len(members)
    assert ds.features["label"].names == sorted({m.wnid for m in members.values()})
    for row in ds:
        m = members[row["image_id"]]
        assert row["wnid"] == m.wnid == ds.features["label"].int2str(row["label"])
        assert row["sha256"] == m.sha256 and row["source"] == "pool" and row["source_path"].endswith(row["original_file"])
        assert row["image"].size[0] > 0 and row["difficulty"] in ("easy", "hard")
    # the bytes are the source's, byte for byte, and decisions.csv says which images are in
    raw = load_dataset("parquet", data_files=str(root / "hf" / "data" / "*.parquet"), split="train").cast_column(
        "image", __import__("datasets").Image(decode=False))
    assert {hashlib.sha256(r["image"]["bytes"]).hexdigest() for r in raw} == {m.sha256 for m in members.values()}
    rows = list(csv.DictReader(open(root / "decisions.csv")))
    assert sum(r["exported"] == "yes" for r in rows) == len(members)
    # verify_export passes (the shards are checksummed; no image files are counted for a table layout)
    said = io.StringIO()
    call_command("verify_export", str(root), stdout=said, stderr=io.StringIO())
    assert "OK" in said.getvalue()
    assert "load_dataset(\"parquet\", data_files=\"hf/data/*.parquet\"" in (root / "README.md").read_text()
