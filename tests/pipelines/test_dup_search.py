"""The duplicate search's work units (pipelines/features/dup_search.py) against the definition
they compute, written here with plain numpy: every pair of candidates whose cosine similarity is
at least the threshold, and each candidate's most similar ID vector."""
from __future__ import annotations

import numpy as np
import pytest

from pipelines.features import dup_search as ds
from pipelines.features.dup_search import FeatureReader, components, join, layout

THRESHOLD = 0.8


def _pool(n_cand=1500, n_ref=300, dim=32, seed=0):
    """Clustered unit vectors (20 centres, images at cosine ~0.5 to theirs) and planted copies."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(20, dim))
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    x = centres[rng.integers(0, 20, n_cand + n_ref)] * 0.5 + rng.normal(size=(n_cand + n_ref, dim)) * (0.75 / np.sqrt(dim))
    planted = []
    for _ in range(60):  # candidate copies of candidates and of ID vectors, at cosine 0.9-0.99
        a = int(rng.integers(0, n_cand + n_ref))
        b = int(rng.integers(0, n_cand))
        x[b] = x[a] / np.linalg.norm(x[a]) + rng.normal(size=dim) * rng.uniform(0.02, 0.08)
        planted.append((a, b))
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    is_ref = np.zeros(n_cand + n_ref, dtype=bool)
    is_ref[n_cand:] = True
    return x.astype(np.float32), is_ref


def _brute_force(x, is_ref, threshold):
    """The definition: all candidate pairs a < b at or above the threshold; each candidate's best ID vector."""
    cand = np.flatnonzero(~is_ref)
    ref = np.flatnonzero(is_ref)
    s = x[cand] @ x[cand].T
    i, j = np.nonzero(np.triu(s >= threshold, k=1))
    pairs = {(int(cand[a]), int(cand[b])) for a, b in zip(i, j)}
    r = x[cand] @ x[ref].T
    best = {int(c): (int(ref[k]), float(r[n, k])) for n, (c, k) in enumerate(zip(cand, r.argmax(axis=1)))}
    return pairs, best


def _run(x, is_ref, nlist, nprobe, rows_per_chunk, seed=0):
    cand_n = len(x)
    rng = np.random.default_rng(seed)
    sample = x[np.sort(rng.choice(cand_n, size=min(cand_n, 40 * nlist), replace=False))] if nlist > 1 else x[:0]
    centroids = ds.train_cells(sample, nlist, seed=seed)
    cells = ds.assign_cells(x, centroids)
    lay = layout(cells, is_ref, ds.probe_table(centroids, nprobe))
    pairs, best = {}, {}
    for lo, hi in ds.join_ranges(lay, rows_per_chunk):
        res = join(lay, lo, hi, lambda pos: x[pos], threshold=THRESHOLD)
        for a, b, s in zip(res.pair_a.tolist(), res.pair_b.tolist(), res.pair_sim.tolist()):
            pairs[(a, b)] = max(s, pairs.get((a, b), -1.0))
        for q, r, s in zip(res.query.tolist(), res.nearest_ref.tolist(), res.nearest_sim.tolist()):
            assert q not in best  # each candidate is a query of exactly one unit
            best[q] = (r, s)
    return pairs, best


def test_one_cell_is_exact_search_and_any_cut_into_units_gives_the_same_pairs():
    x, is_ref = _pool()
    truth, truth_best = _brute_force(x, is_ref, THRESHOLD)
    assert len(truth) >= 40  # the planted copies are there
    for rows_per_chunk in (10_000, 97):
        pairs, best = _run(x, is_ref, nlist=1, nprobe=1, rows_per_chunk=rows_per_chunk)
        assert set(pairs) == truth
        assert all(s >= THRESHOLD for s in pairs.values())
        assert {q: r for q, (r, _s) in best.items()} == {q: r for q, (r, _s) in truth_best.items()}
        assert max(abs(best[q][1] - truth_best[q][1]) for q in best) < 1e-5


