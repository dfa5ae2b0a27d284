import numpy as np

from pipelines.features.gpu_search import exact_topk, preferred_device

from . import OPENOOD, Detector, DetectorError, Head, Outputs, Param, register_detector


def _normalised(x: np.ndarray) -> np.ndarray:
    x = np.ascontiguousarray(x, dtype=np.float32)
    return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)


def _normalised64(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)


def kth_largest_similarity(q: np.ndarray, bank: np.ndarray, bank32: np.ndarray, k: int) -> np.ndarray:
    """Per row of q (unit vectors, float64) the k-th largest inner product with the rows of bank (unit
    vectors; bank32 the same in float32), as the float64 product gives it (<= 1e-13 apart: the few
    products that decide are recomputed one by one in float64).

    A float32 product screens: each float32 inner product of unit vectors of dimension d is within
    gamma = (d + 4) 2^-24 of the exact one (the float32 rounding of both vectors and of every step
    of the sum, the standard worst-case bound), so the k-th largest exact value lies within gamma of
    the k-th largest float32 value t; products above t + 2 gamma are certainly above it, those below
    t - 2 gamma certainly below, and the k-th largest is found among the band between, recomputed
    in float64. Where the band is wide (many near-equal similarities, e.g. duplicates), the block
    falls back to the float64 product."""
    n, d = bank.shape
    m = len(q)
    gamma = (d + 4) * 2.0 ** -24 + 1e-30
    s = q.astype(np.float32) @ bank32.T
    t = np.partition(s, n - k, axis=1)[:, n - k].astype(np.float64)
    lo = np.nextafter((t - 2 * gamma).astype(np.float32), np.float32(-np.inf))[:, None]
    hi = np.nextafter((t + 2 * gamma).astype(np.float32), np.float32(np.inf))[:, None]
    above = (s > hi).sum(axis=1)
    rows, cols = np.nonzero((s >= lo) & (s <= hi))
    need = k - above  # the need-th largest in the band is the k-th largest overall
    count = np.bincount(rows, minlength=m)
    if len(rows) > 0.05 * s.size or np.any(need < 1) or np.any(need > count):
        return np.partition(q @ bank.T, n - k, axis=1)[:, n - k]
    first = np.concatenate([[0], np.cumsum(count)])
    out = np.empty(m)
    for i in range(m):  # rows come sorted: row i's band is cols[first[i]:first[i + 1]]
        exact = bank[cols[first[i]:first[i + 1]]] @ q[i]
        out[i] = np.partition(exact, len(exact) - need[i])[len(exact) - need[i]]
    return out


@register_detector
class KNN(Detector):
    """Deep nearest neighbours (Sun et al., ICML 2022): score = -(L2 distance of the normalised
    feature to its K-th nearest normalised ID fit feature), searched exactly: blockwise float64
    products on the CPU, blockwise torch products on a GPU (for unit vectors |a - b|^2 = 2 - 2 a.b).
    OpenOOD's knn_postprocessor returns the squared distance (faiss IndexFlatL2): the same order.
    NINCO used K = 1000; K larger than the fit set is lowered to its size, with a note."""

    name = "knn"
    label = "KNN"
    paper = "Sun et al., ICML 2022"
    reference = f"{OPENOOD} openood/postprocessors/knn_postprocessor.py"
    needs_fit = True
    parameters = (Param("k", int, 1000, 1, 10**6, help="K, the neighbour whose distance is the score", source="NINCO"),)

    def fit(self, fit: Outputs, head: Head | None = None) -> Detector:
        k = int(self.params["k"])
        if k < 1:
            raise DetectorError(f"KNN: k must be at least 1, got {k}")
        if len(fit) == 0:
            raise DetectorError("KNN: the ID fit set is empty")
        if k > len(fit):
            self.notes.append(f"KNN: k={k} is more than the {len(fit)} ID fit images; used k={len(fit)}")
            k = len(fit)
        self.k = k
        self.device = preferred_device()
        self.bank = _normalised(fit.features) if self.device is not None else _normalised64(fit.features)
        self.bank32 = self.bank.astype(np.float32) if self.device is None else self.bank
        return self

    def score(self, data: Outputs) -> np.ndarray:
        if self.device is not None:
            sims, _ = exact_topk(_normalised(data.features), self.bank, self.k, device=self.device)
            dist2 = 2.0 - 2.0 * sims[:, -1].astype(np.float64)
            return -np.sqrt(np.clip(dist2, 0.0, None))
        q = _normalised64(data.features)
        out = np.empty(len(q))
        for start in range(0, len(q), 1024):
            kth = kth_largest_similarity(q[start:start + 1024], self.bank, self.bank32, self.k)
            out[start:start + 1024] = -np.sqrt(np.clip(2.0 - 2.0 * kth, 0.0, None))
        return out
