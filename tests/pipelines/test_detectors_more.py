"""Detectors added after the first 33 (issue 32), each against its reference code, the reference's
formula written here in float64 (not calling our helpers), relative difference <= 1e-9 on
continuous, tied and saturated inputs.

References, read at:
- AdaSCALE: Jingkang50/OpenOOD@3c35632ee91b54b09d1f085d04f94744cece7d0b,
  openood/postprocessors/adascale_postprocessor.py (setup, set_hyperparam, get_percentile,
  postprocess, perturb) and openood/networks/adascale_net.py (forward_threshold, ada_scale);
  statsmodels' ECDF (right-continuous: the share of fit values <= q).
"""
import numpy as np
import pytest
import torch

from pipelines.evaluation.detectors import DETECTORS, DetectorError, Outputs, get_detector
from tests.pipelines.test_detectors_reference import _case

KINDS = ("continuous", "tied", "saturated")
# the output- and feature-level detectors checked here (test_detectors_reference.py's coverage check reads it)
CHECKED_THERE = {"openmax"}


# -- AdaSCALE ---------------------------------------------------------------------------------------


def _with_perturbed(o: Outputs, kind: str, seed: int, key: str) -> Outputs:
    """Penultimate features x (some negative, as pre-ReLU features of a timm model can be) and
    perturbed features x' cached as the input-level path caches them: [x | x']."""
    rng = np.random.default_rng(seed)
    x = o.features.astype(np.float64) - 0.25
    grid = 4 if kind == "tied" else 64
    xp = np.round((x + rng.normal(0, 0.4, x.shape) * (1 + (np.arange(len(x)) % 3))[:, None]) * grid) / grid
    if kind == "saturated":
        x, xp = x * 300, xp * 300  # activations of hundreds: exp(s) and logits of tens of thousands
    out = Outputs(features=x, logits=o.logits, labels=o.labels)
    out.extra[key] = np.hstack([x, xp])
    out.extra[f"{key}:widths"] = np.array([x.shape[1]] * 2)
    return out


def ref_adascale(fit_x, fit_xp, x, xp, head, *, p_min=75.0, p_max=85.0, k1=5.0, k2=1.0, lmbda=10.0, logit_scaling=False):
    """OpenOOD's AdaScale postprocessor, in float64 torch as the reference computes it."""
    t = lambda a: torch.from_numpy(np.asarray(a, dtype=np.float64))  # noqa: E731
    fit_x, fit_xp, x, xp = t(fit_x), t(fit_xp), t(x), t(xp)
    d = x.shape[1]
    k1_, k2_ = int(d * k1 / 100), int(d * k2 / 100)

    def q(f, fp):  # set_hyperparam / get_percentile: Q' = sum relu(x')[topk1(x)] + lambda sum |x - x'|[topk2(x)]
        shift = (f - fp).abs()
        a = torch.gather(torch.relu(fp), 1, torch.topk(f, dim=1, k=k1_)[1]).sum(dim=1)
        b = torch.gather(shift, 1, torch.topk(f, dim=1, k=k2_)[1]).sum(dim=1)
        return a + lmbda * b

    fit_q = q(fit_x, fit_xp).numpy()
    qs = q(x, xp).numpy()
    ecdf = np.array([(fit_q <= v).sum() / len(fit_q) for v in qs])  # statsmodels ECDF
    percentile = t(p_min + (1 - ecdf) * (p_max - p_min))
    # ada_scale(relu(feature), percentiles)
    r = torch.relu(x)
    ks = d - torch.round(d * percentile / 100.0).to(torch.int)
    values, _ = torch.topk(r, int(ks.max()), dim=1)
    mask = torch.arange(int(ks.max()))[None, :] < ks[:, None]
    scale = r.sum(dim=1, keepdim=True) / (values * mask).sum(dim=1, keepdim=True)
    w, b = t(head.weight), t(head.bias)
    if logit_scaling:
        logits = (x @ w.T + b) * scale ** 2.0
    else:
        logits = (x * torch.exp(scale)) @ w.T + b
    return torch.logsumexp(logits, dim=1).numpy()


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("scaling", ["activation", "logit"])
def test_adascale_equals_openood(kind, scaling):
    fit0, test0, head = _case(kind, seed=5)
    key = DETECTORS["adascale"].input_key_for({"o": 0.05})
    fit, test = _with_perturbed(fit0, kind, 1, key), _with_perturbed(test0, kind, 2, key)
    fx, fxp = fit.extra[key][:, :fit.features.shape[1]], fit.extra[key][:, fit.features.shape[1]:]
    tx, txp = test.extra[key][:, :fit.features.shape[1]], test.extra[key][:, fit.features.shape[1]:]
    for params in ({}, {"p_min": 60.0, "p_max": 95.0, "k1": 50.0, "k2": 25.0, "lmbda": 0.5}):
        det = get_detector("adascale", scaling=scaling, **params).fit(fit, head)
        got = det.score(test)
        want = ref_adascale(fx, fxp, tx, txp, head, logit_scaling=scaling == "logit", **params)
        assert np.all(np.isfinite(want))
        np.testing.assert_allclose(got, want, rtol=1e-9, atol=0)
    # the adaptive percentile matters: a fixed one (SCALE at p_max) gives other scores
    scale = get_detector("scale", percentile=85.0).fit(fit, head).score(test)
    assert scaling == "logit" or np.abs(got - scale).max() > 1e-6


