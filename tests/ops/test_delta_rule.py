from __future__ import annotations

import pytest
import torch

from fastweights.ops import delta_rule, delta_rule_reference
from tests.conftest import load_golden

OPS = [delta_rule, delta_rule_reference]


def _random_case(b=2, t=5, h=2, d=4, dtype=torch.float64, state=False):
    q = torch.randn(b, t, h, d, dtype=dtype)
    k = torch.nn.functional.normalize(torch.randn(b, t, h, d, dtype=dtype), dim=-1)
    v = torch.randn(b, t, h, d, dtype=dtype)
    beta = torch.sigmoid(torch.randn(b, t, h, dtype=dtype))
    s = torch.randn(b, h, d, d, dtype=dtype) if state else None
    return q, k, v, beta, s


def _run(op, q, k, v, beta, s, **kw):
    return op(q, k, v, beta, initial_state=s, output_final_state=True, **kw)


def test_worked_example_output_is_read_after_the_update():
    # one head, D = 2, key e1, value [3, 5], beta 0.5, from zeros: S = 0.5 * outer(e1, [3, 5]);
    # a query e1 reads the *updated* row: [1.5, 2.5]. A second identical step halves the error again.
    q = k = torch.tensor([1.0, 0.0], dtype=torch.float64).reshape(1, 1, 1, 2).repeat(1, 2, 1, 1)
    v = torch.tensor([3.0, 5.0], dtype=torch.float64).reshape(1, 1, 1, 2).repeat(1, 2, 1, 1)
    beta = torch.full((1, 2, 1), 0.5, dtype=torch.float64)
    for op in OPS:
        o, s = op(q, k, v, beta, output_final_state=True)
        assert o[0, 0, 0].tolist() == pytest.approx([1.5, 2.5])
        assert o[0, 1, 0].tolist() == pytest.approx([2.25, 3.75])
        torch.testing.assert_close(s[0, 0], torch.tensor([[2.25, 3.75], [0.0, 0.0]], dtype=torch.float64))


@pytest.mark.parametrize("t", [1, 15, 16, 17, 37, 64, 257])
@pytest.mark.parametrize("with_state", [False, True])
def test_chunked_equals_reference_fp64(t, with_state):
    q, k, v, beta, s = _random_case(t=t, state=with_state)
    tensors = [q, k, v, beta] + ([s] if with_state else [])
    for z in tensors:
        z.requires_grad_(True)
    go = torch.randn(q.shape, dtype=q.dtype)
    gs = torch.randn(2, 2, 4, 4, dtype=q.dtype)
    results = []
    for op, kw in ((delta_rule, {"chunk_size": 16}), (delta_rule_reference, {})):
        o, fs = _run(op, q, k, v, beta, s, **kw)
        results.append((o, fs, torch.autograd.grad((o * go).sum() + (fs * gs).sum(), tensors)))
    (o0, s0, g0), (o1, s1, g1) = results
    torch.testing.assert_close(o0, o1, rtol=0, atol=1e-12)
    torch.testing.assert_close(s0, s1, rtol=0, atol=1e-12)
    for a, b in zip(g0, g1, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-11)


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("split", [1, 7, 16, 36])
def test_carried_state_equals_one_call(op, split):
    q, k, v, beta, s = _random_case(t=37, state=True)
    tensors = (q, k, v, beta, s)
    for z in tensors:
        z.requires_grad_(True)
    kw = {"chunk_size": 16} if op is delta_rule else {}
    go = torch.randn(q.shape, dtype=q.dtype)
    o, fs = _run(op, q, k, v, beta, s, **kw)
    loss_one = (o * go).sum() + fs.square().sum()
    a = [z[:, :split] for z in (q, k, v, beta)]
    b = [z[:, split:] for z in (q, k, v, beta)]
    o_a, s_a = _run(op, *a, s, **kw)
    o_b, s_b = _run(op, *b, s_a, **kw)
    o2 = torch.cat([o_a, o_b], dim=1)
    loss_two = (o2 * go).sum() + s_b.square().sum()
    torch.testing.assert_close(o, o2, rtol=0, atol=1e-12)
    torch.testing.assert_close(fs, s_b, rtol=0, atol=1e-12)
    for g1, g2 in zip(
        torch.autograd.grad(loss_one, tensors), torch.autograd.grad(loss_two, tensors), strict=True
    ):
        torch.testing.assert_close(g1, g2, rtol=0, atol=1e-11)


