"""FontLetters and ColourDigits: small offline classification sets rendered from installed fonts.

Offline stand-ins for two members of the "5-datasets" continual-learning benchmark (CIFAR-10, MNIST,
Fashion-MNIST, SVHN, notMNIST; ACL paper App. A.2):

- **FontLetters** (notMNIST analogue): the capital letters A-J, grayscale, white ink on black.
- **ColourDigits** (SVHN analogue): the digits 0-9 in a random foreground colour on a random
  background colour, sometimes with faint neighbouring digits cut off at the left/right edge.

Every example is one glyph drawn by a random "drawer" of :mod:`._render` (font choice, stroke-width
change, random affine map) from the Latin fonts FontGlyphs uses (NotoSans/NotoSerif Regular and Bold,
matplotlib's DejaVu fonts). Train and test examples come from independent random streams and share
no identical image. Both sets are deterministic for a seed and cached as npz files.
"""

from __future__ import annotations

import os
import zlib
from collections.abc import Callable
from pathlib import Path

import numpy as np

from fastweights.checks import check_int

from ._cache import cache_key, default_cache_dir, load_or_build_npz
from ._fonts import DEFAULT_FONT_DIRS, FontFile, dejavu_dir, discover_fonts, font_fingerprint, read_cmap
from ._render import BASE_RES, examples_job
from .base import LabeledImages, SplitDataset, image_stats

__all__ = ["load_font_letters", "load_colour_digits", "LETTERS", "DIGITS"]

CACHE_VERSION = 1  # bump whenever rendering or colouring changes: it is part of the cache key
LETTERS = tuple(range(0x41, 0x4B))  # A..J -> labels 0..9
DIGITS = tuple(range(0x30, 0x3A))  # 0..9 -> labels 0..9
MIN_CONTRAST = 0.3  # |luma(fg) - luma(bg)| of the two colours, channel values on a 0..1 scale
LUMA = (0.2126, 0.7152, 0.0722)  # Rec. 709 weights
NEIGHBOUR_P = 0.35  # probability of a faint neighbouring digit, per side
NEIGHBOUR_ALPHA = (0.25, 0.55)  # its ink strength relative to the main digit
NEIGHBOUR_SHIFT = (0.6, 0.8)  # its horizontal offset, fraction of the image width
NEIGHBOUR_JITTER = 0.06  # its vertical offset, at most this fraction of the image height
MAX_REDRAWS = 10
_SPLITS = ("train", "test")
Classes = list[tuple[int, list[str]]]  # (code point, font paths) per class, in label order


def _check_args(image_size: object, train_per_class: object, test_per_class: object, seed: object) -> None:
    check_int("image_size", image_size, low=8, high=512)
    check_int("train_per_class", train_per_class, low=1)
    check_int("test_per_class", test_per_class, low=1)
    check_int("seed", seed, low=0)


def _cache_folder(cache_dir: object) -> Path:
    if cache_dir is None:
        return default_cache_dir()
    if isinstance(cache_dir, (str, os.PathLike)) and str(cache_dir).strip():
        return Path(cache_dir)
    raise ValueError(f"cache_dir: expected a folder path or None, got {cache_dir!r}")


def _latin_fonts(code_points: tuple[int, ...]) -> dict[int, list[FontFile]]:
    """Per code point, the Latin/Greek/Cyrillic fonts (no script-specific Noto font) covering it.

    Raises ``FileNotFoundError`` when a code point has none.
    """
    fonts = sorted((f for f in discover_fonts(None) if f.script is None), key=lambda f: f.rank)
    out = {cp: [f for f in fonts if cp in read_cmap(f.path)] for cp in code_points}
    missing = [cp for cp, fs in out.items() if not fs]
    if missing:
        searched = ", ".join([*DEFAULT_FONT_DIRS, str(dejavu_dir())])
        raise FileNotFoundError(
            f"no Latin font draws U+{missing[0]:04X}: expected NotoSans/NotoSerif or DejaVu fonts in "
            f"{searched}; install them with `apt-get install fonts-noto-core`"
        )
    return out


