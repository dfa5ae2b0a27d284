"""The demo's real photos: the curated stamp table against WordNet 3.0 and the installed package,
the composites, and the one-line error when the Debian packages are missing."""
from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest

from fixtures import real_photos
from fixtures.real_photos import BACKGROUNDS, STAMPS_DIR, TABLE, RealPhotosUnavailable, composite, plant, stamp_table


def test_every_row_names_a_wordnet_noun_with_its_lemma(wn):
    rows = stamp_table()
    assert len(rows) >= 200 and len({r.wnid for r in rows}) >= 150
    assert len({r.path for r in rows}) == len(rows)  # a stamp is mapped once
    for r in rows:
        synset = wn.synset_from_pos_and_offset("n", int(r.wnid[1:]))
        assert r.lemma in synset.lemma_names(), (r.path, r.wnid, r.lemma, synset.lemma_names())


def test_the_table_holds_no_package_text():
    with open(TABLE, newline="", encoding="utf-8") as fh:
        header = next(csv.reader(line for line in fh if not line.startswith("#")))
    assert header == ["stamp", "wnid", "lemma"]  # paths and the mapping only; descriptions are read from the package


def test_the_id_classes_it_can_offer_are_imagenet_classes_and_the_rest_are_not(wn):
    from pipelines.classes.imagenet import named_list

    id_wnids = set(named_list("imagenet-1k"))
    wnids = {r.wnid for r in stamp_table()}
    # enough ImageNet-1K classes to choose 20+ ID classes from, and enough others for the pool
    assert len(wnids & id_wnids) >= 40 and len(wnids - id_wnids) >= 100


@pytest.mark.skipif(not STAMPS_DIR.is_dir(), reason="tuxpaint-stamps-default is not installed (scripts/setup.sh installs it)")
def test_every_stamp_and_background_is_where_the_packages_put_them():
    from PIL import Image

    for r in stamp_table():
        with Image.open(STAMPS_DIR / r.path) as im:
            assert max(im.size) >= 100 and im.mode in ("RGBA", "LA", "P"), r.path  # cut-outs with transparency
    for name, (_pkg, file) in BACKGROUNDS.items():
        assert Path(file).is_file(), name


@pytest.mark.skipif(not STAMPS_DIR.is_dir(), reason="tuxpaint-stamps-default is not installed (scripts/setup.sh installs it)")
def test_composites_are_seeded_and_keep_the_object_in_the_frame():
    from PIL import Image

    cache = real_photos._Cache()
    stamp = next(s for s in stamp_table() if s.path.endswith("zebra.png"))
    bg = cache.background("wood")
    a = composite(cache.stamp(stamp), bg, np.random.default_rng(3))
    b = composite(cache.stamp(stamp), bg, np.random.default_rng(3))
    assert np.array_equal(np.asarray(a), np.asarray(b))
    assert a.mode == "RGB" and 256 <= a.height <= 400 and a.width in (a.height, round(a.height * 4 / 3), round(a.height * 3 / 4))
    # the object changed the background: a plain crop of the same place differs from the composite
    plain = composite(Image.new("RGBA", (10, 10), (0, 0, 0, 0)), bg, np.random.default_rng(3))
    changed = np.abs(np.asarray(a, dtype=int) - np.asarray(plain, dtype=int)).sum(axis=2) > 30
    assert 0.1 < changed.mean() < 0.9
    # planting pastes a second object into a corner and leaves the size alone
    planted = plant(a, cache.stamp(stamp), np.random.default_rng(4))
    assert planted.size == a.size and not np.array_equal(np.asarray(planted), np.asarray(a))


def test_missing_packages_give_one_line_naming_the_install_command(monkeypatch, tmp_path):
    monkeypatch.setattr(real_photos, "STAMPS_DIR", tmp_path / "nowhere")
    with pytest.raises(RealPhotosUnavailable) as err:
        real_photos.check_installed()
    msg = str(err.value)
    assert "\n" not in msg and "apt-get install tuxpaint-stamps-default" in msg and "tuxpaint-stamps-default" in msg.split("fix:")[0]


@pytest.mark.slow
@pytest.mark.skipif(not STAMPS_DIR.is_dir(), reason="tuxpaint-stamps-default is not installed (scripts/setup.sh installs it)")
def test_the_recorded_calibration_is_what_the_model_measures():
    """fixtures/id_calibration.json (benchmarks/calibrate_demo_classes.py) holds what the model
    measures on the seeded calibration composites: re-measured here for three classes of Lite0."""
    from fixtures.real_photos import calibration_set, recorded_calibration
    from pipelines.classes.imagenet import named_list
    from pipelines.features.classifiers import load_model, top1_wnids

    recorded = recorded_calibration("efficientnet_lite0", per_class=6, seed=7919)
    assert recorded is not None, "fixtures/id_calibration.json is stale: run benchmarks/calibrate_demo_classes.py"
    assert recorded_calibration("efficientnet_lite2", per_class=6, seed=7919) is not None
    images, truth = calibration_set(stamp_table(), set(named_list("imagenet-1k")), per_class=6, seed=7919)
    lm = load_model("efficientnet_lite0", device="cpu")
    for wnid in sorted(set(truth))[:3]:
        mine = [im for im, t in zip(images, truth) if t == wnid]
        predicted = top1_wnids(lm, mine)
        assert recorded[wnid] == sum(p == wnid for p in predicted) / len(mine), wnid
