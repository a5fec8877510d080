"""Handwriting: a procedural, offline few-shot set of pen-stroke characters, each example a new writer.

An Omniglot-like domain (Lake et al. 2015, Science, "Human-level concept learning through probabilistic
program induction": characters are strokes, drawn by 20 people each) built from nothing but random
numbers, so it has as many classes as asked for and needs no download:

- **Alphabets** (:func:`alphabet_style`): groups of ``classes_per_alphabet`` characters that share a
  drawing style, as Omniglot's characters share their alphabet's: a square lattice of 5-8 points per side
  on which control points lie, the longest move between two control points (2-3 cells), the alphabet's
  weights over the number of strokes and of control points, how often a stroke starts on an earlier
  stroke and a library of 6 stroke primitives that its characters reuse (Lake et al.'s type-level model
  reuses primitives and relates strokes to earlier ones the same way, far more richly).
- **Classes** (:func:`character`): ``min_strokes``-``max_strokes`` strokes, each a smooth
  centripetal Catmull-Rom spline through ``min_points``-``max_points`` control points of a random walk
  on the lattice (no move reverses the previous one), starting at a random lattice point or on a control
  point of an earlier stroke. The character is centred and scaled so that its longest side spans
  :data:`FILL` of the image.
- **Examples** (``examples_per_class`` writers, :func:`draw_writers`; constants :data:`WRITER`): each
  writer jitters the control points, holds the pen at its own width with its own pressure along every
  stroke (tapered starts and ends, a slow wave of width and ink), slants (shear), rotates, scales,
  stretches and shifts the character, and bends the trajectory by an elastic distortion (Simard et al.
  2003, ICDAR, "Best practices for convolutional neural networks applied to visual document analysis":
  ``alpha = 34, sigma = 4`` at 28 px, scaled with the image; the displacement field moves the pen's
  path, so strokes bend without changing width). Rasterised with anti-aliasing by :mod:`._stroke_render`
  (white ink on black, uint8).
- **Splits**: disjoint alphabets; ``train_classes`` / ``val_classes`` / ``test_classes`` classes drawn
  from independent random streams. A candidate class is dropped, and the next candidate of its alphabet
  drawn, when its clean render (the mean writer: no jitter, no distortion) correlates
  :data:`DUPLICATE_NCC` or more with an earlier class of any split (16 x 16 shape vectors, as FontGlyphs'
  look-alike filter), and, in ``train`` and ``val``, when its clean render or half of its writers show a
  test benchmark's concept (digits 0-9, letters A-J) by the rule of :mod:`fastweights.data.concepts`
  (:func:`~fastweights.data.concepts.benchmark_lookalikes`,
  :func:`~fastweights.data.concepts.examples_lookalike`).

Deterministic for ``seed``: alphabet ``a`` of a split from ``(seed, split, a)``, its candidate class
``k`` from ``(seed, split, a, k)`` and writer ``w`` of it as row ``w`` of a block of uniforms drawn from
``(seed, split, a, k)`` and a writer tag, so a writer does not depend on how many are drawn. Cached on
disk like the other sources (``_cache.load_or_build_npz``).

Measured (seed 0, defaults: 32 px, 20 writers, 1,200 / 200 / 400 classes in alphabets of 40): 1,673 /
301 / 420 candidates drawn, 69 / 27 / 20 dropped as duplicates, 404 / 74 / 0 as benchmark look-alikes;
built in 16 s of CPU in one process (31-36 s wall on a 2-core machine at load average 7), a 39 MB npz.
"""

from __future__ import annotations

import logging
import math
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image
from scipy.special import ndtri
from threadpoolctl import threadpool_limits

from fastweights.checks import check_count

from ._cache import cache_key, default_cache_dir, load_or_build_npz
from ._pools import PoolParts, make_pools
from ._render import shape_vector
from ._splits import SPLIT_NAMES
from ._stroke_render import catmull_rom, elastic_fields, render_segments, sample_field
from .base import ClassPool

__all__ = [
    "HandwritingConfig",
    "AlphabetStyle",
    "load_handwriting",
    "handwriting_arrays",
    "alphabet_style",
    "character",
    "draw_writers",
    "draw_prototype",
    "contact_sheet",
    "FILL",
    "WRITER",
    "DUPLICATE_NCC",
    "MAX_STROKES",
    "MAX_POINTS",
]

