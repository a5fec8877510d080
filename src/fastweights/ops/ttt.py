"""Test-time training (TTT) inner loops: TTT-Linear and TTT-MLP, per-token reference and dual form.

Sources: Sun et al., "Learning to (Learn at Test Time): RNNs with Expressive Hidden States",
arXiv 2407.04620 (ICML 2025), §2 (inner model, self-supervised loss, mini-batch TTT, dual form), as
implemented in ttt-lm-pytorch ``ttt.py`` (``TTTLinear``, ``TTTMLP``, ``TTTCache``).

Layout: ``q, k, v [B, T, H, D]`` (already projected and rotated), ``lr [B, T, H]`` the source-token
learning rates ``lr_j`` (§2.7, with the reference's ``1/D`` factor), ``token_scale [b]`` the position
scales ``s_i = max(0, 1/i + delta_i)`` of the ``b = mini_batch_size`` in-mini-batch positions.

Inner model per head (row-vector convention ``x W + b``), with a per-head LayerNorm ``LN_h`` (weight
and bias ``[H, D]``, biased variance, ``eps``) and a residual: ``f(x) = x + LN_h(f_res(x))``.

- TTT-Linear: ``f_res(x) = x W1 + b1``, ``W1 [H, D, D]``, ``b1 [H, 1, D]``.
- TTT-MLP: ``f_res(x) = GELU_tanh(x W1 + b1) W2 + b2``, ``W1 [H, D, 4D]``, ``b1 [H, 1, 4D]``,
  ``W2 [H, 4D, D]``, ``b2 [H, 1, D]``.

Inner loss of token j: ``l_j(W) = 1/2 ||LN_h(f_res(k_j; W)) - (v_j - k_j)||^2`` (summed over features).

Mini-batch semantics (§2.4): tokens are grouped into mini-batches of ``b`` consecutive positions
(counted from the start of the whole sequence, so a carried state continues a partial mini-batch).
With ``W^m`` the weights at the start of mini-batch m, token i of the mini-batch is read with
``W_i = W^m - s_i * sum_{j<=i} lr_j grad l_j(W^m)`` (every gradient at ``W^m``), and the output is
``z_i = q_i + LN_h(f_res(q_i; W_i))``. At the end of a full mini-batch ``W^{m+1} = W_b``.

State (the reference's ``TTTCache`` layout): a dict with ``"W1_states"`` ``[B, H, ...]`` (and ``b1``,
``W2``, ``b2`` for the MLP) = the weights at the last mini-batch boundary, ``"W1_grad"`` etc. = the
running sums ``sum_j lr_j grad l_j(W_states)`` since that boundary (not yet scaled by ``s``), and
``"offset"`` (int) = the number of tokens consumed modulo ``b`` (an int64 tensor ``[B]``, one per
row, for the state of a padded batch: ``attention_mask``, whose rows consume different numbers of
tokens). The weights that the last token was
read with are ``W_states - s_offset * W_grad`` (see :func:`ttt_current_weights`). A sequence processed
in several calls with the state carried gives exactly the outputs of one call, at any split point
(the reference implementation only supports prefill from a boundary, then single tokens).

Padding (``attention_mask``): the dual form puts row ``b``'s ``j``-th real token at step
``offset_b + j`` of one frame shared by the batch (``ops.masking.left_justify``), so that every row's
mini-batch boundaries are the frame's, with zero learning rates at the frame's padding; a row whose
tokens end inside a whole mini-batch has its state taken there, before the boundary would commit its
sums. The per-token reference keeps one position per row instead.

Quirk reproduced on purpose: the TTT-MLP inner gradient uses the reference's analytic tanh-GELU
derivative with its truncated constants ``0.79788456`` and ``0.1070322243`` (``gelu_bwd``); the per-token
reference differentiates ``gelu(tanh)`` exactly with autograd, so the two differ by about 1e-12.

Precision: float32/float64 inputs are computed in their own dtype; float16/bfloat16 in float32
(output cast back, state float32). Autocast is disabled inside.
"""

from __future__ import annotations

import torch
from torch import Tensor

from fastweights.ops._ttt_inner import (
    _ARGS_DOC,
    _LIN_PARAMS,
    _LINEAR,
    _MLP,
    _MLP_PARAMS,
    _finish,
    _gelu,
    _gelu_tanh_grad,
    _gelu_tanh_grad_exact,
    _ln,
    _ln_l2_grad,
    _prepare,
    _segments,
    row_offsets,
    ttt_current_weights,
    ttt_initial_state,
)
from fastweights.ops.masking import (
    check_attention_mask,
    left_justify,
    mask_lengths,
    restore_padding,
    zero_padding,
)
from fastweights.ops.packing import supports_cu_seqlens

