"""Padding masks (``attention_mask [B, T]``, the Hugging Face convention) shared by every op and layer.

``attention_mask[b, t]`` is 1 / ``True`` where step ``t`` of row ``b`` is a real token and 0 / ``False``
where it is padding. Each row's real tokens must be one contiguous run: padding before them (left
padding), after them (right padding) or both; a row may be all padding (length 0). The mask is bool,
or an integer or floating tensor holding only 0 and 1.

Semantics, for every op and layer that takes a mask: the outputs at the real tokens of row ``b`` and
its final state are those of running that row's real tokens alone, from row ``b``'s initial state;
the state does not change at padding, so with left padding a row starts at its first real token;
the outputs at padding are zeros. Gradients reach no padded input (they are zero there).

Two ways to make a padded step a no-op are used, both exact: ops whose write vanishes for a zero input
or rate (delta rule: ``beta = 0``; linear attention: ``k = 0``; SRWM: ``x = 0``) zero that input at the
padding (:func:`supports_attention_mask`); ops and layers where positions matter (TTT mini-batches,
rotary positions, convolutions, the LSTM) move each row's real tokens together first
(:func:`left_justify`) and back afterwards (:func:`restore_padding`).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any, TypeVar

import torch
from torch import Tensor

from fastweights.checks import describe

__all__ = [
    "MASK_SEMANTICS",
    "check_attention_mask",
    "left_justify",
    "mask_lengths",
    "mask_starts",
    "real_positions",
    "restore_padding",
    "supports_attention_mask",
    "zero_padding",
]

F = TypeVar("F", bound=Callable[..., Any])

#: one line on what a mask means, for docstrings and error messages
MASK_SEMANTICS = "1/True = real token, 0/False = padding"


def check_attention_mask(mask: object, batch: int, steps: int, device: torch.device, of: str = "x") -> Tensor:
    """Validate a padding mask for an input of ``batch`` rows and ``steps`` steps on ``device`` and
    return it as a bool tensor ``[batch, steps]``.

    Args:
        mask: ``[B, T]`` bool, or an integer or floating tensor of 0/1 values (1 = real token).
        batch, steps: the ``B`` and ``T`` of the input it masks.
        device: the input's device (the mask must be on it).
        of: the input's name, for the error message.

    Raises:
        ValueError: one line naming ``attention_mask`` — not a tensor, a shape other than
            ``[batch, steps]``, another device, a complex dtype, a value other than 0/1, or a row
            whose real tokens are not contiguous.
    """
    if not isinstance(mask, Tensor):
        raise ValueError(
            f"attention_mask: expected a tensor [B, T] = [{batch}, {steps}] ({MASK_SEMANTICS}), "
            f"got {describe(mask)}"
        )
    if tuple(mask.shape) != (batch, steps):
        raise ValueError(
            f"attention_mask: expected shape [B, T] = [{batch}, {steps}] (the batch and steps of {of}), "
            f"got {list(mask.shape)}"
        )
    if mask.device != torch.device(device):
        raise ValueError(
            f"attention_mask: expected a tensor on {device} (the device of {of}), got {mask.device}"
        )
    if mask.is_complex():
        raise ValueError(f"attention_mask: expected a bool, integer or floating dtype, got {mask.dtype}")
    if mask.dtype != torch.bool:
        values = mask.detach()
        bad = (values != 0) & (values != 1)
        if bool(bad.any()):
            raise ValueError(
                f"attention_mask: expected only 0 and 1 ({MASK_SEMANTICS}), got {values[bad][0].item()!r}"
            )
        mask = values != 0
    if steps > 1:
        runs = mask[:, :1].sum(1) + (mask[:, 1:] & ~mask[:, :-1]).sum(1)  # real runs per row
        broken = (runs > 1).nonzero()
        if broken.numel():
            row = int(broken[0, 0])
            values = [int(v) for v in mask[row, :40].tolist()]
            more = ", …" if steps > 40 else ""
            raise ValueError(
                "attention_mask: expected each row's real tokens to be contiguous (padding only before "
                f"and after them), got row {row} = [{', '.join(map(str, values))}{more}]"
            )
    return mask


def mask_lengths(mask: Tensor) -> Tensor:
    """The number of real tokens of each row, ``[B]`` int64."""
    return mask.sum(1)


def mask_starts(mask: Tensor) -> Tensor:
    """The step of each row's first real token, ``[B]`` int64 (0 for a row that is all padding)."""
    if mask.shape[1] == 0:
        return mask.new_zeros(mask.shape[0], dtype=torch.int64)
    return mask.to(torch.uint8).argmax(1)


def real_positions(mask: Tensor, offset: Tensor | None = None) -> Tensor:
    """``[B, T]`` int64: at a real token, its index among its row's real tokens plus ``offset[b]``
    (``[B]``; 0 without), i.e. the position it has in the row's unpadded sequence continued from
    ``offset``; at padding, the position of the row's next real token (any value would do: padding
    is never read)."""
    pos = mask.cumsum(1) - mask.to(torch.int64)
    return pos if offset is None else pos + offset[:, None]


def zero_padding(x: Tensor, mask: Tensor) -> Tensor:
    """``x [B, T, ...]`` with zeros where ``mask [B, T]`` is False (no gradient reaches them)."""
    m = mask.view(*mask.shape, *([1] * (x.dim() - 2)))
    return torch.where(m, x, torch.zeros((), dtype=x.dtype, device=x.device))


