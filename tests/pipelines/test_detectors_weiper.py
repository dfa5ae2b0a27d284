"""WeiPer + KLD and Weighted energy against their reference code, the reference's computation
written here (in float64 torch, not calling our helpers), relative difference <= 1e-9 on
continuous, tied and saturated inputs.

References, read at:
- WeiPer: omah03/weiper@f3cdf25c5c03ce61eb12508733841daace8ba40a, the initial commit of a fork
  (authored by M. Granz, the paper's first author; the authors' repository mgranz/weiper_icml
  could not be read here): Weiper/OpenOOD/openood/postprocessors/weiper_kldiv/utils.py
  (calculate_weiper_space, batch_histogram, calculate_density, UniformKernel, kldiv,
  calculate_uncertainty, calculate_WeiPerKLDiv_score) and weiper_kldiv_postprocessor.py (setup
  with exact_minmax, postprocess). The random perturbations are the one thing not the
  reference's: it draws them from torch's unseeded generator; here both sides use the same
  seeded Gaussian draws (numpy default_rng(seed), one standard_normal((C, d)) per repeat).
- Weighted energy: kkirchheim/pytorch-ood@d04767360a382d2ea1678d5a571cae66b73e5206,
  src/pytorch_ood/detector/vos.py (WeightedEBO: -log sum_c w_c exp(f_c), the weights from training).
"""
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from pipelines.evaluation.detectors import DETECTORS, DetectorError, Head, Outputs, get_detector
from tests.pipelines.test_detectors_reference import _case

KINDS = ("continuous", "tied", "saturated")
# the output- and feature-level detectors checked here (test_detectors_reference.py's coverage check reads it)
CHECKED_HERE = {"weiper", "weighted_energy"}


def _close(got, want, tol=1e-9):
    got, want = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
    assert got.shape == want.shape and np.all(np.isfinite(got)) and np.all(np.isfinite(want))
    rel = np.abs(got - want) / np.maximum(np.abs(want), 1e-300)
    worst = float(np.max(np.where((got == 0) & (want == 0), 0.0, rel)))
    assert worst <= tol, f"relative difference {worst:.3g}"


# -- WeiPer: the reference, in float64 torch --------------------------------------------------------


def ref_perturbed_fc(w, b, r, delta, seed):
    """calculate_weiper_space (noise_proportional, constant_length): delta * normalize(noise, dim=1)
    * |w_c| added to the weight, r copies stacked; the noise: the seeded draws (see the docstring)."""
    rng = np.random.default_rng(seed)
    noise = [torch.from_numpy(rng.standard_normal(tuple(w.shape))) for _ in range(r)]
    perturbs = [delta * F.normalize(g, dim=1) * w.norm(dim=1)[:, None] for g in noise]
    lin = torch.nn.Linear(w.shape[1], r * w.shape[0]).double()
    lin.weight.data = torch.cat([w + p for p in perturbs], dim=0)
    lin.bias.data = torch.cat([b for _ in range(r)], dim=0)
    return lin


def ref_batch_histogram(samples, n_bins, lo, hi, batch_size=1000):
    """batch_histogram(samples [values, images], bins_min_max=(lo, hi), probability=True): the
    reference's linspace edges, outer bins at -inf / inf, chunks of batch_size values whose
    mean histograms are summed, then the interior bins over the sum of all bins."""
    steps = torch.arange(n_bins + 1, dtype=torch.float64) / n_bins
    bins = (lo + steps * ((hi + 1e-8) - lo))[:, None].repeat(1, samples.shape[1])
    inf = torch.ones(1, bins.shape[-1], dtype=torch.float64) * np.inf
    bins = torch.cat([-inf, bins, inf], dim=0)
    if samples.shape[0] > batch_size:
        densities = torch.zeros(n_bins + 2, samples.shape[1], dtype=torch.float64)
        for chunk in samples.split(batch_size):
            densities += torch.logical_and(chunk[None] < bins[1:, None], chunk[None] >= bins[:-1, None]).double().mean(dim=1)
        density = densities / len(chunk)  # the reference divides by the last chunk's length (loop variable)
    else:
        density = torch.logical_and(samples[None] < bins[1:, None], samples[None] >= bins[:-1, None]).double().mean(dim=1)
    return density[1:-1] / density.sum(dim=0)[None]


def ref_density(latents, lo, hi, n_bins):  # calculate_density: images in groups of 100, histogram of latents.T
    return torch.cat([ref_batch_histogram(part.T, n_bins, lo, hi) for part in latents.split(100, dim=0)], dim=-1)


