"""Self-referential weight matrix (SRWM) recurrence.

Source: Irie, Schlag, Csordás, Schmidhuber, "A Modern Self-Referential Weight Matrix That Learns to
Modify Itself", ICML 2022, §3, Eq. 5-8 (4-learning-rate, multi-head variant); the update order as in
the reference kernel (modern-srwm ``self_ref_v0``).

Layout (flash-linear-attention style): ``x [B, T, H, E]``; the slow weights of one layer are one tensor
``weight [H, E, C]`` in the row-vector convention ``x @ W`` whose ``C = d_out + 2E + 4`` columns are
ordered ``y (d_out) | q (E) | k (E) | beta (4)`` — the paper's matrix of size
``(d_out + 2 d_in + 4) x d_in``. ``d_out`` defaults to ``E`` (``C = 3E + 4``, the SRWM layer); a wider
``y`` block is how SR-Delta (``layers.sr_deltanet``) generates DeltaNet's query, key, value and rate
(``d_out = 3E + 1``; modern-srwm ``reinforcement_learning/torchbeast/self_ref_v1``). The fast weights
(the state) have shape ``[B, H, E, C]``.

Per head and step t, with ``W = W_{t-1}`` (the weights *before* this step's update):

1. ``y_t = x_t W^y`` (the output, read with the pre-update matrix; no activation),
2. ``q_t = softmax(x_t W^q)``, ``k_t = softmax(x_t W^k)``, ``beta_t = sigmoid(x_t W^b)`` (4 rates),
3. ``d^*_t = (q_t - k_t) W^*`` for every block ``* in {y, q, k, b}``,
4. ``W^* <- W^* + beta_t[j(*)] * outer(k_t, d^*_t)`` with ``j = 0, 1, 2, 3`` for ``y, q, k, b``.

The update is applied at every step, including the last one, so the returned final state contains the
last token's self-modification.

Precision: float32/float64 inputs are computed in their own dtype; float16/bfloat16 inputs are computed
in float32 (the running weights accumulate T rank-1 updates), the outputs are cast back to the input
dtype and the state stays float32. Autocast is disabled inside the ops.
"""

from __future__ import annotations

import torch
from torch import Tensor

from fastweights.checks import check_finite, check_int, describe
from fastweights.ops._common import compute_dtype
from fastweights.ops.masking import check_attention_mask, supports_attention_mask, zero_padding
from fastweights.ops.packing import supports_cu_seqlens
from fastweights.ops.srwm_dispatch import srwm_fast_path

__all__ = ["srwm", "srwm_reference", "srwm_read", "srwm_with_reads", "srwm_num_columns", "check_srwm_inputs"]


# padded steps of a masked call: the input is zeroed there
_ZERO_INPUT = (
    "a zero input there is an exact no-op (``y = x W^y = 0``; the logits of ``q`` and ``k`` are both "
    "0, so ``q = k``, every ``d^* = (q - k) W^* = 0`` and the update vanishes)"
)
_masked = supports_attention_mask("x", _ZERO_INPUT)


def srwm_num_columns(head_dim: int, d_out: int | None = None) -> int:
    """Number of columns of an SRWM head: ``d_out + 2E + 4`` (y, q, k blocks and 4 learning rates);
    ``d_out`` defaults to ``E`` (``3E + 4``)."""
    return (head_dim if d_out is None else d_out) + 2 * head_dim + 4


def check_srwm_inputs(
    x: Tensor, weight: Tensor, initial_state: Tensor | None, d_out: int | None = None
) -> int:
    """Validate the arguments of :func:`srwm` / :func:`srwm_reference` and return ``d_out``.

    Raises:
        ValueError: naming the argument, the expected shape/dtype and what was given, or when ``x``,
            ``weight`` or ``initial_state`` holds NaN/Inf (the same checks as the other ops).
    """
    if not isinstance(x, Tensor) or x.dim() != 4:
        raise ValueError(f"x: expected a 4-D tensor [B, T, H, E], got {describe(x)}")
    if not x.is_floating_point():
        raise ValueError(f"x: expected a floating-point dtype, got {x.dtype}")
    b, _, h, e = x.shape
    if d_out is None:
        d_out = e
    check_int("d_out", d_out)
    c = srwm_num_columns(e, d_out)
    if not isinstance(weight, Tensor) or tuple(weight.shape) != (h, e, c):
        raise ValueError(
            f"weight: expected shape [H, E, d_out+2E+4] = [{h}, {e}, {c}] for x of shape "
            f"{tuple(x.shape)} and d_out={d_out}, got {describe(weight)}"
        )
    if weight.dtype != x.dtype:
        raise ValueError(f"weight: expected dtype {x.dtype} (same as x), got {weight.dtype}")
    if initial_state is not None:
        expected = (b, h, e, c)
        if not isinstance(initial_state, Tensor) or tuple(initial_state.shape) != expected:
            raise ValueError(
                f"initial_state: expected shape [B, H, E, d_out+2E+4] = {list(expected)}, "
                f"got {describe(initial_state)}"
            )
        if not initial_state.is_floating_point():
            raise ValueError(f"initial_state: expected a floating-point dtype, got {initial_state.dtype}")
    for name, t in (("x", x), ("weight", weight), ("initial_state", initial_state)):
        check_finite(name, t)
    return d_out


