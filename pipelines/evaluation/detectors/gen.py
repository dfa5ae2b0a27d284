import numpy as np

from . import OPENOOD, Detector, Outputs, Param, register_detector, softmax


@register_detector
class GEN(Detector):
    """Generalized entropy (Liu, Lochman, Zach, CVPR 2023): over the M largest softmax
    probabilities, score = -sum p^gamma (1 - p)^gamma (gamma = 0.1, M = 100 as OpenOOD's gen.yml;
    M above the number of classes takes them all)."""

    name = "gen"
    label = "GEN"
    paper = "Liu, Lochman, Zach, CVPR 2023"
    reference = f"{OPENOOD} openood/postprocessors/gen_postprocessor.py"
    parameters = (Param("gamma", float, 0.1, 1e-4, 100.0, help="exponent gamma", source="OpenOOD's gen.yml"),
                  Param("m", int, 100, 1, 10**6, help="how many of the largest probabilities count", source="OpenOOD's gen.yml"))

    def score(self, data: Outputs) -> np.ndarray:
        p = softmax(data.logits)
        m = min(int(self.params["m"]), p.shape[1])
        top = np.partition(p, p.shape[1] - m, axis=1)[:, p.shape[1] - m:]  # the m largest (their order does not matter for a sum)
        g = float(self.params["gamma"])
        return -np.sum(top ** g * (1.0 - top) ** g, axis=1)
