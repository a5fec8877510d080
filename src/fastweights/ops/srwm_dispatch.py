"""Which implementation runs the fused SRWM recurrence of :func:`fastweights.ops.srwm` and
:func:`fastweights.ops.srwm.srwm_with_reads` (Irie et al. 2022, Eq. 5-8).

Three implementations share one contract (same math, same saved vectors, reversal backward):

- :func:`fastweights.ops.srwm_cpu.srwm_fused_cpu`, the fused C++ kernel: CPU float32/float64 inputs,
  when it builds, unless ``FASTWEIGHTS_CPU_KERNEL=0`` (:func:`fastweights.ops.srwm_cpu.enabled`);
- :func:`fastweights.ops.srwm_triton.srwm_fused_triton`: CUDA inputs without a read stream that the
  kernels support (float32/float64, ``E <= 64``), opt-in with ``FASTWEIGHTS_TRITON=1``
  (:func:`fastweights.ops.srwm_triton.enabled`);
- :func:`fastweights.ops.srwm_autograd.srwm_fused_torch`, the PyTorch autograd Function: everything
  else.

The environment variables are read at every call.
"""

from __future__ import annotations

import torch
from torch import Tensor

from fastweights.ops import srwm_autograd, srwm_cpu, srwm_triton

__all__ = ["srwm_fast_path"]


def srwm_fast_path(x: Tensor, x_read: Tensor | None, w0: Tensor) -> tuple[Tensor, Tensor | None, Tensor]:
    """Run the SRWM recurrence with the reversal backward on the implementation that fits the inputs
    (see the module docstring: the fused CPU kernel, the Triton kernels or the PyTorch Function).

    Args:
        x: ``[B, T, H, E]`` inputs (already validated by the public ops; same dtype as ``w0``).
        x_read: optional ``[B, T, H, E]`` read-only stream (``y_read_t = x_read_t W^y_{t-1}``).
        w0: ``[B, H, E, C]`` initial fast weights, ``C = d_out + 2E + 4`` (may be an expanded view of
            the slow weights).

    Returns:
        ``(y [B, T, H, d_out], y_read [B, T, H, d_out] or None (without ``x_read``), final fast
        weights [B, H, E, C])``, differentiable in every input.
    """
    if x.device.type == "cpu" and x.dtype in (torch.float32, torch.float64) and srwm_cpu.enabled():
        return srwm_cpu.srwm_fused_cpu(x, w0, x_read)
    if x.device.type == "cuda" and x_read is None and srwm_triton.supports(x) and srwm_triton.enabled():
        y, w = srwm_triton.srwm_fused_triton(x, w0)
        return y, None, w
    return srwm_autograd.srwm_fused_torch(x, x_read, w0)
