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


def test_initial_fast_weights_equal_an_empty_call_in_values_and_gradient():
    torch.manual_seed(0)
    layer = SRWMLayer(16, 2, use_input_softmax=True, init="modern").double()
    empty = torch.zeros(3, 0, 16, dtype=torch.float64)
    w = layer.initial_fast_weights(empty)
    _, w_ref = layer(empty)
    torch.testing.assert_close(w, w_ref, rtol=0, atol=0)
    probe = torch.randn(w.shape, dtype=torch.float64)
    (g,) = torch.autograd.grad((w * probe).sum(), (layer.weight,))
    (g_ref,) = torch.autograd.grad((w_ref * probe).sum(), (layer.weight,))
    torch.testing.assert_close(g, g_ref, rtol=1e-14, atol=1e-14)


def _stretchwise(layer, x, state, reset):
    """:meth:`SRWMLayer.forward_with_resets` the plain way: one call per stretch between resets, the
    resetting sequences' weights set to the slow weights in between."""
    s0 = layer.initial_fast_weights(x)
    state = s0 if state is None else state
    t_len = x.shape[1]
    starts = [0] + [t for t in range(1, t_len) if reset[:, t].any()]
    outs = []
    for lo, hi in zip(starts, [*starts[1:], t_len], strict=True):
        state = torch.where(reset[:, lo].view(-1, 1, 1, 1), s0, state)
        out, state = layer(x[:, lo:hi], state)
        outs.append(out)
    return torch.cat(outs, dim=1), state


@pytest.mark.parametrize("impl", ["fast", "reference"])
@pytest.mark.parametrize("softmax", [True, False])
@pytest.mark.parametrize(
    "resets",
    [
        [],  # none: one plain call
        [(1, 0)],  # at the first step only
        [(0, 0), (0, 3), (2, 3), (2, 4), (1, 6), (2, 6)],  # several, two in a row, at the last step
        [(b, t) for b in range(3) for t in range(7)],  # every step
    ],
)
def test_forward_with_resets_equals_stretchwise_calls_fp64(impl, softmax, resets):
    torch.manual_seed(0)
    layer = SRWMLayer(12, 2, use_input_softmax=softmax, init="modern", impl=impl).double()
    g = torch.Generator().manual_seed(1)
    x = torch.randn(3, 7, 12, generator=g, dtype=torch.float64, requires_grad=True)
    state = layer.initial_fast_weights(x) + 0.1 * torch.randn(3, 2, 6, 22, generator=g, dtype=torch.float64)
    state = state.detach().requires_grad_()
    reset = torch.zeros(3, 7, dtype=torch.bool)
    for b, t in resets:
        reset[b, t] = True
    probe = torch.randn(3, 7, 12, generator=g, dtype=torch.float64)
    results = []
    for run in (layer.forward_with_resets, lambda *a: _stretchwise(layer, *a)):
        out, final = run(x, state, reset)
        loss = (out * probe).sum() + final.square().sum()
        inputs = (x, state, layer.weight, layer.out_linear.weight)
        # no reset and a given state: the slow weights are not used (a zero gradient)
        grads = torch.autograd.grad(loss, inputs, allow_unused=True, materialize_grads=True)
        results.append((out, final, grads))
    (out, final, grads), (out_r, final_r, grads_r) = results
    torch.testing.assert_close(out, out_r, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(final, final_r, rtol=1e-12, atol=1e-12)
    for gr, gr_r in zip(grads, grads_r, strict=True):
        torch.testing.assert_close(gr, gr_r, rtol=1e-11, atol=1e-11)


def test_forward_with_resets_float32_and_from_the_slow_weights():
    torch.manual_seed(0)
    layer = SRWMLayer(16, 2, use_input_softmax=True, init="modern")
    x = torch.randn(4, 9, 16)
    reset = torch.zeros(4, 9, dtype=torch.bool)
    reset[1, 4] = reset[3, 2] = reset[3, 8] = True
    out, final = layer.forward_with_resets(x, None, reset)
    out_r, final_r = _stretchwise(layer, x, None, reset)
    torch.testing.assert_close(out, out_r, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(final, final_r, rtol=1e-5, atol=1e-6)
    empty, state = layer.forward_with_resets(x[:, :0], None, reset[:, :0])
    assert empty.shape == (4, 0, 16)
    torch.testing.assert_close(state, layer.initial_fast_weights(x), rtol=0, atol=0)


def test_forward_with_resets_rejects_a_bad_reset():
    layer = SRWMLayer(8, 2)
    x = torch.randn(2, 3, 8)
    for bad in (torch.zeros(2, 3), torch.zeros(3, 2, dtype=torch.bool), [[False] * 3] * 2):
        with pytest.raises(ValueError, match=r"reset: expected a bool tensor of shape \[B, T\] = \[2, 3\]"):
            layer.forward_with_resets(x, None, bad)
    with pytest.raises(ValueError, match=r"x: expected finite values"):
        layer.forward_with_resets(
            torch.full((2, 3, 8), float("nan")), None, torch.zeros(2, 3, dtype=torch.bool)
        )
