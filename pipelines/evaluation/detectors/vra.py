import numpy as np

from . import OPENOOD, Detector, DetectorError, Head, Outputs, Param, logsumexp, register_detector, require_head


@register_detector
class VRA(Detector):
    """VRA (Xu et al., NeurIPS 2023) as OpenOOD implements it: the penultimate activations clipped
    to [the low-th, the high-th] percentile of all ID fit activations, then Energy (10 and 90,
    OpenOOD's vra.yml; OpenOOD takes the percentiles on its ID validation set, we on the ID fit
    set). The paper's full rule (zero below alpha, add gamma between) is not OpenOOD's."""

    name = "vra"
    label = "VRA + Energy"
    paper = "Xu et al., NeurIPS 2023"
    reference = f"{OPENOOD} openood/postprocessors/vra_postprocessor.py"
    needs_fit = True
    needs_head = True
    parameters = (Param("percentile_low", float, 10.0, 0.0, 100.0, help="lower clipping percentile", source="OpenOOD's vra.yml"),
                  Param("percentile_high", float, 90.0, 0.0, 100.0, help="upper clipping percentile", source="OpenOOD's vra.yml"))

    def fit(self, fit: Outputs, head: Head | None = None) -> Detector:
        self.head = require_head(head, "VRA")
        lo, hi = float(self.params["percentile_low"]), float(self.params["percentile_high"])
        if lo > hi:
            raise DetectorError(f"VRA: --vra-percentile-low {lo:g} is above --vra-percentile-high {hi:g}")
        acts = fit.features.astype(np.float64).ravel()
        self.low, self.high = float(np.percentile(acts, lo)), float(np.percentile(acts, hi))
        self.notes.append(f"VRA: activations clipped to [{self.low:.4g}, {self.high:.4g}]")
        return self

    def score(self, data: Outputs) -> np.ndarray:
        return logsumexp(self.head.logits(np.clip(data.features.astype(np.float64), self.low, self.high)))
