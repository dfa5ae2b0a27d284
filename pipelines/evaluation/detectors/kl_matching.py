import numpy as np

from . import PYTORCH_OOD, Detector, DetectorError, Head, Outputs, Param, register_detector, softmax

NO_MATCH = -1e300  # the score of an image whose KL to every compared typical posterior is infinite


@register_detector
class KLMatching(Detector):
    """KL matching (Hendrycks et al., ICML 2022; NINCO app. C): d_c is the mean softmax vector of
    the ID fit images the model assigns to class c; score = -min_c KL(p || d_c).

    KL(p || d) = sum_i p_i log(p_i / d_i) as pytorch-ood computes it: no floor under d. A class
    mean holding an exact 0 where p does not (a saturated head in float64) gives KL = inf for
    that class, which the minimum passes over. ``clip`` puts a floor under d before the log
    (1e-12 was this toolkit's earlier rule, kept as an option); ``match`` = ``predicted`` compares
    p only with the d of its own predicted class, as pytorch-ood's ``predict_features`` does
    (an image predicted as a class no fit image was predicted as then has no typical posterior
    and KL = inf; such images score NO_MATCH, below every finite score, with a note)."""

    name = "kl_matching"
    label = "KL-Matching"
    paper = "Hendrycks et al., ICML 2022"
    reference = f"{PYTORCH_OOD} src/pytorch_ood/detector/klmatching.py"
    needs_fit = True
    parameters = (Param("clip", float, 0.0, 0.0, 1e-3, help="floor under the class-mean softmax before the log (0: none)",
                        source="pytorch-ood (no floor); 1e-12 was ours"),
                  Param("match", str, "min", help="compare with every class's typical posterior (min) or the predicted class's",
                        source="NINCO app. C / OpenOOD (min)", choices=("min", "predicted")))

    def fit(self, fit: Outputs, head: Head | None = None) -> Detector:
        p = softmax(fit.logits)
        pred = p.argmax(axis=1)
        classes, inverse = np.unique(pred, return_inverse=True)
        if len(classes) == 0:
            raise DetectorError("KL-Matching: the ID fit set is empty")
        sums = np.zeros((len(classes), p.shape[1]))
        np.add.at(sums, inverse, p)
        d = sums / np.bincount(inverse)[:, None]
        clip = float(self.params["clip"])
        if clip > 0:
            d = np.clip(d, clip, None)
        with np.errstate(divide="ignore"):
            self.log_d = np.log(d)
        self.classes = classes
        return self

    def score(self, data: Outputs) -> np.ndarray:
        p = softmax(data.logits)
        with np.errstate(divide="ignore"):
            log_p = np.log(p)
        neg_entropy = np.sum(np.where(p > 0, p * log_p, 0.0), axis=1)
        # p @ log_d.T with 0 * log(0) = 0 and p > 0 against log d = -inf giving -inf (KL = inf)
        finite = np.isfinite(self.log_d)
        cross = p @ np.where(finite, self.log_d, 0.0).T
        missing = (p > 0).astype(np.float64) @ (~finite).T.astype(np.float64) > 0
        kl = neg_entropy[:, None] - np.where(missing, -np.inf, cross)
        if self.params["match"] == "min":
            s = -kl.min(axis=1)
        else:
            slot = np.searchsorted(self.classes, p.argmax(axis=1))
            found = (slot < len(self.classes)) & (self.classes[np.minimum(slot, len(self.classes) - 1)] == p.argmax(axis=1))
            s = np.where(found, -kl[np.arange(len(p)), np.minimum(slot, len(self.classes) - 1)], -np.inf)
        bad = ~np.isfinite(s)
        if bad.any():
            s = np.where(bad, NO_MATCH, s)
            note = ("KL-Matching: some images had no finite KL to a typical posterior (KL = inf); they score "
                    f"{NO_MATCH:g}, below every other")
            if note not in self.notes:
                self.notes.append(note)
        return s
