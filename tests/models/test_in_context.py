from __future__ import annotations

import pytest
import torch

from fastweights.layers import SEQUENCE_LAYERS
from fastweights.models.backbones import Conv4, FeatureInput
from fastweights.models.convert import in_context_from_reference
from fastweights.models.in_context import InContextClassifier
from tests.conftest import load_golden


def _golden_model():
    g = load_golden("conv4/acl_compat_stateful_conv_srwm.pt")
    model = InContextClassifier(Conv4(in_channels=3), 5, d_model=32, num_layers=2, num_heads=4, d_ff=64)
    model = model.double().eval()
    model.load_state_dict(in_context_from_reference(g["state_dict"], num_layers=2))
    return model, g


def _bt(t):  # time-major [L, B, ...] -> batch-major [B, L, ...]
    return t.transpose(0, 1).contiguous()


def test_golden_conv4_srwm_model_values_and_gradients():
    model, g = _golden_model()
    inp, outp = g["inputs"], g["outputs"]
    xs, xq = _bt(inp["x_support"]).requires_grad_(True), _bt(inp["x_query"]).requires_grad_(True)
    logits_s, state = model(xs, _bt(inp["fb_support"]))
    torch.testing.assert_close(_bt(logits_s), outp["logits_support"], rtol=0, atol=1e-10)
    # the reference exports W_L - param.detach() and re-imports it as shift + param: emulate that
    # straight-through path to compare with its true gradients
    params = [layer.weight for layer in model.seq_layers]
    carried = tuple(s - p.detach() + p for s, p in zip(state, params, strict=True))
    logits_q, _ = model(xq, _bt(inp["fb_query"]), carried)
    torch.testing.assert_close(_bt(logits_q), outp["logits_query"], rtol=0, atol=1e-10)
    # the query is a read-only step: the batched query path gives the same logits
    torch.testing.assert_close(model.query(xq, state), logits_q, rtol=0, atol=1e-12)
    one_call, _ = model(torch.cat([xs, xq], 1), torch.cat([_bt(inp["fb_support"]), _bt(inp["fb_query"])], 1))
    torch.testing.assert_close(_bt(one_call), outp["logits_one_call"], rtol=0, atol=1e-10)
    for i, key in enumerate(("W_y", "W_q", "W_k", "w_b")):
        e = 8
        cols = slice(i * e, (i + 1) * e) if i < 3 else slice(3 * e, None)
        for layer in range(2):
            expected = (
                outp["state_after_support"][f"{key}.{layer}"] + model.seq_layers[layer].weight[..., cols]
            )
            torch.testing.assert_close(state[layer][..., cols], expected, rtol=0, atol=1e-10)
    gw = g["grad_weights"]
    loss = (_bt(logits_s) * gw["logits_support"]).sum() + (_bt(logits_q) * gw["logits_query"]).sum()
    loss.backward()
    torch.testing.assert_close(_bt(xs.grad), g["grad_x_support"], rtol=0, atol=1e-10)
    torch.testing.assert_close(_bt(xq.grad), g["grad_x_query"], rtol=0, atol=1e-10)
    ref = in_context_from_reference(g["grads"], num_layers=2)
    for name, p in model.named_parameters():
        # conv biases have an exactly zero true gradient (InstanceNorm removes them): absolute check
        torch.testing.assert_close(p.grad, ref[name], rtol=0, atol=1e-10, msg=name)


def _tiny_model(**kw):
    torch.manual_seed(0)
    return InContextClassifier(
        Conv4(1, 8, image_size=16), 3, d_model=12, num_layers=2, num_heads=3, d_ff=24, **kw
    )


def test_state_carried_across_calls_equals_one_call_with_gradients():
    model = _tiny_model().double().eval()
    x = torch.randn(2, 7, 1, 16, 16, dtype=torch.float64)
    y = torch.randint(0, 4, (2, 7))
    logits, _ = model(x, y)
    la, s = model(x[:, :3], y[:, :3])
    lb, _ = model(x[:, 3:], y[:, 3:], s)
    torch.testing.assert_close(torch.cat([la, lb], 1), logits)
    g1 = torch.autograd.grad(logits.square().sum(), list(model.parameters()))
    g2 = torch.autograd.grad(torch.cat([la, lb], 1).square().sum(), list(model.parameters()))
    for a, b in zip(g1, g2, strict=True):
        torch.testing.assert_close(a, b)


def test_query_equals_separate_one_step_calls():
    model = _tiny_model().double().eval()
    x = torch.randn(2, 5, 1, 16, 16, dtype=torch.float64)
    _, state = model(x, torch.randint(0, 3, (2, 5)))
    q = torch.randn(2, 4, 1, 16, 16, dtype=torch.float64)
    fast = model.query(q, state)
    unknown = torch.full((2, 1), model.unknown_label)
    slow = torch.cat([model(q[:, i : i + 1], unknown, state)[0] for i in range(4)], dim=1)
    torch.testing.assert_close(fast, slow)


