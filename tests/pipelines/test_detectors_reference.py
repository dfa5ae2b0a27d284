"""Every output- and feature-level detector against its reference code, the reference's formula
written here (not calling our helpers), in float64, to a relative difference of 1e-9, on three
kinds of input: continuous, tied (coarse values, repeated rows) and saturated (logits of hundreds,
where the softmax is exactly 0 and 1 in float64).

The references, read at these commits (issue 32):
- OpenOOD v1.5: Jingkang50/OpenOOD@3c35632ee91b54b09d1f085d04f94744cece7d0b (openood/postprocessors/*,
  openood/networks/ash_net.py, scale_net.py, openood/evaluators/metrics.py);
- pytorch-ood: kkirchheim/pytorch-ood@d04767360a382d2ea1678d5a571cae66b73e5206 (src/pytorch_ood/detector/*);
- NINCO's appendix C (Bitterwolf et al., ICML 2023) for the cosine detector, which no library has;
- pNML: the authors' kobybibas/pnml_ood_detection@0533589204b0e71a5af151d46cb1e1c61aa0bcbc (src/score_utils.py).
Where a reference's arithmetic is undefined (pytorch-ood's p * log(p) at p = 0 is NaN), the limit is
taken (0) and the comment says so.

Inputs are chosen so that float32 features and logits are exact (values on a dyadic grid), so the
model's logits and the head's logits of the features agree to the last bit, as a real model's
would only to float32 rounding; the references recompute logits from features where their code
does (OpenOOD's fc layer) and take the model's logits where theirs does.
"""
import numpy as np
import pytest
import torch

from pipelines.evaluation.detectors import DETECTORS, Head, Outputs, get_detector

C, D = 12, 24
FIT, TEST = 360, 80


