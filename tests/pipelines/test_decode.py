"""The torchvision decoder (pipelines/features/decode.py) against what it must reproduce: JPEG headers and
EXIF orientation as Pillow reads them, timm's eval transform, the Pillow path's answers per
file (PNG, CMYK, grey, 16-bit, progressive, EXIF-rotated, broken, bombs), the Pillow path's
predictions on real photos; the out-of-memory back-off; the exact torch search against faiss.
Tests marked ``gpu`` run the same checks on CUDA and are skipped without it."""
from __future__ import annotations

import io

import numpy as np
import pytest
import torch
from PIL import Image, ImageOps

from fixtures.images import DISTINCT_REAL_PHOTOS, awkward_images, broken_files, exif_rotated_jpeg, jpeg_bytes, pattern_image, png_bytes
from pipelines.features.decode import JpegHeader, Preprocess, TensorBatches, apply_orientation, jpeg_header
from tests.conftest import real_photo

CUDA = torch.cuda.is_available()
gpu = pytest.mark.gpu


def _photo(rng, size=(160, 120)) -> Image.Image:
    return pattern_image(rng, "blobs", [(200, 40, 40), (30, 30, 200), (240, 240, 60)], size)


# -- headers and orientation ---------------------------------------------------------------------------


def test_jpeg_header_reads_what_pillow_reads():
    rng = np.random.default_rng(0)
    im = _photo(rng)
    cases = {
        "baseline": (jpeg_bytes(im), 0xC0, 3),
        "progressive": (jpeg_bytes(im, progressive=True), 0xC2, 3),
        "grey": (jpeg_bytes(im.convert("L")), 0xC0, 1),
        "cmyk": (jpeg_bytes(im.convert("CMYK")), 0xC0, 4),
    }
    for name, (data, process, components) in cases.items():
        h = jpeg_header(data)
        with Image.open(io.BytesIO(data)) as ref:
            assert (h.width, h.height) == ref.size, name
            assert h.components == len(ref.getbands()), name
        assert (h.process, h.components, h.precision) == (process, components, 8), name
    assert jpeg_header(cases["baseline"][0]).gpu_decodable and jpeg_header(cases["progressive"][0]).gpu_decodable
    assert not jpeg_header(cases["cmyk"][0]).cpu_decodable  # CMYK goes to Pillow, as the Pillow path converts it
    assert jpeg_header(png_bytes(im)) is None and jpeg_header(b"") is None and jpeg_header(b"\xff\xd8\xff") is None
    assert jpeg_header(np.frombuffer(cases["baseline"][0], dtype=np.uint8)) == jpeg_header(cases["baseline"][0])


@pytest.mark.parametrize("orientation", range(1, 9))
def test_exif_orientation_is_read_and_applied_as_pillow_does(orientation):
    from torchvision.io import ImageReadMode, decode_jpeg

    rng = np.random.default_rng(orientation)
    im = _photo(rng, (96, 64))  # not square: a wrong transpose changes the shape
    data = exif_rotated_jpeg(im, orientation)
    h = jpeg_header(data)
    with Image.open(io.BytesIO(data)) as ref_im:
        assert h.orientation == ref_im.getexif().get(0x0112, 1) == orientation
        ref = np.asarray(ImageOps.exif_transpose(ref_im).convert("RGB"))
    got = apply_orientation(decode_jpeg(torch.frombuffer(bytearray(data), dtype=torch.uint8), mode=ImageReadMode.RGB), h.orientation)
    got = got.permute(1, 2, 0).numpy()
    assert got.shape == ref.shape
    assert np.abs(got.astype(int) - ref.astype(int)).mean() < 1.0  # both libjpeg: the same pixels up to rounding


def test_a_broken_exif_block_means_upright():
    data = bytearray(exif_rotated_jpeg(_photo(np.random.default_rng(0)), 6))
    start = data.index(b"Exif\x00\x00") + 6
    data[start:start + 2] = b"XX"  # neither II nor MM
    assert jpeg_header(bytes(data)).orientation == 1


# -- resize, crop, normalise ---------------------------------------------------------------------------------


