"""Test-benchmark concepts kept out of meta-training and meta-validation classes.

Rule: no class of the meta-training or meta-validation pools may show the concept of a test benchmark's
class, or the benchmark stops measuring learning of *new* classes (the digits would have been
meta-trained as keycaps, the garments as clothing emoji). The test benchmarks of this project and their
classes (:data:`BENCHMARK_CLASSES`):

- Split-Digits (scikit-learn's 8 × 8 digits), Split-MNIST and ColourDigits (the SVHN analogue): the
  decimal digits 0–9;
- Split-FashionMNIST: T-shirt/top, trouser, pullover, dress, coat, sandal, shirt, sneaker, bag, ankle
  boot (Xiao et al. 2017);
- FontLetters (the notMNIST analogue of the mini 5-datasets): the Latin letters A–J;
- Split-Emoji: EmojiImages' meta-test subgroups, disjoint from its meta-training and meta-validation
  subgroups by construction.

The embedded meta-training sources and what is removed from their ``train`` and ``val`` pools
(:func:`exclude_benchmark_concepts`; ``test`` pools are left as they are):

- **EmojiImages** (:func:`emoji_exclusion`): three whole subgroups (``keycap``, ``alphanum``,
  ``clothing``) and the named classes of :data:`EMOJI_CLASSES`, each with its reason. The named
  classes were found by rendering every meta-training and meta-validation class of the subgroups that
  draw text or wearables (Noto Color Emoji 2.042) and looking at them: e.g. "calendar" draws "July 17",
  "pager" draws "1998", "ATM sign" draws the letter A, "roller skate" is footwear.
  :data:`EMOJI_REVIEWED` lists the names that mention a concept word but draw no such class (the clock
  faces have hands and no numerals). Then the image rule below, on an "ink" image of each RGB example
  (:func:`ink_images`: the RGB distance of each pixel from the example's background colour, an
  alpha-like coverage of the emoji's silhouette).
- **FontGlyphs** (:func:`glyph_exclusion`): every code point with a numeric value or a name with DIGIT,
  NUMBER or NUMERAL (U+4E00 "一" is the Han numeral one; Arabic letters with a digit above), the
  Egyptian numeral signs, which Unicode gives no numeric value (Gardiner's strokes Z015 / Z016 and the
  signs that Unicode's NamesList annotates with a number: U+13363 V001A "200", U+133FB Z015A two
  strokes, ...), and the Latin letters whose base letter is A-J in either case (``LATIN SMALL LETTER B
  WITH TOPBAR``). FontGlyphs classes are letters only (Unicode Lu/Ll/Lt/Lo) and Latin look-alikes of
  other scripts are already removed when it is built. Then the image rule below on its examples.

- **Image rule on FontGlyphs and EmojiImages** (:func:`pool_lookalikes`, in addition to the name
  rules): a class is dropped when at least half of its examples show a concept by
  :func:`benchmark_lookalikes`, as Handwriting's writers, but at the printed sources' threshold
  :data:`PRINTED_CONCEPT_NCC` (0.78): Handwriting's recipe on printed shapes, the 10th percentile of the
  correlation of real digits 0-9 and capitals A-J, drawn by the 44 installed fonts that are not template
  fonts as FontGlyphs draws a class, with their own character's best template (17,400 images; 5th / 10th
  / 25th / 50th percentiles 0.74 / 0.78 / 0.85 / 0.90). Measured on the default pools (seed 0, 32 px, 20
  examples; Debian bookworm's fonts), it drops, beyond the name rules: FontGlyphs 638 of 4,068
  meta-training and 80 of 937 meta-validation classes (names first: 21 and 6), EmojiImages 84 of 1,291
  and 11 of 145 (names first: 118 and 6). Many of these are false alarms of an 8 x 8 shape correlation,
  not classes that show a digit or a letter. Of a random sample of 40 FontGlyphs drops, 13 are drawn
  like a digit or a letter A-J (Armenian CO and Caucasian Albanian SHOY as 8, Cherokee GO as A, Osmanya
  I as 9, Warang Citi YO as H, ...), 3 are a single stroke read as a 1 or an I, 2 are borderline and 22
  are not (Tangut and Nushu characters, an asterisk, a cross); of 40 EmojiImages drops none draws a
  digit or a letter: a tall narrow object reads as a 1 (a barber pole, r = 0.91), a compact one as a
  blurred scikit-learn mean (76 of the 84 meta-training drops; a cat, an egg, a bomb). The rule errs on
  the side of leaving classes out. The Egyptian numerals are caught by name: by the image rule alone 1 of
  the 6 in FontGlyphs' meta-validation pool (D050A, r = 0.84) reaches it.
- **Handwriting** (:func:`handwriting_exclusion`, applied while it is built): its classes are random pen
  strokes, so one may look like a digit or a letter by chance. Image rule (:func:`benchmark_lookalikes`):
  an image shows a concept when its ink, cropped and fitted into 8 x 8, correlates >= :data:`CONCEPT_NCC`
  (0.65) with a template: scikit-learn's 10 digit means, or the digits 0-9 and capitals A-J of the Latin
  fonts FontLetters and ColourDigits draw with (:func:`concept_templates`). The threshold is the 10th
  percentile of Split-Digits' own images' correlation with their own digit's best template; the rule
  flags 96 % of Split-Digits' images and 99.7 % of FontLetters'. A candidate class is dropped when its
  clean render or half of its writers show a concept; at the default settings this drops 404 of 1,673
  meta-training and 74 of 301 meta-validation candidates (``docs/architecture.md``, "Handwriting"). It
  is a correlation test, not a reader: a kept class can still remind a person of a digit. Garments
  (Split-FashionMNIST) have no template: measured with the same 8 x 8 vectors, the kept meta-training
  and meta-validation classes' best correlation with Fashion-MNIST's class means is 0.32 (median) and
  0.71 (99th percentile; 1.7 % reach 0.68, the 10th percentile of Fashion-MNIST's own images against
  their class mean); the highest (0.91, sneaker) are flat horizontal strokes and outlines.

Not covered: the paper's real benchmarks (Omniglot's Latin alphabet, Mini-ImageNet's classes) come from
the user's folders and are used as they are.
"""

