"""Near-duplicate search over image features: exact on a GPU (torch, blockwise), faiss on the CPU.

Features are L2-normalised, so inner product is cosine similarity. Below ``exact_below``
reference vectors the search is exact (faiss ``IndexFlatIP``). Above it, the search is
inverted-file style: faiss k-means (spherical) cuts the reference set into ``nlist`` (about
4 sqrt(n)) cells; each query cell is compared, as one matrix product, with the members of the
``nprobe`` cells whose centroids are nearest its own. That is the IVF idea arranged for the
large batch joins this tool runs (every candidate against every other, every candidate against
the ID set): per-query IVF scanning on 2 cores took over 10 minutes for a million 1,280-d
vectors, the cell-wise products take a few (benchmarks/bench_near_dups.py, which also measures
recall against exact search). Grouping joins every pair at or above the similarity threshold
(union-find), so a chain of near-copies forms one group.

A feature match is then checked at the pixel level (``pixel_signature``/``pixel_difference``:
16x16 thumbnails over a few centre crops, mirror-averaged): classifier features rate different
pictures of similar content highly (two flat gradients, two photos of one kind of scene), while
a copy also looks the same. Both thresholds were calibrated on efficientnet_lite0 features of
real photos and their transformed copies (resize, JPEG recompression, crop, mirror) against
distinct photos and look-alike generated pictures: benchmarks/calibrate_near_dups.py, figures
in docs/benchmarks.md.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

DEFAULT_THRESHOLD = 0.70  # cosine; calibrated (see the module docstring and docs/benchmarks.md)
DEFAULT_MAX_PIXEL_DIFF = 4.0  # mean absolute difference of 16x16 signatures, 0-255 scale; calibrated
DEFAULT_EXACT_BELOW = 50_000
# Centre crops the pixel check tries on either image: a cropped copy matches one of them.
SIGNATURE_CROPS = (1.0, 0.95, 0.9, 0.85, 0.8, 0.75, 0.7)
SIGNATURE_SIDE = 16


def pixel_signature(path: str | os.PathLike) -> np.ndarray | None:
    """Tiny pictures of the image for the pixel check: for each centre crop in
    ``SIGNATURE_CROPS``, a 16x16 RGB box-filtered thumbnail averaged with its mirror image (so a
    mirrored copy matches). None when the file cannot be read."""
    from PIL import Image

    from pipelines.sources.images import load_rgb_for_model
    from pipelines.sources.layouts import MemberRef

    try:
        data = path.read() if isinstance(path, MemberRef) else None  # a source member, checked against its ingest hash
        im = load_rgb_for_model(str(path), min_side=8 * SIGNATURE_SIDE, data=data)
    except Exception:
        return None
    out = np.empty((len(SIGNATURE_CROPS), SIGNATURE_SIDE, SIGNATURE_SIDE, 3), dtype=np.float32)
    w, h = im.size
    for n, frac in enumerate(SIGNATURE_CROPS):
        cw, ch = max(1, int(w * frac)), max(1, int(h * frac))
        left, top = (w - cw) // 2, (h - ch) // 2
        a = np.asarray(im.crop((left, top, left + cw, top + ch)).resize((SIGNATURE_SIDE, SIGNATURE_SIDE), Image.Resampling.BOX), dtype=np.float32)
        out[n] = (a + a[:, ::-1]) / 2
    return out


def pixel_difference(a: np.ndarray | None, b: np.ndarray | None) -> float:
    """How far apart two images look at thumbnail size, allowing either to be a centre crop of
    the other: the smallest mean absolute difference (0-255) over the crops. inf if unreadable."""
    if a is None or b is None:
        return float("inf")
    return float(min(np.abs(a - b[0]).mean(axis=(1, 2, 3)).min(), np.abs(a[0] - b).mean(axis=(1, 2, 3)).min()))


def normalise(x: np.ndarray) -> np.ndarray:
    x = np.ascontiguousarray(x, dtype=np.float32)
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return x / norms


def knn(queries: np.ndarray, base: np.ndarray, k: int, *, exact_below: int = DEFAULT_EXACT_BELOW, nlist: int | None = None,
        nprobe: int = 16, train_size: int | None = None, seed: int = 0, block: int = 16384,
        device: str | None = "auto") -> tuple[np.ndarray, np.ndarray, bool]:
    """The ``k`` most similar ``base`` rows for every query row: (similarities, indices, exact),
    each array [n_queries, k], best first; index -1 (similarity -inf) where fewer exist.
    ``device``: "auto" searches exactly on a GPU where torch sees one (any size: blockwise
    products, ``pipelines.features.gpu_search``) and with faiss on the CPU otherwise; "cuda"/"cpu" force
    the torch search there; None forces faiss."""
    same = queries is base
    x = normalise(base)
    q = x if same else normalise(queries)
    n, k = len(x), max(1, min(k, len(x))) if len(x) else 0
    if len(q) == 0 or n == 0:
        return np.full((len(q), max(k, 1)), -np.inf, dtype=np.float32), np.full((len(q), max(k, 1)), -1, dtype=np.int64), True
    if device == "auto":
        from pipelines.features.gpu_search import preferred_device

        device = preferred_device()
    if device is not None:
        from pipelines.features.gpu_search import exact_topk

        sims, ids = exact_topk(q, x, k, device=device)
        return sims, ids, True
    import faiss

    if n < exact_below:
        index = faiss.IndexFlatIP(x.shape[1])
        index.add(x)
        sims, ids = np.empty((len(q), k), dtype=np.float32), np.empty((len(q), k), dtype=np.int64)
        for s in range(0, len(q), block):
            sims[s:s + block], ids[s:s + block] = index.search(q[s:s + block], k)
        return sims, ids, True
    nlist = nlist or int(4 * np.sqrt(n))
    rng = np.random.default_rng(seed)
    sample = x[rng.choice(n, size=min(n, train_size or nlist * 40), replace=False)]
    km = faiss.Kmeans(x.shape[1], nlist, niter=10, spherical=True, seed=seed, verbose=False)
    km.train(sample)
    cells = km.index  # flat index over the centroids
    x_cell = np.empty(n, dtype=np.int64)
    q_cell = np.empty(len(q), dtype=np.int64)
    for s in range(0, n, block * 4):
        x_cell[s:s + block * 4] = cells.search(x[s:s + block * 4], 1)[1][:, 0]
    if same:
        q_cell = x_cell
    else:
        for s in range(0, len(q), block * 4):
            q_cell[s:s + block * 4] = cells.search(q[s:s + block * 4], 1)[1][:, 0]
    assert km.centroids is not None  # set by train()
    _d, probe = cells.search(km.centroids, min(nprobe, nlist))  # each cell's nearest cells, itself first
    order = np.argsort(x_cell, kind="stable")
    starts = np.searchsorted(x_cell[order], np.arange(nlist + 1))
    members = [order[starts[c]:starts[c + 1]] for c in range(nlist)]
    q_order = np.argsort(q_cell, kind="stable")
    q_starts = np.searchsorted(q_cell[q_order], np.arange(nlist + 1))
    sims = np.full((len(q), k), -np.inf, dtype=np.float32)
    ids = np.full((len(q), k), -1, dtype=np.int64)
    for c in range(nlist):
        qi = q_order[q_starts[c]:q_starts[c + 1]]
        if not len(qi):
            continue
        cand = np.concatenate([members[p] for p in probe[c] if p >= 0])
        if not len(cand):
            continue
        scores = q[qi] @ x[cand].T  # one BLAS product per cell
        kk = min(k, len(cand))
        top = np.argpartition(-scores, kk - 1, axis=1)[:, :kk]
        top_scores = np.take_along_axis(scores, top, axis=1)
        best = np.argsort(-top_scores, axis=1, kind="stable")
        sims[qi, :kk] = np.take_along_axis(top_scores, best, axis=1)
        ids[qi, :kk] = cand[np.take_along_axis(top, best, axis=1)]
    return sims, ids, False


class _UnionFind:
    def __init__(self, n: int):
        self.parent = list(range(n))

    def find(self, a: int) -> int:
        while self.parent[a] != a:
            self.parent[a] = self.parent[self.parent[a]]
            a = self.parent[a]
        return a

    def union(self, a: int, b: int) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[max(ra, rb)] = min(ra, rb)


@dataclass
class Grouping:
    group_of: list[int]  # item -> group number (0..n_groups-1, numbered by first member)
    representative: list[int]  # group -> the item kept
    similarity: list[float]  # item -> its similarity to the group's representative (1.0 for it)


def group_near_duplicates(
    vectors: np.ndarray, *, threshold: float = DEFAULT_THRESHOLD, k: int = 10, priority: Sequence[tuple] | None = None,
    exact_below: int = DEFAULT_EXACT_BELOW, nprobe: int = 16, same: Sequence[tuple[int, int]] = (),
    verify: Callable[[int, int], bool] | None = None, device: str | None = "auto",
) -> Grouping:
    """Group items whose features are at least ``threshold`` similar (each item's ``k``
    nearest neighbours are examined). ``same`` adds pairs known to be duplicates (same bytes).
    The representative of a group is the item with the smallest ``priority`` key (callers pass
    e.g. ``(-pixels, id)``: the largest image, then the oldest). ``verify(i, j)``, when given,
    must also accept a pair (the pixel check: classifier features rate different pictures of
    similar content highly, so a feature match alone is not a copy)."""
    n = len(vectors)
    uf = _UnionFind(n)
    for a, b in same:
        uf.union(a, b)
    x = normalise(vectors) if n else np.zeros((0, 1), dtype=np.float32)
    if n > 1:
        sims, idx, _exact = knn(x, x, k + 1, exact_below=exact_below, nprobe=nprobe, device=device)
        rows, cols = np.nonzero((sims >= threshold) & (idx >= 0))
        for r, c in zip(rows.tolist(), cols.tolist()):
            j = int(idx[r, c])
            if j != r and uf.find(r) != uf.find(j) and (verify is None or verify(min(r, j), max(r, j))):
                uf.union(r, j)
    roots = [uf.find(i) for i in range(n)]
    priority = list(priority) if priority is not None else [(i,) for i in range(n)]
    members: dict[int, list[int]] = {}
    for i, r in enumerate(roots):
        members.setdefault(r, []).append(i)
    group_of = [0] * n
    representative = []
    similarity = [1.0] * n
    for g, root in enumerate(sorted(members, key=lambda r: min(members[r]))):
        items = members[root]
        rep = min(items, key=lambda i: priority[i])
        representative.append(rep)
        for i in items:
            group_of[i] = g
            if i != rep:
                similarity[i] = float(np.dot(x[i], x[rep]))
    return Grouping(group_of=group_of, representative=representative, similarity=similarity)


def nearest(queries: np.ndarray, reference: np.ndarray, *, exact_below: int = DEFAULT_EXACT_BELOW, nprobe: int = 16,
            device: str | None = "auto") -> tuple[np.ndarray, np.ndarray]:
    """For each query, the most similar reference item: (similarity, index) arrays; -1 / -inf
    when there is no reference at all."""
    if len(reference) == 0 or len(queries) == 0:
        return np.full(len(queries), -np.inf, dtype=np.float32), np.full(len(queries), -1, dtype=np.int64)
    sims, idx, _exact = knn(queries, reference, 1, exact_below=exact_below, nprobe=nprobe, device=device)
    return sims[:, 0], idx[:, 0]


# -- the duplicate search over candidates and ID references --------------------------------------


class PixelCheck:
    """The check a feature match must pass: identical bytes, or pixel signatures no more than
    ``max_diff`` apart (``pixel_difference``). Each image's signature is read once, and only for
    images that take part in a feature match. Items are numbered as in ``paths``; a None path
    (unsafe or unreadable) never matches by pixels."""

    def __init__(self, paths: Sequence[str | None], sha256: Sequence[str], max_diff: float):
        self.paths, self.sha256, self.max_diff = list(paths), list(sha256), float(max_diff)
        self._signatures: dict[int, np.ndarray | None] = {}

    def signature(self, i: int) -> np.ndarray | None:
        if i not in self._signatures:
            path = self.paths[i]
            self._signatures[i] = pixel_signature(path) if path is not None else None
        return self._signatures[i]

    def __call__(self, i: int, j: int) -> bool:
        return self.sha256[i] == self.sha256[j] or pixel_difference(self.signature(i), self.signature(j)) <= self.max_diff


@dataclass(frozen=True)
class DuplicateVerdict:
    """What the duplicate search says of one candidate image."""

    representative: int  # the candidate standing for its group (itself when it stays)
    drop: str  # "" (stays), "near_duplicate_of" (another candidate stands for it), "duplicate_of_id"
    nearest_id: int | None  # the most similar ID reference image (index), the byte-identical one first
    nearest_id_similarity: float | None


def find_duplicates(cand_x: np.ndarray, ref_x: np.ndarray, *, cand_sha256: Sequence[str], ref_sha256: Sequence[str],
                    priority: Sequence[tuple] | None, threshold: float, id_threshold: float, exact_below: int = DEFAULT_EXACT_BELOW,
                    looks_same: Callable[[int, int], bool] | None = None) -> tuple[list[DuplicateVerdict], Grouping]:
    """Candidates grouped as near-duplicates of each other (identical bytes first, then features
    at ``threshold`` confirmed by ``looks_same``), and each compared with the ID reference images
    (identical bytes, or the nearest one at ``id_threshold`` confirmed by ``looks_same``).
    ``looks_same(i, j)`` numbers candidates 0..n-1 and references n..n+m-1 (a ``PixelCheck``
    over both); ``priority`` orders the candidates a group keeps (smallest first)."""
    n = len(cand_x)
    first: dict[str, int] = {}
    same = []
    for j, sha in enumerate(cand_sha256):
        if sha in first:
            same.append((first[sha], j))
        else:
            first[sha] = j
    grouping = group_near_duplicates(cand_x, threshold=threshold, same=same, priority=priority, exact_below=exact_below,
                                     verify=looks_same)
    ref_by_sha: dict[str, int] = {}
    for r, sha in enumerate(ref_sha256):
        ref_by_sha.setdefault(sha, r)
    sims, idx = nearest(cand_x, ref_x, exact_below=exact_below)
    out = []
    for j in range(n):
        rep = grouping.representative[grouping.group_of[j]]
        drop = "near_duplicate_of" if rep != j else ""
        near, sim = (int(idx[j]), float(sims[j])) if len(ref_sha256) else (None, None)
        byte_copy = ref_by_sha.get(cand_sha256[j])
        if byte_copy is not None:
            near, sim, drop = byte_copy, 1.0, "duplicate_of_id"
        elif near is not None and sim is not None and sim >= id_threshold and (looks_same is None or looks_same(j, n + near)):
            drop = "duplicate_of_id"
        out.append(DuplicateVerdict(representative=rep, drop=drop, nearest_id=near, nearest_id_similarity=sim))
    return out, grouping


# -- a curator's corrections -----------------------------------------------------------------------

NOT_DUPLICATE, KEEP, CONFIRM = "not_duplicate", "keep", "confirm"


@dataclass(frozen=True)
class Membership:
    """Where the duplicate search put one candidate image (ids are the caller's image ids)."""

    group: int  # the image id its group keeps (its own id when it stands alone or is kept)
    drop: str  # "" (stays), "near_duplicate_of:<id>" or "duplicate_of_id:<id of the ID image>"


def apply_overrides(members: dict[int, Membership], overrides: Sequence[tuple[int, str]]) -> dict[int, Membership]:
    """The search's result with a curator's corrections applied, oldest first (a later one wins):

    - ``not_duplicate``: the image leaves its group and stays; a match with an ID image is
      cleared too. The rest of the group is unchanged (said of the image a group keeps, it only
      clears that image's match with an ID image).
    - ``keep``: the image becomes what its group keeps; the former representative and every
      other member become its near-duplicates. A member dropped as a copy of an ID image stays
      dropped (no override of a group makes an ID image's copy OOD; use ``not_duplicate`` on it).
    - ``confirm``: the search was right about the image (a curator looked at its group and left
      it as it is); nothing changes, the group only counts as decided.

    Overrides of images not in ``members`` are ignored (the image left the search)."""
    out = dict(members)
    by_group: dict[int, set[int]] = {}
    for image, member in out.items():
        by_group.setdefault(member.group, set()).add(image)
    for image, action in overrides:
        if image not in out:
            continue
        m = out[image]
        if action == NOT_DUPLICATE:
            if m.group != image:  # a member leaves; the kept one itself stays with its duplicates
                by_group[m.group].discard(image)
                by_group[image] = {image}
            out[image] = Membership(group=image, drop="")
        elif action == KEEP:
            old = m.group
            if old == image:
                continue
            group = by_group.pop(old, set()) | {image}
            for other in group:
                om = out[other]
                if om.drop.startswith("duplicate_of_id:"):
                    drop = om.drop
                else:
                    drop = "" if other == image else f"near_duplicate_of:{image}"
                out[other] = Membership(group=image, drop=drop)
            by_group[image] = group
        elif action == CONFIRM:
            continue
        else:
            raise ValueError(f"unknown duplicate override {action!r}: use {NOT_DUPLICATE}, {KEEP} or {CONFIRM}")
    return out
