from __future__ import annotations

import pytest
import torch
from torch.func import functional_call

from fastweights.layers import SEQUENCE_LAYERS, SRDeltaNetLayer, make_sequence_layer
from fastweights.models.backbones import Conv4
from fastweights.models.in_context import InContextClassifier
from fastweights.ops import delta_rule_reference, srwm_reference

F64 = torch.float64
D, H, E = 12, 3, 4  # C = (3E+1) + 2E + 4 = 25 SRWM columns per head


def _layer(chunk_size: int = 16) -> SRDeltaNetLayer:
    return SRDeltaNetLayer(D, H, chunk_size=chunk_size).double().eval()


def _state(b: int = 2):
    return (
        torch.randn(b, H, E, 5 * E + 5, dtype=F64) / E**0.5,
        torch.randn(b, H, E, E, dtype=F64) * 0.3,
    )


def _reference_layer(layer: SRDeltaNetLayer, x, state=None):
    """The whole layer one step at a time, from the per-step reference ops."""
    b, t, _ = x.shape
    s_srwm, s_delta = state if state is not None else (None, None)
    outs = []
    for i in range(t):
        x_t = x[:, i : i + 1]
        a = torch.softmax(x_t.reshape(b, 1, H, E), dim=-1)  # input softmax per head
        p, s_srwm = srwm_reference(
            a, layer.weight, initial_state=s_srwm, output_final_state=True, d_out=3 * E + 1
        )
        q, k, v, logit = p.split([E, E, E, 1], dim=-1)
        q, k, beta = torch.softmax(q, -1), torch.softmax(k, -1), torch.sigmoid(logit[..., 0])
        o, s_delta = delta_rule_reference(q, k, v, beta, initial_state=s_delta, output_final_state=True)
        outs.append(x_t + layer.out_linear(o.reshape(b, 1, D)))  # plain residual, no LayerNorm
    return torch.cat(outs, dim=1), (s_srwm, s_delta)


def _loss(out, state, g_out, g_state):
    return (out * g_out).sum() + sum((s * g).sum() for s, g in zip(state, g_state, strict=True))


