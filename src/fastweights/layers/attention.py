"""Attention baselines with the sequence-layer interface: causal linear attention and softmax attention.

Sources: Katharopoulos et al., "Transformers are RNNs", ICML 2020 (linear attention with the
``elu + 1`` feature map and the ``q . sum k`` normaliser); Vaswani et al., "Attention Is All You Need",
NeurIPS 2017 (multi-head softmax attention); the layer/op split of flash-linear-attention
(``fla.ops`` / ``fla.layers``); optional rotary position embedding (Su et al., "RoFormer",
arXiv 2104.09864, Eq. 34) in the Llama / HF ``rotate_half`` convention (:mod:`fastweights.layers.rotary`).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from fastweights.checks import check_int
from fastweights.layers.base import SequenceLayer
from fastweights.layers.rotary import apply_rotary, rotary_tables
from fastweights.ops.linear_attention import linear_attention
from fastweights.ops.masking import real_positions, zero_padding

__all__ = ["LinearAttentionLayer", "SoftmaxAttentionLayer"]

LinearAttentionState = tuple[Tensor, Tensor]
KVCache = tuple[Tensor, Tensor]


def _state_dtype(dtype: torch.dtype) -> torch.dtype:
    """States are kept in float32 for half inputs (float64 stays float64)."""
    return torch.promote_types(dtype, torch.float32)


def _describe(state: object) -> str:
    if isinstance(state, (tuple, list)):
        return "(" + ", ".join(_describe(s) for s in state) + ")"
    if isinstance(state, Tensor):
        return f"tensor of shape {list(state.shape)}"
    return type(state).__name__


def _zero_steps(x: Tensor, mask: Tensor) -> Tensor:
    """Heads ``x [B, H, T, E]`` with zeros at the padded steps of ``mask [B, T]``."""
    return torch.where(mask[:, None, :, None], x, torch.zeros((), dtype=x.dtype, device=x.device))


def _check_pair(state: object, shapes: tuple[tuple[int | None, ...], ...], expected: str) -> None:
    """Raise ``ValueError`` unless ``state`` is a pair of float tensors whose shapes match ``shapes``
    (``None`` = any size in that dimension)."""
    ok = isinstance(state, (tuple, list)) and len(state) == 2
    if ok:
        for s, shape in zip(state, shapes, strict=True):
            ok = ok and isinstance(s, Tensor) and s.is_floating_point() and s.dim() == len(shape)
            ok = ok and all(want is None or got == want for got, want in zip(s.shape, shape, strict=True))
    if not ok:
        raise ValueError(f"state: expected {expected}, got {_describe(state)}")


class LinearAttentionLayer(SequenceLayer):
    """Causal linear attention sublayer, pre-LN residual: ``out = x + Dropout(out_linear(o))``.

    Per head, from ``a = LN(x)``: ``q = elu(W_q a) + 1``, ``k = elu(W_k a) + 1``, ``v = W_v a`` (no
    biases); with ``S_t = S_{t-1} + outer(k_t, v_t)`` and ``z_t = z_{t-1} + k_t`` (both after step t's
    update, as DeltaNet reads),

        ``o_t = q_t S_t / (q_t . z_t + eps)``.

    ``q . z > 0`` because the feature map is positive, so ``o_t`` is a convex combination of the values
    seen so far (the causal linear attention of Katharopoulos et al. 2020). ``S`` and ``z`` come from
    one call of ``ops.linear_attention`` (chunked form) on values augmented with a column of ones.

    The state is the pair ``(S [B, H, E, E], z [B, H, E])`` (float32 under half precision); ``None``
    starts from zeros. Gradients flow through a carried state, so two calls with the state carried
    equal one call (values and gradients). :meth:`read` and :meth:`forward_with_reads` are exact
    closed forms of the generic one-step reads.

    Block forms (``block``; see :class:`~fastweights.layers.base.SequenceLayer`): the native form is
    already the uniform pre-LN residual ``out = x + Dropout(W_o · core(LN(x)))`` (``LN = layer_norm``,
    ``W_o = out_linear``, ``core(h) = o`` above computed from ``a = h``; the pre-LN Transformer
    sublayer, Xiong et al. 2020), so ``"native"`` and ``"pre_ln"`` are the same module.

    Args:
        d_model: model width ``D``; must be divisible by ``num_heads`` (``E = D / H``).
        num_heads: number of heads ``H``.
        dropout: dropout on the projected output.
        chunk_size: chunk length of the chunkwise-parallel op.
        eps: added to the normaliser ``q_t . z_t``.
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
        eps: float = 1e-6,
        block: str = "native",
    ) -> None:
        super().__init__()
        self.set_heads(d_model, num_heads, block)
        self.chunk_size, self.eps = check_int("chunk_size", chunk_size), eps
        self.layer_norm = nn.LayerNorm(d_model)
        self.q_proj = nn.Linear(d_model, d_model, bias=False)
        self.k_proj = nn.Linear(d_model, d_model, bias=False)
        self.v_proj = nn.Linear(d_model, d_model, bias=False)
        self.out_linear = nn.Linear(d_model, d_model, bias=False)
        self.dropout = nn.Dropout(dropout)

    def projections(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Layer input ``x [B, T, D]`` → ``(q, k, v [B, T, H, E])`` with the feature map applied to ``q``
        and ``k`` (from the block input ``LN(x)``)."""
        return self._project(self.block_input(x))

    def _project(self, a: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        b, t, _ = a.shape
        q, k, v = (
            p(a).reshape(b, t, self.num_heads, self.head_dim) for p in (self.q_proj, self.k_proj, self.v_proj)
        )
        return nn.functional.elu(q) + 1.0, nn.functional.elu(k) + 1.0, v

    def _check_state(self, x: Tensor, state: object) -> None:
        if state is None:
            return
        b, h, e = x.shape[0], self.num_heads, self.head_dim
        _check_pair(
            state,
            ((b, h, e, e), (b, h, e)),
            f"a tuple (S [B, H, E, E] = {[b, h, e, e]}, z [B, H, E] = {[b, h, e]})",
        )

    @staticmethod
    def _augment(v: Tensor) -> Tensor:
        """Append a column of ones to ``v``: the op then carries ``z`` as the last column of ``S``."""
        return torch.cat([v, torch.ones_like(v[..., :1])], dim=-1)

    @staticmethod
    def _joint_state(state: LinearAttentionState | None) -> Tensor | None:
        if state is None:
            return None
        s, z = state
        dtype = torch.promote_types(s.dtype, z.dtype)
        return torch.cat([s.to(dtype), z.to(dtype).unsqueeze(-1)], dim=-1)

    def _normalise(self, o_aug: Tensor) -> Tensor:
        """``o_aug [B, T, H, E+1]`` (numerator | normaliser) → the core's output ``[B, T, D]``."""
        o = o_aug[..., :-1] / (o_aug[..., -1:] + self.eps)
        b, t = o.shape[:2]
        return o.reshape(b, t, self.d_model)

    def _output(self, x: Tensor, o_aug: Tensor) -> Tensor:
        """Normalise ``o_aug [B, T, H, E+1]`` and apply the block around the core."""
        return self.block_output(x, self._normalise(o_aug))

    def core(
        self,
        h: Tensor,
        state: LinearAttentionState | None = None,
        *,
        attention_mask: Tensor | None = None,
    ) -> tuple[Tensor, LinearAttentionState]:
        """Normalised causal linear attention of ``h [B, T, D]`` → ``(c [B, T, D], (S [B, H, E, E],
        z [B, H, E]))``; ``attention_mask [B, T]``: ``k = 0`` at padding (no write to ``S`` or ``z``) and
        ``c`` zero there."""
        self._check_state(h, state)
        o_aug, new_state = self._attend(*self._project(h), state, self.check_mask(h, attention_mask))
        return self._normalise(o_aug), new_state

    def _attend(
        self,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        state: LinearAttentionState | None,
        mask: Tensor | None = None,
    ) -> tuple[Tensor, LinearAttentionState]:
        """``(o_aug [B, T, H, E+1], final state)`` of the chunked op on ``q, k, v [B, T, H, E]``
        (``o_aug`` zero at the padding of ``mask``)."""
        o_aug, s_aug = linear_attention(
            q,
            k,
            self._augment(v),
            initial_state=self._joint_state(state),
            output_final_state=True,
            chunk_size=self.chunk_size,
            attention_mask=mask,
        )
        assert s_aug is not None
        return o_aug, (s_aug[..., :-1], s_aug[..., -1])

    def read(self, x: Tensor, state: LinearAttentionState | None = None) -> Tensor:
        """Independent one-step reads ``[B, Q, D]`` from ``state``, each after its own (discarded)
        update: ``(q S + (q . k) v) / (q . z + q . k + eps)``."""
        self.check_input(x)
        self._check_state(x, state)
        q, k, v = self.projections(x)
        dtype = _state_dtype(q.dtype)
        with torch.autocast(x.device.type, enabled=False):
            q, k, v_aug = q.to(dtype), k.to(dtype), self._augment(v).to(dtype)
            o_aug = (q * k).sum(-1, keepdim=True) * v_aug  # [B, Q, H, E+1]
            joint = self._joint_state(state)
            if joint is not None:
                o_aug = o_aug + torch.einsum("bqhk,bhkv->bqhv", q, joint.to(dtype))
        return self._output(x, o_aug.to(x.dtype))

    def forward_with_reads(
        self,
        x: Tensor,
        x_read: Tensor,
        state: LinearAttentionState | None = None,
        *,
        attention_mask: Any = None,
    ) -> tuple[Tensor, Tensor, LinearAttentionState]:
        """Exact closed form of :meth:`SequenceLayer.forward_with_reads`: the read at step ``t`` sees
        the keys/values of ``x[:, :t]`` (a linear attention over the stream shifted by one step) plus
        its own key/value. With ``attention_mask`` the stream's keys are zero at padding (no write)
        and both outputs are zero there."""
        self.check_reads(x, x_read)
        self._check_state(x, state)
        mask = self.check_mask(x, attention_mask)
        q, k, v = self.projections(x)
        if mask is not None:
            k = zero_padding(k, mask)
        o_aug, new_state = self._attend(q, k, v, state, mask)
        out = self._output(x, o_aug)
        qr, kr, vr = self.projections(x_read)
        t = x.shape[1]
        k_prev = nn.functional.pad(k, (0, 0, 0, 0, 1, 0))[:, :t]  # k_prev[t] = k[t - 1], k_prev[0] = 0
        v_prev = nn.functional.pad(self._augment(v), (0, 0, 0, 0, 1, 0))[:, :t]
        r_aug, _ = linear_attention(
            qr, k_prev, v_prev, initial_state=self._joint_state(state), chunk_size=self.chunk_size
        )
        r_aug = r_aug + (qr * kr).sum(-1, keepdim=True) * self._augment(vr)
        out_read = self._output(x_read, r_aug)
        if mask is not None:
            out, out_read = zero_padding(out, mask), zero_padding(out_read, mask)
        return out, out_read, new_state


class SoftmaxAttentionLayer(SequenceLayer):
    """Causal multi-head softmax attention sublayer, pre-LN residual: ``out = x + Dropout(out_linear(o))``.

    ``q, k, v = W_qkv LN(x)`` (no bias), split into ``H`` heads of size ``E``; ``o`` is
    ``torch.nn.functional.scaled_dot_product_attention`` (scale ``1/sqrt(E)``) under a causal mask. By
    default no positional encoding is added: the causal mask is the only source of order (in-context
    episodes are (input, label) tokens whose order is exchangeable within a task).

    ``rope=True`` rotates ``q`` and ``k`` of every head by their absolute position ``m`` before attention
    (RoFormer Eq. 34, Llama-style): channel pair ``(p, p + E/2)`` (the HF ``rotate_half`` half-split
    convention, not interleaved pairs) turns by ``m * rope_theta^(-2p/E)``, so ``q_m . k_n`` depends on
    ``n - m`` only. The tables are computed in float32 (float64 for float64 inputs) and cast to the
    activation dtype. Positions continue across calls: the cache holds already-rotated keys and a call
    with a cache of length ``T_past`` puts its tokens at ``T_past .. T_past + T - 1``.

    The state is the KV cache ``(K [B, H, T_past, E], V [B, H, T_past, E])`` (float32 under half
    precision; ``None`` = empty). A call with a cache attends to all cached keys plus its own causal
    prefix, so two calls with the state carried equal one call (values and gradients: the cache is not
    detached). :meth:`read` and :meth:`forward_with_reads` are single masked attention calls equal to
    the generic one-step reads (with RoPE, a read is the step after the state it reads: position
    ``T_past`` for :meth:`read`, ``T_past + i`` for read ``i`` of :meth:`forward_with_reads`).

    Block forms (``block``; see :class:`~fastweights.layers.base.SequenceLayer`): the native form is
    already the uniform pre-LN residual ``out = x + Dropout(W_o · core(LN(x)))`` (``LN = layer_norm``,
    ``W_o = out_linear``, ``core(h)`` = the heads' attention outputs for ``q, k, v = W_qkv h``,
    concatenated; Vaswani et al. 2017 §3.2 with the pre-LN placement of Xiong et al. 2020), so
    ``"native"`` and ``"pre_ln"`` are the same module.

    Args:
        d_model: model width ``D``; must be divisible by ``num_heads`` (``E = D / H``).
        num_heads: number of heads ``H``.
        dropout: dropout on the projected output (no dropout on the attention weights).
        rope: apply the rotary position embedding to ``q`` and ``k``.
        rope_theta: RoPE base (Llama: 10000).
        block: ``"native"`` or ``"pre_ln"`` (the same form, above).

    Raises:
        ValueError: unless ``d_model`` and ``num_heads`` are positive ints with ``num_heads`` dividing
            ``d_model`` (naming the argument), with ``rope=True`` if the head dim ``E`` is odd or
            ``rope_theta`` is not positive, or for an unknown ``block``.
    """

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        *,
        dropout: float = 0.0,
        rope: bool = False,
        rope_theta: float = 10000.0,
        block: str = "native",
    ) -> None:
        super().__init__()
        self.set_heads(d_model, num_heads, block)
        if rope and self.head_dim % 2:
            raise ValueError(f"d_model: expected an even head dim for RoPE, got {self.head_dim}")
        if rope and not rope_theta > 0:
            raise ValueError(f"rope_theta: expected > 0, got {rope_theta!r}")
        self.rope, self.rope_theta = rope, rope_theta
        self.layer_norm = nn.LayerNorm(d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=False)
        self.out_linear = nn.Linear(d_model, d_model, bias=False)
        self.dropout = nn.Dropout(dropout)

    def projections(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Layer input ``x [B, T, D]`` → ``(q, k, v [B, H, T, E])`` (the layout of
        ``scaled_dot_product_attention``; from the block input ``LN(x)``, not rotated)."""
        return self._project(self.block_input(x))

    def _project(self, a: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        b, t, _ = a.shape
        p = self.qkv(a).reshape(b, t, 3, self.num_heads, self.head_dim)
        q, k, v = p.permute(2, 0, 3, 1, 4).unbind(0)
        return q, k, v

    def rotate(self, x: Tensor, positions: Tensor) -> Tensor:
        """RoPE of ``x [B, H, T, E]`` at ``positions [T]`` (any shape broadcasting against ``x``'s
        leading dims, e.g. ``[B, 1, T]``: per row; half-split convention); identity when
        ``rope=False``."""
        if not self.rope:
            return x
        table_dtype = torch.promote_types(x.dtype, torch.float32)
        cos, sin = rotary_tables(positions, self.head_dim, self.rope_theta, table_dtype, x.device)
        return apply_rotary(x, cos.to(x.dtype), sin.to(x.dtype), interleaved=False)

    def _cache(self, x: Tensor, state: object, like: Tensor) -> tuple[Tensor, Tensor, Tensor | None]:
        """The cached ``(K, V)`` in the dtype of ``like`` (empty when ``state`` is None) and the cached
        keys' validity ``[B, T_past]`` (None for a 2-tuple cache: every cached key is real)."""
        b, h, e = x.shape[0], self.num_heads, self.head_dim
        if state is None:
            empty = like.new_zeros(b, h, 0, e)
            return empty, empty, None
        expected = f"a KV cache (K, V[, valid]), K and V each [B, H, T_past, E] = [{b}, {h}, T_past, {e}]"
        valid = None
        if isinstance(state, (tuple, list)) and len(state) == 3:
            state, valid = state[:2], state[2]
            if not isinstance(valid, Tensor) or valid.dtype != torch.bool or valid.dim() != 2:
                raise ValueError(
                    f"state: expected {expected} and valid a bool tensor [B, T_past], got {_describe(valid)}"
                )
        _check_pair(state, ((b, h, None, e), (b, h, None, e)), expected)
        k, v = state
        if k.shape != v.shape:
            raise ValueError(f"state: expected K and V of the same shape, got {_describe(state)}")
        if valid is not None and tuple(valid.shape) != (b, k.shape[2]):
            raise ValueError(
                f"state: expected the cache's valid of shape [B, T_past] = {[b, k.shape[2]]}, "
                f"got {list(valid.shape)}"
            )
        return k.to(like.dtype), v.to(like.dtype), valid

    def _attend(self, q: Tensor, k: Tensor, v: Tensor, allowed: Tensor | None) -> Tensor:
        """Softmax attention; ``allowed [Tq, Tk]`` (or ``[B, 1, Tq, Tk]``; True = may attend); ``None`` =
        square causal mask."""
        if q.shape[2] == 0:
            return q.new_zeros(*q.shape[:3], v.shape[-1])
        if allowed is None:
            return nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        return nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=allowed)

    def _merge(self, o: Tensor) -> Tensor:
        """Heads ``o [B, H, T, E]`` → the core's output ``[B, T, D]``."""
        b, _, t, _ = o.shape
        return o.transpose(1, 2).reshape(b, t, self.d_model)

    def _output(self, x: Tensor, o: Tensor) -> Tensor:
        return self.block_output(x, self._merge(o))

    def _state(self, k: Tensor, v: Tensor) -> KVCache:
        dtype = _state_dtype(k.dtype)
        return k.to(dtype), v.to(dtype)

    @staticmethod
    def _padded(
        x: Tensor, mask: Tensor | None, valid: Tensor | None, t: int, tp: int
    ) -> tuple[Tensor, Tensor]:
        """The padding of a call over ``t`` steps of ``x`` after ``tp`` cached ones: its mask (all real
        for None) and the cached keys' validity (all valid for None), both bool."""
        b = x.shape[0]
        mask = torch.ones(b, t, dtype=torch.bool, device=x.device) if mask is None else mask
        valid = torch.ones(b, tp, dtype=torch.bool, device=x.device) if valid is None else valid
        return mask, valid

    def core(
        self, h: Tensor, state: KVCache | None = None, *, attention_mask: Tensor | None = None
    ) -> tuple[Tensor, KVCache]:
        """Causal attention of ``h [B, T, D]`` after the cache → ``(c [B, T, D], (K, V) [B, H,
        T_past + T, E])``.

        With ``attention_mask [B, T]`` or a cache with validity (``(K, V, valid)``), padded keys are
        never attended to, each row's RoPE positions count its real tokens (cached and new) only, ``c``
        is zero at padding, and the returned cache is ``(K, V, valid [B, T_past + T])``: padded steps
        are kept in it as zeros, marked invalid, so that later calls skip them too."""
        q, k, v = self._project(h)
        k_past, v_past, valid_past = self._cache(h, state, k)
        tp, t = k_past.shape[2], h.shape[1]
        mask = self.check_mask(h, attention_mask)
        if mask is None and valid_past is None:
            pos = tp + torch.arange(t, device=h.device)
            q, k = self.rotate(q, pos), self.rotate(k, pos)
            keys, values = torch.cat([k_past, k], dim=2), torch.cat([v_past, v], dim=2)
            allowed = None
            if tp > 0:  # query i sees every cached key and its own prefix: key j <= T_past + i
                i = torch.arange(t, device=h.device)[:, None]
                j = torch.arange(tp + t, device=h.device)[None, :]
                allowed = j <= tp + i
            return self._merge(self._attend(q, keys, values, allowed)), self._state(keys, values)
        mask, valid_past = self._padded(h, mask, valid_past, t, tp)
        # [B, 1, T] (broadcast over the heads): real tokens only, after the cached ones
        pos = real_positions(mask, valid_past.sum(1))[:, None]
        q, k = self.rotate(q, pos), self.rotate(k, pos)
        k, v = _zero_steps(k, mask), _zero_steps(v, mask)  # padded steps cached as zeros
        keys, values = torch.cat([k_past, k], dim=2), torch.cat([v_past, v], dim=2)
        valid = torch.cat([valid_past, mask], dim=1)  # [B, T_past + T]
        i = torch.arange(t, device=h.device)[:, None]
        j = torch.arange(tp + t, device=h.device)[None, :]
        # query i sees the valid keys j <= T_past + i; its own key always (a padded query reads
        # something finite; its output is zeroed)
        allowed = ((j <= tp + i) & valid[:, None, :]) | (j == tp + i)
        o = self._attend(q, keys, values, allowed.unsqueeze(1))
        return zero_padding(self._merge(o), mask), (*self._state(keys, values), valid)

    def read(self, x: Tensor, state: KVCache | None = None) -> Tensor:
        """Independent one-step reads ``[B, Q, D]``: query ``i`` attends to the cache and to its own key
        (with RoPE, each read query/key sits at position ``T_past``, the number of real cached tokens
        for a cache with validity)."""
        self.check_input(x)
        q, k, v = self.projections(x)
        k_past, v_past, valid_past = self._cache(x, state, k)
        tp, nq = k_past.shape[2], x.shape[1]
        i = torch.arange(nq, device=x.device)[:, None]
        j = torch.arange(tp + nq, device=x.device)[None, :]
        if valid_past is None:
            pos = torch.full((nq,), tp, device=x.device)  # every read is the step after the cache
            allowed = (j < tp) | (j == tp + i)
        else:
            pos = valid_past.sum(1, keepdim=True).expand(-1, nq)[:, None]  # [B, 1, Q]
            cached = torch.cat([valid_past, valid_past.new_zeros(x.shape[0], nq)], dim=1)
            allowed = ((cached[:, None, :]) | (j == tp + i)).unsqueeze(1)
        q, k = self.rotate(q, pos), self.rotate(k, pos)
        o = self._attend(q, torch.cat([k_past, k], dim=2), torch.cat([v_past, v], dim=2), allowed)
        return self._output(x, o)

    def forward_with_reads(
        self, x: Tensor, x_read: Tensor, state: KVCache | None = None, *, attention_mask: Any = None
    ) -> tuple[Tensor, Tensor, KVCache]:
        """One masked attention call over ``[x; x_read]``: stream query ``i`` sees the cache and
        ``x[:, :i+1]``; read ``i`` sees the cache, ``x[:, :i]`` and its own key. With
        ``attention_mask`` (or a cache with validity) padded keys are skipped, positions count real
        tokens, both outputs are zero at padding and the cache records validity (see :meth:`core`)."""
        self.check_reads(x, x_read)
        q, k, v = self.projections(x)
        qr, kr, vr = self.projections(x_read)
        k_past, v_past, valid_past = self._cache(x, state, k)
        tp, t = k_past.shape[2], x.shape[1]
        mask = self.check_mask(x, attention_mask)
        i = torch.arange(t, device=x.device)[:, None]
        j = torch.arange(tp + 2 * t, device=x.device)[None, :]
        if mask is None and valid_past is None:
            pos = tp + torch.arange(t, device=x.device)  # stream token i and read i are both step T_past + i
            stream = j <= tp + i
            reads = (j < tp + i) | (j == tp + t + i)
            allowed = torch.cat([stream, reads], dim=0)
        else:
            mask, valid_past = self._padded(x, mask, valid_past, t, tp)
            pos = real_positions(mask, valid_past.sum(1))[:, None]  # read i sits where stream token i does
            k, v = _zero_steps(k, mask), _zero_steps(v, mask)  # padded steps cached as zeros
            valid = torch.cat([valid_past, mask, torch.zeros_like(mask)], dim=1)[:, None, :]
            stream = ((j <= tp + i) & valid) | (j == tp + i)
            reads = ((j < tp + i) & valid) | (j == tp + t + i)
            allowed = torch.cat([stream, reads], dim=1).unsqueeze(1)
        q, k, qr, kr = (self.rotate(z, pos) for z in (q, k, qr, kr))
        o = self._attend(
            torch.cat([q, qr], dim=2),
            torch.cat([k_past, k, kr], dim=2),
            torch.cat([v_past, v, vr], dim=2),
            allowed,
        )
        keys, values = torch.cat([k_past, k], dim=2), torch.cat([v_past, v], dim=2)
        out, out_read = self._output(x, o[:, :, :t]), self._output(x_read, o[:, :, t:])
        if mask is None:
            return out, out_read, self._state(keys, values)
        cache = (*self._state(keys, values), torch.cat([valid_past, mask], dim=1))
        return zero_padding(out, mask), zero_padding(out_read, mask), cache