log = logging.getLogger(__name__)
CACHE_VERSION = 1  # bump whenever drawing, rendering or filtering changes: it is part of the cache key

MAX_STROKES = 8  # upper bound of min_strokes / max_strokes
MAX_POINTS = 10  # upper bound of min_points / max_points
#: alphabet style ranges (inclusive int ranges, uniform float ranges)
STYLE = {
    "grid": (5, 8),  # lattice points per side
    "max_step": (2, 3),  # longest move between consecutive control points, lattice cells per axis
    "attach": (0.3, 0.8),  # probability that a stroke after the first starts on an earlier stroke
    "reuse": (0.2, 0.6),  # probability that a stroke is one of the alphabet's primitives
    "primitives": 6,  # stroke primitives per alphabet
    "weights_concentration": 2.0,  # Dirichlet concentration of the stroke / point count weights
    "min_turn_cos": -0.7,  # consecutive moves never turn back more sharply than this cosine
}
FILL = 0.72  # the clean character's longest side spans this fraction of the image side
SPAN_SAMPLES_PER_PX = 0.2  # curve samples per spline span per pixel of image side (at least 4)
#: writer variation (fractions of the image side S unless noted; "x ± d" = uniform in [x - d, x + d])
WRITER = {
    "jitter": 0.07,  # std of each control point's displacement, in half-character units (FILL * S / 2)
    "width": (0.045, 0.08),  # pen width, fraction of S (1.4-2.6 px at 32 px)
    "taper": (0.0, 0.6),  # width lost at a stroke's start / end (pen landing and lifting), fraction
    "taper_length": 0.12,  # e-folding length of the taper, fraction of the stroke
    "wave": (0.0, 0.25),  # amplitude of the slow width wave along a stroke, fraction
    "wave_cycles": (0.5, 1.5),  # its periods per stroke
    "ink": (0.8, 1.0),  # peak ink level of the writer (x 255)
    "pressure_ink": 0.15,  # share of the ink level that follows the pressure
    "slant": 0.35,  # shear x -= slant * y, slant uniform in ± this
    "rotation_deg": 8.0,  # ± degrees
    "scale": (0.85, 1.1),
    "aspect": 0.08,  # x scaled by (1 + a), y by (1 - a), a in ± this
    "shift": 0.06,  # ± fraction of S per axis
    "elastic_alpha": 34.0,  # Simard et al. 2003 at 28 px; alpha scales with (S / 28)^2, sigma with S / 28
    "elastic_sigma": 4.0,
}
PROTOTYPE_WIDTH = 0.0625  # pen width of the clean render, fraction of S (2 px at 32 px)
#: a candidate whose clean render's 16 x 16 shape vector (``_render.shape_vector``) correlates this much
#: with an earlier class's is a duplicate: 99 % of writers correlate less with their own class's clean
#: render (measured on 320 classes x 20 writers at 32 px: median 0.42, 99th percentile 0.77)
DUPLICATE_NCC = 0.8
MAX_CANDIDATES = 50  # per class asked for: an alphabet that needs more candidates is an error
_TAGS = {"alphabet": 0xA1FA, "class": 0xC1A5, "writer": 0x3717}


@dataclass(frozen=True)
class HandwritingConfig:
    """The arguments of :func:`load_handwriting` that determine its output (they form the cache key)."""

    image_size: int = 32
    examples_per_class: int = 20
    train_classes: int = 1200
    val_classes: int = 200
    test_classes: int = 400
    classes_per_alphabet: int = 40
    min_strokes: int = 1
    max_strokes: int = 4
    min_points: int = 3
    max_points: int = 6
    seed: int = 0

    def __post_init__(self) -> None:
        check_count("image_size", self.image_size, 8, 512)
        check_count("examples_per_class", self.examples_per_class, 1)
        for split in SPLIT_NAMES:
            check_count(f"{split}_classes", getattr(self, f"{split}_classes"), 1)
        check_count("classes_per_alphabet", self.classes_per_alphabet, 1)
        for what, top in (("strokes", MAX_STROKES), ("points", MAX_POINTS)):
            low = check_count(f"min_{what}", getattr(self, f"min_{what}"), 1 if what == "strokes" else 2, top)
            high = getattr(self, f"max_{what}")
            if isinstance(high, bool) or not isinstance(high, int | np.integer) or not low <= high <= top:
                raise ValueError(
                    f"max_{what}: expected an int in [min_{what} = {low}, {top}], given {high!r}"
                )
        check_count("seed", self.seed, 0)
        for name in self.__dataclass_fields__:  # numpy integers -> int (the config is a JSON cache key)
            object.__setattr__(self, name, int(getattr(self, name)))

    def split_classes(self, split: str) -> int:
        return int(getattr(self, f"{split}_classes"))


