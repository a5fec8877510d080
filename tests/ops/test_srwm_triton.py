"""The Triton SRWM kernels run by Triton's interpreter on CPU (``TRITON_INTERPRET=1``) against the
per-step reference: fp64 outputs, final state and gradients (odd lengths, a head size that is not a
power of two, a wide y block, carried state, an empty sequence), gradcheck, float32; the CUDA dispatch
on a GPU. Skipped without Triton (``GPU=1 bash scripts/setup.sh`` installs it; CI does)."""

from __future__ import annotations

import importlib

import pytest
import torch

pytest.importorskip("triton")  # TRITON_INTERPRET=1 on CPU-only machines: tests/conftest.py
from fastweights.ops import srwm_triton  # noqa: E402
from tests.ops.srwm_cases import (  # noqa: E402
    assert_carried_state_equals_one_call,
    assert_same_values_and_gradients,
    srwm_case,
    srwm_reference_from,
)


@pytest.mark.parametrize(("t", "e", "d_out"), [(1, 4, None), (7, 5, None), (65, 4, None), (9, 3, 13)])
def test_triton_equals_the_reference_fp64(t, e, d_out):
    x, w0 = srwm_case(2, t, 2, e, d_out)
    fused = srwm_triton.srwm_fused_triton(x, w0)
    assert_same_values_and_gradients(fused, srwm_reference_from(x, w0, d_out), (x, w0), rtol=1e-10)


def test_carried_state_equals_one_call():
    x, w0 = srwm_case(1, 9, 2, 4)
    assert_carried_state_equals_one_call(srwm_triton.srwm_fused_triton, x, w0, 4)


@pytest.mark.slow
def test_gradcheck_tiny_fp64():
    x, w0 = srwm_case(1, 3, 1, 3)
    assert torch.autograd.gradcheck(srwm_triton.srwm_fused_triton, (x, w0))


def test_float32_matches_the_reference():
    x, w0 = srwm_case(1, 17, 2, 8, dtype=torch.float32)
    y, w = srwm_triton.srwm_fused_triton(x, w0)
    y_ref, w_ref = srwm_reference_from(x, w0)
    torch.testing.assert_close(y, y_ref, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(w, w_ref, rtol=1e-4, atol=1e-5)


def test_an_empty_sequence_keeps_the_state():
    x, w0 = srwm_case(1, 0, 2, 3)
    y, w = srwm_triton.srwm_fused_triton(x, w0)
    assert y.shape == (1, 0, 2, 3)
    torch.testing.assert_close(w, w0, rtol=0, atol=0)
    (g,) = torch.autograd.grad(w.square().sum(), (w0,))
    torch.testing.assert_close(g, 2 * w0, rtol=0, atol=0)


def test_unsupported_inputs_are_refused():
    x, w0 = srwm_case(1, 2, 1, 65, dtype=torch.float32)
    assert not srwm_triton.supports(x)
    with pytest.raises(RuntimeError, match="E <= 64, got torch.float32, E=65"):
        srwm_triton.srwm_fused_triton(x, w0)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_dispatch_equals_the_pytorch_fast_path(monkeypatch):
    from fastweights.ops import srwm

    x, w0 = srwm_case(2, 33, 4, 16, dtype=torch.float32)
    x, weight = x.detach().cuda().requires_grad_(), w0[0].detach().cuda().requires_grad_()
    monkeypatch.setenv("FASTWEIGHTS_TRITON", "0")
    y_ref, w_ref = srwm(x, weight, output_final_state=True)
    monkeypatch.setenv("FASTWEIGHTS_TRITON", "1")
    y, w = srwm(x, weight, output_final_state=True)
    torch.testing.assert_close(y, y_ref, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(w, w_ref, rtol=1e-4, atol=1e-5)


def test_masked_srwm_through_the_triton_kernels_equals_each_row_alone(monkeypatch):
    """``srwm(..., attention_mask=)`` zeroes the padded inputs before the fused steps; here those steps
    are the Triton kernels (run by the interpreter), forward and reversal backward."""
    srwm_module = importlib.import_module("fastweights.ops.srwm")  # the module (``ops.srwm`` is the op)

    def triton_path(x, x_read, w0):
        assert x_read is None
        y, w = srwm_triton.srwm_fused_triton(x, w0)
        return y, None, w

    monkeypatch.setattr(srwm_module, "srwm_fast_path", triton_path)
    x, w0 = srwm_case(3, 6, 2, 4)
    weight = torch.zeros_like(w0[0])
    mask = torch.tensor([[0, 0, 1, 1, 1, 1], [1, 1, 1, 0, 0, 0], [0, 1, 1, 1, 1, 0]], dtype=torch.bool)
    y, w = srwm_module.srwm(x, weight, initial_state=w0, output_final_state=True, attention_mask=mask)
    loss = (y * torch.cos(y)).sum() + w.square().sum()
    loss_ref = 0
    for b in range(3):
        y_b, w_b = srwm_reference_from(x[b : b + 1, mask[b]], w0[b : b + 1])
        torch.testing.assert_close(y[b, mask[b]], y_b[0], rtol=1e-11, atol=1e-11)
        torch.testing.assert_close(w[b], w_b[0], rtol=1e-11, atol=1e-11)
        loss_ref = loss_ref + (y_b * torch.cos(y_b)).sum() + w_b.square().sum()
    assert (y[~mask] == 0).all()
    for a, b in zip(torch.autograd.grad(loss, (x, w0)), torch.autograd.grad(loss_ref, (x, w0)), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10)
