"""Near-duplicate grouping: transformed copies of real photos join their originals, distinct
photos stay apart (real model features); the approximate index finds planted pairs."""
from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from fixtures.images import DISTINCT_REAL_PHOTOS, transformed_copies
from pipelines.features.extract import extract
from pipelines.features.near_dups import DEFAULT_THRESHOLD, group_near_duplicates, knn, nearest
from tests.conftest import real_photo


@pytest.mark.slow
def test_transformed_copies_group_with_their_originals_and_distinct_photos_stay_apart(lite0, tmp_path):
    paths, photo_of = [], []
    for i, (pkg, name) in enumerate(DISTINCT_REAL_PHOTOS[:10]):
        src = real_photo(name, pkg)
        paths.append(str(src))
        photo_of.append(i)
        with Image.open(src) as im:
            for t, data in list(transformed_copies(im).items())[:4]:  # resize, JPEG q25, crop 85%, mirror
                p = tmp_path / f"{i}_{t}"
                p.write_bytes(data)
                paths.append(str(p))
                photo_of.append(i)
    ex = extract(lite0, paths, batch_size=16)
    sizes = []
    for p in paths:
        with Image.open(p) as im:
            sizes.append(im.width * im.height)
    g = group_near_duplicates(ex.features, threshold=DEFAULT_THRESHOLD, priority=[(-s, i) for i, s in enumerate(sizes)])
    groups = {}
    for i, grp in enumerate(g.group_of):
        groups.setdefault(grp, set()).add(photo_of[i])
    assert len(groups) == 10, groups  # one group per photo ...
    assert all(len(members) == 1 for members in groups.values())  # ... never two photos in one
    for grp, rep in enumerate(g.representative):
        assert paths[rep] in {str(real_photo(n, pkg)) for pkg, n in DISTINCT_REAL_PHOTOS[:10]}  # the largest: the original
        assert g.similarity[rep] == 1.0


def test_exact_and_approximate_index_find_planted_near_duplicates():
    rng = np.random.default_rng(0)
    centres = rng.normal(size=(20, 64)).astype(np.float32)
    x = centres[rng.integers(0, 20, size=3000)] + 0.6 * rng.normal(size=(3000, 64)).astype(np.float32)
    planted = rng.choice(3000, size=(50, 2), replace=False)
    x[planted[:, 1]] = x[planted[:, 0]] + 0.02 * rng.normal(size=(50, 64)).astype(np.float32)
    exact = group_near_duplicates(x, threshold=0.98)
    approx = group_near_duplicates(x, threshold=0.98, exact_below=1000, nprobe=8)
    for g in (exact, approx):
        assert all(g.group_of[a] == g.group_of[b] for a, b in planted)
        assert len(set(g.group_of)) == 3000 - 50  # nothing else merged
    sims, ids, exact = knn(x, x, 5)
    a_sims, a_ids, approx_used = knn(x, x, 5, exact_below=1000, nprobe=8)
    assert exact and not approx_used
    assert np.mean([len(set(ids[i]) & set(a_ids[i])) / 5 for i in range(3000)]) > 0.95  # recall@5 of the cells
    assert (ids[:, 0] == np.arange(3000)).all()  # everything is its own nearest neighbour


def test_priority_picks_the_representative_and_same_bytes_always_group():
    x = np.eye(4, dtype=np.float32)
    x[1] = x[0]  # identical features
    g = group_near_duplicates(x, threshold=0.9, priority=[(0, 0), (-5, 1), (0, 2), (0, 3)], same=[(2, 3)])
    assert g.group_of == [0, 0, 1, 1] and g.representative == [1, 2]
    sims, idx = nearest(x[[0, 2]], x[[3, 2]])
    assert list(idx) == [0, 1] and sims[1] == pytest.approx(1.0)
    sims, idx = nearest(x, np.zeros((0, 4), dtype=np.float32))
    assert list(idx) == [-1] * 4