@dataclass(frozen=True)
class AlphabetStyle:
    """One alphabet's drawing style (see :func:`alphabet_style`); lattice units."""

    grid: int
    max_step: int
    stroke_weights: np.ndarray  # float64 [max_strokes - min_strokes + 1]
    point_weights: np.ndarray  # float64 [max_points - min_points + 1]
    attach: float
    reuse: float
    primitives: tuple[np.ndarray, ...]  # int64 [K_i - 1, 2] moves


def _rng(tag: str, *parts: int) -> np.random.Generator:
    return np.random.default_rng([_TAGS[tag], *(int(p) for p in parts)])


def _moves(max_step: int) -> np.ndarray:
    r = np.arange(-max_step, max_step + 1)
    grid = np.stack(np.meshgrid(r, r, indexing="xy"), -1).reshape(-1, 2)
    return grid[np.any(grid != 0, axis=1)]


def _walk(
    rng: np.random.Generator, start: np.ndarray, n_points: int, grid: int | None, max_step: int
) -> np.ndarray:
    """A lattice random walk of at most ``n_points`` points (``grid=None``: unbounded); int64 ``[K, 2]``."""
    moves = _moves(max_step)
    norms = np.linalg.norm(moves, axis=1)
    pts = [np.asarray(start, dtype=np.int64)]
    prev: np.ndarray | None = None
    for _ in range(n_points - 1):
        ok = np.ones(len(moves), dtype=bool)
        if grid is not None:
            nxt = pts[-1] + moves
            ok &= np.all((nxt >= 0) & (nxt < grid), axis=1)
        if prev is not None:
            ok &= (moves @ prev) / (norms * np.linalg.norm(prev)) > STYLE["min_turn_cos"]
        choices = np.flatnonzero(ok)
        if len(choices) == 0:
            break
        prev = moves[choices[rng.integers(len(choices))]]
        pts.append(pts[-1] + prev)
    return np.stack(pts)


def _count(rng: np.random.Generator, low: int, weights: np.ndarray) -> int:
    return low + int(rng.choice(len(weights), p=weights))


def alphabet_style(cfg: HandwritingConfig, split: str, alphabet: int) -> AlphabetStyle:
    """The drawing style of alphabet ``alphabet`` of ``split``, from ``(seed, split, alphabet)``.

    Lattice side, longest move, Dirichlet weights over the stroke and control-point counts, the
    probabilities that a stroke starts on an earlier stroke (``attach``) or is a primitive (``reuse``),
    and the primitives (random walks of the alphabet's point counts, as move sequences). Ranges:
    :data:`STYLE`.
    """
    rng = _rng("alphabet", cfg.seed, SPLIT_NAMES.index(split), alphabet)
    grid = int(rng.integers(STYLE["grid"][0], STYLE["grid"][1] + 1))
    max_step = int(rng.integers(STYLE["max_step"][0], STYLE["max_step"][1] + 1))
    conc = STYLE["weights_concentration"]
    sw = rng.dirichlet(np.full(cfg.max_strokes - cfg.min_strokes + 1, conc))
    pw = rng.dirichlet(np.full(cfg.max_points - cfg.min_points + 1, conc))
    attach = float(rng.uniform(*STYLE["attach"]))
    reuse = float(rng.uniform(*STYLE["reuse"]))
    prims = []
    for _ in range(STYLE["primitives"]):
        walk = _walk(rng, np.zeros(2, dtype=np.int64), _count(rng, cfg.min_points, pw), None, max_step)
        prims.append(np.diff(walk, axis=0))
    return AlphabetStyle(grid, max_step, sw, pw, attach, reuse, tuple(prims))


