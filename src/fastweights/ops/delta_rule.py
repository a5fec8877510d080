"""Delta-rule fast weights (DeltaNet): per-step reference and chunkwise-parallel form.

Sources: Schlag, Irie, Schmidhuber, "Linear Transformers Are Secretly Fast Weight Programmers",
ICML 2021, Eq. 23-25 (the delta rule with a learned rate ``beta``); the chunkwise WY/UT form of
Yang, Wang, Zhang, Shen, Kim, "Parallelizing Linear Transformers with the Delta Rule over Sequence
Length", NeurIPS 2024, §3 (WY representation and chunkwise-parallel form).

Layout (flash-linear-attention style): ``q, k [B, T, H, K]``, ``v [B, T, H, V]``, ``beta [B, T, H]``;
the state (fast weights) is ``S [B, H, K, V]`` in the row-vector convention ``k S`` (``S[e, m]``: key
index ``e``, value index ``m``). DeltaNet uses ``K = V = D``.

Per head and step t, starting from ``S_0`` (zeros when no initial state is given):

1. ``v_old_t = k_t S_{t-1}`` (the value currently stored under key ``k_t``),
2. ``u_t = beta_t (v_t - v_old_t)``,
3. ``S_t = S_{t-1} + outer(k_t, u_t)``,
4. ``o_t = q_t S_t`` — the output is read **after** this step's update (unlike the SRWM, which reads
   with the pre-update matrix).

Precision: float32/float64 inputs are computed in their own dtype. float16/bfloat16 inputs are
computed in float32 (CPU has no half-precision triangular solve, and the delta rule's state and
within-chunk solve are ill-conditioned in 16 bits); the output is cast back to the input dtype and the
state stays float32. Autocast is disabled inside both ops for the same reason.
"""

from __future__ import annotations

import torch
from torch import Tensor

from fastweights.checks import check_finite, describe
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

__all__ = ["delta_rule", "delta_rule_reference", "delta_rule_read", "check_delta_rule_inputs"]

# padded steps of a masked call: the rate is zeroed there
_masked = supports_attention_mask(
    "beta", "``beta = 0`` there makes the write ``u = beta (v - k S)`` vanish", like="q"
)


def check_delta_rule_inputs(
    q: Tensor, k: Tensor, v: Tensor, beta: Tensor, initial_state: Tensor | None
) -> None:
    """Validate the arguments of :func:`delta_rule` / :func:`delta_rule_reference`.

    Raises:
        ValueError: naming the argument, with the expected shape/dtype and what was given, or when an
            input holds NaN/Inf.
    """
    check_qkv_state(q, k, v, initial_state)
    b, t, h, _ = q.shape
    if not isinstance(beta, Tensor) or tuple(beta.shape) != (b, t, h):
        raise ValueError(f"beta: expected shape [B, T, H] = [{b}, {t}, {h}], got {describe(beta)}")
    if beta.dtype != q.dtype:
        raise ValueError(f"beta: expected dtype {q.dtype} (same as q), got {beta.dtype}")
    check_finite("beta", beta)


@supports_cu_seqlens("q", "k", "v", "beta")
@_masked
def delta_rule_reference(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    beta: Tensor,
    *,
    initial_state: Tensor | None = None,
    output_final_state: bool = False,
) -> tuple[Tensor, Tensor | None]:
    """Per-step reference of the delta rule (Schlag et al. 2021, Eq. 23-25): obviously correct, not fast.

    For every step: ``u_t = beta_t (v_t - k_t S)``, ``S <- S + outer(k_t, u_t)``, ``o_t = q_t S`` (read
    after the update). Autograd gives exact gradients, including to ``initial_state``.

    Args:
        q: ``[B, T, H, K]`` queries (float16/bfloat16/float32/float64).
        k: ``[B, T, H, K]`` keys, same dtype as ``q``. Not normalised here (the layer normalises).
        v: ``[B, T, H, V]`` values, same dtype as ``q``.
        beta: ``[B, T, H]`` per-step learning rates (typically in (0, 1)), same dtype as ``q``.
        initial_state: optional ``[B, H, K, V]`` fast weights to start from (any float dtype; cast to
            the compute dtype). ``None`` starts from zeros.
        output_final_state: also return the fast weights after the last step.

    Returns:
        ``(o, state)``: ``o [B, T, H, V]`` in the dtype of ``q``; ``state [B, H, K, V]`` after the last
        update (float32 for half inputs, else the input dtype), or ``None``.

    Raises:
        ValueError: on wrong ranks/shapes/dtypes or NaN/Inf inputs (see :func:`check_delta_rule_inputs`).
    """
    check_delta_rule_inputs(q, k, v, beta, initial_state)
    dtype = compute_dtype(q.dtype)
    with torch.autocast(q.device.type, enabled=False):
        q_, k_, v_, beta_ = (x.to(dtype) for x in (q, k, v, beta))
        state = initial_kv_state(q, v, initial_state, dtype)
        outputs = []
        for t in range(q.shape[1]):
            kt = k_[:, t]  # [B, H, K]
            v_old = torch.einsum("bhk,bhkv->bhv", kt, state)
            u = beta_[:, t, :, None] * (v_[:, t] - v_old)  # [B, H, V]
            state = state + kt.unsqueeze(-1) * u.unsqueeze(-2)
            outputs.append(torch.einsum("bhk,bhkv->bhv", q_[:, t], state))
        if outputs:
            o = torch.stack(outputs, dim=1)
        else:
            o = v_.new_zeros(v.shape)
    return o.to(q.dtype), (state if output_final_state else None)