__all__ = [
    "row_offsets",
    "ttt_linear",
    "ttt_linear_reference",
    "ttt_mlp",
    "ttt_mlp_reference",
    "ttt_current_weights",
    "ttt_initial_state",
]

# ------------------------------------------------------------------------------ per-token reference


def _inner_loss(names: tuple[str, ...], w: dict[str, Tensor], k: Tensor, v: Tensor, lnw, lnb, eps) -> Tensor:
    z = k.unsqueeze(-2) @ w["W1"] + w["b1"]  # [B, H, 1, *]
    if names == _MLP:
        z = _gelu(z) @ w["W2"] + w["b2"]
    y = _ln(z, lnw, lnb, eps)
    return 0.5 * ((y - (v - k).unsqueeze(-2)) ** 2).sum()


def _read(names: tuple[str, ...], w: dict[str, Tensor], q: Tensor, lnw, lnb, eps) -> Tensor:
    z = q.unsqueeze(-2) @ w["W1"] + w["b1"]
    if names == _MLP:
        z = _gelu(z) @ w["W2"] + w["b2"]
    return q + _ln(z, lnw, lnb, eps).squeeze(-2)


def _reference(
    names,
    q,
    k,
    v,
    lr,
    token_scale,
    params,
    ln_weight,
    ln_bias,
    initial_state,
    output_final_state,
    eps,
    attention_mask=None,
):
    dtype, qh, kh, vh, lrh, s, state, lnw, lnb = _prepare(
        names, q, k, v, lr, token_scale, params, ln_weight, ln_bias, initial_state
    )
    mask = _row_mask(attention_mask, q, state)
    if mask is not None:
        return _reference_rows(names, q, qh, kh, vh, lrh, s, state, lnw, lnb, output_final_state, eps, mask)
    mbs = s.shape[0]
    with torch.autocast(q.device.type, enabled=False):
        ws = {n: state[f"{n}_states"] for n in names}
        acc = {n: state[f"{n}_grad"] for n in names}
        pos = state["offset"]
        grad_fn = torch.func.grad(lambda w, kt, vt: _inner_loss(names, w, kt, vt, lnw, lnb, eps))
        outs = []
        for t in range(qh.shape[2]):
            g = grad_fn(ws, kh[:, :, t], vh[:, :, t])  # gradient of l_t at the mini-batch start weights
            lr_t = lrh[:, :, t, None, None]
            acc = {n: acc[n] + lr_t * g[n] for n in names}
            w_t = {n: ws[n] - s[pos] * acc[n] for n in names}
            outs.append(_read(names, w_t, qh[:, :, t], lnw, lnb, eps))
            pos += 1
            if pos == mbs:  # mini-batch boundary: W^{m+1} = W_b, sums restart
                ws, acc, pos = w_t, {n: torch.zeros_like(acc[n]) for n in names}, 0
        o = torch.stack(outs, dim=2) if outs else qh.clone()
    final = {"offset": pos, **{f"{n}_states": ws[n] for n in names}, **{f"{n}_grad": acc[n] for n in names}}
    return _finish(o, q, final, output_final_state)


def _row_mask(attention_mask: object, q: Tensor, state: dict) -> Tensor | None:
    """The validated padding mask ``[B, T]`` (all real when only the state has per-row offsets), or None
    for the shared-offset computation (no mask, an int ``offset``)."""
    if attention_mask is None and not isinstance(state["offset"], Tensor):
        return None
    b, t = q.shape[:2]
    if attention_mask is None:
        return torch.ones(b, t, dtype=torch.bool, device=q.device)
    return check_attention_mask(attention_mask, b, t, q.device, "q")


