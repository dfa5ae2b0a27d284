"""OOD detectors on synthetic features whose answer is known, and a contract every registered
detector must meet."""
import numpy as np
import pytest

from pipelines.evaluation.detectors import DETECTORS, DetectorError, Head, Outputs, detector_names, get_detector
from pipelines.evaluation.detectors.odin import odin_key
from pipelines.evaluation.detectors.vim import principal_dim
from pipelines.evaluation.metrics import ood_metrics

C, D = 5, 40


def _head():
    w = np.zeros((C, D))
    for c in range(C):
        w[c, c * 6:(c + 1) * 6] = 1.0
    return Head(weight=w, bias=np.zeros(C))


def _id(rng, n, head):
    labels = rng.integers(0, C, n)
    x = np.abs(rng.normal(0.5, 0.3, (n, D)))
    for i, c in enumerate(labels):
        x[i, c * 6:(c + 1) * 6] += 3.0
    return Outputs(features=x, logits=head.logits(x), labels=labels)


def _far_ood(rng, n, head):
    x = np.abs(rng.normal(0.5, 0.3, (n, D)))  # no class block: flat logits, far from every class mean
    return Outputs(features=x, logits=head.logits(x))


def _with_odin(out, value):
    """Input-level scores (ODIN, RankFeat) as extraction would leave them, for every such detector."""
    out.extra[odin_key(2.0, 1e-5)] = value
    for cls in DETECTORS.values():
        if cls.input_level and not cls.input_fit:
            out.extra[cls.input_key_for(cls.defaults())] = value
    return _with_layers(out)


def _with_layers(out):
    """Per-layer outputs as extraction leaves them for the Mahalanobis ensemble: here two "layers",
    the features and a scaled copy (each must see the class structure, as a network's layers do)."""
    for cls in DETECTORS.values():
        if cls.input_fit:
            key = cls.input_key_for(cls.defaults())
            out.extra[key] = np.hstack([out.features, 2.0 * out.features]).astype(np.float64)
            out.extra[f"{key}:widths"] = np.array([D, D])
    return out


# vision-language detectors need a zero-shot text head: their contract is
# tests/pipelines/test_detectors_vlm.py::test_every_text_detector_meets_the_contract
@pytest.mark.parametrize("name", [n for n in detector_names() if not DETECTORS[n].needs_text])
def test_every_registered_detector_meets_the_contract(name):
    rng = np.random.default_rng(0)
    head = _head()
    fit, test, ood = _id(rng, 400, head), _id(rng, 200, head), _far_ood(rng, 150, head)
    _with_layers(fit)
    _with_odin(test, rng.uniform(0.6, 1.0, 200))
    _with_odin(ood, rng.uniform(0.0, 0.4, 150))
    # KNN: fewer neighbours than the 400 fit images; ASH: this toy's 40 dense activations are
    # far from a real network's sparse ones, where pruning 90% is the paper's setting
    # (the ASH variants alike); DICE: the toy head has 30 non-zero weights of 200, so keeping 10% drops some
    params = {"knn": {"k": 50}, "ash": {"percentile": 65.0}, "ash_p": {"percentile": 65.0}, "ash_b": {"percentile": 65.0},
              "scale": {"percentile": 65.0}, "dice": {"p": 50.0}, "gmm": {"components": 5, "dim": 10}, "residual": {"dim": 5},
              # AdaSCALE: the toy's "perturbed" layer is 2x, which moves ID's strong activations most (a real
              # network's nudge moves OOD's more), so the adaptive range is kept narrow, near SCALE's 65
              "adascale": {"p_min": 60.0, "p_max": 65.0}}.get(name, {})
    det = get_detector(name, **params).fit(fit, head)
    s_id, s_ood = det.score(test), det.score(ood)
    assert s_id.shape == (200,) and s_ood.shape == (150,)
    assert np.all(np.isfinite(s_id)) and np.all(np.isfinite(s_ood))
    # higher = more ID: an easy OOD set is separated almost perfectly (Residual excepted: it sees only the
    # part outside the principal space, and this toy's OOD lies along the fit mean, inside it; ViM adds the energy)
    # OpenMax: an ID image beyond its class's Weibull tail gets an unknown probability near 1, as far OOD
    # does (the method's own saturation; 0.855 here, computed as OpenOOD with libMR's fit)
    if name != "residual":
        assert ood_metrics(s_id, s_ood)["auroc"] > (0.85 if name == "openmax" else 0.95), name
    # the same data give the same scores (nothing random at scoring time)
    np.testing.assert_array_equal(det.score(test), s_id)
    cls = DETECTORS[name]
    assert cls.label and cls.paper


