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
  faces have hands and no numerals).
- **FontGlyphs** (:func:`glyph_exclusion`): every code point with a numeric value or a name with DIGIT,
  NUMBER or NUMERAL (U+4E00 "一" is the Han numeral one; Arabic letters with a digit above), and the
  Latin letters whose base letter is A–J in either case (``LATIN SMALL LETTER B WITH TOPBAR``).
  FontGlyphs classes are letters only (Unicode Lu/Ll/Lt/Lo) and Latin look-alikes of other scripts are
  already removed when it is built.

Not covered: the paper's real benchmarks (Omniglot's Latin alphabet, Mini-ImageNet's classes) come from
the user's folders and are used as they are.
"""

from __future__ import annotations

import logging
import re
import unicodedata
from collections import Counter
from dataclasses import replace

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
    "EXCLUDED_SPLITS",
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
    meta-validation, or ``None`` when it may be used: a numeral of any script, or a Latin letter A-J."""
    ch = chr(codepoint)
    name = unicodedata.name(ch, "")
    if unicodedata.numeric(ch, None) is not None or _NUMERAL_NAME.search(name):
        return f"a numeral ({_DIGITS_WHY})"
    m = _LATIN_A_TO_J.match(name)
    if m:
        return f"the Latin letter {m.group(1)} ({_LETTERS_WHY})"
    parts = [c for c in unicodedata.normalize("NFKD", ch) if c.upper() in _A_TO_J]
    if parts and "LATIN" in name:  # ligatures and digraphs: IJ, DZ, ...
        return f"the Latin letter {parts[0].upper()} ({_LETTERS_WHY})"
    return None


_SUFFIX = re.compile(r"^(.*) \((U\+[0-9A-F]{4,6})(?: U\+[0-9A-F]{4,6})*\)$")


def _split_name(class_name: str) -> tuple[str, int]:
    """``"grinning face (U+1F600)"`` -> ``("grinning face", 0x1F600)`` (the first code point)."""
    m = _SUFFIX.match(class_name)
    if m is None:
        raise ValueError(f"class_names: expected 'NAME (U+XXXX ...)', given {class_name!r}")
    return m.group(1), int(m.group(2)[2:], 16)


#: source -> why one of its classes (name, first code point, alphabet) is left out, or None
_RULES = {
    "emoji": lambda name, codepoint, alphabet: emoji_exclusion(name, alphabet),
    "fontglyphs": lambda name, codepoint, alphabet: glyph_exclusion(codepoint),
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
        reasons = [rule(*_split_name(c), a) for c, a in zip(pool.class_names, pool.alphabets, strict=True)]
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
