"""Packed variable-length sequences (``cu_seqlens``) equal separate runs, for every op and layer."""

from __future__ import annotations

import pytest
import torch

from fastweights import ops
from fastweights.layers import SEQUENCE_LAYERS, make_sequence_layer
from fastweights.ops.packing import check_cu_seqlens, select_state, stack_states
from tests.conftest import state_tensors

F64 = torch.float64
LENGTHS = (17, 23)
CU = torch.tensor([0, 17, 40])
H, D = 2, 4


def _op_case(name):
    """(op, sequence tensors [1, 40, ...], extra positional args, initial state for 2 sequences)."""
    g = torch.Generator().manual_seed(3)
    r = lambda *s: torch.randn(*s, generator=g, dtype=F64)  # noqa: E731
    t = sum(LENGTHS)
    if name.startswith("srwm"):
        w = r(H, D, 3 * D + 4) / D**0.5
        return [r(1, t, H, D)], [w], r(2, H, D, 3 * D + 4) / D**0.5
    if name.startswith("ttt"):
        mlp = name.startswith("ttt_mlp")
        hid = 4 * D if mlp else D
        params = [0.3 * r(H, D, hid), 0.1 * r(H, 1, hid)]
        if mlp:
            params += [0.3 * r(H, hid, D), 0.1 * r(H, 1, D)]
        seqs = [r(1, t, H, D), r(1, t, H, D), r(1, t, H, D), torch.sigmoid(r(1, t, H)) / D]
        token_scale = 1.0 / torch.arange(1, 17, dtype=F64)
        names = ["W1", "b1", "W2", "b2"][: len(params)]
        rows = []  # a list of per-sequence states: carried states of distinct prefixes (offset 0)
        for _ in range(2):
            row = ops.ttt.ttt_initial_state(dict(zip(names, params, strict=True)), 1)
            moved = {k: v + 0.05 * torch.randn_like(v) for k, v in row.items() if k.endswith("_states")}
            rows.append({**row, **moved})
        return seqs, [token_scale, *params, 1 + 0.1 * r(H, D), 0.1 * r(H, D)], rows
    q, k = torch.softmax(r(1, t, H, D), -1), torch.softmax(r(1, t, H, D), -1)
    seqs = [q, k, r(1, t, H, D)]
    if name.startswith("delta"):
        seqs.append(torch.sigmoid(r(1, t, H)))
    return seqs, [], r(2, H, D, D)


OP_NAMES = [
    "srwm",
    "srwm_reference",
    "delta_rule",
    "delta_rule_reference",
    "linear_attention",
    "linear_attention_reference",
    "ttt_linear",
    "ttt_linear_reference",
    "ttt_mlp",
]


def _call(name, seqs, extra, **kw):
    op = getattr(ops, name)
    if name.startswith("srwm"):
        return op(seqs[0], *extra, **kw)
    if name.startswith("ttt"):
        return op(*seqs, *extra, **kw)
    return op(*seqs, **kw)


@pytest.mark.parametrize("with_state", [False, True])
@pytest.mark.parametrize("name", OP_NAMES)
def test_packed_op_equals_separate_runs_with_gradients(name, with_state):
    seqs, extra, state = _op_case(name)
    if not with_state:
        state = None
    leaves = [s.requires_grad_(True) for s in seqs] + [t.requires_grad_(True) for t in state_tensors(state)]
    out, final = _call(name, seqs, extra, initial_state=state, output_final_state=True, cu_seqlens=CU)
    assert out.shape[:2] == (1, sum(LENGTHS))
    outs, finals = [], []
    for i, (a, b) in enumerate([(0, 17), (17, 40)]):
        s_i = None if state is None else (state[i] if isinstance(state, list) else state[i : i + 1])
        o, f = _call(name, [z[:, a:b] for z in seqs], extra, initial_state=s_i, output_final_state=True)
        outs.append(o)
        finals.append(f)
    expected = torch.cat(outs, 1)
    torch.testing.assert_close(out, expected, rtol=0, atol=1e-12)
    expected_final = stack_states(finals)
    for u, v in zip(state_tensors(final), state_tensors(expected_final), strict=True):
        torch.testing.assert_close(u, v, rtol=0, atol=1e-12)
    g_out = torch.randn_like(out)
    loss = (out * g_out).sum() + sum(t.sum() for t in state_tensors(final))
    loss_ref = (expected * g_out).sum() + sum(t.sum() for t in state_tensors(expected_final))
    got = torch.autograd.grad(loss, leaves, allow_unused=True, materialize_grads=True)
    want = torch.autograd.grad(loss_ref, leaves, allow_unused=True, materialize_grads=True)
    for u, v in zip(got, want, strict=True):
        torch.testing.assert_close(u, v, rtol=0, atol=1e-12)


