import numpy as np

from . import OPENOOD, Detector, DetectorError, Head, Outputs, Param, register_detector, softmax

THRESHOLD = 0.03  # the reference's cut-off for small edges
REACH = THRESHOLD / (1.0 + 1e-9)  # below this, rounding included, an inner product of probabilities cannot make an edge


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
        # pp = p . q <= max(q) (p sums to 1): a fit image whose largest probability is at most the cut has
        # no edge to anything, and is left out (its zeros no longer enter the sums: <= 1e-15 apart)
        can = self.prob.max(axis=1) > REACH
        self.feat, self.prob = self.feat[can], self.prob[can]
        return self

    def score(self, data: Outputs) -> np.ndarray:
        f, p = relation_normalise(data.features), softmax(data.logits)
        out = np.zeros(len(f))
        # likewise an image whose largest probability is at most the cut has no edge: score 0
        can = np.flatnonzero(p.max(axis=1) > REACH)
        f, p = f[can], p[can]
        part = np.empty(len(f))
        self._score(f, p, part)
        out[can] = part
        return out

    def _score(self, f: np.ndarray, p: np.ndarray, out: np.ndarray) -> None:
        power = float(self.params["pow"])
        for start in range(0, len(f), 512):
            pp = p[start:start + 512] @ self.prob.T
            # an edge is a cosine (at most 1: both vectors have norm below 1) times pp, so only pairs with
            # pp above the cut can keep one; where those are few (a confident classifier of many classes: an
            # image's probability mass overlaps that of few fit images), their cosines are computed pair by
            # pair instead of the whole block product (the same sums, in another order: <= 1e-13 apart)
            rows, cols = np.nonzero(pp > REACH)
            if len(rows) < 0.02 * pp.size:
                out[start:start + len(pp)] = self._sparse_sum(f[start:start + 512], pp, rows, cols, power)
                continue
            rel = np.maximum(f[start:start + 512] @ self.feat.T, 0.0)
            rel *= pp
            # every edge is >= 0 (a clipped cosine times an inner product of probabilities), so the
            # reference's sign(rel) |rel|^pow is rel^pow: computed in place, no power at all for pow 1
            # (the same numbers bit for bit, about half the time); ~(rel > t) also drops NaN as the reference
            rel[~(rel > THRESHOLD)] = 0.0
            if power != 1.0:
                np.power(rel, power, out=rel)
            out[start:start + 512] = rel.sum(axis=1)

    def _sparse_sum(self, f: np.ndarray, pp: np.ndarray, rows: np.ndarray, cols: np.ndarray, power: float) -> np.ndarray:
        """Per image of the block, the sum of its kept edges, computing only the candidate pairs' cosines."""
        total = np.zeros(len(f))
        for s in range(0, len(rows), 8192):
            r, c = rows[s:s + 8192], cols[s:s + 8192]
            rel = np.maximum(np.einsum("ij,ij->i", f[r], self.feat[c]), 0.0)
            rel *= pp[r, c]
            keep = rel > THRESHOLD
            rel, r = rel[keep], r[keep]
            if power != 1.0:
                np.power(rel, power, out=rel)
            total += np.bincount(r, weights=rel, minlength=len(f))
        return total
