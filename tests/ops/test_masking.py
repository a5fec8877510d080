"""Padding masks (``attention_mask [B, T]``) for every stateful op: each row of a padded batch equals its
real tokens run alone (outputs, final state, gradients), in float64."""

from __future__ import annotations

import pytest
import torch

from fastweights import ops
from fastweights.ops.masking import (
    check_attention_mask,
    left_justify,
    real_positions,
    restore_padding,
)
from fastweights.ops.srwm import srwm_with_reads
from fastweights.ops.ttt import ttt_initial_state
from tests.conftest import state_tensors

F64 = torch.float64
H, D, CHUNK, MBS = 2, 4, 4, 4
# left padding (5 real), right padding (3), both sides (4), no padding (9): lengths 3, 4, 5, 9 cross
# the chunk and mini-batch boundaries of size 4
MASK = torch.tensor(
    [
        [0, 0, 0, 0, 1, 1, 1, 1, 1],
        [1, 1, 1, 0, 0, 0, 0, 0, 0],
        [0, 1, 1, 1, 1, 0, 0, 0, 0],
        [1, 1, 1, 1, 1, 1, 1, 1, 1],
    ],
    dtype=torch.bool,
)
B, T = MASK.shape

OPS = [
    "srwm",
    "srwm_reference",
    "delta_rule",
    "delta_rule_reference",
    "linear_attention",
    "linear_attention_reference",
    "ttt_linear",
    "ttt_linear_reference",
    "ttt_mlp",
    "ttt_mlp_reference",
]
CHUNKED = {"delta_rule", "linear_attention"}


def _randn(g, *shape):
    return torch.randn(*shape, generator=g, dtype=F64)


def _case(name, b=B, t=T, seed=3):
    """(sequence tensors [b, t, ...], extra positional args, a carried initial state for b rows)."""
    g = torch.Generator().manual_seed(seed)
    if name.startswith("srwm"):
        w = _randn(g, H, D, 3 * D + 4) / D**0.5
        return [_randn(g, b, t, H, D)], [w], 0.5 * _randn(g, b, H, D, 3 * D + 4)
    if name.startswith("ttt"):
        mlp = name.startswith("ttt_mlp")
        hid = 4 * D if mlp else D
        params = [0.3 * _randn(g, H, D, hid), 0.1 * _randn(g, H, 1, hid)]
        if mlp:
            params += [0.3 * _randn(g, H, hid, D), 0.1 * _randn(g, H, 1, D)]
        seqs = [_randn(g, b, t, H, D) for _ in range(3)] + [torch.sigmoid(_randn(g, b, t, H)) / D]
        token_scale = 1.0 / torch.arange(1, MBS + 1, dtype=F64) + 0.05 * _randn(g, MBS)
        names = ["W1", "b1", "W2", "b2"][: len(params)]
        state = ttt_initial_state(dict(zip(names, params, strict=True)), b)
        state = {k: v + 0.05 * _randn(g, *v.shape) if k.endswith("_states") else v for k, v in state.items()}
        return seqs, [token_scale, *params, 1 + 0.1 * _randn(g, H, D), 0.1 * _randn(g, H, D)], state
    q, k = torch.softmax(_randn(g, b, t, H, D), -1), torch.softmax(_randn(g, b, t, H, D), -1)
    seqs = [q, k, _randn(g, b, t, H, D)]
    if name.startswith("delta"):
        seqs.append(torch.sigmoid(_randn(g, b, t, H)))
    return seqs, [], 0.5 * _randn(g, b, H, D, D)


def _call(name, seqs, extra, **kw):
    if name in CHUNKED:
        kw["chunk_size"] = CHUNK
    op = getattr(ops, name)
    if name.startswith("srwm"):
        return op(seqs[0], *extra, **kw)
    if name.startswith("ttt"):
        return op(*seqs, *extra, **kw)
    return op(*seqs, **kw)


def _row_state(state, b):
    """Row ``b`` of a batched state as the unpadded op takes it (a TTT offset as an int)."""
    if state is None:
        return None
    if isinstance(state, dict):
        off = state["offset"]
        row = {k: v[b : b + 1] for k, v in state.items() if k != "offset"}
        return {**row, "offset": int(off[b]) if isinstance(off, torch.Tensor) else off}
    return state[b : b + 1]