def _place(moves: np.ndarray, start: np.ndarray, grid: int) -> np.ndarray:
    """A primitive's moves from ``start``, each point clipped to the lattice, repeated points dropped."""
    pts = [start]
    for m in moves:
        p = np.clip(pts[-1] + m, 0, grid - 1)
        if np.any(p != pts[-1]):
            pts.append(p)
    return np.stack(pts)


def character(cfg: HandwritingConfig, style: AlphabetStyle, rng: np.random.Generator) -> list[np.ndarray]:
    """One class: its strokes as float64 control points ``[K_j, 2]`` in character units.

    Each stroke starts, with probability ``style.attach`` (not for the first), on a control point of an
    earlier stroke, else on a random lattice point; it is, with probability ``style.reuse``, one of the
    alphabet's primitives (possibly reversed) placed there, points that would leave the lattice clipped
    to it (a primitive left with fewer than ``min_points`` points is replaced by a walk), else a fresh
    random walk of a drawn number of points. The character is then centred on its clean curve's bounding
    box and scaled so that the longer side spans ``[-1, 1]`` (x right, y down).
    """
    n_strokes = _count(rng, cfg.min_strokes, style.stroke_weights)
    strokes: list[np.ndarray] = []
    for j in range(n_strokes):
        if j and rng.random() < style.attach:
            earlier = np.concatenate(strokes)
            start = earlier[rng.integers(len(earlier))]
        else:
            start = rng.integers(0, style.grid, size=2)
        pts = np.empty((0, 2))
        if rng.random() < style.reuse:
            moves = style.primitives[rng.integers(len(style.primitives))]
            if rng.random() < 0.5:
                moves = -moves[::-1]
            pts = _place(moves, start, style.grid)
        if len(pts) < cfg.min_points:  # clipped at the lattice's edge: a fresh walk instead
            pts = _walk(
                rng, start, _count(rng, cfg.min_points, style.point_weights), style.grid, style.max_step
            )
        strokes.append(pts)
    ctrl = [s.astype(np.float64) for s in strokes]
    curve = np.concatenate([catmull_rom(c[None], 16)[0] for c in ctrl])
    lo, hi = curve.min(0), curve.max(0)
    half = max(float((hi - lo).max()) / 2, 1e-9)
    return [(c - (lo + hi) / 2) / half for c in ctrl]


def _samples_per_span(size: int) -> int:
    return max(4, round(SPAN_SAMPLES_PER_PX * size))


@dataclass(frozen=True)
class _Writers:
    """Per-writer parameters, batched over B writers (see :data:`WRITER`)."""

    jitter: np.ndarray  # [B, K_total, 2] character units
    width: np.ndarray  # [B] fraction of S
    taper: np.ndarray  # [B, strokes, 2] start / end
    wave: np.ndarray  # [B, strokes, 3] amplitude, cycles, phase
    ink: np.ndarray  # [B]
    matrix: np.ndarray  # [B, 2, 2] slant, rotation, scale, aspect
    shift: np.ndarray  # [B, 2] fraction of S
    noise: np.ndarray | None  # [B, 2, S, S] uniform [-1, 1] (elastic), None = no distortion


def _writers(u: np.ndarray, n_ctrl: int, n_strokes: int, size: int) -> _Writers:
    """Writer parameters from uniforms ``u`` ``[B, D]`` in ``[0, 1)``, one row per writer (D =
    :func:`_writer_dims`); the ranges of :data:`WRITER`."""
    w = WRITER
    b = len(u)
    cols = iter(np.split(u, np.cumsum(_writer_dims(n_ctrl, n_strokes, size, parts=True))[:-1], axis=1))

    def uniform(low: float, high: float, col: np.ndarray) -> np.ndarray:
        return low + (high - low) * col

    jitter = w["jitter"] * ndtri(np.clip(next(cols), 1e-12, 1 - 1e-12)).reshape(b, n_ctrl, 2)
    width = uniform(*w["width"], next(cols)[:, 0])
    taper = uniform(*w["taper"], next(cols)).reshape(b, n_strokes, 2)
    wave = np.stack(
        [
            uniform(*w["wave"], next(cols)),
            uniform(*w["wave_cycles"], next(cols)),
            uniform(0.0, 2 * math.pi, next(cols)),
        ],
        -1,
    )
    ink = uniform(*w["ink"], next(cols)[:, 0])
    theta = np.radians(uniform(-w["rotation_deg"], w["rotation_deg"], next(cols)[:, 0]))
    scale = uniform(*w["scale"], next(cols)[:, 0])
    aspect = uniform(-w["aspect"], w["aspect"], next(cols)[:, 0])
    slant = uniform(-w["slant"], w["slant"], next(cols)[:, 0])
    shift = uniform(-w["shift"], w["shift"], next(cols))
    noise = uniform(-1.0, 1.0, next(cols)).reshape(b, 2, size, size)
    cos, sin = np.cos(theta), np.sin(theta)
    rot = np.stack([np.stack([cos, -sin], -1), np.stack([sin, cos], -1)], -2)  # [B, 2, 2]
    stretch = np.zeros((b, 2, 2))
    stretch[:, 0, 0], stretch[:, 1, 1] = scale * (1 + aspect), scale * (1 - aspect)
    shear = np.tile(np.eye(2), (b, 1, 1))
    shear[:, 0, 1] = -slant
    return _Writers(jitter, width, taper, wave, ink, rot @ stretch @ shear, shift, noise)


