"""Memory-efficient SRWM recurrence: a custom autograd Function whose backward recovers ``W_{t-1}``
by reversing the rank-1 updates (Irie et al. 2022, CUDA kernel ``self_ref_v0``; restated in
``shared/spec/srwm_acl.md`` §1.8).

The forward saves only per-step vectors — inputs ``x_t``, ``q_t``, ``k_t`` (after softmax), ``beta_t``
(after sigmoid) and the difference vectors ``d_t = (q_t - k_t) W_{t-1}`` — plus the final weights, so
saved memory is O(T·E) per head instead of the O(T·E²) an autograd loop keeps. The backward walks
time in reverse, undoing ``W_t = W_{t-1} + k_t ⊗ (beta_t ⊙ d_t)`` step by step; it has no chunks, so
it is correct for any T, and the gradient of an incoming final state is counted exactly once (the
reference kernel double-counts it, spec §1.8 BUG).

Layout inside this module is ``x [B, T, H, E]``, fast weights ``W [B, H, E, C]`` with ``C = 3E+4``
columns ``y | q | k | beta``.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

__all__ = ["srwm_fast_path"]


def _rate_index(e: int, device: torch.device) -> Tensor:
    """Column → index of the learning rate that scales it: y→0, q→1, k→2, beta→3."""
    return torch.repeat_interleave(torch.arange(4, device=device), torch.tensor([e, e, e, 4], device=device))


def _block_sum(v: Tensor, e: int) -> Tensor:
    """Sum ``[..., C]`` over the columns of each block → ``[..., 4]``."""
    return torch.stack(
        [
            v[..., :e].sum(-1),
            v[..., e : 2 * e].sum(-1),
            v[..., 2 * e : 3 * e].sum(-1),
            v[..., 3 * e :].sum(-1),
        ],
        dim=-1,
    )


class _SRWMFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: Tensor, x_read: Tensor | None, w0: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        e = x.shape[-1]
        idx = _rate_index(e, x.device)
        w = w0.clone()
        ys, reads, qs, ks, betas, diffs = [], [], [], [], [], []
        for t in range(x.shape[1]):
            if x_read is not None:
                reads.append(torch.matmul(x_read[:, t].unsqueeze(-2), w[..., :e]).squeeze(-2))
            proj = torch.matmul(x[:, t].unsqueeze(-2), w).squeeze(-2)  # [B, H, C]
            q = torch.softmax(proj[..., e : 2 * e], dim=-1)
            k = torch.softmax(proj[..., 2 * e : 3 * e], dim=-1)
            beta = torch.sigmoid(proj[..., 3 * e :])
            d = torch.matmul((q - k).unsqueeze(-2), w).squeeze(-2)  # [B, H, C]
            w.add_(k.unsqueeze(-1) * (d * beta[..., idx]).unsqueeze(-2))
            ys.append(proj[..., :e])
            qs.append(q)
            ks.append(k)
            betas.append(beta)
            diffs.append(d)
        y = torch.stack(ys, dim=1)
        y_read = torch.stack(reads, dim=1) if x_read is not None else torch.zeros_like(y)
        ctx.save_for_backward(
            x,
            x_read if x_read is not None else None,
            torch.stack(qs, 1),
            torch.stack(ks, 1),
            torch.stack(betas, 1),
            torch.stack(diffs, 1),
            w,
        )
        ctx.has_read = x_read is not None
        return y, y_read, w.clone()

    @staticmethod
    def backward(ctx: Any, g_y: Tensor, g_read: Tensor, g_w: Tensor) -> tuple[Tensor, Tensor | None, Tensor]:
        x, x_read, q, k, beta, d, w = ctx.saved_tensors
        e = x.shape[-1]
        idx = _rate_index(e, x.device)
        w = w.clone()
        grad = g_w.clone() if g_w is not None else torch.zeros_like(w)  # running dL/dW_t
        g_x = torch.zeros_like(x)
        g_x_read = torch.zeros_like(x_read) if ctx.has_read else None
        if g_y is None:
            g_y = torch.zeros_like(x)
        for t in reversed(range(x.shape[1])):
            q_t, k_t, b_t, d_t = q[:, t], k[:, t], beta[:, t], d[:, t]
            b_cols = b_t[..., idx]  # [B, H, C]
            u = d_t * b_cols  # the written row vector
            w.sub_(k_t.unsqueeze(-1) * u.unsqueeze(-2))  # W_{t-1}
            # W_t = W_{t-1} + k ⊗ u,  u = beta_cols * d,  d = (q - k) W_{t-1}
            g_k = torch.matmul(grad, u.unsqueeze(-1)).squeeze(-1)  # via the outer product
            g_u = torch.matmul(k_t.unsqueeze(-2), grad).squeeze(-2)  # [B, H, C]
            g_d = g_u * b_cols
            g_beta = _block_sum(g_u * d_t, e)  # [B, H, 4]
            g_qk = torch.matmul(w, g_d.unsqueeze(-1)).squeeze(-1)  # dL/d(q - k)
            grad.add_((q_t - k_t).unsqueeze(-1) * g_d.unsqueeze(-2))
            g_q = g_qk
            g_k = g_k - g_qk
            # softmax and sigmoid backward
            g_q_logit = q_t * (g_q - (g_q * q_t).sum(-1, keepdim=True))
            g_k_logit = k_t * (g_k - (g_k * k_t).sum(-1, keepdim=True))
            g_b_logit = g_beta * b_t * (1 - b_t)
            g_proj = torch.cat([g_y[:, t], g_q_logit, g_k_logit, g_b_logit], dim=-1)  # [B, H, C]
            g_x[:, t] = torch.matmul(w, g_proj.unsqueeze(-1)).squeeze(-1)
            grad.add_(x[:, t].unsqueeze(-1) * g_proj.unsqueeze(-2))
            if g_x_read is not None:
                g_r = g_read[:, t] if g_read is not None else torch.zeros_like(g_y[:, t])
                g_x_read[:, t] = torch.matmul(w[..., :e], g_r.unsqueeze(-1)).squeeze(-1)
                grad[..., :e].add_(x_read[:, t].unsqueeze(-1) * g_r.unsqueeze(-2))
        return g_x, g_x_read, grad


def srwm_fast_path(x: Tensor, x_read: Tensor | None, w0: Tensor) -> tuple[Tensor, Tensor | None, Tensor]:
    """Run the SRWM recurrence with the reversal backward.

    Args:
        x: ``[B, T, H, E]`` inputs (already validated by the public ops).
        x_read: optional ``[B, T, H, E]`` read-only stream (``y_read_t = x_read_t W^y_{t-1}``).
        w0: ``[B, H, E, 3E+4]`` initial fast weights (may be an expanded view of the slow weights).

    Returns:
        ``(y [B, T, H, E], y_read or None, final fast weights [B, H, E, 3E+4])``.
    """
    y, y_read, w = _SRWMFunction.apply(x, x_read, w0)
    return y, (y_read if x_read is not None else None), w
