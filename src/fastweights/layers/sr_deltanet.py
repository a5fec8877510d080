"""SR-Delta sublayer: a DeltaNet whose slow projection is a self-referential weight matrix (SRWM).

Source: Irie, Schlag, Csordás, Schmidhuber, "A Modern Self-Referential Weight Matrix That Learns to
Modify Itself", ICML 2022 — the "SR-Delta" model of the multi-task reinforcement-learning experiments
(App. C). The details below were read from the authors' code (IDSIA/modern-srwm,
``reinforcement_learning/torchbeast/layer.py``: ``SMFWPlayer``, "self-modifying FWP", with the SRWM
kernel ``self_ref_v1`` whose y block has ``3E+1`` columns; ``torchbeast_procgen/model.py``:
``SMFWPModel``, commented "SR-Delta").
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor, nn

from fastweights.checks import check_int, check_real, describe
from fastweights.layers.base import SequenceLayer
from fastweights.ops.delta_rule import delta_rule, delta_rule_read
from fastweights.ops.srwm import srwm, srwm_num_columns, srwm_read

__all__ = ["SRDeltaNetLayer"]

SRDeltaState = tuple[Tensor, Tensor]


class SRDeltaNetLayer(SequenceLayer):
    """SR-Delta: ``out = x + Dropout(out_linear(DeltaRule(SRWM(softmax_E(x)))))``.

    Per head ``h`` and step ``t`` (``E = D / H``; from the reference code, see the module docstring):

    1. ``a_t = softmax(x_t[h])`` over the head's ``E`` inputs (the reference's input softmax).
    2. An SRWM with a ``y`` block of ``d_out = 3E + 1`` columns (weight ``[H, E, 5E+5]``, columns
       ``y (3E+1) | q (E) | k (E) | beta (4)``, ``ops.srwm``) reads ``p_t = a_t W^y_{t-1}`` with its
       pre-update weights and then modifies all of itself (4 learning rates, ICML 2022 Eq. 5-8).
    3. ``p_t`` is split ``E | E | E | 1`` into the DeltaNet's query, key, value and rate:
       ``q_t = softmax(.)``, ``k_t = softmax(.)``, ``v_t`` raw, ``beta_t = sigmoid(.)`` (softmax as in
       the reference; :class:`DeltaNetLayer` instead uses ``elu + 1`` with sum normalisation).
    4. DeltaNet fast weights ``S [E, E]`` (zeros at the start): ``S_t = S_{t-1} + outer(k_t,
       beta_t (v_t - k_t S_{t-1}))`` and ``o_t = q_t S_t``, read *after* the update (``ops.delta_rule``;
       the published layer calls ``fast_weight_memory``, a name that file does not import — read here
       as its delta-rule kernel ``fast_weight_delta``, which reads after the update).
    5. ``out = x + Dropout(out_linear(o))``: a plain residual with no LayerNorm (the reference builds
       a LayerNorm but never applies it; the input softmax is what normalises the SRWM's input).

    Block forms (``block``; see :class:`~fastweights.layers.base.SequenceLayer`), with the core
    ``core(h) = DeltaRule(SRWM(softmax_E(h)))`` (steps 1-4) and ``W_o = out_linear``:

    - ``"native"`` (default): ``out = x + Dropout(W_o · core(x))`` (step 5; the reference's
      ``SMFWPlayer``, no norm).
    - ``"pre_ln"``: ``out = x + Dropout(W_o · core(LN(x)))``: adds ``layer_norm`` (``nn.LayerNorm(D)``,
      state dict keys ``layer_norm.weight`` / ``layer_norm.bias``) before the input softmax.

    The SRWM never sees the DeltaNet's outputs, so the whole SRWM pass over a call runs first and the
    delta rule then runs chunkwise over the generated ``q, k, v, beta`` — the same order as the
    reference (its SRWM kernel runs over the whole segment before its delta-rule kernel).

    Initialisation (reference): every column of the SRWM's slow weights ``~ N(0, 1/E)`` (std
    ``1/sqrt(E)``, learning-rate block mean 0); ``out_linear`` is ``nn.Linear(D, D, bias=False)``.
    ``qk_init_scale`` (not in the reference; default 1 = the reference) multiplies the initial
    columns that generate the DeltaNet's query and key logits (the first ``2E`` of the ``y`` block).
    At the reference scale both softmaxes start close to uniform (input softmax over ``E`` values,
    then logits of std about ``1/E``), so every step writes nearly the same key: measured on the ACL
    model's synthetic tasks at initialisation (D 256, H 16), the cosine between the keys of two
    steps is 0.9995 on average (DeltaNet's ``elu + 1`` keys: 0.90), and 5-way in-context
    classification stays at chance; ``qk_init_scale=30`` gives 0.84 and leaves it.

    State: ``(srwm, delta)`` with ``srwm [B, H, E, 5E+5]`` the SRWM's absolute fast weights (``None``
    starts from ``self.weight``) and ``delta [B, H, E, E]`` the DeltaNet fast weights (zeros); both are
    float32 under half precision. Choices where the reference differs or is silent: the reference
    exports detached states (shifts from the slow weights) and the pure-PyTorch check of its kernel
    skips the last SRWM update; here the SRWM update is applied at every step (this library's SRWM
    convention, Irie et al. 2022 Eq. 5-8) and gradients flow through a carried state, so two calls
    with the state carried equal one call (values and gradients).

    Args:
        d_model: model width ``D``; must be divisible by ``num_heads``.
        num_heads: number of heads ``H``.
        dropout: dropout on the projected output.
        chunk_size: chunk length of the chunkwise-parallel delta rule.
        block: ``"native"`` or ``"pre_ln"`` (above).
        qk_init_scale: factor (> 0) on the initial query/key columns (above).

    Raises:
        ValueError: unless ``d_model`` and ``num_heads`` are positive ints with ``num_heads`` dividing
            ``d_model`` (naming the argument), for a non-positive ``chunk_size`` or
            ``qk_init_scale`` or an unknown ``block``.
    """

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        *,
        dropout: float = 0.0,
        chunk_size: int = 64,
        block: str = "native",
        qk_init_scale: float = 1.0,
    ) -> None:
        super().__init__()
        self.set_heads(d_model, num_heads, block)
        check_int("chunk_size", chunk_size)
        check_real("qk_init_scale", qk_init_scale, low=0, low_open=True)
        self.chunk_size = chunk_size
        self.qk_init_scale = float(qk_init_scale)
        self.y_dim = 3 * self.head_dim + 1  # the DeltaNet's q | k | v | beta, generated by the SRWM
        self.weight = nn.Parameter(torch.empty(num_heads, self.head_dim, self.num_columns))
        self.out_linear = nn.Linear(d_model, d_model, bias=False)
        self.dropout = nn.Dropout(dropout)
        self.reset_srwm_parameters()
        if self.block == "pre_ln":
            self.layer_norm = nn.LayerNorm(d_model)

    @property
    def num_columns(self) -> int:
        """Columns of the SRWM's weight per head: ``(3E+1) + 2E + 4 = 5E + 5``."""
        return srwm_num_columns(self.head_dim, self.y_dim)

    def reset_srwm_parameters(self) -> None:
        """Draw the SRWM's slow weights ``~ N(0, 1/E)`` (reference ``reset_rec_parameters``), then
        scale the DeltaNet's query/key columns by ``qk_init_scale``."""
        nn.init.normal_(self.weight, 0.0, 1.0 / math.sqrt(self.head_dim))
        if self.qk_init_scale != 1.0:
            with torch.no_grad():
                self.weight[..., : 2 * self.head_dim].mul_(self.qk_init_scale)

    def _check_state(self, state: Any, batch: int) -> tuple[Tensor | None, Tensor | None]:
        """Split ``state`` into ``(srwm, delta)``; ``None`` gives ``(None, None)``."""
        if state is None:
            return None, None
        h, e = self.num_heads, self.head_dim
        if not isinstance(state, (tuple, list)) or len(state) != 2:
            raise ValueError(
                f"state: expected None or a pair (SRWM fast weights [B, H, E, 5E+5], DeltaNet fast "
                f"weights [B, H, E, E]), got {type(state).__name__}"
            )
        shapes = [(batch, h, e, self.num_columns), (batch, h, e, e)]
        for i, (s, shape) in enumerate(zip(state, shapes, strict=True)):
            if not isinstance(s, Tensor) or tuple(s.shape) != shape or not s.is_floating_point():
                raise ValueError(
                    f"state[{i}]: expected a float tensor of shape {list(shape)}, got {describe(s)}"
                )
        return state[0], state[1]

    def _heads(self, x: Tensor) -> Tensor:
        b, t, _ = x.shape
        return torch.softmax(x.reshape(b, t, self.num_heads, self.head_dim), dim=-1)

    def _delta_inputs(self, p: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """SRWM outputs ``p [B, T, H, 3E+1]`` → DeltaNet ``q, k, v [B, T, H, E]``, ``beta [B, T, H]``."""
        e = self.head_dim
        q, k, v, logit = p.split([e, e, e, 1], dim=-1)
        return torch.softmax(q, dim=-1), torch.softmax(k, dim=-1), v, torch.sigmoid(logit.squeeze(-1))

    def native_input(self, x: Tensor) -> Tensor:
        """The native SR-Delta reads the raw input ``x`` (no norm)."""
        return x

    def _output(self, x: Tensor, o: Tensor) -> Tensor:
        """The block's output from the delta rule's per-head output ``o [B, T, H, E]``."""
        b, t, _ = x.shape
        return self.block_output(x, o.reshape(b, t, self.d_model))

    def _srwm_pass(
        self, h: Tensor, s_srwm: Tensor | None, mask: Tensor | None = None
    ) -> tuple[tuple[Tensor, Tensor, Tensor, Tensor], Tensor]:
        """The SRWM over the whole block input ``h [B, T, D]`` (steps 1-3): the delta rule's
        ``(q, k, v, beta)`` and the SRWM's final fast weights (``mask``: a validated padding mask)."""
        a = self._heads(h)
        p, new_srwm = srwm(
            a,
            self.weight.to(a.dtype),
            initial_state=s_srwm,
            output_final_state=True,
            d_out=self.y_dim,
            attention_mask=mask,
        )
        assert new_srwm is not None
        return self._delta_inputs(p), new_srwm

    def projections(
        self, x: Tensor, state: SRDeltaState | None = None
    ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """Layer input ``x [B, T, D]`` → ``(q, k, v [B, T, H, E], beta [B, T, H])`` as fed to the delta
        rule, generated by the SRWM as it runs over ``x`` from ``state`` (``None``: the slow weights).

        Raises:
            ValueError: for a bad ``x`` or ``state`` (naming it).
        """
        self.check_input(x)
        return self._srwm_pass(self.block_input(x), self._check_state(state, x.shape[0])[0])[0]

    def core(
        self, h: Tensor, state: SRDeltaState | None = None, *, attention_mask: Tensor | None = None
    ) -> tuple[Tensor, SRDeltaState]:
        """``DeltaRule(SRWM(softmax_E(h)))``: ``h [B, T, D]`` → ``(c [B, T, D], (srwm [B, H, E, 5E+5],
        delta [B, H, E, E]))``. ``attention_mask [B, T]``: both recurrences skip the padding (the SRWM's
        input and the delta rule's rate are zero there) and ``c`` is zero there.

        Raises:
            ValueError: for a bad ``state`` (naming it; ``x`` is validated by :meth:`forward`).
        """
        s_srwm, s_delta = self._check_state(state, h.shape[0])
        mask = self.check_mask(h, attention_mask)
        delta_inputs, new_srwm = self._srwm_pass(h, s_srwm, mask)
        o, new_delta = delta_rule(
            *delta_inputs,
            initial_state=s_delta,
            output_final_state=True,
            chunk_size=self.chunk_size,
            attention_mask=mask,
        )
        assert new_delta is not None
        b, t, _ = h.shape
        return o.reshape(b, t, self.d_model), (new_srwm, new_delta)

    def read(self, x: Tensor, state: SRDeltaState | None = None) -> Tensor:
        """Independent one-step reads ``[B, Q, D]`` from ``state`` (exact, without copying the state):
        the SRWM part reads with its pre-update weights (``ops.srwm_read``) and the DeltaNet part is
        one discarded delta-rule step per query (``ops.delta_rule_read``)."""
        self.check_input(x)
        s_srwm, s_delta = self._check_state(state, x.shape[0])
        a = self._heads(self.block_input(x))
        p = srwm_read(a, self.weight.to(a.dtype), state=s_srwm, d_out=self.y_dim)
        return self._output(x, delta_rule_read(*self._delta_inputs(p), state=s_delta))
