import numpy as np

from . import OPENOOD, Detector, DetectorError, Head, Outputs, Param, logsumexp, register_detector


def guide_normalise(x: np.ndarray) -> np.ndarray:
    """The reference's normaliser as written: x / |x| + 1e-10 (the constant is added after the
    division, to every entry)."""
    x = x.astype(np.float64)
    return x / np.linalg.norm(x, axis=-1, keepdims=True) + 1e-10


def openood_bank_size(n: int, alpha: float, batch_size: int) -> int:
    """How many images OpenOOD's NNGuide setup keeps of a loader over ``n`` images: it stops after the
    first batch that brings (batches so far) x batch_size above int(alpha * n), or at the end."""
    return min(n, (int(alpha * n) // batch_size + 1) * batch_size)


@register_detector
class NNGuide(Detector):
    """NNGuide (Park, Jung, Teoh, ICCV 2023): a bank of the normalised ID fit features each times
    its Energy; score = Energy(x) * the mean inner product of the normalised feature with its K
    nearest (largest inner product) bank entries (K = 100, OpenOOD's nnguide.yml). ``bank`` names
    which fit images make the bank:

    - ``fit_set`` (default): every ID fit image;
    - ``openood``: the bank OpenOOD's setup builds: the first batches of its training loader, in
      order, until more than int(alpha * n) images are in (alpha = 0.01, nnguide.yml; batches of
      ``batch_size`` = 200, the batch size of OpenOOD's Evaluator, whose loaders do not shuffle).
      Here the batches are cut from the ID fit set in its order, so the bank holds the first
      min(n, (int(alpha * n) // batch_size + 1) * batch_size) fit images.

    K above the bank's size is lowered to it, with a note. Exact search (blockwise products in
    float64; OpenOOD's faiss IndexFlatIP searches float32)."""

    name = "nnguide"
    label = "NNGuide"
    paper = "Park, Jung, Teoh, ICCV 2023"
    reference = f"{OPENOOD} openood/postprocessors/nnguide_postprocessor.py"
    needs_fit = True
    parameters = (Param("k", int, 100, 1, 10**5, help="K, the nearest bank entries averaged", source="OpenOOD's nnguide.yml"),
                  Param("bank", str, "fit_set", help="the fit images in the bank: all of them, or OpenOOD's first batches "
                        "(alpha, batch_size)", source="ours", choices=("fit_set", "openood")),
                  Param("alpha", float, 0.01, 1e-6, 1.0, help="with bank=openood: the share of the fit set OpenOOD's loop collects",
                        source="OpenOOD's nnguide.yml"),
                  Param("batch_size", int, 200, 1, 10**6, help="with bank=openood: the loader's batch, which rounds the bank up",
                        source="OpenOOD's Evaluator"))

    def fit(self, fit: Outputs, head: Head | None = None) -> Detector:
        if len(fit) == 0:
            raise DetectorError("NNGuide: the ID fit set is empty")
        n = len(fit)
        if self.params["bank"] == "openood":
            n = openood_bank_size(len(fit), float(self.params["alpha"]), int(self.params["batch_size"]))
            self.notes.append(f"NNGuide: bank of the first {n} of {len(fit)} ID fit images (OpenOOD's: batches of "
                              f"{self.params['batch_size']} until more than int({self.params['alpha']:g} x {len(fit)}))")
        self.k = int(self.params["k"])
        if self.k > n:
            self.notes.append(f"NNGuide: k={self.k} is more than the {n} images in the bank; used k={n}")
            self.k = n
        self.bank = guide_normalise(fit.features[:n]) * logsumexp(fit.logits[:n])[:, None]
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
