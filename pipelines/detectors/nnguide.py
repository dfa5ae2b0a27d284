import numpy as np

from . import OPENOOD, Detector, DetectorError, Head, Outputs, Param, logsumexp, register_detector


def guide_normalise(x: np.ndarray) -> np.ndarray:
    """The reference's normaliser as written: x / |x| + 1e-10 (the constant is added after the
    division, to every entry)."""
    x = x.astype(np.float64)
    return x / np.linalg.norm(x, axis=-1, keepdims=True) + 1e-10


@register_detector
class NNGuide(Detector):
    """NNGuide (Park, Jung, Teoh, ICCV 2023): a bank of the normalised ID fit features each times
    its Energy; score = Energy(x) * the mean inner product of the normalised feature with its K
    nearest (largest inner product) bank entries (K = 100, OpenOOD's nnguide.yml). The bank is
    the whole ID fit set (OpenOOD takes a share alpha of its training set); K above the fit set's
    size is lowered to it, with a note. Exact search (blockwise products in float64)."""

    name = "nnguide"
    label = "NNGuide"
    paper = "Park, Jung, Teoh, ICCV 2023"
    reference = f"{OPENOOD} openood/postprocessors/nnguide_postprocessor.py"
    needs_fit = True
    parameters = (Param("k", int, 100, 1, 10**5, help="K, the nearest bank entries averaged", source="OpenOOD's nnguide.yml"),)

    def fit(self, fit: Outputs, head: Head | None = None) -> Detector:
        if len(fit) == 0:
            raise DetectorError("NNGuide: the ID fit set is empty")
        self.k = int(self.params["k"])
        if self.k > len(fit):
            self.notes.append(f"NNGuide: k={self.k} is more than the {len(fit)} ID fit images; used k={len(fit)}")
            self.k = len(fit)
        self.bank = guide_normalise(fit.features) * logsumexp(fit.logits)[:, None]
        return self

    def score(self, data: Outputs) -> np.ndarray:
        q = guide_normalise(data.features)
        out = np.empty(len(q))
        n = len(self.bank)
        for start in range(0, len(q), 1024):
            sims = q[start:start + 1024] @ self.bank.T
            top = np.partition(sims, n - self.k, axis=1)[:, n - self.k:]
            out[start:start + 1024] = top.mean(axis=1)
        return out * logsumexp(data.logits)
