from __future__ import annotations

import pytest
import torch

from fastweights.ops import linear_attention, linear_attention_reference

OPS = [linear_attention, linear_attention_reference]


def _random_case(b=2, t=5, h=2, d=4, dv=None, dtype=torch.float64, state=False):
    dv = d if dv is None else dv
    q = torch.randn(b, t, h, d, dtype=dtype)
    k = torch.randn(b, t, h, d, dtype=dtype)
    v = torch.randn(b, t, h, dv, dtype=dtype)
    s = torch.randn(b, h, d, dv, dtype=dtype) if state else None
    return q, k, v, s


def _run(op, q, k, v, s, **kw):
    return op(q, k, v, initial_state=s, output_final_state=True, **kw)


def test_worked_example_is_unnormalised_sum_read_after_the_update():
    # one head, D = 2: k_0 = e1, v_0 = [1, 2]; k_1 = e2, v_1 = [3, 4]; q = [1, 1] reads
    # o_0 = (q.k_0) v_0 = [1, 2] (own update included), o_1 = v_0 + v_1 = [4, 6] (no normalisation)
    q = torch.ones(1, 2, 1, 2, dtype=torch.float64)
    k = torch.eye(2, dtype=torch.float64).reshape(1, 2, 1, 2)
    v = torch.tensor([[1.0, 2.0], [3.0, 4.0]], dtype=torch.float64).reshape(1, 2, 1, 2)
    for op in OPS:
        o, s = op(q, k, v, output_final_state=True)
        assert o[0, :, 0].tolist() == [[1.0, 2.0], [4.0, 6.0]]
        assert s[0, 0].tolist() == [[1.0, 2.0], [3.0, 4.0]]
        assert op(q, k, v)[1] is None


@pytest.mark.parametrize("t", [1, 15, 16, 17, 37, 64, 257])
@pytest.mark.parametrize("with_state", [False, True])
def test_chunked_equals_reference_fp64(t, with_state):
    q, k, v, s = _random_case(t=t, dv=3, state=with_state)
    tensors = [q, k, v] + ([s] if with_state else [])
    for z in tensors:
        z.requires_grad_(True)
    go = torch.randn(2, t, 2, 3, dtype=q.dtype)
    gs = torch.randn(2, 2, 4, 3, dtype=q.dtype)
    results = []
    for op, kw in ((linear_attention, {"chunk_size": 16}), (linear_attention_reference, {})):
        o, fs = _run(op, q, k, v, s, **kw)
        results.append((o, fs, torch.autograd.grad((o * go).sum() + (fs * gs).sum(), tensors)))
    (o0, s0, g0), (o1, s1, g1) = results
    torch.testing.assert_close(o0, o1, rtol=0, atol=1e-11)
    torch.testing.assert_close(s0, s1, rtol=0, atol=1e-11)
    for a, b in zip(g0, g1, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-11)


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("split", [1, 7, 16, 36])
def test_carried_state_equals_one_call(op, split):
    q, k, v, s = _random_case(t=37, state=True)
    tensors = (q, k, v, s)
    for z in tensors:
        z.requires_grad_(True)
    kw = {"chunk_size": 16} if op is linear_attention else {}
    go = torch.randn(q.shape, dtype=q.dtype)
    o, fs = _run(op, q, k, v, s, **kw)
    loss_one = (o * go).sum() + fs.square().sum()
    o_a, s_a = _run(op, q[:, :split], k[:, :split], v[:, :split], s, **kw)
    o_b, s_b = _run(op, q[:, split:], k[:, split:], v[:, split:], s_a, **kw)
    o2 = torch.cat([o_a, o_b], dim=1)
    loss_two = (o2 * go).sum() + s_b.square().sum()
    torch.testing.assert_close(o, o2, rtol=0, atol=1e-11)
    torch.testing.assert_close(fs, s_b, rtol=0, atol=1e-11)
    for g1, g2 in zip(
        torch.autograd.grad(loss_one, tensors), torch.autograd.grad(loss_two, tensors), strict=True
    ):
        torch.testing.assert_close(g1, g2, rtol=0, atol=1e-11)


@pytest.mark.parametrize("op", OPS)
def test_gradcheck_tiny_fp64(op):
    q, k, v, s = _random_case(b=1, t=5, h=2, d=3, state=True)
    inputs = tuple(z.requires_grad_(True) for z in (q, k, v, s))
    kw = {"chunk_size": 2} if op is linear_attention else {}  # several chunks and a partial last one

    def fn(q, k, v, s):
        return _run(op, q, k, v, s, **kw)

    assert torch.autograd.gradcheck(fn, inputs, eps=1e-6, atol=1e-7)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_inputs_computed_in_float32(dtype):
    q, k, v, s = _random_case(t=9, dtype=torch.float32, state=True)
    half = [z.to(dtype) for z in (q, k, v)]
    o, fs = _run(linear_attention, *half, s, chunk_size=4)
    ref_o, ref_s = _run(linear_attention_reference, *(z.float() for z in half), s)
    assert o.dtype == dtype and fs.dtype == torch.float32
    torch.testing.assert_close(o.float(), ref_o, rtol=1e-2, atol=1e-2)
    torch.testing.assert_close(fs, ref_s, rtol=1e-5, atol=1e-5)


def test_autocast_keeps_state_float32():
    q, k, v, s = _random_case(t=9, dtype=torch.float32, state=True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        o, fs = _run(linear_attention, q, k, v, s, chunk_size=4)
    ref_o, ref_s = _run(linear_attention_reference, q, k, v, s)
    assert o.dtype == torch.float32 and fs.dtype == torch.float32
    torch.testing.assert_close(o, ref_o, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(fs, ref_s, rtol=1e-5, atol=1e-5)


def test_empty_sequence_returns_initial_state():
    q, k, v, s = _random_case(t=0, dv=3, state=True)
    for op in OPS:
        o, fs = _run(op, q, k, v, s)
        assert o.shape == (2, 0, 2, 3)
        torch.testing.assert_close(fs, s)


@pytest.mark.parametrize("op", OPS)
def test_bad_inputs_raise_value_error_naming_argument(op):
    q, k, v, s = _random_case(state=True)
    with pytest.raises(ValueError, match="q: expected a 4-D"):
        op(q[0], k, v)
    with pytest.raises(ValueError, match="q: expected a floating-point"):
        op(q.long(), k, v)
    with pytest.raises(ValueError, match="k: expected shape"):
        op(q, k[..., :-1], v)
    with pytest.raises(ValueError, match="v: expected shape"):
        op(q, k, v[:, :, :1])
    with pytest.raises(ValueError, match="k: expected dtype"):
        op(q, k.float(), v)
    with pytest.raises(ValueError, match="v: expected dtype"):
        op(q, k, v.float())
    with pytest.raises(ValueError, match="initial_state: expected shape"):
        op(q, k, v, initial_state=s[:1])
    with pytest.raises(ValueError, match="initial_state: expected a floating-point"):
        op(q, k, v, initial_state=s.long())
    bad = v.clone()
    bad[0, 1, 0, 2] = float("nan")
    with pytest.raises(ValueError, match="v: expected finite"):
        op(q, k, bad)
    bad_s = s.clone()
    bad_s[0, 0, 0, 0] = float("-inf")
    with pytest.raises(ValueError, match="initial_state: expected finite"):
        op(q, k, v, initial_state=bad_s)


def test_bad_chunk_size():
    q, k, v, _ = _random_case()
    for bad in (0, -3, 2.0, True):
        with pytest.raises(ValueError, match="chunk_size: expected an int >= 1"):
            linear_attention(q, k, v, chunk_size=bad)
