"""Padded batches (``attention_mask [B, T]``) for every sequence layer: each row equals its real tokens
run alone (outputs, final state, continuation, reads, gradients w.r.t. inputs and parameters), float64."""

from __future__ import annotations

import pytest
import torch

from fastweights.layers import SEQUENCE_LAYERS, make_sequence_layer
from fastweights.ops.packing import select_state
from tests.conftest import state_tensors

F64 = torch.float64
D_MODEL, HEADS = 8, 2
# left padding (5 real), right (3), both sides (4), none (9)
MASK = torch.tensor(
    [
        [0, 0, 0, 0, 1, 1, 1, 1, 1],
        [1, 1, 1, 0, 0, 0, 0, 0, 0],
        [0, 1, 1, 1, 1, 0, 0, 0, 0],
        [1, 1, 1, 1, 1, 1, 1, 1, 1],
    ],
    dtype=torch.bool,
)
# a padded prefix that leaves the rows with 0, 1, 2 and 3 tokens (TTT: different mini-batch positions)
PREFIX_MASK = torch.tensor([[0, 0, 0], [0, 0, 1], [0, 1, 1], [1, 1, 1]], dtype=torch.bool)
B, T = MASK.shape

CONFIGS = {
    **{name: (name, {}) for name in SEQUENCE_LAYERS},
    "softmax_attention-rope": ("softmax_attention", {"rope": True}),
    "ttt_linear-mamba-mb4": ("ttt_linear", {"share_qk": True, "use_gate": True, "mini_batch_size": 4}),
    "ttt_mlp-mb4": ("ttt_mlp", {"mini_batch_size": 4}),
    "srwm-pre_ln": ("srwm", {"block": "pre_ln"}),
    "lstm-pre_ln": ("lstm", {"block": "pre_ln"}),
    "srwm-reference": ("srwm", {"impl": "reference"}),
}
# same code path with an all-real mask (the padded input is zeroed or the rate is): bit-identical
ZEROING = ("srwm", "deltanet", "sr_deltanet", "linear_attention", "srwm-pre_ln")


def _layer(config):
    name, options = CONFIGS[config]
    return make_sequence_layer(name, D_MODEL, HEADS, **options).double().eval()


def _row_state(layer, state, b):
    """Row ``b`` of a state returned for a padded batch, as the unpadded layer returns it: a TTT offset
    as an int, a KV cache without its padded steps."""
    if state is None:
        return None
    if isinstance(state, dict):
        row = {k: v[b : b + 1] for k, v in state.items() if k != "offset"}
        offset = state["offset"]
        return {**row, "offset": int(offset[b]) if isinstance(offset, torch.Tensor) else offset}
    if isinstance(state, tuple) and len(state) == 3:  # softmax attention: (K, V, valid)
        k, v, valid = state
        return k[b : b + 1, :, valid[b]], v[b : b + 1, :, valid[b]]
    return select_state(state, b, layer.state_batch_dim)


def _inputs(seed=0):
    g = torch.Generator().manual_seed(seed)
    prefix = torch.randn(B, PREFIX_MASK.shape[1], D_MODEL, generator=g, dtype=F64)
    x = torch.randn(B, T, D_MODEL, generator=g, dtype=F64)
    nxt = torch.randn(B, 2, D_MODEL, generator=g, dtype=F64)
    return prefix, x, nxt


def _row_runs(layer, prefix, x):
    """Per row: the unpadded prefix, then the unpadded segment: (outputs, final states)."""
    outs, finals = [], []
    for b in range(B):
        _, s = layer(prefix[b : b + 1, PREFIX_MASK[b]])
        o, f = layer(x[b : b + 1, MASK[b]], s)
        outs.append(o[0])
        finals.append(f)
    return outs, finals


def _assert_state_rows(layer, state, finals, atol=1e-12):
    for b, f in enumerate(finals):
        row = _row_state(layer, state, b)
        if isinstance(f, dict):
            assert row["offset"] == f["offset"]
        for u, v in zip(state_tensors(row), state_tensors(f), strict=True):
            torch.testing.assert_close(u, v, rtol=0, atol=atol)


