"""The fused CPU SRWM kernel against the per-step reference and the PyTorch fast path: fp64 outputs, final
state and gradients (odd lengths, chunk boundaries, a wide y block, carried state), the read-only stream
of ``srwm_with_reads``, gradcheck, float32.
Skipped when the kernel cannot be built here (no compiler)."""

from __future__ import annotations

import pytest
import torch

from fastweights.ops import cpu_extension, srwm_cpu
from fastweights.ops.srwm_autograd import srwm_fused_torch
from tests.ops.srwm_cases import (
    assert_carried_state_equals_one_call,
    assert_same_values_and_gradients,
    srwm_case,
    srwm_reference_from,
)

pytestmark = pytest.mark.skipif(not srwm_cpu.available(), reason="the fused CPU SRWM kernel did not build")


def _fused(x, w0):
    y, y_read, w = srwm_cpu.srwm_fused_cpu(x, w0)
    assert y_read is None
    return y, w


@pytest.mark.parametrize(("t", "d_out"), [(1, None), (7, None), (65, None), (130, None), (9, 13)])
def test_fused_cpu_equals_the_reference_fp64(t, d_out):
    x, w0 = srwm_case(2, t, 3, 4, d_out)
    assert_same_values_and_gradients(_fused(x, w0), srwm_reference_from(x, w0, d_out), (x, w0), rtol=1e-9)


def test_carried_state_equals_one_call():
    x, w0 = srwm_case(2, 11, 2, 4)
    assert_carried_state_equals_one_call(_fused, x, w0, 5)


def test_gradcheck_tiny_fp64():
    x, w0 = srwm_case(1, 4, 2, 3)
    assert torch.autograd.gradcheck(_fused, (x, w0))


