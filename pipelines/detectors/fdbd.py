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
            row = np.linalg.norm(self.head.weight - self.head.weight[c], axis=1)
            row[c] = 1.0
            self._rows[c] = row
        return self._rows[c]

    def score(self, data: Outputs) -> np.ndarray:
        logits = data.logits.astype(np.float64)
        x = data.features.astype(np.float64)
        pred = logits.argmax(axis=1)
        top = logits[np.arange(len(logits)), pred]
        num = np.zeros(len(logits))
        for c in np.unique(pred):  # one row of denominators per predicted class
            rows = pred == c
            num[rows] = (np.abs(logits[rows] - top[rows, None]) / self._denominators(int(c))).sum(axis=1)
        if self.params["normalizer"] == "train-mean":
            return num / np.linalg.norm(x - self.train_mean, axis=1)
        return num / np.linalg.norm(x, axis=1)
