"""Triton kernels of the SRWM recurrence for CUDA tensors: the forward and the reversal backward of
:mod:`fastweights.ops.srwm_autograd` (Irie et al. 2022, Eq. 5-8; the math is in :mod:`fastweights.ops.srwm`),
one program per (batch, head) that keeps its fast-weight matrix on chip for the whole sequence.

The matrix ``W [E, C]`` is held as four tiles, one per block of columns ``y | q | k | beta``
(``[E, d_out]``, ``[E, E]``, ``[E, E]``, ``[E, 4]``, padded to powers of two), so each step is four
matrix-vector products for the projection, four for ``(q - k) W`` and four rank-1 updates, with no
round trip to global memory. The backward walks the sequence in reverse, undoing each update
(``W_{t-1} = W_t - k_t ⊗ u_t``) and accumulating ``dL/dW`` in four more tiles, the same math as the CPU
kernel (:mod:`fastweights.ops.srwm_cpu`) and the PyTorch fast path; the same per-step vectors are
saved (``act`` = softmaxed ``q | k`` and sigmoid ``beta``, ``diff`` = ``(q - k) W_{t-1}``). float32 and
float64; ``E`` up to 64 (:data:`MAX_HEAD_DIM`); no read-only stream.

Triton is imported only here and only when present: CPU installs never need it. The kernels are made
on first use, so ``TRITON_INTERPRET=1`` (Triton's interpreter, CPU tensors) set before that runs them
on the CPU — that is how the parity tests run in CI. On CUDA, :func:`fastweights.ops.srwm` uses them
only with ``FASTWEIGHTS_TRITON=1``: they have not been run on a GPU yet (no GPU was available when they
were written), so the PyTorch fast path stays the default there.
"""

from __future__ import annotations

import os
from typing import Any

import torch
from torch import Tensor

__all__ = ["MAX_HEAD_DIM", "available", "enabled", "supports", "srwm_fused_triton"]

MAX_HEAD_DIM = 64
_state: dict[str, Any] = {}


def available() -> bool:
    """Whether Triton imports."""
    if "triton" not in _state:
        try:
            import triton  # noqa: F401

            _state["triton"] = True
        except ImportError:
            _state["triton"] = False
    return _state["triton"]


def enabled() -> bool:
    """Whether :func:`fastweights.ops.srwm` sends CUDA inputs here: ``FASTWEIGHTS_TRITON=1`` and Triton
    imports."""
    return os.environ.get("FASTWEIGHTS_TRITON", "") == "1" and available()


def supports(x: Tensor) -> bool:
    """Whether the kernels handle ``x [B, T, H, E]``: float32/float64 and ``E <= MAX_HEAD_DIM``."""
    return x.dtype in (torch.float32, torch.float64) and x.shape[-1] <= MAX_HEAD_DIM


def _kernels() -> tuple[Any, Any]:
    """The two jitted kernels, made on first use (reads ``TRITON_INTERPRET`` then)."""
    if "kernels" in _state:
        return _state["kernels"]
    from fastweights.ops import _srwm_triton_kernels as k

    _state["kernels"] = (k.forward, k.backward)
    return _state["kernels"]


def _sequence_major(t: Tensor) -> Tensor:
    """``[B, T, H, D]`` → contiguous ``[B·H, T, D]`` (one row of sequences per (batch, head))."""
    b, steps, h, d = t.shape
    return t.permute(0, 2, 1, 3).reshape(b * h, steps, d).contiguous()


def _pow2(n: int) -> int:
    return 1 << max(n - 1, 0).bit_length()


class _TritonSRWM(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: Tensor, w0: Tensor) -> tuple[Tensor, Tensor]:
        b, steps, h, e = x.shape
        c = w0.shape[-1]
        o = c - 2 * e - 4
        xn = _sequence_major(x)
        w_in = w0.reshape(b * h, e, c).contiguous()
        y = x.new_empty(b * h, steps, o)
        act = x.new_empty(b * h, steps, 2 * e + 4)
        diff = x.new_empty(b * h, steps, c)
        w = torch.empty_like(w_in)
        fwd, _ = _kernels()
        fwd[(b * h,)](xn, w_in, y, act, diff, w, steps, E=e, O=o, EB=_pow2(e), OB=_pow2(o))
        ctx.save_for_backward(xn, act, diff, w)
        ctx.shape = (b, steps, h, e, c, o)
        return y.view(b, h, steps, o).transpose(1, 2), w.view(b, h, e, c).clone()  # w is saved

    @staticmethod
    def backward(ctx: Any, g_y: Tensor | None, g_w: Tensor | None) -> tuple[Tensor, Tensor]:
        xn, act, diff, w = ctx.saved_tensors
        b, steps, h, e, c, o = ctx.shape
        gy = _sequence_major(g_y).to(xn.dtype) if g_y is not None else xn.new_zeros(b * h, steps, o)
        gw = g_w.reshape(b * h, e, c).to(xn.dtype).contiguous() if g_w is not None else torch.zeros_like(w)
        g_x = torch.zeros_like(xn)
        if steps == 0:  # no step: dL/dW0 = dL/dW_final
            return g_x.view(b, h, steps, e).transpose(1, 2), gw.view(b, h, e, c)
        g_w0 = torch.empty_like(gw)
        _, bwd = _kernels()
        bwd[(b * h,)](xn, act, diff, w, gy, gw, g_x, g_w0, steps, E=e, O=o, EB=_pow2(e), OB=_pow2(o))
        return g_x.view(b, h, steps, e).transpose(1, 2), g_w0.view(b, h, e, c)


def srwm_fused_triton(x: Tensor, w0: Tensor) -> tuple[Tensor, Tensor]:
    """``x [B, T, H, E]``, ``w0 [B, H, E, C]`` (one device and dtype, float32/float64, ``E <= 64``,
    validated by the public ops; CUDA, or CPU under ``TRITON_INTERPRET=1``) → ``(y [B, T, H, d_out],
    final fast weights [B, H, E, C])``, differentiable in both.

    Raises:
        RuntimeError: without Triton, or for inputs :func:`supports` refuses.
    """
    if not available():
        raise RuntimeError("srwm_fused_triton: Triton is not installed (pip install triton)")
    if not supports(x):
        raise RuntimeError(
            f"srwm_fused_triton: expected float32/float64 with E <= {MAX_HEAD_DIM}, "
            f"got {x.dtype}, E={x.shape[-1]}"
        )
    return _TritonSRWM.apply(x, w0)
