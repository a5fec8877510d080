"""The one interface every sequence layer follows: ``out, state = layer(x, state=None)``."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from fastweights.ops._common import check_finite
from fastweights.ops.packing import run_packed

__all__ = ["SequenceLayer", "check_layer_input"]


def check_layer_input(x: Tensor, d_model: int) -> None:
    """Raise ``ValueError`` (naming ``x``) unless ``x`` is a finite float tensor ``[B, T, d_model]``."""
    if not isinstance(x, Tensor) or x.dim() != 3 or x.shape[-1] != d_model:
        got = f"shape {list(x.shape)}" if isinstance(x, Tensor) else type(x).__name__
        raise ValueError(f"x: expected a tensor of shape [B, T, {d_model}], got {got}")
    if not x.is_floating_point():
        raise ValueError(f"x: expected a floating-point dtype, got {x.dtype}")
    check_finite("x", x)


class SequenceLayer(nn.Module):
    """Base class of the sequence mixers (SRWM, DeltaNet, TTT, attention, LSTM).

    ``out, state = layer(x [B, T, d_model], state=None)``: ``state=None`` starts from the slow
    weights; the returned state continues the sequence exactly (one call over a concatenation equals
    two calls with the state carried). Subclasses implement :meth:`forward_unpacked`; packing of
    variable-length sequences (``cu_seqlens``) is handled here for every layer.
    """

    d_model: int
    state_batch_dim: int = 0  # the batch dimension of the state's tensors

    def forward(self, x: Tensor, state: Any = None, *, cu_seqlens: Any = None) -> tuple[Tensor, Any]:
        """``x [B, T, d_model]`` → ``(out [B, T, d_model], final state)``.

        With ``cu_seqlens`` (``[N + 1]`` int offsets, see :mod:`fastweights.ops.packing`), ``x`` is
        ``[1, total, d_model]`` holding ``N`` sequences back to back: each starts from its own row of
        ``state`` (batch ``N``; or a list of ``N`` states; ``None`` = slow weights), nothing crosses a
        boundary, and the final state has one row per sequence (a list of per-sequence states when
        they cannot be batched, e.g. KV caches of different lengths).

        Raises:
            ValueError: for a bad ``x``, ``state`` or ``cu_seqlens`` (naming the argument).
        """
        if cu_seqlens is None:
            return self.forward_unpacked(x, state)
        check_layer_input(x, self.d_model)
        return run_packed(
            lambda seg, s: self.forward_unpacked(seg[0], s),
            [x],
            cu_seqlens,
            state,
            batch_dim=self.state_batch_dim,
        )

    def forward_unpacked(self, x: Tensor, state: Any = None) -> tuple[Tensor, Any]:  # pragma: no cover
        """The layer's recurrence on an unpacked batch ``x [B, T, d_model]`` (see :meth:`forward`)."""
        raise NotImplementedError

    def read(self, x: Tensor, state: Any = None) -> Tensor:
        """Process every position of ``x [B, Q, d_model]`` as an independent one-step continuation
        of ``state`` and return the outputs ``[B, Q, d_model]``; the state is not changed.

        This is how ACL queries are evaluated (each query is a length-1 call whose updated state is
        discarded). The default expands the state over the ``Q`` queries; layers whose output does not
        depend on their own update (SRWM) override it with a cheaper exact form.
        """
        check_layer_input(x, self.d_model)
        b, q, d = x.shape
        expanded = self.repeat_state(state, q) if state is not None else None
        out, _ = self(x.reshape(b * q, 1, d), expanded)
        return out.reshape(b, q, d)

    def forward_with_reads(self, x: Tensor, x_read: Tensor, state: Any = None) -> tuple[Tensor, Tensor, Any]:
        """``forward`` over ``x`` plus, at every step ``t``, an independent one-step read of
        ``x_read[:, t]`` from the state reached after ``x[:, :t]`` (its own update discarded).

        Returns ``(out [B, T, d_model], out_read [B, T, d_model], final state)``. The default runs the
        sequence one step at a time; layers with a cheaper exact form (SRWM) override it.
        """
        check_layer_input(x, self.d_model)
        check_layer_input(x_read, self.d_model)
        if x_read.shape != x.shape:
            raise ValueError(f"x_read: expected shape {list(x.shape)} (same as x), got {list(x_read.shape)}")
        outs, reads = [], []
        for t in range(x.shape[1]):
            reads.append(self.read(x_read[:, t : t + 1], state))
            out, state = self(x[:, t : t + 1], state)
            outs.append(out)
        return torch.cat(outs, dim=1), torch.cat(reads, dim=1), state

    def repeat_state(self, state: Any, repeats: int) -> Any:
        """Repeat every batch row of ``state`` ``repeats`` times (row-major: b0, b0, …, b1, …)."""
        if isinstance(state, Tensor):
            return torch.repeat_interleave(state, repeats, dim=0)
        if isinstance(state, (tuple, list)):
            return type(state)(self.repeat_state(s, repeats) for s in state)
        raise TypeError(f"state: cannot repeat a state of type {type(state).__name__}")
