"""Causal linear attention (the purely additive fast-weight programmer): reference and chunked form.

Sources: Katharopoulos, Vyas, Pappas, Fleuret, "Transformers are RNNs", ICML 2020 (causal linear
attention as an RNN); Schlag, Irie, Schmidhuber, ICML 2021 (the same recurrence read as a fast-weight
programmer with the sum update rule); the chunkwise-parallel form as in flash-linear-attention's
``linear_attn`` ops (Yang et al., "Gated Linear Attention Transformers", ICML 2024, §2).

Layout (flash-linear-attention style): ``q, k [B, T, H, K]``, ``v [B, T, H, V]``; the state is
``S [B, H, K, V]`` in the row-vector convention ``k S``. Per head and step t, starting from ``S_0``
(zeros when no initial state is given):

1. ``S_t = S_{t-1} + outer(k_t, v_t)``,
2. ``o_t = q_t S_t`` — read **after** this step's update (as DeltaNet; unlike the SRWM).

No feature map, scale or normalisation is applied here: ``o_t = sum_{i<=t} (q_t . k_i) v_i`` exactly.
Feature maps (e.g. ``elu + 1``) and the normalisation ``o_t / (q_t . sum_{i<=t} k_i)`` belong to the
layer (``fastweights.layers.attention.LinearAttentionLayer``); the normaliser can be carried by this op
by appending a column of ones to ``v``.

Precision: float32/float64 inputs are computed in their own dtype; float16/bfloat16 inputs are
computed in float32 (the state is a running sum). The output is cast back to the input dtype and the
state stays float32. Autocast is disabled inside both ops.
"""

from __future__ import annotations

import torch
from torch import Tensor

from fastweights.ops import fla
from fastweights.ops._common import (
    check_chunk_size,
    check_qkv_state,
    compute_dtype,
    initial_kv_state,
    to_chunks,
)
from fastweights.ops.masking import supports_attention_mask
from fastweights.ops.packing import supports_cu_seqlens

__all__ = ["linear_attention", "linear_attention_reference", "check_linear_attention_inputs"]

# padded steps of a masked call: the key is zeroed there
_masked = supports_attention_mask("k", "``k = 0`` there makes the write ``outer(k, v)`` vanish", like="q")


def check_linear_attention_inputs(q: Tensor, k: Tensor, v: Tensor, initial_state: Tensor | None) -> None:
    """Validate the arguments of :func:`linear_attention` / :func:`linear_attention_reference`.

    Raises:
        ValueError: naming the argument, with the expected shape/dtype and what was given, or when an
            input holds NaN/Inf.
    """
    check_qkv_state(q, k, v, initial_state)


@supports_cu_seqlens("q", "k", "v")
@_masked
def linear_attention_reference(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    initial_state: Tensor | None = None,
    output_final_state: bool = False,
) -> tuple[Tensor, Tensor | None]:
    """Per-step reference of causal linear attention: obviously correct, not fast.

    For every step: ``S <- S + outer(k_t, v_t)``, ``o_t = q_t S`` (read after the update). No feature
    map or normalisation (see the module docstring). Autograd gives exact gradients, including to
    ``initial_state``.

    Args:
        q: ``[B, T, H, K]`` queries (float16/bfloat16/float32/float64).
        k: ``[B, T, H, K]`` keys, same dtype as ``q``.
        v: ``[B, T, H, V]`` values, same dtype as ``q``.
        initial_state: optional ``[B, H, K, V]`` state to start from (any float dtype; cast to the
            compute dtype). ``None`` starts from zeros.
        output_final_state: also return the state after the last step.

    Returns:
        ``(o, state)``: ``o [B, T, H, V]`` in the dtype of ``q``; ``state [B, H, K, V]`` after the last
        update (float32 for half inputs, else the input dtype), or ``None``.

    Raises:
        ValueError: on wrong ranks/shapes/dtypes or NaN/Inf inputs (see
            :func:`check_linear_attention_inputs`).
    """
    check_linear_attention_inputs(q, k, v, initial_state)
    dtype = compute_dtype(q.dtype)
    with torch.autocast(q.device.type, enabled=False):
        q_, k_, v_ = (x.to(dtype) for x in (q, k, v))
        state = initial_kv_state(q, v, initial_state, dtype)
        outputs = []
        for t in range(q.shape[1]):
            state = state + k_[:, t].unsqueeze(-1) * v_[:, t].unsqueeze(-2)
            outputs.append(torch.einsum("bhk,bhkv->bhv", q_[:, t], state))
        o = torch.stack(outputs, dim=1) if outputs else v_.new_zeros(v.shape)
    return o.to(q.dtype), (state if output_final_state else None)


@supports_cu_seqlens("q", "k", "v")
@_masked
def linear_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    initial_state: Tensor | None = None,
    output_final_state: bool = False,
    chunk_size: int = 64,
) -> tuple[Tensor, Tensor | None]:
    """Chunkwise-parallel causal linear attention.

    Same semantics, signature and errors as :func:`linear_attention_reference` (tested equal in
    float64). The sequence is cut into chunks of ``C = min(chunk_size, T)`` steps (the last one
    zero-padded; a padded step has ``k = v = 0`` and changes nothing). With ``Q, K, V`` the rows of one
    chunk and ``S_0`` the state entering it:

        ``O = Q S_0 + tril(Q K^T) V`` (diagonal included: read after the update),
        ``S_C = S_0 + K^T V``.

    The chunk-entry states are an exclusive cumulative sum of the per-chunk ``K^T V`` (no sequential
    loop). Gradients come from autograd (including to ``initial_state``).

    Cost: ``O(T C (K + V) + T K V / C)`` per head; memory keeps one ``[K, V]`` state per chunk.

    Args:
        q, k, v, initial_state, output_final_state: as for :func:`linear_attention_reference`.
        chunk_size: maximum chunk length ``C`` (positive int; 64 by default).

    Returns:
        ``(o [B, T, H, V], state [B, H, K, V] or None)`` as for :func:`linear_attention_reference`.

    Raises:
        ValueError: on bad inputs (see :func:`check_linear_attention_inputs`) or a non-positive
            ``chunk_size``.
    """
    check_linear_attention_inputs(q, k, v, initial_state)
    check_chunk_size(chunk_size)
    if fla.enabled(q):  # opt-in: fla's chunk kernels on CUDA half inputs (ops/fla.py)
        return fla.fla_linear_attention(q, k, v, initial_state, output_final_state)
    dtype = compute_dtype(q.dtype)
    b, t, h, _ = q.shape
    dv = v.shape[-1]
    with torch.autocast(q.device.type, enabled=False):
        state = initial_kv_state(q, v, initial_state, dtype)
        if t == 0:
            return v.new_zeros(v.shape), (state if output_final_state else None)
        c = min(chunk_size, t)
        n = -(-t // c)

        def chunks(x: Tensor) -> Tensor:
            return to_chunks(x, c, dtype)

        qc, kc, vc = chunks(q), chunks(k), chunks(v)
        kv = kc.transpose(-1, -2) @ vc  # [B, H, N, K, V]: each chunk's contribution
        inclusive = state.unsqueeze(2) + kv.cumsum(dim=2)  # state after each chunk
        entry = torch.cat([state.unsqueeze(2), inclusive[:, :, :-1]], dim=2)  # state entering each chunk
        o = qc @ entry + torch.tril(qc @ kc.transpose(-1, -2)) @ vc  # [B, H, N, C, V]
        o = o.reshape(b, h, n * c, dv)[:, :, :t].transpose(1, 2)
        final = inclusive[:, :, -1]
    return o.to(q.dtype), (final if output_final_state else None)
