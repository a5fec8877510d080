from __future__ import annotations

import pytest
import torch

from fastweights.layers.srwm import pack_srwm_blocks
from fastweights.ops import srwm, srwm_read, srwm_reference
from tests.conftest import load_golden

OPS = [srwm, srwm_reference]


def _random_case(b=2, t=5, h=3, e=4, dtype=torch.float64, state=False):
    x = torch.randn(b, t, h, e, dtype=dtype)
    w = torch.randn(h, e, 3 * e + 4, dtype=dtype) / e**0.5
    s = torch.randn(b, h, e, 3 * e + 4, dtype=dtype) / e**0.5 if state else None
    return x, w, s


@pytest.mark.parametrize("op", OPS)
def test_worked_example_key_row_moves_towards_query_row(op):
    # E = 2; x = e1 selects row 0 of every block. Key logits [20, -20] -> k ~ e1, query ~ e2,
    # beta logits 0 -> eta = 0.5. Column 0 of W^y is [1, 3]: the keyed entry moves halfway to the
    # queried one, giving [2, 3]; the output of step 1 is read before the update.
    e = 2
    w = torch.zeros(1, e, 3 * e + 4, dtype=torch.float64)
    w[0, :, 0] = torch.tensor([1.0, 3.0])
    w[0, 0, e : 2 * e] = torch.tensor([-20.0, 20.0])  # query logits
    w[0, 0, 2 * e : 3 * e] = torch.tensor([20.0, -20.0])  # key logits
    x = torch.tensor([1.0, 0.0], dtype=torch.float64).reshape(1, 1, 1, e).repeat(1, 2, 1, 1)
    y, state = op(x, w, output_final_state=True)
    assert y[0, 0, 0, 0].item() == pytest.approx(1.0)
    assert y[0, 1, 0, 0].item() == pytest.approx(2.0, abs=1e-8)
    # two updates: [1,3] -> [2,3] -> [2.5,3]
    assert state[0, 0, :, 0].tolist() == pytest.approx([2.5, 3.0], abs=1e-8)
    y1, state1 = op(x[:, :1], w, output_final_state=True)
    assert state1[0, 0, :, 0].tolist() == pytest.approx([2.0, 3.0], abs=1e-8)


@pytest.mark.parametrize("t", [1, 2, 7, 15, 16, 17, 37, 64, 65])
@pytest.mark.parametrize("with_state", [False, True])
def test_fused_equals_reference_fp64(t, with_state):
    x, w, s = _random_case(t=t, state=with_state)
    tensors = [x, s] if with_state else [x, w]  # with a state, the slow weights are not read
    for z in tensors:
        z.requires_grad_(True)
    gy = torch.randn(x.shape, dtype=x.dtype)
    gs = torch.randn(2, 3, 4, 16, dtype=x.dtype)
    results = []
    for op in OPS:
        y, fs = op(x, w, initial_state=s, output_final_state=True)
        grads = torch.autograd.grad((y * gy).sum() + (fs * gs).sum(), tensors)
        results.append((y, fs, grads))
    (y0, s0, g0), (y1, s1, g1) = results
    torch.testing.assert_close(y0, y1, rtol=0, atol=1e-12)
    torch.testing.assert_close(s0, s1, rtol=0, atol=1e-12)
    for a, b in zip(g0, g1, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-11)


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("split", [1, 7, 16, 36])
def test_carried_state_equals_one_call(op, split):
    x, w, s = _random_case(t=37, state=True)
    for z in (x, s):
        z.requires_grad_(True)
    gy = torch.randn(x.shape, dtype=x.dtype)
    y, fs = op(x, w, initial_state=s, output_final_state=True)
    loss_one = (y * gy).sum() + fs.square().sum()
    y_a, s_a = op(x[:, :split], w, initial_state=s, output_final_state=True)
    y_b, s_b = op(x[:, split:], w, initial_state=s_a, output_final_state=True)
    y2 = torch.cat([y_a, y_b], dim=1)
    loss_two = (y2 * gy).sum() + s_b.square().sum()
    torch.testing.assert_close(y, y2, rtol=0, atol=1e-12)
    torch.testing.assert_close(fs, s_b, rtol=0, atol=1e-12)
    g1 = torch.autograd.grad(loss_one, (x, s))
    g2 = torch.autograd.grad(loss_two, (x, s))
    for a, b in zip(g1, g2, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-11)


