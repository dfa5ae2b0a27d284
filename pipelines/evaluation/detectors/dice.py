import numpy as np

from . import OPENOOD, Detector, Head, Outputs, Param, logsumexp, register_detector, require_head


@register_detector
class DICE(Detector):
    """DICE (Sun & Li, ECCV 2022): the last layer's weights are sparsified by their contribution
    mean_fit(h) * W (every weight whose contribution is not above the p-th percentile of all C x d
    contributions is zeroed), then Energy of the sparsified logits (p = 90, OpenOOD's dice.yml)."""

    name = "dice"
    label = "DICE + Energy"
    paper = "Sun & Li, ECCV 2022"
    reference = f"{OPENOOD} openood/postprocessors/dice_postprocessor.py"
    needs_fit = True
    needs_head = True
    parameters = (Param("p", float, 90.0, 0.0, 99.99, help="sparsity percentile of the weight contributions", source="OpenOOD's dice.yml"),)

    def fit(self, fit: Outputs, head: Head | None = None) -> Detector:
        head = require_head(head, "DICE")
        mean_act = fit.features.astype(np.float64).mean(axis=0)
        contrib = mean_act[None, :] * head.weight
        thresh = np.percentile(contrib, float(self.params["p"]))
        self.weight = np.where(contrib > thresh, head.weight, 0.0)
        self.bias = head.bias
        self.notes.append(f"DICE: kept {int((contrib > thresh).sum()):,} of {contrib.size:,} weights")
        return self

    def score(self, data: Outputs) -> np.ndarray:
        return logsumexp(data.features.astype(np.float64) @ self.weight.T + self.bias)
