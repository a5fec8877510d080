"""2×2 max-pooling, instance norm and ReLU in one pass: the part of a Conv-4 block after its convolution
(Vinyals et al. 2016, the backbone of the SRWM and ACL papers; instance norm: Ulyanov et al. 2016,
"Instance Normalization"), in either order.

With ``pool_first`` (Conv-4's ``pool_before_norm``)::

    p   = maxpool2x2(y)                              [N, C, H/2, W/2]
    out = relu(gamma * (p - mean(p)) / sqrt(var(p) + eps) + beta)

else ``out = relu(maxpool2x2(gamma * (y - mean(y)) / sqrt(var(y) + eps) + beta))``, the mean and the
biased variance taken per image and channel over the spatial positions. Pooling floors odd sizes (the
last row/column is not pooled; with the norm first it is still normalised).

:func:`pool_norm_relu_reference` composes PyTorch's ``max_pool2d``, ``instance_norm`` and ``relu``.
:func:`pool_norm_relu` sends CPU float32/float64/bfloat16 maps to a fused C++ kernel
(``csrc/pool_norm_relu_cpu.cpp``) on channels-last (NHWC) memory: one pass per image over maps that
stay in cache, the window's argmax kept as one byte per pooled value instead of PyTorch's int64 indices,
and the full-resolution input gradient written once instead of zero-filled and then scattered into. Its
outputs and gradients equal the reference to float rounding (``tests/ops/test_pool_norm_relu.py``);
ties in a window go to the first maximum in row-major order, as in ``max_pool2d``. Elsewhere (CUDA,
``FASTWEIGHTS_CPU_KERNEL=0``, no compiler) the reference runs.
"""

from __future__ import annotations

import logging
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.autograd.function import once_differentiable

from fastweights.checks import describe
from fastweights.ops.cpu_extension import CpuExtension

__all__ = ["EXTENSION", "pool_norm_relu", "pool_norm_relu_reference"]

log = logging.getLogger(__name__)
EXTENSION = CpuExtension(
    "pool_norm_relu_cpu", "fused CPU pool-norm-ReLU kernel", "PyTorch's pooling and instance norm", log
)
_KERNEL_DTYPES = (torch.float32, torch.float64, torch.bfloat16)


def _check(y: Tensor, weight: Tensor, bias: Tensor, pool_first: bool) -> None:
    if not isinstance(y, Tensor) or y.dim() != 4 or not y.is_floating_point():
        raise ValueError(f"y: expected a float tensor [N, C, H, W], got {describe(y)}")
    n, c, h, w = y.shape
    if h < 2 or w < 2:
        raise ValueError(f"y: expected H and W >= 2 (2x2 pooling), got [N, C, H, W] = {list(y.shape)}")
    normalised = (h // 2) * (w // 2) if pool_first else h * w
    if normalised < 2:
        raise ValueError(
            f"y: the instance norm needs more than one position per map, got {normalised} "
            f"(y [N, C, H, W] = {list(y.shape)}, pool_first={pool_first})"
        )
    for name, p in (("weight", weight), ("bias", bias)):
        if not isinstance(p, Tensor) or tuple(p.shape) != (c,) or not p.is_floating_point():
            raise ValueError(f"{name}: expected a float tensor [C] = [{c}], got {describe(p)}")
        if p.device != y.device:
            raise ValueError(f"{name}: expected device {y.device} (that of y), got {p.device}")


def pool_norm_relu_reference(
    y: Tensor, weight: Tensor, bias: Tensor, *, pool_first: bool, eps: float = 1e-5
) -> Tensor:
    """The composition of PyTorch ops (see the module): ``y [N, C, H, W]`` float, ``weight``/``bias``
    ``[C]`` (the norm's affine γ, β) → ``[N, C, H//2, W//2]`` in ``y``'s dtype.

    Raises:
        ValueError: naming ``y``, ``weight`` or ``bias`` for a wrong shape, dtype or device, or maps too
            small to pool (H or W < 2) or to normalise (one position).
    """
    _check(y, weight, bias, pool_first)
    weight, bias = weight.to(y.dtype), bias.to(y.dtype)
    if pool_first:
        return torch.relu(F.instance_norm(F.max_pool2d(y, 2), weight=weight, bias=bias, eps=eps))
    return torch.relu(F.max_pool2d(F.instance_norm(y, weight=weight, bias=bias, eps=eps), 2))


class _PoolNormReLU(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, y: Tensor, weight: Tensor, bias: Tensor, pool_first: bool, eps: float) -> Tensor:
        out, pooled, idx, mean, rstd = EXTENSION.load().forward(y, weight, bias, pool_first, eps)
        saved = pooled if pool_first else y  # what the backward recomputes the normalised maps from
        ctx.save_for_backward(saved, idx, out, mean, rstd, weight)
        ctx.pool_first, ctx.size = pool_first, (y.shape[2], y.shape[3])
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, g_out: Tensor) -> tuple[Tensor | None, ...]:
        saved, idx, out, mean, rstd, weight = ctx.saved_tensors
        g_y, g_weight, g_bias = EXTENSION.load().backward(
            saved, idx, out, g_out, mean, rstd, weight, ctx.pool_first, *ctx.size
        )
        need_y, need_w, need_b = ctx.needs_input_grad[:3]
        return (
            g_y if need_y else None,
            g_weight.sum(0).to(weight.dtype) if need_w else None,  # per image -> the batch, in order
            g_bias.sum(0).to(weight.dtype) if need_b else None,
            None,
            None,
        )


def pool_norm_relu(y: Tensor, weight: Tensor, bias: Tensor, *, pool_first: bool, eps: float = 1e-5) -> Tensor:
    """2×2 max-pool, instance norm with affine ``weight``/``bias`` and ReLU, in either order (see the
    module), differentiable in ``y``, ``weight`` and ``bias``.

    Args:
        y: ``[N, C, H, W]`` float maps (a convolution's output; channels-last memory avoids a copy on
            the fused path).
        weight, bias: ``[C]`` float, the norm's γ and β (float32 with bfloat16 maps).
        pool_first: pool, then normalise (else normalise, then pool).
        eps: added to the variance.

    Returns:
        ``[N, C, H//2, W//2]`` in ``y``'s dtype; channels-last memory on the fused path.

    Raises:
        ValueError: as :func:`pool_norm_relu_reference`.
    """
    _check(y, weight, bias, pool_first)
    if y.device.type == "cpu" and y.dtype in _KERNEL_DTYPES and EXTENSION.enabled():
        return _PoolNormReLU.apply(y, weight, bias, pool_first, eps)
    return pool_norm_relu_reference(y, weight, bias, pool_first=pool_first, eps=eps)
