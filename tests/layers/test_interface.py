"""The contract every registered sequence layer keeps: decode, half-precision states, bad inputs."""

from __future__ import annotations

import pytest
import torch

from fastweights.layers import SEQUENCE_LAYERS, make_sequence_layer

F64 = torch.float64
D_MODEL, HEADS = 8, 2


def _layer(name, dtype=F64):
    return make_sequence_layer(name, D_MODEL, HEADS).to(dtype).eval()


def _tensors(state):
    if isinstance(state, torch.Tensor):
        return [state]
    if isinstance(state, dict):
        return [t for k in sorted(state) for t in _tensors(state[k])]
    if isinstance(state, (tuple, list)):
        return [t for s in state for t in _tensors(s)]
    return []


@pytest.mark.parametrize("prefill", [0, 1, 15, 16, 17])
@pytest.mark.parametrize("name", SEQUENCE_LAYERS)
def test_prefill_then_token_by_token_decode_equals_full_forward(name, prefill):
    """TTT layers use mini-batch 16, so the prefill lengths straddle a mini-batch boundary."""
    layer = _layer(name)
    t = 20
    x = torch.randn(2, t, D_MODEL, dtype=F64)
    with torch.no_grad():
        full, full_state = layer(x)
        outs, state = [], None
        if prefill:
            out, state = layer(x[:, :prefill])
            outs.append(out)
        for i in range(prefill, t):
            out, state = layer(x[:, i : i + 1], state)
            outs.append(out)
    torch.testing.assert_close(torch.cat(outs, 1), full, rtol=0, atol=1e-10)
    for a, b in zip(_tensors(state), _tensors(full_state), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-10)


def _autocast_dtypes():
    dtypes = [torch.bfloat16]
    try:
        with torch.autocast("cpu", dtype=torch.float16):
            pass
        dtypes.append(torch.float16)
    except (RuntimeError, ValueError):  # pragma: no cover - older CPU autocast
        pass
    return dtypes


@pytest.mark.parametrize("amp_dtype", _autocast_dtypes())
@pytest.mark.parametrize("name", SEQUENCE_LAYERS)
def test_states_stay_float32_under_autocast(name, amp_dtype):
    """Under bf16/fp16 autocast the recurrent state is float32 (and carried state keeps working)."""
    layer = _layer(name, torch.float32)
    x = torch.randn(2, 19, D_MODEL)
    with torch.autocast("cpu", dtype=amp_dtype):
        out, state = layer(x[:, :11])
        out2, state2 = layer(x[:, 11:], state)
    for s in (state, state2):
        floats = [z for z in _tensors(s) if z.is_floating_point()]
        assert floats and all(z.dtype == torch.float32 for z in floats), [z.dtype for z in floats]
    assert torch.isfinite(out.float()).all() and torch.isfinite(out2.float()).all()


@pytest.mark.parametrize("name", SEQUENCE_LAYERS)
def test_half_inputs_keep_float32_states(name):
    layer = _layer(name, torch.bfloat16)
    _, state = layer(torch.randn(2, 9, D_MODEL, dtype=torch.bfloat16))
    floats = [z for z in _tensors(state) if z.is_floating_point()]
    assert floats and all(z.dtype == torch.float32 for z in floats), [z.dtype for z in floats]


@pytest.mark.parametrize("name", SEQUENCE_LAYERS)
def test_bad_inputs_raise_value_error_naming_the_argument(name):
    layer = _layer(name)
    x = torch.randn(2, 5, D_MODEL, dtype=F64)
    with pytest.raises(ValueError, match=r"x: expected a tensor of shape \[B, T, 8\]"):
        layer(x[0])  # wrong rank
    with pytest.raises(ValueError, match=r"x: expected a tensor of shape \[B, T, 8\]"):
        layer(torch.randn(2, 5, D_MODEL + 1, dtype=F64))
    with pytest.raises(ValueError, match="x: expected a floating-point dtype"):
        layer(x.long())
    bad = x.clone()
    bad[1, 3, 2] = float("nan")
    with pytest.raises(ValueError, match="x: expected finite values"):
        layer(bad)
    with pytest.raises(ValueError, match="state: expected"):
        layer(x, "not a state")
    with pytest.raises(ValueError, match=r"cu_seqlens: expected \[0, …, 5\]"):
        layer(x[:1], cu_seqlens=[0, 2, 6])
    with pytest.raises(ValueError, match="x: packed sequences"):
        layer(x, cu_seqlens=[0, 2, 5])


@pytest.mark.parametrize("name", SEQUENCE_LAYERS)
def test_state_from_a_different_batch_size_is_rejected(name):
    layer = _layer(name)
    with torch.no_grad():
        _, state = layer(torch.randn(3, 4, D_MODEL, dtype=F64))
    with pytest.raises(ValueError, match="state"):
        layer(torch.randn(2, 4, D_MODEL, dtype=F64), state)


@pytest.mark.parametrize("name", [n for n in SEQUENCE_LAYERS if n != "lstm"])
def test_heads_must_divide_d_model(name):
    with pytest.raises(ValueError, match="d_model"):
        make_sequence_layer(name, 10, 3)


def test_registry_passes_options_to_the_layer():
    layer = make_sequence_layer("softmax_attention", D_MODEL, HEADS, rope=True)
    assert layer.rope
    assert make_sequence_layer("ttt_mlp", D_MODEL, HEADS, mini_batch_size=4).mini_batch_size == 4
    with pytest.raises(TypeError, match="rope"):
        make_sequence_layer("lstm", D_MODEL, HEADS, rope=True)
    with pytest.raises(ValueError, match="sequence_layer: expected one of"):
        make_sequence_layer("transformer", D_MODEL, HEADS)
