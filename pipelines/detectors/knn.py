import numpy as np

from ..gpu_search import exact_topk, preferred_device
from . import Detector, DetectorError, Head, Outputs, Param, register_detector


def _normalised(x: np.ndarray) -> np.ndarray:
    x = np.ascontiguousarray(x, dtype=np.float32)
    return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)


@register_detector
class KNN(Detector):
    """Deep nearest neighbours (Sun et al., ICML 2022): score = -(L2 distance of the normalised
    feature to its K-th nearest normalised ID fit feature), searched exactly: faiss on the CPU,
    blockwise torch products on a GPU (for unit vectors |a - b|^2 = 2 - 2 a.b).
    NINCO used K = 1000; K larger than the fit set is lowered to its size, with a note."""

    name = "knn"
    label = "KNN"
    paper = "Sun et al., ICML 2022"
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
        bank = _normalised(fit.features)
        self.device = preferred_device()
        if self.device is not None:
            self.bank = bank
            return self
        import faiss

        self.index = faiss.IndexFlatL2(bank.shape[1])
        self.index.add(bank)
        return self

    def score(self, data: Outputs) -> np.ndarray:
        q = _normalised(data.features)
        if self.device is not None:
            sims, _ = exact_topk(q, self.bank, self.k, device=self.device)
            dist2 = 2.0 - 2.0 * sims[:, -1].astype(np.float64)
        else:
            d2, _ = self.index.search(q, self.k)
            dist2 = d2[:, -1].astype(np.float64)
        return -np.sqrt(np.clip(dist2, 0.0, None))