def test_adascale_lowest_index_ties_take_the_first_of_equal_activations():
    fit0, test0, head = _case("tied", seed=5)
    key = DETECTORS["adascale"].input_key_for({"o": 0.05})
    fit, test = _with_perturbed(fit0, "tied", 1, key), _with_perturbed(test0, "tied", 2, key)
    d = fit.features.shape[1]
    det = get_detector("adascale", ties="lowest-index", k1=50.0, k2=25.0).fit(fit, head)

    def q(both):  # written here: top-k by a stable sort on -x (lowest index first among equals)
        x, xp = both[:, :d], both[:, d:]
        order = np.argsort(-x, axis=1, kind="stable")
        a = np.take_along_axis(np.maximum(xp, 0), order[:, :int(d * 0.5)], 1).sum(1)
        b = np.take_along_axis(np.abs(x - xp), order[:, :int(d * 0.25)], 1).sum(1)
        return a + 10.0 * b
    np.testing.assert_allclose(det.fit_q, q(fit.extra[key]), rtol=1e-12)
    assert get_detector("adascale", k1=50.0, k2=25.0).fit(fit, head).score(test).shape == (len(test),)


def test_adascale_needs_its_perturbed_features_and_a_sane_range():
    fit0, _, head = _case("continuous")
    with pytest.raises(DetectorError, match="computed while extracting"):
        get_detector("adascale").fit(fit0, head)
    key = DETECTORS["adascale"].input_key_for({"o": 0.05})
    fit = _with_perturbed(fit0, "continuous", 1, key)
    with pytest.raises(DetectorError, match="must not exceed"):
        get_detector("adascale", p_min=90.0, p_max=80.0).fit(fit, head)
    with pytest.raises(DetectorError, match="last layer"):
        get_detector("adascale").fit(fit, None)
    cls = DETECTORS["adascale"]
    assert cls.input_level and cls.input_fit and cls.layers and cls.needs_head


