"""Self-referential weight matrix (SRWM) recurrence.

Source: Irie, Schlag, Csordás, Schmidhuber, "A Modern Self-Referential Weight Matrix That Learns to
Modify Itself", ICML 2022, Eq. 5-8 (4-learning-rate, multi-head variant); restated in
``shared/spec/srwm_acl.md`` §1.2.

Layout (flash-linear-attention style): ``x [B, T, H, E]``; the slow weights of one layer are one tensor
``weight [H, E, 3E+4]`` in the row-vector convention ``x @ W`` whose columns are ordered
``y (E) | q (E) | k (E) | beta (4)``. The fast weights (the state) have shape ``[B, H, E, 3E+4]``.

Per head and step t, with ``W = W_{t-1}`` (the weights *before* this step's update):

1. ``y_t = x_t W^y`` (the output, read with the pre-update matrix; no activation),
2. ``q_t = softmax(x_t W^q)``, ``k_t = softmax(x_t W^k)``, ``beta_t = sigmoid(x_t W^b)`` (4 rates),
3. ``d^*_t = (q_t - k_t) W^*`` for every block ``* in {y, q, k, b}``,
4. ``W^* <- W^* + beta_t[j(*)] * outer(k_t, d^*_t)`` with ``j = 0, 1, 2, 3`` for ``y, q, k, b``.

The update is applied at every step, including the last one, so the returned final state contains the
last token's self-modification.
"""

from __future__ import annotations

import torch
from torch import Tensor

from fastweights.ops._common import describe
from fastweights.ops.packing import supports_cu_seqlens
from fastweights.ops.srwm_autograd import srwm_fast_path

__all__ = ["srwm", "srwm_reference", "srwm_read", "srwm_with_reads", "srwm_num_columns", "check_srwm_inputs"]


def srwm_num_columns(head_dim: int) -> int:
    """Number of output columns of an SRWM head: ``3E + 4`` (y, q, k blocks and 4 learning rates)."""
    return 3 * head_dim + 4


def check_srwm_inputs(x: Tensor, weight: Tensor, initial_state: Tensor | None) -> None:
    """Validate the arguments of :func:`srwm` / :func:`srwm_reference`.

    Raises:
        ValueError: naming the argument, the expected shape/dtype and what was given.
    """
    if not isinstance(x, Tensor) or x.dim() != 4:
        raise ValueError(f"x: expected a 4-D tensor [B, T, H, E], got {describe(x)}")
    if not x.is_floating_point():
        raise ValueError(f"x: expected a floating-point dtype, got {x.dtype}")
    b, _, h, e = x.shape
    if not isinstance(weight, Tensor) or tuple(weight.shape) != (h, e, srwm_num_columns(e)):
        raise ValueError(
            f"weight: expected shape [H, E, 3E+4] = [{h}, {e}, {srwm_num_columns(e)}] for x of shape "
            f"{tuple(x.shape)}, got {describe(weight)}"
        )
    if weight.dtype != x.dtype:
        raise ValueError(f"weight: expected dtype {x.dtype} (same as x), got {weight.dtype}")
    if initial_state is not None:
        expected = (b, h, e, srwm_num_columns(e))
        if not isinstance(initial_state, Tensor) or tuple(initial_state.shape) != expected:
            raise ValueError(
                f"initial_state: expected shape [B, H, E, 3E+4] = {list(expected)}, "
                f"got {describe(initial_state)}"
            )
        if not initial_state.is_floating_point():
            raise ValueError(f"initial_state: expected a floating-point dtype, got {initial_state.dtype}")


def _initial_weights(x: Tensor, weight: Tensor, initial_state: Tensor | None) -> Tensor:
    if initial_state is None:
        return weight.unsqueeze(0).expand(x.shape[0], *weight.shape)
    return initial_state.to(x.dtype)


@supports_cu_seqlens("x")
def srwm_reference(
    x: Tensor,
    weight: Tensor,
    *,
    initial_state: Tensor | None = None,
    output_final_state: bool = False,
) -> tuple[Tensor, Tensor | None]:
    """Per-step, per-block reference of the SRWM recurrence (spec ``srwm_acl.md`` §1.2).

    Written to be obviously correct, not fast: the four blocks ``W^y, W^q, W^k, W^b`` are kept as
    separate tensors and updated one by one exactly as in the paper. Autograd gives exact gradients.

    Args:
        x: ``[B, T, H, E]`` float32/float64 input of each head.
        weight: ``[H, E, 3E+4]`` slow weights (same dtype as ``x``), columns ``y | q | k | beta``.
        initial_state: optional ``[B, H, E, 3E+4]`` fast weights to start from; ``None`` starts every
            batch element from ``weight``.
        output_final_state: also return the fast weights after the last step.

    Returns:
        ``(y, state)``: ``y [B, T, H, E]`` outputs read with the pre-update weights; ``state``
        ``[B, H, E, 3E+4]`` after the update of the last step, or ``None``.

    Raises:
        ValueError: on wrong ranks, shapes or dtypes (see :func:`check_srwm_inputs`).
    """
    check_srwm_inputs(x, weight, initial_state)
    e = x.shape[-1]
    w0 = _initial_weights(x, weight, initial_state)
    blocks = [w0[..., :e], w0[..., e : 2 * e], w0[..., 2 * e : 3 * e], w0[..., 3 * e :]]
    outputs = []
    for t in range(x.shape[1]):
        xt = x[:, t]  # [B, H, E]
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
    y = torch.stack(outputs, dim=1)
    state = torch.cat(blocks, dim=-1) if output_final_state else None
    return y, state