from __future__ import annotations

import functools
import logging
import re
import unicodedata
from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import numpy as np

from .sources.base import ClassPool

__all__ = [
    "BENCHMARK_CLASSES",
    "EMOJI_SUBGROUPS",
    "EMOJI_CLASSES",
    "EMOJI_REVIEWED",
    "emoji_exclusion",
    "glyph_exclusion",
    "exclude_benchmark_concepts",
    "EXCLUSION_RULES",
    "EXCLUDED_SPLITS",
    "CONCEPT_RES",
    "CONCEPT_NCC",
    "PRINTED_CONCEPT_NCC",
    "CONCEPT_SLANTS",
    "ink_vectors",
    "concept_templates",
    "concept_rule_key",
    "benchmark_lookalikes",
    "examples_lookalike",
    "handwriting_exclusion",
    "ink_images",
    "pool_lookalikes",
]

log = logging.getLogger(__name__)

_DIGITS = tuple(str(d) for d in range(10))
#: test benchmark (registry name) -> its class names
BENCHMARK_CLASSES: dict[str, tuple[str, ...]] = {
    "digits": _DIGITS,
    "mnist": _DIGITS,
    "colour_digits": _DIGITS,
    "fashion_mnist": (
        "T-shirt/top",
        "Trouser",
        "Pullover",
        "Dress",
        "Coat",
        "Sandal",
        "Shirt",
        "Sneaker",
        "Bag",
        "Ankle boot",
    ),
    "font_letters": tuple("ABCDEFGHIJ"),
}

_DIGITS_WHY = "digits 0-9 (Split-Digits, Split-MNIST, ColourDigits)"
_FASHION_WHY = "garments, footwear and bags (Split-FashionMNIST)"
_LETTERS_WHY = "Latin letters A-J (FontLetters)"

#: EmojiImages subgroups removed as a whole -> reason
EMOJI_SUBGROUPS: dict[str, str] = {
    "keycap": f"keycaps 0-9 and 10 ({_DIGITS_WHY}); # and * are drawn in the same keycap",
    "alphanum": f"letters and digits drawn as text: input latin/numbers, A, B, AB, CL, ID, FREE, ... buttons "
    f"({_LETTERS_WHY}; {_DIGITS_WHY})",
    "clothing": f"t-shirt, jeans, coat, dress, sandals, boots, shoes, handbag, purse, backpack, ... "
    f"({_FASHION_WHY})",
}