def _reference_rows(names, q, qh, kh, vh, lrh, s, state, lnw, lnb, output_final_state, eps, mask):
    """The per-token reference with a padding mask and one mini-batch position per row: a padded token
    adds nothing to its row's sums and does not advance its position (``[B, H, T, D]`` inputs)."""
    mbs, b = s.shape[0], qh.shape[0]

    def rows(x: Tensor) -> Tensor:  # [B] -> [B, 1, 1, 1]
        return x.view(b, 1, 1, 1)

    with torch.autocast(q.device.type, enabled=False):
        ws = {n: state[f"{n}_states"] for n in names}
        acc = {n: state[f"{n}_grad"] for n in names}
        pos = row_offsets(state["offset"], b, q.device)
        grad_fn = torch.func.grad(lambda w, kt, vt: _inner_loss(names, w, kt, vt, lnw, lnb, eps))
        outs = []
        for t in range(qh.shape[2]):
            real = mask[:, t]
            g = grad_fn(ws, kh[:, :, t], vh[:, :, t])
            lr_t = torch.where(real[:, None], lrh[:, :, t], 0.0)[..., None, None]
            acc = {n: acc[n] + lr_t * g[n] for n in names}
            w_t = {n: ws[n] - rows(s[pos]) * acc[n] for n in names}
            outs.append(_read(names, w_t, qh[:, :, t], lnw, lnb, eps))
            pos = pos + real.to(torch.int64)
            full = pos == mbs  # rows at a mini-batch boundary: W^{m+1} = W_b, sums restart
            ws = {n: torch.where(rows(full), w_t[n], ws[n]) for n in names}
            acc = {n: torch.where(rows(full), 0.0, acc[n]) for n in names}
            pos = torch.where(full, 0, pos)
        o = torch.stack(outs, dim=2) if outs else qh.clone()
        o = zero_padding(o.transpose(1, 2), mask).transpose(1, 2)
    final = {"offset": pos, **{f"{n}_states": ws[n] for n in names}, **{f"{n}_grad": acc[n] for n in names}}
    return _finish(o, q, final, output_final_state)


# --------------------------------------------------------------------------------------- dual form


def _scaled_causal(s_i: Tensor, lr_j: Tensor, future: Tensor) -> Tensor:
    """``SL[i, j] = s_i lr_j`` for ``j <= i``, else 0: ``s_i [n, 1]``, ``lr_j [..., n]`` → ``[..., n, n]``."""
    return (s_i * lr_j.unsqueeze(-2)).masked_fill(future, 0.0)


def _dual_attention(x: Tensor, keys: Tensor, scaled: Tensor) -> Tensor:
    """``A[i, j] = s_i lr_j (x_i . keys_j + 1)`` for ``j <= i``, else 0 (``scaled`` from
    :func:`_scaled_causal`): with it, ``x W_i + b_i = x W + b - A G`` for the in-mini-batch weights
    ``W_i = W - s_i sum_{j<=i} lr_j keys_j^T g_j``, ``b_i = b - s_i sum_{j<=i} lr_j g_j`` (dual form,
    §2.5; the ``+ 1`` is the bias's share, the running sum the reference takes with ``cumsum``)."""
    return torch.addcmul(scaled, x @ keys.transpose(-2, -1), scaled)


def _full_runs(segments: list[tuple[int, int, int]], mbs: int) -> tuple[int, int]:
    """(index of the first whole mini-batch among ``segments``, how many follow it consecutively)."""
    first = next((i for i, (_, n, _) in enumerate(segments) if n == mbs), len(segments))
    count = 0
    while first + count < len(segments) and segments[first + count][1] == mbs:
        count += 1
    return first, count


