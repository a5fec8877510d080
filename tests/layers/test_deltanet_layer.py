from __future__ import annotations

import pytest
import torch

from fastweights.layers import SEQUENCE_LAYERS, DeltaNetLayer, make_sequence_layer
from fastweights.layers.deltanet import deltanet_layer_from_reference
from fastweights.models.backbones import Conv4
from fastweights.models.in_context import InContextClassifier
from tests.conftest import load_golden


def _golden_layer() -> tuple[DeltaNetLayer, dict]:
    g = load_golden("deltanet/modern_fastff_layer.pt")
    layer = DeltaNetLayer(32, 4, chunk_size=16).double()
    layer.load_state_dict(deltanet_layer_from_reference(g["state_dict"]))
    return layer.eval(), g


@pytest.mark.parametrize("case", ["L11", "L40"])
def test_golden_layer_values_and_gradients(case):
    layer, g = _golden_layer()
    c = g["cases"][case]
    x = c["input"].transpose(0, 1).contiguous().requires_grad_(True)  # time-major [L, B, D] -> [B, L, D]
    # what reaches the recurrence: [B, L, H, E] here, [B, H, L, E] in the reference
    q, k, v, beta = layer.projections(x)
    ki = c["kernel_inputs"]
    for ours, name in ((q, "q"), (k, "k"), (v, "v")):
        torch.testing.assert_close(ours.transpose(1, 2), ki[name], rtol=0, atol=1e-12, msg=name)
    torch.testing.assert_close(beta.transpose(1, 2).unsqueeze(-1), ki["beta"], rtol=0, atol=1e-12)
    out, state = layer(x)
    torch.testing.assert_close(out.transpose(0, 1), c["output"], rtol=0, atol=1e-10)
    torch.testing.assert_close(state, c["final_fast_weight"], rtol=0, atol=1e-10)
    loss = (out.transpose(0, 1) * c["grad_out_weight"]).sum()
    torch.testing.assert_close(loss, c["loss"], rtol=1e-12, atol=1e-10)
    loss.backward()
    torch.testing.assert_close(x.grad.transpose(0, 1), c["grad_input"], rtol=0, atol=1e-10)
    ref = deltanet_layer_from_reference(c["grads"])
    for name, p in layer.named_parameters():
        torch.testing.assert_close(p.grad, ref[name], rtol=0, atol=1e-10, msg=name)


def test_golden_layer_fp32():
    layer, g = _golden_layer()
    layer = layer.float()
    c = g["cases"]["L40"]
    out, state = layer(c["input"].transpose(0, 1).float())
    assert out.dtype == torch.float32 and state.dtype == torch.float32
    torch.testing.assert_close(out.transpose(0, 1).double(), c["output"], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("split", [1, 4, 8])
def test_carried_state_equals_one_call_with_gradients(split):
    layer = DeltaNetLayer(12, 3, chunk_size=4).double()
    x = torch.randn(2, 9, 12, dtype=torch.float64, requires_grad=True)
    s0 = torch.randn(2, 3, 4, 4, dtype=torch.float64, requires_grad=True)
    out, state = layer(x, s0)
    out_a, s_a = layer(x[:, :split], s0)
    out_b, s_b = layer(x[:, split:], s_a)
    out2 = torch.cat([out_a, out_b], 1)
    torch.testing.assert_close(out2, out, rtol=0, atol=1e-12)
    torch.testing.assert_close(s_b, state, rtol=0, atol=1e-12)
    tensors = [x, s0, *layer.parameters()]
    g1 = torch.autograd.grad(out.square().sum() + state.sum(), tensors)
    g2 = torch.autograd.grad(out2.square().sum() + s_b.sum(), tensors)
    for a, b in zip(g1, g2, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-11)


def test_starts_from_zero_fast_weights_and_residual_is_pre_ln():
    layer = DeltaNetLayer(12, 3).double()
    x = torch.randn(2, 5, 12, dtype=torch.float64)
    out_none, s_none = layer(x)
    out_zero, s_zero = layer(x, torch.zeros(2, 3, 4, 4, dtype=torch.float64))
    torch.testing.assert_close(out_none, out_zero, rtol=0, atol=0)
    torch.testing.assert_close(s_none, s_zero, rtol=0, atol=0)
    with torch.no_grad():
        layer.out_linear.weight.zero_()
    torch.testing.assert_close(layer(x)[0], x, rtol=0, atol=0)  # raw input on the skip branch


def test_read_and_forward_with_reads_equal_one_step_calls():
    layer = DeltaNetLayer(12, 3).double().eval()
    x = torch.randn(2, 6, 12, dtype=torch.float64)
    _, state = layer(x)
    queries = torch.randn(2, 4, 12, dtype=torch.float64)
    fast = layer.read(queries, state)
    slow = torch.cat([layer(queries[:, i : i + 1], state)[0] for i in range(4)], dim=1)
    torch.testing.assert_close(fast, slow, rtol=0, atol=1e-12)
    x_read = torch.randn_like(x)
    out, out_read, fs = layer.forward_with_reads(x, x_read)
    torch.testing.assert_close(out, layer(x)[0], rtol=0, atol=1e-12)
    torch.testing.assert_close(fs, state, rtol=0, atol=1e-12)
    for t in range(6):
        st = layer(x[:, :t])[1] if t else None
        torch.testing.assert_close(
            out_read[:, t], layer(x_read[:, t : t + 1], st)[0][:, 0], rtol=0, atol=1e-12
        )


def _tiny_model():
    torch.manual_seed(0)
    backbone = Conv4(1, 8, image_size=16)
    return InContextClassifier(
        backbone, 3, d_model=12, num_layers=2, num_heads=3, d_ff=24, sequence_layer="deltanet"
    )


def test_in_context_classifier_with_deltanet():
    model = _tiny_model().double()
    assert all(isinstance(layer, DeltaNetLayer) for layer in model.seq_layers)
    x = torch.randn(2, 5, 1, 16, 16, dtype=torch.float64)
    y = torch.randint(0, 3, (2, 5))
    logits, state = model(x, y)
    assert logits.shape == (2, 5, 3) and len(state) == 2 and state[0].shape == (2, 3, 4, 4)
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


def test_registry_and_bad_inputs():
    assert "deltanet" in SEQUENCE_LAYERS
    layer = make_sequence_layer("deltanet", 12, 3, dropout=0.1)
    assert isinstance(layer, DeltaNetLayer) and layer.dropout.p == 0.1
    with pytest.raises(ValueError, match=r"x: expected a tensor of shape \[B, T, 12\]"):
        layer(torch.randn(2, 3, 10))
    with pytest.raises(ValueError, match="initial_state: expected shape"):
        layer(torch.randn(2, 3, 12), torch.zeros(2, 3, 4, 5))
    with pytest.raises(ValueError, match="d_model: expected a multiple of num_heads"):
        DeltaNetLayer(10, 3)
