"""DeltaNet sublayer: the fast-weight baseline of the SRWM paper (``FastFFlayer``; not in the ACL paper).

Sources: Schlag, Irie, Schmidhuber, ICML 2021 (delta rule, ``elu + 1`` feature map with sum
normalisation); Irie et al., ICML 2022 (the baseline layer, modern-srwm ``FastFFlayer``; automated-cl
``layer.py`` keeps it, but the ACL paper, Irie et al. 2025, reports no DeltaNet model).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from fastweights.checks import check_int
from fastweights.layers.base import SequenceLayer
from fastweights.ops.delta_rule import delta_rule

__all__ = ["DeltaNetLayer", "deltanet_layer_from_reference"]


def deltanet_layer_from_reference(sd: dict[str, Tensor], prefix: str = "") -> dict[str, Tensor]:
    """Map a reference ``FastFFlayer`` state dict (keys under ``prefix``) to :class:`DeltaNetLayer` keys.

    The layouts are identical (``slow_net.weight [H(3E+1), D]`` whose output is viewed per head as
    ``q (E) | k (E) | v (E) | b (1)``, ``layer_norm.*``, ``out_linear.weight``), so this only strips the
    prefix; it exists so that model converters treat every sublayer alike.

    Raises:
        KeyError: if an expected reference key is missing.
    """
    keys = ("slow_net.weight", "layer_norm.weight", "layer_norm.bias", "out_linear.weight")
    return {k: sd[prefix + k] for k in keys}


class DeltaNetLayer(SequenceLayer):
    """DeltaNet sublayer, pre-LN residual: ``out = x + Dropout(out_linear(DeltaRule(LN(x))))``.

    Block forms (``block``; see :class:`~fastweights.layers.base.SequenceLayer`): the native form is
    already the uniform pre-LN residual ``out = x + Dropout(W_o · core(LN(x)))``, with ``LN =
    layer_norm``, ``W_o = out_linear`` and ``core(h) = DeltaRule(slow_net(h))`` (the block of the
    reference's ``FastFFlayer``, modern-srwm; the core is Schlag et al. 2021, Eq. 23-25, computed
    chunkwise as in Yang et al. 2024), so ``"native"`` and ``"pre_ln"`` are the same module.

    Per head (Schlag et al. 2021): ``[q, k, v, b] = slow_net(LN(x))`` split as ``E, E, E, 1``;
    ``beta = sigmoid(b)``; ``q, k <- elu(.) + 1`` then divided by their sum over the ``E`` entries
    (positive, summing to 1, so ``||k|| <= 1`` and the update ``I - beta k^T k`` is a contraction); the
    fast weights ``[E, E]`` start at zero (or the carried state) and are written with the delta rule;
    the output ``o_t = q_t W_t`` is read *after* step t's update (``ops.delta_rule``, chunked form).

    The state is the fast weights ``[B, H, E, E]`` (float32 under half precision). Unlike the
    reference's stateful model, which detaches the exported state, gradients flow through a carried
    state, so two calls with the state carried equal one call (values and gradients).

    Parameter layout equals the reference (``slow_net.weight [H(3E+1), D]``, ``layer_norm``,
    ``out_linear.weight``): reference state dicts load directly (see
    :func:`deltanet_layer_from_reference`).

    Args:
        d_model: model width ``D``; must be divisible by ``num_heads`` (``E = D / H``).
        num_heads: number of heads ``H``.
        dropout: dropout on the projected output.
        chunk_size: chunk length of the chunkwise-parallel delta rule.
        block: ``"native"`` or ``"pre_ln"`` (the same form, above).

    Raises:
        ValueError: unless ``d_model`` and ``num_heads`` are positive ints with ``num_heads`` dividing
            ``d_model`` (naming the argument), for a non-positive ``chunk_size`` or an unknown ``block``.
    """

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        *,
        dropout: float = 0.0,
        chunk_size: int = 64,
        block: str = "native",
    ) -> None:
        super().__init__()
        self.set_heads(d_model, num_heads, block)
        check_int("chunk_size", chunk_size)
        self.chunk_size = chunk_size
        self.slow_net = nn.Linear(d_model, num_heads * (3 * self.head_dim + 1), bias=False)
        self.layer_norm = nn.LayerNorm(d_model)
        self.out_linear = nn.Linear(d_model, d_model, bias=False)
        self.dropout = nn.Dropout(dropout)

    def projections(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """Layer input ``x [B, T, D]`` → ``(q, k, v [B, T, H, E], beta [B, T, H])`` as fed to the delta
        rule (from the block input ``LN(x)``)."""
        return self._project(self.block_input(x))

    def _project(self, h: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        b, t, _ = h.shape
        e = self.head_dim
        p = self.slow_net(h).reshape(b, t, self.num_heads, 3 * e + 1)
        q, k, v, logit = p.split([e, e, e, 1], dim=-1)
        q = nn.functional.elu(q) + 1.0
        k = nn.functional.elu(k) + 1.0
        q = q / q.sum(dim=-1, keepdim=True)
        k = k / k.sum(dim=-1, keepdim=True)
        return q, k, v, torch.sigmoid(logit.squeeze(-1))

    def core(
        self, h: Tensor, state: Tensor | None = None, *, attention_mask: Tensor | None = None
    ) -> tuple[Tensor, Tensor]:
        """``DeltaRule(slow_net(h))``: ``h [B, T, D]`` → ``(c [B, T, D], fast weights [B, H, E, E])``;
        ``attention_mask [B, T]``: ``beta = 0`` at padding (no write) and ``c`` zero there."""
        q, k, v, beta = self._project(h)
        o, new_state = delta_rule(
            q,
            k,
            v,
            beta,
            initial_state=state,
            output_final_state=True,
            chunk_size=self.chunk_size,
            attention_mask=self.check_mask(h, attention_mask),
        )
        b, t, _ = h.shape
        assert new_state is not None
        return o.reshape(b, t, self.d_model), new_state
