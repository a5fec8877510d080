"""The hand-written backward passes of the TTT dual form's pieces (ops/_ttt_inner.py, ops/ttt.py) against
autograd of their plain formulas, and gradcheck (float64)."""

from __future__ import annotations

import math

import pytest
import torch

from fastweights.ops._ttt_inner import _gelu_tanh_grad, _gelu_tanh_grad_exact, _ln_l2_grad
from fastweights.ops.ttt import _dual_attention, _scaled_causal


def _plain_ln_l2_grad(z, shifted, weight, eps):
    d = z.shape[-1]
    mu = z.mean(-1, keepdim=True)
    std = torch.sqrt(z.var(-1, keepdim=True, unbiased=False) + eps)
    x_hat = (z - mu) / std
    g = (weight * x_hat + shifted) * weight
    return (d * g - g.sum(-1, keepdim=True) - x_hat * (g * x_hat).sum(-1, keepdim=True)) / (d * std)


def _plain_gelu_grad(x, c, a, k):
    t = torch.tanh(c * x * (1 + a * x * x))
    return 0.5 * x * ((1 - t * t) * (c + k * x * x)) + 0.5 * (1 + t)


def _same_values_and_gradients(fn, plain, inputs):
    out, ref = fn(*inputs), plain(*inputs)
    torch.testing.assert_close(out, ref, rtol=1e-12, atol=1e-12)
    g = torch.randn(out.shape, dtype=out.dtype, generator=torch.Generator().manual_seed(3))
    leaves = [x for x in inputs if isinstance(x, torch.Tensor) and x.requires_grad]
    for a, b in zip(
        torch.autograd.grad((out * g).sum(), leaves),
        torch.autograd.grad((ref * g).sum(), leaves),
        strict=True,
    ):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


def _t(*shape, seed=0):
    return torch.randn(
        *shape, dtype=torch.float64, generator=torch.Generator().manual_seed(seed)
    ).requires_grad_()


def test_ln_l2_grad_backward():
    z, shifted, weight = _t(2, 3, 5, 8), _t(2, 3, 5, 8, seed=1), _t(3, 1, 8, seed=2)
    _same_values_and_gradients(
        lambda *a: _ln_l2_grad(*a, 1e-6), lambda *a: _plain_ln_l2_grad(*a, 1e-6), (z, shifted, weight)
    )
    assert torch.autograd.gradcheck(
        lambda *a: _ln_l2_grad(*a, 1e-6), (z[:1, :2, :3], shifted[:1, :2, :3], weight[:2])
    )


@pytest.mark.parametrize(
    ("fn", "constants"),
    [
        (_gelu_tanh_grad, (0.79788456, 0.044715, 0.1070322243)),
        (_gelu_tanh_grad_exact, (math.sqrt(2 / math.pi), 0.044715, 3 * 0.044715 * math.sqrt(2 / math.pi))),
    ],
)
def test_gelu_tanh_grad_backward(fn, constants):
    x = _t(4, 37)
    _same_values_and_gradients(fn, lambda v: _plain_gelu_grad(v, *constants), (x,))
    assert torch.autograd.gradcheck(fn, (_t(20),))


def test_dual_attention_reads_the_in_mini_batch_weights():
    """``x W + b - A G`` equals ``x_i W_i + b_i`` with the per-token weights written out:
    ``W_i = W - s_i sum_{j<=i} lr_j keys_j^T g_j`` and ``b_i = b - s_i sum_{j<=i} lr_j g_j`` (§2.5)."""
    n, d_in, d_out = 7, 5, 6
    x, keys, g = _t(3, n, d_in), _t(3, n, d_in, seed=1), _t(3, n, d_out, seed=2)
    w, bias = _t(3, d_in, d_out, seed=3), _t(3, 1, d_out, seed=4)
    lr, s = _t(3, n, seed=5).abs(), _t(n, seed=6).abs()
    future = torch.ones(n, n, dtype=torch.bool).triu(1)
    attn = _dual_attention(x, keys, _scaled_causal(s.unsqueeze(-1), lr, future))
    dual = x @ w + bias - attn @ g
    for i in range(n):
        upd_w = sum(lr[:, j, None, None] * keys[:, j, :, None] * g[:, j, None, :] for j in range(i + 1))
        upd_b = sum(lr[:, j, None, None] * g[:, j, None, :] for j in range(i + 1))
        row = x[:, i : i + 1] @ (w - s[i] * upd_w) + (bias - s[i] * upd_b)
        torch.testing.assert_close(dual[:, i : i + 1], row, rtol=0, atol=1e-12)
