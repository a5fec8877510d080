"""The fused CPU SRWM kernel (``csrc/srwm_cpu.cpp``): the forward and reversal backward of
:mod:`fastweights.ops.srwm_autograd` with the time loop in compiled code, one (batch, head) fast-weight
matrix at a time, parallel over batch × heads (``at::parallel_for``, torch's intra-op threads).

Used by default: :func:`fastweights.ops.srwm` and :func:`fastweights.ops.srwm_with_reads` (so every SRWM
layer) send CPU float32/float64 inputs here; ``FASTWEIGHTS_CPU_KERNEL=0`` keeps them on the PyTorch fast
path. Same math, layout and saved per-step vectors as that fast path (see :mod:`fastweights.ops.srwm`
for the equations), with or without the read-only stream; float32 uses a vectorised exp (~1 ulp).

Built on first use (``scripts/setup.sh`` builds it) by :class:`fastweights.ops.cpu_extension.CpuExtension`
(a C++ compiler and ninja are needed; cached per CPU model, source and torch install); when it cannot be
built, one line is logged and the fast path is used.

Measured (benchmarks/layers.py, B=8 H=8 E=32 T=1024, fp32, fwd+bwd, 2 threads; docs/results.md).
"""

from __future__ import annotations

import logging
from typing import Any

import torch
from torch import Tensor

from fastweights.ops.cpu_extension import CpuExtension

__all__ = ["EXTENSION", "available", "enabled", "srwm_fused_cpu"]

log = logging.getLogger(__name__)
EXTENSION = CpuExtension("srwm_cpu", "fused CPU SRWM kernel", "the PyTorch fast path", log)


def _load() -> Any:
    return EXTENSION.load()


def available() -> bool:
    """Whether the fused CPU kernel is built (building it on the first call)."""
    return EXTENSION.available()


def enabled() -> bool:
    """Whether the ops dispatch to the kernel: ``FASTWEIGHTS_CPU_KERNEL`` is not ``0`` (read at every
    call) and the kernel builds."""
    return EXTENSION.enabled()


class _FusedSRWM(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: Tensor, x_read: Tensor | None, w0: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        b, steps, h, e = x.shape
        c = w0.shape[-1]
        o = c - 2 * e - 4
        x = x.contiguous()
        xr = x_read.contiguous() if x_read is not None else x.new_empty(0)
        y, y_read, act, diff, w = _load().srwm_forward(x, xr, x_read is not None, w0, o)
        ctx.save_for_backward(x, xr, act, diff, w)
        ctx.read = x_read is not None
        ctx.shape = (b, steps, h, e, c, o)
        if x_read is None:
            ctx.mark_non_differentiable(y_read)
        return y, y_read, w.clone()  # w is saved

    @staticmethod
    def backward(
        ctx: Any, g_y: Tensor | None, g_y_read: Tensor | None, g_w: Tensor | None
    ) -> tuple[Tensor, Tensor | None, Tensor]:
        x, xr, act, diff, w = ctx.saved_tensors
        b, steps, h, e, c, o = ctx.shape
        read = ctx.read

        def grad_out(g: Tensor | None) -> Tensor:
            return g.to(x.dtype) if g is not None else x.new_zeros(b, steps, h, o)

        gyr = grad_out(g_y_read) if read else x.new_empty(0)
        gw = g_w.to(x.dtype) if g_w is not None else torch.zeros_like(w)
        g_x, g_xr, g_w0 = _load().srwm_backward(x, xr, read, act, diff, w, grad_out(g_y), gyr, gw)
        return g_x, (g_xr if read else None), g_w0


def srwm_fused_cpu(
    x: Tensor, w0: Tensor, x_read: Tensor | None = None
) -> tuple[Tensor, Tensor | None, Tensor]:
    """``x [B, T, H, E]``, ``w0 [B, H, E, C]``, optional read-only stream ``x_read [B, T, H, E]`` (CPU,
    float32/float64, one dtype, validated by the public ops) → ``(y [B, T, H, d_out], y_read
    [B, T, H, d_out] or None, final fast weights [B, H, E, C])``, differentiable in every input;
    ``y_read_t = x_read_t W^y_{t-1}`` as in :func:`fastweights.ops.srwm_with_reads`.

    Raises:
        RuntimeError: when the kernel is not available (check :func:`available` first).
    """
    ext = _load()
    if ext is None:
        raise RuntimeError("the fused CPU SRWM kernel is not available (see the log for why)")
    if not torch.is_grad_enabled() or not any(t is not None and t.requires_grad for t in (x, x_read, w0)):
        # nothing to differentiate (e.g. acting under no_grad): the same forward kernel, without the
        # autograd Function, its saved tensors or the copy of the final weights kept for the backward
        read, o = x_read is not None, w0.shape[-1] - 2 * x.shape[-1] - 4
        xr = x_read.contiguous() if x_read is not None else x.new_empty(0)
        y, y_read, _, _, w = ext.srwm_forward(x.contiguous(), xr, read, w0, o)
        return y, (y_read if read else None), w
    y, y_read, w = _FusedSRWM.apply(x, x_read, w0)
    return y, (y_read if x_read is not None else None), w