@pytest.mark.parametrize("config", list(CONFIGS))
def test_padded_batch_equals_each_row_alone_and_continues_it(config):
    layer = _layer(config)
    prefix, x, nxt = _inputs()
    x.requires_grad_()
    _, state = layer(prefix, attention_mask=PREFIX_MASK)
    out, final = layer(x, state, attention_mask=MASK)
    outs, finals = _row_runs(layer, prefix, x)
    for b in range(B):
        torch.testing.assert_close(out[b, MASK[b]], outs[b], rtol=0, atol=1e-12)
    assert (out[~MASK] == 0).all()
    _assert_state_rows(layer, final, finals)
    # the state continues each row: without a mask and with an all-real one
    for mask in (None, torch.ones(B, 2, dtype=torch.bool)):
        cont, _ = layer(nxt, final, attention_mask=mask)
        for b in range(B):
            expected, _ = layer(nxt[b : b + 1], finals[b])
            torch.testing.assert_close(cont[b], expected[0], rtol=0, atol=1e-12)


@pytest.mark.parametrize("config", list(CONFIGS))
def test_gradients_of_a_padded_batch_equal_the_rows_alone(config):
    """Gradients w.r.t. the input, the carried state and every parameter; none reaches padding."""
    layer = _layer(config)
    prefix, x, _ = _inputs(1)
    with torch.no_grad():
        _, state = layer(prefix[:, -1:], attention_mask=PREFIX_MASK[:, -1:])
    floats = [t.requires_grad_() for t in state_tensors(state) if t.is_floating_point()]
    x.requires_grad_()
    params = [p for p in layer.parameters()]
    g = torch.Generator().manual_seed(2)
    weights = torch.randn(B, T, D_MODEL, generator=g, dtype=F64)
    out, final = layer(x, state, attention_mask=MASK)
    loss = (out * weights).sum() + sum(
        t.square().sum() for t in state_tensors(final) if t.is_floating_point()
    )
    loss_ref = 0
    for b in range(B):
        o, f = layer(x[b : b + 1, MASK[b]], _row_state(layer, state, b))
        loss_ref = loss_ref + (o[0] * weights[b, MASK[b]]).sum()
        loss_ref = loss_ref + sum(t.square().sum() for t in state_tensors(f) if t.is_floating_point())
    leaves = [x, *floats, *params]
    kw = dict(allow_unused=True, materialize_grads=True)
    got = torch.autograd.grad(loss, leaves, **kw)
    want = torch.autograd.grad(loss_ref, leaves, **kw)
    for u, v in zip(got, want, strict=True):
        torch.testing.assert_close(u, v, rtol=1e-10, atol=1e-11)
    assert (got[0][~MASK] == 0).all()


@pytest.mark.parametrize("config", list(CONFIGS))
def test_an_all_real_mask_equals_no_mask(config):
    layer = _layer(config)
    prefix, x, _ = _inputs(3)
    _, state = layer(prefix)
    out, final = layer(x, state)
    for ones in (torch.ones(B, T, dtype=torch.bool), torch.ones(B, T, dtype=torch.int64), torch.ones(B, T)):
        out_m, final_m = layer(x, state, attention_mask=ones)
        if config in ZEROING:  # the same computation on the same values
            assert torch.equal(out_m, out)
            for u, v in zip(state_tensors(final_m), state_tensors(final), strict=True):
                assert torch.equal(u, v)
        else:
            torch.testing.assert_close(out_m, out, rtol=0, atol=1e-12)
            for b in range(B):
                rows = (state_tensors(_row_state(layer, s, b)) for s in (final_m, final))
                for u, v in zip(*rows, strict=True):
                    torch.testing.assert_close(u, v, rtol=0, atol=1e-12)


@pytest.mark.parametrize("config", list(CONFIGS))
def test_forward_with_reads_and_read_of_a_padded_batch(config):
    """Reads beside a padded stream see each row's state after its real steps before them (zeros at
    padding); ``read`` from a padded batch's state equals the row's read."""
    layer = _layer(config)
    prefix, x, nxt = _inputs(4)
    x_read = torch.flip(x, dims=[1])
    _, state = layer(prefix, attention_mask=PREFIX_MASK)
    out, out_read, final = layer.forward_with_reads(x, x_read, state, attention_mask=MASK)
    queries = layer.read(nxt, final)
    for b in range(B):
        m = MASK[b]
        s_b = _row_state(layer, state, b)
        o, r, f = layer.forward_with_reads(x[b : b + 1, m], x_read[b : b + 1, m], s_b)
        torch.testing.assert_close(out[b, m], o[0], rtol=0, atol=1e-12)
        torch.testing.assert_close(out_read[b, m], r[0], rtol=0, atol=1e-12)
        torch.testing.assert_close(queries[b], layer.read(nxt[b : b + 1], f)[0], rtol=0, atol=1e-12)
    assert (out[~MASK] == 0).all() and (out_read[~MASK] == 0).all()
    for b, f in enumerate(_row_runs(layer, prefix, x)[1]):
        for u, v in zip(state_tensors(_row_state(layer, final, b)), state_tensors(f), strict=True):
            torch.testing.assert_close(u, v, rtol=0, atol=1e-12)