def _initial_weights(x: Tensor, weight: Tensor, initial_state: Tensor | None) -> Tensor:
    """``[B, H, E, C]`` fast weights to start from, in the compute dtype of ``x``."""
    dtype = compute_dtype(x.dtype)
    if initial_state is None:
        return weight.to(dtype).unsqueeze(0).expand(x.shape[0], *weight.shape)
    return initial_state.to(dtype)


@supports_cu_seqlens("x")
@_masked
def srwm_reference(
    x: Tensor,
    weight: Tensor,
    *,
    initial_state: Tensor | None = None,
    output_final_state: bool = False,
    d_out: int | None = None,
) -> tuple[Tensor, Tensor | None]:
    """Per-step, per-block reference of the SRWM recurrence (Irie et al. 2022, §3, Eq. 5-8).

    Written to be obviously correct, not fast: the four blocks ``W^y, W^q, W^k, W^b`` are kept as
    separate tensors and updated one by one exactly as in the paper. Autograd gives exact gradients.

    Args:
        x: ``[B, T, H, E]`` float input of each head.
        weight: ``[H, E, C]`` slow weights (same dtype as ``x``), ``C = d_out + 2E + 4`` columns
            ``y | q | k | beta``.
        initial_state: optional ``[B, H, E, C]`` fast weights to start from; ``None`` starts every
            batch element from ``weight``.
        output_final_state: also return the fast weights after the last step.
        d_out: width of the ``y`` block (positive int); ``None`` means ``E``.

    Returns:
        ``(y, state)``: ``y [B, T, H, d_out]`` outputs read with the pre-update weights, in the dtype
        of ``x``; ``state [B, H, E, C]`` after the update of the last step (float32 for half inputs,
        else the input dtype), or ``None``.

    Raises:
        ValueError: on wrong ranks, shapes or dtypes, NaN/Inf inputs, or a bad ``d_out`` (see
            :func:`check_srwm_inputs`).
    """
    d_out = check_srwm_inputs(x, weight, initial_state, d_out)
    e = x.shape[-1]
    with torch.autocast(x.device.type, enabled=False):
        w0 = _initial_weights(x, weight, initial_state)
        xc = x.to(w0.dtype)
        blocks = list(w0.split([d_out, e, e, 4], dim=-1))
        outputs = []
        for t in range(x.shape[1]):
            xt = xc[:, t]  # [B, H, E]
            w_y, w_q, w_k, w_b = blocks
            outputs.append(torch.einsum("bhe,bhem->bhm", xt, w_y))
            q = torch.softmax(torch.einsum("bhe,bhem->bhm", xt, w_q), dim=-1)
            k = torch.softmax(torch.einsum("bhe,bhem->bhm", xt, w_k), dim=-1)
            beta = torch.sigmoid(torch.einsum("bhe,bhem->bhm", xt, w_b))  # [B, H, 4]
            diffs = [torch.einsum("bhe,bhem->bhm", q - k, w) for w in blocks]
            blocks = [
                w + beta[..., j, None, None] * k.unsqueeze(-1) * d.unsqueeze(-2)
                for j, (w, d) in enumerate(zip(blocks, diffs, strict=True))
            ]
        y = torch.stack(outputs, dim=1) if outputs else xc.new_zeros(*x.shape[:3], d_out)
    state = torch.cat(blocks, dim=-1) if output_final_state else None
    return y.to(x.dtype), state


@supports_cu_seqlens("x")
@_masked
def srwm(
    x: Tensor,
    weight: Tensor,
    *,
    initial_state: Tensor | None = None,
    output_final_state: bool = False,
    d_out: int | None = None,
) -> tuple[Tensor, Tensor | None]:
    """SRWM recurrence, fast path (Irie et al. 2022, Eq. 5-8; backward by reversal as in ``self_ref_v0``).

    Same signature, semantics and errors as :func:`srwm_reference`; proven equal to it (values and
    gradients) by the parity tests. All four blocks are fused into one matrix per head: per step one
    batched matmul ``x_t W`` for ``[y | q | k | beta]``, one for the four difference vectors
    ``(q_t - k_t) W`` and one rank-1 update whose columns are scaled by their block's learning rate.
    The backward is a custom autograd Function that recovers ``W_{t-1}`` by reversing the updates
    (``ops.srwm_autograd``; the fused CPU / Triton kernels where ``ops.srwm_dispatch`` picks them):
    saved memory O(T·C) per head, any T, carried-state gradient counted once.

    Args:
        x: ``[B, T, H, E]`` float input.
        weight: ``[H, E, C]`` slow weights, ``C = d_out + 2E + 4`` columns ``y | q | k | beta``.
        initial_state: optional ``[B, H, E, C]`` fast weights; ``None`` broadcasts ``weight``.
        output_final_state: also return the final fast weights.
        d_out: width of the ``y`` block; ``None`` means ``E``.

    Returns:
        ``(y [B, T, H, d_out], state [B, H, E, C] or None)`` as for :func:`srwm_reference`.

    Raises:
        ValueError: as for :func:`srwm_reference` (see :func:`check_srwm_inputs`).
    """
    check_srwm_inputs(x, weight, initial_state, d_out)
    with torch.autocast(x.device.type, enabled=False):
        w0 = _initial_weights(x, weight, initial_state)
        y, _, w = srwm_fast_path(x.to(w0.dtype), None, w0)
    return y.to(x.dtype), (w if output_final_state else None)


