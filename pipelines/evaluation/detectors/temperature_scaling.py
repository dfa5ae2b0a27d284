import numpy as np

from . import OPENOOD, PYTORCH_OOD, Detector, DetectorError, Head, Outputs, Param, register_detector, softmax


def nll(logits: np.ndarray, labels: np.ndarray, t: float) -> float:
    """Mean negative log-likelihood of the labels under softmax(logits / t)."""
    z = logits / t
    m = z.max(axis=1, keepdims=True)
    log_norm = (m + np.log(np.exp(z - m).sum(axis=1, keepdims=True)))[:, 0]
    return float(np.mean(log_norm - z[np.arange(len(z)), labels]))


def nll_and_slope(logits: np.ndarray, labels: np.ndarray, t: float) -> tuple[float, float]:
    """The NLL at ``t`` and its derivative in t: d/dt mean(lse(z / t) - z_y / t) = mean(z_y - E_p[z]) / t^2,
    p = softmax(z / t)."""
    p = softmax(logits / t)
    expected = np.sum(p * logits, axis=1)
    return nll(logits, labels, t), float(np.mean(logits[np.arange(len(logits)), labels] - expected)) / (t * t)


# OpenOOD's setup (temp_scaling_postprocessor.py): torch.optim.LBFGS([T], lr=0.01, max_iter=50), no line search,
# one step() call from T = 1.5; torch's other defaults: tolerance_grad 1e-7, tolerance_change 1e-9, history 100,
# max_eval = max_iter * 5 // 4
OPENOOD_START, OPENOOD_LR, OPENOOD_ITERATIONS = 1.5, 0.01, 50


def lbfgs_temperature(logits: np.ndarray, labels: np.ndarray, *, start: float = OPENOOD_START, lr: float = OPENOOD_LR,
                      max_iter: int = OPENOOD_ITERATIONS, tolerance_grad: float = 1e-7, tolerance_change: float = 1e-9,
                      history: int = 100) -> tuple[float, int]:
    """The temperature where one run of fixed-step L-BFGS on the NLL stops, as torch.optim.LBFGS runs it
    without a line search (Nocedal and Wright, Numerical Optimization, Algorithm 7.4, the two-loop
    recursion, on one variable): the first step is lr * min(1, 1 / |g|) along -g, later ones lr along
    the quasi-Newton direction; curvature pairs with y*s <= 1e-10 are not kept; it stops after
    ``max_iter`` steps (the last one taken without evaluating), when the direction no longer descends,
    when a step or a change of the loss falls under ``tolerance_change``, or when |g| <= ``tolerance_grad``.
    Returns (T, steps taken)."""
    max_eval = max_iter * 5 // 4
    t_now = float(start)
    loss, grad = nll_and_slope(logits, labels, t_now)
    evals = 1
    if abs(grad) <= tolerance_grad:
        return t_now, 0
    pairs: list[tuple[float, float, float]] = []  # (s, y, 1 / (y s)), oldest first
    h_diag = 1.0
    direction = step = 0.0
    prev_grad = prev_loss = 0.0
    steps = 0
    while steps < max_iter:
        steps += 1
        if steps == 1:
            direction = -grad
        else:
            y, s = grad - prev_grad, direction * step
            ys = y * s
            if ys > 1e-10:
                if len(pairs) == history:
                    pairs.pop(0)
                pairs.append((s, y, 1.0 / ys))
                h_diag = ys / (y * y)
            q, alphas = -grad, [0.0] * len(pairs)
            for i in range(len(pairs) - 1, -1, -1):
                s_i, y_i, rho = pairs[i]
                alphas[i] = s_i * q * rho
                q -= alphas[i] * y_i
            r = q * h_diag
            for i, (s_i, y_i, rho) in enumerate(pairs):
                r += s_i * (alphas[i] - y_i * r * rho)
            direction = r
        prev_grad, prev_loss = grad, loss
        step = min(1.0, 1.0 / abs(grad)) * lr if steps == 1 else lr
        if grad * direction > -tolerance_change:
            break
        t_now += step * direction
        if steps == max_iter:
            break
        if not t_now > 0:
            raise DetectorError(f"Temperature scaling (fit=openood_lbfgs): L-BFGS reached T = {t_now:.4g} after {steps} steps; "
                                "use fit=nll_minimum")
        loss, grad = nll_and_slope(logits, labels, t_now)
        evals += 1
        if evals >= max_eval or abs(grad) <= tolerance_grad or abs(direction * step) <= tolerance_change \
                or abs(loss - prev_loss) < tolerance_change:
            break
    if not t_now > 0:
        raise DetectorError(f"Temperature scaling (fit=openood_lbfgs): L-BFGS stopped at T = {t_now:.4g}; use fit=nll_minimum")
    return t_now, steps


