from __future__ import annotations

import pytest
import torch

from fastweights.layers import SEQUENCE_LAYERS, TTTLinearLayer, TTTMLPLayer, make_sequence_layer
from fastweights.layers.ttt import rope_tables
from fastweights.ops.ttt import ttt_current_weights
from tests.conftest import load_golden

FILES = ["linear_T", "mlp_T", "linear_M", "mlp_M"]


def _golden_layer(name):
    d = load_golden(f"ttt/ttt_{name}.pt")
    mamba = name.endswith("M")
    cls = TTTLinearLayer if name.startswith("linear") else TTTMLPLayer
    layer = cls(64, 4, share_qk=mamba, use_gate=mamba).double()
    layer.load_state_dict(d["state_dict"])  # strict: parameter names equal the reference keys
    return layer, d


@pytest.mark.parametrize("name", FILES)
def test_rope_tables_are_the_reference_fp32_tables(name):
    d = load_golden(f"ttt/ttt_{name}.pt")
    cos, sin = rope_tables(16, 16)
    assert torch.equal(cos, d["rope_cos_fp32"]) and torch.equal(sin, d["rope_sin_fp32"])


@pytest.mark.parametrize("case", ["L16", "L37", "L64"])
@pytest.mark.parametrize("name", FILES)
def test_golden_outputs_gradients_and_final_state(name, case):
    layer, d = _golden_layer(name)
    c = d["cases"][case]
    x = c["hidden_states"].clone().requires_grad_(True)
    y, state = layer(x)
    torch.testing.assert_close(y, c["output"], rtol=0, atol=1e-13)
    loss = (y * c["grad_out_weight"]).sum()
    names = [n for n, _ in layer.named_parameters()]
    assert set(names) == set(c["grads"])
    grads = torch.autograd.grad(loss, [x, *layer.parameters()])
    torch.testing.assert_close(grads[0], c["grad_input"], rtol=0, atol=1e-12)
    for n, g in zip(names, grads[1:], strict=True):
        ref = c["grads"][n]
        torch.testing.assert_close(g, ref, rtol=0, atol=1e-12 * max(1.0, float(ref.abs().max())))
    current = ttt_current_weights(state, layer.token_scale(torch.float64))
    for key, ref in c["final_ttt_state"].items():
        torch.testing.assert_close(current[key.removesuffix("_states")], ref, rtol=0, atol=1e-14)


@pytest.mark.parametrize("name", FILES)
def test_golden_decode_prefill_21_then_single_tokens(name):
    layer, d = _golden_layer(name)
    c = d["cases"]["L37"]
    dec, x = c["decode"], c["hidden_states"]
    n = int(dec["prefill_len"])
    with torch.no_grad():
        y, st = layer(x[:, :n])
        torch.testing.assert_close(y, dec["prefill_output"], rtol=0, atol=1e-13)
        for key, ref in dec["cache_after_prefill"].items():
            if key in st:
                torch.testing.assert_close(st[key], ref, rtol=0, atol=1e-14)
        outs = []
        for t in range(n, x.shape[1]):
            o, st = layer(x[:, t : t + 1], st)
            outs.append(o)
    torch.testing.assert_close(torch.cat(outs, 1), dec["decode_outputs"], rtol=0, atol=1e-13)
    final = dec["cache_final"]
    for key in ("W1_states", "W1_grad", "b1_states", "b1_grad"):
        torch.testing.assert_close(st[key], final[key], rtol=0, atol=1e-14)
    if name.endswith("M"):
        # one shared q/k projection feeds both convs: both reference conv states equal ours
        torch.testing.assert_close(st["conv_qk"], final["conv_state.ttt_conv_q"], rtol=0, atol=0)
        torch.testing.assert_close(st["conv_qk"], final["conv_state.ttt_conv_k"], rtol=0, atol=0)


def _small(cls, mamba, residual=False):
    layer = cls(8, 2, mini_batch_size=4, share_qk=mamba, use_gate=mamba, residual=residual).double()
    with torch.no_grad():
        for p in layer.parameters():
            p.add_(0.05 * torch.randn_like(p))
    return layer


