"""TTT-Linear / TTT-MLP sequence layers, parameter-compatible with ttt-lm-pytorch ``TTTLinear``/``TTTMLP``.

Sources: Sun et al., "Learning to (Learn at Test Time): RNNs with Expressive Hidden States",
arXiv 2407.04620 (ICML 2025), §2-§3; the reference module ``ttt.py`` of ttt-lm-pytorch (cd831db)
and its decode cache ``TTTCache``. The inner loop is :mod:`fastweights.ops.ttt`.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from fastweights.checks import check_int
from fastweights.layers.base import SequenceLayer
from fastweights.layers.conv import causal_depthwise_conv
from fastweights.layers.rotary import apply_rotary, rotary_tables
from fastweights.ops.masking import real_positions, zero_padding
from fastweights.ops.ttt import row_offsets, ttt_linear, ttt_mlp

__all__ = ["TTTLinearLayer", "TTTMLPLayer", "rope_tables"]


def rope_tables(head_dim: int, positions: int, theta: float = 10000.0) -> tuple[Tensor, Tensor]:
    """The reference's float32 RoPE tables ``(cos, sin)``, each ``[positions, head_dim]`` laid out as
    ``cat(freqs, freqs)`` (HF rotate-half layout); frequency ``p`` is ``theta^(-2p/head_dim)`` (RoFormer).
    Built with :func:`~fastweights.layers.rotary.rotary_tables` (the layers use its half-width tables).
    """
    cos, sin = rotary_tables(torch.arange(positions), head_dim, theta, torch.float32)
    return torch.cat([cos, cos], dim=-1), torch.cat([sin, sin], dim=-1)


class _TTTBase(SequenceLayer):
    _inner: str

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        *,
        mini_batch_size: int = 16,
        ttt_base_lr: float = 1.0,
        rope_theta: float = 10000.0,
        share_qk: bool = False,
        use_gate: bool = False,
        conv_kernel: int = 4,
        residual: bool = False,
        dropout: float = 0.0,
        block: str = "native",
    ) -> None:
        super().__init__()
        self.set_heads(d_model, num_heads, block)
        if residual and self.block != "native":
            raise ValueError(
                f"residual: expected False with block={self.block!r} (its residual and LayerNorm are the "
                "block's; residual=True is the native form's RMSNorm residual), got True"
            )
        if self.head_dim % 2:
            raise ValueError(f"d_model: expected an even head dim for RoPE, got {self.head_dim}")
        check_int("mini_batch_size", mini_batch_size)
        check_int("conv_kernel", conv_kernel)
        self.mini_batch_size, self.ttt_base_lr, self.rope_theta = mini_batch_size, ttt_base_lr, rope_theta
        self.share_qk, self.use_gate, self.conv_kernel, self.residual = (
            share_qk,
            use_gate,
            conv_kernel,
            residual,
        )
        h, d, c = num_heads, self.head_dim, d_model
        self.learnable_token_idx = nn.Parameter(torch.zeros(mini_batch_size))
        self.learnable_ttt_lr_weight = nn.Parameter(torch.randn(h, 1, c) * 0.02)
        self.learnable_ttt_lr_bias = nn.Parameter(torch.zeros(h, 1))
        self.ttt_norm_weight = nn.Parameter(torch.ones(h, d))
        self.ttt_norm_bias = nn.Parameter(torch.zeros(h, d))
        self.q_proj = nn.Linear(c, c, bias=False)
        if share_qk:
            self.conv_q = nn.Conv1d(c, c, conv_kernel, groups=c, padding=conv_kernel - 1, bias=True)
            self.conv_k = nn.Conv1d(c, c, conv_kernel, groups=c, padding=conv_kernel - 1, bias=True)
        else:
            self.k_proj = nn.Linear(c, c, bias=False)
        self.v_proj = nn.Linear(c, c, bias=False)
        self.o_proj = nn.Linear(c, c, bias=False)
        if use_gate:
            self.g_proj = nn.Linear(c, c, bias=False)
        self.post_norm = nn.LayerNorm(c, eps=1e-6)
        if residual:
            self.seq_norm = nn.RMSNorm(c, eps=1e-6)
            self.dropout = nn.Dropout(dropout)
        if self.block == "pre_ln":
            self.layer_norm = nn.LayerNorm(c)
            self.dropout = nn.Dropout(dropout)

    # ----------------------------------------------------------------------------- pieces
    def _inner_params(self) -> dict[str, Tensor]:  # pragma: no cover - overridden
        raise NotImplementedError

    def token_scale(self, dtype: torch.dtype) -> Tensor:
        """``s_i = max(0, 1/i + delta_i)``, ``i = 1..b``; ``1/i`` is computed in float64 (exact)."""
        idx = 1.0 / torch.arange(1, self.mini_batch_size + 1, dtype=torch.float64, device=self.W1.device)
        return (idx.to(dtype) + self.learnable_token_idx.to(dtype)).clamp_min(0.0)

    def learning_rate(self, x: Tensor) -> Tensor:
        """Source-token rates ``base_lr * sigmoid(x w_h + c_h) / head_dim``, ``[B, T, H]`` (§2.7)."""
        logits = (
            torch.einsum("btc,hc->bth", x, self.learnable_ttt_lr_weight[:, 0])
            + self.learnable_ttt_lr_bias[:, 0]
        )
        return self.ttt_base_lr * torch.sigmoid(logits) / self.head_dim

    def qkv(
        self,
        x: Tensor,
        offset: int | Tensor,
        conv_state: Tensor | None,
        attention_mask: Tensor | None = None,
    ) -> tuple[Tensor, Tensor, Tensor, Tensor | None]:
        """``x [B, T, C]`` → ``q, k, v [B, T, H, D]`` (RoPE at positions ``(offset + t) mod b``) and the
        new conv state ``[B, C, conv_kernel]`` (last inputs of the shared q/k projection, oldest first;
        ``None`` without ``share_qk``). ``offset`` may be per row (``[B]``); with ``attention_mask``
        (validated bool ``[B, T]``) ``t`` counts each row's real tokens and the convs skip padding."""
        b, t, c = x.shape
        new_conv = None
        if self.share_qk:
            xqk = self.q_proj(x)
            xq, new_conv = causal_depthwise_conv(
                xqk, self.conv_q.weight, self.conv_q.bias, conv_state, attention_mask
            )
            xk, _ = causal_depthwise_conv(
                xqk, self.conv_k.weight, self.conv_k.bias, conv_state, attention_mask
            )
        else:
            xq, xk = self.q_proj(x), self.k_proj(x)
        xv = self.v_proj(x)
        shape = (b, t, self.num_heads, self.head_dim)
        dt = xv.dtype  # the projection dtype (bfloat16 under autocast)
        if attention_mask is None and not isinstance(offset, Tensor):
            pos = (torch.arange(t, device=x.device) + offset) % self.mini_batch_size
            # float32 tables cast to the activation dtype, as the reference does (``RotaryEmbedding``)
            cos, sin = (z.to(dt)[:, None] for z in rotary_tables(pos, self.head_dim, self.rope_theta))
        else:  # one position per row and step: [B, T] tables, broadcast over the heads
            real = (
                torch.ones(b, t, dtype=torch.bool, device=x.device)
                if attention_mask is None
                else attention_mask
            )
            pos = real_positions(real, row_offsets(offset, b, x.device)) % self.mini_batch_size
            cos, sin = (z.to(dt)[:, :, None] for z in rotary_tables(pos, self.head_dim, self.rope_theta))
        q = apply_rotary(xq.to(dt).reshape(shape), cos, sin, interleaved=True)
        k = apply_rotary(xk.to(dt).reshape(shape), cos, sin, interleaved=True)
        return q, k, xv.reshape(shape), new_conv

    @property
    def output_projection(self) -> nn.Module:
        """``W_o``: the reference's ``o_proj``."""
        return self.o_proj

    def native_input(self, x: Tensor) -> Tensor:
        """``RMSNorm(x)`` (``seq_norm``) with ``residual=True``, else the raw ``x``."""
        return self.seq_norm(x) if self.residual else x

    def native_output(self, x: Tensor, c: Tensor) -> Tensor:
        """``x + Dropout(o_proj(c))`` with ``residual=True``, else ``o_proj(c)`` (the bare reference
        module)."""
        y = self.o_proj(c)
        return x + self.dropout(y) if self.residual else y

    def forward_unpacked(
        self, x: Tensor, state: dict | None = None, attention_mask: Tensor | None = None
    ) -> tuple[Tensor, dict]:
        """``x [B, T, C]`` → ``(out [B, T, C], state)`` (state and errors: see :meth:`core`); the token
        scales are computed in ``x``'s dtype; ``attention_mask``: the validated mask (or None), the
        output zero at padding."""
        if attention_mask is None:
            c, new_state = self.core(self.block_input(x), state, scale_dtype=x.dtype)
            return self.block_output(x, c), new_state
        h = self.block_input(x)
        c, new_state = self.core(h, state, scale_dtype=x.dtype, attention_mask=attention_mask)
        return zero_padding(self.block_output(x, c), attention_mask), new_state

    def core(
        self,
        h: Tensor,
        state: dict | None = None,
        *,
        scale_dtype: torch.dtype | None = None,
        attention_mask: Tensor | None = None,
    ) -> tuple[Tensor, dict]:
        """The TTT layer up to ``o_proj``: ``h [B, T, C]`` → ``(c [B, T, C], state)`` with
        ``c = [GELU_tanh(g_proj(h)) *] post_norm(TTT(q, k, v of h))``.

        ``state`` (``None`` = slow weights) is a dict: the inner-loop state of :mod:`fastweights.ops.ttt`
        (``"W1_states"``, ``"W1_grad"``, …, ``"offset"`` = tokens consumed mod ``b``) plus ``"conv_qk"``
        ``[B, C, conv_kernel]`` with ``share_qk``. Any split of a sequence into calls (e.g. prefill, then
        one token at a time) gives the outputs of one call over the whole sequence. ``scale_dtype``: the
        dtype of the position scales (:meth:`token_scale`; ``None``: ``h``'s).

        ``attention_mask [B, T]`` (see :meth:`SequenceLayer.forward`): every row reads and learns from
        its real tokens only, its RoPE positions and mini-batches counted from its own offset (the
        state's ``"offset"`` then is an int64 tensor ``[B]``), the shared q/k convs skip padding, and
        ``c`` is zero at padding. A state with a per-row ``"offset"`` continues each row, with or
        without a mask.

        Raises:
            ValueError: if ``state`` or ``attention_mask`` is malformed (``x`` is validated by
                :meth:`forward`).
        """
        if state is not None and not isinstance(state, dict):
            raise ValueError(
                f"state: expected None or a dict returned by this layer, got {type(state).__name__}"
            )
        inner = None if state is None else {k: v for k, v in state.items() if k != "conv_qk"}
        offset = 0 if state is None else state.get("offset", 0)
        if not isinstance(offset, (int, Tensor)):
            raise ValueError(f"state: expected an int 'offset' (or a tensor [B] of them), got {offset!r}")
        mask = self.check_mask(h, attention_mask)
        conv_qk = None if state is None else state.get("conv_qk")
        if self.share_qk and state is not None:
            expected = (h.shape[0], self.d_model, self.conv_kernel)
            if not isinstance(conv_qk, Tensor) or tuple(conv_qk.shape) != expected:
                got = list(conv_qk.shape) if isinstance(conv_qk, Tensor) else type(conv_qk).__name__
                raise ValueError(f"state: expected 'conv_qk' of shape {list(expected)}, got {got}")
        q, k, v, conv = self.qkv(h, offset, conv_qk, mask)
        lr = self.learning_rate(h).to(q.dtype)
        op = ttt_linear if self._inner == "linear" else ttt_mlp
        o, new_state = op(
            q,
            k,
            v,
            lr,
            self.token_scale(h.dtype if scale_dtype is None else scale_dtype),
            *self._inner_params().values(),
            self.ttt_norm_weight,
            self.ttt_norm_bias,
            initial_state=inner,
            output_final_state=True,
            attention_mask=mask,
        )
        assert new_state is not None
        y = self.post_norm(o.reshape(h.shape))
        if self.use_gate:
            y = F.gelu(self.g_proj(h), approximate="tanh") * y
        if conv is not None:
            new_state["conv_qk"] = conv
        return (y if mask is None else zero_padding(y, mask)), new_state

    def repeat_state(self, state: Any, repeats: int) -> Any:
        """Repeat every batch row of the state dict ``repeats`` times (an int offset is shared, a
        per-row offset tensor repeated)."""
        return {
            key: torch.repeat_interleave(val, repeats, dim=0) if isinstance(val, Tensor) else val
            for key, val in state.items()
        }

    def select_state(self, state: Any, index: Tensor) -> Any:
        """The batch rows ``index`` of the state dict (an int offset is shared, a per-row offset tensor
        selected)."""
        return {
            key: val.index_select(0, index.to(val.device)) if isinstance(val, Tensor) else val
            for key, val in state.items()
        }