@pytest.mark.parametrize("op", OPS)
def test_gradcheck_tiny_fp64(op):
    q, k, v, beta, s = _random_case(b=1, t=5, h=2, d=3, state=True)
    inputs = tuple(z.requires_grad_(True) for z in (q, k, v, beta, s))
    kw = {"chunk_size": 2} if op is delta_rule else {}  # several chunks and a partial last one

    def fn(q, k, v, beta, s):
        return _run(op, q, k, v, beta, s, **kw)

    assert torch.autograd.gradcheck(fn, inputs, eps=1e-6, atol=1e-7)


def _golden_inputs(case):
    def bthd(x):  # golden layout [B, H, L, D] -> [B, L, H, D]
        return x.transpose(1, 2).contiguous().requires_grad_(True)

    q, k, v = bthd(case["q"]), bthd(case["k"]), bthd(case["v"])
    beta = case["beta"][..., 0].transpose(1, 2).contiguous().requires_grad_(True)  # [B, H, L, 1] -> [B, L, H]
    return q, k, v, beta, case["W0"].clone().requires_grad_(True)


@pytest.mark.parametrize("name", ["L1", "L7", "L40"])
@pytest.mark.parametrize("op", OPS)
def test_golden_recurrence(name, op):
    case = load_golden("deltanet/recurrence.pt")["cases"][name]
    q, k, v, beta, w0 = _golden_inputs(case)
    kw = {"chunk_size": 16} if op is delta_rule else {}
    o, fs = _run(op, q, k, v, beta, w0, **kw)
    torch.testing.assert_close(o.transpose(1, 2), case["out"], rtol=0, atol=1e-10)
    torch.testing.assert_close(fs, case["W_final"], rtol=0, atol=1e-10)
    loss = (o.transpose(1, 2) * case["grad_out_weight"]).sum() + (fs * case["grad_W_final_weight"]).sum()
    torch.testing.assert_close(loss, case["loss"], rtol=1e-12, atol=1e-10)
    gq, gk, gv, gb, gw0 = torch.autograd.grad(loss, (q, k, v, beta, w0))
    grads = case["grads"]
    for ours, ref in ((gq, "q"), (gk, "k"), (gv, "v")):
        torch.testing.assert_close(ours.transpose(1, 2), grads[ref], rtol=0, atol=1e-10, msg=ref)
    torch.testing.assert_close(gb.transpose(1, 2).unsqueeze(-1), grads["beta"], rtol=0, atol=1e-10)
    # true gradient of the initial state (the reference CUDA kernel returns none)
    torch.testing.assert_close(gw0, grads["W0"], rtol=0, atol=1e-10)