def _dual(
    names,
    q,
    k,
    v,
    lr,
    token_scale,
    params,
    ln_weight,
    ln_bias,
    initial_state,
    output_final_state,
    eps,
    exact=False,
    attention_mask=None,
):
    dtype, qh, kh, vh, lrh, s, state, lnw, lnb = _prepare(
        names, q, k, v, lr, token_scale, params, ln_weight, ln_bias, initial_state
    )
    mbs = s.shape[0]
    mask = _row_mask(attention_mask, q, state)
    if mask is not None:
        # one frame for the batch, with row b's j-th real token at step offset_b + j: the frame's
        # mini-batches are every row's own, from one shared start (offset 0); ``ends`` = where each
        # row's tokens end in it
        starts = row_offsets(state["offset"], q.shape[0], q.device)
        ends = starts + mask_lengths(mask)
        end_steps = ends.tolist()  # one host sync: the frame's length and where captures are needed
        length = max(end_steps, default=0)

        def to_frame(x: Tensor) -> Tensor:  # [B, H, T, ...] -> [B, H, length, ...]
            return left_justify(x.transpose(1, 2), mask, starts, length).transpose(1, 2)

        qh, kh, vh, lrh = (to_frame(x) for x in (qh, kh, vh, lrh))
    mlp = names == _MLP
    gelu_grad = _gelu_tanh_grad_exact if exact else _gelu_tanh_grad
    b, h, t, d = qh.shape
    bh = b * h
    s_col, s_last = s.unsqueeze(-1), s[mbs - 1]  # [mbs, 1]; the boundary's scale s_b

    def flat(x: Tensor) -> Tensor:  # [B, H, ...] -> [B*H, ...] (batched matmuls take 3-D operands)
        return x.reshape(bh, *x.shape[2:])

    with torch.autocast(q.device.type, enabled=False):
        ws = {n: flat(state[f"{n}_states"]) for n in names}
        if mask is None:
            has_acc = state["offset"] > 0
            acc = {n: flat(state[f"{n}_grad"]) for n in names} if has_acc else {}
        else:  # the running sums of the rows that continue a mini-batch (the others' are zero)
            carried = starts > 0
            has_acc = bool(carried.any())
            keep = carried.repeat_interleave(h).view(bh, 1, 1)
            acc = {n: torch.where(keep, flat(state[f"{n}_grad"]), 0.0) for n in names} if has_acc else {}
        lnw_flat = lnw.expand(b, h, 1, d).reshape(bh, 1, d)
        # bias - target of the inner loss (see _ln_l2_grad), for the whole sequence at once
        qf, kf, shifted_all, lrf = (flat(x) for x in (qh, kh, lnb - (vh - kh), lrh))
        segments = list(_segments(state["offset"] if mask is None else 0, t, mbs))
        masks: dict[int, Tensor] = {}
        # masked: the states of the rows whose tokens end inside a whole mini-batch, taken before its
        # boundary (the frame goes on with padding there, which would commit their sums)
        captured: dict[str, Tensor] = {}
        taken: Tensor | None = None

        def future(n: int) -> Tensor:  # [n, n], True above the diagonal (made once per length)
            if n not in masks:
                masks[n] = torch.ones(n, n, dtype=torch.bool, device=qh.device).triu(1)
            return masks[n]

        def terms(lo: int, n: int, pos: int, blocks: int = 0) -> tuple[Tensor, ...]:
            """What does not depend on the inner weights, for ``blocks`` whole mini-batches from token
            ``lo`` at once (``[BH, blocks, ...]``) or one segment of ``n`` tokens (``blocks`` 0)."""
            hi = lo + (blocks or 1) * n
            shape = (bh, blocks, n) if blocks else (bh, n)
            queries, keys = (x[:, lo:hi].reshape(*shape, d) for x in (qf, kf))
            kq = torch.cat([keys, queries], dim=-2)  # [keys; queries]: one matmul gives K W and Q W
            keys, queries = kq.split(n, dim=-2)
            lr_j = lrf[:, lo:hi].reshape(shape)
            scaled = _scaled_causal(s_col[pos : pos + n], lr_j, future(n))
            lr_col = (s_last if pos + n == mbs else 1.0) * lr_j.unsqueeze(-1)
            shifted = shifted_all[:, lo:hi].reshape(*shape, d)
            return queries, keys, kq, shifted, scaled, _dual_attention(queries, keys, scaled), lr_col

        first, count = _full_runs(segments, mbs)
        whole: dict[int, tuple[Tensor, ...]] = {}
        if count:  # unbind, not indexing: its backward stacks the blocks' gradients once
            per_block = terms(segments[first][0], mbs, 0, count)
            for j, views in enumerate(zip(*(x.unbind(1) for x in per_block), strict=True)):
                whole[first + j] = views
        zs = []
        for i, (start, n, pos) in enumerate(segments):
            Q, K, kq, shifted, scaled, attn1, lr_col = whole.pop(i) if i in whole else terms(start, n, pos)
            s_i = s_col[pos : pos + n]
            zz = torch.baddbmm(ws["b1"], kq, ws["W1"])  # [K; Q] W1 + b1: the keys' and queries' rows
            z1, z = zz.split(n, dim=1)  # split, not slicing: one gradient concatenation, no zero fills
            if has_acc:  # the running sums of a mini-batch begun in an earlier call
                z = z - s_i * torch.baddbmm(acc["b1"], Q, acc["W1"])
            if mlp:
                x2 = _gelu(z1)
                g2 = _ln_l2_grad(torch.baddbmm(ws["b2"], x2, ws["W2"]), shifted, lnw_flat, eps)
                g1 = (g2 @ ws["W2"].transpose(1, 2)) * gelu_grad(z1)
            else:
                g1 = _ln_l2_grad(z1, shifted, lnw_flat, eps)
            z = torch.baddbmm(z, attn1, g1, alpha=-1)
            sources = {"W1": (K, g1)}  # the weight sums sum_j lr_j keys_j^T g_j come from these
            if mlp:
                x = _gelu(z)
                z = torch.baddbmm(ws["b2"], x, ws["W2"])
                if has_acc:
                    z = z - s_i * torch.baddbmm(acc["b2"], x, acc["W2"])
                z = torch.baddbmm(z, _dual_attention(x, x2, scaled), g2, alpha=-1)
                sources["W2"] = (x2, g2)
            zs.append(z)
            if mask is not None and pos + n == mbs and any(start < e < start + n for e in end_steps):
                inside = (ends > start) & (ends < start + n)
                sel = inside.repeat_interleave(h).view(bh, 1, 1)
                taken = sel if taken is None else taken | sel
                lr_j = lrf[:, start : start + n].unsqueeze(-1)  # without s_b: the state's sums
                for m, (keys, g) in sources.items():
                    lr_g = lr_j * g
                    bias = f"b{m[1:]}"
                    sums = {m: keys.transpose(1, 2) @ lr_g, bias: lr_g.sum(dim=1, keepdim=True)}
                    for key, total in sums.items():
                        total = acc[key] + total if has_acc else total
                        w_key, g_key = f"{key}_states", f"{key}_grad"
                        captured[w_key] = torch.where(sel, ws[key], captured.get(w_key, ws[key]))
                        captured[g_key] = torch.where(sel, total, captured.get(g_key, total))
            # lr_col carries s_b at a boundary: the sums sum_j (s_b) lr_j keys_j^T g_j and the bias's
            boundary, new = pos + n == mbs, {}
            for m, (keys, g) in sources.items():
                lr_g, bias = lr_col * g, f"b{m[1:]}"
                if boundary:  # W^{m+1} = W^m - s_b (running sums), which restart
                    w_m, b_m = ws[m], ws[bias]
                    if has_acc:
                        w_m, b_m = w_m - s_last * acc[m], b_m - s_last * acc[bias]
                    ws[m] = torch.baddbmm(w_m, keys.transpose(1, 2), lr_g, alpha=-1)
                    ws[bias] = b_m - lr_g.sum(dim=1, keepdim=True)
                else:  # running sums (the state's W_grad) of a mini-batch left unfinished
                    new[m], new[bias] = keys.transpose(1, 2) @ lr_g, lr_g.sum(dim=1, keepdim=True)
            if boundary:
                acc, has_acc = {}, False  # no sums until the next token (zeros are made at the end)
            else:
                acc, has_acc = {m: acc[m] + new[m] if has_acc else new[m] for m in names}, True
        if not has_acc:
            acc = {m: torch.zeros_like(ws[m]) for m in names}
        if taken is not None:
            ws = {m: torch.where(taken, captured[f"{m}_states"], ws[m]) for m in names}
            acc = {m: torch.where(taken, captured[f"{m}_grad"], acc[m]) for m in names}
        o = qh + _ln(torch.cat(zs, dim=1).reshape(b, h, t, d), lnw, lnb, eps) if zs else qh.clone()
        if mask is not None:  # back from the frame to the padded steps (zeros at the padding)
            o = restore_padding(o.transpose(1, 2), mask, starts).transpose(1, 2)
    offset = (state["offset"] + t) % mbs if mask is None else ends % mbs
    final = {
        "offset": offset,
        **{f"{m}_states": ws[m].reshape(b, h, *ws[m].shape[1:]) for m in names},
        **{f"{m}_grad": acc[m].reshape(b, h, *acc[m].shape[1:]) for m in names},
    }
    return _finish(o, q, final, output_final_state)


