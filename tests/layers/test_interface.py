"""The contract every registered sequence layer keeps: decode, half-precision states, bad inputs."""

from __future__ import annotations

import pytest
import torch

from fastweights.layers import SEQUENCE_LAYERS, make_sequence_layer
from tests.conftest import state_tensors

F64 = torch.float64
D_MODEL, HEADS = 8, 2


def _layer(name, dtype=F64):
    return make_sequence_layer(name, D_MODEL, HEADS).to(dtype).eval()


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
    for a, b in zip(state_tensors(state), state_tensors(full_state), strict=True):
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
        floats = [z for z in state_tensors(s) if z.is_floating_point()]
        assert floats and all(z.dtype == torch.float32 for z in floats), [z.dtype for z in floats]
    assert torch.isfinite(out.float()).all() and torch.isfinite(out2.float()).all()


@pytest.mark.parametrize("name", SEQUENCE_LAYERS)
def test_half_inputs_keep_float32_states(name):
    layer = _layer(name, torch.bfloat16)
    _, state = layer(torch.randn(2, 9, D_MODEL, dtype=torch.bfloat16))
    floats = [z for z in state_tensors(state) if z.is_floating_point()]
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


@pytest.mark.parametrize("name", SEQUENCE_LAYERS)
def test_select_state_picks_batch_rows(name):
    """Row i of ``select_state(state, index)`` continues sequence ``index[i]`` exactly (beam search reorders
    states this way)."""
    layer = _layer(name)
    x = torch.randn(3, 18, D_MODEL, dtype=F64)
    index = torch.tensor([2, 0, 0, 1])
    with torch.no_grad():
        full, alone = layer(x[index])
        _, state = layer(x[:, :9])
        out, picked = layer(x[index, 9:], layer.select_state(state, index))
    torch.testing.assert_close(out, full[:, 9:], rtol=0, atol=1e-10)
    for a, b in zip(state_tensors(picked), state_tensors(alone), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-10)


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


_BAD_SIZES = [
    (16, 0, "num_heads: expected an int >= 1, got 0"),
    (16, -2, "num_heads: expected an int >= 1, got -2"),
    (0, 1, "d_model: expected an int >= 1, got 0"),
    (0, 2, "d_model: expected an int >= 1, got 0"),
    (8.0, 2, "d_model: expected an int >= 1, got 8.0"),
    (True, 1, "d_model: expected an int >= 1, got True"),
]


@pytest.mark.parametrize(("d_model", "num_heads", "message"), _BAD_SIZES)
@pytest.mark.parametrize("name", SEQUENCE_LAYERS)
def test_bad_sizes_raise_value_error_naming_the_argument(name, d_model, num_heads, message):
    """Every layer (the LSTM too, which ignores ``num_heads``) rejects sizes that are not positive ints."""
    with pytest.raises(ValueError, match=f"^{message}$"):
        make_sequence_layer(name, d_model, num_heads)


def _entry_points(layer, x, x_read=None):
    """Every public way of feeding ``x`` to a layer; ``x_read`` (default: a clean copy) for the reads."""
    clean = torch.zeros_like(x) if x_read is None else x_read
    return {
        "forward": lambda: layer(x),
        "packed forward": lambda: layer(
            x.reshape(1, -1, x.shape[-1]), cu_seqlens=[0, 3, x.numel() // D_MODEL]
        ),
        "read": lambda: layer.read(x),
        "forward_with_reads": lambda: layer.forward_with_reads(x, clean),
    }


@pytest.mark.parametrize("entry", ["forward", "packed forward", "read", "forward_with_reads"])
@pytest.mark.parametrize("name", SEQUENCE_LAYERS)
def test_input_dtype_must_match_the_parameters(name, entry):
    """A float64 input to a float32 layer is a clear error at every entry point (not torch's "mixed
    dtype" deep inside); converting the layer fixes it."""
    layer = _layer(name, torch.float32)
    x = torch.randn(2, 5, D_MODEL, dtype=F64)
    message = (
        r"^x: expected dtype torch.float32 \(the dtype of the layer's parameters\), got torch.float64; "
        r"convert the layer \(layer.double\(\)\) or the input \(x.float\(\)\)$"
    )
    with pytest.raises(ValueError, match=message):
        _entry_points(layer, x)[entry]()
    layer.double()
    _entry_points(layer, x)[entry]()  # runs


@pytest.mark.parametrize("name", SEQUENCE_LAYERS)
def test_half_input_to_a_float32_layer_needs_autocast(name):
    layer = _layer(name, torch.float32)
    x = torch.randn(2, 5, D_MODEL).bfloat16()
    with pytest.raises(ValueError, match=r"x: expected dtype torch.float32 .* or run under torch.autocast$"):
        layer(x)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out, _ = layer(x)  # the documented mixed-precision path
    assert out.shape == x.shape and torch.isfinite(out.float()).all()
    with pytest.raises(ValueError, match=r"x_read: expected dtype torch.float32"):
        layer.forward_with_reads(x.float(), x)


@pytest.mark.parametrize("name", SEQUENCE_LAYERS)
def test_bad_read_stream_is_named_x_read(name):
    layer = _layer(name)
    x = torch.randn(2, 5, D_MODEL, dtype=F64)
    bad = x.clone()
    bad[0, 2, 1] = float("inf")
    with pytest.raises(ValueError, match="^x_read: expected finite values"):
        layer.forward_with_reads(x, bad)
    with pytest.raises(ValueError, match=r"^x_read: expected a tensor of shape \[B, T, 8\]"):
        layer.forward_with_reads(x, x[..., :-1])
    with pytest.raises(ValueError, match=r"^x_read: expected shape \[2, 5, 8\] \(same as x\)"):
        layer.forward_with_reads(x, x[:, :3])


@pytest.mark.parametrize("with_state", [False, True])
@pytest.mark.parametrize("name", SEQUENCE_LAYERS)
def test_empty_sequence_with_reads_keeps_the_state(name, with_state):
    """``T = 0`` through ``forward_with_reads`` (the generic step loop included): empty outputs and the
    state unchanged, as ``forward`` gives."""
    layer = _layer(name)
    x = torch.randn(2, 3, D_MODEL, dtype=F64)
    with torch.no_grad():
        state = layer(x)[1] if with_state else None
        out, out_read, new_state = layer.forward_with_reads(x[:, :0], x[:, :0], state)
        _, expected = layer(x[:, :0], state)
    assert out.shape == out_read.shape == (2, 0, D_MODEL)
    for a, b in zip(state_tensors(new_state), state_tensors(expected), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    if with_state:
        for a, b in zip(state_tensors(new_state), state_tensors(state), strict=True):
            torch.testing.assert_close(a, b.to(a.dtype), rtol=0, atol=0)


@pytest.mark.parametrize("name", SEQUENCE_LAYERS)
def test_empty_batch_runs_every_entry_point(name):
    layer = _layer(name)
    x = torch.randn(0, 4, D_MODEL, dtype=F64)
    with torch.no_grad():
        out, _ = layer(x)
        reads = layer.read(x)
        out2, out_read, _ = layer.forward_with_reads(x, x)
    assert out.shape == reads.shape == out2.shape == out_read.shape == (0, 4, D_MODEL)