#: EmojiImages classes (CLDR names) removed one by one -> reason
EMOJI_CLASSES: dict[str, str] = {
    "hundred points": f"draws 100 ({_DIGITS_WHY})",
    "1st place medal": f"draws 1 ({_DIGITS_WHY})",
    "2nd place medal": f"draws 2 ({_DIGITS_WHY})",
    "3rd place medal": f"draws 3 ({_DIGITS_WHY})",
    "pool 8 ball": f"draws 8 ({_DIGITS_WHY})",
    "slot machine": f"draws 777 ({_DIGITS_WHY})",
    "pager": f"draws 1998 ({_DIGITS_WHY})",
    "calendar": f"draws July 17 ({_DIGITS_WHY}; {_LETTERS_WHY})",
    "tear-off calendar": f"draws July 17 ({_DIGITS_WHY}; {_LETTERS_WHY})",
    "no one under eighteen": f"draws 18 ({_DIGITS_WHY})",
    "repeat single button": f"draws 1 ({_DIGITS_WHY})",
    "ATM sign": f"draws ATM ({_LETTERS_WHY})",
    "water closet": f"draws WC ({_LETTERS_WHY})",
    "copyright": f"draws a C ({_LETTERS_WHY})",
    "mobile phone off": f"draws OFF ({_LETTERS_WHY})",
    "luggage": f"a suitcase ({_FASHION_WHY})",
    "briefcase": f"a bag ({_FASHION_WHY})",
    "money bag": f"a bag ({_FASHION_WHY})",
    "baggage claim": f"draws a suitcase ({_FASHION_WHY})",
    "left luggage": f"draws a suitcase ({_FASHION_WHY})",
    "running shirt": f"a shirt ({_FASHION_WHY})",
    "martial arts uniform": f"a jacket and trousers ({_FASHION_WHY})",
    "ice skate": f"a boot ({_FASHION_WHY})",
    "roller skate": f"a boot ({_FASHION_WHY})",
    "skis": f"draws a ski boot ({_FASHION_WHY})",
}

_HOURS = "one two three four five six seven eight nine ten eleven twelve".split()
_CLOCK = "a clock face with hands and no numerals"
#: EmojiImages names that mention a concept word but were checked to draw none -> what they draw
EMOJI_REVIEWED: dict[str, str] = {
    **{f"{h} o’clock": _CLOCK for h in _HOURS},
    **{f"{h}-thirty": _CLOCK for h in _HOURS},
    "eight-spoked asterisk": "an asterisk",
    "eight-pointed star": "a star",
    "dotted six-pointed star": "a star",
    "two hearts": "two hearts",
    "two-hump camel": "a camel",
    "four leaf clover": "a clover leaf",
    "face blowing a kiss": "a face ('a' is the article)",
    "love letter": "a closed envelope with a heart, no text",
    "latin cross": "a cross",
    "diamond with a dot": "a diamond shape ('a' is the article)",
    "flag: Hong Kong SAR China": "a flag with a bauhinia flower, no text",
    "flag: Macao SAR China": "a flag with a lotus, no text",
    "one-piece swimsuit": "(clothing subgroup: removed with it)",
}

_NUMERAL_NAME = re.compile(r"\b(DIGIT|NUMBER|NUMERAL)\b")
_LATIN_A_TO_J = re.compile(
    r"^(?:FULLWIDTH )?LATIN (?:CAPITAL |SMALL )?(?:LETTER|LIGATURE) (?:SMALL CAPITAL )?"
    r"(?:(?:TURNED|REVERSED|INVERTED|CLOSED|SIDEWAYS|DOTLESS|BARRED|OPEN|SCRIPT) )*([A-J])(?: |$)"
)
_A_TO_J = "ABCDEFGHIJ"
#: the numeral signs of Egyptian hieroglyphs (Gardiner 1957, Egyptian Grammar, section 259 and sign list), by
#: their Gardiner numbers in the Unicode names (no Unicode numeric value): the strokes 1-9 (Z015-Z015I
#: upright, Z016-Z016H lying, as in dates), and every sign that Unicode's NamesList.txt annotates with a
#: number: 10s (hobble V020-V020L; V040, V040A in dates), 100s (coil V001-V001I), 1,000s (lotus
#: M012-M012H), 10,000s (finger D050-D050I), 100,000 (tadpole I008), 1,000,000 (Heh C011) and the fractions
#: 1/2-1/64 (D011-D016, the parts of the eye of Horus)
_EGYPTIAN_NUMERAL = re.compile(
    r"^EGYPTIAN HIEROGLYPH (?:Z015[A-I]?|Z016[A-H]?|V020[A-L]?|V040A?|V001[A-I]?|M012[A-H]?|D050[A-I]?"
    r"|I008|C011|D01[1-6])$"
)
#: the pools that are filtered (meta-training and meta-validation)
EXCLUDED_SPLITS = ("train", "val")