@pytest.mark.parametrize("config", ["srwm", "deltanet", "lstm", "softmax_attention", "ttt_linear"])
def test_a_row_of_only_padding_keeps_its_state_and_outputs_zeros(config):
    layer = _layer(config)
    prefix, x, _ = _inputs(5)
    _, state = layer(prefix)
    mask = MASK.clone()
    mask[1] = False
    out, final = layer(x, state, attention_mask=mask)
    assert (out[1] == 0).all()
    kept, same = _row_state(layer, final, 1), _row_state(layer, state, 1)
    for u, v in zip(state_tensors(kept), state_tensors(same), strict=True):
        torch.testing.assert_close(u, v, rtol=0, atol=0)


def test_ttt_positions_and_mini_batches_count_real_tokens_only():
    """Left padding shifts nothing: a row's RoPE positions (t mod b) and mini-batch boundaries are
    those of its unpadded sequence, whose last mini-batch is partial (5 tokens, b = 4)."""
    layer = _layer("ttt_linear-mamba-mb4")
    x = torch.randn(1, 5, D_MODEL, dtype=F64)
    padded = torch.cat([torch.randn(1, 3, D_MODEL, dtype=F64), x], dim=1)
    mask = torch.tensor([[0, 0, 0, 1, 1, 1, 1, 1]], dtype=torch.bool)
    out, state = layer(padded, attention_mask=mask)
    ref, ref_state = layer(x)
    torch.testing.assert_close(out[:, 3:], ref, rtol=0, atol=1e-12)
    assert state["offset"].tolist() == [ref_state["offset"]] == [1]
    torch.testing.assert_close(state["conv_qk"], ref_state["conv_qk"], rtol=0, atol=0)


def test_softmax_attention_cache_records_which_steps_are_real():
    layer = _layer("softmax_attention-rope")
    _, x, _ = _inputs(6)
    _, (k, v, valid) = layer(x, attention_mask=MASK)
    assert k.shape == v.shape == (B, HEADS, T, D_MODEL // HEADS) and torch.equal(valid, MASK)
    _, (k2, _, valid2) = layer(x[:, :2], (k, v, valid))
    assert k2.shape[2] == T + 2 and torch.equal(valid2[:, T:], torch.ones(B, 2, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"state: expected the cache's valid of shape \[B, T_past\]"):
        layer(x, (k, v, valid[:, 1:]))
    with pytest.raises(ValueError, match="valid a bool tensor"):
        layer(x, (k, v, valid.long()))


BAD_MASKS = [
    (
        torch.ones(B, T + 1),
        r"attention_mask: expected shape \[B, T\] = \[4, 9\] \(the batch and steps of x\)",
    ),
    (torch.ones(B), r"attention_mask: expected shape \[B, T\] = \[4, 9\]"),
    (torch.full((B, T), 0.5), r"attention_mask: expected only 0 and 1 .*got 0.5"),
    (torch.full((B, T), -1), r"attention_mask: expected only 0 and 1 .*got -1"),
    ("all", r"attention_mask: expected a tensor \[B, T\] = \[4, 9\]"),
    (
        torch.tensor([[1, 0, 1, 1, 1, 1, 1, 1, 1]] * B),
        r"attention_mask: expected each row's real tokens to be contiguous .*got row 0 = \[1, 0, 1",
    ),
]


@pytest.mark.parametrize(("mask", "match"), BAD_MASKS)
@pytest.mark.parametrize("config", list(CONFIGS))
def test_bad_masks_raise_one_value_error_naming_attention_mask(config, mask, match):
    layer = _layer(config)
    x = torch.randn(B, T, D_MODEL, dtype=F64)
    with pytest.raises(ValueError, match=match):
        layer(x, attention_mask=mask)
    with pytest.raises(ValueError, match=match):
        layer.forward_with_reads(x, x, attention_mask=mask)


@pytest.mark.parametrize("config", list(CONFIGS))
def test_a_mask_with_cu_seqlens_is_refused(config):
    layer = _layer(config)
    with pytest.raises(ValueError, match="attention_mask: expected None with cu_seqlens"):
        layer(torch.randn(1, T, D_MODEL, dtype=F64), cu_seqlens=[0, 4, T], attention_mask=torch.ones(1, T))