def _writer_dims(n_ctrl: int, n_strokes: int, size: int, parts: bool = False) -> Any:
    """Uniforms per writer: jitter, width, taper, wave (3), ink, rotation, scale, aspect, slant, shift,
    elastic noise (``parts=True``: the list of block sizes, in that order; else their sum)."""
    dims = [2 * n_ctrl, 1, 2 * n_strokes, n_strokes, n_strokes, n_strokes, 1, 1, 1, 1, 1, 2, 2 * size * size]
    return dims if parts else sum(dims)


def _draw(strokes: list[np.ndarray], p: _Writers, size: int) -> np.ndarray:
    """Render ``strokes`` once per writer of ``p``: uint8 ``[B, S, S]``."""
    n = _samples_per_span(size)
    half = FILL * size / 2
    starts, ends, radii, inks, points = [], [], [], [], []
    offset = 0
    for j, ctrl in enumerate(strokes):
        k = len(ctrl)
        curve = catmull_rom(ctrl[None] + p.jitter[:, offset : offset + k], n)  # [B, N, 2]
        offset += k
        t = np.linspace(0.0, 1.0, curve.shape[1])[None]
        tau = WRITER["taper_length"]
        amp, cycles, phase = (p.wave[:, j, i, None] for i in range(3))
        pressure = (
            (1 - p.taper[:, j, 0, None] * np.exp(-t / tau))
            * (1 - p.taper[:, j, 1, None] * np.exp(-(1 - t) / tau))
            * (1 + amp * np.sin(2 * math.pi * cycles * t + phase))
        )  # [B, N]
        points.append(curve)
        r = p.width[:, None] * size / 2 * pressure
        radii.append(np.stack([r[:, :-1], r[:, 1:]], -1))
        mid = np.minimum((pressure[:, :-1] + pressure[:, 1:]) / 2, 1.0)
        share = WRITER["pressure_ink"]
        inks.append(p.ink[:, None] * (1 - share + share * mid))
    lengths = [c.shape[1] for c in points]
    xy = np.concatenate(points, axis=1) @ p.matrix.transpose(0, 2, 1)
    xy = size / 2 + half * xy + p.shift[:, None] * size
    if p.noise is not None:
        ratio = size / 28.0
        fields = elastic_fields(p.noise, WRITER["elastic_alpha"] * ratio**2, WRITER["elastic_sigma"] * ratio)
        xy = xy + sample_field(fields, xy)
    lo = 0
    for length in lengths:
        seg = xy[:, lo : lo + length]
        starts.append(seg[:, :-1])
        ends.append(seg[:, 1:])
        lo += length
    img = render_segments(
        np.concatenate(starts, 1),
        np.concatenate(ends, 1),
        np.concatenate(radii, 1),
        np.concatenate(inks, 1),
        size,
    )
    return np.rint(img * 255.0).astype(np.uint8)