@pytest.mark.parametrize("t", [1, 15, 16, 17, 37, 64])
@pytest.mark.parametrize("with_state", [False, True])
def test_layer_equals_per_step_reference_fp64(t, with_state):
    layer = _layer(chunk_size=16)
    x = torch.randn(2, t, D, dtype=F64, requires_grad=True)
    s0 = tuple(s.requires_grad_(True) for s in _state()) if with_state else None
    g_out = torch.randn(2, t, D, dtype=F64)
    g_state = (torch.randn(2, H, E, 5 * E + 5, dtype=F64), torch.randn(2, H, E, E, dtype=F64))
    # with an initial state the slow SRWM weights are not read (the state holds absolute fast weights)
    params = [layer.out_linear.weight] if with_state else list(layer.parameters())
    leaves = [x, *params, *(s0 or ())]
    results = []
    for fn in (layer, lambda x, s: _reference_layer(layer, x, s)):
        out, state = fn(x, s0)
        grads = torch.autograd.grad(_loss(out, state, g_out, g_state), leaves)
        results.append((out, state, grads))
    (out, state, grads), (ref_out, ref_state, ref_grads) = results
    assert state[0].shape == (2, H, E, 5 * E + 5) and state[1].shape == (2, H, E, E)
    torch.testing.assert_close(out, ref_out, rtol=1e-10, atol=1e-10)
    for a, b in zip(state, ref_state, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10)
    for a, b in zip(grads, ref_grads, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("split", [1, 7, 16, 22])
@pytest.mark.parametrize("with_state", [False, True])
def test_carried_state_equals_one_call_with_gradients(split, with_state):
    layer = _layer(chunk_size=8)
    x = torch.randn(2, 23, D, dtype=F64, requires_grad=True)
    s0 = tuple(s.requires_grad_(True) for s in _state()) if with_state else None
    out, state = layer(x, s0)
    out_a, s_a = layer(x[:, :split], s0)
    out_b, s_b = layer(x[:, split:], s_a)
    out2 = torch.cat([out_a, out_b], dim=1)
    torch.testing.assert_close(out2, out, rtol=0, atol=1e-12)
    for a, b in zip(s_b, state, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-12)
    # with an initial state the slow weights are not read
    leaves = [x, *s0, layer.out_linear.weight] if with_state else [x, *layer.parameters()]
    g1 = torch.autograd.grad(out.square().sum() + state[0].sum() + state[1].sum(), leaves)
    g2 = torch.autograd.grad(out2.square().sum() + s_b[0].sum() + s_b[1].sum(), leaves)
    for a, b in zip(g1, g2, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-11)


def test_gradcheck_tiny_fp64():
    layer = SRDeltaNetLayer(4, 2, chunk_size=2).double()
    e = 2
    x = torch.randn(1, 3, 4, dtype=F64, requires_grad=True)
    s_srwm = (torch.randn(1, 2, e, 5 * e + 5, dtype=F64) / e**0.5).requires_grad_(True)
    s_delta = (torch.randn(1, 2, e, e, dtype=F64) * 0.3).requires_grad_(True)
    w = layer.weight.detach().clone().requires_grad_(True)
    w_out = layer.out_linear.weight.detach().clone().requires_grad_(True)

    def fn(x, s_srwm, s_delta, w, w_out):
        params = {"weight": w, "out_linear.weight": w_out}
        out, (a, b) = functional_call(layer, params, (x, (s_srwm, s_delta)))
        return out, a, b

    assert torch.autograd.gradcheck(fn, (x, s_srwm, s_delta, w, w_out), eps=1e-6, atol=1e-7)


def test_starts_from_slow_weights_and_zero_fast_weights_and_modifies_itself():
    layer = _layer()
    x = torch.randn(2, 5, D, dtype=F64)
    out_none, s_none = layer(x)
    start = (layer.weight.detach().expand(2, H, E, 5 * E + 5), torch.zeros(2, H, E, E, dtype=F64))
    out_explicit, s_explicit = layer(x, start)
    torch.testing.assert_close(out_none, out_explicit, rtol=0, atol=0)
    for a, b in zip(s_none, s_explicit, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    assert not torch.allclose(s_none[0], start[0])  # the projection rewrote itself
    assert s_none[1].abs().max() > 0  # and the DeltaNet wrote its fast weights


def test_structure_init_and_plain_residual():
    layer = SRDeltaNetLayer(256, 16)
    assert layer.weight.shape == (16, 16, 5 * 16 + 5) and layer.num_columns == 85
    assert layer.out_linear.bias is None
    assert not any(isinstance(m, torch.nn.LayerNorm) for m in layer.modules())
    assert layer.weight.detach().std().item() == pytest.approx(0.25, rel=0.05)  # 1/sqrt(E), all blocks
    assert layer.weight.detach()[..., -4:].mean().abs().item() < 0.05
    small = _layer()
    x = torch.randn(2, 4, D, dtype=F64)
    with torch.no_grad():
        small.out_linear.weight.zero_()
    torch.testing.assert_close(small(x)[0], x, rtol=0, atol=0)  # raw input on the skip branch


def test_read_and_forward_with_reads_equal_one_step_calls():
    layer = _layer()
    x = torch.randn(2, 6, D, dtype=F64)
    _, state = layer(x)
    queries = torch.randn(2, 4, D, dtype=F64)
    for s in (state, None):
        fast = layer.read(queries, s)
        slow = torch.cat([layer(queries[:, i : i + 1], s)[0] for i in range(4)], dim=1)
        torch.testing.assert_close(fast, slow, rtol=0, atol=1e-12)
    generic = super(SRDeltaNetLayer, layer).read(queries, state)  # expands the state per query
    torch.testing.assert_close(layer.read(queries, state), generic, rtol=0, atol=1e-12)
    x_read = torch.randn_like(x)
    out, out_read, fs = layer.forward_with_reads(x, x_read)
    torch.testing.assert_close(out, layer(x)[0], rtol=0, atol=1e-12)
    for a, b in zip(fs, state, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-12)
    for t in range(6):
        st = layer(x[:, :t])[1] if t else None
        torch.testing.assert_close(
            out_read[:, t], layer(x_read[:, t : t + 1], st)[0][:, 0], rtol=0, atol=1e-12
        )


def test_autocast_and_half_precision_keep_states_float32():
    layer = SRDeltaNetLayer(D, H, chunk_size=4).eval()
    x = torch.randn(2, 11, D)
    ref_out, ref_state = layer(x)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out_a, s_a = layer(x[:, :6])
        out_b, s_b = layer(x[:, 6:], s_a)
    for s in (*s_a, *s_b):
        assert s.dtype == torch.float32
    torch.testing.assert_close(torch.cat([out_a, out_b], 1).float(), ref_out, rtol=0.05, atol=0.05)
    for a, b in zip(s_b, ref_state, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-2, atol=1e-2)  # only the output projection was bf16
    half = layer.to(torch.bfloat16)
    out_h, s_h = half(x.bfloat16())
    assert out_h.dtype == torch.bfloat16 and all(s.dtype == torch.float32 for s in s_h)
    out_h2, _ = half(x.bfloat16(), s_h)  # a float32 state continues a bfloat16 layer
    assert torch.isfinite(out_h2.float()).all()


def test_bad_inputs_raise_value_error_naming_the_argument():
    layer = _layer()
    x = torch.randn(2, 5, D, dtype=F64)
    with pytest.raises(ValueError, match=r"x: expected a tensor of shape \[B, T, 12\]"):
        layer(x[0])  # wrong rank
    with pytest.raises(ValueError, match=r"x: expected a tensor of shape \[B, T, 12\]"):
        layer(torch.randn(2, 5, D + 1, dtype=F64))
    with pytest.raises(ValueError, match="x: expected a floating-point dtype"):
        layer(x.long())
    with pytest.raises(ValueError, match="state: expected None or a pair"):
        layer(x, torch.zeros(2, H, E, E, dtype=F64))
    s_srwm, s_delta = _state()
    with pytest.raises(ValueError, match="state: expected None or a pair"):
        layer(x, (s_srwm,))
    with pytest.raises(ValueError, match=r"state\[0\]: expected a float tensor of shape \[2, 3, 4, 25\]"):
        layer(x, (s_srwm[..., :-1], s_delta))
    with pytest.raises(ValueError, match=r"state\[1\]: expected a float tensor of shape \[2, 3, 4, 4\]"):
        layer(x, (s_srwm, s_delta[:1]))
    with pytest.raises(ValueError, match=r"state\[1\]: expected a float tensor"):
        layer(x, (s_srwm, s_delta.long()))
    with pytest.raises(ValueError, match=r"state\[0\]"):
        layer.read(x, (s_srwm[:1], s_delta))
    with pytest.raises(ValueError, match="d_model: expected a multiple of num_heads"):
        SRDeltaNetLayer(10, 3)


def test_registry_and_in_context_classifier():
    assert "sr_deltanet" in SEQUENCE_LAYERS
    layer = make_sequence_layer("sr_deltanet", 12, 3, dropout=0.1)
    assert isinstance(layer, SRDeltaNetLayer) and layer.dropout.p == 0.1
    torch.manual_seed(0)
    model = InContextClassifier(
        Conv4(1, 8, image_size=16),
        3,
        d_model=12,
        num_layers=2,
        num_heads=3,
        d_ff=24,
        sequence_layer="sr_deltanet",
    ).double()
    assert all(isinstance(m, SRDeltaNetLayer) for m in model.seq_layers)
    x = torch.randn(2, 5, 1, 16, 16, dtype=F64)
    y = torch.randint(0, 3, (2, 5))
    logits, state = model(x, y)
    assert logits.shape == (2, 5, 3) and len(state) == 2 and state[0][1].shape == (2, 3, 4, 4)
    logits.square().sum().backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.parameters())
    model.eval()
    with torch.no_grad():
        la, s = model(x[:, :2], y[:, :2])
        lb, _ = model(x[:, 2:], y[:, 2:], s)
        torch.testing.assert_close(torch.cat([la, lb], 1), model(x, y)[0], rtol=0, atol=1e-12)
        q = torch.randn(2, 4, 1, 16, 16, dtype=F64)
        unknown = torch.full((2, 1), model.unknown_label)
        slow = torch.cat([model(q[:, i : i + 1], unknown, state)[0] for i in range(4)], dim=1)
        torch.testing.assert_close(model.query(q, state), slow, rtol=0, atol=1e-12)


def test_qk_init_scale_scales_only_the_query_and_key_columns():
    torch.manual_seed(3)
    base = SRDeltaNetLayer(D, H)
    torch.manual_seed(3)
    scaled = SRDeltaNetLayer(D, H, qk_init_scale=30.0)
    assert torch.equal(scaled.weight[..., : 2 * E], 30.0 * base.weight[..., : 2 * E])
    assert torch.equal(scaled.weight[..., 2 * E :], base.weight[..., 2 * E :])
    torch.manual_seed(3)
    assert torch.equal(SRDeltaNetLayer(D, H, qk_init_scale=1.0).weight, base.weight)


def test_qk_init_scale_spreads_the_initial_keys():
    """At the reference scale the DeltaNet keys of different steps start almost equal (the reason
    the layer stays at chance in ACL); a larger scale makes them differ."""

    def mean_key_cosine(layer: SRDeltaNetLayer, x: torch.Tensor) -> float:
        k = torch.nn.functional.normalize(layer.projections(x)[1], dim=-1)
        cos = torch.einsum("bthe,bshe->bhts", k, k)
        return float(cos[..., ~torch.eye(x.shape[1], dtype=torch.bool)].mean())

    d, h = 64, 4
    x = torch.randn(2, 9, d, generator=torch.Generator().manual_seed(0)) * 0.5
    torch.manual_seed(0)
    plain = mean_key_cosine(SRDeltaNetLayer(d, h), x)
    torch.manual_seed(0)
    spread = mean_key_cosine(SRDeltaNetLayer(d, h, qk_init_scale=30.0), x)
    assert plain > 0.99 and spread < plain - 0.05


@pytest.mark.parametrize("bad", [0, -1.0, float("nan"), "x"])
def test_qk_init_scale_bad_values_are_named(bad):
    with pytest.raises(ValueError, match="qk_init_scale"):
        SRDeltaNetLayer(D, H, qk_init_scale=bad)


def test_projections_are_what_the_delta_rule_reads():
    """``projections`` equals the per-step reference's SRWM outputs (carried state, odd length)."""
    layer = _layer()
    x = torch.randn(2, 7, D, dtype=F64)
    state = _state()
    q, k, v, beta = layer.projections(x, state)
    p, _ = srwm_reference(
        torch.softmax(x.reshape(2, 7, H, E), dim=-1), layer.weight, initial_state=state[0], d_out=3 * E + 1
    )
    rq, rk, rv, rl = p.split([E, E, E, 1], dim=-1)
    torch.testing.assert_close(q, torch.softmax(rq, -1))
    torch.testing.assert_close(k, torch.softmax(rk, -1))
    torch.testing.assert_close(v, rv)
    torch.testing.assert_close(beta, torch.sigmoid(rl[..., 0]))