def test_packing_differs_from_one_unpacked_call():
    """The second sequence restarts from its own state: packing is not a plain long call."""
    seqs, extra, _ = _op_case("delta_rule")
    packed, _ = _call("delta_rule", seqs, extra, cu_seqlens=CU)
    plain, _ = _call("delta_rule", seqs, extra)
    torch.testing.assert_close(packed[:, :17], plain[:, :17])
    assert (packed[:, 17:] - plain[:, 17:]).abs().max() > 1e-3


def test_ttt_final_states_with_different_offsets_come_back_as_a_list():
    seqs, extra, _ = _op_case("ttt_linear")
    _, final = _call("ttt_linear", seqs, extra, output_final_state=True, cu_seqlens=CU)
    assert isinstance(final, list) and [f["offset"] for f in final] == [17 % 16, 23 % 16]
    _, same = _call("ttt_linear", seqs, extra, output_final_state=True, cu_seqlens=[0, 20, 40])
    assert isinstance(same, dict) and same["W1_states"].shape[0] == 2


def _layer(name):
    return make_sequence_layer(name, 8, 2).double().eval()


def _first_rows(state, i, name):
    return select_state(state, i, batch_dim=1 if name == "lstm" else 0)


@pytest.mark.parametrize("with_state", [False, True])
@pytest.mark.parametrize("name", SEQUENCE_LAYERS)
def test_packed_layer_equals_separate_runs(name, with_state):
    layer = _layer(name)
    x = torch.randn(1, 40, 8, dtype=F64, requires_grad=True)
    state = None
    if with_state:
        with torch.no_grad():
            _, state = layer(torch.randn(2, 5, 8, dtype=F64))
    out, final = layer(x, state, cu_seqlens=CU)
    outs, finals = [], []
    for i, (a, b) in enumerate([(0, 17), (17, 40)]):
        o, f = layer(x[:, a:b], None if state is None else _first_rows(state, i, name))
        outs.append(o)
        finals.append(f)
    expected = torch.cat(outs, 1)
    torch.testing.assert_close(out, expected, rtol=0, atol=1e-12)
    expected_final = stack_states(finals, batch_dim=1 if name == "lstm" else 0)
    for u, v in zip(state_tensors(final), state_tensors(expected_final), strict=True):
        torch.testing.assert_close(u, v, rtol=0, atol=1e-12)
    g = torch.randn_like(out)
    (gx,) = torch.autograd.grad((out * g).sum(), x)
    (gx_ref,) = torch.autograd.grad((expected * g).sum(), x)
    torch.testing.assert_close(gx, gx_ref, rtol=0, atol=1e-12)


@pytest.mark.parametrize(
    ("cu", "match"),
    [
        ([0, 17, 41], r"cu_seqlens: expected \[0, …, 40\]"),
        ([1, 17, 40], r"cu_seqlens: expected \[0, …, 40\]"),
        ([0, 17, 17, 40], "cu_seqlens: expected strictly increasing"),
        ([0, 30, 17, 40], "cu_seqlens: expected strictly increasing"),
        (torch.tensor([[0, 40]]), "cu_seqlens: expected a 1-D integer tensor"),
        (torch.tensor([0.0, 40.0]), "cu_seqlens: expected a 1-D integer tensor"),
        ("0,40", "cu_seqlens: expected a 1-D integer tensor"),
    ],
)
def test_bad_cu_seqlens_raise_value_error(cu, match):
    seqs, extra, _ = _op_case("srwm")
    with pytest.raises(ValueError, match=match):
        _call("srwm", seqs, extra, cu_seqlens=cu)
    with pytest.raises(ValueError, match=match):
        _layer("deltanet")(torch.randn(1, 40, 8, dtype=F64), cu_seqlens=cu)


def test_packed_input_needs_batch_one_and_one_state_row_per_sequence():
    with pytest.raises(ValueError, match="x: packed sequences"):
        check_cu_seqlens([0, 40], 40, 2)
    layer = _layer("srwm")
    x = torch.randn(1, 40, 8, dtype=F64)
    with torch.no_grad():
        _, state = layer(torch.randn(3, 5, 8, dtype=F64))
    with pytest.raises(ValueError, match="initial_state: expected batch size 2"):
        layer(x, state, cu_seqlens=CU)
    with pytest.raises(ValueError, match="initial_state: expected one state per packed sequence"):
        layer(x, [state[:1]], cu_seqlens=CU)