def ref_uniform_kernel(size):  # UniformKernel(100, size): a diagonal Conv1d, 'same' padding, replicated ends
    conv = torch.nn.Conv1d(100, 100, size, padding="same", padding_mode="replicate").double()
    conv.weight.data = torch.zeros_like(conv.weight.data)
    conv.weight.data[range(100), range(100)] = torch.ones(1, 100, size, dtype=torch.float64) / size
    conv.bias.data = torch.zeros_like(conv.bias)
    return conv


def ref_uncertainty(density, train_mean, size, eps):
    """calculate_uncertainty with kldiv(symmetric): images in groups of 100 (padded with ones),
    q smoothed, eps added to both, both normalised; KL(p||q) + KL(q||p)."""
    kernel = ref_uniform_kernel(size)
    out = []
    for q in density.split(100, dim=-1):
        s = q.shape[-1]
        if s < 100:
            q = torch.cat([q, torch.ones(q.shape[0], 100 - s, dtype=torch.float64)], dim=-1)
        q_ = kernel(q.T).T + eps
        p_ = (train_mean + eps).clone()
        p_ /= p_.sum(dim=0)
        q_ /= q_.sum(dim=0)
        q_p = q_.log()[:, None] - p_.log()[..., None]
        out.append((-(p_[..., None] * q_p).sum(dim=0) - (q_[:, None] * (-q_p)).sum(dim=0))[:, :s])
    return torch.cat(out, dim=-1)[0]


@torch.no_grad()  # as the reference's setup and postprocess
def ref_weiper(fit_x, test_x, head, *, r=100, delta=2.4, n_bins=100, smoothing=40, smoothing_perturbed=15, lambda_1=2.5,
               lambda_2=0.25, epsilon=0.01, epsilon_noise=0.025, seed=0):
    t = lambda a: torch.from_numpy(np.asarray(a, dtype=np.float64))  # noqa: E731
    fit_x, test_x = t(fit_x), t(test_x)
    lin = ref_perturbed_fc(t(head.weight), t(head.bias), r, delta, seed)
    # setup, exact_minmax: the extremes of the fit latents and of their perturbed logits (one batch: the whole fit set)
    fit_w = lin(fit_x)
    (lo, hi), (wlo, whi) = (fit_x.min(), fit_x.max()), (fit_w.min(), fit_w.max())
    train_mean = ref_density(fit_x, lo, hi, n_bins).mean(dim=-1)[:, None]
    train_mean_w = ref_density(fit_w, wlo, whi, n_bins).mean(dim=-1)[:, None]
    # postprocess
    test_w = lin(test_x)
    dens, dens_w = ref_density(test_x, lo, hi, n_bins), ref_density(test_w, wlo, whi, n_bins)
    n_classes = head.weight.shape[0]
    msp = torch.cat([test_w[:, i * n_classes:(i + 1) * n_classes].softmax(dim=-1).max(dim=-1)[0][:, None] for i in range(r)],
                    dim=-1).mean(dim=-1)
    u = ref_uncertainty(dens, train_mean, smoothing, epsilon)
    u_w = ref_uncertainty(dens_w, train_mean_w, smoothing_perturbed, epsilon_noise)
    return (-(u + lambda_1 * u_w - lambda_2 * msp)).numpy()


# -- WeiPer: the tests ---------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_weiper_equals_the_authors_code(kind):
    fit, test, head = _case(kind)
    # the defaults (r = 100 heads of 12 classes: 1,200 perturbed logits, two chunks of the reference's
    # histogram), and small settings with an odd smoothing width and fewer bins than the window
    for params in ({}, {"r": 7, "delta": 1.8, "bins": 30, "smoothing": 5, "smoothing_perturbed": 40, "lambda_1": 0.5,
                        "lambda_2": 3.0, "epsilon": 0.001, "epsilon_perturbed": 0.05, "seed": 11}):
        det = get_detector("weiper", **params).fit(fit, head)
        got = det.score(test)
        p = {**DETECTORS["weiper"].defaults(), **params}
        want = ref_weiper(fit.features, test.features, head, r=p["r"], delta=p["delta"], n_bins=p["bins"],
                          smoothing=p["smoothing"], smoothing_perturbed=p["smoothing_perturbed"], lambda_1=p["lambda_1"],
                          lambda_2=p["lambda_2"], epsilon=p["epsilon"], epsilon_noise=p["epsilon_perturbed"], seed=p["seed"])
        _close(got, want)


