"""The EmojiImages build pipeline: emoji-test.txt catalogue -> base classes -> clean renders -> examples.

Used by :func:`fastweights.data.sources.emoji.load_emoji_images` (see that module's docstring for the
design and the measured numbers). Every random choice of a class derives from ``(seed, its sequence)``,
so a class's examples do not depend on which other classes are built.
"""

from __future__ import annotations

import math
import re
import zlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageFont, features

__all__ = [
    "Emoji",
    "EmojiConfig",
    "RENDER",
    "parse_emoji_test",
    "base_key",
    "base_classes",
    "assign_subgroups",
    "render_emoji",
    "distinct_renders",
    "class_rng",
    "examples",
    "layout_engine",
]

FONT_SIZE = 109  # the only size NotoColorEmoji's CBDT bitmaps are drawn at
CANVAS = 128  # clean renders: the emoji's alpha box fitted into FIT x FIT, centred on CANVAS x CANVAS
FIT = 112
MIN_OPAQUE = 400  # a render with fewer pixels of alpha >= 128 (of 128 x 128) counts as blank
MAX_WIDTH = 1.25  # a render wider than 1.25 emoji advances is several glyphs (the font lacks the sequence)
SKIN_TONES = range(0x1F3FB, 0x1F400)
HAIR_STYLES = range(0x1F9B0, 0x1F9B4)
GENDER_SIGNS = (0x2640, 0x2642)
ZWJ, VS16 = 0x200D, 0xFE0F
DROPPED_GROUPS = ("Component",)
# The random "photographer" of each example (fractions of the image side, degrees, factors)
SCALE = (0.6, 1.0)  # emoji size relative to the FIT box
ROTATION_DEG = 25.0
SHIFT = 0.12
BRIGHTNESS = (0.75, 1.25)
CONTRAST = (0.7, 1.3)
OCCLUSION_SIDE = (0.25, 0.5)
# A class whose render (on mid-gray, box-averaged to 32 x 32 RGB) correlates >= 0.99 with an earlier
# class's is a near-duplicate (chosen by inspection of the pairs: >= 0.99 are one flag under two names,
# e.g. France / St. Martin, Norway / Svalbard, or one square at two sizes, which the fitting makes
# equal; the next pairs, 0.95-0.99, are distinct faces such as "neutral" / "expressionless")
DUPLICATE_NCC = 0.99
DUPLICATE_RES = 32
RENDER = {
    "font_size": FONT_SIZE,
    "canvas": CANVAS,
    "fit": FIT,
    "min_opaque": MIN_OPAQUE,
    "max_width": MAX_WIDTH,
    "scale": SCALE,
    "rotation_deg": ROTATION_DEG,
    "shift": SHIFT,
    "brightness": BRIGHTNESS,
    "contrast": CONTRAST,
    "occlusion_side": OCCLUSION_SIDE,
    "duplicate_ncc": DUPLICATE_NCC,
    "duplicate_res": DUPLICATE_RES,
}  # the rendering constants: part of the cache key

_LINE = re.compile(r"^([0-9A-Fa-f ]+?)\s*;\s*([a-z-]+)\s*#\s*\S+\s+E\d+\.\d+\s+(.+?)\s*$")


@dataclass(frozen=True)
class Emoji:
    """One fully-qualified emoji of emoji-test.txt: its code points, group, subgroup and CLDR name."""

    codepoints: tuple[int, ...]
    group: str
    subgroup: str
    name: str

    @property
    def text(self) -> str:
        return "".join(map(chr, self.codepoints))

    @property
    def label(self) -> str:
        """``"grinning face (U+1F600)"``; sequences list every code point."""
        return f"{self.name} ({' '.join(f'U+{c:04X}' for c in self.codepoints)})"


@dataclass(frozen=True)
class EmojiConfig:
    """The arguments of ``load_emoji_images`` that determine its output (they form the cache key)."""

    image_size: int
    examples_per_class: int
    seed: int
    occlusion: float
    max_classes_per_subgroup: int | None


