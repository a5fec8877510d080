from __future__ import annotations

import pytest
import torch

from fastweights.layers import SRWMLayer, make_sequence_layer
from fastweights.models.convert import srwm_layer_from_reference
from tests.conftest import load_golden

BLOCKS = ("W_y", "W_q", "W_k", "w_b")


def _golden_layer(fname: str) -> tuple[SRWMLayer, dict]:
    g = load_golden(f"srwm/{fname}")
    layer = SRWMLayer(32, 4).double()
    layer.load_state_dict(srwm_layer_from_reference(g["state_dict"]))
    return layer.eval(), g


@pytest.mark.parametrize("fname", ["modern_srwm_layer.pt", "acl_srwm_layer.pt"])
@pytest.mark.parametrize("case", ["L11", "L40"])
def test_golden_stateless_layer(fname, case):
    layer, g = _golden_layer(fname)
    c = g["cases"][case]
    x = c["input"].transpose(0, 1).contiguous().requires_grad_(True)  # time-major -> [B, T, D]
    out, _ = layer(x)
    torch.testing.assert_close(out.transpose(0, 1), c["output"], rtol=0, atol=1e-10)
    loss = (out.transpose(0, 1) * c["grad_out_weight"]).sum()
    loss.backward()
    torch.testing.assert_close(x.grad.transpose(0, 1), c["grad_input"], rtol=0, atol=1e-10)
    ref = srwm_layer_from_reference({k: v for k, v in c["grads"].items()})
    for name, p in layer.named_parameters():
        torch.testing.assert_close(p.grad, ref[name], rtol=0, atol=1e-10, msg=name)


@pytest.mark.parametrize("fname", ["modern_srwm_layer.pt", "acl_srwm_layer.pt"])
@pytest.mark.parametrize("sub", ["stateful_from_none", "stateful_from_state"])
def test_golden_stateful_layer(fname, sub):
    """Our state holds absolute fast weights; the reference exports a shift ``W_L - param`` (modern)
    or ``W_L - param.detach()`` (acl). Rebuilding the shift from ours must match values and the
    true gradients of both conventions."""
    layer, g = _golden_layer(fname)
    c = g["cases"]["L11"][sub]
    base = g["cases"]["L11"]
    x = base["input"].transpose(0, 1).contiguous().requires_grad_(True)
    param = layer.weight
    anchor = param.detach() if fname.startswith("acl") else param
    state_in = None
    if "state_in" in c:
        shift_in = torch.cat([c["state_in"][k] for k in BLOCKS], dim=-1).requires_grad_(True)
        state_in = shift_in + param
    out, state = layer(x, state_in)
    torch.testing.assert_close(out.transpose(0, 1), c.get("output", base["output"]), rtol=0, atol=1e-10)
    shift_out = state - anchor
    torch.testing.assert_close(
        shift_out, torch.cat([c["state_out"][k] for k in BLOCKS], -1), rtol=0, atol=1e-10
    )
    sgw = torch.cat([c["state_grad_weight"][k] for k in BLOCKS], dim=-1)
    loss = (out.transpose(0, 1) * base["grad_out_weight"]).sum() + (shift_out * sgw).sum()
    loss.backward()
    torch.testing.assert_close(x.grad.transpose(0, 1), c["grad_input"], rtol=0, atol=1e-10)
    ref = srwm_layer_from_reference(c["grads"])
    for name, p in layer.named_parameters():
        torch.testing.assert_close(p.grad, ref[name], rtol=0, atol=1e-10, msg=name)
    if state_in is not None:
        expected = torch.cat([c["grad_state_in"][k] for k in BLOCKS], dim=-1)
        torch.testing.assert_close(shift_in.grad, expected, rtol=0, atol=1e-10)


def test_residual_placement_skip_branch_is_layernorm_of_raw_input():
    layer = SRWMLayer(16, 4).double().eval()
    x = torch.randn(2, 3, 16, dtype=torch.float64)
    with torch.no_grad():
        layer.out_linear.weight.zero_()
    out, _ = layer(x)
    torch.testing.assert_close(out, layer.layer_norm(x))


def test_acl_init_statistics():
    layer = SRWMLayer(256, 16)
    e = 16
    w = layer.weight.detach()
    assert w[..., :e].std().item() == pytest.approx(0.25, rel=0.1)
    assert w[..., e : 2 * e].std().item() == pytest.approx(0.0025, rel=0.1)
    assert w[..., 2 * e : 3 * e].std().item() == pytest.approx(0.25, rel=0.1)
    assert w[..., 3 * e :].mean().abs().item() < 0.05
    modern = SRWMLayer(256, 16, init="modern").weight.detach()
    assert modern[..., e : 2 * e].std().item() == pytest.approx(0.25, rel=0.1)


@pytest.mark.parametrize("input_softmax", [False, True])
def test_read_equals_one_step_calls_and_split_calls_equal_one_call(input_softmax):
    layer = SRWMLayer(12, 3, use_input_softmax=input_softmax).double().eval()
    x = torch.randn(2, 9, 12, dtype=torch.float64)
    out, state = layer(x)
    out_a, s_a = layer(x[:, :4])
    out_b, s_b = layer(x[:, 4:], s_a)
    torch.testing.assert_close(torch.cat([out_a, out_b], 1), out)
    torch.testing.assert_close(s_b, state)
    queries = torch.randn(2, 5, 12, dtype=torch.float64)
    fast = layer.read(queries, state)
    slow = torch.cat([layer(queries[:, i : i + 1], state)[0] for i in range(5)], dim=1)
    torch.testing.assert_close(fast, slow)
    # the generic (state-expanding) read of the base class gives the same
    generic = super(SRWMLayer, layer).read(queries, state)
    torch.testing.assert_close(generic, fast)


def test_layer_bad_inputs():
    layer = SRWMLayer(12, 3)
    with pytest.raises(ValueError, match=r"x: expected a tensor of shape \[B, T, 12\]"):
        layer(torch.randn(2, 3, 10))
    with pytest.raises(ValueError, match="d_model: expected a multiple of num_heads"):
        SRWMLayer(10, 3)
    with pytest.raises(ValueError, match="sequence_layer"):
        make_sequence_layer("nope", 12, 3)