def test_weiper_over_a_thousand_features_weights_the_reference_chunks():
    """d = 1,300 features: the reference histograms 1,000 values and 300 values and weighs the two
    chunks equally; `pooled` counts each value once, which the reference does not do."""
    rng = np.random.default_rng(3)
    n_classes, d = 5, 1300
    w = np.round(rng.normal(0, 0.05, (n_classes, d)) * 64) / 64
    b = np.round(rng.normal(0, 0.5, n_classes) * 32) / 32
    head = Head(weight=w, bias=b)

    def outputs(n, shift):
        x = np.round(np.abs(rng.normal(0.5, 0.4, (n, d))) * 64) / 64
        x[:, 1000:] += shift  # the last chunk's values lie apart from the rest
        return Outputs(features=x, logits=x @ w.T + b, labels=rng.integers(0, n_classes, n))

    fit, test = outputs(150, 1.0), outputs(40, 1.5)
    params = {"r": 3, "bins": 40, "smoothing": 3}
    got = get_detector("weiper", **params).fit(fit, head).score(test)
    _close(got, ref_weiper(fit.features, test.features, head, r=3, n_bins=40, smoothing=3))
    pooled = get_detector("weiper", histogram="pooled", **params).fit(fit, head).score(test)
    assert np.abs(pooled - got).max() > 1e-3


