"""Rotary position embedding (RoPE): the one rotation shared by the attention and TTT layers.

Source: Su et al., "RoFormer: Enhanced Transformer with Rotary Position Embedding", arXiv 2104.09864,
Eq. 34: channel pair ``p`` (``p = 0 .. D/2 - 1``) of a vector at position ``m`` is rotated by the angle
``m * omega_p`` with ``omega_p = theta^(-2p/D)``,

    ``(x1, x2) -> (x1 cos(m omega_p) - x2 sin(m omega_p), x2 cos(m omega_p) + x1 sin(m omega_p))``,

so ``<R_m q, R_n k> = <q, R_{n-m} k>`` depends only on the offset ``n - m``. Two conventions pick the
pair of channel ``p``:

- interleaved (GPT-J / EasyLM, RoFormer's own): channels ``(2p, 2p + 1)``;
- half-split (HF Llama ``rotate_half``): channels ``(p, p + D/2)``.

They are the same rotation up to a fixed permutation of the channels.
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["apply_rotary", "rotary_tables"]


def rotary_tables(
    positions: Tensor,
    dim: int,
    theta: float = 10000.0,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str | None = None,
) -> tuple[Tensor, Tensor]:
    """``(cos, sin)`` of the angles ``positions[..., None] * theta^(-2p/dim)``, each ``[*positions.shape,
    dim/2]``, computed and returned in ``dtype`` on ``device`` (default: the device of ``positions``).

    With ``dtype=float32`` the values are bitwise those of the HF / ttt-lm-pytorch ``RotaryEmbedding``
    tables (``inv_freq = 1 / theta^(arange(0, dim, 2) / dim)`` in float32), whose rotate-half layout is
    ``cat([cos, cos], -1)``.

    Args:
        positions: integer or floating positions, any shape.
        dim: the rotated (head) dimension ``D``; even and positive.
        theta: the RoPE base, positive.
        dtype: floating dtype in which the angles and their cos/sin are computed.
        device: where to build the tables.

    Raises:
        ValueError: if ``dim`` is not a positive even integer, ``theta`` is not positive, ``dtype`` is not
            a floating dtype or ``positions`` is not a tensor.
    """
    if not isinstance(positions, Tensor):
        raise ValueError(f"positions: expected a tensor, got {type(positions).__name__}")
    if not isinstance(dim, int) or dim < 2 or dim % 2:
        raise ValueError(f"dim: expected a positive even integer, got {dim!r}")
    if not theta > 0:
        raise ValueError(f"theta: expected > 0, got {theta!r}")
    if not dtype.is_floating_point:
        raise ValueError(f"dtype: expected a floating-point dtype, got {dtype}")
    device = positions.device if device is None else device
    exponents = torch.arange(0, dim, 2, dtype=torch.int64, device=device).to(dtype) / dim
    inv_freq = 1.0 / (theta**exponents)
    angles = positions.to(device=device, dtype=dtype)[..., None] * inv_freq
    return angles.cos(), angles.sin()


def apply_rotary(x: Tensor, cos: Tensor, sin: Tensor, *, interleaved: bool) -> Tensor:
    """Rotate the channel pairs of ``x [..., D]`` by the angles whose ``cos, sin`` (``[..., D/2]``, from
    :func:`rotary_tables`) broadcast against ``x[..., :D/2]``; returns a tensor like ``x``.

    ``interleaved=True`` pairs channels ``(2p, 2p + 1)`` (GPT-J); ``False`` pairs ``(p, p + D/2)``
    (HF Llama ``rotate_half``). Pair ``p`` always uses column ``p`` of the tables. The arithmetic is done
    in the promoted dtype of ``x`` and the tables (cast the tables to ``x.dtype`` first to keep it).

    Raises:
        ValueError: if ``D`` is odd, ``cos`` and ``sin`` differ in shape, or they do not broadcast to
            ``x[..., :D/2]``.
    """
    d = x.shape[-1]
    if d % 2:
        raise ValueError(f"x: expected an even last dimension for RoPE, got {list(x.shape)}")
    if cos.shape != sin.shape:
        raise ValueError(f"cos, sin: expected the same shape, got {list(cos.shape)} and {list(sin.shape)}")
    half_shape = (*x.shape[:-1], d // 2)
    try:
        ok = torch.broadcast_shapes(cos.shape, half_shape) == half_shape
    except RuntimeError:
        ok = False
    if not ok:
        raise ValueError(
            f"cos, sin: expected shapes broadcastable to {list(half_shape)}, got {list(cos.shape)}"
        )
    x1, x2 = (x[..., 0::2], x[..., 1::2]) if interleaved else (x[..., : d // 2], x[..., d // 2 :])
    r1, r2 = x1 * cos - x2 * sin, x2 * cos + x1 * sin
    return torch.stack([r1, r2], dim=-1).flatten(-2) if interleaved else torch.cat([r1, r2], dim=-1)