# ------------------------------------------------------------------------------------- public API


def ttt_linear_reference(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    lr: Tensor,
    token_scale: Tensor,
    W1: Tensor,
    b1: Tensor,
    ln_weight: Tensor,
    ln_bias: Tensor,
    *,
    initial_state: dict | None = None,
    output_final_state: bool = False,
    eps: float = 1e-6,
    attention_mask: Tensor | None = None,
) -> tuple[Tensor, dict | None]:
    params = {"W1": W1, "b1": b1}
    args = (q, k, v, lr, token_scale, params, ln_weight, ln_bias, initial_state, output_final_state, eps)
    return _reference(_LINEAR, *args, attention_mask=attention_mask)


def ttt_linear(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    lr: Tensor,
    token_scale: Tensor,
    W1: Tensor,
    b1: Tensor,
    ln_weight: Tensor,
    ln_bias: Tensor,
    *,
    initial_state: dict | None = None,
    output_final_state: bool = False,
    eps: float = 1e-6,
    attention_mask: Tensor | None = None,
) -> tuple[Tensor, dict | None]:
    params = {"W1": W1, "b1": b1}
    args = (q, k, v, lr, token_scale, params, ln_weight, ln_bias, initial_state, output_final_state, eps)
    return _dual(_LINEAR, *args, attention_mask=attention_mask)