@pytest.mark.slow
def test_pixel_check_passes_copies_and_stops_look_alikes(lite0, tmp_path):
    """Two flat gradients in different colours look alike to a classifier (their features are
    as close as a photo's copies are); the pixel check tells them apart, and passes copies."""
    from fixtures.images import pattern_image, png_bytes
    from pipelines.features.near_dups import DEFAULT_MAX_PIXEL_DIFF, normalise, pixel_difference, pixel_signature

    rng = np.random.default_rng(0)
    sky = tmp_path / "sky.png"
    sky.write_bytes(png_bytes(pattern_image(rng, "gradient", [(70, 130, 220), (200, 225, 255)], (320, 240))))
    dusk = tmp_path / "dusk.png"
    dusk.write_bytes(png_bytes(pattern_image(rng, "gradient", [(250, 120, 40), (90, 40, 120)], (320, 240))))
    f = normalise(extract(lite0, [str(sky), str(dusk)], num_workers=0).features.astype(np.float32))
    assert float(f[0] @ f[1]) >= DEFAULT_THRESHOLD  # the features alone would call them duplicates
    assert pixel_difference(pixel_signature(sky), pixel_signature(dusk)) > 5 * DEFAULT_MAX_PIXEL_DIFF
    src = real_photo("chelsea.png")
    original = pixel_signature(src)
    with Image.open(src) as im:
        for name, data in transformed_copies(im).items():
            (tmp_path / name).write_bytes(data)
            assert pixel_difference(original, pixel_signature(tmp_path / name)) <= DEFAULT_MAX_PIXEL_DIFF, name
    assert pixel_signature(tmp_path / "missing.png") is None
    assert pixel_difference(None, original) == float("inf")


def test_find_duplicates_groups_candidates_and_compares_them_with_the_id_images():
    """The duplicate search's computation on its own (pipelines.features.near_dups.find_duplicates): the
    verdicts written from the rule, not from the service that persists them."""
    from pipelines.features.near_dups import find_duplicates

    rng = np.random.default_rng(0)
    basis = np.linalg.qr(rng.normal(size=(32, 32)))[0][:6]  # six orthonormal directions: unrelated images
    a, b, c, d, r0, r1 = basis
    near_a = a + 0.05 * b  # cosine ~0.999 with a
    cand = np.stack([a, near_a, b, c, d]).astype(np.float32)
    ref = np.stack([r0, d + 0.03 * c]).astype(np.float32)  # reference 1 is feature-close to candidate 4
    cand_sha = ["A", "A2", "B", "R0", "D"]  # candidate 3 has the bytes of reference 0
    ref_sha = ["R0", "R1"]
    refuse_4 = {(4, 6), (6, 4)}  # the pixel check says candidate 4 and reference 1 (index 5 + 1) differ

    verdicts, grouping = find_duplicates(cand, ref, cand_sha256=cand_sha, ref_sha256=ref_sha,
                                         priority=[(0, 0), (1, 1), (2, 2), (3, 3), (4, 4)], threshold=0.9, id_threshold=0.9,
                                         looks_same=lambda i, j: (i, j) not in refuse_4)
    assert [v.drop for v in verdicts] == ["", "near_duplicate_of", "", "duplicate_of_id", ""]
    assert verdicts[1].representative == 0 and verdicts[0].representative == 0
    assert (verdicts[3].nearest_id, verdicts[3].nearest_id_similarity) == (0, 1.0)  # identical bytes win
    assert verdicts[4].nearest_id == 1 and verdicts[4].nearest_id_similarity > 0.99  # close, but the pixels differ: it stays
    assert grouping.group_of[0] == grouping.group_of[1] != grouping.group_of[2]
    # without ID images: nobody has a nearest one
    alone, _ = find_duplicates(cand, np.zeros((0, 32), np.float32), cand_sha256=cand_sha, ref_sha256=[], priority=None,
                               threshold=0.9, id_threshold=0.9)
    assert all(v.nearest_id is None and v.drop != "duplicate_of_id" for v in alone)
