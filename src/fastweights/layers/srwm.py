"""SRWM sublayer (Irie et al., ICML 2022; residual placement of modern-srwm, ACL init of ACL App. A.3)."""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor, nn

from fastweights.checks import check_choice
from fastweights.layers.base import SequenceLayer
from fastweights.ops._common import compute_dtype
from fastweights.ops.masking import zero_padding
from fastweights.ops.srwm import srwm, srwm_num_columns, srwm_read, srwm_reference, srwm_with_reads

__all__ = ["SRWMLayer", "pack_srwm_blocks", "SRWM_IMPLS"]

SRWM_IMPLS = ("fast", "reference")


def pack_srwm_blocks(w_y: Tensor, w_q: Tensor, w_k: Tensor, w_b: Tensor) -> Tensor:
    """Concatenate the reference's per-block weights (``[..., H, E, E]`` ×3 and ``[..., H, E, 4]``,
    order y, q, k, beta) into this library's fused ``[..., H, E, 3E+4]`` layout."""
    return torch.cat([w_y, w_q, w_k, w_b], dim=-1)


class SRWMLayer(SequenceLayer):
    """Self-referential weight matrix sublayer: ``out = LayerNorm(h) + Dropout(W_out · SRWM(h))``.

    Block forms (``block``; see :class:`~fastweights.layers.base.SequenceLayer`), with the core
    ``core(h) = SRWM(φ(h))`` (``φ`` = the per-head input softmax with ``use_input_softmax``, else the
    identity; the SRWM of Irie et al., ICML 2022, Eq. 5-8, read with the pre-update weights):

    - ``"native"`` (default): ``out = LN(x) + Dropout(W_o · core(x))``. The SRWM reads the raw input
      ``x`` and the LayerNorm sits on the skip branch: the placement of the reference code (modern-srwm
      and automated-cl ``SRWMlayer``; the paper writes only the SRWM's own equations).
    - ``"pre_ln"``: ``out = x + Dropout(W_o · core(LN(x)))``: the SRWM reads the normalised input and
      the skip is the raw input. Same parameters and state dict keys (``layer_norm``, ``out_linear``).

    ``LN`` is ``layer_norm`` (``nn.LayerNorm(D)``), ``W_o`` is ``out_linear`` (bias-free ``D × D``).
    The state is the fast weights ``[B, H, E, 3E+4]`` (absolute values, not a shift from the slow
    weights); ``None`` starts from the slow weights ``self.weight``.

    Args:
        d_model: model width ``D``; must be divisible by ``num_heads`` (``E = D / H``).
        num_heads: number of heads ``H``.
        dropout: dropout on the projected output.
        use_input_softmax: softmax over each head's ``E`` inputs before the SRWM (off by default;
            the ACL paper uses the variant without it).
        init: ``"acl"`` (W_q std ``0.01/sqrt(E)``, others ``1/sqrt(E)``; ACL paper App. A.3) or
            ``"modern"`` (all blocks std ``1/sqrt(E)``).
        beta_init: mean of the learning-rate block's initial weights (0 in the scripts).
        impl: ``"fast"`` (default: ``ops.srwm`` / ``srwm_with_reads`` / ``srwm_read``) or
            ``"reference"`` (the per-step ``ops.srwm_reference``; reads and reads-beside-the-sequence
            through the generic :class:`SequenceLayer` forms built on it). Same parameters, values and
            gradients up to rounding; for parity checks in training. Settable after construction.
        block: ``"native"`` or ``"pre_ln"`` (above).

    Raises:
        ValueError: unless ``d_model`` and ``num_heads`` are positive ints with ``num_heads`` dividing
            ``d_model`` (naming the argument), or if ``init``, ``impl`` or ``block`` is unknown.
    """

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        *,
        dropout: float = 0.0,
        use_input_softmax: bool = False,
        init: str = "acl",
        beta_init: float = 0.0,
        impl: str = "fast",
        block: str = "native",
    ) -> None:
        super().__init__()
        self.set_heads(d_model, num_heads, block)
        if init not in ("acl", "modern"):
            raise ValueError(f"init: expected 'acl' or 'modern', got {init!r}")
        self.use_input_softmax = use_input_softmax
        e = self.head_dim
        self.weight = nn.Parameter(torch.empty(num_heads, e, srwm_num_columns(e)))
        self.out_linear = nn.Linear(d_model, d_model, bias=False)
        self.layer_norm = nn.LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout)
        self.init, self.beta_init = init, beta_init
        self.impl = impl
        self.reset_srwm_parameters()

    @property
    def impl(self) -> str:
        """``"fast"`` or ``"reference"``: which SRWM op computes the recurrence (see the class)."""
        return self._impl

    @impl.setter
    def impl(self, value: str) -> None:
        check_choice("impl", value, SRWM_IMPLS)
        self._impl = value

    def reset_srwm_parameters(self) -> None:
        """Draw the slow weights with the ACL (App. A.3) or modern-srwm initialisation."""
        e = self.head_dim
        std = 1.0 / math.sqrt(e)
        q_std = std * (0.01 if self.init == "acl" else 1.0)
        with torch.no_grad():
            nn.init.normal_(self.weight, 0.0, std)
            self.weight[..., e : 2 * e].normal_(0.0, q_std)
            self.weight[..., 3 * e :].normal_(self.beta_init, std)

    def _heads(self, x: Tensor) -> Tensor:
        b, t, _ = x.shape
        h = x.reshape(b, t, self.num_heads, self.head_dim)
        return torch.softmax(h, dim=-1) if self.use_input_softmax else h

    def native_input(self, x: Tensor) -> Tensor:
        """The native SRWM reads the raw input ``x``."""
        return x

    def native_output(self, x: Tensor, c: Tensor) -> Tensor:
        """``LN(x) + Dropout(W_o · c)``: the reference's LayerNorm on the skip branch."""
        return self.layer_norm(x) + self.dropout(self.out_linear(c))

    def _output(self, x: Tensor, y: Tensor) -> Tensor:
        """The block's output from the SRWM's per-head output ``y [B, T, H, E]``."""
        b, t = y.shape[:2]
        return self.block_output(x, y.reshape(b, t, self.d_model))

    def initial_fast_weights(self, x: Tensor) -> Tensor:
        """The fast weights ``[B, H, E, 3E+4]`` that the core starts from (``state=None``) on an input
        ``x [B, T, D]`` (what the core reads: the layer input in the native form, ``LN(x)`` in
        ``"pre_ln"``): ``self.weight`` in ``x``'s dtype, then the op's compute dtype (float32 for half
        inputs), expanded over the batch (a read-only view, differentiable in ``self.weight``).

        Equal in values and gradient to the state returned by a ``T = 0`` call, without running the op.
        """
        w = self.weight.to(x.dtype).to(compute_dtype(x.dtype))
        return w.unsqueeze(0).expand(x.shape[0], *w.shape)

    def core(
        self, h: Tensor, state: Tensor | None = None, *, attention_mask: Tensor | None = None
    ) -> tuple[Tensor, Tensor]:
        """``SRWM(φ(h))``: ``h [B, T, D]`` → ``(c [B, T, D], fast weights [B, H, E, 3E+4])``;
        ``attention_mask [B, T]``: the SRWM's input is zero at padding (an exact no-op, ``ops.srwm``)."""
        op = srwm if self.impl == "fast" else srwm_reference
        y, new_state = op(
            self._heads(h),
            self.weight.to(h.dtype),
            initial_state=state,
            output_final_state=True,
            attention_mask=self.check_mask(h, attention_mask),
        )
        b, t, _ = h.shape
        return y.reshape(b, t, self.d_model), new_state

    def forward_with_resets(self, x: Tensor, state: Tensor | None, reset: Tensor) -> tuple[Tensor, Tensor]:
        """:meth:`forward` with the fast weights of sequence ``b`` set back to the slow weights (the
        state of :meth:`initial_fast_weights`) before step ``t`` is read wherever ``reset[b, t]`` — e.g.
        the episode starts of the RL cores (``fastweights.rl.cores``).

        One op call, equal in values and gradients to calling :meth:`forward` on each stretch between
        resets with the resetting sequences' weights replaced in between. Every piece of a sequence
        that starts at a reset after step 0 becomes an extra batch row starting from the slow weights,
        and each row's op inputs (after the input softmax) are zero outside its own steps: a zero SRWM
        input is an exact no-op (``y = 0``; ``q = k``, so ``q - k = 0`` and the update is 0), so each
        row's outputs on its steps and its final weights are those of its piece alone. Costs one row of
        fast weights ``[H, E, 3E+4]`` and ``T`` steps of the op per reset after step 0.

        Args:
            x: ``[B, T, D]`` input (as for :meth:`forward`).
            state: ``[B, H, E, 3E+4]`` fast weights before step 0, or ``None`` (the slow weights).
            reset: ``[B, T]`` bool.

        Returns:
            ``(out [B, T, D], final fast weights [B, H, E, 3E+4])``.

        Raises:
            ValueError: for a bad ``x`` or ``state`` (as for :meth:`forward`) or a ``reset`` that is not a
                ``[B, T]`` bool tensor.
        """
        self.check_input(x)
        b, t_len, _ = x.shape
        if not isinstance(reset, Tensor) or reset.dtype != torch.bool or reset.shape != (b, t_len):
            got = f"{reset.dtype} {list(reset.shape)}" if isinstance(reset, Tensor) else type(reset).__name__
            raise ValueError(f"reset: expected a bool tensor of shape [B, T] = {[b, t_len]}, got {got}")
        hx = self.block_input(x)
        s0 = self.initial_fast_weights(hx)
        if state is None:
            state = s0
        if bool(t_len) and bool(reset[:, 0].any()):
            state = torch.where(reset[:, 0].view(b, 1, 1, 1), s0, state)
        if t_len <= 1 or not bool(reset[:, 1:].any()):
            c, new_state = self.core(hx, state)
            return self.block_output(x, c), new_state
        later = reset.clone()
        later[:, 0] = False  # resets after step 0 start extra rows
        pieces = later.sum(1)  # [B]
        extra = int(pieces.sum())
        # the batch row of every (b, t): b for the piece that starts at step 0, B + its index (in order of
        # b, then t) for a piece that starts at a reset after step 0
        piece = later.cumsum(1)  # [B, T] pieces started after step 0 so far
        first = pieces.cumsum(0) - pieces  # [B] extra rows before sequence b's
        rows = torch.arange(b, device=x.device)[:, None]
        row = torch.where(piece == 0, rows, b - 1 + first[:, None] + piece)
        index = (row * t_len + torch.arange(t_len, device=x.device)).flatten()  # into [B + R, T]
        h = self._heads(hx)
        heads = h.new_zeros(b + extra, t_len, self.num_heads, self.head_dim)
        heads = heads.flatten(0, 1).index_copy(0, index, h.flatten(0, 1)).view_as(heads)
        start = torch.cat([state, s0[:1].expand(extra, *s0.shape[1:])])
        op = srwm if self.impl == "fast" else srwm_reference
        y, final = op(heads, self.weight.to(hx.dtype), initial_state=start, output_final_state=True)
        y = y.flatten(0, 1).index_select(0, index).view(b, t_len, self.num_heads, self.head_dim)
        final = final.index_select(0, row[:, -1])
        return self._output(x, y), final

    def read(self, x: Tensor, state: Tensor | None = None) -> Tensor:
        """Independent one-step reads ``[B, Q, D]`` from ``state`` (exact; see ``ops.srwm_read``)."""
        if self.impl == "reference":
            return super().read(x, state)
        self.check_input(x)
        hx = self.block_input(x)
        y = srwm_read(self._heads(hx), self.weight.to(hx.dtype), state=state)
        return self._output(x, y)

    def forward_with_reads(
        self, x: Tensor, x_read: Tensor, state: Tensor | None = None, *, attention_mask: Any = None
    ) -> tuple[Tensor, Tensor, Tensor]:
        """Exact fused form of :meth:`SequenceLayer.forward_with_reads` (``ops.srwm_with_reads``; with
        ``attention_mask`` the padded inputs are zero, an exact no-op, and both outputs zero there)."""
        if self.impl == "reference":
            return super().forward_with_reads(x, x_read, state, attention_mask=attention_mask)
        self.check_reads(x, x_read)
        mask = self.check_mask(x, attention_mask)
        hx, hx_read = self.block_input(x), self.block_input(x_read)
        y, y_read, new_state = srwm_with_reads(
            self._heads(hx),
            self._heads(hx_read),
            self.weight.to(hx.dtype),
            initial_state=state,
            attention_mask=mask,
        )
        out, out_read = self._output(x, y), self._output(x_read, y_read)
        if mask is not None:
            out, out_read = zero_padding(out, mask), zero_padding(out_read, mask)
        return out, out_read, new_state