def emoji_exclusion(name: str, subgroup: str) -> str | None:
    """Why an EmojiImages class (CLDR ``name``, e.g. ``"keycap: 7"``, and its emoji-test ``subgroup``)
    must stay out of meta-training and meta-validation, or ``None`` when it may be used."""
    if subgroup in EMOJI_SUBGROUPS:
        return f"subgroup {subgroup}: {EMOJI_SUBGROUPS[subgroup]}"
    return EMOJI_CLASSES.get(name)


def glyph_exclusion(codepoint: int) -> str | None:
    """Why a FontGlyphs class (a letter ``codepoint``) must stay out of meta-training and
    meta-validation, or ``None`` when it may be used: a numeral of any script (a numeric value, a DIGIT /
    NUMBER / NUMERAL name, an Egyptian numeral sign), or a Latin letter A-J."""
    ch = chr(codepoint)
    name = unicodedata.name(ch, "")
    if unicodedata.numeric(ch, None) is not None or _NUMERAL_NAME.search(name):
        return f"a numeral ({_DIGITS_WHY})"
    if _EGYPTIAN_NUMERAL.match(name):
        return f"an Egyptian numeral sign ({_DIGITS_WHY})"
    m = _LATIN_A_TO_J.match(name)
    if m:
        return f"the Latin letter {m.group(1)} ({_LETTERS_WHY})"
    parts = [c for c in unicodedata.normalize("NFKD", ch) if c.upper() in _A_TO_J]
    if parts and "LATIN" in name:  # ligatures and digraphs: IJ, DZ, ...
        return f"the Latin letter {parts[0].upper()} ({_LETTERS_WHY})"
    return None


#: side of the shape vectors the image rule compares (scikit-learn's digits are 8 x 8)
CONCEPT_RES = 8
#: the slants (shears, top leaning right for > 0) at which every template shape is compared
CONCEPT_SLANTS = (-0.4, -0.2, 0.0, 0.2, 0.4)
#: an image whose shape vector correlates at least this much with a benchmark template shows its concept:
#: the 10th percentile of the correlation of Split-Digits' own 1,797 images with their own digit's best
#: template. At it the rule flags 96 % of Split-Digits' images (90 % by a template of their own digit)
#: and 99.7 % of FontLetters' letters (``tests/data/test_handwriting.py`` checks these rates)
CONCEPT_NCC = 0.65
#: the threshold of the image rule on the printed sources (FontGlyphs, EmojiImages), by the same recipe on
#: printed shapes: the 10th percentile (0.783, rounded down) of the correlation of real digits 0-9 and
#: capitals A-J with their own character's best template, drawn by the 44 installed fonts that cover them
#: and are not template fonts (Noto Sans / Serif italics, Noto Sans / Serif Display, DejaVu obliques,
#: condensed, ExtraLight and Mono cuts, STIX, Computer Modern, ...; LastResort's boxes, cmex10's
#: delimiters and cmsy10's symbol digits left out: 870 font x character classes) as FontGlyphs draws a
#: class (``_render.examples_job``: 20 distorted renders at 64 px, box-averaged to 32 px; 17,400 images;
#: 5th / 25th / 50th percentiles 0.74 / 0.85 / 0.90; ``scripts/printed_concept_threshold.py``). At it the
#: rule flags 90 % of these images by a template of their own character, 93 % by any template, and 856 of
#: the 870 classes (half of their examples; 13 of the 14 below it are Computer Modern's, 6 of them cmsy10's
#: calligraphic capitals). :data:`CONCEPT_NCC` (0.65) is the threshold for handwritten shapes
PRINTED_CONCEPT_NCC = 0.78
_INK_FRACTION = 0.2  # pixels >= 20 % of an image's maximum span its ink bounding box
_TEMPLATE_RES = 64  # font templates are rendered at 64 px (``_render.clean_render``)


