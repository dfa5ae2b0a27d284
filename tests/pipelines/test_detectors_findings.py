"""The five findings of issue 32, each a test that failed before its fix: KL-matching's floor,
ASH's choice among ties, ODIN's gradient convention, OpenOOD's AUPR, Head.restricted's check."""
import numpy as np
import pytest

from pipelines.evaluation.detectors import DetectorError, Head, Outputs, get_detector
from pipelines.evaluation.metrics import ood_metrics
from pipelines.evaluation.run import Conventions, detector_info


def test_kl_matching_takes_no_floor_under_the_class_mean_as_pytorch_ood():
    # pytorch-ood (kkirchheim/pytorch-ood@d04767360a38, detector/klmatching.py): KL = sum p log(p / d), no clip
    fit_logits = np.array([[40.0, 0, 10], [0, 40.0, 10], [0, 10, 40.0]])
    fit = Outputs(features=np.zeros((3, 2)), logits=fit_logits, labels=[0, 1, 2])
    test = Outputs(features=np.zeros((1, 2)), logits=np.array([[0.0, 0, 14]]))

    def sm(z):
        e = np.exp(z - z.max(axis=1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True)
    d, p = sm(fit_logits), sm(test.logits.astype(np.float64))[0]
    want = -min(float(np.sum(p * np.log(p / dc))) for dc in d)
    got = get_detector("kl_matching").fit(fit).score(test)[0]
    assert got == pytest.approx(want, rel=1e-9) and got == pytest.approx(-3.3261e-05, rel=1e-4)
    # the earlier floor of 1e-12 stays an option, and gives the earlier figure
    assert get_detector("kl_matching", clip=1e-12).fit(fit).score(test)[0] == pytest.approx(-2.1006e-05, rel=1e-4)
    # and the convention is named with the results
    assert "clip=0" in detector_info(["kl_matching"])["kl_matching"]["settings"]


def test_ash_keeps_what_torch_topk_keeps_among_ties_by_default():
    import torch

    x = np.array([[1.0, 0.0, 1.0, 1.0]])
    head = Head(weight=np.array([[1.0, 0, 5, 0], [0, 1.0, 0, 0]]), bias=np.zeros(2))
    out = Outputs(features=x, logits=head.logits(x))
    # the authors' code: k = 4 - round(4 * 0.75) = 1 activation kept by torch.topk
    _, i = torch.topk(torch.tensor(x), 1, dim=1)
    pruned = np.zeros_like(x)
    pruned[0, int(i[0, 0])] = 1.0
    h = pruned * np.exp(x.sum() / pruned.sum())
    want = float(np.log(np.exp(h @ head.weight.T).sum()))
    got = get_detector("ash", percentile=75.0).fit(out, head).score(out)[0]
    assert got == pytest.approx(want, rel=1e-12) and got == pytest.approx(100.4277, rel=1e-6)
    lowest = get_detector("ash", percentile=75.0, ties="lowest-index").fit(out, head).score(out)[0]
    assert lowest == pytest.approx(20.0855, rel=1e-5)
    # the rule is stated with the results
    assert "ties=torch-topk" in detector_info(["ash"])["ash"]["settings"]
    assert "ties=lowest-index" in detector_info(["ash"], {"ash": {"ties": "lowest-index"}})["ash"]["settings"]


def test_odin_gradient_is_a_convention_and_c_oods_setting_is_credited_only_with_its_gradient(tmp_path):
    """``liang`` (default): cross-entropy of f(x)/T; ``cood``: cross-entropy over the softmax, T out of
    the gradient (issue 32's restatement of C-OOD's code). Both written here in pixel space with a
    model that normalises inside (random weights: the arithmetic is what is checked)."""
    import torch
    from PIL import Image as PILImage
    from torchvision.transforms import functional as TF

    from pipelines.evaluation.detectors.odin import odin_key, odin_scores
    from pipelines.features.classifiers import LoadedModel

    torch.manual_seed(1)
    mean, std = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(),
                              torch.nn.Linear(8, 10)).double().eval()
    rng = np.random.default_rng(1)
    paths = []
    for i in range(4):
        p = tmp_path / f"{i}.png"
        PILImage.fromarray(rng.integers(0, 256, (32, 32, 3), dtype=np.uint8)).save(p)
        paths.append(str(p))
    lm = LoadedModel(name="toy", model=net, transform=lambda im: TF.normalize(TF.to_tensor(im).double(), mean, std),
                     data_config={"input_size": (3, 32, 32), "crop_pct": 1.0, "mean": mean, "std": std}, device="cpu", weights="toy",
                     feature_dim=8, wnids=(), labels=())
    T, eps = 2.0, 0.02
    m = torch.tensor(mean, dtype=torch.float64).view(1, 3, 1, 1)
    s = torch.tensor(std, dtype=torch.float64).view(1, 3, 1, 1)

    def reference(gradient):
        out = []
        for p in paths:
            x = TF.to_tensor(PILImage.open(p).convert("RGB")).double()[None].requires_grad_(True)
            z = net((x - m) / s)
            if gradient == "cood":
                probs = torch.softmax(z, dim=1)
                loss = torch.nn.functional.cross_entropy(probs, probs.argmax(1))
            else:
                loss = torch.nn.functional.cross_entropy(z / T, (z / T).argmax(1))
            loss.backward()
            x2 = x.detach() - eps * torch.sign(x.grad)
            out.append(torch.softmax(net((x2 - m) / s) / T, dim=1).max().item())
        return np.array(out)

    liang, cood = odin_scores(lm, paths, temperature=T, epsilon=eps), odin_scores(lm, paths, temperature=T, epsilon=eps, gradient="cood")
    np.testing.assert_allclose(liang, reference("liang"), rtol=1e-6)
    np.testing.assert_allclose(cood, reference("cood"), rtol=1e-6)
    assert np.abs(liang - cood).max() > 1e-6  # the two rules step differently
    # cached apart; Liang et al.'s keeps its earlier key
    assert odin_key(2.0, 1e-5) == "odin-px_t2_e1e-05" and odin_key(2.0, 1e-5, "cood") == "odin-cood_t2_e1e-05"
    empty = Outputs(features=np.zeros((1, 2)), logits=np.zeros((1, 2)))
    det = get_detector("odin").fit(empty)
    assert det.params["gradient"] == "liang"
    assert "not C-OOD's setting" in det.notes[0]
    assert "C-OOD's setting (its gradient rule" in get_detector("odin", gradient="cood").fit(empty).notes[0]
    assert "gradient=liang" in detector_info(["odin"])["odin"]["settings"]
    from pipelines.evaluation.detectors import method_params

    with pytest.raises(DetectorError, match="--odin-gradient: 'x' is not one of liang, cood"):
        method_params({"odin_gradient": "x"})


