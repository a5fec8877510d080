"""The Triton kernels of :mod:`fastweights.ops.srwm_triton` (imported only by it, on first use: Triton
reads ``TRITON_INTERPRET`` when this module is imported). Layout and math: see that module."""

# ruff: noqa: E501

import triton
import triton.language as tl


@triton.jit
def _tile(base, rows, cols, row_mask, col_mask, stride, col0):
    return tl.load(
        base + rows[:, None] * stride + col0 + cols[None, :],
        mask=row_mask[:, None] & col_mask[None, :],
        other=0.0,
    )


@triton.jit
def _put(base, rows, cols, row_mask, col_mask, stride, col0, value):
    tl.store(
        base + rows[:, None] * stride + col0 + cols[None, :],
        value,
        mask=row_mask[:, None] & col_mask[None, :],
    )


@triton.jit
def _load_blocks(base, E: tl.constexpr, O: tl.constexpr, EB: tl.constexpr, OB: tl.constexpr):
    """The four column blocks (y, q, k, beta) of one [E, C] matrix at ``base``, zero-padded."""
    C: tl.constexpr = O + 2 * E + 4
    r = tl.arange(0, EB)
    co = tl.arange(0, OB)
    c4 = tl.arange(0, 4)
    rm = r < E
    y = _tile(base, r, co, rm, co < O, C, 0)
    q = _tile(base, r, r, rm, rm, C, O)
    k = _tile(base, r, r, rm, rm, C, O + E)
    b = _tile(base, r, c4, rm, c4 < 4, C, O + 2 * E)
    return y, q, k, b


@triton.jit
def _store_blocks(base, y, q, k, b, E: tl.constexpr, O: tl.constexpr, EB: tl.constexpr, OB: tl.constexpr):
    C: tl.constexpr = O + 2 * E + 4
    r = tl.arange(0, EB)
    co = tl.arange(0, OB)
    c4 = tl.arange(0, 4)
    rm = r < E
    _put(base, r, co, rm, co < O, C, 0, y)
    _put(base, r, r, rm, rm, C, O, q)
    _put(base, r, r, rm, rm, C, O + E, k)
    _put(base, r, c4, rm, c4 < 4, C, O + 2 * E, b)


@triton.jit
def _softmax(v, mask):
    v = tl.where(mask, v, float("-inf"))
    z = tl.exp(v - tl.max(v, axis=0))
    return z / tl.sum(z, axis=0)


@triton.jit
def _rate(beta, c4, r):
    return tl.sum(tl.where(c4 == r, beta, 0.0), axis=0)


@triton.jit
def forward(x_ptr, w0_ptr, y_ptr, act_ptr, diff_ptr, w_ptr, T, E: tl.constexpr, O: tl.constexpr,
            EB: tl.constexpr, OB: tl.constexpr):  # fmt: skip
    n = tl.program_id(0)
    C: tl.constexpr = O + 2 * E + 4
    A: tl.constexpr = 2 * E + 4
    r = tl.arange(0, EB)
    co = tl.arange(0, OB)
    c4 = tl.arange(0, 4)
    rm = r < E
    om = co < O
    wy, wq, wk, wb = _load_blocks(w0_ptr + n * E * C, E, O, EB, OB)
    for t in range(T):
        row = n * T + t
        xt = tl.load(x_ptr + row * E + r, mask=rm, other=0.0)
        tl.store(y_ptr + row * O + co, tl.sum(xt[:, None] * wy, axis=0), mask=om)
        q = _softmax(tl.sum(xt[:, None] * wq, axis=0), rm)
        k = _softmax(tl.sum(xt[:, None] * wk, axis=0), rm)
        beta = 1.0 / (1.0 + tl.exp(-tl.sum(xt[:, None] * wb, axis=0)))
        tl.store(act_ptr + row * A + r, q, mask=rm)
        tl.store(act_ptr + row * A + E + r, k, mask=rm)
        tl.store(act_ptr + row * A + 2 * E + c4, beta)
        qmk = q - k
        dy = tl.sum(qmk[:, None] * wy, axis=0)
        dq = tl.sum(qmk[:, None] * wq, axis=0)
        dk = tl.sum(qmk[:, None] * wk, axis=0)
        db = tl.sum(qmk[:, None] * wb, axis=0)
        tl.store(diff_ptr + row * C + co, dy, mask=om)
        tl.store(diff_ptr + row * C + O + r, dq, mask=rm)
        tl.store(diff_ptr + row * C + O + E + r, dk, mask=rm)
        tl.store(diff_ptr + row * C + O + 2 * E + c4, db)
        wy += k[:, None] * (dy * _rate(beta, c4, 0))[None, :]
        wq += k[:, None] * (dq * _rate(beta, c4, 1))[None, :]
        wk += k[:, None] * (dk * _rate(beta, c4, 2))[None, :]
        wb += k[:, None] * (db * _rate(beta, c4, 3))[None, :]
    _store_blocks(w_ptr + n * E * C, wy, wq, wk, wb, E, O, EB, OB)