@pytest.mark.parametrize("cfg", [
    {"input_size": (3, 224, 224), "crop_pct": 0.875, "interpolation": "bicubic", "crop_mode": "center"},
    {"input_size": (3, 224, 224), "crop_pct": 0.9, "interpolation": "bilinear", "crop_mode": "squash"},
    {"input_size": (3, 224, 224), "crop_pct": 1.0, "interpolation": "bicubic", "crop_mode": "border"},
    {"input_size": (3, 384, 384), "crop_pct": 1.0, "interpolation": "bicubic", "crop_mode": "center"},
    {"input_size": (3, 192, 256), "crop_pct": 0.95, "interpolation": "bilinear", "crop_mode": "center"},
])
@pytest.mark.parametrize("size", [(500, 375), (375, 500), (160, 120), (333, 333)])
def test_tensor_preprocess_matches_timms_eval_transform(cfg, size):
    """timm's own transform (Pillow resize) is the reference; the tensor path resizes in float,
    so a few grey levels of difference are expected, not more."""
    import timm.data

    cfg = {**cfg, "mean": (0.485, 0.456, 0.406), "std": (0.229, 0.224, 0.225)}
    ref_t = timm.data.create_transform(**cfg, is_training=False)
    im = _photo(np.random.default_rng(sum(size)), size)
    ref = ref_t(im)
    got = Preprocess.from_data_config(cfg)([torch.from_numpy(np.asarray(im).copy()).permute(2, 0, 1)])[0]
    assert got.shape == ref.shape
    err = (got - ref).abs() * torch.tensor(cfg["std"]).view(3, 1, 1) * 255  # in grey levels
    assert err.mean() < 2.5, float(err.mean())


def test_a_batch_of_mixed_sizes_is_resized_per_size_and_keeps_each_image_its_row():
    cfg = {"input_size": (3, 48, 48), "crop_pct": 0.875, "interpolation": "bicubic", "mean": (0.5,) * 3, "std": (0.25,) * 3}
    pre = Preprocess.from_data_config(cfg)
    rng = np.random.default_rng(9)
    ims = [torch.from_numpy(np.asarray(_photo(rng, size)).copy()).permute(2, 0, 1) for size in [(80, 60), (64, 64), (80, 60), (50, 90)]]
    together = pre(ims)
    alone = torch.cat([pre([im]) for im in ims])
    assert torch.allclose(together, alone, atol=1e-5)
    x, order = pre.batch(ims)
    assert sorted(order) == [0, 1, 2, 3] and order[:2] == [0, 2]  # the two 80x60 images share one resize
    assert torch.allclose(x, alone[order], atol=1e-5)


def test_preprocess_refuses_what_a_tensor_resize_cannot_do():
    with pytest.raises(ValueError, match="--decoder pil"):
        Preprocess.from_data_config({"input_size": (3, 224, 224), "interpolation": "lanczos", "mean": (0, 0, 0), "std": (1, 1, 1)})


# -- the loader: every file answered, per-file fallback, bombs from the header -----------------------------------


def _folder(tmp_path, rng):
    files = {}
    im = _photo(rng, (200, 150))
    files["a_baseline.jpg"] = jpeg_bytes(im)
    files["b_progressive.jpg"] = jpeg_bytes(im, progressive=True)
    files.update(awkward_images(rng))  # CMYK, 16-bit grey, palette, alpha, EXIF 6, grey JPEG, GIF, WebP
    files.update({k: v for k, (v, _code) in broken_files(rng).items()})
    files["bomb_header.jpg"] = _jpeg_claiming(jpeg_bytes(im), 30000, 30000)
    paths = []
    for name, data in sorted(files.items()):
        (tmp_path / name).write_bytes(data)
        paths.append(str(tmp_path / name))
    return paths


def _jpeg_claiming(data: bytes, width: int, height: int) -> bytes:
    """A JPEG whose frame header claims another size (the pixels are never decoded)."""
    b = bytearray(data)
    i = b.index(b"\xff\xc0")
    b[i + 5:i + 9] = height.to_bytes(2, "big") + width.to_bytes(2, "big")
    return bytes(b)


def _pil_inputs(paths, pre_cfg):
    from pipelines.sources.images import load_rgb_for_model

    out = {}
    for i, p in enumerate(paths):
        try:
            out[i] = load_rgb_for_model(p, min_side=256)
        except Exception:
            pass
    return out