@pytest.mark.parametrize("op", OPS)
def test_gradcheck_tiny_fp64(op):
    x, w, s = _random_case(b=1, t=3, h=2, e=2, state=True)
    for z in (x, w, s):
        z.requires_grad_(True)

    def fn(x, w, s):
        y, fs = op(x, w, initial_state=s, output_final_state=True)
        return y, fs

    assert torch.autograd.gradcheck(fn, (x, w, s), eps=1e-6, atol=1e-7)


@pytest.mark.parametrize("name", ["L1", "L7", "L40"])
@pytest.mark.parametrize("op", OPS)
def test_golden_recurrence(name, op):
    case = load_golden("srwm/recurrence.pt")["cases"][name]
    blocks = ("W_y", "W_q", "W_k", "w_b")
    x = case["x"].permute(0, 2, 1, 3).contiguous().requires_grad_(True)  # [B, H, L, E] -> [B, L, H, E]
    w0 = pack_srwm_blocks(*(case["W0"][k] for k in blocks)).requires_grad_(True)
    e = x.shape[-1]
    weight = torch.zeros(x.shape[2], e, 3 * e + 4, dtype=x.dtype)  # unused: initial_state given
    y, fs = op(x, weight, initial_state=w0, output_final_state=True)
    torch.testing.assert_close(y.permute(0, 2, 1, 3), case["y"], rtol=0, atol=1e-10)
    torch.testing.assert_close(
        fs, pack_srwm_blocks(*(case["W_final"][k] for k in blocks)), rtol=0, atol=1e-10
    )
    gw = pack_srwm_blocks(*(case["grad_W_final_weight"][k] for k in blocks))
    loss = (y.permute(0, 2, 1, 3) * case["grad_y_weight"]).sum() + (fs * gw).sum()
    torch.testing.assert_close(loss, case["loss"], rtol=1e-12, atol=1e-10)
    gx, gw0 = torch.autograd.grad(loss, (x, w0))
    torch.testing.assert_close(gx.permute(0, 2, 1, 3), case["grad_x"], rtol=0, atol=1e-10)
    torch.testing.assert_close(
        gw0, pack_srwm_blocks(*(case["grad_W0"][k] for k in blocks)), rtol=0, atol=1e-10
    )


def test_golden_recurrence_fp32():
    case = load_golden("srwm/recurrence.pt")["cases"]["L40"]
    blocks = ("W_y", "W_q", "W_k", "w_b")
    x = case["x"].permute(0, 2, 1, 3).float()
    w0 = pack_srwm_blocks(*(case["W0"][k] for k in blocks)).float()
    y, fs = srwm(x, torch.zeros(4, 8, 28), initial_state=w0, output_final_state=True)
    torch.testing.assert_close(y.permute(0, 2, 1, 3).double(), case["y"], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("with_state", [False, True])
def test_read_equals_independent_one_step_calls(with_state):
    x, w, s = _random_case(t=6, state=with_state)
    y = srwm_read(x, w, state=s)
    for q in range(x.shape[1]):
        y_q, _ = srwm_reference(x[:, q : q + 1], w, initial_state=s)
        torch.testing.assert_close(y[:, q], y_q[:, 0], rtol=0, atol=1e-12)


def test_output_is_read_before_update_and_last_step_updates_state():
    x, w, _ = _random_case(t=1)
    y, fs = srwm(x, w, output_final_state=True)
    torch.testing.assert_close(y[:, 0], torch.einsum("bhe,hem->bhm", x[:, 0], w[..., :4]))
    assert not torch.allclose(fs, w.expand_as(fs))


@pytest.mark.parametrize("op", OPS)
def test_bad_inputs_raise_value_error_naming_argument(op):
    x, w, s = _random_case(state=True)
    with pytest.raises(ValueError, match="x: expected a 4-D"):
        op(x[0], w)
    with pytest.raises(ValueError, match="weight: expected shape"):
        op(x, w[..., :-1])
    with pytest.raises(ValueError, match="weight: expected dtype"):
        op(x, w.float())
    with pytest.raises(ValueError, match="initial_state: expected shape"):
        op(x, w, initial_state=s[:1])
    with pytest.raises(ValueError, match="x: expected a floating-point"):
        op(x.long(), w)


def _call_srwm_op(name, x, w, s, x_read):
    from fastweights.ops.srwm import srwm_with_reads

    if name == "srwm_read":
        return srwm_read(x, w, state=s)
    if name == "srwm_with_reads":
        return srwm_with_reads(x, x_read, w, initial_state=s)
    return {"srwm": srwm, "srwm_reference": srwm_reference}[name](x, w, initial_state=s)


_OP_ARGUMENTS = [
    (name, argument)
    for name in ("srwm", "srwm_reference", "srwm_read", "srwm_with_reads")
    for argument in ("x", "weight", "initial_state") + (("x_read",) if name == "srwm_with_reads" else ())
]


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -float("inf")])
@pytest.mark.parametrize(("name", "argument"), _OP_ARGUMENTS)
def test_non_finite_inputs_raise_value_error_naming_the_argument(name, argument, value):
    """``srwm_read`` reports its ``state`` as ``initial_state``, as for its other state errors."""
    x, w, s = _random_case(state=True)
    args = {"x": x, "weight": w, "initial_state": s, "x_read": torch.randn_like(x)}
    args[argument] = args[argument].clone()
    args[argument].view(-1)[7] = value
    with pytest.raises(ValueError, match=rf"^{argument}: expected finite values, got NaN or Inf$"):
        _call_srwm_op(name, args["x"], args["weight"], args["initial_state"], args["x_read"])
    clean = _call_srwm_op(name, x, w, s, torch.randn_like(x))  # the same call with finite inputs runs
    outputs = clean if isinstance(clean, tuple) else (clean,)
    assert all(bool(torch.isfinite(t).all()) for t in outputs if t is not None)