@triton.jit
def backward(x_ptr, act_ptr, diff_ptr, w_ptr, gy_ptr, gw_ptr, gx_ptr, gw0_ptr, T, E: tl.constexpr,
             O: tl.constexpr, EB: tl.constexpr, OB: tl.constexpr):  # fmt: skip
    n = tl.program_id(0)
    C: tl.constexpr = O + 2 * E + 4
    A: tl.constexpr = 2 * E + 4
    r = tl.arange(0, EB)
    co = tl.arange(0, OB)
    c4 = tl.arange(0, 4)
    rm = r < E
    om = co < O
    wy, wq, wk, wb = _load_blocks(w_ptr + n * E * C, E, O, EB, OB)
    gwy, gwq, gwk, gwb = _load_blocks(gw_ptr + n * E * C, E, O, EB, OB)
    for s in range(T):
        t = T - 1 - s
        row = n * T + t
        q = tl.load(act_ptr + row * A + r, mask=rm, other=0.0)
        k = tl.load(act_ptr + row * A + E + r, mask=rm, other=0.0)
        beta = tl.load(act_ptr + row * A + 2 * E + c4)
        dy = tl.load(diff_ptr + row * C + co, mask=om, other=0.0)
        dq = tl.load(diff_ptr + row * C + O + r, mask=rm, other=0.0)
        dk = tl.load(diff_ptr + row * C + O + E + r, mask=rm, other=0.0)
        db = tl.load(diff_ptr + row * C + O + 2 * E + c4)
        xt = tl.load(x_ptr + row * E + r, mask=rm, other=0.0)
        gpy = tl.load(gy_ptr + row * O + co, mask=om, other=0.0)
        # undo step t: W_{t-1} = W_t - k (x) u, with g_k = G u and g_u = k G for G = dL/dW_t
        uy = dy * _rate(beta, c4, 0)
        uq = dq * _rate(beta, c4, 1)
        uk = dk * _rate(beta, c4, 2)
        ub = db * _rate(beta, c4, 3)
        wy -= k[:, None] * uy[None, :]
        wq -= k[:, None] * uq[None, :]
        wk -= k[:, None] * uk[None, :]
        wb -= k[:, None] * ub[None, :]
        gk = (
            tl.sum(gwy * uy[None, :], axis=1)
            + tl.sum(gwq * uq[None, :], axis=1)
            + tl.sum(gwk * uk[None, :], axis=1)
            + tl.sum(gwb * ub[None, :], axis=1)
        )
        guy = tl.sum(k[:, None] * gwy, axis=0)
        guq = tl.sum(k[:, None] * gwq, axis=0)
        guk = tl.sum(k[:, None] * gwk, axis=0)
        gub = tl.sum(k[:, None] * gwb, axis=0)
        gdy = guy * _rate(beta, c4, 0)
        gdq = guq * _rate(beta, c4, 1)
        gdk = guk * _rate(beta, c4, 2)
        gdb = gub * _rate(beta, c4, 3)
        gb_y = tl.sum(guy * dy, axis=0)
        gb_q = tl.sum(guq * dq, axis=0)
        gb_k = tl.sum(guk * dk, axis=0)
        gb_b = tl.sum(gub * db, axis=0)
        gbeta = tl.where(c4 == 0, gb_y, tl.where(c4 == 1, gb_q, tl.where(c4 == 2, gb_k, gb_b)))
        # g_(q-k) = g_d W_{t-1}^T, then the softmax backward of q and k
        gqmk = (
            tl.sum(wy * gdy[None, :], axis=1)
            + tl.sum(wq * gdq[None, :], axis=1)
            + tl.sum(wk * gdk[None, :], axis=1)
            + tl.sum(wb * gdb[None, :], axis=1)
        )
        gkmq = gk - gqmk
        gpq = q * (gqmk - tl.sum(gqmk * q, axis=0))
        gpk = k * (gkmq - tl.sum(gkmq * k, axis=0))
        gpb = gbeta * beta * (1.0 - beta)
        gx = (
            tl.sum(wy * gpy[None, :], axis=1)
            + tl.sum(wq * gpq[None, :], axis=1)
            + tl.sum(wk * gpk[None, :], axis=1)
            + tl.sum(wb * gpb[None, :], axis=1)
        )
        tl.store(gx_ptr + row * E + r, gx, mask=rm)
        qmk = q - k
        gwy += qmk[:, None] * gdy[None, :] + xt[:, None] * gpy[None, :]
        gwq += qmk[:, None] * gdq[None, :] + xt[:, None] * gpq[None, :]
        gwk += qmk[:, None] * gdk[None, :] + xt[:, None] * gpk[None, :]
        gwb += qmk[:, None] * gdb[None, :] + xt[:, None] * gpb[None, :]
    _store_blocks(gw0_ptr + n * E * C, gwy, gwq, gwk, gwb, E, O, EB, OB)
