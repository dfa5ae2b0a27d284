import numpy as np

from . import OPENOOD, Detector, DetectorError, Head, Outputs, Param, register_detector, softmax

THRESHOLD = 0.03  # the reference's cut-off for small edges


def relation_normalise(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    return x / np.sqrt((x ** 2).sum(axis=-1, keepdims=True) + 1e-10)


@register_detector
class Relation(Detector):
    """Neural relation graph (Kim et al., NeurIPS 2023): the edge between an image and each ID fit
    image is max(0, cos of their normalised features) times the inner product of their softmax
    vectors; edges with |value| <= 0.03 are dropped; score = sum of the kept edges to the power
    ``pow`` (1, OpenOOD's relation.yml), the sign kept."""

    name = "relation"
    label = "Relation"
    paper = "Kim et al., NeurIPS 2023"
    reference = f"{OPENOOD} openood/postprocessors/relation_postprocessor.py"
    needs_fit = True
    parameters = (Param("pow", float, 1.0, 0.1, 100.0, help="power of each edge", source="OpenOOD's relation.yml"),)

    def fit(self, fit: Outputs, head: Head | None = None) -> Detector:
        if len(fit) == 0:
            raise DetectorError("Relation: the ID fit set is empty")
        self.feat, self.prob = relation_normalise(fit.features), softmax(fit.logits)
        return self

    def score(self, data: Outputs) -> np.ndarray:
        f, p = relation_normalise(data.features), softmax(data.logits)
        out = np.empty(len(f))
        power = float(self.params["pow"])
        for start in range(0, len(f), 512):
            rel = np.maximum(f[start:start + 512] @ self.feat.T, 0.0)
            rel *= p[start:start + 512] @ self.prob.T
            # every edge is >= 0 (a clipped cosine times an inner product of probabilities), so the
            # reference's sign(rel) |rel|^pow is rel^pow: computed in place, no power at all for pow 1
            # (the same numbers bit for bit, about half the time); ~(rel > t) also drops NaN as the reference
            rel[~(rel > THRESHOLD)] = 0.0
            if power != 1.0:
                np.power(rel, power, out=rel)
            out[start:start + 512] = rel.sum(axis=1)
        return out