def test_cells_probing_every_cell_are_exact_and_sixteen_of_them_find_the_planted_copies():
    x, is_ref = _pool()
    truth, truth_best = _brute_force(x, is_ref, THRESHOLD)
    nlist = ds.cells_for(len(x), exact_below=100)
    assert nlist == int(4 * np.sqrt(len(x)))
    pairs, best = _run(x, is_ref, nlist=nlist, nprobe=nlist, rows_per_chunk=211)
    assert set(pairs) == truth and {q: r for q, (r, _s) in best.items()} == {q: r for q, (r, _s) in truth_best.items()}
    pairs16, best16 = _run(x, is_ref, nlist=nlist, nprobe=16, rows_per_chunk=211)
    assert set(pairs16) <= truth  # nothing below the threshold, nothing made up
    assert len(set(pairs16)) >= 0.99 * len(truth)
    copies = [q for q, (_r, s) in truth_best.items() if s >= THRESHOLD]
    assert sum(best16[q][0] == truth_best[q][0] for q in copies) >= 0.99 * len(copies)


def test_the_same_plan_gives_the_same_bytes_however_the_units_are_run():
    x, is_ref = _pool(seed=3)
    nlist = 40
    a = _run(x, is_ref, nlist=nlist, nprobe=8, rows_per_chunk=150)
    b = _run(x, is_ref, nlist=nlist, nprobe=8, rows_per_chunk=150)
    assert a == b


def test_the_reader_gives_float16_shard_rows_in_the_order_asked(tmp_path):
    rng = np.random.default_rng(1)
    parts = [rng.normal(size=(n, 8)).astype(np.float16) for n in (5, 7, 3)]
    for k, p in enumerate(parts):
        np.save(tmp_path / f"s{k}.npy", p)
    reader = FeatureReader([tmp_path / f"s{k}.npy" for k in range(3)], keep_open=1)
    shard = np.array([2, 0, 1, 0, 2, 1])
    row = np.array([1, 4, 6, 0, 0, 2])
    got = reader.vectors(shard, row)
    want = np.stack([parts[s][r].astype(np.float32) for s, r in zip(shard, row)])
    want /= np.linalg.norm(want, axis=1, keepdims=True)
    assert got.dtype == np.float32 and np.allclose(got, want, atol=1e-6)
    with pytest.raises(OSError, match="re-run extraction"):
        FeatureReader([tmp_path / "missing.npy"]).vectors(np.array([0]), np.array([0]))


def test_components_join_chains_and_leave_singletons_alone():
    label = components(6, np.array([0, 1, 4]), np.array([1, 2, 5]))
    assert label[0] == label[1] == label[2] and label[4] == label[5] and len({label[0], label[3], label[4]}) == 3


def test_the_probes_are_measured_to_meet_copies_at_the_calibration_cosine():
    """More cells need more probes: the count is chosen so that 99% of copies at cosine 0.90 of
    sampled vectors are met, and copies planted at that cosine are then found by the join."""
    rng = np.random.default_rng(4)
    dim, n = 64, 6000
    x = rng.normal(size=(n, dim)).astype(np.float32)  # a diffuse cloud: the hardest case for cells
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    centroids = ds.train_cells(x[rng.choice(n, 2000, replace=False)], 200, seed=0)
    nprobe, met = ds.calibrate_probes(centroids, x, at_least=4, seed=0)
    assert met >= 0.99 and nprobe > 4
    assert ds.calibrate_probes(centroids, x, at_least=10**6)[0] == 200  # a floor above the cells probes them all
    # copies at cosine 0.90 of 300 vectors: the join with the measured probes finds at least 98% of them
    a = rng.choice(n, 300, replace=False)
    r = rng.normal(size=(300, dim)).astype(np.float32)
    r -= (r * x[a]).sum(axis=1, keepdims=True) * x[a]
    r /= np.linalg.norm(r, axis=1, keepdims=True)
    y = np.concatenate([x, 0.9 * x[a] + np.sqrt(1 - 0.81) * r]).astype(np.float32)
    y /= np.linalg.norm(y, axis=1, keepdims=True)
    lay = layout(ds.assign_cells(y, centroids), np.zeros(len(y), dtype=bool), ds.probe_table(centroids, nprobe))
    res = join(lay, 0, len(y), lambda pos: y[pos], threshold=0.85)
    found = {(int(p), int(q)) for p, q in zip(res.pair_a, res.pair_b)}
    assert sum((int(i), n + k) in found for k, i in enumerate(a)) >= 0.98 * len(a)
