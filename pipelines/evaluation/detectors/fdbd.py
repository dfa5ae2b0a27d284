import numpy as np

from . import OPENOOD, Detector, Head, Outputs, Param, register_detector, require_head


@register_detector
class FDBD(Detector):
    """fDBD (Liu & Qin, ICML 2024): the feature's distance to the decision boundaries, sum over
    classes c of |o_pred - o_c| / |w_pred - w_c| (the predicted class's own term is 0), divided
    by the feature's distance to the mean ID fit feature (``normalizer`` = train-mean, the
    paper's) or by its norm (feature-norm, the other choice of OpenOOD's fdbd.yml)."""

    name = "fdbd"
    label = "fDBD"
    paper = "Liu & Qin, ICML 2024"
    reference = f"{OPENOOD} openood/postprocessors/fdbd_postprocessor.py"
    needs_fit = True
    needs_head = True
    parameters = (Param("normalizer", str, "train-mean", help="divide by the distance to the fit mean or by the feature norm",
                        source="the paper; OpenOOD's fdbd.yml (distance_as_normalizer: True)", choices=("train-mean", "feature-norm")),)

    def fit(self, fit: Outputs, head: Head | None = None) -> Detector:
        self.head = require_head(head, "fDBD")
        self.train_mean = fit.features.astype(np.float64).mean(axis=0)
        self._rows: dict[int, np.ndarray] = {}
        return self

    def _denominators(self, c: int) -> np.ndarray:
        """|w_c - w_j| for every class j, 1 for j = c (as the reference's denominator matrix)."""
        if c not in self._rows:
            self._compute_rows(np.array([c]))
        return self._rows[c]

    def _compute_rows(self, classes: np.ndarray) -> None:
        """The denominator rows of ``classes``, 512 at a time by one product: |w_c - w_j|^2 =
        |w_c|^2 + |w_j|^2 - 2 w_c.w_j, whose rounding error is at most about d 2^-53 (|w_c|^2 + |w_j|^2);
        where |w_c - w_j|^2 is below 1% of |w_c|^2 + |w_j|^2 (rows so close that this could exceed
        1e-11 of it) the distance is taken directly, as the reference does for every pair."""
        w = self.head.weight
        sq = np.einsum("ij,ij->i", w, w)
        for start in range(0, len(classes), 512):
            chunk = classes[start:start + 512]
            scale = sq[chunk, None] + sq[None, :]
            d2 = scale - 2.0 * (w[chunk] @ w.T)
            rows, cols = np.nonzero(d2 < 0.01 * scale)
            dist = np.sqrt(np.maximum(d2, 0.0))
            if len(rows):
                dist[rows, cols] = np.linalg.norm(w[chunk[rows]] - w[cols], axis=1)
            dist[np.arange(len(chunk)), chunk] = 1.0
            for i, c in enumerate(chunk):
                self._rows[int(c)] = dist[i]

    def score(self, data: Outputs) -> np.ndarray:
        logits = data.logits.astype(np.float64)
        x = data.features.astype(np.float64)
        pred = logits.argmax(axis=1)
        top = logits[np.arange(len(logits)), pred]
        num = np.zeros(len(logits))
        missing = np.array([c for c in np.unique(pred) if int(c) not in self._rows], dtype=np.int64)
        if len(missing):
            self._compute_rows(missing)
        for c in np.unique(pred):  # one row of denominators per predicted class
            rows = pred == c
            num[rows] = (np.abs(logits[rows] - top[rows, None]) / self._denominators(int(c))).sum(axis=1)
        if self.params["normalizer"] == "train-mean":
            return num / np.linalg.norm(x - self.train_mean, axis=1)
        return num / np.linalg.norm(x, axis=1)