_LAYER_DOC = """

    Forward (Sun et al. 2024, §2.3, §2.7): ``XQ, XK, XV`` by bias-free projections (``share_qk``: one shared
    projection followed by two depthwise causal convs with bias, kernel ``conv_kernel``); interleaved RoPE
    (pairs ``(2p, 2p+1)``) at positions ``t mod b`` with the reference's float32 tables; token rates
    ``lr = base_lr * sigmoid(x w_h + c_h) / head_dim``; position scales ``max(0, 1/i + delta_i)``; the
    mini-batch TTT inner loop (:mod:`fastweights.ops.ttt`, dual form); ``post_norm`` (LayerNorm over
    ``d_model``, eps 1e-6); ``use_gate``: ``GELU_tanh(g_proj(x)) *``; ``o_proj``.

    Block forms (``block``; see :class:`~fastweights.layers.base.SequenceLayer`), with the core
    ``core(h) = [GELU_tanh(g_proj(h)) *] post_norm(TTT(h))`` (everything above up to ``o_proj``) and
    ``W_o = o_proj``:

    - ``"native"`` (default), ``residual=False``: ``out = W_o · core(x)``: the bare reference module
      (``TTTLinear`` / ``TTTMLP``), no norm, no residual.
    - ``"native"``, ``residual=True`` (the default of :func:`fastweights.layers.make_sequence_layer`):
      ``out = x + Dropout(W_o · core(RMSNorm(x)))``: the reference ``Block``'s sequence-modelling
      sublayer (Sun et al. 2024, §2.7, "Backbone architecture"), ``RMSNorm = seq_norm`` (eps 1e-6,
      weight only).
    - ``"pre_ln"``: ``out = x + Dropout(W_o · core(LN(x)))``, ``LN = layer_norm`` (``nn.LayerNorm(C)``,
      eps 1e-5, weight and bias) instead of ``seq_norm``; ``residual`` must be False.

    Parameter names equal the reference state_dict keys (``learnable_token_idx``,
    ``learnable_ttt_lr_weight``, ``learnable_ttt_lr_bias``, ``ttt_norm_weight/bias``, ``q/k/v/o_proj``,
    ``conv_q/conv_k``, ``g_proj``, ``post_norm``, {inner}), so reference state dicts load directly.

    Args:
        d_model: width ``C``; a multiple of ``num_heads`` with an even head dim.
        num_heads: number of heads ``H``.
        mini_batch_size: TTT mini-batch size ``b`` (16).
        ttt_base_lr: ``eta_base`` (1.0 for TTT-Linear; ttt-lm-jax uses 0.1 for TTT-MLP).
        rope_theta: RoPE base.
        share_qk, use_gate, conv_kernel: the Mamba-backbone options of the reference.
        residual: ``False`` (default) = the bare reference module. ``True`` adds a pre-norm residual
            wrapper ``x + Dropout(layer(RMSNorm(x)))`` (extra parameter ``seq_norm.weight``), the form used
            by :func:`fastweights.layers.make_sequence_layer`. Native form only.
        dropout: dropout on the residual branch (only with ``residual=True`` or ``block="pre_ln"``).
        block: ``"native"`` or ``"pre_ln"`` (above).

    Raises:
        ValueError: unless ``d_model`` and ``num_heads`` are positive ints with ``num_heads`` dividing
            ``d_model`` into an even head dim, and ``mini_batch_size`` and ``conv_kernel`` are positive
            ints (naming the argument); for an unknown ``block``, or ``residual=True`` with
            ``block="pre_ln"``.
"""