@pytest.mark.parametrize("with_state", [False, True])
def test_with_reads_equals_reads_of_intermediate_states(with_state):
    from fastweights.ops.srwm import srwm_with_reads

    x, w, s = _random_case(t=6, state=with_state)
    x_read = torch.randn_like(x)
    y, y_read, fs = srwm_with_reads(x, x_read, w, initial_state=s)
    y_ref, fs_ref = srwm_reference(x, w, initial_state=s, output_final_state=True)
    torch.testing.assert_close(y, y_ref, rtol=0, atol=1e-12)
    torch.testing.assert_close(fs, fs_ref, rtol=0, atol=1e-12)
    for t in range(x.shape[1]):
        _, st = srwm_reference(x[:, :t], w, initial_state=s, output_final_state=True) if t else (None, s)
        expected, _ = srwm_reference(x_read[:, t : t + 1], w, initial_state=st)
        torch.testing.assert_close(y_read[:, t], expected[:, 0], rtol=0, atol=1e-12)
    with pytest.raises(ValueError, match="x_read: expected shape"):
        srwm_with_reads(x, x_read[:, :2], w)


def test_gradcheck_with_reads_tiny_fp64():
    from fastweights.ops.srwm import srwm_with_reads

    x, w, s = _random_case(b=1, t=3, h=2, e=2, state=True)
    x_read = torch.randn_like(x)
    for z in (x, x_read, s):
        z.requires_grad_(True)
    assert torch.autograd.gradcheck(
        lambda x, r, s: srwm_with_reads(x, r, w, initial_state=s), (x, x_read, s), eps=1e-6, atol=1e-7
    )