def _stream_seed(seed: int, name: str, split: str, purpose: int) -> int:
    """An independent non-negative int seed per (set, split, purpose)."""
    parts = [seed, zlib.crc32(name.encode()), _SPLITS.index(split), purpose]
    return int(np.random.SeedSequence(parts).generate_state(1, dtype=np.uint64)[0])


def _render_masks(classes: Classes, seed: int, n: int, image_size: int) -> np.ndarray:
    """uint8 ``[C, n, S, S]`` glyph renders (white on black), ``n`` random drawers per class."""
    return examples_job(classes, seed=seed, m=n, res=max(BASE_RES, image_size), size=image_size)


def _redraw_shared(
    test: np.ndarray,
    train: np.ndarray,
    redraw: Callable[[int, int, int], np.ndarray],
) -> np.ndarray:
    """``test`` ``[C, n, S, S]`` with every image also found in ``train`` (any class) drawn anew.

    ``redraw(class index, count, attempt)`` renders ``count`` fresh examples ``[count, S, S]``.
    Raises ``RuntimeError`` if images still coincide after ``MAX_REDRAWS`` attempts.
    """
    seen = {img.tobytes() for img in train.reshape(-1, *train.shape[-2:])}
    test = test.copy()
    for attempt in range(1, MAX_REDRAWS + 1):
        shared = [
            (i, j) for i in range(test.shape[0]) for j in range(test.shape[1]) if test[i, j].tobytes() in seen
        ]
        if not shared:
            return test
        for i in sorted({i for i, _ in shared}):
            js = [j for c, j in shared if c == i]
            test[i, js] = redraw(i, len(js), attempt)
    raise RuntimeError(f"test examples still equal train examples after {MAX_REDRAWS} redraws")


def _build_masks(
    name: str, classes: Classes, image_size: int, per_split: dict[str, int], seed: int
) -> dict[str, np.ndarray]:
    """Grayscale renders ``{split: uint8 [C, n_split, S, S]}``; test images never equal train ones."""
    masks = {
        split: _render_masks(classes, _stream_seed(seed, name, split, 0), per_split[split], image_size)
        for split in _SPLITS
    }

    def redraw(i: int, count: int, attempt: int) -> np.ndarray:
        s = _stream_seed(seed, name, "test", attempt)
        return _render_masks([classes[i]], s, count, image_size)[0]

    masks["test"] = _redraw_shared(masks["test"], masks["train"], redraw)
    return masks


def _luma(colours: np.ndarray) -> np.ndarray:
    """Luma of uint8 RGB colours ``[..., 3]`` on a 0..1 scale (Rec. 709 weights)."""
    return (colours.astype(np.float64) / 255.0) @ np.asarray(LUMA)


def _colour_pairs(rng: np.random.Generator, n: int) -> np.ndarray:
    """uint8 ``[n, 2, 3]`` (foreground, background) RGB pairs, uniform over the pairs whose luma
    differs by at least :data:`MIN_CONTRAST`."""
    found: list[np.ndarray] = []
    have = 0
    while have < n:
        cand = rng.integers(0, 256, size=(2 * n, 2, 3), dtype=np.uint8)
        keep = cand[np.abs(_luma(cand[:, 0]) - _luma(cand[:, 1])) >= MIN_CONTRAST]
        found.append(keep)
        have += len(keep)
    return np.concatenate(found)[:n]


def _shifted(img: np.ndarray, dy: int, dx: int) -> np.ndarray:
    """``img`` ``[S, S]`` moved by ``(dy, dx)`` pixels, zero-filled."""
    s = img.shape[0]
    out = np.zeros_like(img)
    if abs(dy) >= s or abs(dx) >= s:
        return out
    out[max(dy, 0) : s + min(dy, 0), max(dx, 0) : s + min(dx, 0)] = img[
        max(-dy, 0) : s + min(-dy, 0), max(-dx, 0) : s + min(-dx, 0)
    ]
    return out