def draw_writers(
    cfg: HandwritingConfig, strokes: list[np.ndarray], split: str, alphabet: int, candidate: int, writers: int
) -> np.ndarray:
    """``writers`` examples of a class: uint8 ``[writers, S, S]`` (white ink on black).

    Writer ``w`` is row ``w`` of a ``[writers, D]`` block of uniforms drawn from ``(seed, split,
    alphabet, candidate)`` (so it depends on ``w`` and not on ``writers``): control-point jitter, pen
    width, pressure (taper and wave), ink level, slant, rotation, scale, aspect, shift and the noise of
    its elastic distortion field, all in the ranges of :data:`WRITER`.
    """
    n_ctrl = sum(len(s) for s in strokes)
    rng = _rng("writer", cfg.seed, SPLIT_NAMES.index(split), alphabet, candidate)
    u = rng.random((writers, _writer_dims(n_ctrl, len(strokes), cfg.image_size)))
    return _draw(strokes, _writers(u, n_ctrl, len(strokes), cfg.image_size), cfg.image_size)


def draw_prototype(strokes: list[np.ndarray], size: int) -> np.ndarray:
    """The clean render of a class (the mean writer): no jitter or distortion, uniform pressure, pen
    width :data:`PROTOTYPE_WIDTH`, full ink. uint8 ``[S, S]``."""
    n_ctrl, n_strokes = sum(len(s) for s in strokes), len(strokes)
    params = _Writers(
        jitter=np.zeros((1, n_ctrl, 2)),
        width=np.array([PROTOTYPE_WIDTH]),
        taper=np.zeros((1, n_strokes, 2)),
        wave=np.zeros((1, n_strokes, 3)),
        ink=np.ones(1),
        matrix=np.eye(2)[None],
        shift=np.zeros((1, 2)),
        noise=None,
    )
    return _draw(strokes, params, size)[0]


def _shape(img: np.ndarray) -> np.ndarray:
    return shape_vector(Image.fromarray(img))


def _build(cfg: HandwritingConfig) -> dict[str, np.ndarray]:
    # the build's matrix products are tiny: a multi-threaded BLAS spends more on waking its threads than
    # on them (13x slower on a busy 2-core machine), so it runs single-threaded
    with threadpool_limits(1, user_api="blas"):
        return _build_single_threaded(cfg)


def _build_single_threaded(cfg: HandwritingConfig) -> dict[str, np.ndarray]:
    from fastweights.data.concepts import EXCLUDED_SPLITS, benchmark_lookalikes, examples_lookalike

    t0 = time.perf_counter()
    total = sum(cfg.split_classes(s) for s in SPLIT_NAMES)
    kept_shapes = np.zeros((total, 256), dtype=np.float32)
    n_kept = 0
    arrays: dict[str, np.ndarray] = {}
    for split in SPLIT_NAMES:
        n = cfg.split_classes(split)
        m, size = cfg.examples_per_class, cfg.image_size
        images = np.zeros((n, m, size, size), dtype=np.uint8)
        protos = np.zeros((n, size, size), dtype=np.uint8)
        names, alphabets, n_strokes, lookalikes = [], [], [], []
        candidates = duplicates = 0
        for a in range(math.ceil(n / cfg.classes_per_alphabet)):
            style = alphabet_style(cfg, split, a)
            need = min(cfg.classes_per_alphabet, n - a * cfg.classes_per_alphabet)
            got = k = 0
            while got < need:
                if k >= MAX_CANDIDATES * need:
                    raise ValueError(
                        f"handwriting: expected {need} distinct classes in alphabet {split}-{a:03d}, given "
                        f"{got} after {k} candidates; allow more strokes or points, or fewer classes"
                    )
                candidates += 1
                strokes = character(cfg, style, _rng("class", cfg.seed, SPLIT_NAMES.index(split), a, k))
                proto = draw_prototype(strokes, size)
                vec = _shape(proto)
                if n_kept and float((kept_shapes[:n_kept] @ vec).max()) >= DUPLICATE_NCC:
                    duplicates += 1
                    k += 1
                    continue
                writers = draw_writers(cfg, strokes, split, a, k, m)
                if split in EXCLUDED_SPLITS:
                    why = benchmark_lookalikes(proto[None])[0] or examples_lookalike(writers)
                    if why:
                        lookalikes.append(why)
                        k += 1
                        continue
                i = len(names)
                images[i], protos[i] = writers, proto
                kept_shapes[n_kept] = vec
                n_kept += 1
                names.append(f"{split}-{a:03d}/{got:02d} ({len(strokes)} stroke{'s' * (len(strokes) > 1)})")
                alphabets.append(f"{split}-{a:03d}")
                n_strokes.append(len(strokes))
                got += 1
                k += 1
        arrays[f"{split}_images"] = images
        arrays[f"{split}_prototypes"] = protos
        arrays[f"{split}_names"] = np.array(names, dtype=str)
        arrays[f"{split}_alphabets"] = np.array(alphabets, dtype=str)
        arrays[f"{split}_strokes"] = np.array(n_strokes, dtype=np.int64)
        arrays[f"{split}_candidates"] = np.array(candidates, dtype=np.int64)
        arrays[f"{split}_duplicates"] = np.array(duplicates, dtype=np.int64)
        arrays[f"{split}_lookalikes"] = np.array(lookalikes, dtype=str).reshape(-1)
    seconds = time.perf_counter() - t0
    arrays["build_seconds"] = np.array(seconds)
    log.info(
        "Handwriting: %s classes built in %.1f s (%s candidates; %s duplicates; %s benchmark look-alikes)",
        " / ".join(str(cfg.split_classes(s)) for s in SPLIT_NAMES),
        seconds,
        " / ".join(str(int(arrays[f"{s}_candidates"])) for s in SPLIT_NAMES),
        " / ".join(str(int(arrays[f"{s}_duplicates"])) for s in SPLIT_NAMES),
        " / ".join(str(len(arrays[f"{s}_lookalikes"])) for s in SPLIT_NAMES),
    )
    return arrays


