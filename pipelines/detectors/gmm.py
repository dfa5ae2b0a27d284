import numpy as np

from . import OPENOOD, Detector, DetectorError, Head, Outputs, Param, register_detector

PCA_SOLVER = "covariance_eigh"


@register_detector
class GMM(Detector):
    """Gaussian mixture (OpenOOD's GMM baseline): the penultimate features projected on the top
    ``dim`` principal axes of the ID fit features (scikit-learn's PCA components, without
    centring, as OpenOOD's reduce_feature_dim), a mixture of ``components`` Gaussians with one
    tied covariance fitted by scikit-learn (random_state 0); OpenOOD's score is
    sum_k w_k exp(-(z - m_k)^T P (z - m_k) / 2), we return its logarithm (the same order, and no
    underflow to 0 far from the means). Defaults: OpenOOD's last layer, 50 dimensions and 50
    components. The PCA is solved exactly from the covariance (scikit-learn's covariance_eigh:
    OpenOOD's default solver may be randomized, unseeded, for its shapes)."""

    name = "gmm"
    label = "GMM"
    paper = "Lee et al., NeurIPS 2018 (GMM baseline); OpenOOD v1.5"
    reference = f"{OPENOOD} openood/postprocessors/gmm_postprocessor.py (compute_single_GMM_score), mds_ensemble_postprocessor.py"
    needs_fit = True
    parameters = (Param("components", int, 50, 1, 10**4, help="mixture components", source="OpenOOD's gmm.yml (last layer)"),
                  Param("dim", int, 50, 1, 10**5, help="PCA dimensions kept", source="OpenOOD's gmm.yml (pca_50)"))

    def fit(self, fit: Outputs, head: Head | None = None) -> Detector:
        from sklearn.decomposition import PCA
        from sklearn.mixture import GaussianMixture

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
        self.transform = PCA(n_components=dim, svd_solver=PCA_SOLVER).fit(x).components_.T
        gm = GaussianMixture(n_components=k, random_state=0, covariance_type="tied").fit(x @ self.transform)
        self.means, self.precision, self.weights = gm.means_, gm.precisions_, gm.weights_
        return self

    def score(self, data: Outputs) -> np.ndarray:
        from scipy.special import logsumexp

        z = data.features.astype(np.float64) @ self.transform
        zp = z @ self.precision
        d = np.sum(zp * z, axis=1)[:, None] - 2.0 * zp @ self.means.T + np.sum((self.means @ self.precision) * self.means, axis=1)[None, :]
        return logsumexp(-0.5 * d, b=self.weights[None, :], axis=1)