def _per_row(name, seqs, extra, mask, state):
    """The unpadded op on each row's real tokens, from its own state: outputs scattered into the
    padded layout (zeros at padding) and the list of the rows' final states."""
    outs, finals = [], []
    for b in range(mask.shape[0]):
        m = mask[b]
        o, f = _call(name, [z[b : b + 1, m] for z in seqs], extra, initial_state=_row_state(state, b),
                     output_final_state=True)  # fmt: skip
        full = o.new_zeros(1, mask.shape[1], *o.shape[2:])
        full[:, m] = o
        outs.append(full)
        finals.append(f)
    return torch.cat(outs), finals


def _assert_rows_equal(final, finals, atol=1e-12):
    for b, f in enumerate(finals):
        if isinstance(f, dict):
            assert int(final["offset"][b]) == f["offset"]
        got = state_tensors(_row_state(final, b))
        for u, v in zip(got, state_tensors(f), strict=True):
            torch.testing.assert_close(u, v, rtol=0, atol=atol)


def _floats(state):
    """The floating-point tensors of a state (not a TTT offset tensor)."""
    return [t for t in state_tensors(state) if t.is_floating_point()]


def _leaves(seqs, extra, state):
    floats = [t for t in extra if t.is_floating_point()] + state_tensors(state)
    return [t.requires_grad_() for t in seqs + floats if t.is_floating_point()]


@pytest.mark.parametrize("with_state", [False, True])
@pytest.mark.parametrize("name", OPS)
def test_padded_rows_equal_each_row_alone_with_gradients(name, with_state):
    """Left, right, two-sided and no padding in one batch; lengths 3, 4, 5, 9 around chunks of 4."""
    seqs, extra, state = _case(name)
    state = state if with_state else None
    leaves = _leaves(seqs, extra, state)
    out, final = _call(name, seqs, extra, initial_state=state, output_final_state=True, attention_mask=MASK)
    expected, finals = _per_row(name, seqs, extra, MASK, state)
    torch.testing.assert_close(out, expected, rtol=0, atol=1e-12)
    assert (out[~MASK] == 0).all()
    _assert_rows_equal(final, finals)
    g_out = torch.randn_like(out)
    loss = (out * g_out).sum() + sum(t.square().sum() for t in _floats(final))
    loss_ref = (expected * g_out).sum() + sum(t.square().sum() for f in finals for t in state_tensors(f))
    got = torch.autograd.grad(loss, leaves, allow_unused=True, materialize_grads=True)
    want = torch.autograd.grad(loss_ref, leaves, allow_unused=True, materialize_grads=True)
    for u, v in zip(got, want, strict=True):
        torch.testing.assert_close(u, v, rtol=1e-10, atol=1e-11)
    for g in got[: len(seqs)]:
        assert (g[~MASK] == 0).all()  # no gradient reaches a padded input


@pytest.mark.parametrize("name", [n for n in OPS if not n.startswith("ttt")])
def test_an_all_real_mask_is_bit_identical_to_no_mask(name):
    seqs, extra, state = _case(name)
    ones = torch.ones(B, T, dtype=torch.int64)
    a = _call(name, seqs, extra, initial_state=state, output_final_state=True)
    b = _call(name, seqs, extra, initial_state=state, output_final_state=True, attention_mask=ones)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])


@pytest.mark.parametrize("name", [n for n in OPS if n.startswith("ttt")])
def test_ttt_all_real_mask_equals_no_mask(name):
    """The masked TTT computation is another code path (the frame of per-row offsets): equal values."""
    seqs, extra, state = _case(name)
    out, final = _call(name, seqs, extra, initial_state=state, output_final_state=True)
    out_m, final_m = _call(
        name, seqs, extra, initial_state=state, output_final_state=True, attention_mask=torch.ones(B, T)
    )
    torch.testing.assert_close(out_m, out, rtol=0, atol=1e-12)
    assert final_m["offset"].tolist() == [final["offset"]] * B
    for u, v in zip(_floats(final_m), _floats(final), strict=True):
        torch.testing.assert_close(u, v, rtol=0, atol=1e-12)