def test_model_bad_inputs():
    model = _tiny_model()
    x = torch.randn(2, 5, 1, 16, 16)
    with pytest.raises(ValueError, match=r"labels: expected values in \[0, 3\]"):
        model(x, torch.full((2, 5), 4))
    with pytest.raises(ValueError, match="labels: expected an integer tensor"):
        model(x, torch.zeros(2, 5))
    with pytest.raises(ValueError, match="images: expected a 5-D"):
        model(x[0], torch.zeros(2, 5, dtype=torch.long))
    with pytest.raises(ValueError, match="images: expected shape"):
        model(torch.randn(2, 5, 3, 16, 16), torch.zeros(2, 5, dtype=torch.long))


@pytest.mark.parametrize("norm", ["instance", "batch", "none"])
@pytest.mark.parametrize("pool_before_norm", [False, True])
def test_conv4_shapes(norm, pool_before_norm):
    net = Conv4(1, 32, image_size=32, norm=norm, pool_before_norm=pool_before_norm)
    assert net(torch.randn(3, 1, 32, 32)).shape == (3, 128) and net.feature_dim == 128
    with pytest.raises(ValueError, match="image_size"):
        Conv4(image_size=30)


def test_online_predictions_equal_queries_from_intermediate_states():
    model = _tiny_model().double().eval()
    x = torch.randn(2, 6, 1, 16, 16, dtype=torch.float64)
    y = torch.randint(0, 3, (2, 6))
    feats = model.embed(x)
    logits, online, state = model.forward_features_online(feats, y)
    ref_logits, ref_state = model.forward_features(feats, y)
    torch.testing.assert_close(logits, ref_logits)
    for a, b in zip(state, ref_state, strict=True):
        torch.testing.assert_close(a, b)
    for t in range(6):
        st = model.forward_features(feats[:, :t], y[:, :t])[1] if t else None
        torch.testing.assert_close(online[:, t], model.query_features(feats[:, t : t + 1], st)[:, 0])
    # the generic (step-by-step) implementation of the base class agrees with the fused SRWM one
    from fastweights.layers.base import SequenceLayer

    layer = model.seq_layers[0]
    h, h_read = torch.randn(2, 5, 12, dtype=torch.float64), torch.randn(2, 5, 12, dtype=torch.float64)
    fused = layer.forward_with_reads(h, h_read)
    generic = SequenceLayer.forward_with_reads(layer, h, h_read)
    for a, b in zip(fused, generic, strict=True):
        torch.testing.assert_close(a, b)


def test_conv4_bad_arguments_and_images_raise_value_error_naming_them():
    for kwargs, message in (
        ({"in_channels": 0}, "in_channels: expected an int >= 1, got 0"),
        ({"channels": 0}, "channels: expected an int >= 1, got 0"),
        ({"image_size": 0}, "image_size: expected an int >= 1, got 0"),
        ({"image_size": 24}, "image_size: expected a multiple of 16, got 24"),
        ({"norm": "layer"}, "norm: expected 'instance', 'batch' or 'none', got 'layer'"),
    ):
        with pytest.raises(ValueError, match=f"^{message}$"):
            Conv4(**kwargs)
    net = Conv4(3, 8, image_size=16)
    shape = (
        r"images: expected shape \[N, in_channels, S, S\] = \[N, 3, 16, 16\] \(in_channels=3, image_size=16\)"
    )
    for images in (torch.randn(2, 1, 16, 16), torch.randn(2, 3, 32, 32), torch.randn(3, 16, 16), [0.0]):
        with pytest.raises(ValueError, match=f"^{shape}, got "):
            net(images)
    with pytest.raises(ValueError, match="^images: expected a floating-point dtype, got torch.uint8"):
        net(torch.zeros(2, 3, 16, 16, dtype=torch.uint8))
    with pytest.raises(
        ValueError, match=r"^images: expected dtype torch.float32 \(the dtype of the backbone's"
    ):
        net(torch.randn(2, 3, 16, 16, dtype=torch.float64))
    bad = torch.randn(2, 3, 16, 16)
    bad[1, 2, 3, 4] = float("nan")
    with pytest.raises(ValueError, match="^images: expected finite values"):
        net(bad)


@pytest.mark.parametrize("norm", ["instance", "batch", "none"])
def test_conv4_empty_batch_gives_empty_features(norm):
    net = Conv4(1, 8, image_size=16, norm=norm)
    out = net(torch.randn(0, 1, 16, 16))
    assert out.shape == (0, net.feature_dim) and out.dtype == torch.float32


def test_model_state_of_the_wrong_length_or_type_names_state():
    model = _tiny_model().double().eval()
    x = torch.randn(2, 3, 1, 16, 16, dtype=torch.float64)
    y = torch.randint(0, 3, (2, 3))
    _, state = model(x, y)
    message = r"^state: expected None or a tuple of 2 per-layer states \(one per sequence layer"
    for bad, got in (
        (state[:1], "a tuple of length 1"),
        (state * 2, "a tuple of length 4"),
        (state[0], "tensor"),
    ):
        with pytest.raises(ValueError, match=f"{message}.*got {got}"):
            model(x, y, bad)
        with pytest.raises(ValueError, match=message):
            model.query(x, bad)
        with pytest.raises(ValueError, match=message):
            model.forward_features_online(model.embed(x), y, bad)
    logits, _ = model(x, y, list(state))  # a list of the right length is accepted
    assert logits.shape == (2, 3, 3)