def _gaussian_case(seed=0):
    """ID and OOD have the same logits (the head only reads dims 0..4) but OOD is shifted in
    a dimension the head ignores: logit-based scores cannot tell them apart, Mahalanobis can."""
    rng = np.random.default_rng(seed)
    w = np.zeros((C, 16))
    w[np.arange(C), np.arange(C)] = 4.0
    head = Head(weight=w, bias=np.zeros(C))

    def make(n, shift):
        labels = rng.integers(0, C, n)
        x = rng.normal(0, 0.5, (n, 16))
        x[np.arange(n), labels] += 1.0
        x[:, 10] += shift
        return Outputs(features=x, logits=head.logits(x), labels=labels)

    return head, make(2000, 0.0), make(1000, 0.0), make(1000, 6.0)


def test_mahalanobis_separates_gaussians_that_msp_cannot():
    head, fit, test, ood = _gaussian_case()
    maha = get_detector("mahalanobis").fit(fit, head)
    msp = get_detector("msp").fit(fit, head)
    assert ood_metrics(maha.score(test), maha.score(ood))["auroc"] > 0.999
    assert ood_metrics(maha.score(test), maha.score(ood))["fpr95_id_positive"] == 0.0
    assert 0.4 < ood_metrics(msp.score(test), msp.score(ood))["auroc"] < 0.6
    # Relative Mahalanobis subtracts the distance to one global Gaussian: a shift along a
    # direction no class uses counts for both and cancels (Ren et al.'s point), so it does not see it
    rel = get_detector("relative_mahalanobis").fit(fit, head)
    assert ood_metrics(rel.score(test), rel.score(ood))["auroc"] < 0.6
    vim = get_detector("vim", dim=5).fit(fit, head)  # the residual space holds dim 10: ViM sees the shift
    assert ood_metrics(vim.score(test), vim.score(ood))["auroc"] > 0.99
    energy = get_detector("energy").fit(fit, head)
    assert 0.4 < ood_metrics(energy.score(test), energy.score(ood))["auroc"] < 0.6


def test_mahalanobis_equals_its_formula():
    head, fit, test, _ = _gaussian_case(1)
    det = get_detector("mahalanobis").fit(fit, head)
    mus = np.stack([fit.features[fit.labels == c].mean(0) for c in range(C)]).astype(np.float64)
    centred = fit.features.astype(np.float64) - mus[fit.labels]
    prec = np.linalg.inv(centred.T @ centred / len(centred))
    x = test.features[:5].astype(np.float64)
    want = [-min((xi - m) @ prec @ (xi - m) for m in mus) for xi in x]
    np.testing.assert_allclose(det.score(Outputs(features=test.features[:5], logits=test.logits[:5])), want, rtol=1e-6)


def test_logit_scores_equal_their_formulas():
    logits = np.array([[2.0, 1.0, 0.0], [0.0, 0.0, 0.0]])
    out = Outputs(features=np.zeros((2, 4)), logits=logits)
    p = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)
    np.testing.assert_allclose(get_detector("msp").score(out), p.max(1))
    np.testing.assert_allclose(get_detector("maxlogit").score(out), [2.0, 0.0])
    np.testing.assert_allclose(get_detector("energy").score(out), np.log(np.exp(logits).sum(1)))
    np.testing.assert_allclose(get_detector("entropy").score(out), (p * np.log(p)).sum(1))


def test_knn_is_the_kth_neighbour_distance():
    fit = Outputs(features=np.array([[1.0, 0], [0, 1.0], [-1.0, 0]]), logits=np.zeros((3, 2)))
    det = get_detector("knn", k=2).fit(fit)
    s = det.score(Outputs(features=np.array([[2.0, 0]]), logits=np.zeros((1, 2))))
    assert s[0] == pytest.approx(-np.sqrt(2.0), rel=1e-6)  # 2nd nearest of (1,0) is (0,1)
    det = get_detector("knn", k=1000).fit(fit)
    assert det.notes and "used k=3" in det.notes[0]


def test_react_clips_at_the_fit_percentile():
    head = Head(weight=np.eye(2), bias=np.zeros(2))
    fit = Outputs(features=np.arange(200.0).reshape(100, 2), logits=np.zeros((100, 2)))
    det = get_detector("react").fit(fit, head)
    assert det.threshold == pytest.approx(np.percentile(np.arange(200.0), 99))
    big = Outputs(features=np.array([[1e6, 0.0]]), logits=np.zeros((1, 2)))
    assert det.score(big)[0] == pytest.approx(np.log(np.exp(det.threshold) + 1.0))