@pytest.mark.parametrize("name", ["ttt_linear", "ttt_mlp", "ttt_linear_reference"])
def test_ttt_per_row_offsets_carried_from_a_padded_prefix(name):
    """A padded prefix leaves each row at its own mini-batch position (offsets 0..3 of 4); the next
    padded call continues every row exactly as the unpadded row continues, partial mini-batches and the
    rows that end inside a whole mini-batch (whose state is taken before its boundary) included."""
    pre, extra, _ = _case(name, t=3, seed=5)
    seqs, _, _ = _case(name, seed=6)
    pre_mask = torch.tensor([[0, 0, 0], [0, 0, 1], [0, 1, 1], [1, 1, 1]], dtype=torch.bool)
    leaves = _leaves(pre + seqs, extra, None)
    _, state = _call(name, pre, extra, output_final_state=True, attention_mask=pre_mask)
    assert state["offset"].tolist() == [0, 1, 2, 3]
    out, final = _call(name, seqs, extra, initial_state=state, output_final_state=True, attention_mask=MASK)
    expected, finals = [], []
    for b in range(B):
        _, s_b = _call(name, [z[b : b + 1, pre_mask[b]] for z in pre], extra, output_final_state=True)
        o, f = _call(
            name, [z[b : b + 1, MASK[b]] for z in seqs], extra, initial_state=s_b, output_final_state=True
        )
        expected.append(o[0])
        finals.append(f)
    torch.testing.assert_close(out[MASK], torch.cat(expected), rtol=0, atol=1e-12)
    assert [f["offset"] for f in finals] == final["offset"].tolist() == [1, 0, 2, 0]
    _assert_rows_equal(final, finals)
    loss = out.square().sum() + sum(t.sum() for t in _floats(final))
    loss_ref = torch.cat(expected).square().sum() + sum(t.sum() for f in finals for t in _floats(f))
    kw = dict(allow_unused=True, materialize_grads=True)  # the prefix's queries reach no loss term
    for u, v in zip(
        torch.autograd.grad(loss, leaves, **kw), torch.autograd.grad(loss_ref, leaves, **kw), strict=True
    ):
        torch.testing.assert_close(u, v, rtol=1e-10, atol=1e-11)


@pytest.mark.parametrize("name", ["ttt_linear", "ttt_mlp"])
@pytest.mark.parametrize("length", [1, 3, 4, 5, 7, 8, 9])
def test_ttt_partial_last_mini_batch_of_a_padded_row_equals_the_unpadded_op(name, length):
    """A row of ``length`` real tokens (left- and right-padded to 11) is the unpadded op with
    ``T = length``, which ends on a partial mini-batch whenever 4 does not divide ``length``: its
    outputs, its final weights (the last boundary's), running sums and offset ``length % 4``."""
    seqs, extra, _ = _case(name, b=1, t=length, seed=length)
    out_ref, f_ref = _call(name, seqs, extra, output_final_state=True)
    for left in (0, 2):
        mask = torch.zeros(1, 11, dtype=torch.bool)
        mask[0, left : left + length] = True
        padded = [z.new_zeros(1, 11, *z.shape[2:]).index_copy(1, mask[0].nonzero()[:, 0], z) for z in seqs]
        out, final = _call(name, padded, extra, output_final_state=True, attention_mask=mask)
        torch.testing.assert_close(out[mask], out_ref[0], rtol=0, atol=1e-12)
        assert final["offset"].tolist() == [length % MBS] == [f_ref["offset"]]
        for u, v in zip(_floats(final), _floats(f_ref), strict=True):
            torch.testing.assert_close(u, v, rtol=0, atol=1e-12)


@pytest.mark.parametrize("name", ["ttt_linear", "ttt_mlp"])
def test_ttt_dual_form_with_a_mask_equals_the_masked_reference(name):
    seqs, extra, state = _case(name)
    g = torch.Generator().manual_seed(9)
    offset = torch.tensor([0, 3, 1, 2])
    carried = (offset > 0).to(F64)
    grads = {
        k: 0.1 * _randn(g, *v.shape) * carried.view(-1, *[1] * (v.dim() - 1))
        for k, v in state.items()
        if k.endswith("_grad")
    }
    state = {**state, **grads, "offset": offset}
    ref_name = name + "_reference"
    kw = dict(initial_state=state, output_final_state=True, attention_mask=MASK)
    out, final = _call(name, seqs, extra, **({"exact_gelu_grad": True} if "mlp" in name else {}), **kw)
    out_ref, final_ref = _call(ref_name, seqs, extra, **kw)
    torch.testing.assert_close(out, out_ref, rtol=0, atol=1e-11)
    assert final["offset"].tolist() == final_ref["offset"].tolist()
    for u, v in zip(_floats(final), _floats(final_ref), strict=True):
        torch.testing.assert_close(u, v, rtol=0, atol=1e-11)