@pytest.mark.parametrize("t", [9, 65, 130])
def test_with_reads_values_and_gradients_across_chunk_boundaries_fp64(t):
    """Reads and their gradients equal a reference built from per-step reference calls."""
    from fastweights.ops.srwm import srwm_with_reads

    x, w, s = _random_case(b=1, t=t, h=2, e=3, state=True)
    x_read = torch.randn_like(x)
    g_y, g_r = torch.randn_like(x), torch.randn_like(x)
    leaves = [z.requires_grad_(True) for z in (x, x_read, s)]

    y, y_read, fs = srwm_with_reads(x, x_read, w, initial_state=s)
    grads = torch.autograd.grad((y * g_y).sum() + (y_read * g_r).sum() + fs.sum(), leaves)

    state, ys, reads = s, [], []
    for i in range(t):
        reads.append(srwm_reference(x_read[:, i : i + 1], w, initial_state=state)[0])
        y_i, state = srwm_reference(x[:, i : i + 1], w, initial_state=state, output_final_state=True)
        ys.append(y_i)
    y_ref, r_ref = torch.cat(ys, 1), torch.cat(reads, 1)
    ref_grads = torch.autograd.grad((y_ref * g_y).sum() + (r_ref * g_r).sum() + state.sum(), leaves)
    torch.testing.assert_close(y_read, r_ref, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(fs, state, rtol=1e-10, atol=1e-10)
    for a, b in zip(grads, ref_grads, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("t", [1, 15, 16, 17, 37, 64, 257])
def test_fast_path_long_sequences_fp64(t):
    """The reversal backward has no chunks: exact for any length, from the slow weights."""
    x, w, _ = _random_case(b=1, t=t, h=2, e=4)
    x.requires_grad_(True)
    w.requires_grad_(True)
    gy = torch.randn(x.shape, dtype=x.dtype)
    results = []
    for op in OPS:
        y, fs = op(x, w, output_final_state=True)
        results.append((y, fs, torch.autograd.grad((y * gy).sum() + fs.sum(), (x, w))))
    (y0, s0, g0), (y1, s1, g1) = results
    torch.testing.assert_close(y0, y1, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(s0, s1, rtol=1e-10, atol=1e-10)
    for a, b in zip(g0, g1, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-9)


def test_fast_path_does_not_modify_inputs_and_saves_no_weight_history():
    x, w, s = _random_case(b=2, t=9, h=2, e=4, state=True)
    s0 = s.clone()
    s.requires_grad_(True)
    y, fs = srwm(x, w, initial_state=s, output_final_state=True)
    torch.testing.assert_close(s.detach(), s0, rtol=0, atol=0)
    saved = [t for t in y.grad_fn.saved_tensors if t is not None]
    # O(T*E) vectors plus one final matrix: nothing of size T*E*(3E+4) (the per-step weight history)
    assert len(saved) >= 4 and all(t.numel() < 9 * 4 * 16 * 2 for t in saved)


# --- a y block of width d_out != E (SR-Delta generates DeltaNet's q, k, v, beta with d_out = 3E+1) ---


def _wide_case(b=2, t=5, h=2, e=3, d_out=10, state=False):
    c = d_out + 2 * e + 4
    x = torch.randn(b, t, h, e, dtype=torch.float64)
    w = torch.randn(h, e, c, dtype=torch.float64) / e**0.5
    s = torch.randn(b, h, e, c, dtype=torch.float64) / e**0.5 if state else None
    return x, w, s


def test_num_columns_and_rate_map_of_a_wide_y_block():
    from fastweights.ops.srwm import srwm_num_columns
    from fastweights.ops.srwm_autograd import _rate_matrix

    assert srwm_num_columns(4) == 16 and srwm_num_columns(4, 4) == 16 and srwm_num_columns(4, 13) == 25
    rates = _rate_matrix(3, 10, torch.float64, torch.device("cpu"))
    assert rates.shape == (4, 20)
    assert rates.sum(dim=1).tolist() == [10.0, 3.0, 3.0, 4.0]  # y | q | k | beta columns
    assert rates[0, :10].all() and rates[1, 10:13].all() and rates[2, 13:16].all() and rates[3, 16:].all()


@pytest.mark.parametrize("d_out", [1, 2, 10])
@pytest.mark.parametrize("t", [1, 17, 65, 130])
@pytest.mark.parametrize("with_state", [False, True])
def test_wide_y_block_fast_path_equals_reference_fp64(d_out, t, with_state):
    x, w, s = _wide_case(b=1, t=t, d_out=d_out, state=with_state)
    leaves = [x, s] if with_state else [x, w]
    for z in leaves:
        z.requires_grad_(True)
    gy = torch.randn(1, t, 2, d_out, dtype=x.dtype)
    gs = torch.randn(1, 2, 3, d_out + 10, dtype=x.dtype)
    results = []
    for op in OPS:
        y, fs = op(x, w, initial_state=s, output_final_state=True, d_out=d_out)
        assert y.shape == (1, t, 2, d_out) and fs.shape == (1, 2, 3, d_out + 10)
        results.append((y, fs, torch.autograd.grad((y * gy).sum() + (fs * gs).sum(), leaves)))
    (y0, s0, g0), (y1, s1, g1) = results
    torch.testing.assert_close(y0, y1, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(s0, s1, rtol=1e-10, atol=1e-10)
    for a, b in zip(g0, g1, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-9)


def test_wide_y_block_reference_is_the_paper_recurrence():
    """One step by hand: y = x W^y (pre-update), every block moves by beta_j k ⊗ (q - k) W^*."""
    x, w, _ = _wide_case(b=1, t=1, h=1, e=3, d_out=5)
    y, fs = srwm_reference(x, w, output_final_state=True, d_out=5)
    xt = x[0, 0, 0]
    torch.testing.assert_close(y[0, 0, 0], xt @ w[0, :, :5])
    q, k = torch.softmax(xt @ w[0, :, 5:8], -1), torch.softmax(xt @ w[0, :, 8:11], -1)
    beta = torch.sigmoid(xt @ w[0, :, 11:])
    cols = torch.repeat_interleave(beta, torch.tensor([5, 3, 3, 4]))
    expected = w[0] + torch.outer(k, cols * ((q - k) @ w[0]))
    torch.testing.assert_close(fs[0, 0], expected, rtol=0, atol=1e-14)


@pytest.mark.parametrize("t", [9, 65, 130])
def test_wide_y_block_with_reads_across_chunk_boundaries_fp64(t):
    from fastweights.ops.srwm import srwm_with_reads

    x, w, s = _wide_case(b=1, t=t, d_out=7, state=True)
    x_read = torch.randn_like(x)
    g_y, g_r = torch.randn(1, t, 2, 7, dtype=x.dtype), torch.randn(1, t, 2, 7, dtype=x.dtype)
    leaves = [z.requires_grad_(True) for z in (x, x_read, s)]
    y, y_read, fs = srwm_with_reads(x, x_read, w, initial_state=s, d_out=7)
    grads = torch.autograd.grad((y * g_y).sum() + (y_read * g_r).sum() + fs.sum(), leaves)
    state, ys, reads = s, [], []
    for i in range(t):
        reads.append(srwm_read(x_read[:, i : i + 1], w, state=state, d_out=7))
        y_i, state = srwm_reference(x[:, i : i + 1], w, initial_state=state, output_final_state=True, d_out=7)
        ys.append(y_i)
    y_ref, r_ref = torch.cat(ys, 1), torch.cat(reads, 1)
    ref_grads = torch.autograd.grad((y_ref * g_y).sum() + (r_ref * g_r).sum() + state.sum(), leaves)
    torch.testing.assert_close(y, y_ref, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(y_read, r_ref, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(fs, state, rtol=1e-10, atol=1e-10)
    for a, b in zip(grads, ref_grads, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("op", OPS)
def test_wide_y_block_gradcheck_tiny_fp64(op):
    from fastweights.ops.srwm import srwm_with_reads

    x, w, s = _wide_case(b=1, t=3, h=2, e=2, d_out=7, state=True)
    x_read = torch.randn_like(x)
    for z in (x, x_read, w, s):
        z.requires_grad_(True)
    assert torch.autograd.gradcheck(
        lambda x, w, s: op(x, w, initial_state=s, output_final_state=True, d_out=7),
        (x, w, s),
        eps=1e-6,
        atol=1e-7,
    )
    assert torch.autograd.gradcheck(
        lambda x, w: op(x, w, output_final_state=True, d_out=7), (x, w), eps=1e-6, atol=1e-7
    )
    assert torch.autograd.gradcheck(
        lambda x, r, s: srwm_with_reads(x, r, w, initial_state=s, d_out=7),
        (x, x_read, s),
        eps=1e-6,
        atol=1e-7,
    )


@pytest.mark.parametrize("op", OPS)
def test_wide_y_block_bad_inputs(op):
    x, w, s = _wide_case(d_out=10, state=True)
    op(x, w, initial_state=s, d_out=10)  # the matching shapes are accepted
    with pytest.raises(ValueError, match="weight: expected shape"):
        op(x, w)  # d_out defaults to E: a 3E+4 weight is expected
    with pytest.raises(ValueError, match="weight: expected shape"):
        op(x, w, d_out=9)
    with pytest.raises(ValueError, match="initial_state: expected shape"):
        op(x, w, initial_state=s[..., :-1], d_out=10)
    for bad in (0, -1, 2.5, True):
        with pytest.raises(ValueError, match="d_out: expected an int >= 1"):
            op(x, w, d_out=bad)


def test_half_precision_and_autocast_keep_state_float32():
    x, w, s = _random_case(t=9, dtype=torch.float32, state=True)
    ref_y, ref_s = srwm_reference(x, w, initial_state=s, output_final_state=True)
    for op in OPS:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y, fs = op(x, w, initial_state=s, output_final_state=True)
        assert y.dtype == torch.float32 and fs.dtype == torch.float32
        torch.testing.assert_close(y, ref_y, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(fs, ref_s, rtol=1e-5, atol=1e-5)
        y16, fs16 = op(x.bfloat16(), w.bfloat16(), initial_state=s, output_final_state=True)
        assert y16.dtype == torch.bfloat16 and fs16.dtype == torch.float32
        torch.testing.assert_close(y16.float(), ref_y, rtol=0.05, atol=0.05)