def test_ash_prunes_and_rescales_as_in_the_paper():
    head = Head(weight=np.eye(4), bias=np.zeros(4))
    x = np.array([[4.0, 3.0, 2.0, 1.0]])
    det = get_detector("ash", percentile=50.0).fit(Outputs(features=x, logits=x), head)
    kept = np.array([4.0, 3.0, 0.0, 0.0]) * np.exp(10.0 / 7.0)  # s1 = 10, s2 = 7
    assert det.score(Outputs(features=x, logits=x))[0] == pytest.approx(np.log(np.exp(kept).sum()))


def test_vim_dimension_rule_and_a_too_small_fit_set():
    assert principal_dim(2048) == 1000 and principal_dim(1280) == 512 and principal_dim(768) == 512 and principal_dim(512) == 256
    head, fit, _, _ = _gaussian_case()
    small = Outputs(features=fit.features[:6], logits=fit.logits[:6], labels=fit.labels[:6])
    with pytest.raises(DetectorError, match="needs more fit images than D"):
        get_detector("vim").fit(small, head)


def test_clear_errors():
    with pytest.raises(DetectorError, match="unknown detector"):
        get_detector("nope")
    with pytest.raises(DetectorError, match="unknown parameter"):
        get_detector("knn", kk=3)
    out = Outputs(features=np.zeros((2, 3)), logits=np.zeros((2, 2)))
    with pytest.raises(DetectorError, match="needs class labels"):
        get_detector("mahalanobis").fit(out)
    with pytest.raises(DetectorError, match="last layer"):
        get_detector("vim").fit(out, None)
    with pytest.raises(DetectorError, match="computed while extracting"):
        get_detector("odin").score(out)


# -- against the reference codes, written here ---------------------------------------------------------


def _ash_s_reference(features, weight, bias, percentile):
    # ASH-S as the authors' code: k = n - round(n * p / 100) kept by torch.topk, the rest zeroed;
    # scaled by exp(s1 / s2); then the logits and Energy (logsumexp)
    import torch

    x = torch.tensor(features, dtype=torch.float64)
    n = x.shape[1]
    k = n - int(np.round(n * percentile / 100.0))
    s1 = x.sum(dim=1)
    v, i = torch.topk(x, k, dim=1)
    pruned = torch.zeros_like(x).scatter_(1, i, v)
    s2 = pruned.sum(dim=1)
    pruned = pruned * torch.exp(s1 / s2)[:, None]
    logits = pruned @ torch.tensor(weight).T + torch.tensor(bias)
    return torch.logsumexp(logits, dim=1).numpy(), k


def test_ash_keeps_exactly_the_reference_top_k():
    rng = np.random.default_rng(3)
    d = 1280
    feats = np.abs(rng.normal(0, 1, (50, d)))  # continuous: no ties
    head = Head(weight=rng.normal(0, 0.05, (10, d)), bias=rng.normal(0, 0.1, 10))
    out = Outputs(features=feats, logits=head.logits(feats))
    for p in (90.0, 85.0, 65.0):
        ref, _ = _ash_s_reference(out.features.astype(np.float64), head.weight, head.bias, p)
        got = get_detector("ash", percentile=p).fit(out, head).score(out)
        np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-9)


def test_ash_with_ties_at_the_cut_still_keeps_k():
    from pipelines.evaluation.detectors.ash import ash_keep_count, top_k_mask

    rng = np.random.default_rng(4)
    # coarse values, as bf16-extracted features have: many ties at the 90th percentile
    x = np.round(np.abs(rng.normal(0, 1, (200, 128))) * 4) / 4
    k = ash_keep_count(128, 90.0)
    assert k == 13  # 128 * 90 / 100 = 115.2 -> 115 pruned, 13 kept
    mask = top_k_mask(x, k)
    assert (mask.sum(axis=1) == k).all()
    # the kept values are the k largest; among ties at the cut the lowest indices (a stable sort's choice)
    order = np.argsort(-x, axis=1, kind="stable")[:, :k]
    ref = np.zeros_like(mask)
    np.put_along_axis(ref, order, True, axis=1)
    np.testing.assert_array_equal(mask, ref)
    # a percentile cut (the old rule) keeps more than k wherever ties straddle it
    cut = np.percentile(x, 90.0, axis=1, keepdims=True)
    assert ((x >= cut).sum(axis=1) > k).mean() > 0.3


def test_react_takes_the_papers_90th_percentile_by_parameter_and_names_it():
    rng = np.random.default_rng(5)
    fit = Outputs(features=np.abs(rng.normal(0, 1, (300, 16))), logits=np.zeros((300, 3)))
    head = Head(weight=rng.normal(0, 1, (3, 16)), bias=np.zeros(3))
    data = Outputs(features=np.abs(rng.normal(0, 2, (20, 16))), logits=np.zeros((20, 3)))
    for p, source in ((99.0, "NINCO"), (90.0, "Sun et al.")):
        det = get_detector("react", percentile=p).fit(fit, head)
        r = np.percentile(fit.features.astype(np.float64), p)  # Sun et al.: clip at the p-th percentile of ID activations
        logits = np.minimum(data.features.astype(np.float64), r) @ head.weight.T + head.bias
        ref = np.log(np.exp(logits).sum(axis=1))
        np.testing.assert_allclose(det.score(data), ref, rtol=1e-12)
        assert any(f"{p:g}th percentile" in n and source in n for n in det.notes)