def test_every_file_the_pillow_path_reads_is_answered_and_broken_ones_keep_their_reason(tmp_path):
    rng = np.random.default_rng(1)
    paths = _folder(tmp_path, rng)
    cfg = {"input_size": (3, 64, 64), "crop_pct": 0.875, "interpolation": "bicubic", "mean": (0.5,) * 3, "std": (0.25,) * 3}
    loader = TensorBatches(paths, preprocess=Preprocess.from_data_config(cfg), batch_size=5, threads=3, min_side=73,
                           max_pixels=50_000_000)
    got_idx, bad = [], {}
    for idx, x, b in loader:
        assert x is None or (x.shape[1:] == (3, 64, 64) and len(idx) == x.shape[0] and torch.isfinite(x).all())
        got_idx += idx
        bad.update(dict(b))
    pil_ok = set(_pil_inputs(paths, cfg))
    assert set(got_idx) == pil_ok, ([paths[i] for i in pil_ok - set(got_idx)], [paths[i] for i in set(got_idx) - pil_ok])
    assert set(bad) == set(range(len(paths))) - pil_ok
    for i, reason in bad.items():
        assert reason.startswith(paths[i]) and "cannot decode it for the model" in reason
    names = {p.rsplit("/", 1)[1]: i for i, p in enumerate(paths)}
    assert "decompression bomb" in bad[names["bomb_header.jpg"]] and "30000x30000" in bad[names["bomb_header.jpg"]]
    assert "decompression bomb" in bad[names["bomb.png"]]
    # JPEGs torchvision reads went to libjpeg, the rest (PNG, CMYK, GIF, WebP) to Pillow, in the same batches
    assert loader.counts["libjpeg"] == 4 and loader.counts["pillow"] == len(pil_ok) - 4 and loader.counts["nvjpeg"] == 0


def test_a_decoder_error_in_a_producer_reaches_the_caller(tmp_path, monkeypatch):
    p = tmp_path / "a.jpg"
    p.write_bytes(jpeg_bytes(_photo(np.random.default_rng(0))))
    cfg = {"input_size": (3, 32, 32), "mean": (0.5,) * 3, "std": (0.25,) * 3}
    pre = Preprocess.from_data_config(cfg)
    loader = TensorBatches([str(p)] * 4, preprocess=pre, batch_size=2)
    monkeypatch.setattr(Preprocess, "batch", lambda self, *a, **k: (_ for _ in ()).throw(RuntimeError("boom")))
    with pytest.raises(RuntimeError, match="boom"):
        list(loader)


# -- with the real model ---------------------------------------------------------------------------------


@pytest.mark.slow
def test_predict_with_torchvision_answers_what_pil_answers_and_agrees(lite0, tmp_path):
    from pipelines.features.extract import extract

    rng = np.random.default_rng(2)
    paths = _folder(tmp_path, rng)
    coffee = Image.open(real_photo("coffee.png")).convert("RGB")
    for orientation in (1, 6, 8, 3):
        # the upright picture stored rotated with the EXIF tag that turns it back
        stored = {1: coffee, 6: coffee.transpose(Image.Transpose.ROTATE_90), 8: coffee.transpose(Image.Transpose.ROTATE_270),
                  3: coffee.transpose(Image.Transpose.ROTATE_180)}[orientation]
        (tmp_path / f"coffee_exif{orientation}.jpg").write_bytes(exif_rotated_jpeg(stored, orientation))
        paths.append(str(tmp_path / f"coffee_exif{orientation}.jpg"))
    a = extract(lite0, paths, decoder="pil", num_workers=0, batch_size=8)
    b = extract(lite0, paths, decoder="torchvision", num_workers=2, batch_size=8)
    assert b.decoder == "torchvision" and a.decoder == "pil"
    assert [r.ok for r in a.results] == [r.ok for r in b.results]
    assert all(r.topk[0][0] == "n07920052" for r in b.results[-4:]), [r.topk[0] for r in b.results[-4:]]  # espresso, upright
    for ra, rb in zip(a.results, b.results):
        if not ra.ok:
            assert rb.error.split(" (")[0] == ra.error.split(" (")[0]