def test_openood_aupr_is_the_trapezoid_under_sklearns_pr_curve():
    from sklearn import metrics

    m = ood_metrics([1.0, 0.0], [0.0, 0.0])
    assert (m["aupr_in"], m["aupr_out"]) == pytest.approx((0.75, 2 / 3))
    o = ood_metrics([1.0, 0.0], [0.0, 0.0], aupr_method="openood")
    assert (o["aupr_in"], o["aupr_out"]) == pytest.approx((0.875, 5 / 6))
    assert o["auroc"] == m["auroc"] and o["fpr95_id_positive"] == m["fpr95_id_positive"]
    # OpenOOD (Jingkang50/OpenOOD@3c35632ee91b, openood/evaluators/metrics.py auc_and_fpr_recall): OOD positive,
    # conf negated for AUPR-Out, metrics.auc over sklearn's precision_recall_curve
    rng = np.random.default_rng(0)
    for ids, oods in ((rng.normal(1, 1, 300), rng.normal(0, 1, 200)),
                      (np.round(rng.normal(1, 1, 300)), np.round(rng.normal(0, 1, 200)))):  # many ties
        conf = np.concatenate([ids, oods])
        label = np.concatenate([np.zeros(len(ids)), -np.ones(len(oods))])
        ood_indicator = (label == -1).astype(int)
        p_in, r_in, _ = metrics.precision_recall_curve(1 - ood_indicator, conf)
        p_out, r_out, _ = metrics.precision_recall_curve(ood_indicator, -conf)
        got = ood_metrics(ids, oods, aupr_method="openood")
        assert got["aupr_in"] == pytest.approx(metrics.auc(r_in, p_in), rel=1e-12)
        assert got["aupr_out"] == pytest.approx(metrics.auc(r_out, p_out), rel=1e-12)
    # named with the results
    assert "OpenOOD" in Conventions(aupr_method="openood").describe()["aupr"]
    with pytest.raises(ValueError, match="aupr-method"):
        Conventions(aupr_method="x")


