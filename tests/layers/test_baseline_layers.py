from __future__ import annotations

import math

import pytest
import torch

from fastweights.layers import (
    SEQUENCE_LAYERS,
    LinearAttentionLayer,
    LSTMLayer,
    SoftmaxAttentionLayer,
    make_sequence_layer,
)
from fastweights.models.backbones import Conv4
from fastweights.models.in_context import InContextClassifier

NAMES = ["linear_attention", "softmax_attention", "lstm"]
CLASSES = {
    "linear_attention": LinearAttentionLayer,
    "softmax_attention": SoftmaxAttentionLayer,
    "lstm": LSTMLayer,
}


def _layer(name):
    if name == "linear_attention":
        layer = LinearAttentionLayer(12, 3, chunk_size=4)  # several chunks and a partial last one
    else:
        layer = make_sequence_layer(name, 12, 3)
    return layer.double().eval()


def _x(b=2, t=9):
    return torch.randn(b, t, 12, dtype=torch.float64)


def _flat(state):
    return list(state) if isinstance(state, (tuple, list)) else [state]


def _leaf_state(layer, b=2, t=5):
    """A realistic carried state (from a random prefix) as leaf tensors that require gradients."""
    with torch.no_grad():
        _, s = layer(_x(b, t))
    return tuple(z.clone().requires_grad_(True) for z in s)


def _assert_states_close(a, b, atol):
    for u, w in zip(_flat(a), _flat(b), strict=True):
        torch.testing.assert_close(u, w, rtol=0, atol=atol)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("split", [1, 4, 7])
def test_carried_state_equals_one_call_with_gradients(name, split):
    layer = _layer(name)
    s0 = _leaf_state(layer)
    x = _x().requires_grad_(True)
    out, state = layer(x, s0)
    out_a, s_a = layer(x[:, :split], s0)
    out_b, s_b = layer(x[:, split:], s_a)
    out2 = torch.cat([out_a, out_b], 1)
    torch.testing.assert_close(out2, out, rtol=0, atol=1e-12)
    _assert_states_close(s_b, state, 1e-12)
    tensors = [x, *s0, *layer.parameters()]

    def loss(o, s):
        return o.square().sum() + sum(z.sum() for z in _flat(s))

    g1 = torch.autograd.grad(loss(out, state), tensors)
    g2 = torch.autograd.grad(loss(out2, s_b), tensors)
    for a, b in zip(g1, g2, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-11)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("with_state", [False, True])
def test_causal(name, with_state):
    layer = _layer(name)
    s0 = _leaf_state(layer) if with_state else None
    x = _x()
    out, _ = layer(x, s0)
    for t in (0, 3, 8):
        x2 = x.clone()
        x2[:, t] += torch.randn(2, 12, dtype=torch.float64)
        out2, _ = layer(x2, s0)
        torch.testing.assert_close(out2[:, :t], out[:, :t], rtol=0, atol=1e-13)
        assert (out2[:, t] - out[:, t]).abs().max() > 1e-6


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("with_state", [False, True])
def test_read_equals_one_step_calls(name, with_state):
    layer = _layer(name)
    state = layer(_x(t=6))[1] if with_state else None
    queries = _x(t=4)
    fast = layer.read(queries, state)
    slow = torch.cat([layer(queries[:, i : i + 1], state)[0] for i in range(4)], dim=1)
    torch.testing.assert_close(fast, slow, rtol=0, atol=1e-12)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("with_state", [False, True])
def test_forward_with_reads_equals_reads_from_intermediate_states(name, with_state):
    layer = _layer(name)
    s0 = _leaf_state(layer) if with_state else None
    x, x_read = _x(t=6), _x(t=6)
    out, out_read, fs = layer.forward_with_reads(x, x_read, s0)
    ref_out, ref_state = layer(x, s0)
    torch.testing.assert_close(out, ref_out, rtol=0, atol=1e-12)
    _assert_states_close(fs, ref_state, 1e-12)
    for t in range(6):
        st = layer(x[:, :t], s0)[1] if t else s0
        torch.testing.assert_close(
            out_read[:, t], layer(x_read[:, t : t + 1], st)[0][:, 0], rtol=0, atol=1e-12
        )
    if with_state:  # gradients reach the carried state through the reads
        g = torch.autograd.grad(out_read.sum(), s0, allow_unused=True)
        assert all(z is not None and z.abs().sum() > 0 for z in g)


def test_linear_attention_matches_normalised_formula():
    layer = _layer("linear_attention")
    x = _x(t=7)
    q, k, v = layer.projections(x)  # [B, T, H, E], feature map applied
    assert (q > 0).all() and (k > 0).all()
    scores = torch.einsum("bthe,bshe->bhts", q, k).tril()
    o = torch.einsum("bhts,bshe->bthe", scores, v) / (scores.sum(-1).transpose(1, 2)[..., None] + layer.eps)
    expected = x + layer.out_linear(o.reshape(2, 7, 12))
    out, (s, z) = layer(x)
    torch.testing.assert_close(out, expected, rtol=0, atol=1e-12)
    torch.testing.assert_close(s, torch.einsum("bthe,bthf->bhef", k, v), rtol=0, atol=1e-12)
    torch.testing.assert_close(z, k.sum(1), rtol=0, atol=1e-12)
    assert s.shape == (2, 3, 4, 4) and z.shape == (2, 3, 4)


