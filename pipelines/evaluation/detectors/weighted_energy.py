"""Weighted energy (VOS: Du, Wang, Cai, Li, ICLR 2022): log sum_c max(w_c, 0) exp(o_c), the
negated outlier score of pytorch-ood's ``WeightedEBO`` (-log sum_c relu(w_c) exp(f_c), the
weights w a layer VOS trains with the classifier, its ``weight_energy``).

A classifier trained without VOS has no such weights, so they are a declared parameter: a file
of C numbers, one per class in the logits' order (``.npy`` holding a 1-D array, or text with the
numbers separated by commas, spaces or new lines), or ``uniform`` (the default), every weight 1,
where the score is exactly Energy (log sum exp) and the results say so. Negative weights are
set to 0 as the reference's ReLU does (a note says how many); at least one must be positive.
Computed without overflow: log sum over the classes of positive weight of exp(o_c + log w_c),
with the largest term factored out (the reference's exp overflows above logits of about 709 in
float64 and 88 in float32).
"""
from __future__ import annotations

import hashlib
import re
from pathlib import Path

import numpy as np

from . import PYTORCH_OOD, Detector, DetectorError, Head, Outputs, Param, logsumexp, register_detector

UNIFORM = "uniform"


def read_weights(path: str) -> np.ndarray:
    """The class weights in the file at ``path``; DetectorError naming the file and the fix."""
    p = Path(path)
    fix = "give a .npy file with a 1-D array or a text file of numbers, one per class, or 'uniform'"
    if not p.is_file():
        raise DetectorError(f"--weighted-energy-weights: {path} is not a file; {fix}")
    try:
        if p.suffix == ".npy":
            w = np.load(p, allow_pickle=False)
        else:
            w = np.array([float(v) for v in re.split(r"[,\s]+", p.read_text().strip()) if v])
    except (ValueError, OSError) as exc:
        raise DetectorError(f"--weighted-energy-weights: {path} could not be read as numbers ({exc}); {fix}") from None
    w = np.asarray(w, dtype=np.float64)
    if w.ndim != 1 or not len(w) or not np.all(np.isfinite(w)):
        raise DetectorError(f"--weighted-energy-weights: {path} holds {w.shape} values, some not finite or not 1-D; {fix}")
    return w


@register_detector
class WeightedEnergy(Detector):
    """Weighted energy: log sum_c max(w_c, 0) exp(o_c); uniform weights (the default) give Energy."""

    name = "weighted_energy"
    label = "Weighted energy"
    paper = "Du, Wang, Cai, Li, ICLR 2022 (VOS)"
    reference = f"{PYTORCH_OOD} src/pytorch_ood/detector/webo.py (WeightedEBO)"
    parameters = (Param("weights", str, UNIFORM, help="the class weights w_c (VOS trains them with the classifier); "
                        "uniform: all 1, which is Energy", source="none without VOS training",
                        text="uniform, or a .npy / text file of one weight per class"),)

    def _weights(self, classes: int) -> np.ndarray | None:
        """The log weights for ``classes`` classes (-inf where the weight is 0), or None for uniform."""
        spec = str(self.params["weights"] or UNIFORM)
        if spec == UNIFORM:
            if not any("uniform" in n for n in self.notes):
                self.notes.append("Weighted energy: uniform class weights (no VOS-trained weights given): the score is Energy")
            return None
        if getattr(self, "_log_w", None) is None:
            w = read_weights(spec)
            if len(w) != classes:
                raise DetectorError(f"--weighted-energy-weights: {spec} has {len(w)} weights, the logits have {classes} classes; "
                                    "give one weight per class in the logits' order (the kept classes only where classes are restricted)")
            negative = int((w < 0).sum())
            w = np.maximum(w, 0.0)
            if not np.any(w > 0):
                raise DetectorError(f"--weighted-energy-weights: {spec} has no positive weight; at least one class needs one")
            digest = hashlib.sha256(w.tobytes()).hexdigest()[:12]
            self.notes.append(f"Weighted energy: class weights from {spec} (sha256 of the float64 weights {digest})"
                              + (f"; {negative} negative weight(s) set to 0 (the reference's ReLU)" if negative else ""))
            with np.errstate(divide="ignore"):
                self._log_w = np.log(w)
        return self._log_w

    def fit(self, fit: Outputs, head: Head | None = None) -> Detector:
        self._log_w = None
        self._weights(fit.logits.shape[1])  # a wrong file fails before any scoring
        return self

    def score(self, data: Outputs) -> np.ndarray:
        z = data.logits.astype(np.float64)
        log_w = self._weights(z.shape[1])
        if log_w is not None:
            z = z + log_w  # -inf for the classes of weight 0: they drop out of the sum
        return logsumexp(z)
