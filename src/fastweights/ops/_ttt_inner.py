"""Shared pieces of the TTT inner loop (private): input checks, the state dict, the inner model's
LayerNorm/GELU and their analytic gradients, mini-batch bookkeeping and the argument docs.

Math: Sun et al., arXiv 2407.04620, §2.1-§2.5 and §2.7, as implemented in ttt-lm-pytorch ``ttt.py``; see
:mod:`fastweights.ops.ttt` for the public ops.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor
from torch.nn import functional as F

from fastweights.checks import check_finite, describe, is_int
from fastweights.ops._common import compute_dtype

_LINEAR = ("W1", "b1")
_MLP = ("W1", "b1", "W2", "b2")


def _param_shapes(names: tuple[str, ...], h: int, d: int) -> dict[str, tuple[int, ...]]:
    if names == _LINEAR:
        return {"W1": (h, d, d), "b1": (h, 1, d)}
    return {"W1": (h, d, 4 * d), "b1": (h, 1, 4 * d), "W2": (h, 4 * d, d), "b2": (h, 1, d)}


def _check_inputs(
    names: tuple[str, ...],
    q: Tensor,
    k: Tensor,
    v: Tensor,
    lr: Tensor,
    token_scale: Tensor,
    params: dict[str, Tensor],
    ln_weight: Tensor,
    ln_bias: Tensor,
    initial_state: dict | None,
) -> None:
    if not isinstance(q, Tensor) or q.dim() != 4:
        raise ValueError(f"q: expected a 4-D tensor [B, T, H, D], got {describe(q)}")
    if not q.is_floating_point():
        raise ValueError(f"q: expected a floating-point dtype, got {q.dtype}")
    b, t, h, d = q.shape
    for name, x in (("k", k), ("v", v)):
        if not isinstance(x, Tensor) or x.shape != q.shape:
            raise ValueError(
                f"{name}: expected shape [B, T, H, D] = {list(q.shape)} (same as q), got {describe(x)}"
            )
    if not isinstance(lr, Tensor) or tuple(lr.shape) != (b, t, h):
        raise ValueError(f"lr: expected shape [B, T, H] = [{b}, {t}, {h}], got {describe(lr)}")
    if not isinstance(token_scale, Tensor) or token_scale.dim() != 1 or token_scale.shape[0] < 1:
        raise ValueError(f"token_scale: expected a 1-D tensor [mini_batch_size], got {describe(token_scale)}")
    expected = _param_shapes(names, h, d)
    for name, shape in expected.items():
        p = params[name]
        if not isinstance(p, Tensor) or tuple(p.shape) != shape:
            raise ValueError(f"{name}: expected shape {list(shape)}, got {describe(p)}")
    for name, x in (("ln_weight", ln_weight), ("ln_bias", ln_bias)):
        if not isinstance(x, Tensor) or tuple(x.shape) != (h, d):
            raise ValueError(f"{name}: expected shape [H, D] = [{h}, {d}], got {describe(x)}")
    tensors = {
        "k": k,
        "v": v,
        "lr": lr,
        "token_scale": token_scale,
        "ln_weight": ln_weight,
        "ln_bias": ln_bias,
    }
    tensors.update(params)
    for name, x in tensors.items():
        if not x.is_floating_point():
            raise ValueError(f"{name}: expected a floating-point dtype, got {x.dtype}")
    for name, x in (("k", k), ("v", v), ("lr", lr)):
        if x.dtype != q.dtype:
            raise ValueError(f"{name}: expected dtype {q.dtype} (same as q), got {x.dtype}")
    if initial_state is not None:
        if not isinstance(initial_state, dict):
            raise ValueError(
                f"initial_state: expected a dict (see the module docstring), got {describe(initial_state)}"
            )
        check_offset(initial_state.get("offset"), b, token_scale.shape[0], q.device)
        for name, shape in expected.items():
            for key in (f"{name}_states", f"{name}_grad"):
                x = initial_state.get(key)
                if not isinstance(x, Tensor) or tuple(x.shape) != (b, *shape):
                    raise ValueError(
                        f"initial_state: expected '{key}' of shape {[b, *shape]}, got {describe(x)}"
                    )
                if not x.is_floating_point():
                    raise ValueError(f"initial_state: expected '{key}' to be floating point, got {x.dtype}")
                tensors[f"initial_state[{key!r}]"] = x
    tensors["q"] = q
    for name, x in tensors.items():
        check_finite(name, x)


def check_offset(offset: object, batch: int, mbs: int, device: torch.device) -> None:
    """Validate a state's ``"offset"``: an int in ``[0, mbs)`` (shared by every row), or an integer
    tensor ``[batch]`` of such values (one per row: the state of a padded batch, whose rows consumed
    different numbers of tokens) on ``device``.

    Raises:
        ValueError: naming ``initial_state``.
    """
    if isinstance(offset, Tensor):
        ok = offset.dtype in (torch.int64, torch.int32) and tuple(offset.shape) == (batch,)
        ok = ok and offset.device == torch.device(device) and bool(((offset >= 0) & (offset < mbs)).all())
        if not ok:
            raise ValueError(
                f"initial_state: expected an 'offset' tensor of shape [{batch}] with ints in [0, {mbs}) on "
                f"{device}, got {describe(offset)} on {offset.device}"
            )
    elif not is_int(offset) or not 0 <= offset < mbs:
        raise ValueError(
            f"initial_state: expected an int 'offset' in [0, {mbs}) (or a tensor [{batch}] of them), "
            f"got {offset!r}"
        )


def row_offsets(offset: int | Tensor, batch: int, device: torch.device) -> Tensor:
    """A state's ``"offset"`` (validated by :func:`check_offset`) as an int64 tensor ``[batch]``."""
    if isinstance(offset, Tensor):
        return offset.to(torch.int64)
    return torch.full((batch,), offset, dtype=torch.int64, device=device)