def test_float32_matches_the_reference():
    x, w0 = srwm_case(2, 33, 2, 8, dtype=torch.float32)
    y, w = _fused(x, w0)
    y_ref, w_ref = srwm_reference_from(x, w0, None)
    torch.testing.assert_close(y, y_ref, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(w, w_ref, rtol=1e-4, atol=1e-5)


def test_dispatch_from_the_public_op_and_the_layer(monkeypatch):
    from fastweights.layers import SRWMLayer
    from fastweights.ops import srwm
    from fastweights.ops import srwm_cpu as kernel

    x, w0 = srwm_case(2, 9, 3, 4)
    weight = w0[0].detach().requires_grad_()
    calls = []
    real = kernel.srwm_fused_cpu
    monkeypatch.setattr(kernel, "srwm_fused_cpu", lambda *a: calls.append(1) or real(*a))
    monkeypatch.setenv("FASTWEIGHTS_CPU_KERNEL", "0")
    y_fast, w_fast = srwm(x, weight, output_final_state=True)
    assert not calls
    monkeypatch.delenv("FASTWEIGHTS_CPU_KERNEL")  # the default
    y, w = srwm(x, weight, output_final_state=True)
    assert calls == [1]
    torch.testing.assert_close(y, y_fast, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(w, w_fast, rtol=1e-12, atol=1e-12)
    g = torch.autograd.grad(y.square().sum() + w.sum(), (x, weight))
    g_fast = torch.autograd.grad(y_fast.square().sum() + w_fast.sum(), (x, weight))
    for a, b in zip(g, g_fast, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10)
    layer = SRWMLayer(16, 4).double()
    out, _ = layer(torch.randn(2, 5, 16, dtype=torch.float64))
    assert calls == [1, 1] and out.shape == (2, 5, 16)


def _fast_path_with_reads(x, x_read, w0):
    # the PyTorch fast path (proven equal to the reference by tests/ops/test_srwm*.py), kernel bypassed
    return srwm_fused_torch(x, x_read, w0)


@pytest.mark.parametrize(("t", "e", "d_out"), [(1, 4, None), (8, 5, None), (67, 4, None), (9, 3, 21)])
def test_read_stream_equals_the_fast_path_fp64(t, e, d_out):
    x, w0 = srwm_case(2, t, 3, e, d_out)
    x_read = torch.randn(x.shape, generator=torch.Generator().manual_seed(2), dtype=x.dtype).requires_grad_()
    y, y_read, w = srwm_cpu.srwm_fused_cpu(x, w0, x_read)
    y_f, y_read_f, w_f = _fast_path_with_reads(x, x_read, w0)
    for a, b in ((y, y_f), (y_read, y_read_f), (w, w_f)):
        torch.testing.assert_close(a, b, rtol=1e-11, atol=1e-11)
    g = torch.Generator().manual_seed(3)
    gy, gr, gw = (torch.randn(v.shape, generator=g, dtype=v.dtype) for v in (y, y_read, w))
    loss = (y * gy).sum() + (y_read * gr).sum() + (w * gw).sum()
    loss_f = (y_f * gy).sum() + (y_read_f * gr).sum() + (w_f * gw).sum()
    grads = torch.autograd.grad(loss, (x, x_read, w0))
    grads_f = torch.autograd.grad(loss_f, (x, x_read, w0))
    for a, b in zip(grads, grads_f, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10)


def test_read_stream_gradient_only_through_y_read_and_carried_state():
    x, w0 = srwm_case(1, 6, 2, 3)
    x_read = torch.randn(x.shape, dtype=x.dtype).requires_grad_()
    y, y_read, w = srwm_cpu.srwm_fused_cpu(x, w0, x_read)
    grads = torch.autograd.grad(y_read.sum(), (x, x_read, w0))
    y_f, y_read_f, _ = _fast_path_with_reads(x, x_read, w0)
    grads_f = torch.autograd.grad(y_read_f.sum(), (x, x_read, w0))
    for a, b in zip(grads, grads_f, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10)
    # two calls carrying the state equal one call
    y1, r1, w1 = srwm_cpu.srwm_fused_cpu(x[:, :4], w0, x_read[:, :4])
    y2, r2, w2 = srwm_cpu.srwm_fused_cpu(x[:, 4:], w1, x_read[:, 4:])
    torch.testing.assert_close(torch.cat([r1, r2], 1), y_read, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(w2, w, rtol=1e-12, atol=1e-12)


def test_gradcheck_tiny_fp64_with_reads():
    x, w0 = srwm_case(1, 3, 2, 3)
    x_read = torch.randn(x.shape, dtype=x.dtype).requires_grad_()
    assert torch.autograd.gradcheck(srwm_cpu.srwm_fused_cpu, (x, w0, x_read))


def test_dispatch_of_srwm_with_reads(monkeypatch):
    from fastweights.ops import srwm_cpu as kernel
    from fastweights.ops.srwm import srwm_with_reads

    x, w0 = srwm_case(2, 7, 2, 4)
    weight = w0[0].detach()
    x_read = torch.randn(x.shape, dtype=x.dtype)
    calls = []
    real = kernel.srwm_fused_cpu
    monkeypatch.setattr(kernel, "srwm_fused_cpu", lambda *a: calls.append(1) or real(*a))
    monkeypatch.setenv("FASTWEIGHTS_CPU_KERNEL", "0")
    ref = srwm_with_reads(x, x_read, weight)
    monkeypatch.setenv("FASTWEIGHTS_CPU_KERNEL", "1")
    out = srwm_with_reads(x, x_read, weight)
    assert calls == [1]
    for a, b in zip(out, ref, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


def test_a_failed_build_falls_back_to_the_fast_path_with_one_log_line(monkeypatch, caplog):
    from fastweights.ops import srwm

    def no_compiler():
        raise RuntimeError("Ninja is required to load C++ extensions\nmore detail")

    monkeypatch.setattr(srwm_cpu.EXTENSION, "_module", cpu_extension._UNSET)  # not loaded yet
    monkeypatch.setattr(srwm_cpu.EXTENSION, "build", no_compiler)
    with caplog.at_level("WARNING", logger="fastweights.ops.srwm_cpu"):
        assert not srwm_cpu.available() and not srwm_cpu.enabled()
        x, w0 = srwm_case(1, 5, 2, 3)
        y, _ = srwm(x, w0[0], output_final_state=True)
    lines = [r.getMessage() for r in caplog.records]
    assert lines == [
        "fused CPU SRWM kernel unavailable (Ninja is required to load C++ extensions); "
        "using the PyTorch fast path"
    ]
    assert y.shape == (1, 5, 2, 3)
    with pytest.raises(RuntimeError, match="not available"):
        srwm_cpu.srwm_fused_cpu(x, w0)


def test_an_empty_sequence_keeps_the_state():
    x, w0 = srwm_case(2, 0, 2, 3)
    x_read = torch.randn(x.shape, dtype=x.dtype).requires_grad_()
    y, y_read, w = srwm_cpu.srwm_fused_cpu(x, w0, x_read)
    assert y.shape == (2, 0, 2, 3) and y_read.shape == (2, 0, 2, 3)
    torch.testing.assert_close(w, w0, rtol=0, atol=0)
    (g,) = torch.autograd.grad(w.square().sum(), (w0,))
    torch.testing.assert_close(g, 2 * w0, rtol=0, atol=0)


@pytest.mark.parametrize("read", [False, True])
def test_without_gradients_the_kernel_runs_outside_autograd_with_the_same_numbers(read):
    """Under ``no_grad`` or with no input requiring grad (acting): the forward kernel alone, bit for bit the
    autograd Function's outputs, nothing recorded."""
    x, w0 = srwm_case(3, 5, 2, 4)
    x_read = torch.randn(x.shape, dtype=x.dtype) if read else None
    y, y_read, w = srwm_cpu.srwm_fused_cpu(x, w0, x_read)
    for ctx, args in (
        (torch.no_grad(), (x, w0)),
        (torch.enable_grad(), (x.detach(), w0.detach())),
    ):
        with ctx:
            y2, y_read2, w2 = srwm_cpu.srwm_fused_cpu(args[0], args[1], x_read)
        assert y2.grad_fn is None and w2.grad_fn is None
        torch.testing.assert_close(y2, y.detach(), rtol=0, atol=0)
        torch.testing.assert_close(w2, w.detach(), rtol=0, atol=0)
        if read:
            torch.testing.assert_close(y_read2, y_read.detach(), rtol=0, atol=0)
        else:
            assert y_read2 is None
    # the expanded slow weights of a fresh batch (a stride-0 view) as the starting weights
    w_slow = w0[0].detach()
    y3, _, w3 = srwm_cpu.srwm_fused_cpu(x.detach(), w_slow.expand_as(w0), None)
    y4, _, w4 = srwm_cpu.srwm_fused_cpu(x.detach(), w_slow.expand_as(w0).contiguous(), None)
    torch.testing.assert_close(y3, y4, rtol=0, atol=0)
    torch.testing.assert_close(w3, w4, rtol=0, atol=0)
