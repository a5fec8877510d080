"""The classifier's config: initialisation options and layer options reach the built model."""

from __future__ import annotations

import pytest
import torch

from fastweights.layers import SEQUENCE_LAYERS
from fastweights.models.classifier_config import ClassifierConfig, build_classifier


def _small(**kw):
    return ClassifierConfig(d_model=16, num_heads=4, channels=4, **kw)


def test_default_fields_build_the_reference_initialisation():
    torch.manual_seed(0)
    a = build_classifier(_small(), image_size=16)
    torch.manual_seed(0)
    b = build_classifier(_small(input_init_scale=1.0, label_init_scale=1.0, layer_options={}), image_size=16)
    for (name, x), (_, y) in zip(a.state_dict().items(), b.state_dict().items(), strict=True):
        assert torch.equal(x, y), name


def test_input_init_scale_scales_weight_and_bias_and_composes_with_label_scale():
    torch.manual_seed(0)
    base = build_classifier(_small(), image_size=16)
    torch.manual_seed(0)
    scaled = build_classifier(_small(input_init_scale=3.0, label_init_scale=2.0), image_size=16)
    f = base.backbone.feature_dim
    w, v = base.input_proj.weight, scaled.input_proj.weight
    torch.testing.assert_close(v[:, :f], 3.0 * w[:, :f], rtol=0, atol=0)
    torch.testing.assert_close(v[:, f:], 6.0 * w[:, f:], rtol=1e-7, atol=0)
    torch.testing.assert_close(scaled.input_proj.bias, 3.0 * base.input_proj.bias, rtol=0, atol=0)


def test_layer_options_reach_every_sequence_layer():
    model = build_classifier(_small(layer_options={"init": "modern", "beta_init": 1.0}), image_size=16)
    assert all(layer.init == "modern" and layer.beta_init == 1.0 for layer in model.seq_layers)
    e = model.seq_layers[0].head_dim
    q_std = float(model.seq_layers[0].weight[..., e : 2 * e].std())
    assert q_std > 0.2  # modern init: W_q std 1/sqrt(E) = 0.5, not 0.005


def test_per_layer_options_apply_only_to_the_selected_layer():
    options = {"srwm": {"init": "modern"}, "deltanet": {"chunk_size": 8}}
    srwm = build_classifier(_small(layer_options=options), image_size=16)
    assert all(layer.init == "modern" for layer in srwm.seq_layers)
    assert _small(sequence_layer="lstm", layer_options=options).sequence_layer_options() == {}
    deltanet = _small(sequence_layer="deltanet", layer_options=options)
    assert deltanet.sequence_layer_options() == {"chunk_size": 8}
    # the flat form is the selected layer's options
    assert _small(layer_options={"init": "modern"}).sequence_layer_options() == {"init": "modern"}


@pytest.mark.parametrize("name", SEQUENCE_LAYERS)
def test_block_option_reaches_every_sequence_layer(name):
    """``layer_options: {block: pre_ln}`` (flat, so one config serves every layer of a comparison) builds
    each layer in the uniform form; the default keeps each layer's native form."""
    model = build_classifier(_small(sequence_layer=name, layer_options={"block": "pre_ln"}), image_size=16)
    assert [layer.block for layer in model.seq_layers] == ["pre_ln", "pre_ln"]
    assert all(
        layer.block == "native"
        for layer in build_classifier(_small(sequence_layer=name), image_size=16).seq_layers
    )
    images = torch.randn(2, 3, 1, 16, 16)
    logits, state = model(images, torch.tensor([[0, 1, 5], [1, 0, 5]]))
    assert logits.shape == (2, 3, 5) and model.query(images, state).shape == (2, 3, 5)


@pytest.mark.parametrize(
    ("kw", "pattern"),
    [
        ({"layer_options": {"inits": "modern"}}, r"layer_options: \['inits'\] not accepted by 'srwm'"),
        ({"layer_options": {"init": "x"}}, r"layer_options: .*init"),
        ({"layer_options": {"dropout": 0.1}}, r"layer_options: 'dropout' is set by model.dropout"),
        ({"layer_options": ["init"]}, r"layer_options: expected a mapping"),
        ({"sequence_layer": "deltanet", "layer_options": {"init": "modern"}}, r"not accepted by 'deltanet'"),
        ({"layer_options": {"srwm": {"init": "x"}}}, r"layer_options\.srwm: \['init'\] not accepted"),
        ({"layer_options": {"deltanet": {"init": "modern"}}}, r"layer_options\.deltanet: .*not accepted by"),
        ({"layer_options": {"srwm": "modern"}}, r"layer_options\.srwm: expected a mapping"),
        ({"layer_options": {"srwm": {}, "init": "modern"}}, r"\['srwm'\] mixed with \['init'\]"),
        (
            {"layer_options": {"block": "post"}},
            r"^layer_options\.block: expected one of \['native', 'pre_ln'\], got 'post'$",
        ),
        (
            {"layer_options": {"lstm": {"block": 1}}},
            r"^layer_options\.lstm\.block: expected one of .*, got 1$",
        ),
        ({"input_init_scale": 0.0}, r"input_init_scale"),
        ({"label_init_scale": float("inf")}, r"label_init_scale"),
    ],
)
def test_bad_fields_name_the_field(kw, pattern):
    with pytest.raises(ValueError, match=pattern):
        _small(**kw)