def _gather_steps(x: Tensor, index: Tensor, valid: Tensor) -> Tensor:
    """``out[b, i] = x[b, index[b, i]]`` where ``valid[b, i]``, else 0 (``x [B, T, ...]``, ``index``
    and ``valid`` ``[B, N]``)."""
    if x.shape[1] == 0:
        return x.new_zeros(x.shape[0], index.shape[1], *x.shape[2:])
    idx = index.clamp(0, x.shape[1] - 1).view(*index.shape, *([1] * (x.dim() - 2)))
    out = x.gather(1, idx.expand(*index.shape, *x.shape[2:]))
    return zero_padding(out, valid)


def left_justify(x: Tensor, mask: Tensor, shift: Tensor | None = None, length: int | None = None) -> Tensor:
    """Move each row's real tokens together: ``out[b, shift[b] + j]`` is the ``j``-th real token of row
    ``b`` of ``x [B, T, ...]``; every other entry is 0.

    Args:
        x: ``[B, T, ...]`` batch-first steps.
        mask: ``[B, T]`` validated bool mask (contiguous real tokens).
        shift: ``[B]`` int64 where each row's first real token goes (0 without: left-justified).
        length: the number of steps of the result (default: the smallest that holds every row,
            ``max(shift + lengths)``).

    Returns:
        ``[B, length, ...]``; differentiable (gradients flow back to the real tokens only).
    """
    lengths, starts = mask_lengths(mask), mask_starts(mask)
    if shift is None:
        shift = torch.zeros_like(lengths)
    if length is None:
        length = int((shift + lengths).max()) if mask.shape[0] else 0
    i = torch.arange(length, device=x.device)[None, :]
    j = i - shift[:, None]  # index among the row's real tokens
    valid = (j >= 0) & (j < lengths[:, None])
    return _gather_steps(x, starts[:, None] + j, valid)


def restore_padding(y: Tensor, mask: Tensor, shift: Tensor | None = None) -> Tensor:
    """The inverse of :func:`left_justify`: ``out [B, T, ...]`` (``T = mask.shape[1]``) holds, at each
    real token of ``mask``, the entry of ``y [B, N, ...]`` it was moved to, and zeros at the padding."""
    starts = mask_starts(mask)
    t = torch.arange(mask.shape[1], device=y.device)[None, :]
    index = t - starts[:, None] + (0 if shift is None else shift[:, None])
    return _gather_steps(y, index, mask)


_MASK_DOC = """
    Padding: ``attention_mask`` (optional, ``[B, T]``: bool, or integer / floating 0/1; {semantics};
    each row's real tokens contiguous) makes padded steps no-ops: {how}, so the outputs at the real
    tokens of each row and its final state are those of the row's real tokens alone (from its own
    initial state); the outputs at padding are zeros and no gradient reaches a padded input.
    ``attention_mask=None`` is the unmasked computation, unchanged; an all-real mask gives the same
    values. Raises ``ValueError`` naming ``attention_mask`` for a bad mask
    (:func:`fastweights.ops.masking.check_attention_mask`), or one given with ``cu_seqlens``.
"""


def supports_attention_mask(zeroed: str, how: str, like: str | None = None) -> Callable[[F], F]:
    """Decorator: give an op ``fn(..., initial_state=None, output_final_state=False)`` whose write at a
    step vanishes when its argument ``zeroed`` (``[B, T, ...]``) is zero there a keyword
    ``attention_mask``: ``zeroed`` is set to zero at the padding, the op runs unchanged, and its output
    (the first returned value, ``[B, T, ...]``) is set to zero at the padding.

    Args:
        zeroed: the argument zeroed at the padding.
        how: why the padded steps are then no-ops (for the docstring).
        like: the argument whose ``[B, T]`` the mask must have (default: ``zeroed``).
    """

    def decorate(op: F) -> F:
        signature = inspect.signature(op)
        reference = like or zeroed

        @functools.wraps(op)
        def wrapper(*args: Any, attention_mask: Any = None, **kwargs: Any) -> Any:
            if attention_mask is None:
                return op(*args, **kwargs)
            bound = signature.bind(*args, **kwargs)
            ref = bound.arguments.get(reference)
            if not isinstance(ref, Tensor) or ref.dim() < 2:
                raise ValueError(f"{reference}: expected a tensor [B, T, ...], got {describe(ref)}")
            mask = check_attention_mask(attention_mask, ref.shape[0], ref.shape[1], ref.device, reference)
            x = bound.arguments.get(zeroed)
            if isinstance(x, Tensor) and tuple(x.shape[:2]) == tuple(mask.shape):  # else the op refuses it
                bound.arguments[zeroed] = zero_padding(x, mask)
            out, *rest = op(*bound.args, **bound.kwargs)
            return (zero_padding(out, mask), *rest)

        parameters = list(signature.parameters.values())
        parameters.append(inspect.Parameter("attention_mask", inspect.Parameter.KEYWORD_ONLY, default=None))
        wrapper.__signature__ = signature.replace(parameters=parameters)  # type: ignore[attr-defined]
        wrapper.__doc__ = (op.__doc__ or "") + _MASK_DOC.format(semantics=MASK_SEMANTICS, how=how)
        return wrapper  # type: ignore[return-value]

    return decorate