def ttt_initial_state(params: dict[str, Tensor], batch_size: int, dtype: torch.dtype | None = None) -> dict:
    """The state that starts from the slow weights: ``params`` (``"W1"``, ``"b1"`` [, ``"W2"``, ``"b2"``],
    each ``[H, ...]``) tiled over ``batch_size``, zero gradient sums, ``offset`` 0."""
    state: dict = {"offset": 0}
    for name, p in params.items():
        p = p if dtype is None else p.to(dtype)
        state[f"{name}_states"] = p.unsqueeze(0).expand(batch_size, *p.shape)
        state[f"{name}_grad"] = torch.zeros(batch_size, *p.shape, dtype=p.dtype, device=p.device)
    return state


def ttt_current_weights(state: dict, token_scale: Tensor) -> dict[str, Tensor]:
    """The inner weights the last processed token was read with: ``W_states - s_offset * W_grad``
    (``W_states`` itself at a mini-batch boundary). Keys ``"W1"``, ``"b1"`` [, ``"W2"``, ``"b2"``],
    each ``[B, H, ...]``; this is the reference's ``final_ttt_state`` of a no-cache forward. A per-row
    ``offset`` tensor (the state of a padded batch) gives each row its own scale."""
    offset = state["offset"]
    names = [k[: -len("_states")] for k in state if k.endswith("_states")]
    if isinstance(offset, Tensor):  # one offset per row (a padded batch's state): 0 reads W_states
        s = torch.where(offset > 0, token_scale[(offset - 1).clamp_min(0)], 0.0)
        out = {}
        for n in names:
            grad = state[f"{n}_grad"]
            s_n = s.to(grad.dtype).view(-1, *([1] * (grad.dim() - 1)))
            out[n] = state[f"{n}_states"] - s_n * grad
        return out
    if offset == 0:
        return {n: state[f"{n}_states"] for n in names}
    s = token_scale[offset - 1]
    return {n: state[f"{n}_states"] - s.to(state[f"{n}_grad"].dtype) * state[f"{n}_grad"] for n in names}


# ----------------------------------------------------------------------------------------- helpers


def _ln(z: Tensor, weight: Tensor, bias: Tensor, eps: float) -> Tensor:
    """Per-head LayerNorm over the last dim; ``weight, bias [H, 1, D]`` broadcast over ``[B, H, n, D]``."""
    mu = z.mean(dim=-1, keepdim=True)
    var = z.var(dim=-1, keepdim=True, unbiased=False)
    return (z - mu) / torch.sqrt(var + eps) * weight + bias


