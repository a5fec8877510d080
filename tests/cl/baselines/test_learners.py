from __future__ import annotations

import pytest
import torch
from torch import nn

from fastweights.cl.baselines.learners import MLP, ConvNet, build_learner


def test_mlp_is_two_layers_of_400_and_maps_images_to_logits():
    model = MLP(3 * 16 * 16, 10)
    linears = [m for m in model.modules() if isinstance(m, nn.Linear)]
    assert [(m.in_features, m.out_features) for m in linears] == [(768, 400), (400, 400), (400, 10)]
    assert sum(isinstance(m, nn.ReLU) for m in model.modules()) == 2
    assert model(torch.randn(5, 3, 16, 16)).shape == (5, 10)
    assert MLP(4, 2, hidden=()).net[-1].in_features == 4


def test_convnet_and_build_learner_shapes():
    conv = ConvNet(3, 32, 7)
    assert conv(torch.randn(4, 3, 32, 32)).shape == (4, 7)
    assert conv.head.in_features == conv.backbone.feature_dim == 32 * 2 * 2
    assert any(isinstance(m, nn.InstanceNorm2d) for m in conv.modules())
    mlp = build_learner("mlp", channels=1, image_size=16, n_out=3)
    assert isinstance(mlp, MLP) and mlp.in_features == 256 and mlp(torch.randn(2, 1, 16, 16)).shape == (2, 3)
    cnn = build_learner("conv4", channels=1, image_size=16, n_out=3)
    assert isinstance(cnn, ConvNet) and cnn(torch.randn(2, 1, 16, 16)).shape == (2, 3)
    assert cnn(torch.randn(0, 1, 16, 16)).shape == (0, 3)


@pytest.mark.parametrize(
    "make, match",
    [
        (lambda: MLP(0, 2), "in_features: expected an int >= 1, got 0"),
        (lambda: MLP(4, 0), "n_out: expected an int >= 1, got 0"),
        (lambda: MLP(4, 2, hidden=(400, 0)), r"hidden\[1\]: expected an int >= 1, got 0"),
        (lambda: MLP(4.0, 2), "in_features: expected an int"),
        (lambda: ConvNet(1, 32, 0), "n_out: expected an int >= 1"),
        (lambda: ConvNet(1, 20, 2), "image_size: expected a multiple of 16, got 20"),
        (lambda: ConvNet(0, 32, 2), "in_channels"),
        (lambda: build_learner("resnet", channels=1, image_size=16, n_out=2), "learner: expected one of"),
    ],
)
def test_bad_arguments(make, match):
    with pytest.raises(ValueError, match=match):
        make()