def _cache_path(cfg: HandwritingConfig, cache_dir: object) -> Path:
    from fastweights.data.concepts import concept_rule_key

    if cache_dir is not None and not (isinstance(cache_dir, str | os.PathLike) and str(cache_dir).strip()):
        raise ValueError(f"cache_dir: expected a folder path or None, given {cache_dir!r}")
    key = cache_key(
        {
            "v": CACHE_VERSION,
            "config": asdict(cfg),
            "style": STYLE,
            "writer": WRITER,
            "render": [FILL, SPAN_SAMPLES_PER_PX, PROTOTYPE_WIDTH, DUPLICATE_NCC, MAX_CANDIDATES],
            "concepts": concept_rule_key(),
        }
    )
    folder = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    return folder / f"handwriting-{key}.npz"


def handwriting_arrays(
    *, cache_dir: str | os.PathLike | None = None, cache: bool = True, **settings: Any
) -> dict[str, np.ndarray]:
    """The arrays behind :func:`load_handwriting` (built or read from the cache), for inspection.

    Keys, per split ``s`` of ``train``/``val``/``test``: ``s_images`` uint8 ``[C, M, S, S]``,
    ``s_prototypes`` uint8 ``[C, S, S]`` (clean renders), ``s_names`` and ``s_alphabets`` str ``[C]``,
    ``s_strokes`` int64 ``[C]``, ``s_candidates`` and ``s_duplicates`` (int64 scalars: candidates drawn,
    dropped as duplicates), ``s_lookalikes`` str ``[L]`` (the reason of every candidate dropped as a
    benchmark look-alike; empty for ``test``), and ``build_seconds`` (float64 scalar: the build's wall
    time, as recorded when it was built). ``settings`` are the fields of :class:`HandwritingConfig`.

    Raises:
        ValueError: for an unknown or bad setting (name, expected, given).
    """
    unknown = sorted(set(settings) - set(HandwritingConfig.__dataclass_fields__))
    if unknown:
        raise ValueError(
            f"handwriting: expected settings among {sorted(HandwritingConfig.__dataclass_fields__)}, "
            f"given {unknown}"
        )
    cfg = HandwritingConfig(**settings)
    path = _cache_path(cfg, cache_dir)
    return load_or_build_npz(path if cache else None, lambda: _build(cfg))


