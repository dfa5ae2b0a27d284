import numpy as np

from . import OPENOOD, Detector, DetectorError, Head, Outputs, Param, register_detector

NO_PATTERN = -1e300  # the score of an image predicted as a class without a stored pattern


@register_detector
class SHE(Detector):
    """Simplified Hopfield energy (Zhang et al., ICLR 2023): a stored pattern per class, the mean
    feature of the ID fit images of that class the model classifies correctly; score = the inner
    product of the feature with its predicted class's pattern (``metric`` as OpenOOD's she.yml:
    inner_product; euclidean and cosine as its code offers). An image predicted as a class with
    no correctly classified fit image has no pattern: it scores NO_PATTERN, with a note."""

    name = "she"
    label = "SHE"
    paper = "Zhang et al., ICLR 2023"
    reference = f"{OPENOOD} openood/postprocessors/she_postprocessor.py"
    needs_fit = True
    parameters = (Param("metric", str, "inner_product", help="similarity to the stored pattern", source="OpenOOD's she.yml",
                        choices=("inner_product", "euclidean", "cosine")),)

    def fit(self, fit: Outputs, head: Head | None = None) -> Detector:
        if fit.labels is None or not np.any(fit.labels >= 0):
            raise DetectorError("SHE needs class labels on the ID fit set (images in wnid folders of ID classes)")
        pred = fit.logits.argmax(axis=1)
        ok = (fit.labels == pred) & (fit.labels >= 0)
        if not ok.any():
            raise DetectorError("SHE: the model classifies no ID fit image correctly; there is no pattern to store")
        classes, inverse = np.unique(pred[ok], return_inverse=True)
        feats = fit.features[ok].astype(np.float64)
        sums = np.zeros((len(classes), feats.shape[1]))
        np.add.at(sums, inverse, feats)
        self.patterns = np.zeros((fit.logits.shape[1], feats.shape[1]))
        self.patterns[classes] = sums / np.bincount(inverse)[:, None]
        self.has = np.zeros(fit.logits.shape[1], dtype=bool)
        self.has[classes] = True
        return self

    def score(self, data: Outputs) -> np.ndarray:
        x = data.features.astype(np.float64)
        pred = data.logits.argmax(axis=1)
        t = self.patterns[pred]
        metric = self.params["metric"]
        if metric == "inner_product":
            s = np.sum(x * t, axis=1)
        elif metric == "euclidean":
            s = -np.sqrt(np.sum((x - t) ** 2, axis=1))
        else:  # torch.cosine_similarity: x.t / (max(|x|, 1e-8) * max(|t|, 1e-8))
            s = np.sum(x * t, axis=1) / (np.maximum(np.linalg.norm(x, axis=1), 1e-8) * np.maximum(np.linalg.norm(t, axis=1), 1e-8))
        missing = ~self.has[pred]
        if missing.any():
            note = f"SHE: images predicted as a class without a correctly classified fit image score {NO_PATTERN:g}"
            if note not in self.notes:
                self.notes.append(note)
            s = np.where(missing, NO_PATTERN, s)
        return s
