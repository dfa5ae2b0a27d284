import numpy as np

from . import OPENOOD, Detector, DetectorError, Head, Outputs, Param, logsumexp, register_detector, require_head, shared


def head_origin(head: Head) -> np.ndarray:
    """u = -pinv(W) b, the minimum-norm least-squares solution of W u = -b. By a QR decomposition of W
    (or of W^T when C < d) where that triangle is well conditioned (LAPACK's estimate of its
    reciprocal condition above 1e-7: u then agrees with the SVD pseudo-inverse's to about 1e-9 or
    better), about 20x faster than the SVD for a 1,000 x 1,280 head; the SVD otherwise."""
    from scipy.linalg import lapack, qr, solve_triangular

    w, b = head.weight, head.bias
    wide = w.shape[0] < w.shape[1]
    q, r = qr(w.T if wide else w, mode="economic")
    rcond, info = lapack.dtrcon(r, norm="1", uplo="U", diag="N")
    if info != 0 or not rcond > 1e-7:
        return -np.linalg.pinv(w) @ b
    if wide:  # W = R^T Q^T: the minimum-norm solution is Q R^-T (-b)
        return q @ solve_triangular(r, -b, trans="T")
    return solve_triangular(r, q.T @ -b)  # W = Q R, full column rank: the least-squares solution


def uncentred_eigh(fit: Outputs, head: Head) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(u = -pinv(W) b, eigenvalues descending, their eigenvectors) of the uncentred covariance of
    the fit features offset by u: ViM's and Residual's principal space, computed once per fit set
    and last layer."""
    def compute():
        u = head_origin(head)
        x = fit.features.astype(np.float64) - u
        eigval, eigvec = np.linalg.eigh(x.T @ x / len(x))
        order = np.argsort(eigval)[::-1]
        return u, eigval[order], np.ascontiguousarray(eigvec[:, order])
    return shared(fit, ("uncentred_eigh", id(head)), compute, head)


def principal_dim(d: int) -> int:
    """ViM's rule for the principal space (Wang et al., CVPR 2022; NINCO app. C)."""
    if d >= 2048:
        return 1000
    if d >= 768:
        return 512
    return d // 2


def principal_dim_of(detector: Detector, d: int, rule: str) -> int:
    """The principal dimension ``detector`` uses for ``d``-d features: its ``dim`` parameter, or
    ViM's rule (noted with the results, since it differs per model)."""
    if detector.params["dim"]:
        return int(detector.params["dim"])
    D = principal_dim(d)
    detector.notes.append(f"dim={D}: {rule} for {d}-d features")
    return D


@register_detector
class ViM(Detector):
    """Virtual-logit matching (Wang et al., CVPR 2022). Features are offset by the origin
    u = -pinv(W) b; the principal space is spanned by the top-D eigenvectors of the offset fit
    features' (uncentred) covariance; the residual norm scaled by alpha = sum of max logits /
    sum of residual norms over the fit set is a virtual logit o_0, and the paper's score is
    -softmax(o_0, o_1..o_C)_0 = -sigmoid(o_0 - logsumexp(o)). We return logsumexp(o) - o_0,
    which orders images identically without the sigmoid's saturation into ties."""

    name = "vim"
    label = "ViM"
    paper = "Wang et al., CVPR 2022"
    reference = f"{OPENOOD} openood/postprocessors/vim_postprocessor.py"
    needs_fit = True
    needs_head = True
    parameters = (Param("dim", int, None, 1, 10**5, help="principal dimension D (empty or 0: the paper's rule from the feature dimension)",
                        source="ViM's rule"),)

    def fit(self, fit: Outputs, head: Head | None = None) -> Detector:
        head = require_head(head, "ViM")
        d = fit.features.shape[1]
        D = principal_dim_of(self, d, "the paper's rule")
        if not 0 < D < d:
            raise DetectorError(f"ViM: principal dimension {D} must be between 1 and the feature dimension {d} - 1")
        if len(fit) <= D:
            raise DetectorError(f"ViM: the ID fit set has {len(fit)} images but the principal space has D={D} dimensions "
                                f"(the paper's rule for {d}-d features); it needs more fit images than D")
        self.u, _, eigvec = uncentred_eigh(fit, head)
        x = fit.features.astype(np.float64) - self.u
        self.residual_space = np.ascontiguousarray(eigvec[:, D:])
        residual = np.linalg.norm(x @ self.residual_space, axis=1)
        self.alpha = float(fit.logits.astype(np.float64).max(axis=1).sum() / max(residual.sum(), 1e-12))
        self.head, self.dim = head, D
        return self

    def score(self, data: Outputs) -> np.ndarray:
        x = data.features.astype(np.float64) - self.u
        virtual = self.alpha * np.linalg.norm(x @ self.residual_space, axis=1)
        return logsumexp(data.logits) - virtual
