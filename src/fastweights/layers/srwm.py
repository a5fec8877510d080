"""SRWM sublayer (Irie et al., ICML 2022; residual placement of modern-srwm, ACL init of ACL App. A.3)."""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from fastweights.checks import check_choice
from fastweights.layers.base import SequenceLayer, check_heads
from fastweights.ops.srwm import srwm, srwm_num_columns, srwm_read, srwm_reference, srwm_with_reads

__all__ = ["SRWMLayer", "pack_srwm_blocks", "SRWM_IMPLS"]

SRWM_IMPLS = ("fast", "reference")


def pack_srwm_blocks(w_y: Tensor, w_q: Tensor, w_k: Tensor, w_b: Tensor) -> Tensor:
    """Concatenate the reference's per-block weights (``[..., H, E, E]`` ×3 and ``[..., H, E, 4]``,
    order y, q, k, beta) into this library's fused ``[..., H, E, 3E+4]`` layout."""
    return torch.cat([w_y, w_q, w_k, w_b], dim=-1)


class SRWMLayer(SequenceLayer):
    """Self-referential weight matrix sublayer: ``out = LayerNorm(h) + Dropout(W_out · SRWM(h))``.

    The SRWM reads the raw input ``h`` and the LayerNorm sits on the skip branch (the reference's
    placement, ``SRWMlayer``). The state is the fast weights ``[B, H, E, 3E+4]`` (absolute values, not a
    shift from the slow weights); ``None`` starts from the slow weights ``self.weight``.

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

    Raises:
        ValueError: unless ``d_model`` and ``num_heads`` are positive ints with ``num_heads`` dividing
            ``d_model`` (naming the argument), or if ``init`` or ``impl`` is unknown.
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
    ) -> None:
        super().__init__()
        self.head_dim = check_heads(d_model, num_heads)
        if init not in ("acl", "modern"):
            raise ValueError(f"init: expected 'acl' or 'modern', got {init!r}")
        self.d_model, self.num_heads = d_model, num_heads
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

    def _output(self, x: Tensor, y: Tensor) -> Tensor:
        b, t = y.shape[:2]
        return self.layer_norm(x) + self.dropout(self.out_linear(y.reshape(b, t, self.d_model)))

    def forward_unpacked(self, x: Tensor, state: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """``x [B, T, D]`` → ``(out [B, T, D], fast weights [B, H, E, 3E+4])``."""
        op = srwm if self.impl == "fast" else srwm_reference
        y, new_state = op(
            self._heads(x), self.weight.to(x.dtype), initial_state=state, output_final_state=True
        )
        return self._output(x, y), new_state

    def read(self, x: Tensor, state: Tensor | None = None) -> Tensor:
        """Independent one-step reads ``[B, Q, D]`` from ``state`` (exact; see ``ops.srwm_read``)."""
        if self.impl == "reference":
            return super().read(x, state)
        self.check_input(x)
        y = srwm_read(self._heads(x), self.weight.to(x.dtype), state=state)
        return self._output(x, y)

    def forward_with_reads(
        self, x: Tensor, x_read: Tensor, state: Tensor | None = None
    ) -> tuple[Tensor, Tensor, Tensor]:
        """Exact fused form of :meth:`SequenceLayer.forward_with_reads` (``ops.srwm_with_reads``)."""
        if self.impl == "reference":
            return super().forward_with_reads(x, x_read, state)
        self.check_reads(x, x_read)
        y, y_read, new_state = srwm_with_reads(
            self._heads(x), self._heads(x_read), self.weight.to(x.dtype), initial_state=state
        )
        return self._output(x, y), self._output(x_read, y_read), new_state