def _colourise(masks: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """RGB uint8 ``[C * n, 3, S, S]`` from grayscale renders ``[C, n, S, S]`` (class-major order).

    Ink strength = the render scaled to a maximum of 1, combined (pixel-wise max) with faint
    neighbouring digits taken from other renders of the same split; pixel = background +
    strength * (foreground - background), so each image holds both colours exactly.
    """
    c, n, s, _ = masks.shape
    flat = masks.reshape(c * n, s, s)
    peak = flat.reshape(len(flat), -1).max(axis=1).astype(np.float32)
    alpha = flat.astype(np.float32) / np.maximum(peak, 1.0)[:, None, None]
    for k in range(len(flat)):
        for side in (-1, 1):
            if rng.random() >= NEIGHBOUR_P:
                continue
            other = flat[rng.integers(len(flat))]
            dx = side * int(round(rng.uniform(*NEIGHBOUR_SHIFT) * s))
            dy = int(round(rng.uniform(-NEIGHBOUR_JITTER, NEIGHBOUR_JITTER) * s))
            faint = _shifted(other, dy, dx).astype(np.float32) * (rng.uniform(*NEIGHBOUR_ALPHA) / 255.0)
            np.maximum(alpha[k], faint, out=alpha[k])
    pairs = _colour_pairs(rng, len(flat)).astype(np.float32)  # [N, 2, 3]
    fg, bg = pairs[:, 0, :, None, None], pairs[:, 1, :, None, None]
    rgb = bg + (fg - bg) * alpha[:, None]
    return np.rint(rgb).clip(0, 255).astype(np.uint8)


def _labels(c: int, n: int) -> np.ndarray:
    return np.repeat(np.arange(c, dtype=np.int64), n)


def _build_letters(
    classes: Classes, image_size: int, per_split: dict[str, int], seed: int
) -> dict[str, np.ndarray]:
    masks = _build_masks("font_letters", classes, image_size, per_split, seed)
    out = {}
    for split, m in masks.items():
        out[f"{split}_images"] = m.reshape(-1, image_size, image_size)
        out[f"{split}_labels"] = _labels(len(classes), m.shape[1])
    return out


def _build_colour_digits(
    classes: Classes, image_size: int, per_split: dict[str, int], seed: int
) -> dict[str, np.ndarray]:
    masks = _build_masks("colour_digits", classes, image_size, per_split, seed)
    out = {}
    for split, m in masks.items():
        rng = np.random.default_rng(_stream_seed(seed, "colour_digits", split, 1_000))
        out[f"{split}_images"] = _colourise(m, rng)
        out[f"{split}_labels"] = _labels(len(classes), m.shape[1])
    return out


def _load(
    name: str,
    title: str,
    code_points: tuple[int, ...],
    build: Callable[[Classes, int, dict[str, int], int], dict[str, np.ndarray]],
    extra_key: dict,
    image_size: int,
    train_per_class: int,
    test_per_class: int,
    seed: int,
    cache_dir: object,
) -> SplitDataset:
    _check_args(image_size, train_per_class, test_per_class, seed)
    folder = _cache_folder(cache_dir)
    fonts = _latin_fonts(code_points)
    used = sorted({f.path: f for fs in fonts.values() for f in fs}.values(), key=lambda f: f.rank)
    classes = [(cp, [f.path for f in fonts[cp]]) for cp in code_points]
    per_split = {"train": int(train_per_class), "test": int(test_per_class)}
    key = cache_key(
        {
            "version": CACHE_VERSION,
            "set": name,
            "image_size": int(image_size),
            "per_class": per_split,
            "seed": int(seed),
            "fonts": font_fingerprint(used),
            **extra_key,
        }
    )
    path = folder / f"{name}-{key}.npz"
    arrays = load_or_build_npz(path, lambda: build(classes, int(image_size), per_split, int(seed)))
    train = LabeledImages(arrays["train_images"], arrays["train_labels"])
    test = LabeledImages(arrays["test_images"], arrays["test_labels"])
    mean, std = image_stats(train.images, train.channels)
    return SplitDataset(name=title, train=train, test=test, num_classes=len(code_points), mean=mean, std=std)


def load_font_letters(
    *,
    image_size: int = 32,
    train_per_class: int = 100,
    test_per_class: int = 100,
    seed: int = 0,
    cache_dir: str | os.PathLike | None = None,
) -> SplitDataset:
    """FontLetters, an offline notMNIST analogue: the letters A-J drawn from installed fonts.

    Returns a :class:`SplitDataset` named "FontLetters" with 10 classes (labels 0..9 = A..J) and
    uint8 images ``[10 * train_per_class, image_size, image_size]`` (train) and ``[10 *
    test_per_class, image_size, image_size]`` (test), white ink on black, int64 labels ``[N]``, in
    class-major order. ``mean``/``std`` (floats) are the train pixel statistics of ``images / 255``.

    Each example is the letter drawn by a random drawer: a font among the NotoSans/NotoSerif
    (Regular, Bold) and DejaVu fonts covering it, a random stroke-width change and a random affine map
    (as for FontGlyphs). Train and test drawers come from independent random streams derived from
    ``seed``, and no test image equals a train image. Deterministic for ``seed``; cached in
    ``cache_dir`` (default ``$FASTWEIGHTS_CACHE`` or ``~/.cache/fastweights``) as
    ``font_letters-<key>.npz``, keyed by all arguments but ``cache_dir``, the font files and a version.

    Raises ``ValueError`` naming the argument for a bad ``image_size`` (int in [8, 512]),
    ``train_per_class``/``test_per_class`` (int >= 1), ``seed`` (int >= 0) or ``cache_dir`` (path or
    None), and ``FileNotFoundError`` naming ``fonts-noto-core`` when no Latin font covers a letter.
    """
    return _load(
        "font_letters",
        "FontLetters",
        LETTERS,
        _build_letters,
        {},
        image_size,
        train_per_class,
        test_per_class,
        seed,
        cache_dir,
    )


def load_colour_digits(
    *,
    image_size: int = 32,
    train_per_class: int = 100,
    test_per_class: int = 100,
    seed: int = 0,
    cache_dir: str | os.PathLike | None = None,
) -> SplitDataset:
    """ColourDigits, an offline SVHN analogue: the digits 0-9 drawn from installed fonts, in colour.

    Returns a :class:`SplitDataset` named "ColourDigits" with 10 classes (labels 0..9 = the digit)
    and RGB channels-first uint8 images ``[10 * train_per_class, 3, image_size, image_size]``
    (train) and ``[10 * test_per_class, 3, image_size, image_size]`` (test), int64 labels ``[N]``,
    in class-major order. ``mean``/``std`` are tuples of 3 floats: the per-channel train statistics
    of ``images / 255``.

    Each digit is drawn like a :func:`load_font_letters` example, then coloured: a random foreground
    colour on a random background colour (uniform over uint8 RGB pairs whose Rec. 709 luma differs
    by at least ``MIN_CONTRAST`` = 0.3 on a 0..1 scale); the render is scaled so that each image
    contains both colours exactly. With probability ``NEIGHBOUR_P`` per side, a faint neighbouring
    digit (another render of the same split, 25-55 % ink strength) shows at the left/right edge,
    like house-number crops. Train/test independence, determinism, caching
    (``colour_digits-<key>.npz``) and errors are as for :func:`load_font_letters`.
    """
    colour = {
        "min_contrast": MIN_CONTRAST,
        "luma": LUMA,
        "neighbour": [NEIGHBOUR_P, NEIGHBOUR_ALPHA, NEIGHBOUR_SHIFT, NEIGHBOUR_JITTER],
    }
    return _load(
        "colour_digits",
        "ColourDigits",
        DIGITS,
        _build_colour_digits,
        {"colour": colour},
        image_size,
        train_per_class,
        test_per_class,
        seed,
        cache_dir,
    )
