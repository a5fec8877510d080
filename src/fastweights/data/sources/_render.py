"""Glyph rendering for :mod:`.glyphs`: clean renders, random "drawers", a DCT perceptual hash and a
low-resolution shape vector (for normalised cross-correlation).

Everything here runs in worker processes; results depend only on the arguments (per-class random
generators are seeded from ``(seed, code point)``), so the output is the same for any worker count.
"""

from __future__ import annotations

import math

import numpy as np
from PIL import Image, ImageDraw, ImageFilter, ImageFont

BASE_RES = 64  # geometry below is given at 64 px and scaled with the render resolution
FIT = 44  # the glyph's ink bounding box is fitted into FIT x FIT (aspect ratio kept)
MIN_INK = 6  # a render with fewer pixels >= 128 (at 64 px) counts as empty
# stroke-width change: (probability, filter size, dilate?) ; remaining probability = unchanged
STROKES = ((0.20, 3, False), (0.35, 3, True), (0.15, 5, True))
ROTATION_DEG = 10.0
SCALE = (0.8, 1.15)
ASPECT = 0.10
SHEAR = 0.2
SHIFT = 3.0
SHAPE_RES = 16  # shape vectors: the clean render box-averaged to 16 x 16 (4 x 4 px blocks at 64 px)

_FONTS: dict[tuple[str, int], ImageFont.FreeTypeFont] = {}


def _font(path: str, size: int) -> ImageFont.FreeTypeFont:
    key = (path, size)
    if key not in _FONTS:
        _FONTS[key] = ImageFont.truetype(path, size, layout_engine=ImageFont.Layout.BASIC)
    return _FONTS[key]