def test_softmax_attention_matches_explicit_formula_and_cache_grows():
    layer = _layer("softmax_attention")
    x = _x(t=7)
    q, k, v = layer.projections(x)  # [B, H, T, E]
    scores = (q @ k.transpose(-1, -2)) / math.sqrt(4)
    scores = scores.masked_fill(~torch.ones(7, 7, dtype=torch.bool).tril(), float("-inf"))
    o = torch.softmax(scores, -1) @ v
    expected = x + layer.out_linear(o.transpose(1, 2).reshape(2, 7, 12))
    out, (kc, vc) = layer(x)
    torch.testing.assert_close(out, expected, rtol=0, atol=1e-12)
    assert kc.shape == vc.shape == (2, 3, 7, 4)
    _, (kc2, _) = layer(_x(t=3), (kc, vc))
    assert kc2.shape == (2, 3, 10, 4)
    torch.testing.assert_close(kc2[:, :, :7], kc, rtol=0, atol=0)


def test_lstm_state_layout_and_repeat_along_batch_dim():
    layer = _layer("lstm")
    x = _x(t=5)
    out_none, (h, c) = layer(x)
    assert h.shape == c.shape == (1, 2, 12)
    zeros = torch.zeros(1, 2, 12, dtype=torch.float64)
    out_zero, _ = layer(x, (zeros, zeros))
    torch.testing.assert_close(out_none, out_zero, rtol=0, atol=0)
    rh, rc = layer.repeat_state((h, c), 3)
    assert rh.shape == rc.shape == (1, 6, 12)
    torch.testing.assert_close(rh[:, 3:6], h[:, 1:2].expand(1, 3, 12), rtol=0, atol=0)


@pytest.mark.parametrize("name", NAMES)
def test_empty_sequence_keeps_state(name):
    layer = _layer(name)
    _, s = layer(_x(t=3))
    out, s2 = layer(_x(t=0), s)
    assert out.shape == (2, 0, 12)
    _assert_states_close(s2, s, 0)


@pytest.mark.parametrize("name", NAMES)
def test_autocast_keeps_state_float32(name):
    layer = make_sequence_layer(name, 12, 3)
    x = torch.randn(2, 5, 12)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out, s = layer(x)
        out2, s2 = layer(x, s)
    assert all(z.dtype == torch.float32 for z in _flat(s) + _flat(s2))
    assert torch.isfinite(out2).all()


@pytest.mark.parametrize("name", NAMES)
def test_registry_and_bad_inputs(name):
    assert name in SEQUENCE_LAYERS and {"srwm", "deltanet"} <= set(SEQUENCE_LAYERS)
    layer = make_sequence_layer(name, 12, 3, dropout=0.1)
    assert isinstance(layer, CLASSES[name]) and layer.dropout.p == 0.1
    with pytest.raises(ValueError, match=r"x: expected a tensor of shape \[B, T, 12\]"):
        layer(torch.randn(2, 3, 10))
    with pytest.raises(ValueError, match="x: expected a floating-point"):
        layer(torch.zeros(2, 3, 12, dtype=torch.long))
    x = torch.randn(2, 3, 12)
    _, s = layer(x)
    with pytest.raises(ValueError, match="state: expected"):
        layer(x, s[0])
    with pytest.raises(ValueError, match="state: expected"):
        layer(x[:1], s)  # batch mismatch
    with pytest.raises(ValueError, match="x_read: expected shape"):
        layer.forward_with_reads(x, x[:, :2])
    if name != "lstm":
        with pytest.raises(ValueError, match="d_model: expected a multiple of num_heads"):
            CLASSES[name](10, 3)


def test_linear_attention_nan_state_is_rejected():
    layer = make_sequence_layer("linear_attention", 12, 3)
    x = torch.randn(2, 3, 12)
    s, z = layer(x)[1]
    bad = s.clone()
    bad[0, 0, 0, 0] = float("nan")
    with pytest.raises(ValueError, match="expected finite"):
        layer(x, (bad, z))


@pytest.mark.parametrize("name", NAMES)
def test_in_context_classifier(name):
    torch.manual_seed(0)
    model = InContextClassifier(
        Conv4(1, 4, image_size=16), 3, d_model=12, num_layers=1, num_heads=3, d_ff=12, sequence_layer=name
    ).double()
    assert isinstance(model.seq_layers[0], CLASSES[name])
    x = torch.randn(2, 5, 1, 16, 16, dtype=torch.float64)
    y = torch.randint(0, 3, (2, 5))
    logits, state = model(x, y)
    assert logits.shape == (2, 5, 3) and len(state) == 1
    logits.square().sum().backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.parameters())
    model.eval()
    with torch.no_grad():
        la, s = model(x[:, :2], y[:, :2])
        lb, _ = model(x[:, 2:], y[:, 2:], s)
        torch.testing.assert_close(torch.cat([la, lb], 1), model(x, y)[0], rtol=0, atol=1e-12)
        q = torch.randn(2, 4, 1, 16, 16, dtype=torch.float64)
        fast = model.query(q, state)
        unknown = torch.full((2, 1), model.unknown_label)
        slow = torch.cat([model(q[:, i : i + 1], unknown, state)[0] for i in range(4)], dim=1)
        torch.testing.assert_close(fast, slow, rtol=0, atol=1e-12)
        feats = model.embed(x)
        _, online, _ = model.forward_features_online(feats, y)
        first = model.query_features(feats[:, :1])
        torch.testing.assert_close(online[:, :1], first, rtol=0, atol=1e-12)
