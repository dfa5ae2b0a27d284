import numpy as np

from . import OPENOOD, Detector, DetectorError, Head, Outputs, Param, register_detector, require_head
from .vim import principal_dim_of, uncentred_eigh


@register_detector
class Residual(Detector):
    """Residual (Wang et al., CVPR 2022, ViM's ablation): minus the norm of the feature's part
    outside the principal space, features offset by u = -pinv(W) b, the principal space the top-D
    eigenvectors of the offset fit features' uncentred covariance (D = 512 as OpenOOD's
    residual.yml for 1280-d features; empty or 0: ViM's rule from the feature dimension)."""

    name = "residual"
    label = "Residual"
    paper = "Wang et al., CVPR 2022"
    reference = f"{OPENOOD} openood/postprocessors/residual_postprocessor.py"
    needs_fit = True
    needs_head = True
    parameters = (Param("dim", int, None, 1, 10**5, help="principal dimension D (empty or 0: ViM's rule from the feature dimension)",
                        source="ViM's rule"),)

    def fit(self, fit: Outputs, head: Head | None = None) -> Detector:
        head = require_head(head, "Residual")
        d = fit.features.shape[1]
        D = principal_dim_of(self, d, "ViM's rule")
        if not 0 < D < d:
            raise DetectorError(f"Residual: principal dimension {D} must be between 1 and the feature dimension {d} - 1")
        self.u, _, eigvec = uncentred_eigh(fit, head)
        self.space = np.ascontiguousarray(eigvec[:, D:])
        return self

    def score(self, data: Outputs) -> np.ndarray:
        return -np.linalg.norm((data.features.astype(np.float64) - self.u) @ self.space, axis=1)