def test_adascale_perturbs_along_the_top_logit_gradient_as_openood(tmp_path):
    """The input-level part on a small network with RANDOM WEIGHTS (the arithmetic is what is
    checked): OpenOOD's postprocess/perturb written here: gradient of the top logit w.r.t. the
    input, +0.5 sign(grad) on the int(C H W o) values with the smallest |grad|, features again."""
    from PIL import Image as PILImage
    from torchvision.transforms import functional as TF

    from pipelines.evaluation.detectors.adascale import perturbed_features
    from pipelines.features.classifiers import LoadedModel

    class Tiny(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.body = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, stride=2), torch.nn.ReLU(), torch.nn.Conv2d(8, 16, 3))
            self.fc = torch.nn.Linear(16, 10)

        def forward_features(self, x):
            return self.body(x)

        def forward_head(self, f, pre_logits=False):
            f = f.mean(dim=(2, 3))
            return f if pre_logits else self.fc(f)

        def get_classifier(self):
            return self.fc

    torch.manual_seed(4)
    net = Tiny().double().eval()
    mean, std = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
    rng = np.random.default_rng(4)
    paths = []
    for i in range(5):
        p = tmp_path / f"{i}.png"
        PILImage.fromarray(rng.integers(0, 256, (20, 20, 3), dtype=np.uint8)).save(p)
        paths.append(str(p))
    lm = LoadedModel(name="tiny", model=net, transform=lambda im: TF.normalize(TF.to_tensor(im).double(), mean, std),
                     data_config={"input_size": (3, 20, 20), "crop_pct": 1.0, "mean": mean, "std": std}, device="cpu", weights="random",
                     feature_dim=16, wnids=(), labels=())
    for o in (0.05, 0.5):
        got = perturbed_features(lm, paths, o=o, batch_size=2)
        assert got["widths"].tolist() == [16, 16]
        for i, p in enumerate(paths):
            data = TF.normalize(TF.to_tensor(PILImage.open(p).convert("RGB")).double(), mean, std)[None].requires_grad_(True)
            feature = net.body(data).mean(dim=(2, 3))
            output = net.fc(feature)
            labels = output.detach().argmax(dim=1)
            output[torch.arange(len(labels)), labels].backward(torch.ones_like(labels))
            grad = data.grad.detach()
            b, c, h, w = data.shape
            n_pixels = int(c * h * w * o)
            _, idx = torch.topk(grad.abs().view(b, -1), n_pixels, dim=1, largest=False)
            mask = torch.zeros_like(grad.abs().view(b, -1), dtype=torch.uint8)
            mask.scatter_(1, idx, 1)
            perturbed = data.detach() + grad.sign() * mask.view(b, c, h, w) * 0.5
            with torch.no_grad():
                fp = net.body(perturbed).mean(dim=(2, 3))
            np.testing.assert_allclose(got["scores"][i, :16], feature.detach()[0].numpy(), rtol=1e-9, atol=1e-12)
            np.testing.assert_allclose(got["scores"][i, 16:], fp[0].numpy(), rtol=1e-9, atol=1e-12)
            # at o 0.05 only values the stride-2 convolution never reads (gradient 0, sign 0) are chosen
            moved = np.abs(fp[0].numpy() - feature.detach()[0].numpy()).max()
            assert (moved > 1e-6) if o == 0.5 else (moved == 0.0)


# -- Gram matrices -------------------------------------------------------------------------------------
# Reference: OpenOOD's gram_postprocessor.py (Jingkang50/OpenOOD@3c35632ee91b54b09d1f085d04f94744cece7d0b):
# G_p, delta, sample_estimator (class mins / maxs on the training part, normalize factor per layer
# the mean over the held-out part of sum_p delta) and get_deviations (-sum delta / n / max softmax).
# The held-out draw is ours (a seeded permutation per class, written here), OpenOOD's random.sample.


def ref_split(labels):
    rng = np.random.default_rng(0)
    val = np.zeros(len(labels), dtype=bool)
    for c in sorted(set(labels.tolist())):
        idx = np.flatnonzero(labels == c)
        val[idx[rng.permutation(len(idx))[:int(0.1 * len(idx))]]] = True
    return val