def ttt_mlp_reference(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    lr: Tensor,
    token_scale: Tensor,
    W1: Tensor,
    b1: Tensor,
    W2: Tensor,
    b2: Tensor,
    ln_weight: Tensor,
    ln_bias: Tensor,
    *,
    initial_state: dict | None = None,
    output_final_state: bool = False,
    eps: float = 1e-6,
    attention_mask: Tensor | None = None,
) -> tuple[Tensor, dict | None]:
    params = {"W1": W1, "b1": b1, "W2": W2, "b2": b2}
    args = (q, k, v, lr, token_scale, params, ln_weight, ln_bias, initial_state, output_final_state, eps)
    return _reference(_MLP, *args, attention_mask=attention_mask)


def ttt_mlp(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    lr: Tensor,
    token_scale: Tensor,
    W1: Tensor,
    b1: Tensor,
    W2: Tensor,
    b2: Tensor,
    ln_weight: Tensor,
    ln_bias: Tensor,
    *,
    initial_state: dict | None = None,
    output_final_state: bool = False,
    eps: float = 1e-6,
    exact_gelu_grad: bool = False,
    attention_mask: Tensor | None = None,
) -> tuple[Tensor, dict | None]:
    params = {"W1": W1, "b1": b1, "W2": W2, "b2": b2}
    args = (q, k, v, lr, token_scale, params, ln_weight, ln_bias, initial_state, output_final_state, eps)
    return _dual(_MLP, *args, exact_gelu_grad, attention_mask=attention_mask)


ttt_linear_reference.__doc__ = (
    "Per-token primal TTT-Linear (Sun et al. 2024, §2.4): obviously correct, not fast.\n\n"
    "    Each token's inner gradient is taken with autograd (``torch.func.grad``) at the weights of its\n"
    "    mini-batch start; ``W_i = W^m - s_i * sum_{j<=i} lr_j grad_j`` is materialised per token.\n"
    + _ARGS_DOC.format(params=_LIN_PARAMS)
)
ttt_linear.__doc__ = (
    "Mini-batch dual-form TTT-Linear (Sun et al. 2024, §2.5; the reference's training/prefill path).\n\n"
    "    Per mini-batch: ``G = LNbwd(K W + b, V - K)``;\n"
    "    ``Z_i = Q W + b - s_i (sum_{j<=i} lr_j (q_i.k_j) g_j + sum_{j<=i} lr_j g_j)``;\n"
    "    never materialises the per-token weights. Differentiable by autograd.\n"
    + _ARGS_DOC.format(params=_LIN_PARAMS)
)
ttt_mlp_reference.__doc__ = (
    "Per-token primal TTT-MLP (Sun et al. 2024, §2.4; autograd inner gradient, exact tanh-GELU derivative).\n"
    + _ARGS_DOC.format(params=_MLP_PARAMS)
)
ttt_mlp.__doc__ = (
    "Mini-batch dual-form TTT-MLP (Sun et al. 2024, §2.5).\n\n"
    "    The inner gradient uses the reference's analytic tanh-GELU derivative with its truncated\n"
    "    constants (bit-faithful to ttt-lm-pytorch); ``exact_gelu_grad=True`` uses the exact constants\n"
    "    instead (then it equals :func:`ttt_mlp_reference` to rounding).\n"
    + _ARGS_DOC.format(params=_MLP_PARAMS)
)

_packable = supports_cu_seqlens("q", "k", "v", "lr")
ttt_linear_reference = _packable(ttt_linear_reference)
ttt_linear = _packable(ttt_linear)
ttt_mlp_reference = _packable(ttt_mlp_reference)
ttt_mlp = _packable(ttt_mlp)