@pytest.mark.slow
def test_parity_with_the_pillow_path_on_derived_real_photos(lite0, tmp_path):
    """400 photos derived from the real ones shipped with scikit-image/scikit-learn (random
    crops, scales and JPEG qualities): top-1 agreement >= 0.88 overall and >= 0.97 where the
    Pillow path is confident (top-1 >= 0.5); feature cosine >= 0.97 on average."""
    from pipelines.features.extract import extract

    rng = np.random.default_rng(3)
    photos = [Image.open(real_photo(n, pkg)).convert("RGB") for pkg, n in DISTINCT_REAL_PHOTOS]
    paths = []
    for i in range(400):
        im = photos[i % len(photos)]
        w, h = im.size
        f = rng.uniform(0.5, 1.0)
        cw, ch = int(w * f), int(h * f)
        left, top = int(rng.integers(0, w - cw + 1)), int(rng.integers(0, h - ch + 1))
        crop = im.crop((left, top, left + cw, top + ch))
        scale = rng.uniform(0.6, 1.4) * 450 / max(cw, ch)
        crop = crop.resize((max(32, int(cw * scale)), max(32, int(ch * scale))), Image.Resampling.BICUBIC)
        p = tmp_path / f"d{i:03d}.jpg"
        p.write_bytes(jpeg_bytes(crop, quality=int(rng.integers(70, 96))))
        paths.append(str(p))
    a = extract(lite0, paths, decoder="pil", batch_size=32)
    b = extract(lite0, paths, decoder="torchvision", batch_size=32)
    top_a, top_b = a.top_index[:, 0], b.top_index[:, 0]
    agree = float((top_a == top_b).mean())
    confident = a.top_prob[:, 0] >= 0.5
    agree_conf = float((top_a[confident] == top_b[confident]).mean())
    fa, fb = a.features.astype(np.float64), b.features.astype(np.float64)
    cos = float(np.mean(np.sum(fa * fb, 1) / np.linalg.norm(fa, axis=1) / np.linalg.norm(fb, axis=1)))
    print(f"parity: agreement {agree:.3f} overall, {agree_conf:.3f} on {confident.sum()} confident; cosine {cos:.4f}")
    assert confident.sum() >= 40
    assert agree >= 0.88 and agree_conf >= 0.97 and cos >= 0.97, (agree, agree_conf, cos)


def test_out_of_memory_halves_the_batch_says_so_and_changes_no_result(tmp_path, monkeypatch):
    """A model that runs out of memory above 3 images per pass (simulated): the batch halves
    until it fits, the note says so, and the outputs are those of an unconstrained run. (The
    back-off is torch's forward, the GPU path's: the CPU fast path is turned off here.)"""
    monkeypatch.setenv("OODC_CPU_RUNTIME", "torch")
    from pipelines.features.classifiers import LoadedModel
    from pipelines.features.extract import extract

    torch.manual_seed(0)

    class Net(torch.nn.Module):
        def __init__(self, limit):
            super().__init__()
            self.body = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten())
            self.head = torch.nn.Linear(4, 10)
            self.limit, self.calls = limit, []

        def forward_features(self, x):
            self.calls.append(len(x))
            if len(x) > self.limit:
                raise torch.cuda.OutOfMemoryError("CUDA out of memory (simulated)")
            return self.body(x)

        def forward_head(self, f, pre_logits=False):
            return f if pre_logits else self.head(f)

        def get_classifier(self):
            return self.head

    paths = []
    for i in range(10):
        p = tmp_path / f"{i}.jpg"
        p.write_bytes(jpeg_bytes(_photo(np.random.default_rng(i), (48, 40))))
        paths.append(str(p))
    cfg = {"input_size": (3, 32, 32), "crop_pct": 1.0, "interpolation": "bilinear", "mean": (0.5,) * 3, "std": (0.25,) * 3}

    def lm(net):
        return LoadedModel(name="toy", model=net, transform=None, data_config=cfg, device="cpu", weights="toy", feature_dim=4,
                           wnids=tuple(f"n{i:08d}" for i in range(10)), labels=tuple(str(i) for i in range(10)))

    small = Net(limit=3)
    big = Net(limit=100)
    big.load_state_dict(small.state_dict())
    loaded = lm(small)
    a = extract(loaded, paths, batch_size=8, decoder="torchvision", keep_logits=True)
    small = loaded.extra.get("fast_model_cpu", (small,))[0]  # the CPU path runs a channels_last copy of the model
    b = extract(lm(big), paths, batch_size=8, decoder="torchvision", keep_logits=True)
    assert [n for n in a.notes if n.startswith("out of")] == ["out of GPU memory at batch 8; continuing with batch 4",
                                                              "out of GPU memory at batch 4; continuing with batch 2"]
    assert max(n for n in small.calls if n <= 3) == 2 and small.calls[:3] == [8, 4, 2]
    assert np.allclose(a.logits, b.logits, atol=1e-6) and (a.row_of == b.row_of).all()


# -- search ---------------------------------------------------------------------------------------------------


