"""Pen-stroke geometry and rasterisation for :mod:`.handwriting`, vectorised over a batch of writers.

- :func:`catmull_rom`: centripetal Catmull-Rom splines (Yuksel, Schaefer & Keyser 2011, "Parameterization
  and applications of Catmull-Rom curves") through control points: smooth, passing through every
  control point, without the cusps and self-loops of the uniform parameterisation.
- :func:`elastic_fields` / :func:`sample_field`: Simard et al. (2003, ICDAR, "Best practices for
  convolutional neural networks applied to visual document analysis") elastic distortion, a random
  displacement field (uniform noise in [-1, 1] smoothed by a Gaussian of width ``sigma``, times
  ``alpha``), here evaluated at the pen trajectory's points instead of warping the image: the trajectory
  bends the same way, the stroke keeps its width.
- :func:`render_segments`: anti-aliased rasterisation of thick line segments whose width varies along
  each segment (pen pressure), by the exact distance of every pixel centre to every segment: coverage
  ``clip(r - d + 1/2, 0, 1)`` for half-width ``r`` and distance ``d`` in pixels (a one-pixel
  anti-aliasing ramp, no supersampling needed), strokes combined by the pixel-wise maximum.

Coordinates are pixels with ``x`` to the right and ``y`` down; pixel ``(i, j)`` (row, column) has its
centre at ``(x, y) = (j + 1/2, i + 1/2)``. Only numpy and scipy are used.
"""

from __future__ import annotations

import functools

import numpy as np
from scipy.ndimage import gaussian_filter1d

__all__ = ["catmull_rom", "elastic_fields", "sample_field", "render_segments"]

_EPS = 1e-6
#: a batch of pixel-segment pairs larger than this is rendered in chunks of writers (bounds memory)
_MAX_PAIRS = 1 << 21
#: window sides of the fast renderer's segment groups (a segment goes to the smallest that holds it)
_WINDOWS = np.array([6, 8, 11, 16, 23, 32, 45, 64, 91, 128, 181, 256, 362, 512, 724, 1024, 1 << 62])


