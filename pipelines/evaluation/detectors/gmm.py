from typing import Any

import numpy as np

from . import OPENOOD, Detector, DetectorError, Head, Outputs, Param, register_detector

PCA_SOLVER = "covariance_eigh"


def tied_mixture(**kwargs: Any) -> Any:
    """scikit-learn's GaussianMixture with covariance_type "tied", its E-step computing X @ L (L the
    precision's Cholesky factor) once per step instead of once per component, as scikit-learn's
    loop does: the same products and the same per-component arithmetic, so the same numbers bit
    for bit (tests/pipelines/test_detectors_reference.py compares the fit with scikit-learn's own),
    about 5x faster for 50 components."""
    import math

    from sklearn.mixture import GaussianMixture
    from sklearn.mixture._gaussian_mixture import _compute_log_det_cholesky

    class TiedMixture(GaussianMixture):
        def _estimate_log_prob(self, X, xp=None):
            if not isinstance(X, np.ndarray):  # another array namespace: scikit-learn's own loop
                return super()._estimate_log_prob(X, xp=xp)
            n_features = X.shape[1]
            chol = self.precisions_cholesky_
            log_det = _compute_log_det_cholesky(chol, "tied", n_features)
            xl = X @ chol
            y = np.empty_like(xl)
            by_component = np.empty((self.means_.shape[0], X.shape[0]), dtype=X.dtype)  # written row by row, contiguous
            for k in range(self.means_.shape[0]):
                np.subtract(xl, self.means_[k, :] @ chol, out=y)
                np.square(y, out=y)
                np.sum(y, axis=1, out=by_component[k])
            log_prob = np.ascontiguousarray(by_component.T)
            return -0.5 * (n_features * math.log(2 * math.pi) + log_prob) + log_det

    return TiedMixture(covariance_type="tied", **kwargs)


@register_detector
class GMM(Detector):
    """Gaussian mixture (OpenOOD's GMM baseline): the penultimate features projected on the top
    ``dim`` principal axes of the ID fit features (scikit-learn's PCA components, without
    centring, as OpenOOD's reduce_feature_dim), a mixture of ``components`` Gaussians with one
    tied covariance fitted by scikit-learn (random_state 0); OpenOOD's score is
    sum_k w_k exp(-(z - m_k)^T P (z - m_k) / 2), we return its logarithm (the same order, and no
    underflow to 0 far from the means). Defaults: OpenOOD's last layer, 50 dimensions and 50
    components. ``pca`` names how the principal axes are solved:

    - ``exact`` (default): from the covariance (scikit-learn's covariance_eigh), the same axes on
      every run;
    - ``openood``: OpenOOD's call, ``PCA(n_components=dim)``, which leaves the solver to
      scikit-learn's "auto" policy: the randomized SVD (Halko et al., SIAM Review 2011) for fits of
      more than 500 images whose features are too wide for the covariance route (more than 1,000
      dimensions, or fewer than 10 images per dimension; scikit-learn before 1.5 took it for any
      width), exact otherwise. Randomized axes approximate the top ones, so the subspace, and the
      scores, differ from exact. OpenOOD leaves that solver unseeded (its axes change from run to
      run); here it is seeded with ``pca_seed``, so a run can be repeated."""

    name = "gmm"
    label = "GMM"
    paper = "Lee et al., NeurIPS 2018 (GMM baseline); OpenOOD v1.5"
    reference = f"{OPENOOD} openood/postprocessors/gmm_postprocessor.py (compute_single_GMM_score), mds_ensemble_postprocessor.py"
    needs_fit = True
    parameters = (Param("components", int, 50, 1, 10**4, help="mixture components", source="OpenOOD's gmm.yml (last layer)"),
                  Param("dim", int, 50, 1, 10**5, help="PCA dimensions kept", source="OpenOOD's gmm.yml (pca_50)"),
                  Param("pca", str, "exact", help="how the principal axes are solved: exactly, or by OpenOOD's call (scikit-learn's "
                        "automatic choice: randomized for wide features)", source="ours", choices=("exact", "openood")),
                  Param("pca_seed", int, 0, 0, 2**32 - 1, help="random_state of the randomized PCA with pca=openood (OpenOOD leaves it "
                        "unseeded)", source="ours (OpenOOD's is unseeded)"))

    def fit(self, fit: Outputs, head: Head | None = None) -> Detector:
        from sklearn.decomposition import PCA

        x = fit.features.astype(np.float64)
        dim, k = int(self.params["dim"]), int(self.params["components"])
        if len(x) < 20:
            raise DetectorError(f"GMM: the ID fit set has {len(x)} images; a mixture needs at least 20")
        if dim > min(x.shape) - 1:
            self.notes.append(f"GMM: dim={dim} is more than the fit set and features allow; used dim={min(x.shape) - 1}")
            dim = min(x.shape) - 1
        if k > len(x) // 10:  # at least 10 fit images per component, as KNN lowers K to the fit set
            self.notes.append(f"GMM: {k} components for {len(x)} ID fit images; used {len(x) // 10} (10 images per component)")
            k = len(x) // 10
        if self.params["pca"] == "openood":
            pca = PCA(n_components=dim, random_state=int(self.params["pca_seed"])).fit(x)
            solver = getattr(pca, "_fit_svd_solver", "automatic")  # what scikit-learn's policy chose for these shapes
            self.notes.append(f"GMM: PCA as OpenOOD calls it: scikit-learn's {solver} solver"
                              + (f", seed {self.params['pca_seed']} (OpenOOD's is unseeded)" if solver == "randomized" else ""))
        else:
            pca = PCA(n_components=dim, svd_solver=PCA_SOLVER).fit(x)
        self.transform = pca.components_.T
        gm = tied_mixture(n_components=k, random_state=0).fit(x @ self.transform)
        self.means, self.precision, self.weights = gm.means_, gm.precisions_, gm.weights_
        return self

    def score(self, data: Outputs) -> np.ndarray:
        from scipy.special import logsumexp

        z = data.features.astype(np.float64) @ self.transform
        zp = z @ self.precision
        d = np.sum(zp * z, axis=1)[:, None] - 2.0 * zp @ self.means.T + np.sum((self.means @ self.precision) * self.means, axis=1)[None, :]
        return logsumexp(-0.5 * d, b=self.weights[None, :], axis=1)