@pytest.mark.parametrize("mamba", [False, True])
@pytest.mark.parametrize("cls", [TTTLinearLayer, TTTMLPLayer])
@pytest.mark.parametrize("k", [0, 1, 3, 4, 5])  # mini-batch 4: the {0, 1, 15, 16, 17} pattern of b=16
def test_prefill_then_decode_equals_full_forward(cls, mamba, k):
    layer = _small(cls, mamba)
    x = torch.randn(2, 11, 8, dtype=torch.float64, requires_grad=True)
    y_full, s_full = layer(x)
    outs, st = [], None
    if k:
        y, st = layer(x[:, :k])
        outs.append(y)
    for t in range(k, x.shape[1]):
        y, st = layer(x[:, t : t + 1], st)
        outs.append(y)
    y_dec = torch.cat(outs, 1)
    torch.testing.assert_close(y_dec, y_full, rtol=0, atol=1e-13)
    assert st["offset"] == s_full["offset"] == 3
    for key in s_full:
        if key != "offset":
            torch.testing.assert_close(st[key], s_full[key], rtol=0, atol=1e-13)
    w = torch.randn_like(y_full)
    g_full = torch.autograd.grad((y_full * w).sum(), [x, *layer.parameters()])
    g_dec = torch.autograd.grad((y_dec * w).sum(), [x, *layer.parameters()])
    for a, b in zip(g_full, g_dec, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("name", ["ttt_linear", "ttt_mlp"])
def test_registry_residual_form_and_in_context_classifier(name):
    from fastweights.models.backbones import Conv4
    from fastweights.models.in_context import InContextClassifier

    assert name in SEQUENCE_LAYERS and {"srwm", "deltanet", "lstm"} <= set(SEQUENCE_LAYERS)
    layer = make_sequence_layer(name, 12, 3, dropout=0.1)
    assert isinstance(layer, TTTLinearLayer if name == "ttt_linear" else TTTMLPLayer)
    assert layer.residual and layer.dropout.p == 0.1 and "seq_norm.weight" in layer.state_dict()
    layer.eval()
    x = torch.randn(2, 5, 12)
    y, s = layer(x)
    y2, _ = layer(x[:, :2])
    y3, _ = layer(x[:, 2:], layer(x[:, :2])[1])
    torch.testing.assert_close(torch.cat([y2, y3], 1), y, rtol=1e-5, atol=1e-5)
    reads = layer.read(torch.randn(2, 3, 12), s)
    assert reads.shape == (2, 3, 12)

    model = InContextClassifier(
        Conv4(1, 8, image_size=16), 3, d_model=12, num_layers=1, num_heads=3, d_ff=24, sequence_layer=name
    )
    images = torch.randn(2, 4, 1, 16, 16)
    labels = torch.randint(0, 3, (2, 4))
    logits, state = model(images, labels)
    assert logits.shape == (2, 4, 3) and torch.isfinite(logits).all()
    logits.sum().backward()
    assert model.seq_layers[0].W1.grad is not None
    assert model.query(images[:, :2], state).shape == (2, 2, 3)


def test_autocast_keeps_state_float32():
    layer = _small(TTTLinearLayer, True).float()
    x = torch.randn(2, 5, 8)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        _, s = layer(x)
        out, s2 = layer(x, s)
    assert all(v.dtype == torch.float32 for v in s2.values() if isinstance(v, torch.Tensor))
    assert torch.isfinite(out).all()


@pytest.mark.parametrize("mamba", [False, True])
def test_empty_sequence_keeps_the_state(mamba):
    layer = _small(TTTMLPLayer, mamba)
    y, s0 = layer(torch.randn(2, 0, 8, dtype=torch.float64))
    assert y.shape == (2, 0, 8) and s0["offset"] == 0
    x = torch.randn(2, 6, 8, dtype=torch.float64)
    _, s = layer(x[:, :3])
    y, s2 = layer(x[:, :0], s)
    assert y.shape == (2, 0, 8) and s2["offset"] == 3
    for key in s:
        if key != "offset":
            torch.testing.assert_close(s2[key], s[key], rtol=0, atol=0)
    y_full, _ = layer(x)
    torch.testing.assert_close(layer(x[:, 3:], s2)[0], y_full[:, 3:], rtol=0, atol=1e-13)


def test_bad_inputs():
    with pytest.raises(ValueError, match="d_model: expected a multiple"):
        TTTLinearLayer(10, 3)
    with pytest.raises(ValueError, match="d_model: expected an even head dim"):
        TTTLinearLayer(6, 2)
    with pytest.raises(ValueError, match="mini_batch_size"):
        TTTMLPLayer(8, 2, mini_batch_size=0)
    layer = TTTLinearLayer(8, 2)
    with pytest.raises(ValueError, match=r"x: expected a tensor of shape \[B, T, 8\]"):
        layer(torch.randn(2, 3, 6))
    _, s = layer(torch.randn(2, 3, 8))
    with pytest.raises(ValueError, match="state: expected None or a dict"):
        layer(torch.randn(2, 3, 8), s["W1_states"])
    with pytest.raises(ValueError, match="initial_state: expected an int 'offset'"):
        layer(torch.randn(2, 3, 8), {**s, "offset": 99})
    mamba = TTTLinearLayer(8, 2, share_qk=True)
    _, s = mamba(torch.randn(2, 3, 8))
    with pytest.raises(ValueError, match="state: expected 'conv_qk' of shape"):
        mamba(torch.randn(2, 3, 8), {k: v for k, v in s.items() if k != "conv_qk"})


@pytest.mark.parametrize("mamba", [False, True])
@pytest.mark.parametrize("cls", [TTTLinearLayer, TTTMLPLayer])
def test_gradcheck_layer_parameters_tiny(cls, mamba):
    # every parameter of the layer: W0, b0, LN gamma/beta, lr weights, delta, theta_{Q,K,V} (and convs / gate)
    layer = cls(4, 2, mini_batch_size=2, share_qk=mamba, use_gate=mamba).double()
    with torch.no_grad():
        for p in layer.parameters():
            p.add_(0.1 * torch.randn_like(p))
    names = [n for n, _ in layer.named_parameters()]
    x = torch.randn(1, 3, 4, dtype=torch.float64, requires_grad=True)

    def f(x, *params):
        out, state = torch.func.functional_call(layer, dict(zip(names, params, strict=True)), (x,))
        return out, state["W1_states"], state["W1_grad"]

    params = [p.detach().clone().requires_grad_(True) for p in layer.parameters()]
    assert torch.autograd.gradcheck(f, (x, *params), eps=1e-6, atol=1e-6)