def test_head_restricted_checks_its_shape_before_returning():
    bad = Head(weight=np.ones((3, 4)), bias=np.ones(2))
    with pytest.raises(DetectorError, match=r"head weight \(3, 4\) / bias \(2,\)"):
        bad.restricted(np.array([0, 2]))
    with pytest.raises(DetectorError, match=r"head weight"):
        bad.restricted(np.array([0, 1]))  # before: a silently mismatched head
    good = Head(weight=np.arange(12.0).reshape(3, 4), bias=np.arange(3.0))
    r = good.restricted(np.array([2, 0]))
    assert r.bias.tolist() == [2.0, 0.0] and r.weight[0].tolist() == [8.0, 9.0, 10.0, 11.0]
    with pytest.raises(DetectorError, match="indices"):
        good.restricted(np.array([3]))


def test_rankfeat_removes_the_rank_one_part_of_the_last_map_as_openood(tmp_path):
    """RankFeat through the input-level path, on a small network with RANDOM WEIGHTS (the
    arithmetic is what is checked): OpenOOD's rankfeat_postprocessor (Jingkang50/OpenOOD@3c35632ee91b,
    the Block 4 branch with SVD), written here: X (C x HW) - s1 u1 v1^T, average pool, fc,
    T * logsumexp(logits / T)."""
    import torch
    from PIL import Image as PILImage
    from torchvision.transforms import functional as TF

    from pipelines.evaluation.detectors import DETECTORS
    from pipelines.evaluation.detectors.rankfeat import rankfeat_key, rankfeat_scores
    from pipelines.features.classifiers import LoadedModel

    class Tiny(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.body = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, stride=2), torch.nn.ReLU(), torch.nn.Conv2d(8, 16, 3), torch.nn.ReLU())
            self.fc = torch.nn.Linear(16, 10)

        def forward_features(self, x):
            return self.body(x)

        def forward_head(self, f):
            return self.fc(f.mean(dim=(2, 3)))

        def forward(self, x):
            return self.forward_head(self.forward_features(x))

    torch.manual_seed(2)
    net = Tiny().double().eval()
    mean, std = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
    rng = np.random.default_rng(2)
    paths = []
    for i in range(3):
        p = tmp_path / f"{i}.png"
        PILImage.fromarray(rng.integers(0, 256, (24, 24, 3), dtype=np.uint8)).save(p)
        paths.append(str(p))
    lm = LoadedModel(name="tiny", model=net, transform=lambda im: TF.normalize(TF.to_tensor(im).double(), mean, std),
                     data_config={"input_size": (3, 24, 24), "crop_pct": 1.0, "mean": mean, "std": std}, device="cpu", weights="random",
                     feature_dim=16, wnids=(), labels=())
    for T in (1.0, 2.5):
        got = rankfeat_scores(lm, paths, temperature=T)
        want = []
        for p in paths:
            x = TF.normalize(TF.to_tensor(PILImage.open(p).convert("RGB")).double(), mean, std)[None]
            with torch.no_grad():
                feat = net.body(x)
                B, C, H, W = feat.size()
                f = feat.view(B, C, H * W)
                u, s, v = torch.linalg.svd(f, full_matrices=False)
                f = f - s[:, 0:1].unsqueeze(2) * u[:, :, 0:1].bmm(v[:, 0:1, :])
                logits = net.fc(torch.flatten(torch.nn.functional.adaptive_avg_pool2d(f.view(B, C, H, W), 1), 1))
                want.append(float(T * torch.logsumexp(logits / T, dim=1)))
        np.testing.assert_allclose(got, want, rtol=1e-9)
        plain = [float(T * torch.logsumexp(net(TF.normalize(TF.to_tensor(PILImage.open(p).convert("RGB")).double(), mean, std)[None]) / T,
                                           dim=1)) for p in paths]
        assert np.abs(np.array(got) - plain).max() > 1e-6  # the rank-1 part mattered
    assert DETECTORS["rankfeat"].input_level and DETECTORS["rankfeat"].layers
    assert rankfeat_key(1.0) == DETECTORS["rankfeat"].input_key_for({"temperature": 1.0}) == "rankfeat_t1"


