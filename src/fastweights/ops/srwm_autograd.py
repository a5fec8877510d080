"""Memory-efficient SRWM recurrence: a custom autograd Function whose backward recovers ``W_{t-1}``
by reversing the rank-1 updates (Irie et al. 2022; the backward of modern-srwm's CUDA kernel
``self_ref_v0``).

The forward saves only per-step vectors — the projections ``x_t W_{t-1}`` with ``q_t``, ``k_t``
(after softmax) and ``beta_t`` (after sigmoid) written over their logits, and the difference vectors
``d_t = (q_t - k_t) W_{t-1}`` — plus the final weights, so saved memory is O(T·E) per head instead of
the O(T·E²) an autograd loop keeps. The backward walks time in reverse, undoing
``W_t = W_{t-1} + k_t ⊗ (beta_t ⊙ d_t)`` step by step; it has no chunks, so it is correct for any T,
and the gradient of an incoming final state is counted exactly once (the reference kernel
double-counts it in its stateful backward).

Layout inside this module: heads are flattened into the batch (``N = B·H``) and time is the leading
dimension of the saved per-step buffers (``[T, N, 1, ·]``); the fast weights are ``W [N, E, C]`` with
``C = d_out + 2E + 4`` columns ``y (d_out) | q (E) | k (E) | beta (4)`` (``d_out`` is read off ``C``;
the public ops validate it). Every step is a few
batched matrix-vector products and one fused rank-1 update (``addcmul_``); all elementwise work that
does not depend on the running weights is done for all steps at once outside the loop.

Which implementation a call uses (this one, the fused CPU kernel or the Triton kernels) is decided in
:mod:`fastweights.ops.srwm_dispatch`.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

__all__ = ["srwm_fused_torch"]


_CHUNK = 64  # steps whose per-step buffers are laid out time-major at once (bounded temporaries)


def _rate_matrix(e: int, d_out: int, dtype: torch.dtype, device: torch.device) -> Tensor:
    """``[4, C]`` one-hot map from the 4 learning rates to the columns they scale: ``d_out`` y columns,
    ``E`` q columns, ``E`` k columns and the 4 beta columns."""
    widths = torch.tensor([d_out, e, e, 4], device=device)
    idx = torch.repeat_interleave(torch.arange(4, device=device), widths)
    return torch.nn.functional.one_hot(idx, 4).to(dtype).T.contiguous()


def _time_major(x: Tensor) -> Tensor:
    """``[B, L, H, E]`` → contiguous ``[L, B·H, 1, E]``."""
    b, t, h, e = x.shape
    return x.transpose(0, 1).reshape(t, b * h, 1, e)


def _batch_major(x: Tensor, b: int, h: int) -> Tensor:
    """``[L, B·H, 1, E]`` → ``[B, L, H, E]`` view (inverse of :func:`_time_major`)."""
    t, _, _, e = x.shape
    return x.view(t, b, h, e).transpose(0, 1)


def _chunks(steps: int) -> list[tuple[int, int]]:
    return [(s, min(s + _CHUNK, steps)) for s in range(0, steps, _CHUNK)]


class _SRWMFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: Tensor, x_read: Tensor | None, w0: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        b, steps, h, e = x.shape
        n, c = b * h, w0.shape[-1]
        o = c - 2 * e - 4  # d_out, the width of the y block
        rates = _rate_matrix(e, o, x.dtype, x.device)
        w = w0.reshape(n, e, c).clone(memory_format=torch.contiguous_format)
        y = x.new_empty(b, steps, h, o)
        y_read = torch.zeros_like(y)
        act = x.new_empty(steps, n, 1, 2 * e + 4)  # q_t | k_t | beta_t after their activations
        diff = x.new_empty(steps, n, 1, c)  # d_t = (q_t - k_t) W_{t-1}
        for s, s_end in _chunks(steps):
            xs = _time_major(x[:, s:s_end])
            ys = x.new_empty(s_end - s, n, 1, o)
            if x_read is not None:
                xr, rs = _time_major(x_read[:, s:s_end]), torch.empty_like(ys)
            for i, t in enumerate(range(s, s_end)):
                if x_read is not None:
                    torch.bmm(xr[i], w[..., :o], out=rs[i])
                p = torch.bmm(xs[i], w)  # [N, 1, C] = x_t W_{t-1}
                ys[i] = p[..., :o]
                qk = torch.softmax(p[..., o : o + 2 * e].unflatten(-1, (2, e)), dim=-1)  # [N, 1, 2, E]
                act[t, ..., : 2 * e] = qk.flatten(-2)
                beta = torch.sigmoid(p[..., o + 2 * e :], out=act[t, ..., 2 * e :])
                d = torch.bmm(qk[..., 0, :] - qk[..., 1, :], w, out=diff[t])
                w.addcmul_(qk[..., 1, :].transpose(1, 2), d * torch.matmul(beta, rates))
            y[:, s:s_end] = _batch_major(ys, b, h)
            if x_read is not None:
                y_read[:, s:s_end] = _batch_major(rs, b, h)
        ctx.save_for_backward(x, x_read, act, diff, w)
        return y, y_read, w.view(b, h, e, c).clone()

    @staticmethod
    def backward(ctx: Any, g_y: Tensor, g_read: Tensor, g_w: Tensor) -> tuple[Tensor, Tensor | None, Tensor]:
        x, x_read, act, diff, w_final = ctx.saved_tensors
        with torch.autocast(x.device.type, enabled=False):  # exact dtype even if called under autocast
            b, steps, h, e = x.shape
            n, c = b * h, diff.shape[-1]
            o = c - 2 * e - 4
            rates = _rate_matrix(e, o, x.dtype, x.device)
            w = w_final.clone()
            grad = g_w.reshape(n, e, c).clone() if g_w is not None else torch.zeros_like(w)  # dL/dW_t
            if g_y is None:
                g_y = x.new_zeros(b, steps, h, o)
            use_read = x_read is not None and g_read is not None
            g_x = torch.empty_like(x)
            g_x_read = torch.zeros_like(x_read) if x_read is not None else None
            for s, s_end in reversed(_chunks(steps)):
                # everything that does not depend on the running weights, for the whole chunk at once
                qk_c = act[s:s_end, ..., : 2 * e].unflatten(-1, (2, e))  # [L, N, 1, 2, E]
                q_c, k_c = qk_c[..., 0, :], qk_c[..., 1, :]
                beta_c = act[s:s_end, ..., 2 * e :]
                d_c = diff[s:s_end]
                b_cols_c = torch.matmul(beta_c, rates)  # [L, N, 1, C]
                u_c = d_c * b_cols_c  # the written row vectors
                qmk_col_c = (q_c - k_c).transpose(-1, -2)  # [L, N, E, 1]
                slope_c = beta_c * (1 - beta_c)  # sigmoid'
                x_col_c = _time_major(x[:, s:s_end]).transpose(-1, -2)
                gy_c = _time_major(g_y[:, s:s_end])
                gx_c = x.new_empty(s_end - s, n, 1, e)
                if use_read:
                    xr_col_c = _time_major(x_read[:, s:s_end]).transpose(-1, -2)
                    gr_c = _time_major(g_read[:, s:s_end])
                    gxr_c = torch.empty_like(gx_c)
                for i in reversed(range(s_end - s)):
                    k_t, u = k_c[i], u_c[i]
                    w.addcmul_(k_t.transpose(1, 2), u, value=-1)  # W_{t-1}
                    # W_t = W_{t-1} + k ⊗ u,  u = beta_cols * d,  d = (q - k) W_{t-1}
                    g_k = torch.bmm(u, grad.transpose(1, 2))  # [N, 1, E] via the outer product
                    g_u = torch.bmm(k_t, grad)  # [N, 1, C]
                    g_d = g_u * b_cols_c[i]
                    g_beta = torch.matmul(g_u * d_c[i], rates.T)  # [N, 1, 4]
                    g_qmk = torch.bmm(g_d, w.transpose(1, 2))  # dL/d(q - k), [N, 1, E]
                    grad.addcmul_(qmk_col_c[i], g_d)
                    g_qk = torch.stack([g_qmk, g_k - g_qmk], dim=-2)  # [N, 1, 2, E]
                    g_qk_logit = torch._softmax_backward_data(g_qk, qk_c[i], -1, x.dtype)
                    g_proj = torch.cat([gy_c[i], g_qk_logit.flatten(-2), g_beta * slope_c[i]], dim=-1)
                    torch.bmm(g_proj, w.transpose(1, 2), out=gx_c[i])
                    grad.addcmul_(x_col_c[i], g_proj)
                    if use_read:
                        torch.bmm(gr_c[i], w[..., :o].transpose(1, 2), out=gxr_c[i])
                        grad[..., :o].addcmul_(xr_col_c[i], gr_c[i])
                g_x[:, s:s_end] = _batch_major(gx_c, b, h)
                if use_read:
                    g_x_read[:, s:s_end] = _batch_major(gxr_c, b, h)
            return g_x, g_x_read, grad.view(b, h, e, c)


def srwm_fused_torch(x: Tensor, x_read: Tensor | None, w0: Tensor) -> tuple[Tensor, Tensor | None, Tensor]:
    """Run the SRWM recurrence with the reversal backward, in PyTorch (any device, any float dtype).

    The portable implementation behind :func:`fastweights.ops.srwm_dispatch.srwm_fast_path` (which
    prefers the fused CPU and Triton kernels where they apply), with its arguments and returns (outputs
    in ``x``'s dtype); nothing is validated here.
    """
    y, y_read, w = _SRWMFunction.apply(x, x_read, w0)
    return y, (y_read if x_read is not None else None), w