def clean_render(path: str, cp: int, res: int = BASE_RES) -> Image.Image | None:
    """The glyph drawn white on black, ink box fitted into ``FIT/64·res`` px, centred in ``res x res``.

    Returns None when the font draws no (or almost no) ink for the code point.
    """
    font = _font(path, res)
    ch = chr(cp)
    left, top, right, bottom = font.getbbox(ch)
    if right <= left or bottom <= top:
        return None
    pad = 2
    im = Image.new("L", (right - left + 2 * pad, bottom - top + 2 * pad), 0)
    ImageDraw.Draw(im).text((pad - left, pad - top), ch, font=font, fill=255)
    box = im.getbbox()
    if box is None:
        return None
    im = im.crop(box)
    if np.count_nonzero(np.asarray(im) >= 128) < MIN_INK * (res / BASE_RES) ** 2:
        return None
    fit = FIT * res / BASE_RES
    scale = fit / max(im.size)
    new = (max(1, round(im.size[0] * scale)), max(1, round(im.size[1] * scale)))
    im = im.resize(new, Image.Resampling.LANCZOS)
    canvas = Image.new("L", (res, res), 0)
    canvas.paste(im, ((res - new[0]) // 2, (res - new[1]) // 2))
    return canvas


def phash(img: Image.Image) -> np.uint64:
    """64-bit DCT perceptual hash: 32x32 box resize, 2-D DCT-II, top-left 8x8 > median of the AC terms."""
    from scipy.fft import dctn

    small = np.asarray(img.resize((32, 32), Image.Resampling.BOX), dtype=np.float64)
    coeffs = dctn(small, type=2, norm="ortho")[:8, :8].ravel()
    bits = coeffs > np.median(coeffs[1:])
    return np.uint64(int(np.packbits(bits).view(">u8")[0]))


def shape_vector(img: Image.Image) -> np.ndarray:
    """Zero-mean, unit-norm float32 ``[SHAPE_RES**2]`` vector of the render box-averaged to 16 x 16.

    The dot product of two such vectors is their normalised cross-correlation (Pearson correlation of
    the pixels), in [-1, 1]; at this resolution stroke-width and small style differences mostly
    vanish, so sparse shapes (bars, rings, crosses) that the DCT hash separates poorly compare well.
    An image without contrast gives the zero vector (correlation 0 with everything).
    """
    x = np.asarray(img.resize((SHAPE_RES, SHAPE_RES), Image.Resampling.BOX), dtype=np.float64).ravel()
    x = x - x.mean()
    norm = np.linalg.norm(x)
    return (x / norm if norm > 0 else x).astype(np.float32)


def canonical_job(items: list[tuple[str, int]], res: int) -> tuple[np.ndarray, np.ndarray]:
    """Hashes and shape vectors of the clean renders of ``(font path, code point)`` items.

    Returns int64 ``[n]`` holding the uint64 hash bits (view back with ``.view(np.uint64)``; ``-1``
    marks an empty render) and float32 ``[n, SHAPE_RES**2]`` :func:`shape_vector` rows (zero for an
    empty render).
    """
    hashes = np.full(len(items), -1, dtype=np.int64)
    shapes = np.zeros((len(items), SHAPE_RES * SHAPE_RES), dtype=np.float32)
    for i, (path, cp) in enumerate(items):
        img = clean_render(path, cp, res)
        if img is not None:
            hashes[i] = np.int64(phash(img).view(np.int64))
            shapes[i] = shape_vector(img)
    return hashes, shapes


def _affine(img: Image.Image, rng: np.random.Generator, res: int) -> Image.Image:
    theta = math.radians(rng.uniform(-ROTATION_DEG, ROTATION_DEG))
    s = rng.uniform(*SCALE)
    a = rng.uniform(-ASPECT, ASPECT)
    shear = rng.uniform(-SHEAR, SHEAR)
    shift = rng.uniform(-SHIFT, SHIFT, size=2) * res / BASE_RES
    rot = np.array([[math.cos(theta), -math.sin(theta)], [math.sin(theta), math.cos(theta)]])
    fwd = rot @ np.array([[1.0, shear], [0.0, 1.0]]) @ np.diag([s * (1 + a), s * (1 - a)])
    inv = np.linalg.inv(fwd)
    c = np.array([res / 2, res / 2])
    off = c - inv @ (c + shift)  # output p' -> input p = inv (p' - c - shift) + c
    data = (inv[0, 0], inv[0, 1], off[0], inv[1, 0], inv[1, 1], off[1])
    return img.transform(
        (res, res), Image.Transform.AFFINE, data, resample=Image.Resampling.BILINEAR, fillcolor=0
    )


def _stroke(img: Image.Image, rng: np.random.Generator, res: int) -> Image.Image:
    u = rng.random()
    for p, size, dilate in STROKES:
        if u < p:
            size = max(3, int(round(size * res / BASE_RES)) | 1)
            out = img.filter(ImageFilter.MaxFilter(size) if dilate else ImageFilter.MinFilter(size))
            return out if out.getextrema()[1] >= 128 else img  # never erode a glyph away
        u -= p
    return img


def distort(img: Image.Image, rng: np.random.Generator, res: int) -> Image.Image:
    """One "drawer": random stroke-width change, then a random affine map (see module constants)."""
    return _affine(_stroke(img, rng, res), rng, res)


def examples_job(
    classes: list[tuple[int, list[str]]], *, seed: int, m: int, res: int, size: int
) -> np.ndarray:
    """``m`` distorted renders of each ``(code point, font paths)`` class: uint8 ``[n, m, size, size]``.

    Fonts that draw nothing for the code point are skipped; the examples cycle through the usable
    fonts in a random order, so each font draws ``m / #fonts`` examples (±1).
    """
    out = np.zeros((len(classes), m, size, size), dtype=np.uint8)
    for i, (cp, paths) in enumerate(classes):
        rng = np.random.default_rng([seed, cp, 7])
        renders = [r for r in (clean_render(p, cp, res) for p in paths) if r is not None]
        if not renders:
            raise RuntimeError(f"no font draws U+{cp:04X} although its canonical render had ink")
        choice = rng.permutation(np.resize(np.arange(len(renders)), m))
        for j in range(m):
            img = distort(renders[choice[j]], rng, res)
            if size != res:
                resample = Image.Resampling.BOX if size < res else Image.Resampling.BILINEAR
                img = img.resize((size, size), resample)
            out[i, j] = np.asarray(img, dtype=np.uint8)
    return out
