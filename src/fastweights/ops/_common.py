"""Input validation and small helpers shared by the ops (private).

The generic checks (:func:`~fastweights.checks.describe`, :func:`~fastweights.checks.check_finite`,
:func:`~fastweights.checks.check_int`) live in :mod:`fastweights.checks`; here are the ops' own
(q/k/v/state shapes, chunk sizes) and their compute helpers.
"""

from __future__ import annotations

import torch
from torch import Tensor

from fastweights.checks import check_finite, check_int, describe


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """float16/bfloat16 are computed in float32; float32/float64 in their own dtype."""
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


def check_qkv_state(q: Tensor, k: Tensor, v: Tensor, initial_state: Tensor | None) -> None:
    """Validate ``q, k [B, T, H, K]``, ``v [B, T, H, V]`` (same float dtype) and an optional state
    ``[B, H, K, V]``; finiteness of all of them.

    Raises:
        ValueError: naming the argument, with the expected shape/dtype and what was given.
    """
    if not isinstance(q, Tensor) or q.dim() != 4:
        raise ValueError(f"q: expected a 4-D tensor [B, T, H, K], got {describe(q)}")
    if not q.is_floating_point():
        raise ValueError(f"q: expected a floating-point dtype, got {q.dtype}")
    b, t, h, dk = q.shape
    if not isinstance(k, Tensor) or k.shape != q.shape:
        raise ValueError(f"k: expected shape [B, T, H, K] = {list(q.shape)} (same as q), got {describe(k)}")
    if not isinstance(v, Tensor) or v.dim() != 4 or tuple(v.shape[:3]) != (b, t, h):
        raise ValueError(f"v: expected shape [B, T, H, V] = [{b}, {t}, {h}, V], got {describe(v)}")
    for name, x in (("k", k), ("v", v)):
        if x.dtype != q.dtype:
            raise ValueError(f"{name}: expected dtype {q.dtype} (same as q), got {x.dtype}")
    if initial_state is not None:
        expected = (b, h, dk, v.shape[-1])
        if not isinstance(initial_state, Tensor) or tuple(initial_state.shape) != expected:
            raise ValueError(
                f"initial_state: expected shape [B, H, K, V] = {list(expected)}, "
                f"got {describe(initial_state)}"
            )
        if not initial_state.is_floating_point():
            raise ValueError(f"initial_state: expected a floating-point dtype, got {initial_state.dtype}")
    for name, x in (("q", q), ("k", k), ("v", v), ("initial_state", initial_state)):
        check_finite(name, x)


def initial_kv_state(q: Tensor, v: Tensor, initial_state: Tensor | None, dtype: torch.dtype) -> Tensor:
    """``initial_state`` in ``dtype``, or zeros ``[B, H, K, V]`` when it is None."""
    if initial_state is None:
        b, _, h, dk = q.shape
        return q.new_zeros(b, h, dk, v.shape[-1], dtype=dtype)
    return initial_state.to(dtype)


def check_chunk_size(chunk_size: object) -> int:
    """Return ``chunk_size`` if it is a positive int, else raise ``ValueError`` naming it."""
    return check_int("chunk_size", chunk_size)


def to_chunks(x: Tensor, chunk: int, dtype: torch.dtype) -> Tensor:
    """``[B, T, H, *]`` → ``[B, H, N, C, *]`` in ``dtype`` with ``N = ceil(T / C)``; the last chunk is
    zero-padded (a zero step adds nothing to the additive and delta-rule recurrences)."""
    b, t, h = x.shape[:3]
    n = -(-t // chunk)
    x = x.to(dtype)
    if n * chunk > t:
        x = torch.nn.functional.pad(x, (0, 0) * (x.dim() - 2) + (0, n * chunk - t))
    return x.transpose(1, 2).reshape(b, h, n, chunk, *x.shape[3:])