@supports_cu_seqlens("x")
def srwm(
    x: Tensor,
    weight: Tensor,
    *,
    initial_state: Tensor | None = None,
    output_final_state: bool = False,
) -> tuple[Tensor, Tensor | None]:
    """SRWM recurrence, fast path (spec ``srwm_acl.md`` §1.2 forward, §1.8 backward).

    Same signature, semantics and errors as :func:`srwm_reference`; proven equal to it (values and
    gradients) by the parity tests. All four blocks are fused into one matrix per head: per step one
    batched matmul ``x_t W`` for ``[y | q | k | beta]``, one for the four difference vectors
    ``(q_t - k_t) W`` and one rank-1 update whose columns are scaled by their block's learning rate.
    The backward is a custom autograd Function that recovers ``W_{t-1}`` by reversing the updates
    (``ops.srwm_autograd``): saved memory O(T·E) per head, any T, carried-state gradient counted once.

    Args:
        x: ``[B, T, H, E]`` float input.
        weight: ``[H, E, 3E+4]`` slow weights, columns ``y | q | k | beta``.
        initial_state: optional ``[B, H, E, 3E+4]`` fast weights; ``None`` broadcasts ``weight``.
        output_final_state: also return the final fast weights.

    Returns:
        ``(y [B, T, H, E], state [B, H, E, 3E+4] or None)``.
    """
    check_srwm_inputs(x, weight, initial_state)
    y, _, w = srwm_fast_path(x, None, _initial_weights(x, weight, initial_state))
    return y, (w if output_final_state else None)


def srwm_with_reads(
    x: Tensor,
    x_read: Tensor,
    weight: Tensor,
    *,
    initial_state: Tensor | None = None,
) -> tuple[Tensor, Tensor, Tensor]:
    """:func:`srwm` plus a read-only input stream: ``y_read_t = x_read_t W^y_{t-1}``.

    ``y_read_t`` is what a one-step call with input ``x_read_t`` would output from the state reached
    after steps ``1..t-1`` (its own update discarded) — e.g. predicting the label of demonstration
    ``t`` before it is revealed. Costs one extra ``[E, E]`` matmul per step.

    Args:
        x: ``[B, T, H, E]`` the sequence that updates the fast weights.
        x_read: ``[B, T, H, E]`` inputs read (not written) at every step.
        weight, initial_state: as for :func:`srwm`.

    Returns:
        ``(y [B, T, H, E], y_read [B, T, H, E], final state [B, H, E, 3E+4])``.

    Raises:
        ValueError: on bad shapes/dtypes, or if ``x_read`` does not match ``x``.
    """
    check_srwm_inputs(x, weight, initial_state)
    if not isinstance(x_read, Tensor) or x_read.shape != x.shape or x_read.dtype != x.dtype:
        raise ValueError(
            f"x_read: expected shape {list(x.shape)} and dtype {x.dtype}, got {describe(x_read)}"
        )
    y, y_read, w = srwm_fast_path(x, x_read, _initial_weights(x, weight, initial_state))
    assert y_read is not None
    return y, y_read, w


def srwm_read(x: Tensor, weight: Tensor, *, state: Tensor | None = None) -> Tensor:
    """Read-only SRWM step: every position of ``x`` is an independent one-step call from ``state``.

    Because the SRWM output at a step is read with the *pre-update* weights (§1.2), a one-step call
    returns ``y = x W^y`` and its own update only affects later steps. A batch of ``Q`` independent
    queries that all start from the same fast weights (and whose updates are discarded, as for ACL
    queries) is therefore one matmul — identical to ``Q`` separate length-1 calls of :func:`srwm`.

    Args:
        x: ``[B, Q, H, E]`` inputs of ``Q`` independent queries.
        weight: ``[H, E, 3E+4]`` slow weights (used when ``state`` is None).
        state: optional ``[B, H, E, 3E+4]`` fast weights every query starts from.

    Returns:
        ``y [B, Q, H, E]``.
    """
    check_srwm_inputs(x, weight, state)
    e = x.shape[-1]
    if state is None:
        return torch.einsum("bqhe,hem->bqhm", x, weight[..., :e])
    return torch.einsum("bqhe,bhem->bqhm", x, state[..., :e].to(x.dtype))