def test_ttt_current_weights_of_per_row_offsets():
    seqs, extra, _ = _case("ttt_linear")
    _, final = _call("ttt_linear", seqs, extra, output_final_state=True, attention_mask=MASK)
    current = ops.ttt.ttt_current_weights(final, extra[0])
    for b in range(B):
        _, f_b = _call("ttt_linear", [z[b : b + 1, MASK[b]] for z in seqs], extra, output_final_state=True)
        for key, w in ops.ttt.ttt_current_weights(f_b, extra[0]).items():
            torch.testing.assert_close(current[key][b : b + 1], w, rtol=0, atol=1e-12)


@pytest.mark.parametrize("name", ["srwm", "delta_rule", "linear_attention", "ttt_linear"])
def test_a_row_of_only_padding_keeps_its_state(name):
    seqs, extra, state = _case(name, b=2, t=5)
    mask = torch.tensor([[0, 0, 0, 0, 0], [1, 1, 1, 0, 0]], dtype=torch.bool)
    out, final = _call(name, seqs, extra, initial_state=state, output_final_state=True, attention_mask=mask)
    assert (out[0] == 0).all()
    for u, v in zip(state_tensors(_row_state(final, 0)), state_tensors(_row_state(state, 0)), strict=True):
        torch.testing.assert_close(u, v, rtol=0, atol=0)


@pytest.mark.parametrize("cpu_kernel", ["0", "1"])
def test_srwm_masked_on_both_cpu_implementations(monkeypatch, cpu_kernel):
    """The masked SRWM zeroes the padded inputs before the fused steps: the C++ kernel (with its
    reversal backward) and the PyTorch fast path give each row alone."""
    monkeypatch.setenv("FASTWEIGHTS_CPU_KERNEL", cpu_kernel)
    test_padded_rows_equal_each_row_alone_with_gradients("srwm", True)


def test_srwm_with_reads_masked_equals_each_row_alone():
    (x,), (w,), state = _case("srwm")
    x_read = torch.randn_like(x)
    leaves = [t.requires_grad_() for t in (x, x_read, state)]  # the slow weights are not read
    y, y_read, final = srwm_with_reads(x, x_read, w, initial_state=state, attention_mask=MASK)
    loss = (y * torch.cos(y)).sum() + y_read.square().sum() + final.square().sum()
    loss_ref = 0
    for b in range(B):
        m = MASK[b]
        yb, rb, fb = srwm_with_reads(x[b : b + 1, m], x_read[b : b + 1, m], w, initial_state=state[b : b + 1])
        torch.testing.assert_close(y[b, m], yb[0], rtol=0, atol=1e-12)
        torch.testing.assert_close(y_read[b, m], rb[0], rtol=0, atol=1e-12)
        torch.testing.assert_close(final[b], fb[0], rtol=0, atol=1e-12)
        loss_ref = loss_ref + (yb * torch.cos(yb)).sum() + rb.square().sum() + fb.square().sum()
    assert (y[~MASK] == 0).all() and (y_read[~MASK] == 0).all()
    for u, v in zip(torch.autograd.grad(loss, leaves), torch.autograd.grad(loss_ref, leaves), strict=True):
        torch.testing.assert_close(u, v, rtol=1e-10, atol=1e-11)