def ref_gram(fit_layers, labels, test_layers, test_logits, powers):
    """fit_layers / test_layers: per layer, per power, a float64 tensor [n, channels]."""
    def delta(mins, maxs, x):
        dev = (torch.relu(mins - x) / torch.abs(mins + 10 ** -6)).sum(dim=1, keepdim=True)
        return dev + (torch.relu(x - maxs) / torch.abs(maxs + 10 ** -6)).sum(dim=1, keepdim=True)

    labels = torch.from_numpy(labels)
    val = torch.from_numpy(ref_split(labels.numpy()))
    mins, maxs, factors = {}, {}, []
    for li, layer in enumerate(fit_layers):
        total = []
        for c in sorted(set(labels.tolist())):
            trn, hold = (labels == c) & ~val, (labels == c) & val
            d = 0
            for pi, g in enumerate(layer):
                mins[li, pi, c] = g[trn].min(dim=0, keepdim=True)[0]
                maxs[li, pi, c] = g[trn].max(dim=0, keepdim=True)[0]
                d = d + delta(mins[li, pi, c], maxs[li, pi, c], g[hold])
            total.append(d)
        factors.append(torch.cat(total).mean())
    logits = torch.from_numpy(np.asarray(test_logits, dtype=np.float64))
    confs, preds = torch.softmax(logits, dim=1).max(dim=1)
    dev = torch.zeros(len(logits), 1, dtype=torch.float64)
    for li, layer in enumerate(test_layers):
        for pi, g in enumerate(layer):
            for c in range(logits.shape[1]):
                if (preds == c).any():
                    dev[preds == c] += delta(mins[li, pi, c], maxs[li, pi, c], g[preds == c]) / factors[li]
    return (-dev / confs[:, None])[:, 0].numpy()