def _clustered(rng, n, d=64, spread=0.3):
    centres = rng.standard_normal((max(1, n // 20), d))
    x = centres[rng.integers(0, len(centres), n)] + spread * rng.standard_normal((n, d))
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


@pytest.mark.parametrize("half", [False, True])
def test_torch_search_equals_faiss_exact_search(half):
    import faiss

    from pipelines.features.gpu_search import exact_topk

    rng = np.random.default_rng(4)
    x, q = _clustered(rng, 3000), _clustered(rng, 200)
    index = faiss.IndexFlatIP(x.shape[1])
    index.add(x)
    ref_s, ref_i = index.search(q, 10)
    s, i = exact_topk(q, x, 10, half=half, block=64)
    assert np.allclose(s, ref_s, atol=1e-5)
    recall = np.mean([len(set(a) & set(b)) / 10 for a, b in zip(i, ref_i)])
    assert recall >= (1.0 if not half else 0.99), recall


def test_near_duplicate_groups_and_knn_scores_are_the_same_on_either_search(monkeypatch):
    from pipelines.evaluation.detectors import Outputs, get_detector
    from pipelines.features.near_dups import group_near_duplicates

    rng = np.random.default_rng(5)
    x = _clustered(rng, 600, spread=0.05)  # tight clusters: many groups above the threshold
    faiss_groups = group_near_duplicates(x, threshold=0.9, device=None)
    torch_groups = group_near_duplicates(x, threshold=0.9, device="cpu")
    assert faiss_groups.group_of == torch_groups.group_of and faiss_groups.representative == torch_groups.representative
    assert len(set(faiss_groups.group_of)) < 600

    fit = Outputs(features=_clustered(rng, 500), logits=np.zeros((500, 10), np.float32), labels=np.zeros(500, np.int64))
    data = Outputs(features=_clustered(rng, 80), logits=np.zeros((80, 10), np.float32), labels=np.zeros(80, np.int64))
    import pipelines.evaluation.detectors.knn as knn_module

    monkeypatch.setattr(knn_module, "preferred_device", lambda: None)
    cpu = get_detector("knn", k=50).fit(fit).score(data)
    monkeypatch.setattr(knn_module, "preferred_device", lambda: "cpu")  # the GPU code path, on the CPU
    dev = get_detector("knn", k=50).fit(fit).score(data)
    assert np.allclose(cpu, dev, atol=1e-5)


# -- on a GPU ---------------------------------------------------------------------------------------------------


@gpu
@pytest.mark.skipif(not CUDA, reason="needs CUDA")
def test_gpu_batches_decode_like_the_cpu_and_fall_back_per_file(tmp_path):
    rng = np.random.default_rng(6)
    paths = _folder(tmp_path, rng)
    cfg = {"input_size": (3, 64, 64), "crop_pct": 0.875, "interpolation": "bicubic", "mean": (0.5,) * 3, "std": (0.25,) * 3}
    pre = Preprocess.from_data_config(cfg)
    out = {}
    for device in ("cpu", "cuda"):
        loader = TensorBatches(paths, preprocess=pre, device=device, batch_size=6, max_pixels=50_000_000, min_side=73)
        xs, bad = {}, {}
        for idx, x, b in loader:
            for j, i in enumerate(idx):
                xs[i] = x[j].float().cpu()
            bad.update(dict(b))
        out[device] = (xs, bad, loader.counts)
    (cx, cbad, _), (gx, gbad, gcounts) = out["cpu"], out["cuda"]
    assert set(cx) == set(gx) and set(cbad) == set(gbad)
    assert gcounts["nvjpeg"] >= 3
    for i in cx:
        assert (cx[i] - gx[i]).abs().mean() < 0.05, paths[i]  # nvJPEG's IDCT may differ from libjpeg's by a level or two


@gpu
@pytest.mark.skipif(not CUDA, reason="needs CUDA")
def test_gpu_search_equals_cpu_search():
    from pipelines.features.gpu_search import exact_topk

    rng = np.random.default_rng(7)
    x, q = _clustered(rng, 20000, d=256), _clustered(rng, 500, d=256)
    s_cpu, i_cpu = exact_topk(q, x, 10, device="cpu")
    s_gpu, i_gpu = exact_topk(q, x, 10, device="cuda")
    assert np.allclose(s_cpu, s_gpu, atol=1e-4)
    assert np.mean([len(set(a) & set(b)) / 10 for a, b in zip(i_cpu, i_gpu)]) >= 0.99


def test_header_dataclass_is_frozen():
    h = JpegHeader(width=1, height=1, components=3, precision=8, process=0xC0)
    with pytest.raises(Exception):
        h.width = 2  # type: ignore[misc]
