import numpy as np

from . import OPENOOD, PYTORCH_OOD, Detector, DetectorError, Head, Outputs, register_detector, softmax


def nll(logits: np.ndarray, labels: np.ndarray, t: float) -> float:
    """Mean negative log-likelihood of the labels under softmax(logits / t)."""
    z = logits / t
    m = z.max(axis=1, keepdims=True)
    log_norm = (m + np.log(np.exp(z - m).sum(axis=1, keepdims=True)))[:, 0]
    return float(np.mean(log_norm - z[np.arange(len(z)), labels]))


@register_detector
class TemperatureScaling(Detector):
    """Temperature scaling (Guo et al., ICML 2017): T minimising the NLL of the labelled ID fit
    images, score = max_c softmax(o / T)_c. The references run 50 L-BFGS steps from T = 1.5
    (OpenOOD) or 1 (pytorch-ood) at learning rate 0.01; we find the minimum itself (bounded
    Brent search over log T, scipy), the temperature the paper defines, and name it on the
    results."""

    name = "temperature_scaling"
    label = "Temperature scaling"
    paper = "Guo et al., ICML 2017"
    reference = (f"{OPENOOD} openood/postprocessors/temp_scaling_postprocessor.py; "
                 f"{PYTORCH_OOD} src/pytorch_ood/detector/tscaling.py")
    needs_fit = True

    def fit(self, fit: Outputs, head: Head | None = None) -> Detector:
        from scipy.optimize import minimize_scalar

        if fit.labels is None or not np.any(fit.labels >= 0):
            raise DetectorError("Temperature scaling needs class labels on the ID fit set (images in wnid folders of ID classes)")
        keep = fit.labels >= 0
        logits, labels = fit.logits[keep].astype(np.float64), fit.labels[keep]
        res = minimize_scalar(lambda log_t: nll(logits, labels, float(np.exp(log_t))), bounds=(np.log(1e-2), np.log(1e2)),
                              method="bounded", options={"xatol": 1e-10})
        self.temperature = float(np.exp(res.x))
        self.notes.append(f"Temperature scaling: T = {self.temperature:.4g} (the NLL minimum on the ID fit set)")
        return self

    def score(self, data: Outputs) -> np.ndarray:
        return softmax(data.logits.astype(np.float64) / self.temperature).max(axis=1)