def parse_emoji_test(path: Path) -> list[Emoji]:
    """The fully-qualified emoji of a Unicode ``emoji-test.txt`` (UTS #51), in file (CLDR) order.

    Reads ``# group:`` / ``# subgroup:`` headers and ``code points ; status # emoji E<version> name``
    lines. Raises ``ValueError`` naming the file and line for a data line outside a subgroup or of
    another format.
    """
    out: list[Emoji] = []
    group = subgroup = None
    for n, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        line = raw.strip()
        if line.startswith("# group:"):
            group, subgroup = line.split(":", 1)[1].strip(), None
        elif line.startswith("# subgroup:"):
            subgroup = line.split(":", 1)[1].strip()
        elif line and not line.startswith("#"):
            m = _LINE.match(line)
            if m is None or group is None or subgroup is None:
                raise ValueError(
                    f"{path}:{n}: expected 'code points ; status # emoji E<version> name' under a "
                    f"'# group:' and '# subgroup:' header, given {raw!r}"
                )
            if m.group(2) == "fully-qualified":
                cps = tuple(int(c, 16) for c in m.group(1).split())
                out.append(Emoji(cps, group, subgroup, m.group(3)))
    return out


def base_key(codepoints: Iterable[int]) -> tuple[int, ...]:
    """The base emoji of a sequence: skin tones (U+1F3FB-1F3FF), hair styles (U+1F9B0-1F9B3), ZWJ +
    gender sign (♀ U+2640 / ♂ U+2642) and presentation selectors (U+FE0F) removed.

    ``(0x1F3C3, 0x1F3FD, 0x200D, 0x2642, 0xFE0F)`` "man running: medium skin tone" -> ``(0x1F3C3,)``
    "person running". Other ZWJ sequences (families, professions, "heart on fire") keep their parts.
    """
    cps = [c for c in codepoints if c != VS16 and c not in SKIN_TONES]
    out: list[int] = []
    i = 0
    while i < len(cps):
        c = cps[i]
        if c == ZWJ and i + 1 < len(cps) and (cps[i + 1] in HAIR_STYLES or cps[i + 1] in GENDER_SIGNS):
            i += 2
            continue
        if c in HAIR_STYLES and out:
            i += 1
            continue
        out.append(c)
        i += 1
    while out and out[-1] == ZWJ:
        out.pop()
    return tuple(out)


def base_classes(emoji: Iterable[Emoji]) -> tuple[list[Emoji], int]:
    """The classes: emoji that are their own base (:func:`base_key`), without the ``Component`` group.

    Returns ``(classes in file order, number of variants dropped)``. Every variant (skin tone, hair
    style, gendered ZWJ form) is dropped in favour of its base emoji, also the mixed-skin-tone ZWJ
    forms of couples and handshakes whose untoned form is a single other code point (e.g. "handshake:
    light skin tone, medium-light skin tone" for U+1F91D "handshake").
    """
    classes: list[Emoji] = []
    total = 0
    for e in emoji:
        if e.group not in DROPPED_GROUPS:
            total += 1
            if _no_vs16(e.codepoints) == base_key(e.codepoints):
                classes.append(e)
    return classes, total - len(classes)


def _no_vs16(codepoints: Iterable[int]) -> tuple[int, ...]:
    return tuple(c for c in codepoints if c != VS16)


def _crc(text: str) -> int:
    return zlib.crc32(text.encode("utf-8"))