@register_detector
class TemperatureScaling(Detector):
    """Temperature scaling (Guo et al., ICML 2017): score = max_c softmax(o / T)_c, T fitted to the
    labelled ID fit images. ``fit`` names how T is found:

    - ``nll_minimum`` (default): the T minimising the mean negative log-likelihood, the temperature
      the paper defines (bounded Brent search over log T in [0.01, 100], scipy);
    - ``openood_lbfgs``: the T at which OpenOOD's one run of L-BFGS stops (50 iterations at learning
      rate 0.01 from T = 1.5, no line search, torch's tolerances), usually short of the minimum:
      OpenOOD's scores. Computed in float64 (OpenOOD runs float32 on the GPU: T then differs by
      about 1e-7 relative in the tests). pytorch-ood runs the same optimiser from T = 1.

    The T found is noted with the results (with fit=openood_lbfgs, beside the NLL minimum)."""

    name = "temperature_scaling"
    label = "Temperature scaling"
    paper = "Guo et al., ICML 2017"
    reference = (f"{OPENOOD} openood/postprocessors/temp_scaling_postprocessor.py; "
                 f"{PYTORCH_OOD} src/pytorch_ood/detector/tscaling.py")
    needs_fit = True
    parameters = (Param("fit", str, "nll_minimum", help="how T is found: the NLL minimum, or where OpenOOD's L-BFGS run stops "
                        "(50 steps, lr 0.01, from 1.5)", source="Guo et al.", choices=("nll_minimum", "openood_lbfgs")),)

    def fit(self, fit: Outputs, head: Head | None = None) -> Detector:
        from scipy.optimize import minimize_scalar

        if fit.labels is None or not np.any(fit.labels >= 0):
            raise DetectorError("Temperature scaling needs class labels on the ID fit set (images in wnid folders of ID classes)")
        keep = fit.labels >= 0
        logits, labels = fit.logits[keep].astype(np.float64), fit.labels[keep]
        if labels.max() >= logits.shape[1]:
            raise DetectorError(f"Temperature scaling: a fit label ({int(labels.max())}) is beyond the {logits.shape[1]} logits")
        res = minimize_scalar(lambda log_t: nll(logits, labels, float(np.exp(log_t))), bounds=(np.log(1e-2), np.log(1e2)),
                              method="bounded", options={"xatol": 1e-10})
        minimum = float(np.exp(res.x))
        if self.params["fit"] == "openood_lbfgs":
            self.temperature, steps = lbfgs_temperature(logits, labels)
            self.notes.append(f"Temperature scaling: T = {self.temperature:.4g} (where OpenOOD's L-BFGS run stops: {steps} steps "
                              f"of lr 0.01 from 1.5; the NLL minimum is at T = {minimum:.4g})")
        else:
            self.temperature = minimum
            self.notes.append(f"Temperature scaling: T = {self.temperature:.4g} (the NLL minimum on the ID fit set)")
        return self

    def score(self, data: Outputs) -> np.ndarray:
        return softmax(data.logits.astype(np.float64) / self.temperature).max(axis=1)