def catmull_rom(points: np.ndarray, samples_per_span: int) -> np.ndarray:
    """Centripetal (alpha = 1/2) Catmull-Rom spline through ``points``, batched.

    Args:
        points: float ``[B, K, 2]`` control points (``K >= 2``), any unit.
        samples_per_span: points drawn per span between two control points (``>= 1``), at equal steps
            of the spline parameter.

    Returns:
        float64 ``[B, (K - 1) * samples_per_span + 1, 2]``: the curve from the first control point to
        the last one, passing through all of them. The end tangents come from mirrored phantom points
        (``2 P_0 - P_1`` and ``2 P_{K-1} - P_{K-2}``). Coincident consecutive control points give a
        corner, not a division by zero.

    Raises:
        ValueError: for a shape other than ``[B, K >= 2, 2]`` or ``samples_per_span < 1``.
    """
    p = np.asarray(points, dtype=np.float64)
    if p.ndim != 3 or p.shape[1] < 2 or p.shape[2] != 2:
        raise ValueError(f"points: expected shape [B, K >= 2, 2], given {tuple(p.shape)}")
    if samples_per_span < 1:
        raise ValueError(f"samples_per_span: expected an int >= 1, given {samples_per_span!r}")
    q = np.concatenate([2 * p[:, :1] - p[:, 1:2], p, 2 * p[:, -1:] - p[:, -2:-1]], axis=1)
    p0, p1, p2, p3 = (q[:, i : i + p.shape[1] - 1, None, :] for i in range(4))  # [B, S, 1, 2]

    def knot(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return np.sqrt(np.linalg.norm(b - a, axis=-1, keepdims=True)) + _EPS  # [B, S, 1, 1]

    t0 = np.zeros_like(p0[..., :1])
    t1 = t0 + knot(p0, p1)
    t2 = t1 + knot(p1, p2)
    t3 = t2 + knot(p2, p3)
    u = (np.arange(samples_per_span, dtype=np.float64) / samples_per_span)[None, None, :, None]
    t = t1 + u * (t2 - t1)  # [B, S, n, 1]
    a1 = ((t1 - t) * p0 + (t - t0) * p1) / (t1 - t0)
    a2 = ((t2 - t) * p1 + (t - t1) * p2) / (t2 - t1)
    a3 = ((t3 - t) * p2 + (t - t2) * p3) / (t3 - t2)
    b1 = ((t2 - t) * a1 + (t - t0) * a2) / (t2 - t0)
    b2 = ((t3 - t) * a2 + (t - t1) * a3) / (t3 - t1)
    c = ((t2 - t) * b1 + (t - t1) * b2) / (t2 - t1)  # [B, S, n, 2]
    curve = c.reshape(p.shape[0], -1, 2)
    return np.concatenate([curve, p[:, -1:]], axis=1)


@functools.cache
def _smoothing_matrix(size: int, sigma: float) -> np.ndarray:
    """float64 ``[size, size]`` ``G``: ``G @ x`` = ``gaussian_filter1d(x, sigma, axis=0, mode="reflect")``."""
    return gaussian_filter1d(np.eye(size), sigma, axis=0, mode="reflect")


def elastic_fields(noise: np.ndarray, alpha: float, sigma: float) -> np.ndarray:
    """Simard et al. (2003) displacement fields from uniform noise.

    Args:
        noise: float ``[B, 2, G, G]`` uniform noise in ``[-1, 1]`` (x and y components on a G x G pixel
            grid).
        alpha: scale of the smoothed noise, in pixels.
        sigma: standard deviation of the Gaussian smoothing, in pixels of the grid.

    Returns:
        float64 ``[B, 2, G, G]``: ``alpha * gaussian_filter(noise, sigma)`` per field (reflecting
        borders; computed as two matrix products with the 1-d smoothing matrix). At G = 28, Simard et
        al.'s ``alpha = 34, sigma = 4`` give displacements of 1.7 px root-mean-square.
    """
    x = np.asarray(noise, dtype=np.float64)
    g = _smoothing_matrix(x.shape[-1], float(sigma))
    return alpha * (g @ x @ g.T)


def sample_field(fields: np.ndarray, xy: np.ndarray) -> np.ndarray:
    """Bilinear sample of displacement fields at points.

    Args:
        fields: float ``[B, 2, G, G]`` (x and y displacement, pixel ``(i, j)`` centred at ``(j + 1/2,
            i + 1/2)``).
        xy: float ``[B, N, 2]`` points in pixels; outside the grid the border value is used.

    Returns:
        float64 ``[B, N, 2]`` displacements (dx, dy) at the points.
    """
    b, _, g, _ = fields.shape
    gx = np.clip(xy[..., 0] - 0.5, 0.0, g - 1.0)
    gy = np.clip(xy[..., 1] - 0.5, 0.0, g - 1.0)
    x0 = np.minimum(np.floor(gx).astype(np.int64), g - 2) if g > 1 else np.zeros_like(gx, dtype=np.int64)
    y0 = np.minimum(np.floor(gy).astype(np.int64), g - 2) if g > 1 else np.zeros_like(gy, dtype=np.int64)
    fx, fy = gx - x0, gy - y0
    x1, y1 = np.minimum(x0 + 1, g - 1), np.minimum(y0 + 1, g - 1)
    bi = np.arange(b)[:, None]
    out = np.empty((*xy.shape[:2], 2), dtype=np.float64)
    for c in range(2):
        f = fields[:, c]
        top = f[bi, y0, x0] * (1 - fx) + f[bi, y0, x1] * fx
        bottom = f[bi, y1, x0] * (1 - fx) + f[bi, y1, x1] * fx
        out[..., c] = top * (1 - fy) + bottom * fy
    return out


def _coverage(
    px: np.ndarray,
    py: np.ndarray,
    start: np.ndarray,
    end: np.ndarray,
    radius: np.ndarray,
    ink: np.ndarray,
) -> np.ndarray:
    """``ink * clip(r - d + 1/2, 0, 1)`` of pixel centres ``(px, py)`` ``[b, N, P]`` (or broadcastable)
    for segments ``[b, N, 2]``: float32 ``[b, N, P]``."""
    ax, ay = (start[:, :, k, None].astype(np.float32) for k in range(2))
    dx = end[:, :, 0, None].astype(np.float32) - ax
    dy = end[:, :, 1, None].astype(np.float32) - ay
    inv = 1.0 / np.maximum(dx * dx + dy * dy, np.float32(_EPS))
    r0 = radius[:, :, 0, None].astype(np.float32)
    dr = radius[:, :, 1, None].astype(np.float32) - r0
    qx, qy = px - ax, py - ay
    t = np.clip((qx * dx + qy * dy) * inv, 0.0, 1.0)
    qx -= t * dx
    qy -= t * dy
    cover = r0 + t * dr + np.float32(0.5) - np.sqrt(qx * qx + qy * qy)
    np.clip(cover, 0.0, 1.0, out=cover)
    cover *= ink[:, :, None].astype(np.float32)
    return cover


def render_segments_reference(
    start: np.ndarray, end: np.ndarray, radius: np.ndarray, ink: np.ndarray, size: int
) -> np.ndarray:
    """:func:`render_segments` by brute force: every segment against every pixel (the oracle of the
    windowed fast path; same arguments and result)."""
    b, n = start.shape[:2]
    centres = np.arange(size, dtype=np.float32) + 0.5
    px = np.tile(centres, size)[None, None, :]  # [1, 1, P], row-major pixels
    py = np.repeat(centres, size)[None, None, :]
    out = np.zeros((b, size * size), dtype=np.float32)
    chunk = max(1, _MAX_PAIRS // max(1, n * size * size))
    for lo in range(0, b, chunk):
        sl = slice(lo, lo + chunk)
        out[sl] = _coverage(px, py, start[sl], end[sl], radius[sl], ink[sl]).max(axis=1)
    return out.reshape(b, size, size)


def render_segments(
    start: np.ndarray, end: np.ndarray, radius: np.ndarray, ink: np.ndarray, size: int
) -> np.ndarray:
    """Rasterise batches of thick, tapered line segments with anti-aliasing.

    Args:
        start, end: float ``[B, N, 2]`` segment end points in pixels.
        radius: float ``[B, N, 2]`` half-widths in pixels at the start and the end of each segment (linear
            in between; ``<= -1/2`` draws nothing, which pads batches of unequal segment counts).
        ink: float ``[B, N]`` ink level in ``[0, 1]`` of each segment.
        size: image side S in pixels.

    Returns:
        float32 ``[B, S, S]`` in ``[0, 1]``: per pixel the maximum over segments of ``ink * clip(r - d +
        1/2, 0, 1)`` with ``d`` the distance of the pixel centre to the segment and ``r`` the half-width
        at its closest point.
    """
    b, n = start.shape[:2]
    if n == 0 or b == 0:
        return np.zeros((b, size, size), dtype=np.float32)
    # A segment reaches only the pixels of its bounding box grown by its half-width + 1/2: evaluate each on
    # a square window of that size (segments grouped by window side, a few groups per batch), about 20x
    # fewer pixel-segment pairs than the reference. Windows are clamped into a canvas padded by the largest
    # side, so no bounds checks are needed: a clamped window still holds every in-image pixel its segment
    # reaches, and the padding is cut off at the end.
    a, e = start.reshape(-1, 2), end.reshape(-1, 2)
    r, k = radius.reshape(-1, 2), ink.reshape(-1)
    reach = np.maximum(r.max(1), 0.0) + 1.0  # [M] half-width + 1/2 + 1/2 (rounding)
    low = np.floor(np.minimum(a, e) - reach[:, None]).astype(np.int64)  # [M, 2]
    side = np.ceil(np.abs(e - a).max(1) + 2 * reach).astype(np.int64) + 2  # [M] window sides
    groups = np.unique(np.minimum(_WINDOWS[np.searchsorted(_WINDOWS, side)], side.max()))
    pad = int(groups[-1])
    big = size + 2 * pad
    canvas = np.zeros(b * big * big, dtype=np.float32)
    batch = np.repeat(np.arange(b, dtype=np.int64), n)
    assigned = np.zeros(len(side), dtype=bool)
    for w in groups:
        sel = np.flatnonzero((side <= w) & ~assigned)
        assigned[sel] = True
        if len(sel) == 0:
            continue
        off = np.arange(w, dtype=np.int64)
        lo = np.clip(low[sel], -pad, size + pad - w)  # [m, 2]
        gx = lo[:, 0, None] + np.tile(off, w)  # [m, w * w] pixel columns
        gy = lo[:, 1, None] + np.repeat(off, w)
        cover = _coverage(
            gx[None].astype(np.float32) + 0.5,
            gy[None].astype(np.float32) + 0.5,
            a[None, sel],
            e[None, sel],
            r[None, sel],
            k[None, sel],
        )[0]
        flat = (batch[sel, None] * big + gy + pad) * big + gx + pad
        np.maximum.at(canvas, flat.ravel(), cover.ravel())
    return canvas.reshape(b, big, big)[:, pad : pad + size, pad : pad + size].copy()