def test_model_input_dtype_and_feature_errors():
    model = _tiny_model()
    x = torch.randn(2, 3, 1, 16, 16, dtype=torch.float64)
    y = torch.randint(0, 3, (2, 3))
    message = (
        r"^images: expected dtype torch.float32 \(the dtype of the model's parameters\), got torch.float64"
    )
    with pytest.raises(ValueError, match=message + r"; convert the model \(model.double\(\)\)"):
        model(x, y)
    with pytest.raises(ValueError, match=message):
        model.query(x)
    feats = model.embed(x.float())
    with pytest.raises(ValueError, match=r"^features: expected dtype torch.float32"):
        model.forward_features(feats.double(), y)
    with pytest.raises(ValueError, match=r"^features: expected a tensor of shape \[B, T, 8\]"):
        model.query_features(feats[..., :-1])
    with pytest.raises(ValueError, match="^labels: expected an integer tensor of shape"):
        model.forward_features(feats, [0, 1, 2])
    assert model.double()(x, y)[0].dtype == torch.float64


def _states_equal(a, b):
    if isinstance(a, torch.Tensor):
        torch.testing.assert_close(a, b.to(a.dtype), rtol=0, atol=0)
    elif isinstance(a, dict):
        assert a.keys() == b.keys()
        for k in a:
            _states_equal(a[k], b[k])
    elif isinstance(a, (tuple, list)):
        assert len(a) == len(b)
        for u, v in zip(a, b, strict=True):
            _states_equal(u, v)
    else:
        assert a == b


@pytest.mark.parametrize("name", SEQUENCE_LAYERS)
def test_empty_sequences_and_batches_give_empty_logits_and_keep_the_state(name):
    """``T = 0`` / ``B = 0`` through forward, query and the online path, as the layers handle ``T = 0``."""
    model = _tiny_model(sequence_layer=name).double().eval()
    x = torch.randn(2, 4, 1, 16, 16, dtype=torch.float64)
    y = torch.randint(0, 3, (2, 4))
    with torch.no_grad():
        _, state = model(x, y)
        empty = torch.zeros(2, 0, 12, dtype=torch.float64)
        initial = tuple(layer(empty)[1] for layer in model.seq_layers)  # each layer's own T = 0 state
        for s in (None, state):
            logits, new_state = model(x[:, :0], y[:, :0], s)
            assert logits.shape == (2, 0, 3)
            _states_equal(new_state, initial if s is None else s)
            assert model.query(x[:, :0], s).shape == (2, 0, 3)
            logits, online, new_state = model.forward_features_online(model.embed(x[:, :0]), y[:, :0], s)
            assert logits.shape == online.shape == (2, 0, 3)
            _states_equal(new_state, initial if s is None else s)
        logits, _ = model(x[:0], y[:0])
        assert logits.shape == (0, 4, 3)
        assert model.query(x[:0]).shape == (0, 4, 3)
        logits, online, _ = model.forward_features_online(model.embed(x[:0]), y[:0])
        assert logits.shape == online.shape == (0, 4, 3)


def test_label_init_scale_scales_only_the_label_columns():
    torch.manual_seed(0)
    base = InContextClassifier(FeatureInput(8), 3, d_model=16, num_heads=4)
    torch.manual_seed(0)
    scaled = InContextClassifier(FeatureInput(8), 3, d_model=16, num_heads=4, label_init_scale=4.0)
    f = 8
    w, v = base.input_proj.weight, scaled.input_proj.weight
    assert torch.equal(w[:, :f], v[:, :f]) and torch.equal(base.input_proj.bias, scaled.input_proj.bias)
    torch.testing.assert_close(v[:, f:], 4.0 * w[:, f:], rtol=0, atol=0)
    for a, b in zip(base.seq_layers.parameters(), scaled.seq_layers.parameters(), strict=True):
        assert torch.equal(a, b)  # the same random stream for everything else


@pytest.mark.parametrize("bad", [0, -1.0, float("nan"), "big"])
def test_label_init_scale_must_be_positive(bad):
    with pytest.raises(ValueError, match="label_init_scale"):
        InContextClassifier(FeatureInput(8), 3, d_model=16, num_heads=4, label_init_scale=bad)


def test_feature_input_passes_features_through_and_checks_its_size():
    x = torch.randn(4, 8)
    assert FeatureInput(8)(x) is x and FeatureInput(8).feature_dim == 8
    for bad in (0, 2.5, "8"):
        with pytest.raises(ValueError, match="feature_dim"):
            FeatureInput(bad)