def assign_subgroups(
    counts: Mapping[tuple[str, str], int], shares: Mapping[str, float]
) -> dict[str, dict[str, list[str]]]:
    """Split subgroups between splits, group by group: ``{split: {group: [subgroup, ...]}}``.

    ``counts`` maps ``(group, subgroup)`` to its number of classes; ``shares`` maps split names to
    target fractions of classes (e.g. ``{"train": 0.7, "val": 0.1, "test": 0.2}``). Within each group,
    subgroups are visited from the largest to the smallest (ties: by the CRC-32 of their names, then
    the names) and each goes to the split furthest below its target share of that group's classes so
    far (ties: the order of ``shares``), so that every split holds subgroups of most groups.
    Deterministic.
    """
    out: dict[str, dict[str, list[str]]] = {s: {} for s in shares}
    groups = list(dict.fromkeys(g for g, _ in counts))
    for g in groups:
        subs = sorted((s for gg, s in counts if gg == g), key=lambda s: (-counts[(g, s)], _crc(s), s))
        total = sum(counts[(g, s)] for s in subs)
        got = dict.fromkeys(shares, 0)
        for s in subs:
            split = max(shares, key=lambda k: shares[k] * total - got[k])
            got[split] += counts[(g, s)]
            out[split].setdefault(g, []).append(s)
    return {split: {g: sorted(v) for g, v in d.items()} for split, d in out.items()}


def layout_engine() -> ImageFont.Layout:
    """Raqm (HarfBuzz shaping: ZWJ sequences, flags and keycaps become one glyph) when PIL has it."""
    return ImageFont.Layout.RAQM if features.check("raqm") else ImageFont.Layout.BASIC


_FONTS: dict[str, ImageFont.FreeTypeFont] = {}


def _font(path: Path) -> ImageFont.FreeTypeFont:
    key = str(path)
    if key not in _FONTS:
        _FONTS[key] = ImageFont.truetype(key, FONT_SIZE, layout_engine=layout_engine())
    return _FONTS[key]


