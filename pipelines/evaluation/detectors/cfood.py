import numpy as np

from . import OPENOOD, Detector, DetectorError, Head, Outputs, Param, register_detector

BLOCK = 512  # rows of distances held at once (BLOCK x reference size, float64)


def neighbourhood_grid() -> np.ndarray:
    """The neighbourhood sizes CF-OOD tries, as shares of the reference set: 0.001 to 0.1 in 100
    steps, 0.105 to 0.5 in 81, 0.51 to 0.99 in 49 (OpenOOD's cfood_postprocessor.py, 230 values)."""
    return np.concatenate([np.linspace(0.001, 0.1, 100), np.linspace(0.105, 0.5, 81), np.linspace(0.51, 0.99, 49)])


def unit_rows(x: np.ndarray) -> np.ndarray:
    """x / (|x| + 1e-10), row by row (the reference's normalisation: the constant in the denominator)."""
    x = np.asarray(x, dtype=np.float64)
    return x / (np.linalg.norm(x, axis=1, keepdims=True) + 1e-10)


def fast_distances(a: np.ndarray, b: np.ndarray, b_norms: np.ndarray) -> np.ndarray:
    """|a_i - b_j|^2 for every pair as |a_i|^2 + |b_j|^2 - 2 a_i.b_j (one matrix product, never below
    0): within about 1e-15 of the direct sum for the unit-length rows used here, not exact."""
    out = np.einsum("ij,ij->i", a, a)[:, None] + b_norms[None, :] - 2.0 * (a @ b.T)
    return np.maximum(out, 0.0, out=out)


