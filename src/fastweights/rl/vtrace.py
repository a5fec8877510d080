"""V-trace off-policy targets and the IMPALA actor-critic loss (Espeholt et al., ICML 2018, §4, Eq. 1).

Time-major tensors ``[T, B]``: step ``t`` of the unroll for each of ``B`` environments. With
``ρ_t = min(ρ̄, π(a_t|x_t) / μ(a_t|x_t))`` and ``c_t = min(c̄, π/μ)`` (λ = 1),

    v_s = V(x_s) + Σ_{t=s}^{T-1} (Π_{i=s}^{t-1} γ_i c_i) ρ_t (r_t + γ_t V(x_{t+1}) − V(x_t)),

where ``γ_t`` is the discount after step ``t`` (0 when the episode ended there) and ``V(x_T)`` is the
bootstrap value. :func:`vtrace` computes it by the backward recursion
``v_s − V(x_s) = δ_s + γ_s c_s (v_{s+1} − V(x_{s+1}))``; :func:`vtrace_reference` by the sum above.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

__all__ = ["VTrace", "vtrace", "vtrace_reference", "actor_critic_loss"]


class VTrace(NamedTuple):
    """``vs [T, B]``: the value targets; ``pg_advantages [T, B]``: ``ρ_s (r_s + γ_s v_{s+1} − V(x_s))``."""

    vs: Tensor
    pg_advantages: Tensor


def _check(log_rhos: Tensor, discounts: Tensor, rewards: Tensor, values: Tensor, bootstrap: Tensor) -> None:
    shape = log_rhos.shape
    if log_rhos.dim() != 2:
        raise ValueError(f"log_rhos: expected a [T, B] tensor, got shape {tuple(shape)}")
    for name, x in (("discounts", discounts), ("rewards", rewards), ("values", values)):
        if x.shape != shape:
            raise ValueError(f"{name}: expected shape {tuple(shape)} (as log_rhos), got {tuple(x.shape)}")
    if bootstrap.shape != shape[1:]:
        raise ValueError(f"bootstrap_value: expected shape {tuple(shape[1:])}, got {tuple(bootstrap.shape)}")


@torch.no_grad()
def vtrace(
    log_rhos: Tensor,
    discounts: Tensor,
    rewards: Tensor,
    values: Tensor,
    bootstrap_value: Tensor,
    *,
    clip_rho: float = 1.0,
    clip_c: float = 1.0,
    clip_pg_rho: float = 1.0,
) -> VTrace:
    """V-trace targets by the backward recursion (no gradient flows through them).

    Args:
        log_rhos: ``[T, B]`` float, ``log π(a_t|x_t) − log μ(a_t|x_t)`` (learner vs behaviour policy).
        discounts: ``[T, B]`` float, ``γ`` times 0/1 "not done after step t".
        rewards: ``[T, B]`` float, the reward of step ``t``.
        values: ``[T, B]`` float, the learner's ``V(x_t)``.
        bootstrap_value: ``[B]`` float, ``V(x_T)`` after the unroll.
        clip_rho, clip_c, clip_pg_rho: ``ρ̄``, ``c̄`` and the clip of the ρ in the policy-gradient
            advantage (all 1 in IMPALA's experiments).

    Returns:
        :class:`VTrace` in the dtype of ``values``.

    Raises:
        ValueError: for mismatched shapes (naming the argument).
    """
    _check(log_rhos, discounts, rewards, values, bootstrap_value)
    rhos = log_rhos.exp()
    clipped_rhos = rhos.clamp(max=clip_rho)
    cs = rhos.clamp(max=clip_c)
    next_values = torch.cat([values[1:], bootstrap_value[None]], dim=0)
    deltas = clipped_rhos * (rewards + discounts * next_values - values)
    acc = torch.zeros_like(bootstrap_value)
    corrections = []
    for t in range(values.shape[0] - 1, -1, -1):
        acc = deltas[t] + discounts[t] * cs[t] * acc
        corrections.append(acc)
    vs = values + torch.stack(corrections[::-1]) if corrections else values.clone()
    next_vs = torch.cat([vs[1:], bootstrap_value[None]], dim=0)
    pg_advantages = rhos.clamp(max=clip_pg_rho) * (rewards + discounts * next_vs - values)
    return VTrace(vs, pg_advantages)


@torch.no_grad()
def vtrace_reference(
    log_rhos: Tensor,
    discounts: Tensor,
    rewards: Tensor,
    values: Tensor,
    bootstrap_value: Tensor,
    *,
    clip_rho: float = 1.0,
    clip_c: float = 1.0,
    clip_pg_rho: float = 1.0,
) -> VTrace:
    """:func:`vtrace` by Eq. 1's explicit sum (O(T²); for tests). Same arguments, returns and errors."""
    _check(log_rhos, discounts, rewards, values, bootstrap_value)
    n = values.shape[0]
    rhos = log_rhos.exp()
    cs = rhos.clamp(max=clip_c)
    all_values = torch.cat([values, bootstrap_value[None]], dim=0)
    vs = values.clone()
    for s in range(n):
        weight = torch.ones_like(bootstrap_value)
        for t in range(s, n):
            delta = rhos[t].clamp(max=clip_rho) * (rewards[t] + discounts[t] * all_values[t + 1] - values[t])
            vs[s] += weight * delta
            weight = weight * discounts[t] * cs[t]
    next_vs = torch.cat([vs[1:], bootstrap_value[None]], dim=0)
    return VTrace(vs, rhos.clamp(max=clip_pg_rho) * (rewards + discounts * next_vs - values))


def actor_critic_loss(
    logits: Tensor,
    actions: Tensor,
    values: Tensor,
    targets: VTrace,
    *,
    baseline_cost: float = 0.5,
    entropy_cost: float = 0.01,
) -> tuple[Tensor, dict[str, float]]:
    """IMPALA's loss summed over the unroll and batch: policy gradient + baseline + entropy terms.

    ``pg = −Σ log π(a_t) · A_t``, ``baseline = baseline_cost · ½ Σ (v_t − V(x_t))²``,
    ``entropy = entropy_cost · Σ Σ_a π log π`` (torchbeast's convention: a sum, not a mean).

    Args:
        logits: ``[T, B, A]`` float, the learner's policy logits.
        actions: ``[T, B]`` int64, the actions taken.
        values: ``[T, B]`` float, the learner's ``V(x_t)``.
        targets: :func:`vtrace` of the same unroll.

    Returns:
        ``(loss scalar, {"pg_loss", "baseline_loss", "entropy_loss"} as floats)``.
    """
    log_probs = torch.log_softmax(logits, dim=-1)
    taken = log_probs.gather(-1, actions.unsqueeze(-1)).squeeze(-1)
    pg = -(taken * targets.pg_advantages).sum()
    baseline = baseline_cost * 0.5 * ((targets.vs - values) ** 2).sum()
    entropy = entropy_cost * (log_probs.exp() * log_probs).sum()
    parts = {"pg_loss": pg.item(), "baseline_loss": baseline.item(), "entropy_loss": entropy.item()}
    return pg + baseline + entropy, parts