class TTTLinearLayer(_TTTBase):
    _inner = "linear"

    def __init__(self, d_model: int, num_heads: int, **kwargs: Any) -> None:
        super().__init__(d_model, num_heads, **kwargs)
        d = self.head_dim
        self.W1 = nn.Parameter(torch.randn(num_heads, d, d) * 0.02)
        self.b1 = nn.Parameter(torch.zeros(num_heads, 1, d))

    def _inner_params(self) -> dict[str, Tensor]:
        return {"W1": self.W1, "b1": self.b1}


class TTTMLPLayer(_TTTBase):
    _inner = "mlp"

    def __init__(self, d_model: int, num_heads: int, **kwargs: Any) -> None:
        super().__init__(d_model, num_heads, **kwargs)
        d = self.head_dim
        self.W1 = nn.Parameter(torch.randn(num_heads, d, 4 * d) * 0.02)
        self.b1 = nn.Parameter(torch.zeros(num_heads, 1, 4 * d))
        self.W2 = nn.Parameter(torch.randn(num_heads, 4 * d, d) * 0.02)
        self.b2 = nn.Parameter(torch.zeros(num_heads, 1, d))

    def _inner_params(self) -> dict[str, Tensor]:
        return {"W1": self.W1, "b1": self.b1, "W2": self.W2, "b2": self.b2}


TTTLinearLayer.__doc__ = (
    "TTT-Linear layer (inner model ``f(x) = x + LN_h(x W1 + b1)``, ``W1 [H, D, D]``, ``b1 [H, 1, D]``)."
    + _LAYER_DOC.format(inner="``W1``, ``b1``")
)
TTTMLPLayer.__doc__ = (
    "TTT-MLP layer (inner model ``f(x) = x + LN_h(GELU_tanh(x W1 + b1) W2 + b2)``, hidden ``4D``)."
    + _LAYER_DOC.format(inner="``W1``, ``b1``, ``W2``, ``b2``")
)