def _case(kind: str, seed: int = 0):
    """(fit, test, head): non-negative features with a block per class (a ReLU network's
    penultimate layer), weights on a 1/32 grid, features on a 1/64 grid: logits are exact in float32."""
    rng = np.random.default_rng(seed)
    w = np.round(rng.normal(0, 0.4, (C, D)) * 32) / 32
    for c in range(C):
        w[c, (2 * c) % D:(2 * c) % D + 2] += 1.0
    b = np.round(rng.normal(0, 0.5, C) * 32) / 32
    if kind == "saturated":
        w, b = w * 256, b * 256  # logits of thousands: the softmax holds exact 0s and 1s in float64

    def feats(n, ood=False):
        labels = rng.integers(0, C, n)
        x = np.abs(rng.normal(0.6, 0.5, (n, D)))
        if not ood:
            x[np.arange(n), (2 * labels) % D] += 2.5
            x[np.arange(n), (2 * labels) % D + 1] += 2.0
        grid = 4 if kind == "tied" else 64  # "tied": values on a quarter grid, many equal
        x = np.round(x * grid) / grid
        if kind == "tied":
            x[1::7] = x[0::7][:len(x[1::7])]  # repeated rows too
        return x, labels

    head = Head(weight=w, bias=b)

    def outputs(n, ood=False):
        x, labels = feats(n, ood)
        logits = x @ w.T + b
        assert np.array_equal(logits.astype(np.float32).astype(np.float64), logits)  # exact in float32
        return Outputs(features=x, logits=logits, labels=None if ood else labels)

    fit = outputs(FIT)
    test_id, test_ood = outputs(TEST // 2), outputs(TEST // 2, ood=True)
    test = Outputs(features=np.concatenate([test_id.features, test_ood.features]),
                   logits=np.concatenate([test_id.logits, test_ood.logits]))
    return fit, test, head


# -- small float64 tools written for the references ------------------------------------------------


def f64(a):
    return np.asarray(a, dtype=np.float64)


def lse(z):
    m = z.max(axis=1, keepdims=True)
    return m[:, 0] + np.log(np.exp(z - m).sum(axis=1))


def sm(z):
    e = np.exp(z - z.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def fc(x, head):
    """OpenOOD's net.fc / get_fc: the logits recomputed from the features."""
    return x @ head.weight.T + head.bias


# -- the references -------------------------------------------------------------------------------------


def ref_msp(fit, data, head):  # OpenOOD base_postprocessor.py: max softmax
    return sm(f64(data.logits)).max(axis=1)


def ref_maxlogit(fit, data, head):  # OpenOOD maxlogit_postprocessor.py
    return f64(data.logits).max(axis=1)


def ref_energy(fit, data, head):  # OpenOOD ebo_postprocessor.py, temperature 1: T * logsumexp(o / T)
    return lse(f64(data.logits))


def ref_entropy(fit, data, head):  # pytorch-ood entropy.py: -(p.log() * p).sum() as outlier score; 0 log 0 = 0 (NaN there)
    p = sm(f64(data.logits))
    return np.sum(np.where(p > 0, p * np.log(np.where(p > 0, p, 1.0)), 0.0), axis=1)


def ref_kl_matching(fit, data, head):
    # pytorch-ood klmatching.py: d = mean posterior, KL = sum p log(p / d) with no floor; classes by the model's
    # prediction and the minimum over classes as NINCO app. C and OpenOOD's kl_matching_postprocessor.py
    pf = sm(f64(fit.logits))
    pred = pf.argmax(axis=1)
    ds = [pf[pred == c].mean(axis=0) for c in sorted(set(pred.tolist()))]
    p = sm(f64(data.logits))
    out = []
    for pi in p:
        kls = []
        for d in ds:
            with np.errstate(divide="ignore"):
                terms = np.where(pi > 0, pi * (np.log(np.where(pi > 0, pi, 1.0)) - np.log(d)), 0.0)
            kls.append(terms.sum())
        out.append(-min(kls))
    return np.array(out)


def ref_mahalanobis(fit, data, head, x=None, q=None):
    # OpenOOD mds_postprocessor.py: class means; EmpiricalCovariance of the class-centred features; its precision;
    # score = max_c -(x - mu_c) P (x - mu_c)
    x, y = (f64(fit.features) if x is None else x), fit.labels
    mus = {c: x[y == c].mean(axis=0) for c in sorted(set(y.tolist()))}
    centred = np.stack([xi - mus[yi] for xi, yi in zip(x, y)])
    centred_c = centred - centred.mean(axis=0)  # EmpiricalCovariance(assume_centered=False) subtracts the mean
    prec = np.linalg.pinv(centred_c.T @ centred_c / len(x))
    q = f64(data.features) if q is None else q
    return np.array([max(-(xi - m) @ prec @ (xi - m) for m in mus.values()) for xi in q])


def ref_mahalanobis_pp(fit, data, head):
    # Mahalanobis++ (Mueller & Hein, ICML 2025): features divided by their L2 norm (in float64), then Mahalanobis as above
    def n(a):
        a = f64(a)
        return a / np.sqrt((a ** 2).sum(axis=1, keepdims=True))
    return ref_mahalanobis(fit, data, head, x=n(fit.features), q=n(data.features))


def ref_relative_mahalanobis(fit, data, head):
    # OpenOOD rmds_postprocessor.py: class scores -(md_c) + md_0 with md_0 under one Gaussian of all fit features
    x = f64(fit.features)
    mu0 = x.mean(axis=0)
    prec0 = np.linalg.pinv((x - mu0).T @ (x - mu0) / len(x))
    md0 = np.array([(xi - mu0) @ prec0 @ (xi - mu0) for xi in f64(data.features)])
    return ref_mahalanobis(fit, data, head) + md0


def _principal_residual(fit, head, dim):
    u = -np.linalg.pinv(head.weight) @ head.bias
    x = f64(fit.features) - u
    cov = x.T @ x / len(x)  # EmpiricalCovariance(assume_centered=True)
    vals, vecs = np.linalg.eig(cov)
    ns = np.ascontiguousarray(vecs.T[np.argsort(vals * -1)[dim:]].T).real
    return u, ns


def ref_vim(fit, data, head, dim=12):
    # OpenOOD vim_postprocessor.py: u = -pinv(w) b; NS from the covariance's eigenvectors beyond dim;
    # alpha = sum of max train logits / sum of train residual norms; score = -alpha |(x - u) NS| + energy
    u, ns = _principal_residual(fit, head, dim)
    vlogit_train = np.linalg.norm((f64(fit.features) - u) @ ns, axis=-1)
    alpha = fc(f64(fit.features), head).max(axis=-1).mean() / vlogit_train.mean()
    return -np.linalg.norm((f64(data.features) - u) @ ns, axis=-1) * alpha + lse(f64(data.logits))


def ref_residual(fit, data, head, dim=12):  # OpenOOD residual_postprocessor.py
    u, ns = _principal_residual(fit, head, dim)
    return -np.linalg.norm((f64(data.features) - u) @ ns, axis=-1)


def ref_knn(fit, data, head, k=7):
    # OpenOOD knn_postprocessor.py: x / (|x| + 1e-10), faiss IndexFlatL2, the K-th squared distance negated;
    # the paper (and ours) take the distance itself: its square root
    def n(x):
        x = f64(x)
        return x / (np.linalg.norm(x, axis=-1, keepdims=True) + 1e-10)
    bank, q = n(fit.features), n(data.features)
    d = np.sqrt(((q[:, None, :] - bank[None, :, :]) ** 2).sum(axis=2))
    return -np.sort(d, axis=1)[:, k - 1]


def ref_react(fit, data, head, percentile=99.0):
    # OpenOOD react_postprocessor.py: threshold = np.percentile(activations.flatten(), p); clip(max=threshold); energy
    t = np.percentile(f64(fit.features).flatten(), percentile)
    return lse(fc(np.minimum(f64(data.features), t), head))


def _ash(x, percentile, how):
    # OpenOOD ash_net.py (the authors' code): k = n - int(np.round(n * p / 100)); torch.topk; scatter
    t = torch.tensor(x, dtype=torch.float64)
    n = t.shape[1]
    k = n - int(np.round(n * percentile / 100.0))
    s1 = t.sum(dim=1)
    v, i = torch.topk(t, k, dim=1)
    if how == "b":
        return torch.zeros_like(t).scatter_(1, i, (s1 / k).unsqueeze(1).expand(v.shape)).numpy()
    pruned = torch.zeros_like(t).scatter_(1, i, v)
    if how == "p":
        return pruned.numpy()
    return (pruned * torch.exp(s1 / pruned.sum(dim=1))[:, None]).numpy()


def ref_ash(fit, data, head):
    return lse(fc(_ash(f64(data.features), 90.0, "s"), head))


def ref_ash_p(fit, data, head):
    return lse(fc(_ash(f64(data.features), 90.0, "p"), head))


def ref_ash_b(fit, data, head):
    return lse(fc(_ash(f64(data.features), 65.0, "b"), head))


def ref_scale(fit, data, head, percentile=85.0):
    # OpenOOD scale_net.py: input * exp(s1 / s2), s2 the sum of torch.topk's k values; energy
    t = torch.tensor(f64(data.features))
    n = t.shape[1]
    k = n - int(np.round(n * percentile / 100.0))
    v, _ = torch.topk(t, k, dim=1)
    return lse(fc((t * torch.exp(t.sum(dim=1) / v.sum(dim=1))[:, None]).numpy(), head))


def ref_cosine(fit, data, head):  # NINCO app. C: max_c cos(h, mu_c), mu_c the class means of the fit set
    x, y = f64(fit.features), fit.labels
    mus = np.stack([x[y == c].mean(axis=0) for c in sorted(set(y.tolist()))])
    q = f64(data.features)
    return np.array([max(qi @ m / (np.linalg.norm(qi) * np.linalg.norm(m)) for m in mus) for qi in q])


def ref_mcm(fit, data, head):  # OpenOOD mcm_postprocessor.py, tau 1, on NINCO's cosines to the class means
    x, y = f64(fit.features), fit.labels
    mus = np.stack([x[y == c].mean(axis=0) for c in sorted(set(y.tolist()))])
    q = f64(data.features)
    cos = (q / np.linalg.norm(q, axis=1, keepdims=True)) @ (mus / np.linalg.norm(mus, axis=1, keepdims=True)).T
    return sm(cos).max(axis=1)


def ref_temperature_scaling(fit, data, head, t=None):
    # OpenOOD temp_scaling_postprocessor.py / pytorch-ood tscaling.py: max softmax(o / T); T given by the detector,
    # checked below to be the NLL minimum
    return sm(f64(data.logits) / t).max(axis=1)


def ref_gen(fit, data, head, gamma=0.1, m=100):
    # OpenOOD gen_postprocessor.py: torch.sort(probs)[0][:, -M:]; -sum(p^g (1 - p)^g)
    p = torch.tensor(sm(f64(data.logits)))
    top = torch.sort(p, dim=1)[0][:, -m:]
    return (-torch.sum(top ** gamma * (1 - top) ** gamma, dim=1)).numpy()


def ref_gradnorm(fit, data, head):
    # OpenOOD gradnorm_postprocessor.py: per image, fc with the head's weight and bias, targets = ones,
    # loss = mean(sum(-targets * log_softmax(fc(x)))), score = sum |d loss / d fc.weight|
    lin = torch.nn.Linear(D, C).double()
    lin.weight.data[...] = torch.tensor(head.weight)
    lin.bias.data[...] = torch.tensor(head.bias)
    out = []
    for xi in torch.tensor(f64(data.features)):
        lin.zero_grad()
        loss = torch.mean(torch.sum(-torch.ones((1, C), dtype=torch.float64) * torch.log_softmax(lin(xi[None]), dim=-1), dim=-1))
        loss.backward()
        out.append(torch.sum(torch.abs(lin.weight.grad.data)).item())
    return np.array(out)


def ref_dice(fit, data, head, p=90.0):
    # OpenOOD dice_postprocessor.py: contrib = mean_act[None, :] * w; thresh = np.percentile(contrib, p);
    # masked_w = w * (contrib > thresh); energy of x @ masked_w.T + b
    contrib = f64(fit.features).mean(0)[None, :] * head.weight
    masked = head.weight * (contrib > np.percentile(contrib, p))
    return lse((f64(data.features)[:, None, :] * masked).sum(2) + head.bias)


def ref_she(fit, data, head):
    # OpenOOD she_postprocessor.py: per class the mean feature of fit images with label == prediction == c;
    # score = inner product with the predicted class's pattern
    pred = f64(fit.logits).argmax(1)
    pats = {c: f64(fit.features)[(fit.labels == c) & (pred == c)].mean(0) for c in range(C)
            if ((fit.labels == c) & (pred == c)).any()}
    return np.array([xi @ pats[int(c)] for xi, c in zip(f64(data.features), f64(data.logits).argmax(1))])


def ref_nnguide(fit, data, head, k=100):
    # OpenOOD nnguide_postprocessor.py: normalizer = x / |x| + 1e-10 (as written); bank = normalised fit features *
    # logsumexp(fit logits); faiss IndexFlatIP top-K inner products, their mean, times the energy
    def normalizer(x):
        return x / np.linalg.norm(x, axis=-1, keepdims=True) + 1e-10
    bank = normalizer(f64(fit.features)) * lse(f64(fit.logits))[:, None]
    ips = normalizer(f64(data.features)) @ bank.T
    conf = -np.sort(-ips, axis=1)[:, :k].mean(axis=1)
    return conf * lse(f64(data.logits))


def ref_relation(fit, data, head, pw=1.0):
    # OpenOOD relation_postprocessor.py: x / sqrt(sum x^2 + 1e-10); rel = clamp(f f_t^T, min=0) * (p p_t^T);
    # edges with |rel| <= 0.03 dropped; sum(sign(rel) |rel|^pow)
    def n(x):
        return x / np.sqrt((x ** 2).sum(-1) + 1e-10).reshape(-1, 1)
    rel = np.maximum(n(f64(data.features)) @ n(f64(fit.features)).T, 0.0) * (sm(f64(data.logits)) @ sm(f64(fit.logits)).T)
    rel = (np.abs(rel) > 0.03) * rel
    return (np.sign(rel) * np.abs(rel) ** pw).sum(-1)


def ref_fdbd(fit, data, head):
    # OpenOOD fdbd_postprocessor.py: denominator_matrix[p] = |w - w_p| with 1 at p; logits_sub = |o - max o|;
    # score = sum(logits_sub / denominator_matrix[pred]) / |x - train_mean|
    w = head.weight
    den = np.zeros((C, C))
    for p in range(C):
        row = np.linalg.norm(w - w[p, :], axis=1)
        row[p] = 1
        den[p, :] = row
    o = f64(data.logits)
    pred = o.argmax(1)
    sub = np.abs(o - o.max(1)[:, None])
    return np.sum(sub / den[pred], axis=1) / np.linalg.norm(f64(data.features) - f64(fit.features).mean(0), axis=1)


def ref_nci(fit, data, head, alpha=1e-4):
    # OpenOOD nci_postprocessor.py: sum(w[pred] * (x - mean), 1) / |x - mean| + alpha * |x|_1
    x, mean = f64(data.features), f64(fit.features).mean(0)
    pred = f64(data.logits).argmax(1)
    return np.sum(head.weight[pred] * (x - mean), axis=1) / np.linalg.norm(x - mean, axis=1) + alpha * np.abs(x).sum(1)


def ref_vra(fit, data, head, low=10.0, high=90.0):
    # OpenOOD vra_postprocessor.py: clip(min = low-th, max = high-th percentile of all activations); energy of fc
    a = f64(fit.features).flatten()
    return lse(fc(np.clip(f64(data.features), np.percentile(a, low), np.percentile(a, high)), head))


def ref_gmm(fit, data, head, det=None):
    # OpenOOD gmm_postprocessor.py compute_single_GMM_score: prob = sum_k w_k exp(-1/2 (z - m_k) P (z - m_k)),
    # z = x @ transform; with the fitted means, precision, weights and transform of the detector (scikit-learn's fit);
    # the logarithm, taken here as log(sum) with the largest term factored out
    z = f64(data.features) @ det.transform
    terms = np.stack([-0.5 * np.einsum("ij,jk,ik->i", z - m, det.precision, z - m) for m in det.means], axis=1)
    top = terms.max(axis=1)
    return top + np.log((det.weights[None, :] * np.exp(terms - top[:, None])).sum(axis=1))


def ref_pnml(fit, data, head):
    # kobybibas/pnml_ood_detection@0533589204b0e71a5af151d46cb1e1c61aa0bcbc src/score_utils.py: add_bias_term,
    # transform_features (normalise all but the bias column), calc_projection_matrices, calc_regret_on_set;
    # score = -regret; where p = 0 the reference's genie is 0/0, its limit 0 is taken
    def feats(o):
        x = np.hstack((np.ones((len(o.features), 1)), f64(o.features)))
        x[:, 1:] = x[:, 1:] / np.linalg.norm(x[:, 1:], axis=1, keepdims=True)
        return x
    xt = feats(fit)
    p = xt.T @ xt
    p_parallel = np.linalg.pinv(p)
    p_bot = np.eye(p.shape[0]) - p_parallel @ p
    q = feats(data)
    x_par = np.array([x @ p_parallel @ x.T for x in q])
    x_bot = np.array([x @ p_bot @ x.T for x in q])
    g = np.repeat(np.expand_dims(np.maximum(x_bot, x_par / (1 + x_par)), -1), C, axis=1)
    probs = sm(f64(data.logits))
    with np.errstate(divide="ignore", invalid="ignore"):
        genie = np.where(probs > 0, probs / (probs + (1 - probs) * (probs ** g)), 0.0)
    return -np.log(genie.sum(axis=1)) / np.log(C)


REFERENCES = {
    "msp": ({}, ref_msp), "maxlogit": ({}, ref_maxlogit), "energy": ({}, ref_energy), "entropy": ({}, ref_entropy),
    "kl_matching": ({}, ref_kl_matching), "mahalanobis": ({}, ref_mahalanobis), "mahalanobis_pp": ({}, ref_mahalanobis_pp),
    "relative_mahalanobis": ({}, ref_relative_mahalanobis), "vim": ({"dim": 12}, ref_vim), "residual": ({"dim": 12}, ref_residual),
    "knn": ({"k": 7}, ref_knn), "react": ({}, ref_react), "ash": ({}, ref_ash), "ash_p": ({}, ref_ash_p), "ash_b": ({}, ref_ash_b),
    "scale": ({}, ref_scale), "cosine": ({}, ref_cosine), "mcm": ({}, ref_mcm), "gen": ({}, ref_gen),
    "gradnorm": ({}, ref_gradnorm), "dice": ({}, ref_dice), "she": ({}, ref_she), "nnguide": ({}, ref_nnguide),
    "relation": ({}, ref_relation), "fdbd": ({}, ref_fdbd), "nci": ({}, ref_nci), "vra": ({}, ref_vra),
    "pnml": ({}, ref_pnml),
}
NEEDS_THE_DETECTOR = {"temperature_scaling": ref_temperature_scaling, "gmm": ref_gmm}


def test_every_output_and_feature_level_detector_has_a_reference_here():
    from tests.pipelines.test_detectors_more import CHECKED_THERE  # detectors added later, checked in their own file
    from tests.pipelines.test_detectors_openood_conventions import CHECKED_HERE as CHECKED_CONVENTIONS
    from tests.pipelines.test_detectors_vlm import CHECKED_HERE as CHECKED_VLM  # the zero-shot CLIP detectors
    from tests.pipelines.test_detectors_weiper import CHECKED_HERE as CHECKED_WEIPER

    covered = set(REFERENCES) | set(NEEDS_THE_DETECTOR) | CHECKED_THERE | CHECKED_WEIPER | CHECKED_CONVENTIONS | CHECKED_VLM
    assert covered == {n for n, cls in DETECTORS.items() if not cls.input_level}
    assert all(DETECTORS[n].reference for n in DETECTORS)


def _close(got, want):
    got, want = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
    assert got.shape == want.shape and np.all(np.isfinite(got)) and np.all(np.isfinite(want))
    rel = np.abs(got - want) / np.maximum(np.abs(want), 1e-300)
    both_zero = (got == 0) & (want == 0)
    worst = float(np.max(np.where(both_zero, 0.0, rel)))
    assert worst <= 1e-9, f"relative difference {worst:.3g}"


@pytest.mark.parametrize("kind", ["continuous", "tied", "saturated"])
@pytest.mark.parametrize("name", sorted(REFERENCES))
def test_detector_equals_its_reference(name, kind):
    fit, test, head = _case(kind)
    params, ref = REFERENCES[name]
    det = get_detector(name, **params).fit(fit, head)
    _close(det.score(test), ref(fit, test, head))


@pytest.mark.parametrize("kind", ["continuous", "tied", "saturated"])
def test_temperature_scaling_is_the_nll_minimum_and_its_softmax(kind):
    fit, test, head = _case(kind)
    det = get_detector("temperature_scaling").fit(fit, head)
    t = det.temperature
    _close(det.score(test), ref_temperature_scaling(fit, test, head, t=t))

    def nll(tt):  # Guo et al.: the mean negative log-likelihood of the labels under softmax(o / T)
        z = f64(fit.logits) / tt
        return float(np.mean(lse(z) - z[np.arange(len(z)), fit.labels]))
    if 1e-2 * 1.001 < t < 1e2 / 1.001:  # an interior minimum: both neighbours are higher
        assert nll(t) <= nll(t * 1.001) and nll(t) <= nll(t / 1.001)
    assert any("T = " in n for n in det.notes)


@pytest.mark.parametrize("kind", ["continuous", "tied"])
def test_gmm_equals_openoods_mixture_score(kind):
    fit, test, head = _case(kind)
    det = get_detector("gmm", components=4, dim=8).fit(fit, head)
    _close(det.score(test), ref_gmm(fit, test, head, det=det))
    # the mixture's parameters are scikit-learn's tied-covariance fit on the PCA projection, as OpenOOD's
    from sklearn.decomposition import PCA
    from sklearn.mixture import GaussianMixture

    tr = PCA(n_components=8, svd_solver="covariance_eigh").fit(f64(fit.features)).components_.T  # exact, not randomized
    gm = GaussianMixture(n_components=4, random_state=0, covariance_type="tied").fit(f64(fit.features) @ tr)
    np.testing.assert_allclose(det.means, gm.means_, rtol=1e-9)
