"""The SRWM dispatcher: which implementation each input goes to (the implementations' equality is
proven by test_srwm.py, test_srwm_cpu.py and test_srwm_triton.py)."""

from __future__ import annotations

import pytest
import torch

from fastweights.ops import srwm_autograd, srwm_cpu, srwm_dispatch, srwm_triton
from tests.ops.srwm_cases import srwm_case


@pytest.fixture
def calls(monkeypatch):
    """Record which implementation runs (each still computes the PyTorch result)."""
    seen: list[str] = []
    torch_path = srwm_autograd.srwm_fused_torch

    def cpu(x, w0, x_read=None):
        seen.append("cpu")
        return torch_path(x, x_read, w0)

    def triton(x, w0):
        seen.append("triton")
        y, _, w = torch_path(x, None, w0)
        return y, w

    def pytorch(x, x_read, w0):
        seen.append("torch")
        return torch_path(x, x_read, w0)

    monkeypatch.setattr(srwm_cpu, "srwm_fused_cpu", cpu)
    monkeypatch.setattr(srwm_triton, "srwm_fused_triton", triton)
    monkeypatch.setattr(srwm_autograd, "srwm_fused_torch", pytorch)
    return seen


@pytest.mark.parametrize("kernel", [True, False])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_cpu_float_inputs_go_to_the_kernel_when_enabled(monkeypatch, calls, kernel, dtype):
    monkeypatch.setattr(srwm_cpu, "enabled", lambda: kernel)
    x, w0 = srwm_case(2, 5, 2, 4, dtype=dtype)
    y, y_read, w = srwm_dispatch.srwm_fast_path(x, None, w0)
    assert calls == (["cpu"] if kernel else ["torch"])
    assert y.shape == (2, 5, 2, 4) and y_read is None and w.shape == w0.shape
    calls.clear()
    _, y_read, _ = srwm_dispatch.srwm_fast_path(x, torch.randn_like(x), w0)  # the read stream too
    assert calls == (["cpu"] if kernel else ["torch"]) and y_read is not None and y_read.shape == y.shape


def test_other_dtypes_and_cpu_inputs_never_reach_triton(monkeypatch, calls):
    monkeypatch.setattr(srwm_cpu, "enabled", lambda: True)
    monkeypatch.setattr(srwm_triton, "enabled", lambda: True)
    x, w0 = srwm_case(1, 3, 1, 4, dtype=torch.bfloat16)
    srwm_dispatch.srwm_fast_path(x, None, w0)  # bfloat16: neither kernel
    monkeypatch.setattr(srwm_cpu, "enabled", lambda: False)
    x, w0 = srwm_case(1, 3, 1, 4)
    srwm_dispatch.srwm_fast_path(x, None, w0)  # CPU with the kernel off: Triton is for CUDA only
    assert calls == ["torch", "torch"]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_inputs_go_to_triton_only_when_enabled_supported_and_without_reads(monkeypatch, calls):
    monkeypatch.setattr(srwm_triton, "available", lambda: True)
    x, w0 = (t.detach().cuda() for t in srwm_case(1, 3, 1, 4, dtype=torch.float32))
    monkeypatch.setenv("FASTWEIGHTS_TRITON", "1")
    srwm_dispatch.srwm_fast_path(x, None, w0)
    srwm_dispatch.srwm_fast_path(x, torch.randn_like(x), w0)  # a read stream: PyTorch
    monkeypatch.setenv("FASTWEIGHTS_TRITON", "0")
    srwm_dispatch.srwm_fast_path(x, None, w0)
    assert calls == ["triton", "torch", "torch"]