def render_emoji(font_path: Path, text: str) -> np.ndarray | None:
    """The emoji drawn by the colour font: RGBA uint8 ``[CANVAS, CANVAS, 4]``, its alpha box fitted into
    ``FIT x FIT`` (aspect kept) and centred; ``None`` when the font cannot draw it as one glyph.

    Blank renders (fewer than ``MIN_OPAQUE`` pixels of alpha >= 128: an unassigned or unknown code
    point draws nothing in NotoColorEmoji) and renders wider than ``MAX_WIDTH`` emoji advances (a
    sequence the font has no ligature for, drawn as its parts side by side) count as undrawable.
    """
    font = _font(font_path)
    advance = font.getlength("\U0001f600")
    left, top, right, bottom = font.getbbox(text)
    if right - left > MAX_WIDTH * advance or right <= left or bottom <= top:
        return None
    im = Image.new("RGBA", (right - left + 4, bottom - top + 4), (0, 0, 0, 0))
    ImageDraw.Draw(im).text((2 - left, 2 - top), text, font=font, embedded_color=True)
    box = im.getchannel("A").getbbox()
    if box is None:
        return None
    im = im.crop(box)
    if box[2] - box[0] > MAX_WIDTH * advance:
        return None
    scale = FIT / max(im.size)
    new = (max(1, round(im.size[0] * scale)), max(1, round(im.size[1] * scale)))
    im = im.resize(new, Image.Resampling.LANCZOS)
    canvas = Image.new("RGBA", (CANVAS, CANVAS), (0, 0, 0, 0))
    canvas.paste(im, ((CANVAS - new[0]) // 2, (CANVAS - new[1]) // 2))
    arr = np.asarray(canvas, dtype=np.uint8)
    if np.count_nonzero(arr[..., 3] >= 128) < MIN_OPAQUE:
        return None
    return arr


def shape_vector(render: np.ndarray) -> np.ndarray:
    """Zero-mean, unit-norm float32 ``[3 * DUPLICATE_RES**2]`` of an RGBA render composited on mid-gray
    and box-averaged to ``DUPLICATE_RES`` px: dot products are normalised cross-correlations."""
    im = Image.fromarray(render, "RGBA")
    canvas = Image.new("RGB", im.size, (128, 128, 128))
    canvas.paste(im, (0, 0), im)
    small = canvas.resize((DUPLICATE_RES, DUPLICATE_RES), Image.Resampling.BOX)
    x = np.asarray(small, dtype=np.float64).ravel()
    x = x - x.mean()
    norm = np.linalg.norm(x)
    return (x / norm if norm > 0 else x).astype(np.float32)


def distinct_renders(renders: list[np.ndarray]) -> list[int]:
    """Indices of the renders to keep: each one whose :func:`shape_vector` correlates less than
    ``DUPLICATE_NCC`` with every earlier kept one (greedy, in order)."""
    if not renders:
        return []
    v = np.stack([shape_vector(r) for r in renders])
    ncc = v @ v.T
    kept = np.zeros(len(renders), dtype=bool)
    for i in range(len(renders)):
        kept[i] = not (ncc[i, :i][kept[:i]] >= DUPLICATE_NCC).any()
    return [int(i) for i in np.flatnonzero(kept)]


def class_rng(seed: int, emoji: Emoji) -> np.random.Generator:
    """The random generator of one class's examples, from ``seed`` and its code points."""
    return np.random.default_rng([seed, *emoji.codepoints, 11])


def _affine(img: Image.Image, rng: np.random.Generator, res: int) -> Image.Image:
    theta = math.radians(rng.uniform(-ROTATION_DEG, ROTATION_DEG))
    s = rng.uniform(*SCALE)
    shift = rng.uniform(-SHIFT, SHIFT, size=2) * res
    cos, sin = math.cos(theta) / s, math.sin(theta) / s  # inverse map: rotate by -theta, scale 1/s
    inv = np.array([[cos, sin], [-sin, cos]])
    c = np.array([res / 2, res / 2])
    off = c - inv @ (c + shift)  # output p' -> input p = inv (p' - c - shift) + c
    data = (inv[0, 0], inv[0, 1], off[0], inv[1, 0], inv[1, 1], off[1])
    return img.transform((res, res), Image.Transform.AFFINE, data, resample=Image.Resampling.BILINEAR)


def _example(
    base: Image.Image, rng: np.random.Generator, res: int, size: int, occlusion: float
) -> np.ndarray:
    """One example: affine map, random background colour, optional occlusion, brightness/contrast."""
    fg = _affine(base, rng, res)
    background = tuple(int(v) for v in rng.integers(0, 256, size=3))
    img = Image.new("RGB", (res, res), background)
    img.paste(fg, (0, 0), fg)
    if size != res:
        img = img.resize((size, size), Image.Resampling.BOX if size < res else Image.Resampling.BILINEAR)
    x = np.asarray(img, dtype=np.float32)
    if rng.random() < occlusion:
        h, w = (max(1, round(size * rng.uniform(*OCCLUSION_SIDE))) for _ in range(2))
        y0, x0 = int(rng.integers(0, size - h + 1)), int(rng.integers(0, size - w + 1))
        if rng.random() < 0.5:
            x[y0 : y0 + h, x0 : x0 + w] = background
        else:
            x[y0 : y0 + h, x0 : x0 + w] = rng.integers(0, 256, size=(h, w, 3))
    contrast, brightness = rng.uniform(*CONTRAST), rng.uniform(*BRIGHTNESS)
    x = ((x - x.mean()) * contrast + x.mean()) * brightness
    return np.clip(np.rint(x), 0, 255).astype(np.uint8).transpose(2, 0, 1)


def examples(render: np.ndarray, rng: np.random.Generator, m: int, size: int, occlusion: float) -> np.ndarray:
    """``m`` random photographs of one clean render (:func:`render_emoji`): RGB uint8 ``[m, 3, size, size]``.

    Each: random scale (``SCALE``), rotation (±``ROTATION_DEG``) and shift (±``SHIFT`` of the side),
    pasted on a uniform random background colour, then with probability ``occlusion`` a random
    rectangle (sides ``OCCLUSION_SIDE`` of the image) filled with the background colour or uniform
    noise, then contrast and brightness jitter. Transforms run at ``max(2 * size, 32)`` px (at most
    ``CANVAS``) and are box-filtered down to ``size``.
    """
    res = min(CANVAS, max(2 * size, 32))
    base = Image.fromarray(render, "RGBA")
    if res != CANVAS:
        base = base.resize((res, res), Image.Resampling.LANCZOS)
    return np.stack([_example(base, rng, res, size, occlusion) for _ in range(m)])