def test_odin_steps_epsilon_in_pixel_space_as_the_reference(tmp_path):
    """The reference (Liang et al.; pytorch-ood) divides sign(grad) in the normalised input by the
    channel std, i.e. a step of epsilon on [0, 1] pixels. Written here in pixel space with a model
    that normalises inside, which is the same step taken the other way round."""
    import torch
    from PIL import Image as PILImage
    from torchvision.transforms import functional as TF

    from pipelines.evaluation.detectors.odin import odin_scores
    from pipelines.features.classifiers import LoadedModel

    torch.manual_seed(0)
    mean, std = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(),
                              torch.nn.Linear(8, 10)).double().eval()
    paths = []
    rng = np.random.default_rng(0)
    for i in range(4):
        p = tmp_path / f"{i}.png"
        PILImage.fromarray(rng.integers(0, 256, (32, 32, 3), dtype=np.uint8)).save(p)
        paths.append(str(p))

    def transform(im):
        return TF.normalize(TF.to_tensor(im).double(), mean, std)

    lm = LoadedModel(name="toy", model=net, transform=transform, data_config={"input_size": (3, 32, 32), "crop_pct": 1.0,
                     "mean": mean, "std": std}, device="cpu", weights="toy", feature_dim=8, wnids=(), labels=())
    T, eps = 2.0, 0.02  # a visible step, so that the two rules give different scores
    got = odin_scores(lm, paths, temperature=T, epsilon=eps)
    m = torch.tensor(mean, dtype=torch.float64).view(1, 3, 1, 1)
    s = torch.tensor(std, dtype=torch.float64).view(1, 3, 1, 1)
    ref, old = [], []
    for p in paths:
        x = TF.to_tensor(PILImage.open(p).convert("RGB")).double()[None].requires_grad_(True)  # pixels in [0, 1]
        logits = net((x - m) / s) / T
        torch.nn.functional.cross_entropy(logits, logits.argmax(1)).backward()
        x2 = x.detach() - eps * torch.sign(x.grad)  # epsilon on the pixel scale
        ref.append(torch.softmax(net((x2 - m) / s) / T, dim=1).max().item())
        # the old rule: epsilon in normalised space, i.e. eps * std on the pixel scale
        x3 = x.detach() - eps * s * torch.sign(x.grad)
        old.append(torch.softmax(net((x3 - m) / s) / T, dim=1).max().item())
    np.testing.assert_allclose(got, ref, rtol=1e-6)  # the scores leave the model in float32
    assert np.abs(np.array(got) - np.array(old)).max() > 1e-4


def test_detectors_on_one_fit_set_share_what_they_derive_from_it():
    """Mahalanobis and Relative Mahalanobis fit the class Gaussians once; ViM and Residual the
    eigen-decomposition once (issue 32's benchmark: each was computed again per detector)."""
    head, fit, test, _ = _gaussian_case(2)
    maha = get_detector("mahalanobis").fit(fit, head)
    rel = get_detector("relative_mahalanobis").fit(fit, head)
    assert rel.means is maha.means and rel.precision is maha.precision
    vim = get_detector("vim", dim=5).fit(fit, head)
    res = get_detector("residual", dim=5).fit(fit, head)
    assert vim.u is res.u
    np.testing.assert_array_equal(vim.residual_space, res.space)
    # another set, or another last layer, is computed afresh
    other = Outputs(features=fit.features, logits=fit.logits, labels=fit.labels)
    assert get_detector("mahalanobis").fit(other, head).means is not maha.means
    head2 = Head(weight=head.weight * 2, bias=head.bias)
    assert get_detector("vim", dim=5).fit(fit, head2).u is not vim.u


def test_gmm_lowers_its_components_to_what_a_small_fit_set_supports_and_says_so():
    rng = np.random.default_rng(6)
    fit = Outputs(features=np.abs(rng.normal(size=(120, 64))), logits=rng.normal(size=(120, 5)), labels=rng.integers(0, 5, 120))
    det = get_detector("gmm").fit(fit)
    assert det.means.shape == (12, 50) and any("used 12" in n for n in det.notes)
    with pytest.raises(DetectorError, match="at least 20"):
        get_detector("gmm").fit(Outputs(features=fit.features[:10], logits=fit.logits[:10], labels=fit.labels[:10]))
