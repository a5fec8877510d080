"""Depthwise causal 1-D convolution with an explicit state (the short convolutions of the Mamba
backbone; TTT paper §2.7 / ttt-lm-pytorch ``ttt.py``)."""

from __future__ import annotations

import torch
from torch import Tensor

from fastweights.ops.masking import left_justify, mask_lengths, restore_padding

__all__ = ["causal_depthwise_conv"]


def causal_depthwise_conv(
    x: Tensor,
    weight: Tensor,
    bias: Tensor | None,
    state: Tensor | None = None,
    attention_mask: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """``y_t = sum_j weight[:, 0, j] * x_{t - k + 1 + j} + bias`` over channels, causal, no padding beyond
    the state.

    Args:
        x: ``[B, T, C]`` inputs.
        weight: ``[C, 1, k]`` (the ``nn.Conv1d(C, C, k, groups=C)`` weight).
        bias: ``[C]`` or ``None``.
        state: ``[B, C, k]``: the last ``k`` inputs before ``x`` (oldest first); ``None`` = zeros
            (start of a sequence). This is the reference's decode cache layout (``TTTCache``).
        attention_mask: optional validated bool ``[B, T]`` padding mask (contiguous real steps; see
            :func:`fastweights.ops.masking.check_attention_mask`): each row convolves its real steps
            only (the window skips padding), ``y`` is zero at padding and the new state holds the row's
            last ``k`` real inputs (with the old state's before them).

    Returns:
        ``(y [B, T, C], new_state [B, C, k])``; the new state holds the last ``k`` inputs seen, in the
        promoted dtype of ``x`` and float32 (fp32 even under autocast).

    Raises:
        ValueError: if ``state`` is not ``[B, C, k]`` for this ``x`` and ``weight``.
    """
    b, _, c = x.shape
    k = weight.shape[-1]
    if state is None:
        state = x.new_zeros(b, c, k)
    elif not isinstance(state, Tensor) or tuple(state.shape) != (b, c, k):
        got = list(state.shape) if isinstance(state, Tensor) else type(state).__name__
        raise ValueError(f"state: expected a conv state of shape [B, C, k] = {[b, c, k]}, got {got}")
    past = state.transpose(1, 2).to(x.dtype)  # [B, k, C]
    if attention_mask is not None:  # each row's real steps first: the window sees no padding
        x = left_justify(x, attention_mask, length=x.shape[1])
    full = torch.cat([past, x], dim=1)  # [B, k + T, C]
    if attention_mask is None:
        new_state = full[:, -k:].transpose(1, 2)
    else:  # the k inputs before each row's first padded step
        index = mask_lengths(attention_mask)[:, None] + torch.arange(k, device=x.device)
        new_state = full.gather(1, index[..., None].expand(b, k, c)).transpose(1, 2)
    new_state = new_state.to(torch.promote_types(new_state.dtype, torch.float32))
    if x.shape[1] == 0:
        return x, new_state
    y = (full[:, 1:].unfold(1, k, 1) * weight[:, 0].to(x.dtype)).sum(-1)  # [B, T, C]
    if bias is not None:
        y = y + bias.to(x.dtype)
    if attention_mask is not None:
        y = restore_padding(y, attention_mask)
    return y, new_state