@supports_cu_seqlens("q", "k", "v", "beta")
@_masked
def delta_rule(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    beta: Tensor,
    *,
    initial_state: Tensor | None = None,
    output_final_state: bool = False,
    chunk_size: int = 64,
) -> tuple[Tensor, Tensor | None]:
    """Chunkwise-parallel delta rule (WY/UT transform; Yang et al. 2024, §3).

    Same semantics, signature and errors as :func:`delta_rule_reference` (tested equal in float64).
    The sequence is cut into chunks of ``C = min(chunk_size, T)`` steps (the last one zero-padded:
    a padded step has ``k = v = 0``, ``beta = 0`` and changes nothing). Within a chunk with keys ``K``,
    values ``V``, queries ``Q`` (rows = steps), rates ``beta`` and incoming state ``S_0``, unrolling the
    recurrence gives the lower-triangular system

        ``(I + tril(diag(beta) K K^T, -1)) U = diag(beta) (V - K S_0)``

    for the rows ``u_t`` of ``U``. It is solved once for all chunks in the UT form
    ``W = T diag(beta) K``, ``U_V = T diag(beta) V`` with ``T = (I + tril(diag(beta) K K^T, -1))^{-1}``
    (``torch.linalg.solve_triangular``, unit diagonal); a sequential scan over chunks then computes
    ``U = U_V - W S_0``, ``O = Q S_0 + tril(Q K^T) U`` (diagonal included: read after the update) and
    ``S_C = S_0 + K^T U``. Gradients come from autograd (including to ``initial_state``).

    Cost: ``O(T C (K + V))`` per head plus ``T / C`` sequential state updates; memory keeps one state
    per chunk for the backward pass.

    Args:
        q, k, v, beta, initial_state, output_final_state: as for :func:`delta_rule_reference`.
        chunk_size: maximum chunk length ``C`` (positive int; 64 by default).

    Returns:
        ``(o [B, T, H, V], state [B, H, K, V] or None)`` as for :func:`delta_rule_reference`.

    Raises:
        ValueError: on bad inputs (see :func:`check_delta_rule_inputs`) or a non-positive ``chunk_size``.
    """
    check_delta_rule_inputs(q, k, v, beta, initial_state)
    check_chunk_size(chunk_size)
    if fla.enabled(q):  # opt-in: fla's chunk kernels on CUDA half inputs (ops/fla.py)
        return fla.fla_delta_rule(q, k, v, beta, initial_state, output_final_state)
    dtype = compute_dtype(q.dtype)
    b, t, h, dk = q.shape
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
        bc = chunks(beta.unsqueeze(-1))  # [B, H, N, C, 1]
        kk = kc @ kc.transpose(-1, -2)  # [B, H, N, C, C]
        lower = torch.eye(c, dtype=dtype, device=q.device) + torch.tril(bc * kk, diagonal=-1)
        rhs = torch.cat([bc * kc, bc * vc], dim=-1)
        wu = torch.linalg.solve_triangular(lower, rhs, upper=False, unitriangular=True)
        w, u_v = wu.split([dk, dv], dim=-1)  # split, not slicing: no zero-filled gradients
        qk = torch.tril(qc @ kc.transpose(-1, -2))  # diagonal included
        outputs = []
        # unbind, not indexing: the backward of x[:, :, i] writes a zero tensor of x's full size per chunk
        # (8x the forward's time at T = 2048, C = 64); unbind's stacks the chunks' gradients once
        for q_i, k_i, qk_i, w_i, u_v_i in zip(*(x.unbind(2) for x in (qc, kc, qk, w, u_v)), strict=True):
            u = u_v_i - w_i @ state  # [B, H, C, V]
            outputs.append(q_i @ state + qk_i @ u)
            state = state + k_i.transpose(-1, -2) @ u
        o = torch.stack(outputs, dim=2).reshape(b, h, n * c, dv)[:, :, :t].transpose(1, 2)
    return o.to(q.dtype), (state if output_final_state else None)


def delta_rule_read(q: Tensor, k: Tensor, v: Tensor, beta: Tensor, *, state: Tensor | None = None) -> Tensor:
    """Read-only delta-rule step: every position of the inputs is an independent one-step call from
    ``state`` whose own update is discarded (ACL query semantics).

    A one-step call writes ``u = beta (v - k S)`` and reads *after* the write, so its output is
    ``q (S + outer(k, u)) = q S + (q · k) u``: one batched matmul for all ``Q`` positions instead of
    ``Q`` copies of the state. Equal to ``Q`` separate length-1 calls of :func:`delta_rule_reference`.

    Args:
        q, k: ``[B, Q, H, K]`` queries and keys of the ``Q`` independent steps.
        v: ``[B, Q, H, V]`` values; ``beta``: ``[B, Q, H]`` rates (same dtype as ``q``).
        state: optional ``[B, H, K, V]`` fast weights every step starts from; ``None`` means zeros.

    Returns:
        ``o [B, Q, H, V]`` in the dtype of ``q`` (computed in float32 for half inputs).

    Raises:
        ValueError: as for :func:`delta_rule_reference` (a bad ``state`` is reported as ``initial_state``).
    """
    check_delta_rule_inputs(q, k, v, beta, state)
    dtype = compute_dtype(q.dtype)
    with torch.autocast(q.device.type, enabled=False):
        q_, k_, v_, beta_ = (x.to(dtype) for x in (q, k, v, beta))
        s = initial_kv_state(q, v, state, dtype)
        u = beta_.unsqueeze(-1) * (v_ - torch.einsum("bqhk,bhkv->bqhv", k_, s))
        o = torch.einsum("bqhk,bhkv->bqhv", q_, s) + (q_ * k_).sum(-1, keepdim=True) * u
    return o.to(q.dtype)