@pytest.mark.parametrize("name", ["srwm", "delta_rule", "ttt_linear"])
def test_gradcheck_of_the_masked_path(name):
    seqs, extra, state = _case(name, b=2, t=4)
    mask = torch.tensor([[0, 1, 1, 1], [1, 1, 0, 0]], dtype=torch.bool)
    if name == "ttt_linear":  # gradients w.r.t. q, v and W1 (the others are constants here)
        inputs = (seqs[0], seqs[2], extra[1])

        def fn(q, v, w1):
            args = [q, seqs[1], v, seqs[3], extra[0], w1, *extra[2:]]
            out, final = ops.ttt_linear(*args, output_final_state=True, attention_mask=mask)
            return out, final["W1_states"], final["W1_grad"]
    else:
        inputs = (*seqs, state)

        def fn(*args):
            kw = dict(initial_state=args[-1], output_final_state=True, attention_mask=mask)
            return _call(name, list(args[:-1]), extra, **kw)

    assert torch.autograd.gradcheck(fn, tuple(t.requires_grad_() for t in inputs))


def test_mask_helpers_left_justify_and_restore():
    x = torch.arange(B * T, dtype=F64).view(B, T, 1)
    lengths = MASK.sum(1)
    j = left_justify(x, MASK)
    assert j.shape == (B, int(lengths.max()), 1)
    for b in range(B):
        assert j[b, : lengths[b], 0].tolist() == x[b, MASK[b], 0].tolist()
        assert (j[b, lengths[b] :] == 0).all()
    torch.testing.assert_close(restore_padding(j, MASK), x * MASK[..., None], rtol=0, atol=0)
    shifted = left_justify(x, MASK, torch.tensor([1, 0, 2, 0]), 12)
    torch.testing.assert_close(
        restore_padding(shifted, MASK, torch.tensor([1, 0, 2, 0])), x * MASK[..., None]
    )
    assert real_positions(MASK)[0].tolist() == [0, 0, 0, 0, 0, 1, 2, 3, 4]


@pytest.mark.parametrize(
    ("mask", "match"),
    [
        ([[1, 1, 0]], r"attention_mask: expected a tensor \[B, T\] = \[4, 9\] \(1/True = real token"),
        (
            torch.ones(4, 8),
            r"attention_mask: expected shape \[B, T\] = \[4, 9\] \(the batch and steps of \w+\), got \[4, 8",
        ),
        (torch.ones(9, 4), r"attention_mask: expected shape \[B, T\] = \[4, 9\]"),
        (torch.ones(4, 9, 1), r"attention_mask: expected shape \[B, T\] = \[4, 9\]"),
        (
            torch.full((4, 9), 0.5),
            r"attention_mask: expected only 0 and 1 \(1/True = real token, 0/False = padding\), got 0.5",
        ),
        (torch.full((4, 9), 2), r"attention_mask: expected only 0 and 1 .*got 2"),
        (torch.full((4, 9), float("nan")), r"attention_mask: expected only 0 and 1 .*got nan"),
        (
            torch.ones(4, 9, dtype=torch.complex64),
            "attention_mask: expected a bool, integer or floating dtype",
        ),
        (torch.ones(4, 9, device="meta"), "attention_mask: expected a tensor on cpu .*got meta"),
        (
            torch.tensor([[1, 1, 0, 1, 1, 1, 1, 1, 1]] * 4),
            r"attention_mask: expected each row's real tokens to be contiguous .*got row 0 = \[1, 1, 0, 1",
        ),
        (
            MASK.clone().index_fill_(1, torch.tensor([6]), True),
            r"contiguous \(padding only before and after them\), got row 1 = \[1, 1, 1, 0, 0, 0, 1, 0, 0\]",
        ),
    ],
)
@pytest.mark.parametrize("name", OPS)
def test_bad_masks_raise_one_value_error_naming_attention_mask(name, mask, match):
    seqs, extra, _ = _case(name)
    with pytest.raises(ValueError, match=match):
        _call(name, seqs, extra, attention_mask=mask)


@pytest.mark.parametrize("name", OPS)
def test_a_mask_with_cu_seqlens_is_refused(name):
    seqs, extra, _ = _case(name, b=1)
    with pytest.raises(ValueError, match="attention_mask: expected None with cu_seqlens"):
        _call(name, seqs, extra, cu_seqlens=[0, 4, T], attention_mask=torch.ones(1, T))


def test_check_attention_mask_returns_bool():
    for m in (MASK, MASK.long(), MASK.double(), MASK.to(torch.uint8)):
        got = check_attention_mask(m, B, T, torch.device("cpu"))
        assert got.dtype == torch.bool and torch.equal(got, MASK)
