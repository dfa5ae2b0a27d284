import numpy as np

from ..gpu_search import exact_topk, preferred_device
from . import OPENOOD, Detector, DetectorError, Head, Outputs, Param, register_detector


def _normalised(x: np.ndarray) -> np.ndarray:
    x = np.ascontiguousarray(x, dtype=np.float32)
    return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)


def _normalised64(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)


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
        return self

    def score(self, data: Outputs) -> np.ndarray:
        if self.device is not None:
            sims, _ = exact_topk(_normalised(data.features), self.bank, self.k, device=self.device)
            dist2 = 2.0 - 2.0 * sims[:, -1].astype(np.float64)
            return -np.sqrt(np.clip(dist2, 0.0, None))
        q = _normalised64(data.features)
        n = len(self.bank)
        out = np.empty(len(q))
        for start in range(0, len(q), 1024):
            sims = q[start:start + 1024] @ self.bank.T
            kth = np.partition(sims, n - self.k, axis=1)[:, n - self.k]  # the K-th largest similarity = K-th nearest
            out[start:start + 1024] = -np.sqrt(np.clip(2.0 - 2.0 * kth, 0.0, None))
        return out
