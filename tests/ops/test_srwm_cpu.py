"""The fused CPU SRWM kernel against the per-step reference and the PyTorch fast path: fp64 outputs, final
state and gradients (odd lengths, chunk boundaries, a wide y block, carried state), gradcheck, float32.
Skipped when the kernel cannot be built here (no compiler)."""

from __future__ import annotations

import pytest
import torch

from fastweights.ops import srwm_cpu, srwm_reference
from fastweights.ops.srwm import srwm_num_columns

pytestmark = pytest.mark.skipif(not srwm_cpu.available(), reason="the fused CPU SRWM kernel did not build")


def _case(b, t, h, e, d_out=None, dtype=torch.float64, seed=0):
    g = torch.Generator().manual_seed(seed)
    c = srwm_num_columns(e, d_out)
    x = torch.randn(b, t, h, e, generator=g, dtype=dtype).requires_grad_()
    w0 = (0.3 * torch.randn(b, h, e, c, generator=g, dtype=dtype)).requires_grad_()
    return x, w0


def _reference(x, w0, d_out):
    # the reference takes slow weights [H, E, C] and a per-sequence initial state (which it starts from)
    zero = torch.zeros_like(w0[0])
    return srwm_reference(x, zero, initial_state=w0, output_final_state=True, d_out=d_out)


@pytest.mark.parametrize(("t", "d_out"), [(1, None), (7, None), (65, None), (130, None), (9, 13)])
def test_fused_cpu_equals_the_reference_fp64(t, d_out):
    x, w0 = _case(2, t, 3, 4, d_out)
    y, w = srwm_cpu.srwm_fused_cpu(x, w0)
    y_ref, w_ref = _reference(x, w0, d_out)
    torch.testing.assert_close(y, y_ref, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(w, w_ref, rtol=1e-10, atol=1e-10)
    g = torch.Generator().manual_seed(1)
    gy = torch.randn(y.shape, generator=g, dtype=y.dtype)
    gw = torch.randn(w.shape, generator=g, dtype=w.dtype)
    grads = torch.autograd.grad((y * gy).sum() + (w * gw).sum(), (x, w0))
    grads_ref = torch.autograd.grad((y_ref * gy).sum() + (w_ref * gw).sum(), (x, w0))
    for a, b in zip(grads, grads_ref, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-9)


def test_carried_state_equals_one_call():
    x, w0 = _case(2, 11, 2, 4)
    y, w = srwm_cpu.srwm_fused_cpu(x, w0)
    y1, w1 = srwm_cpu.srwm_fused_cpu(x[:, :5], w0)
    y2, w2 = srwm_cpu.srwm_fused_cpu(x[:, 5:], w1)
    torch.testing.assert_close(torch.cat([y1, y2], 1), y, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(w2, w, rtol=1e-12, atol=1e-12)
    # gradients flow through the carried state as through one call
    g_one = torch.autograd.grad(y.sum() + w.square().sum(), (x, w0))
    g_two = torch.autograd.grad(torch.cat([y1, y2], 1).sum() + w2.square().sum(), (x, w0))
    for a, b in zip(g_one, g_two, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10)


def test_gradcheck_tiny_fp64():
    x, w0 = _case(1, 4, 2, 3)
    assert torch.autograd.gradcheck(srwm_cpu.srwm_fused_cpu, (x, w0))


def test_float32_matches_the_reference():
    x, w0 = _case(2, 33, 2, 8, dtype=torch.float32)
    y, w = srwm_cpu.srwm_fused_cpu(x, w0)
    y_ref, w_ref = _reference(x, w0, None)
    torch.testing.assert_close(y, y_ref, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(w, w_ref, rtol=1e-4, atol=1e-5)