def srwm_with_reads(
    x: Tensor,
    x_read: Tensor,
    weight: Tensor,
    *,
    initial_state: Tensor | None = None,
    d_out: int | None = None,
    attention_mask: Tensor | None = None,
) -> tuple[Tensor, Tensor, Tensor]:
    """:func:`srwm` plus a read-only input stream: ``y_read_t = x_read_t W^y_{t-1}``.

    ``y_read_t`` is what a one-step call with input ``x_read_t`` would output from the state reached
    after steps ``1..t-1`` (its own update discarded) — e.g. predicting the label of demonstration
    ``t`` before it is revealed. Costs one extra ``[E, d_out]`` matmul per step.

    Args:
        x: ``[B, T, H, E]`` the sequence that updates the fast weights.
        x_read: ``[B, T, H, E]`` inputs read (not written) at every step.
        weight, initial_state, d_out: as for :func:`srwm`.
        attention_mask: optional ``[B, T]`` padding mask (bool or 0/1; 1 = real step; each row's real
            steps contiguous). ``x`` is zeroed at the padding (an exact no-op, see :func:`srwm`), so the
            read at a real step ``t`` sees the state after the real steps before it; ``y`` and
            ``y_read`` are zeros at the padding.

    Returns:
        ``(y [B, T, H, d_out], y_read [B, T, H, d_out], final state [B, H, E, C])``.

    Raises:
        ValueError: on bad shapes/dtypes or NaN/Inf inputs (as for :func:`srwm`), if ``x_read`` does
            not match ``x`` or holds NaN/Inf, or for a bad ``attention_mask``
            (:func:`fastweights.ops.masking.check_attention_mask`).
    """
    check_srwm_inputs(x, weight, initial_state, d_out)
    if not isinstance(x_read, Tensor) or x_read.shape != x.shape or x_read.dtype != x.dtype:
        raise ValueError(
            f"x_read: expected shape {list(x.shape)} and dtype {x.dtype}, got {describe(x_read)}"
        )
    check_finite("x_read", x_read)
    mask = None
    if attention_mask is not None:
        mask = check_attention_mask(attention_mask, x.shape[0], x.shape[1], x.device)
        x = zero_padding(x, mask)
    with torch.autocast(x.device.type, enabled=False):
        w0 = _initial_weights(x, weight, initial_state)
        y, y_read, w = srwm_fast_path(x.to(w0.dtype), x_read.to(w0.dtype), w0)
    assert y_read is not None
    if mask is not None:
        y, y_read = zero_padding(y, mask), zero_padding(y_read, mask)
    return y.to(x.dtype), y_read.to(x.dtype), w


def srwm_read(x: Tensor, weight: Tensor, *, state: Tensor | None = None, d_out: int | None = None) -> Tensor:
    """Read-only SRWM step: every position of ``x`` is an independent one-step call from ``state``.

    Because the SRWM output at a step is read with the *pre-update* weights (§1.2), a one-step call
    returns ``y = x W^y`` and its own update only affects later steps. A batch of ``Q`` independent
    queries that all start from the same fast weights (and whose updates are discarded, as for ACL
    queries) is therefore one matmul — identical to ``Q`` separate length-1 calls of :func:`srwm`.

    Args:
        x: ``[B, Q, H, E]`` inputs of ``Q`` independent queries.
        weight: ``[H, E, C]`` slow weights (used when ``state`` is None).
        state: optional ``[B, H, E, C]`` fast weights every query starts from.
        d_out: width of the ``y`` block; ``None`` means ``E``.

    Returns:
        ``y [B, Q, H, d_out]`` in the dtype of ``x``.

    Raises:
        ValueError: as for :func:`srwm`, NaN/Inf included (a bad ``state`` is reported as
            ``initial_state``).
    """
    d_out = check_srwm_inputs(x, weight, state, d_out)
    with torch.autocast(x.device.type, enabled=False):
        w = _initial_weights(x, weight, state)[..., :d_out]
        y = torch.einsum("bqhe,bhem->bqhm", x.to(w.dtype), w)
    return y.to(x.dtype)
