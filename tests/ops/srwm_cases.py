"""Inputs and the reference call shared by the fused SRWM kernels' parity tests (CPU and Triton)."""

from __future__ import annotations

import torch

from fastweights.ops import srwm_reference
from fastweights.ops.srwm import srwm_num_columns


def srwm_case(b, t, h, e, d_out=None, dtype=torch.float64, seed=0):
    """``x [b, t, h, e]`` and per-sequence fast weights ``w0 [b, h, e, C]``, both requiring grad."""
    g = torch.Generator().manual_seed(seed)
    c = srwm_num_columns(e, d_out)
    x = torch.randn(b, t, h, e, generator=g, dtype=dtype).requires_grad_()
    w0 = (0.3 * torch.randn(b, h, e, c, generator=g, dtype=dtype)).requires_grad_()
    return x, w0


def srwm_reference_from(x, w0, d_out=None):
    """``srwm_reference`` started from ``w0`` (it takes slow weights and a per-sequence initial state)."""
    zero = torch.zeros_like(w0[0])
    return srwm_reference(x, zero, initial_state=w0, output_final_state=True, d_out=d_out)


def assert_carried_state_equals_one_call(fused, x, w0, split):
    """``fused(x, w0) -> (y, w)`` over the whole sequence equals two calls split at ``split`` carrying the
    state, values and gradients (which flow through the carried state as through one call)."""
    y, w = fused(x, w0)
    y1, w1 = fused(x[:, :split], w0)
    y2, w2 = fused(x[:, split:], w1)
    torch.testing.assert_close(torch.cat([y1, y2], 1), y, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(w2, w, rtol=1e-12, atol=1e-12)
    g_one = torch.autograd.grad(y.sum() + w.square().sum(), (x, w0))
    g_two = torch.autograd.grad(torch.cat([y1, y2], 1).sum() + w2.square().sum(), (x, w0))
    for a, b in zip(g_one, g_two, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10)


def assert_same_values_and_gradients(fused, reference, inputs, rtol=1e-10):
    """``fused`` and ``reference`` outputs ``(y, w)`` equal, and their gradients w.r.t. ``inputs`` under
    random output weights."""
    y, w = fused
    y_ref, w_ref = reference
    torch.testing.assert_close(y, y_ref, rtol=rtol / 10, atol=rtol / 10)
    torch.testing.assert_close(w, w_ref, rtol=rtol / 10, atol=rtol / 10)
    g = torch.Generator().manual_seed(1)
    gy = torch.randn(y.shape, generator=g, dtype=y.dtype)
    gw = torch.randn(w.shape, generator=g, dtype=w.dtype)
    grads = torch.autograd.grad((y * gy).sum() + (w * gw).sum(), inputs)
    grads_ref = torch.autograd.grad((y_ref * gy).sum() + (w_ref * gw).sum(), inputs)
    for a, b in zip(grads, grads_ref, strict=True):
        torch.testing.assert_close(a, b, rtol=rtol, atol=rtol)