def test_weiper_is_reproducible_by_its_seed_and_needs_a_head():
    fit, test, head = _case("continuous")
    a = get_detector("weiper", r=5, seed=1).fit(fit, head).score(test)
    assert np.array_equal(a, get_detector("weiper", r=5, seed=1).fit(fit, head).score(test))
    assert not np.array_equal(a, get_detector("weiper", r=5, seed=2).fit(fit, head).score(test))
    with pytest.raises(DetectorError, match="last layer"):
        get_detector("weiper").fit(fit, None)
    bad = Outputs(features=np.where(np.arange(test.features.shape[1]) == 3, np.nan, test.features), logits=test.logits)
    with pytest.raises(DetectorError, match="NaN or infinite"):
        get_detector("weiper", r=2).fit(fit, head).score(bad)
    with pytest.raises(DetectorError, match="--weiper-histogram"):
        DETECTORS["weiper"].parameters[-1].check("weiper", "chunked")
    # ID images score above OOD ones on these data
    from pipelines.evaluation.metrics import ood_metrics

    s = get_detector("weiper").fit(fit, head).score(test)
    assert ood_metrics(s[:len(s) // 2], s[len(s) // 2:])["auroc"] > 0.8


def test_weiper_heads_kept_between_passes_or_drawn_again_give_the_same_scores(monkeypatch):
    """The perturbed heads are kept when they fit KEEP_HEADS_BYTES and drawn again on each pass
    otherwise: the seeded draws are the same, so the scores are identical either way."""
    import pipelines.evaluation.detectors.weiper as weiper

    fit, test, head = _case("continuous")
    kept = get_detector("weiper", r=7).fit(fit, head)
    assert kept._kept is not None and len(kept._kept) > 0
    a = kept.score(test)
    monkeypatch.setattr(weiper, "KEEP_HEADS_BYTES", 0)
    drawn = get_detector("weiper", r=7).fit(fit, head)
    assert drawn._kept is None
    assert np.array_equal(a, drawn.score(test))
    assert np.array_equal(a, kept.score(test))  # the kept heads are read, not used up, by a pass


# -- Weighted energy: pytorch-ood's WeightedEBO ----------------------------------------------------------


def ref_weighted_ebo(logits, weights):
    """pytorch-ood webo.py WeightedEBO.score (2-d logits): -log(sum(relu(weights.weight) * exp(logits), dim=1)),
    the outlier score; the detector scores "higher = more ID", so the negation is compared."""
    lin = torch.nn.Linear(len(weights), 1).double()
    lin.weight.data = torch.from_numpy(np.asarray(weights, dtype=np.float64))[None, :]
    conf = torch.log(torch.sum(F.relu(lin.weight) * torch.exp(torch.from_numpy(np.asarray(logits, dtype=np.float64))), dim=1))
    return -(-conf).detach().numpy()


def _weights(n, rng):
    w = np.abs(rng.normal(1.0, 0.6, n))
    w[::5] = 0.0  # classes of weight 0 ...
    w[1::7] = -0.3  # ... and negative ones, which the reference's ReLU zeroes
    return w


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("form", ["npy", "txt"])
def test_weighted_energy_equals_pytorch_oods_weighted_ebo(kind, form, tmp_path):
    fit, test, head = _case(kind)
    w = _weights(test.logits.shape[1], np.random.default_rng(4))
    path = tmp_path / f"w.{form}"
    if form == "npy":
        np.save(path, w)
    else:
        path.write_text("\n".join(repr(float(v)) for v in w))  # repr: the same float64 back
    det = get_detector("weighted_energy", weights=str(path)).fit(fit, head)
    got = det.score(test)
    want = ref_weighted_ebo(test.logits, w)
    if kind == "saturated":
        # logits of thousands: the reference's exp overflows to inf in float64 (log inf = inf, and 0 * inf = NaN
        # for a class of weight 0). Its limit is compared: the classes of weight 0 left out (their term is 0 for
        # any finite logit) and m, each row's largest logit among the others, factored out:
        # log sum w e^o = m + log sum w e^(o - m)
        assert not np.all(np.isfinite(want))
        pos = w > 0
        m = np.asarray(test.logits, dtype=np.float64)[:, pos].max(axis=1, keepdims=True)
        want = m[:, 0] + ref_weighted_ebo((test.logits - m)[:, pos], w[pos])
    _close(got, want)
    assert any("negative weight(s) set to 0" in n for n in det.notes)


@pytest.mark.parametrize("kind", KINDS)
def test_weighted_energy_with_uniform_weights_is_energy_and_says_so(kind):
    fit, test, head = _case(kind)
    det = get_detector("weighted_energy").fit(fit, head)
    got = det.score(test)
    np.testing.assert_array_equal(got, get_detector("energy").fit(fit, head).score(test))
    if kind != "saturated":
        _close(got, ref_weighted_ebo(test.logits, np.ones(test.logits.shape[1])))
    assert any("the score is Energy" in n for n in det.notes)
    assert DETECTORS["weighted_energy"].parameters[0].format("uniform") == "uniform"


def test_weighted_energy_refuses_a_wrong_weights_file_in_one_line(tmp_path):
    fit, _, head = _case("continuous")
    cases = {"missing.npy": None, "short.txt": "1, 2, 3", "words.txt": "one two", "zeros.txt": " ".join(["0"] * 12),
             "neg.txt": " ".join(["-1"] * 12)}
    for name, text in cases.items():
        path = tmp_path / name
        if text is not None:
            path.write_text(text)
        with pytest.raises(DetectorError, match="--weighted-energy-weights") as e:
            get_detector("weighted_energy", weights=str(path)).fit(fit, head)
        assert "\n" not in str(e.value)


@pytest.mark.parametrize("lo, hi", [(-12.0, 13.0), (1e6, 1e6 + 1e-3), (-3e-9, 5e-9), (0.0, 1.0)])
def test_weiper_binning_by_arithmetic_equals_comparisons_with_the_edges(lo, hi):
    """The histogram's fast bin lookup must put every value where comparing it with the edges does
    (the reference's `samples < bins[1:]` and `>= bins[:-1]`), edges themselves and their float
    neighbours included."""
    from pipelines.evaluation.detectors.weiper import Histograms, bin_edges

    rng = np.random.default_rng(0)
    edges = bin_edges(lo, hi, 100)
    span = hi - lo
    v = np.concatenate([lo + rng.uniform(-0.2, 1.2, 20000) * span, edges, np.nextafter(edges, np.inf), np.nextafter(edges, -np.inf),
                        [lo, hi, hi + 1e-8, lo - span, hi + span]])
    got = Histograms(1, len(v), edges, "pooled").bin_index(v[None, :])[0]
    want = np.array([np.sum(vi >= edges) for vi in v])  # 0 below the first edge ... 101 at or above the last
    assert np.array_equal(got, want)


# -- the faster paths of existing detectors, against their references --------------------------------------


def _many_classes(kind, seed=0, n_classes=300, d=64):
    """A confident classifier of many classes (few fit images share an image's probability mass),
    where Relation takes its pair-by-pair path."""
    rng = np.random.default_rng(seed)
    proto = np.round(np.maximum(rng.normal(0, 1.5, (n_classes, d)), 0) * (rng.random((n_classes, d)) < 0.2) * 8) / 8
    w = np.round((rng.normal(0, 0.05, (n_classes, d)) + proto / np.maximum(np.linalg.norm(proto, axis=1, keepdims=True), 1)) * 32) / 32
    b = np.zeros(n_classes)
    scale = 800.0 if kind == "saturated" else 24.0

    def outputs(n, ood=False):
        labels = rng.integers(0, n_classes, n)
        x = np.abs(rng.normal(0.3, 0.3, (n, d))) + (0 if ood else proto[labels])
        grid = 4 if kind == "tied" else 64
        x = np.round(x * grid) / grid
        if kind == "tied":
            x[1::5] = x[0::5][:len(x[1::5])]
        logits = (x @ w.T + b) * scale / 8
        return Outputs(features=x, logits=logits, labels=None if ood else labels)

    fit = outputs(1500)
    t_id, t_ood = outputs(150), outputs(150, ood=True)
    test = Outputs(features=np.concatenate([t_id.features, t_ood.features]), logits=np.concatenate([t_id.logits, t_ood.logits]))
    return fit, test, Head(weight=w, bias=b)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("pw", [1.0, 2.5])
def test_relations_pair_by_pair_path_equals_openoods_formula(kind, pw):
    from tests.pipelines.test_detectors_reference import ref_relation, sm

    fit, test, head = _many_classes(kind)
    pp = sm(np.asarray(test.logits, np.float64)) @ sm(np.asarray(fit.logits, np.float64)).T
    assert (pp > 0.03).mean() < 0.02  # the pair-by-pair path is the one taken
    got = get_detector("relation", pow=pw).fit(fit, head).score(test)
    want = ref_relation(fit, test, head, pw=pw)
    assert (want > 0).mean() > 0.3  # edges are kept: the test can fail
    _close(got, want)


@pytest.mark.parametrize("shape, singular", [((120, 200), False), ((200, 120), False), ((60, 60), False), ((120, 200), True)])
def test_vims_origin_by_qr_equals_the_pseudo_inverse(shape, singular):
    """ViM's u = -pinv(W) b (OpenOOD's vim_postprocessor.py), for wide, tall, square and rank-deficient heads."""
    from pipelines.evaluation.detectors.vim import head_origin

    rng = np.random.default_rng(1)
    w, b = rng.normal(0, 0.05, shape), rng.normal(0, 0.5, shape[0])
    if singular:
        w[7], b[7] = w[3], b[3]  # two equal rows: rank deficient, the pseudo-inverse's solution
    want = -np.linalg.pinv(w) @ b
    np.testing.assert_allclose(head_origin(Head(weight=w, bias=b)), want, rtol=0, atol=1e-12 * np.abs(want).max())


@pytest.mark.parametrize("duplicates", [False, True])
def test_knns_float32_screen_finds_the_float64_kth_neighbour(duplicates):
    """KNN screens with a float32 product and recomputes the band around the K-th value in float64;
    against OpenOOD's formula (ref_knn), with near-equal similarities and with a bank of duplicates
    (the band then holds most of the bank and the block takes the float64 product)."""
    from tests.pipelines.test_detectors_reference import ref_knn

    rng = np.random.default_rng(2)
    d = 200
    fit_x = np.abs(rng.normal(0.5, 0.3, (900, d)))
    if duplicates:
        fit_x[300:] = fit_x[0]  # 600 copies of one image
    else:
        fit_x[300:600] = fit_x[:300] * (1 + 1e-7 * rng.random((300, 1)))  # near-equal directions: similarities 1e-14 apart
    test_x = np.abs(rng.normal(0.5, 0.3, (130, d)))
    test_x[:30] = fit_x[:30]
    fit = Outputs(features=fit_x, logits=np.zeros((900, 3)), labels=np.zeros(900, dtype=int))
    test = Outputs(features=test_x, logits=np.zeros((130, 3)))
    for k in (1, 5, 50, 400):
        got = get_detector("knn", k=k).fit(fit, None).score(test)
        want = ref_knn(fit, test, None, k=k)
        # atol: at distance 0 (a test image equal to a fit image) |a - b| = sqrt(2 - 2 a.b), the form KNN
        # has always used, is about 1e-8 rather than 0 (a.b rounds to 1 - 1e-16), in either product
        np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-7)


def test_fdbds_denominators_by_one_product_equal_the_direct_distances():
    """fDBD's |w_c - w_j| (OpenOOD's denominator_matrix, computed directly there) for a head with
    near-equal rows (taken directly) and far ones (by the product)."""
    rng = np.random.default_rng(3)
    w = rng.normal(0, 0.05, (40, 30))
    w[5] = w[4] * (1 + 1e-9)
    w[6] = w[7] + 1e-6
    det = get_detector("fdbd").fit(Outputs(features=rng.random((20, 30)), logits=rng.random((20, 40))), Head(weight=w, bias=np.zeros(40)))
    for c in range(40):
        want = np.linalg.norm(w - w[c], axis=1)
        want[c] = 1.0
        np.testing.assert_allclose(det._denominators(c), want, rtol=1e-10, atol=0)
