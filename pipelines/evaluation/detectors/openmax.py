"""OpenMax (Bendale & Boult, CVPR 2016), as OpenOOD's openmax postprocessor computes it on a
frozen classifier's logits, with libMR's Weibull tail fit (Vastlab/libMR, ``MR.fit_high``).

Fit: per class c, the logit vectors of the ID fit images of class c that the model predicts as c;
their mean (the MAV) and each one's Euclidean distance to it. The ``tail`` largest distances are
shifted as libMR's fit_high does (t = d + 1 - the smallest of them, so all are >= 1) and a
two-parameter Weibull is fitted to them by maximum likelihood.
Score: for logits v, the ``alpha`` top classes get weights (alpha + 1 - i) / alpha (i = 1..alpha),
the others 0; w_c = WeibullCDF(||v - MAV_c|| + 1 - small_c) (0 below 0); v'_c = v_c (1 - w_c omega_c)
and an unknown logit u = sum_c v_c w_c omega_c; the score is minus the unknown's probability
exp(u) / (sum_c exp(v'_c) + exp(u)) (OpenOOD's ``-score_openmax[:, -1]``). alpha 3 and tail 20
are OpenOOD's values; the distance is OpenOOD's ('euclidean').

Where we depart from the reference: libMR stops its likelihood search at a tolerance of 1e-6
(MATLAB's wblfit port); here the likelihood equation is solved to machine precision (the same
maximum, closer). The unknown probability is computed stably (the reference's exp overflows to
NaN for logits in the hundreds). A class with fewer than ``tail`` correctly predicted fit images
uses all it has (libMR refuses and leaves an invalid model, whose W-score is -9999); a class with
fewer than 2, or whose distances are all equal, cannot be fitted: its w is 0 and the results
count such classes."""
from __future__ import annotations

import numpy as np

from . import OPENOOD, Detector, DetectorError, Head, Outputs, Param, logsumexp, register_detector


def weibull_mle(t: np.ndarray) -> tuple[float, float]:
    """(scale, shape) of the two-parameter Weibull maximising the likelihood of t (all > 0, not all equal):
    the shape k solves sum t^k ln t / sum t^k - 1/k - mean(ln t) = 0, then scale = mean(t^k)^(1/k)."""
    from scipy.optimize import brentq  # here: scipy.optimize at import slowed every process's start by 0.4 s
    x = np.log(np.asarray(t, dtype=np.float64))
    top = x.max()

    def eq(k: float) -> float:
        e = np.exp(k * (x - top))
        return float((e * x).sum() / e.sum() - 1.0 / k - x.mean())

    lo, hi = 1e-3, 1.0
    while eq(hi) < 0:
        hi *= 2.0
        if hi > 1e12:
            raise DetectorError("OpenMax: the Weibull tail fit did not converge")
    while eq(lo) > 0:
        lo /= 2.0
    k = brentq(eq, lo, hi, xtol=1e-300, rtol=4 * np.finfo(float).eps, maxiter=500)
    scale = float(np.exp(top + np.log(np.mean(np.exp(k * (x - top)))) / k))
    return scale, float(k)


@register_detector
class OpenMax(Detector):
    name = "openmax"
    label = "OpenMax"
    paper = "Bendale & Boult, CVPR 2016"
    reference = (f"{OPENOOD} openood/postprocessors/openmax_postprocessor.py (euclidean); Vastlab/libMR@cebbc64dc822 "
                 "libMR/MetaRecognition.cpp (FitHigh, W_score)")
    needs_fit = True
    parameters = (Param("alpha", int, 3, 1, 1000, help="how many top classes are recalibrated", source="OpenOOD's weibull_alpha"),
                  Param("tail", int, 20, 2, 100000, help="largest distances to the class mean fitted by the Weibull",
                        source="OpenOOD's weibull_tail"))

    def fit(self, fit: Outputs, head: Head | None = None) -> Detector:
        if fit.labels is None or not np.any(fit.labels >= 0):
            raise DetectorError("OpenMax needs class labels on the ID fit set (images in wnid folders of ID classes)")
        logits = np.asarray(fit.logits, dtype=np.float64)
        n_classes = logits.shape[1]
        tail = int(self.params["tail"])
        self.mavs = np.zeros((n_classes, n_classes))
        self.small = np.zeros(n_classes)
        self.weibull = np.full((n_classes, 2), np.nan)  # scale, shape; NaN: not fitted
        correct = (fit.labels >= 0) & (logits.argmax(axis=1) == fit.labels)
        short = 0
        for c in np.unique(fit.labels[correct]):
            v = logits[correct & (fit.labels == c)]
            self.mavs[c] = v.mean(axis=0)
            d = np.sqrt(((v - self.mavs[c]) ** 2).sum(axis=1))
            tops = np.sort(d)[::-1][:tail]
            short += len(tops) < tail
            if len(tops) < 2 or tops.max() == tops.min():
                continue
            self.small[c] = tops[-1]
            self.weibull[c] = weibull_mle(tops + 1.0 - tops[-1])
        unfitted = int(np.isnan(self.weibull[:, 0]).sum())
        if unfitted == n_classes:
            raise DetectorError("OpenMax: no class has 2 or more distinct correctly predicted fit images; use a larger ID fit set")
        if short:
            self.notes.append(f"OpenMax: {short} classes have fewer than {tail} correctly predicted fit images (all of theirs are used)")
        if unfitted:
            self.notes.append(f"OpenMax: {unfitted} classes have no Weibull fit (fewer than 2 distinct correct fit images): never recalibrated")
        return self

    def score(self, data: Outputs) -> np.ndarray:
        from scipy.spatial.distance import cdist  # here: scipy at import slows every process's start
        v = np.asarray(data.logits, dtype=np.float64)
        n, n_classes = v.shape
        alpha = min(int(self.params["alpha"]), n_classes)
        omega = np.zeros((n, n_classes))
        ranked = np.argsort(v, axis=1)[:, ::-1][:, :alpha]  # numpy's default argsort, reversed, as the reference
        np.put_along_axis(omega, ranked, (alpha + 1 - np.arange(1, alpha + 1)) / alpha, axis=1)
        # Euclidean distances to the class means, computed directly (no |a|^2 - 2ab + |b|^2), as the reference;
        # only the top alpha classes' are ever used (omega is 0 elsewhere, where w's value drops out), so only
        # they are computed, each by cdist as the reference's whole matrix (the same numbers)
        dist = np.zeros((n, n_classes))
        for i in range(n):
            dist[i, ranked[i]] = cdist(v[i:i + 1], self.mavs[ranked[i]])[0]
        x = dist + 1.0 - self.small[None, :]
        scale, shape = self.weibull[:, 0], self.weibull[:, 1]
        fitted = ~np.isnan(scale)
        with np.errstate(invalid="ignore", over="ignore"):
            w = np.where(fitted & (x >= 0), 1.0 - np.exp(-(np.maximum(x, 0) / np.where(fitted, scale, 1.0)) ** np.where(fitted, shape, 1.0)), 0.0)
        modified = v * (1.0 - w * omega)
        unknown = (v - modified).sum(axis=1)
        return -np.exp(unknown - logsumexp(np.hstack([modified, unknown[:, None]])))