def _gram_case(kind, seed=0, powers=3, widths=(4, 6)):
    fit0, test0, head = _case(kind, seed=seed)
    rng = np.random.default_rng(seed + 10)
    key = DETECTORS["gram"].input_key_for({"stages": len(widths), "max_power": powers})

    def vectors(o, shift):
        n = len(o.features)
        lab = o.logits.argmax(axis=1)
        layers = []
        for w in widths:
            per = []
            for p in range(powers):
                v = rng.normal(0, 1, (n, w)) + lab[:, None] * 0.3 + shift
                if kind == "tied":
                    v = np.round(v * 2) / 2
                if kind == "saturated":
                    v = v * 1e6
                per.append(v)
            layers.append(per)
        o.extra[key] = np.hstack([np.hstack(per) for per in layers])
        o.extra[f"{key}:widths"] = np.array([w * powers for w in widths])
        return layers

    fit = Outputs(features=fit0.features, logits=fit0.logits, labels=fit0.logits.argmax(axis=1))
    fl = vectors(fit, 0.0)
    tl = vectors(test0, np.r_[np.zeros(len(test0) // 2), np.full(len(test0) - len(test0) // 2, 1.5)][:, None])
    return fit, test0, head, fl, tl


@pytest.mark.parametrize("kind", KINDS)
def test_gram_equals_openood(kind):
    fit, test, head, fl, tl = _gram_case(kind)
    det = get_detector("gram", stages=2, max_power=3).fit(fit, head)
    got = det.score(test)
    t = lambda layers: [[torch.from_numpy(g) for g in per] for per in layers]  # noqa: E731
    want = ref_gram(t(fl), fit.labels, t(tl), test.logits, 3)
    assert np.all(np.isfinite(want)) and np.abs(want).max() > 0
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=0)
    # the shifted half deviates more (medians: a bound at 0 divides by 1e-6, as OpenOOD's does)
    assert np.median(got[len(got) // 2:]) < np.median(got[:len(got) // 2])


def test_gram_needs_its_vectors_labels_and_held_out_images():
    fit, test, head, _, _ = _gram_case("continuous")
    with pytest.raises(DetectorError, match="computed while extracting"):
        get_detector("gram").fit(fit, head)  # stages 2, max_power 5: another key
    small = Outputs(features=fit.features[:20], logits=fit.logits[:20], labels=np.arange(20) % 12)
    small.extra = {k: v[:20] if v.ndim == 2 else v for k, v in fit.extra.items()}
    with pytest.raises(DetectorError, match="10 or more fit images"):
        get_detector("gram", stages=2, max_power=3).fit(small, head)
    nolabels = Outputs(features=fit.features, logits=fit.logits)
    with pytest.raises(DetectorError, match="class labels"):
        get_detector("gram", stages=2, max_power=3).fit(nolabels, head)


def test_gram_vectors_of_stage_outputs_as_openood(tmp_path):
    """The input-level part on a small network with RANDOM WEIGHTS: OpenOOD's G_p written here,
    per stage output (maps and, for a transformer, tokens)."""
    from PIL import Image as PILImage
    from torchvision.transforms import functional as TF

    from pipelines.evaluation.detectors.gram import gram_layers
    from pipelines.features.classifiers import LoadedModel

    class Staged(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.s1 = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3, stride=2), torch.nn.ReLU())
            self.s2 = torch.nn.Sequential(torch.nn.Conv2d(4, 6, 3))  # no ReLU: negative values, odd powers keep their sign

        def forward_intermediates(self, x, indices=None, intermediates_only=False):
            a = self.s1(x)
            b = self.s2(a)
            return [a, b][-indices:]

    def G_p(ob, p):  # OpenOOD's G_p
        temp = ob.detach() ** p
        temp = temp.reshape(temp.shape[0], temp.shape[1], -1)
        temp = (torch.matmul(temp, temp.transpose(dim0=2, dim1=1))).sum(dim=2)
        return (temp.sign() * torch.abs(temp) ** (1 / p)).reshape(temp.shape[0], -1)

    torch.manual_seed(5)
    net = Staged().double().eval()
    mean, std = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
    rng = np.random.default_rng(5)
    paths = []
    for i in range(4):
        p = tmp_path / f"{i}.png"
        PILImage.fromarray(rng.integers(0, 256, (16, 16, 3), dtype=np.uint8)).save(p)
        paths.append(str(p))
    lm = LoadedModel(name="staged", model=net, transform=lambda im: TF.normalize(TF.to_tensor(im).double(), mean, std),
                     data_config={"input_size": (3, 16, 16), "crop_pct": 1.0, "mean": mean, "std": std}, device="cpu", weights="random",
                     feature_dim=6, wnids=(), labels=())
    got = gram_layers(lm, paths, stages=2, max_power=3, batch_size=3)
    assert got["widths"].tolist() == [12, 18]
    for i, p in enumerate(paths):
        x = TF.normalize(TF.to_tensor(PILImage.open(p).convert("RGB")).double(), mean, std)[None]
        with torch.no_grad():
            a = net.s1(x)
            b = net.s2(a)
        want = np.concatenate([G_p(m, pw)[0].numpy() for m in (a, b) for pw in (1, 2, 3)])
        np.testing.assert_allclose(got["scores"][i], want, rtol=1e-9, atol=1e-12)
    assert (got["scores"][:, 12:18] < 0).any()  # a negative power-1 sum kept its sign


# -- OpenMax -------------------------------------------------------------------------------------------
# Reference: OpenOOD's openmax_postprocessor.py (Jingkang50/OpenOOD@3c35632ee91b54b09d1f085d04f94744cece7d0b:
# compute_train_score_and_mavs_and_dists, fit_weibull, openmax, compute_openmax_prob; alpha 3, tail 20,
# 'euclidean') with libMR's FitHigh / W_score (Vastlab/libMR@cebbc64dc822e426e9f1690963bc5fe06b842355,
# libMR/MetaRecognition.cpp: tail sorted descending, t = d + translate_amount (1, the Python default)
# - smallest; weibull_cdf 0 below 0). libMR's weibull_fit is MATLAB's wblfit (maximum likelihood); its
# search stops at 1e-6, so the maximum is found here by bisection to the last bit.


def ref_weibull(t):
    """Maximum likelihood (scale, shape) of a two-parameter Weibull, by bisection on the shape's equation."""
    lt = np.log(t)

    def g(k):  # NaN where t^k overflows: k is then far too large, and NaN < 0 is False, so hi moves down
        with np.errstate(over="ignore", invalid="ignore"):
            tk = t ** k
            return (tk * lt).sum() / tk.sum() - 1 / k - lt.mean()
    lo, hi = 1e-6, 1e6
    for _ in range(400):
        mid = np.sqrt(lo * hi)
        lo, hi = (mid, hi) if g(mid) < 0 else (lo, mid)
        if hi / lo - 1 < 1e-15:
            break
    k = np.sqrt(lo * hi)
    return np.mean(t ** k) ** (1 / k), k


def ref_openmax(fit_logits, fit_labels, logits, alpha=3, tail=20):
    import scipy.spatial.distance as spd

    C = fit_logits.shape[1]
    models = {}
    for c in range(C):
        scores = [s for s, t in zip(fit_logits, fit_labels) if np.argmax(s) == t == c]
        if len(scores) < 2:
            continue
        mav = np.mean(scores, axis=0)
        dists = np.array([spd.euclidean(mav, s) for s in scores])
        tailtofit = np.sort(dists)[-tail:]
        small = np.sort(tailtofit)[::-1][-1]  # MetaRecognition: sorted descending, the last of the tail
        models[c] = (mav, small, *ref_weibull(tailtofit + 1 - small))
    out = []
    for score in logits:
        ranked = score.argsort().ravel()[::-1][:alpha]
        omega = np.zeros(C)
        omega[ranked] = [((alpha + 1) - i) / float(alpha) for i in range(1, alpha + 1)]
        mod, unk = [], []
        for c in range(C):
            w = 0.0
            if c in models:
                mav, small, scale, shape = models[c]
                x = spd.euclidean(score, mav) + 1 - small
                w = 0.0 if x < 0 else 1 - np.exp(-((x / scale) ** shape))
            m = score[c] * (1 - w * omega[c])
            mod.append(m)
            unk.append(score[c] - m)
        mod, u = np.array(mod), np.sum(unk)
        top = max(mod.max(), u)  # exp(u) / (sum exp(mod) + exp(u)), shifted so that logits of thousands do not overflow
        out.append(-np.exp(u - top) / (np.exp(mod - top).sum() + np.exp(u - top)))
    return np.array(out)


@pytest.mark.parametrize("kind", KINDS)
def test_openmax_equals_openood_with_libmr(kind):
    fit, test, head = _case(kind, seed=7)
    for params in ({}, {"alpha": 5, "tail": 8}):
        det = get_detector("openmax", **params).fit(fit, head)
        got = det.score(test)
        want = ref_openmax(np.asarray(fit.logits, np.float64), fit.labels, np.asarray(test.logits, np.float64), **params)
        assert np.all(np.isfinite(want)) and np.abs(want).max() > 0
        np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-300)


def test_openmax_weibull_fit_is_the_likelihood_maximum():
    from scipy.stats import weibull_min

    from pipelines.evaluation.detectors.openmax import weibull_mle

    t = 1 + np.random.default_rng(0).weibull(2.0, 20) * 3
    scale, shape = weibull_mle(t)
    ll = lambda s, k: weibull_min.logpdf(t, k, scale=s).sum()  # noqa: E731
    assert all(ll(scale, shape) >= ll(scale * (1 + e), shape * (1 + f)) for e in (-1e-4, 0, 1e-4) for f in (-1e-4, 0, 1e-4))
    s2, k2 = ref_weibull(t)
    assert abs(scale / s2 - 1) < 1e-12 and abs(shape / k2 - 1) < 1e-12


def test_openmax_needs_labels_and_fittable_classes():
    fit, _, head = _case("continuous")
    with pytest.raises(DetectorError, match="class labels"):
        get_detector("openmax").fit(Outputs(features=fit.features, logits=fit.logits), head)
    one = Outputs(features=fit.features[:1], logits=fit.logits[:1], labels=fit.logits[:1].argmax(axis=1))
    with pytest.raises(DetectorError, match="2 or more distinct"):
        get_detector("openmax").fit(one, head)