@pytest.mark.parametrize("op", OPS)
def test_golden_recurrence_fp32(op):
    case = load_golden("deltanet/recurrence.pt")["cases"]["L40"]
    q, k, v, beta, w0 = (z.detach().float() for z in _golden_inputs(case))
    o, fs = _run(op, q, k, v, beta, w0)
    assert o.dtype == torch.float32 and fs.dtype == torch.float32
    torch.testing.assert_close(o.transpose(1, 2).double(), case["out"], rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(fs.double(), case["W_final"], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("chunk_size", [16, 64])
def test_unnormalised_keys_half_precision_no_nan(dtype, chunk_size):
    """Keys of norm 10 with beta = 1 make ``I - beta k^T k`` expansive (eigenvalue -99): the state grows
    fast. Half inputs are computed in float32 internally, so nothing turns into NaN (an fp16 output may
    overflow to Inf once values pass 65504 — that is the output dtype's range, not the computation)."""
    b, t, h, d = 2, 16, 2, 8
    q = torch.randn(b, t, h, d).to(dtype)
    k = (10 * torch.nn.functional.normalize(torch.randn(b, t, h, d), dim=-1)).to(dtype)
    v = torch.randn(b, t, h, d).to(dtype)
    beta = torch.ones(b, t, h, dtype=dtype)
    o, fs = delta_rule(q, k, v, beta, output_final_state=True, chunk_size=chunk_size)
    assert o.dtype == dtype and fs.dtype == torch.float32
    assert not o.isnan().any() and torch.isfinite(fs).all()
    ref_o, ref_s = delta_rule_reference(*(z.float() for z in (q, k, v, beta)), output_final_state=True)
    assert torch.isfinite(ref_o).all() and torch.isfinite(ref_s).all()
    ref_half, _ = delta_rule_reference(q, k, v, beta)
    assert ref_half.dtype == dtype and not ref_half.isnan().any()
    # computed in float32 internally: wherever the value fits the output dtype it is the fp32 reference up
    # to output rounding (bf16 keeps the fp32 range; fp16 overflows after a few steps), and the float32
    # state matches the reference's
    fits = ref_o.abs() < torch.finfo(dtype).max / 2
    assert fits[:, :2].all()
    rel = (o.float() - ref_o).abs() / (ref_o.abs() + 1.0)
    assert rel[fits].max() < 1e-2
    torch.testing.assert_close(fs / ref_s.abs().max(), ref_s / ref_s.abs().max(), rtol=0, atol=1e-4)


def test_autocast_keeps_state_float32():
    q, k, v, beta, s = _random_case(t=9, dtype=torch.float32, state=True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        o, fs = _run(delta_rule, q, k, v, beta, s, chunk_size=4)
    ref_o, ref_s = _run(delta_rule_reference, q, k, v, beta, s)
    assert o.dtype == torch.float32 and fs.dtype == torch.float32
    torch.testing.assert_close(o, ref_o, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(fs, ref_s, rtol=1e-5, atol=1e-5)


def test_value_dim_may_differ_and_empty_sequence_returns_initial_state():
    q, k, _, beta, _ = _random_case(t=5, d=4)
    v = torch.randn(2, 5, 2, 3, dtype=torch.float64)
    o, fs = _run(delta_rule, q, k, v, beta, None, chunk_size=2)
    ref_o, ref_s = _run(delta_rule_reference, q, k, v, beta, None)
    assert o.shape == (2, 5, 2, 3) and fs.shape == (2, 2, 4, 3)
    torch.testing.assert_close(o, ref_o)
    torch.testing.assert_close(fs, ref_s)
    for op in OPS:
        o0, s0 = _run(op, q[:, :0], k[:, :0], v[:, :0], beta[:, :0], fs)
        assert o0.shape == (2, 0, 2, 3)
        torch.testing.assert_close(s0, fs)


@pytest.mark.parametrize("op", OPS)
def test_bad_inputs_raise_value_error_naming_argument(op):
    q, k, v, beta, s = _random_case(state=True)
    with pytest.raises(ValueError, match="q: expected a 4-D"):
        op(q[0], k, v, beta)
    with pytest.raises(ValueError, match="q: expected a floating-point"):
        op(q.long(), k, v, beta)
    with pytest.raises(ValueError, match="k: expected shape"):
        op(q, k[..., :-1], v, beta)
    with pytest.raises(ValueError, match="v: expected shape"):
        op(q, k, v[:, :, :1], beta)
    with pytest.raises(ValueError, match="beta: expected shape"):
        op(q, k, v, beta.unsqueeze(-1))
    with pytest.raises(ValueError, match="k: expected heads|k: expected shape"):
        op(q, k[:, :, :1], v, beta)
    with pytest.raises(ValueError, match="v: expected dtype"):
        op(q, k, v.float(), beta)
    with pytest.raises(ValueError, match="initial_state: expected shape"):
        op(q, k, v, beta, initial_state=s[:1])
    bad = v.clone()
    bad[0, 1, 0, 2] = float("nan")
    with pytest.raises(ValueError, match="v: expected finite"):
        op(q, k, bad, beta)
    bad_beta = beta.clone()
    bad_beta[1, 0, 1] = float("inf")
    with pytest.raises(ValueError, match="beta: expected finite"):
        op(q, k, v, bad_beta)
    bad_s = s.clone()
    bad_s[0, 0, 0, 0] = float("-inf")
    with pytest.raises(ValueError, match="initial_state: expected finite"):
        op(q, k, v, beta, initial_state=bad_s)


def test_bad_chunk_size():
    q, k, v, beta, _ = _random_case()
    for bad in (0, -3, 2.0, True):
        with pytest.raises(ValueError, match="chunk_size: expected an int >= 1"):
            delta_rule(q, k, v, beta, chunk_size=bad)


@pytest.mark.parametrize("with_state", [False, True])
def test_read_equals_independent_one_step_calls(with_state):
    from fastweights.ops import delta_rule_read

    q, k, v, beta, s = _random_case(t=6, state=with_state)
    o = delta_rule_read(q, k, v, beta, state=s)
    for i in range(q.shape[1]):
        step = slice(i, i + 1)
        expected, _ = delta_rule_reference(q[:, step], k[:, step], v[:, step], beta[:, step], initial_state=s)
        torch.testing.assert_close(o[:, i], expected[:, 0], rtol=0, atol=1e-12)
    half = delta_rule_read(*(z.bfloat16() for z in (q, k, v, beta)), state=None if s is None else s.float())
    assert half.dtype == torch.bfloat16
    with pytest.raises(ValueError, match="initial_state: expected shape"):
        delta_rule_read(q, k, v, beta, state=torch.zeros(2, 2, 4, 3, dtype=q.dtype))