class _LNL2Grad(torch.autograd.Function):
    """``d/dz 1/2 ||LN(z) - target||^2`` with ``shifted = bias - target`` (reference ``ln_fused_l2_bwd``),
    with a hand-derived backward that saves three tensors per call (``x_hat``, ``a = w x_hat + shifted``
    and ``1/std``) instead of autograd's ~ten: it runs once per mini-batch, so this is most of the dual
    form's saved memory.

    With ``x_hat = (z - mean) r``, ``r = (var + eps)^-1/2``, ``gamma = a w`` and
    ``M(v) = r/D (D v - sum(v) - x_hat sum(v x_hat))`` (symmetric, the LayerNorm backward map), the
    output is ``g = M(gamma)``. For an upstream ``G``: ``A = M(G)``; ``dL/dshifted = w A``;
    ``dL/dw = (a + w x_hat) A``; ``dL/dx_hat = w^2 A - r/D (G sum(gamma x_hat) + gamma sum(G x_hat))``;
    ``dL/dr = sum(G h) / D`` with ``h = g D / r``; then back through ``x_hat = (z - mean) r`` and ``r``
    (tested against autograd of the plain formula and by gradcheck, tests/ops/test_ttt_inner.py).
    """

    @staticmethod
    def forward(ctx: Any, z: Tensor, shifted: Tensor, weight: Tensor, eps: float) -> Tensor:
        var, mu = torch.var_mean(z, dim=-1, keepdim=True, unbiased=False)
        r = torch.rsqrt(var + eps)
        x_hat = (z - mu) * r
        a = torch.addcmul(shifted, weight, x_hat)
        ctx.save_for_backward(x_hat, a, r, weight)
        return _ln_backward_map(a * weight, x_hat, r)

    @staticmethod
    def backward(ctx: Any, g: Tensor) -> tuple[Tensor, Tensor, Tensor, None]:
        x_hat, a, r, w = ctx.saved_tensors
        d = x_hat.shape[-1]
        gamma = a * w
        big_a = _ln_backward_map(g, x_hat, r)
        g_x_hat = (w * w) * big_a - (r / d) * (
            g * (gamma * x_hat).sum(-1, keepdim=True) + gamma * (g * x_hat).sum(-1, keepdim=True)
        )
        g_r = (g * _ln_backward_map(gamma, x_hat, r)).sum(-1, keepdim=True) / r
        g_u = r * g_x_hat - (r * r / d) * x_hat * (g_r + (g_x_hat * x_hat).sum(-1, keepdim=True) / r)
        g_z = g_u - g_u.mean(dim=-1, keepdim=True)
        g_w = ((a + w * x_hat) * big_a).sum_to_size(w.shape)
        return g_z, w * big_a, g_w, None


def _ln_backward_map(v: Tensor, x_hat: Tensor, r: Tensor) -> Tensor:
    """``r/D (D v - sum(v) - x_hat sum(v x_hat))`` over the last dim (the LayerNorm backward)."""
    d = v.shape[-1]
    inner = torch.addcmul(
        d * v - v.sum(dim=-1, keepdim=True), x_hat, (v * x_hat).sum(-1, keepdim=True), value=-1
    )
    return inner * (r / d)


def _ln_l2_grad(z: Tensor, shifted_target: Tensor, weight: Tensor, eps: float) -> Tensor:
    """``d/dz 1/2 ||LN(z) - target||^2`` by the analytic LN backward, ``shifted_target = bias - target``
    (precomputed for the whole sequence by the callers); see :class:`_LNL2Grad`."""
    return _LNL2Grad.apply(z, shifted_target, weight, eps)


class _GeluTanhGrad(torch.autograd.Function):
    """``f(x) = d/dx GELU_tanh(x) = 0.5 x (1 - t^2)(c + k x^2) + 0.5 (1 + t)``, with
    ``t = tanh(c x (1 + a x^2))`` and given constants ``(c, a, k)``. Its backward is its own derivative,
    saving ``x`` and ``t`` instead of autograd's dozen intermediates per mini-batch:
    ``f'(x) = (1 - t^2) [0.5 p + k x^2 - x t p u' + 0.5 u']`` with ``p = c + k x^2`` and
    ``u' = c (1 + 3 a x^2)`` (gradcheck: tests/ops/test_ttt_inner.py)."""

    @staticmethod
    def forward(ctx: Any, x: Tensor, c: float, a: float, k: float) -> Tensor:
        t = torch.tanh(c * x * (1 + a * x * x))
        ctx.save_for_backward(x, t)
        ctx.constants = (c, a, k)
        x2 = x * x
        return 0.5 * x * ((1 - t * t) * (c + k * x2)) + 0.5 * (1 + t)

    @staticmethod
    def backward(ctx: Any, g: Tensor) -> tuple[Tensor, None, None, None]:
        x, t = ctx.saved_tensors
        c, a, k = ctx.constants
        x2 = x * x
        sech2 = 1 - t * t
        p = c + k * x2
        du = c * (1 + 3 * a * x2)
        return g * sech2 * (0.5 * p + k * x2 - x * t * p * du + 0.5 * du), None, None, None


def _gelu_tanh_grad(x: Tensor) -> Tensor:
    """Derivative of tanh-GELU with the reference's truncated constants (ttt-lm-pytorch ``gelu_bwd``)."""
    return _GeluTanhGrad.apply(x, 0.79788456, 0.044715, 0.1070322243)


def _gelu_tanh_grad_exact(x: Tensor) -> Tensor:
    """Derivative of tanh-GELU with exact constants ``sqrt(2/pi)`` and ``3 * 0.044715 * sqrt(2/pi)``."""
    c = math.sqrt(2.0 / math.pi)
    return _GeluTanhGrad.apply(x, c, 0.044715, 3 * 0.044715 * c)