@functools.cache
def _area_weights(side: int, res: int) -> np.ndarray:
    """float64 ``[res, side]``: the share of each of ``side`` unit pixels in each of ``res`` equal cells
    (area averaging, PIL's box filter when shrinking)."""
    edges = np.arange(res + 1) * (side / res)
    lo, hi = np.arange(side)[None, :], np.arange(1, side + 1)[None, :]
    overlap = np.clip(np.minimum(hi, edges[1:, None]) - np.maximum(lo, edges[:-1, None]), 0.0, None)
    return overlap / overlap.sum(1, keepdims=True)


def ink_vectors(images: np.ndarray, res: int = CONCEPT_RES) -> np.ndarray:
    """Position- and size-normalised shape vectors of grayscale images (white ink on black).

    Each image is cropped to its ink bounding box (pixels >= 20 % of its maximum), padded to a square
    (centred, aspect kept), area-averaged to ``res x res`` and made zero-mean and unit-norm, so the dot
    product of two vectors is the Pearson correlation of the two normalised images (their normalised
    cross-correlation).

    Args:
        images: ``[N, H, W]`` array of any real dtype (uint8 0..255 or float).
        res: side of the normalised image.

    Returns:
        float32 ``[N, res * res]``; the zero vector for an image without ink or contrast.

    Raises:
        ValueError: for an array that is not ``[N, H, W]`` or a ``res`` < 2.
    """
    imgs = np.asarray(images, dtype=np.float32)
    if imgs.ndim != 3 or 0 in imgs.shape[1:]:
        raise ValueError(f"images: expected a grayscale array [N, H, W], given shape {tuple(imgs.shape)}")
    if isinstance(res, bool) or not isinstance(res, int) or res < 2:
        raise ValueError(f"res: expected an int >= 2, given {res!r}")
    out = np.zeros((len(imgs), res * res), dtype=np.float32)
    peaks = imgs.reshape(len(imgs), -1).max(1)
    for i in np.flatnonzero(peaks > 0):
        img = imgs[i]
        ink = img >= _INK_FRACTION * peaks[i]
        rows, cols = np.flatnonzero(ink.any(1)), np.flatnonzero(ink.any(0))
        crop = img[rows[0] : rows[-1] + 1, cols[0] : cols[-1] + 1]
        h, w = crop.shape
        side = max(h, w)
        square = np.zeros((side, side), dtype=np.float64)
        square[(side - h) // 2 : (side - h) // 2 + h, (side - w) // 2 : (side - w) // 2 + w] = crop
        a = _area_weights(side, res)
        v = (a @ square @ a.T).ravel()
        v -= v.mean()
        norm = np.linalg.norm(v)
        if norm > 1e-9 * float(peaks[i]):
            out[i] = v / norm
    return out


def _slanted(image: np.ndarray, slant: float) -> np.ndarray:
    """``image`` ``[H, W]`` on a canvas padded by a quarter of its side, sheared so that its top leans
    right by ``slant`` (x moves by ``-slant * (y - centre)``); float32."""
    from PIL import Image

    h, w = image.shape
    pad = max(h, w) // 4
    canvas = np.zeros((h + 2 * pad, w + 2 * pad), dtype=np.float32)
    canvas[pad : pad + h, pad : pad + w] = image
    im = Image.fromarray(canvas, mode="F")
    ch = canvas.shape[0]
    data = (1.0, slant, -slant * ch / 2, 0.0, 1.0, 0.0)  # output (x, y) <- input (x + slant (y - ch/2), y)
    return np.asarray(im.transform(im.size, Image.Transform.AFFINE, data, resample=Image.Resampling.BILINEAR))


@functools.cache
def concept_templates() -> tuple[np.ndarray, tuple[str, ...]]:
    """The benchmark templates of the image rule: ``(float32 [T, CONCEPT_RES**2] shape vectors, names)``.

    Base shapes, each at the slants :data:`CONCEPT_SLANTS` (handwriting leans; the Handwriting writers
    slant by up to 0.35):

    - the 10 class means of scikit-learn's ``load_digits`` (1,797 images, 8 x 8; Split-Digits itself),
      upsampled 8x (nearest) before slanting, named ``"digit 7 (scikit-learn digits mean, slant +0.2)"``;
    - the digits 0-9 (Split-MNIST, ColourDigits) and the capitals A-J (FontLetters) rendered by each
      Latin font that FontLetters and ColourDigits draw them with (NotoSans/NotoSerif Regular and Bold,
      matplotlib's DejaVu fonts), named ``"letter C (NotoSerif-Bold.ttf, slant -0.4)"``.

    Raises:
        FileNotFoundError: when no Latin font covers a digit or letter (``fonts-noto-core``).
    """
    from sklearn.datasets import load_digits

    from .sources._render import clean_render
    from .sources.font_classes import DIGITS, LETTERS, _latin_fonts

    data = load_digits()
    shapes = [np.kron(data.images[data.target == d].mean(0), np.ones((8, 8))) for d in range(10)]
    names = [f"digit {d} (scikit-learn digits mean" for d in range(10)]
    fonts = _latin_fonts(DIGITS + LETTERS)
    for cp in DIGITS + LETTERS:
        kind = "digit" if cp in DIGITS else "letter"
        for font in fonts[cp]:
            img = clean_render(font.path, cp, _TEMPLATE_RES)
            if img is not None:
                shapes.append(np.asarray(img, dtype=np.float32))
                names.append(f"{kind} {chr(cp)} ({Path(font.path).name}")
    vectors, labels = [], []
    for slant in CONCEPT_SLANTS:
        vectors.append(ink_vectors(np.stack([_slanted(x, slant) for x in shapes])))
        labels += [f"{n}, slant {slant:+.1f})" for n in names]
    return np.concatenate(vectors), tuple(labels)


def concept_rule_key() -> dict:
    """What the image rule depends on (thresholds, resolution, template fonts): part of the cache key of
    a source that applies it while it is built (:mod:`fastweights.data.sources.handwriting`)."""
    from .sources._fonts import font_fingerprint
    from .sources.font_classes import DIGITS, LETTERS, _latin_fonts

    fonts = {f.path: f for fs in _latin_fonts(DIGITS + LETTERS).values() for f in fs}
    return {
        "res": CONCEPT_RES,
        "ncc": CONCEPT_NCC,
        "slants": CONCEPT_SLANTS,
        "ink_fraction": _INK_FRACTION,
        "template_res": _TEMPLATE_RES,
        "fonts": font_fingerprint(sorted(fonts.values(), key=lambda f: f.rank)),
    }


def benchmark_lookalikes(images: np.ndarray, ncc: float = CONCEPT_NCC) -> list[str | None]:
    """The benchmark concept each image shows by the image rule, or ``None``.

    Rule: an image shows a concept when its :func:`ink_vectors` shape vector (ink cropped, fitted into
    8 x 8) correlates at least :data:`CONCEPT_NCC` with a template of :func:`concept_templates`
    (scikit-learn digit means; digits 0-9 and letters A-J of the Latin fonts): a nearest-template test
    with, by default, the threshold at which 90 % of Split-Digits' own images are flagged (handwriting;
    :data:`PRINTED_CONCEPT_NCC` for printed images). The reason names the best template and the
    correlation.

    Args:
        images: ``[N, H, W]`` grayscale images, white ink on black (any real dtype).
        ncc: the threshold (:data:`PRINTED_CONCEPT_NCC` for printed images).

    Returns:
        a list of N reasons like ``"looks like digit 7 (NotoSans-Bold.ttf): r = 0.83 >= 0.65 (digits 0-9
        ...)"``, or ``None`` where the best correlation is below ``ncc``.

    Raises:
        ValueError: from :func:`ink_vectors`; FileNotFoundError: from :func:`concept_templates`.
    """
    best, names = _best_templates(images)
    return [None if r < ncc else _reason(names[j], r, ncc) for j, r in best]


def _best_templates(images: np.ndarray) -> tuple[list[tuple[int, float]], tuple[str, ...]]:
    templates, names = concept_templates()
    ncc = ink_vectors(images) @ templates.T
    best = ncc.argmax(1)
    return [(int(j), float(ncc[i, j])) for i, j in enumerate(best)], names


def _reason(name: str, r: float, ncc: float) -> str:
    why = _LETTERS_WHY if name.startswith("letter") else _DIGITS_WHY
    return f"looks like {name}: r = {r:.2f} >= {ncc} ({why})"


def examples_lookalike(examples: np.ndarray, ncc: float = CONCEPT_NCC) -> str | None:
    """Whether a class, given by its examples, shows a benchmark concept: at least half of them do by
    :func:`benchmark_lookalikes` (the upper median over the examples of their best template correlation
    is >= ``ncc``). Returns the reason, naming the median example's best template, or ``None``.

    Args:
        examples: ``[M, H, W]`` grayscale images of one class (``M >= 1``).
        ncc: the threshold (:data:`PRINTED_CONCEPT_NCC` for printed images).
    """
    return _class_reasons(np.asarray(examples)[None], ncc)[0]


def _class_reasons(classes: np.ndarray, ncc: float) -> list[str | None]:
    """:func:`examples_lookalike` of every class of ``[C, M, H, W]`` (one template product for all)."""
    c, m = classes.shape[:2]
    if c == 0 or m == 0:
        return [None] * c
    best, names = _best_templates(classes.reshape(c * m, *classes.shape[2:]))
    out: list[str | None] = []
    for k in range(c):
        j, r = sorted(best[k * m : (k + 1) * m], key=lambda jr: jr[1])[m // 2]
        out.append(None if r < ncc else f"its median example {_reason(names[j], r, ncc)}")
    return out


def ink_images(images: np.ndarray, channels: int) -> np.ndarray:
    """The "ink" of images as grayscale, white on black (what :func:`ink_vectors` reads): float32.

    Grayscale images (``channels == 1``, ``[..., S, S]``) are ink on a black background already and
    come back as they are. RGB images (``channels == 3``, ``[..., 3, S, S]``; EmojiImages: a picture
    pasted on a uniform background of a random colour, ``_emoji_build.examples``) become ``[..., S, S]``:
    the Euclidean distance in RGB of each pixel from the image's background colour, scaled so that 255
    is the largest possible distance (255 * sqrt(3)). That is an alpha-like coverage, 0 on the
    background and high wherever the picture is drawn, whatever the colours of either. The background
    colour is the per-channel median of the image's outermost ring of pixels (mostly background: the
    picture is fitted inside the image).

    Raises:
        ValueError: for ``channels`` other than 1 and 3, or an array without its image axes.
    """
    x = np.asarray(images, dtype=np.float32)
    if channels not in (1, 3) or x.ndim < (3 if channels == 1 else 4) or (channels == 3 and x.shape[-3] != 3):
        raise ValueError(
            f"images: expected [..., S, S] (channels 1) or [..., 3, S, S] (channels 3), given shape "
            f"{tuple(x.shape)} with channels {channels!r}"
        )
    if channels == 1:
        return x
    ring = np.concatenate([x[..., 0, :], x[..., -1, :], x[..., 1:-1, 0], x[..., 1:-1, -1]], axis=-1)
    background = np.median(ring, axis=-1)[..., None, None]  # [..., 3, 1, 1]
    return np.sqrt(((x - background) ** 2).sum(-3)) * np.float32(1.0 / np.sqrt(3.0))


def pool_lookalikes(pool: ClassPool, chunk: int = 256, ncc: float = CONCEPT_NCC) -> list[str | None]:
    """:func:`examples_lookalike` (threshold ``ncc``) of every class of a grayscale or RGB ``pool`` (RGB
    through :func:`ink_images`), ``chunk`` classes at a time: why each class shows a benchmark concept,
    or ``None``."""
    from threadpoolctl import threadpool_limits

    out: list[str | None] = []
    with threadpool_limits(1, user_api="blas"):  # small products: threads cost more than they give
        for i in range(0, pool.num_classes, chunk):
            out += _class_reasons(ink_images(pool.images[i : i + chunk], pool.channels), ncc)
    return out


def handwriting_exclusion(pool: ClassPool) -> list[str | None]:
    """Why each class of a Handwriting pool must stay out of meta-training and meta-validation, or
    ``None``: :func:`examples_lookalike` of its examples (writers).

    The Handwriting build already drops the candidates whose clean render or writers show a concept,
    so on a pool it built this removes nothing; it guards the rule on pools made otherwise (an older
    cache, other settings). Raises ``ValueError`` for an RGB pool.
    """
    if pool.channels != 1:
        raise ValueError(f"{pool.name}: expected a grayscale pool [C, M, S, S], given {pool.images.shape}")
    return pool_lookalikes(pool)


_SUFFIX = re.compile(r"^(.*) \((U\+[0-9A-F]{4,6})(?: U\+[0-9A-F]{4,6})*\)$")


def _split_name(class_name: str) -> tuple[str, int]:
    """``"grinning face (U+1F600)"`` -> ``("grinning face", 0x1F600)`` (the first code point)."""
    m = _SUFFIX.match(class_name)
    if m is None:
        raise ValueError(f"class_names: expected 'NAME (U+XXXX ...)', given {class_name!r}")
    return m.group(1), int(m.group(2)[2:], 16)


def _by_name(rule: Callable[[str, int, str], str | None]) -> Callable[[ClassPool], list[str | None]]:
    """A pool rule from a rule over (name, first code point, alphabet) of each class."""

    def reasons(pool: ClassPool) -> list[str | None]:
        return [rule(*_split_name(c), a) for c, a in zip(pool.class_names, pool.alphabets, strict=True)]

    return reasons


def _and_image_rule(
    by_name: Callable[[ClassPool], list[str | None]],
) -> Callable[[ClassPool], list[str | None]]:
    """A pool rule that applies ``by_name`` and, to the classes it keeps, :func:`pool_lookalikes` at the
    printed sources' threshold :data:`PRINTED_CONCEPT_NCC`."""

    def reasons(pool: ClassPool) -> list[str | None]:
        named = by_name(pool)
        return [n or i for n, i in zip(named, pool_lookalikes(pool, ncc=PRINTED_CONCEPT_NCC), strict=True)]

    return reasons


#: source -> why each class of one of its pools is left out (None: kept)
_RULES: dict[str, Callable[[ClassPool], list[str | None]]] = {
    "emoji": _and_image_rule(_by_name(lambda name, codepoint, alphabet: emoji_exclusion(name, alphabet))),
    "fontglyphs": _and_image_rule(_by_name(lambda name, codepoint, alphabet: glyph_exclusion(codepoint))),
    "handwriting": lambda pool: handwriting_exclusion(pool),
}

_IMAGE_RULE = (
    f"and the classes half of whose examples correlate >= {PRINTED_CONCEPT_NCC} (ink cropped and fitted into "
    "8 x 8) with a digit 0-9 or capital A-J template"
)
#: source -> the rule :func:`exclude_benchmark_concepts` applies to its meta-training / -validation pools
EXCLUSION_RULES: dict[str, str] = {
    "emoji": "the subgroups keycap, alphanum and clothing, the named classes that draw digits, letters "
    f"or wearables (EMOJI_CLASSES), {_IMAGE_RULE} (ink: RGB distance from the background colour)",
    "fontglyphs": "every code point with a numeric value or a DIGIT / NUMBER / NUMERAL name, the Egyptian "
    f"numeral signs, the Latin letters whose base letter is A-J, {_IMAGE_RULE}",
    "handwriting": "classes whose clean render or half of whose writers correlate >= "
    f"{CONCEPT_NCC} (8 x 8 ink) with a digit 0-9 or capital A-J template",
}


def exclude_benchmark_concepts(source: str, pools: dict[str, ClassPool]) -> dict[str, ClassPool]:
    """``pools`` of the source ``source`` without the classes that show a test benchmark's concept, in
    its ``train`` and ``val`` pools; other sources and the ``test`` pool are returned unchanged. Pixel
    statistics stay those of the built pools (normalisation constants). The removed classes are logged
    with their count per reason.

    Raises:
        ValueError: for a FontGlyphs or EmojiImages class name without its ``(U+XXXX)`` suffix.
    """
    rule = _RULES.get(source)
    if rule is None:
        return pools
    out = dict(pools)
    for split in EXCLUDED_SPLITS:
        pool = pools[split]
        reasons = rule(pool)
        keep = [i for i, r in enumerate(reasons) if r is None]
        if len(keep) == pool.num_classes:
            continue
        out[split] = replace(
            pool,
            images=pool.images[np.asarray(keep, dtype=np.int64)],
            class_names=[pool.class_names[i] for i in keep],
            alphabets=[pool.alphabets[i] for i in keep],
        )
        dropped = [r for r in reasons if r is not None]
        log.info(
            "%s: %d of %d classes left out (test-benchmark concepts, fastweights.data.concepts): %s",
            pool.name,
            len(dropped),
            pool.num_classes,
            "; ".join(f"{n} x {r}" for r, n in Counter(dropped).most_common()),
        )
    return out