def test_models_come_from_names_files_and_timm_patterns(tmp_path):
    from pipelines.evaluation.run import ModelListError, model_list

    listing = tmp_path / "models.txt"
    listing.write_text("# C-OOD style list\nefficientnet_lite0\n\nresnet18.a1_in1k  # a timm tag\n", encoding="utf-8")
    got = model_list([str(listing), "efficientnet_lite0", "efficientnet_lite*"], registered=["efficientnet_lite0"])
    assert got == ["efficientnet_lite0", "resnet18.a1_in1k", "efficientnet_lite0.ra_in1k"]
    with pytest.raises(ModelListError, match="matches no registered model"):
        model_list(["nosuchnet*"])
    empty = tmp_path / "empty.txt"
    empty.write_text("# nothing\n", encoding="utf-8")
    with pytest.raises(ModelListError, match="names no model"):
        model_list([str(empty)])


def test_mahalanobis_ensemble_over_layers_through_the_input_level_path(tmp_path):
    """The layers' pooled maps are computed while extracting (timm's forward_intermediates) for the
    fit set too, and the score is OpenOOD's mds_ensemble (Jingkang50/OpenOOD@3c35632ee91b,
    feature type mean, alpha 1, noise 0) written here: per layer class means and the precision of
    the class-centred features, sum over layers of max_c -(x - mu_c) P (x - mu_c). A small network
    with RANDOM WEIGHTS (the arithmetic is what is checked)."""
    import torch
    from PIL import Image as PILImage
    from torchvision.transforms import functional as TF

    from pipelines.evaluation.detectors import Outputs
    from pipelines.evaluation.detectors.mds_ensemble import mds_key, pooled_layers
    from pipelines.features.classifiers import LoadedModel

    class Staged(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.s1 = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3, stride=2), torch.nn.ReLU())
            self.s2 = torch.nn.Sequential(torch.nn.Conv2d(4, 6, 3), torch.nn.ReLU())
            self.fc = torch.nn.Linear(6, 3)

        def forward_intermediates(self, x, indices=None, intermediates_only=False):
            a = self.s1(x)
            b = self.s2(a)
            return [a, b][-indices:]

        def forward(self, x):
            return self.fc(self.s2(self.s1(x)).mean(dim=(2, 3)))

    torch.manual_seed(3)
    net = Staged().double().eval()
    mean, std = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
    rng = np.random.default_rng(3)
    paths, labels = [], []
    for i in range(36):
        p = tmp_path / f"{i}.png"
        base = np.zeros((20, 20, 3)) + [80 * (i % 3), 60, 200 - 80 * (i % 3)]
        PILImage.fromarray(np.clip(base + rng.normal(0, 40, (20, 20, 3)), 0, 255).astype(np.uint8)).save(p)
        paths.append(str(p))
        labels.append(i % 3)
    lm = LoadedModel(name="staged", model=net, transform=lambda im: TF.normalize(TF.to_tensor(im).double(), mean, std),
                     data_config={"input_size": (3, 20, 20), "crop_pct": 1.0, "mean": mean, "std": std}, device="cpu", weights="random",
                     feature_dim=6, wnids=(), labels=())
    got = pooled_layers(lm, paths, stages=2, batch_size=8)
    assert got["widths"].tolist() == [4, 6] and got["scores"].shape == (36, 10)
    key = mds_key(2)

    def outputs(sl):
        n = len(range(36)[sl])
        o = Outputs(features=np.zeros((n, 2)), logits=np.zeros((n, 3)), labels=np.array(labels)[sl])
        o.extra[key], o.extra[f"{key}:widths"] = got["scores"][sl], got["widths"]
        return o
    fit, test = outputs(slice(0, 24)), outputs(slice(24, 36))
    det = get_detector("mds_ensemble", stages=2).fit(fit)
    # the reference, from the images: pooled maps of each stage, then OpenOOD's per-layer Gaussian scores summed
    feats = []
    for p in paths:
        x = TF.normalize(TF.to_tensor(PILImage.open(p).convert("RGB")).double(), mean, std)[None]
        with torch.no_grad():
            a = net.s1(x)
            b = net.s2(a)
        feats.append([a.mean(dim=(2, 3))[0].numpy(), b.mean(dim=(2, 3))[0].numpy()])
    want = np.zeros(12)
    for layer in range(2):
        xf = np.array([f[layer] for f in feats[:24]])
        y = np.array(labels[:24])
        mus = [xf[y == c].mean(axis=0) for c in range(3)]
        centred = np.concatenate([xf[y == c] - mus[c] for c in range(3)])
        centred = centred - centred.mean(axis=0)  # EmpiricalCovariance(assume_centered=False)
        prec = np.linalg.pinv(centred.T @ centred / len(centred))
        xt = np.array([f[layer] for f in feats[24:]])
        want += np.array([max(-(v - m) @ prec @ (v - m) for m in mus) for v in xt])
    got_scores = det.score(test)
    np.testing.assert_allclose(got_scores, want, rtol=1e-9)
    assert any("no input preprocessing" in n for n in det.notes)
    with pytest.raises(DetectorError, match="computed while extracting"):
        get_detector("mds_ensemble", stages=2).fit(Outputs(features=np.zeros((2, 2)), logits=np.zeros((2, 3)), labels=[0, 1]))


def test_a_parameter_worked_out_from_the_data_reads_auto_and_its_value_is_noted():
    """The evaluation page showed ViM's help text ("dim: principal dimension D (empty or 0: ...)")
    where its other detectors show the value used; now "dim=auto (ViM's rule)", and the D the
    rule gave for this model's features is in the result's notes."""
    assert detector_info(["vim"])["vim"]["settings"] == "dim=auto (ViM's rule)"
    assert detector_info(["vim"], {"vim": {"dim": 8}})["vim"]["settings"] == "dim=8"
    rng = np.random.default_rng(0)
    head = Head(weight=rng.normal(size=(5, 40)), bias=rng.normal(size=5))
    x = rng.normal(size=(60, 40))
    fit = Outputs(features=x, logits=head.logits(x))
    # ViM's rule (Wang et al., CVPR 2022, sec. 4): D = 1000 if N >= 2048, 512 if N >= 768, else N / 2
    for name in ("vim", "residual"):
        det = get_detector(name).fit(fit, head)
        assert det.notes == [f"dim=20: {'the paper' if name == 'vim' else 'ViM'}'s rule for 40-d features"], det.notes
        assert get_detector(name, dim=8).fit(fit, head).notes == []