def _gelu(x: Tensor) -> Tensor:
    return F.gelu(x, approximate="tanh")


def _prepare(
    names: tuple[str, ...],
    q: Tensor,
    k: Tensor,
    v: Tensor,
    lr: Tensor,
    token_scale: Tensor,
    params: dict[str, Tensor],
    ln_weight: Tensor,
    ln_bias: Tensor,
    initial_state: dict | None,
):
    _check_inputs(names, q, k, v, lr, token_scale, params, ln_weight, ln_bias, initial_state)
    dtype = compute_dtype(q.dtype)
    qh, kh, vh = (x.to(dtype).transpose(1, 2) for x in (q, k, v))  # [B, H, T, D]
    lrh = lr.to(dtype).transpose(1, 2)  # [B, H, T]
    if initial_state is None:
        state = ttt_initial_state(params, q.shape[0], dtype)
    else:
        state = {
            key: (val.to(dtype) if isinstance(val, Tensor) and key != "offset" else val)
            for key, val in initial_state.items()
        }
    lnw, lnb = ln_weight.to(dtype).unsqueeze(1), ln_bias.to(dtype).unsqueeze(1)  # [H, 1, D]
    return dtype, qh, kh, vh, lrh, token_scale.to(dtype), state, lnw, lnb


def _finish(o: Tensor, q: Tensor, state: dict, output_final_state: bool) -> tuple[Tensor, dict | None]:
    return o.transpose(1, 2).to(q.dtype), (state if output_final_state else None)


def _segments(offset: int, t: int, mbs: int):
    """Split ``t`` tokens starting at in-mini-batch offset ``offset`` into pieces that stay inside one
    mini-batch: yields ``(start, length, position_of_first_token)``."""
    start, pos = 0, offset
    while start < t:
        n = min(t - start, mbs - pos)
        yield start, n, pos
        start, pos = start + n, (pos + n) % mbs


_ARGS_DOC = """
    Args:
        q, k, v: ``[B, T, H, D]`` queries, keys, values of the inner loss (after projections and RoPE);
            float16/bfloat16/float32/float64, one dtype.
        lr: ``[B, T, H]`` source-token learning rates ``lr_j = base_lr * sigmoid(x_j w_h + c_h) / D``
            (Sun et al. 2024, §2.7; the ``1/D`` as in ttt-lm-pytorch ``get_eta``), same dtype as ``q``.
        token_scale: ``[b]`` position scales ``s_i = max(0, 1/i + delta_i)``; its length is the
            mini-batch size ``b``.
        {params}
        ln_weight, ln_bias: ``[H, D]`` the per-head inner LayerNorm (used in the loss and the output).
        initial_state: ``None`` (start from the slow weights, offset 0) or a state dict as returned with
            ``output_final_state=True`` (see the module docstring); its weights win over the slow ones.
        output_final_state: also return the final state dict.
        eps: LayerNorm epsilon (1e-6 in the reference).
        attention_mask: optional ``[B, T]`` padding mask: bool, or integer / floating 0/1 (1 = real
            token, 0 = padding), each row's real tokens contiguous. Every row is its real tokens alone,
            continued from its own state: its mini-batches are counted from its own ``offset`` (a
            padded token neither adds to the sums nor moves the position), so the outputs at its real
            tokens and its final state are those of the unpadded row, a partial last mini-batch
            included; the outputs at padding are zeros and no gradient reaches a padded input. With a
            mask, or an ``initial_state`` whose ``"offset"`` is a tensor ``[B]`` (one per row), the
            final state's ``"offset"`` is an int64 tensor ``[B]``. ``None`` (and an int ``offset``) is
            the unmasked computation, unchanged.

    Returns:
        ``(o, state)``: ``o [B, T, H, D]`` in the dtype of ``q`` (``q + LN_h(f_res(q; W_i))`` per token);
        ``state`` or ``None``.

    Raises:
        ValueError: naming the argument, on wrong shapes/dtypes, a malformed state or NaN/Inf inputs, or
            a bad ``attention_mask`` (:func:`fastweights.ops.masking.check_attention_mask`).
"""

_LIN_PARAMS = "W1, b1: ``[H, D, D]``, ``[H, 1, D]`` slow initial inner weights (tiled over the batch)."
_MLP_PARAMS = (
    "W1, b1, W2, b2: ``[H, D, 4D]``, ``[H, 1, 4D]``, ``[H, 4D, D]``, ``[H, 1, D]`` slow initial inner\n"
    "            weights (tiled over the batch)."
)