def load_handwriting(
    *,
    image_size: int = 32,
    examples_per_class: int = 20,
    train_classes: int = 1200,
    val_classes: int = 200,
    test_classes: int = 400,
    classes_per_alphabet: int = 40,
    min_strokes: int = 1,
    max_strokes: int = 4,
    min_points: int = 3,
    max_points: int = 6,
    seed: int = 0,
    cache_dir: str | os.PathLike | None = None,
    cache: bool = True,
) -> dict[str, ClassPool]:
    """Draw (or load from cache) the Handwriting few-shot set: random pen-stroke characters, one
    example per writer.

    Returns ``{"train", "val", "test"}`` -> :class:`ClassPool` named ``Handwriting/<split>`` with uint8
    ``images`` ``[C, examples_per_class, image_size, image_size]`` (grayscale, white ink on black, 0 =
    background) where ``C`` is ``train_classes`` / ``val_classes`` / ``test_classes``, ``class_names``
    like ``"train-003/17 (2 strokes)"``, ``alphabets`` like ``"train-003"`` (groups of
    ``classes_per_alphabet`` classes sharing a style; disjoint across splits), and the pixel statistics of
    the train images (``images / 255``) in all three pools. See the module docstring for how classes
    and writers are drawn and which candidates are dropped. Sources: Lake et al. 2015 (Science,
    characters as strokes; Omniglot, whose role this set plays offline), Simard et al. 2003 (ICDAR,
    elastic distortion), Yuksel et al. 2011 (centripetal Catmull-Rom splines).

    Settings: ``min_strokes``/``max_strokes`` strokes per class (in [1, 8]), ``min_points``/
    ``max_points`` control points per stroke (in [2, 10]); every class of ``train`` and ``val`` passes
    the benchmark-concept rule (:func:`fastweights.data.concepts.benchmark_lookalikes`).

    Cache: ``cache_dir`` (default ``$FASTWEIGHTS_CACHE`` or ``~/.cache/fastweights``) holds
    ``handwriting-<key>.npz``, keyed by every setting above but ``cache_dir``/``cache``, the drawing
    constants (:data:`STYLE`, :data:`WRITER`, ...), ``CACHE_VERSION`` and the concept rule (threshold and
    template fonts); ``cache=False`` builds without reading or writing it.

    Raises:
        ValueError: for a bad setting, naming it with the expected range and the value given (e.g.
            ``"max_strokes: expected an int in [min_strokes = 2, 8], given 1"``), or when an alphabet
            cannot find enough distinct classes (too few strokes and points for the classes asked for).
        FileNotFoundError: when no Latin font draws the concept rule's templates (``fonts-noto-core``).
    """
    arrays = handwriting_arrays(
        image_size=image_size,
        examples_per_class=examples_per_class,
        train_classes=train_classes,
        val_classes=val_classes,
        test_classes=test_classes,
        classes_per_alphabet=classes_per_alphabet,
        min_strokes=min_strokes,
        max_strokes=max_strokes,
        min_points=min_points,
        max_points=max_points,
        seed=seed,
        cache_dir=cache_dir,
        cache=cache,
    )
    parts = {}
    for split in SPLIT_NAMES:
        names = [str(x) for x in arrays[f"{split}_names"]]
        alphabets = [str(x) for x in arrays[f"{split}_alphabets"]]
        parts[split] = PoolParts(arrays[f"{split}_images"], names, alphabets, names)
    return make_pools("Handwriting", parts)


def contact_sheet(images: np.ndarray, scale: int = 3, gap: int = 2) -> np.ndarray:
    """A grid of examples for inspection: rows = classes, columns = writers.

    Args:
        images: uint8 ``[rows, cols, S, S]`` (e.g. ``pool.images[:8, :8]``).
        scale: integer upscaling of each image (nearest neighbour).
        gap: pixels of mid-gray between images.

    Returns:
        uint8 ``[rows * (S * scale + gap) + gap, cols * (S * scale + gap) + gap]``.

    Raises:
        ValueError: for a non-uint8 or non-4-dim array, or ``scale < 1`` / ``gap < 0``.
    """
    if not isinstance(images, np.ndarray) or images.dtype != np.uint8 or images.ndim != 4:
        raise ValueError(
            f"images: expected a uint8 array [rows, cols, S, S], given "
            f"{getattr(images, 'dtype', type(images).__name__)} {getattr(images, 'shape', '')}"
        )
    scale = check_count("scale", scale, 1)
    gap = check_count("gap", gap, 0)
    rows, cols, s, _ = images.shape
    cell = s * scale + gap
    sheet = np.full((rows * cell + gap, cols * cell + gap), 96, dtype=np.uint8)
    big = images.repeat(scale, axis=2).repeat(scale, axis=3)
    for r in range(rows):
        for c in range(cols):
            y, x = gap + r * cell, gap + c * cell
            sheet[y : y + s * scale, x : x + s * scale] = big[r, c]
    return sheet