def exact_distances(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """|a_i - b_i|^2 row by row, summed coordinate by coordinate (the reference's sum((v - ref)^2)):
    the same number for the same pair of vectors wherever they come from, 0 for equal rows."""
    diff = a - b
    return np.einsum("ij,ij->i", diff, diff)


# Fast distances are within about 1e-15 of the direct sums; comparisons closer than this are
# settled on the direct sums, so a tie (an image that duplicates a fit image, repeated fit images)
# is decided as the reference's arithmetic decides it.
TIE = 1e-12


@register_detector
class CFOOD(Detector):
    """CF-OOD (Angiulli, Fassetti, Zupi, SISAP 2025), the Concentration-Free Outlier Factor (CFOF,
    Angiulli, ECML PKDD 2017) on L2-normalised penultimate features, as OpenOOD's postprocessor
    computes it. A reference set R of n = int(alpha * N) of the N ID fit images (all of them when
    alpha = 1); for each r in R and each neighbourhood share kappa on a grid of 230 values from
    0.001 to 0.99, the squared distance from r to its (int(kappa n - 1) + 1)-th nearest other
    reference point (shares that truncate to the same neighbour as the one before are dropped). A test image x is
    within kappa-neighbourhood reach of r when |x - r|^2 is at most that distance; its CFOF is the
    smallest kappa on the grid whose reach covers at least a share ``k`` of R (1 when none does):
    x's reverse neighbourhood fills up early when x lies where ID data are dense. Score = -CFOF.

    Defaults alpha = 0.1 and k = 0.01 (OpenOOD's cfood.yml). The reference subset is a random
    draw, as in OpenOOD, where it is unseeded (torch.randperm): here it is NumPy's permutation with
    ``seed``, so a run can be repeated. Scores take the grid's values only, so many tie. Distances
    in float64 (OpenOOD: float32), by matrix products, with every comparison closer than 1e-12
    settled on the direct sum of squared differences the reference computes, so ties (duplicates
    of fit images) fall as there. Cost: fitting ranks n distances for each of the n reference
    points; scoring computes n distances per image and tries about 8 grid values by halving (n =
    5,000, 1,280-d features: fit 11 s, 0.9 ms an image on 2 cores)."""

    name = "cfood"
    label = "CF-OOD"
    paper = "Angiulli, Fassetti, Zupi, SISAP 2025"
    reference = f"{OPENOOD} openood/postprocessors/cfood_postprocessor.py"
    needs_fit = True
    parameters = (Param("alpha", float, 0.1, 1e-6, 1.0, help="share of the ID fit set drawn as the reference set (1: all of it)",
                        source="OpenOOD's cfood.yml"),
                  Param("k", float, 0.01, 1e-6, 1.0, help="share of the reference set whose neighbourhood must reach the image",
                        source="OpenOOD's cfood.yml"),
                  Param("seed", int, 0, 0, 2**32 - 1, help="seed of the reference set's draw (NumPy default_rng) when alpha < 1",
                        source="ours (OpenOOD's is unseeded)"))

    def fit(self, fit: Outputs, head: Head | None = None) -> Detector:
        total = len(fit)
        alpha = float(self.params["alpha"])
        n = int(alpha * total) if alpha < 1.0 else total
        if n < 2:
            if total < 2:
                raise DetectorError(f"CF-OOD: the ID fit set has {total} image(s); it needs at least 2")
            self.notes.append(f"CF-OOD: alpha={alpha:g} of {total} ID fit images leaves {n}; used 2 (a reference point needs a neighbour)")
            n = 2
        feats = unit_rows(fit.features)
        if n < total:
            pick = np.random.default_rng(int(self.params["seed"])).permutation(total)[:n]
            self.notes.append(f"CF-OOD: reference set of {n} of {total} ID fit images (seed {self.params['seed']})")
        else:
            pick = np.arange(total)
        self.reference_set = feats[pick]
        self.norms = np.einsum("ij,ij->i", self.reference_set, self.reference_set)
        if not np.all(np.isfinite(self.reference_set)):
            raise DetectorError("CF-OOD: the ID fit features hold NaN or infinite values")
        grid = neighbourhood_grid()
        positions = (grid * n - 1).astype(np.int64)  # truncated toward zero, as the reference's int cast
        rising = np.concatenate([[True], positions[:-1] < positions[1:]])
        self.grid, positions = grid[rising], positions[rising]
        # reach[i, j]: squared distance from reference point i to its (positions[j] + 1)-th nearest
        # (index 0 of the sorted distances being the point itself): ranked on fast distances, the
        # values then taken as direct sums (and, where near-equal values make the rank uncertain,
        # the rank settled on direct sums)
        self.reach = np.empty((n, len(positions)))
        ref = self.reference_set
        for start in range(0, n, BLOCK):
            block = ref[start:start + BLOCK]
            fast = fast_distances(block, ref, self.norms)
            order = np.argsort(fast, axis=1, kind="stable")
            ranked = np.take_along_axis(fast, order, axis=1)
            for r in range(len(block)):
                chosen = order[r, positions + 1]
                self.reach[start + r] = exact_distances(np.broadcast_to(block[r], (len(chosen), ref.shape[1])), ref[chosen])
                values = ranked[r]
                below = np.searchsorted(values, values[positions + 1] - TIE, side="left")
                above = np.searchsorted(values, values[positions + 1] + TIE, side="right")
                for j in np.nonzero(above - below > 1)[0]:  # near-equal neighbours around the rank: settle it exactly
                    window = order[r, below[j]:above[j]]
                    exact = np.sort(exact_distances(np.broadcast_to(block[r], (len(window), ref.shape[1])), ref[window]))
                    self.reach[start + r, j] = exact[positions[j] + 1 - below[j]]
        # reach is non-decreasing along the grid for every point, so the share an image is within
        # reach of is too: the first grid value covering a share k is found by halving
        self.reach_t = np.ascontiguousarray(self.reach.T)
        return self

    def score(self, data: Outputs) -> np.ndarray:
        q = unit_rows(data.features)
        if not np.all(np.isfinite(q)):
            raise DetectorError("CF-OOD: the features to score hold NaN or infinite values")
        n, levels = self.reach.shape
        share = float(self.params["k"])
        out = np.empty(len(q))
        for start in range(0, len(q), BLOCK):
            block = q[start:start + BLOCK]
            d = fast_distances(block, self.reference_set, self.norms)  # [b, n]
            settled = np.zeros(d.shape, dtype=bool)  # entries already replaced by direct sums
            lo = np.zeros(len(d), dtype=np.int64)  # the first grid index that may cover
            hi = np.full(len(d), levels, dtype=np.int64)  # levels: no grid value covers
            while np.any(lo < hi):
                rows = np.nonzero(lo < hi)[0]
                mid = (lo[rows] + hi[rows]) // 2
                reach = self.reach_t[mid]  # [rows, n]: each reference point's reach at the level tried
                near = (np.abs(reach - d[rows]) <= TIE) & ~settled[rows]
                if near.any():
                    r, i = np.nonzero(near)
                    d[rows[r], i] = exact_distances(block[rows[r]], self.reference_set[i])
                    settled[rows[r], i] = True
                covered = np.sum(reach >= d[rows], axis=1) / n >= share
                hi[rows[covered]] = mid[covered]
                lo[rows[~covered]] = mid[~covered] + 1
            out[start:start + len(d)] = -np.where(lo < levels, self.grid[np.minimum(lo, levels - 1)], 1.0)
        return out
