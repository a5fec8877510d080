"""Font discovery and the glyph catalog (script -> code points -> fonts) for :mod:`.glyphs`.

Alphabet = script, taken from the Noto font file name (``NotoSansArmenian-Bold.ttf`` -> Armenian).
Latin, Greek and Cyrillic letters come only from NotoSans/NotoSerif and matplotlib's DejaVu fonts.
Class = a code point of Unicode category Lu/Ll/Lt/Lo without a (canonical or compatibility)
decomposition, present in the font's cmap (read with fontTools, a matplotlib dependency).
"""

from __future__ import annotations

import functools
import os
import re
import unicodedata
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

LGC = ("Latin", "Greek", "Cyrillic")
DEFAULT_FONT_DIRS = ("/usr/share/fonts/truetype/noto", "/usr/share/fonts/opentype/noto")
DEJAVU_FILES = (
    "DejaVuSans.ttf",
    "DejaVuSans-Bold.ttf",
    "DejaVuSerif.ttf",
    "DejaVuSerif-Bold.ttf",
    "DejaVuSansMono.ttf",
)
MAX_FONTS_PER_CLASS = 6
_LETTER_CATEGORIES = frozenset({"Lu", "Ll", "Lt", "Lo"})
# Fonts whose "script" is not an alphabet (symbols, notation systems, numerals) or a display cut.
_SKIP_SCRIPTS = frozenset(
    {
        "Symbols",
        "Symbols2",
        "Math",
        "Music",
        "SignWriting",
        "Emoji",
        "ColorEmoji",
        "Display",
        "Mono",
        "IndicSiyaqNumbers",
        "MayanNumerals",
        "Mayan",
    }
)
_ALIASES = {"Urdu": "Arabic", "AdlamUnjoined": "Adlam", "TamilSupplement": "Tamil", "TamilSlanted": "Tamil"}
_NOTO_RE = re.compile(
    r"^Noto(?P<family>Sans|Serif|Kufi|Naskh|Nastaliq|Rashi|Looped|Traditional)(?P<script>[A-Za-z0-9]*)"
    r"(?:-(?P<style>[A-Za-z]+)|\[[^\]]*\])?\.(?:ttf|otf)$"
)
_FAMILY_RANK = {"Sans": 0, "Serif": 1}


@dataclass(frozen=True)
class FontFile:
    """One font file. ``script`` is None for Latin/Greek/Cyrillic families (NotoSans/Serif, DejaVu)."""

    path: str
    script: str | None
    dejavu: bool
    rank: tuple[int, int, int, str]  # canonical-font preference: (kind, family, bold, name)


def dejavu_dir() -> Path:
    """matplotlib's bundled TTF folder (always present when matplotlib is installed)."""
    import matplotlib

    return Path(matplotlib.get_data_path()) / "fonts" / "ttf"


def parse_noto_name(filename: str) -> tuple[str | None, int, bool] | None:
    """``(script or None for LGC, family rank, bold)`` for a usable Noto file name, else None."""
    m = _NOTO_RE.match(filename)
    if m is None:
        return None
    style = m.group("style") or "Regular"  # variable fonts ("[wght]") render their default instance
    if style not in ("Regular", "Bold"):
        return None
    raw = m.group("script")
    family = m.group("family")
    if raw == "":
        if family not in ("Sans", "Serif"):
            return None
        script = None
    else:
        script = "Tifinagh" if raw.startswith("Tifinagh") else _ALIASES.get(raw, raw)
        if script in _SKIP_SCRIPTS or raw in _SKIP_SCRIPTS or script.startswith("CJK"):
            return None
    return script, _FAMILY_RANK.get(family, 2), style == "Bold"


def discover_fonts(font_dirs: list[str] | tuple[str, ...] | None) -> list[FontFile]:
    """Noto fonts found in ``font_dirs`` (default: Debian's Noto folders) plus matplotlib's DejaVu.

    Raises ``FileNotFoundError`` naming the searched folders when no font is found at all.
    """
    dirs = [Path(d) for d in (DEFAULT_FONT_DIRS if font_dirs is None else font_dirs)]
    fonts: list[FontFile] = []
    for d in dirs:
        if not d.is_dir():
            continue
        for path in sorted(d.iterdir()):
            parsed = parse_noto_name(path.name)
            if parsed is not None:
                script, fam, bold = parsed
                kind = 0 if script is not None else 1  # script-specific fonts first
                fonts.append(FontFile(str(path), script, False, (kind, fam, int(bold), path.name)))
    ddir = dejavu_dir()
    for name in DEJAVU_FILES:
        path = ddir / name
        if path.is_file():
            fam = 0 if name.startswith("DejaVuSans") and "Mono" not in name else 1
            fonts.append(FontFile(str(path), None, True, (2, fam, int("Bold" in name), name)))
    if not fonts:
        searched = ", ".join(str(d) for d in [*dirs, ddir])
        raise FileNotFoundError(
            f"no usable font found: expected Noto*.ttf/.otf files in {searched} or matplotlib's DejaVu "
            f"fonts ({', '.join(DEJAVU_FILES)}); install them with `apt-get install fonts-noto-core`"
        )
    return fonts


def font_fingerprint(fonts: list[FontFile]) -> list[tuple[str, int]]:
    """(file name, size in bytes) of every font: part of the glyph cache key."""
    return [(os.path.basename(f.path), os.path.getsize(f.path)) for f in fonts]


@functools.lru_cache(maxsize=1024)
def _cmap(path: str, size: int, mtime: float) -> frozenset[int]:
    from fontTools.ttLib import TTFont

    with TTFont(path, lazy=True) as tt:
        cmap = tt.getBestCmap() or {}
    return frozenset(cmap)


def read_cmap(path: str) -> frozenset[int]:
    """Code points in the font's best cmap (cached per file path, size and mtime)."""
    st = os.stat(path)
    return _cmap(path, st.st_size, st.st_mtime)


@functools.cache
def letter_script_word(cp: int) -> str | None:
    """First word of the Unicode name of a usable letter (title case), or None if not a class."""
    ch = chr(cp)
    if unicodedata.category(ch) not in _LETTER_CATEGORIES or unicodedata.decomposition(ch):
        return None
    name = unicodedata.name(ch, "")
    return name.split(" ", 1)[0].title() if name else None


def _norm(s: str) -> str:
    return re.sub(r"[^a-z]", "", s.lower())


def build_catalog(fonts: list[FontFile]) -> dict[str, dict[int, list[str]]]:
    """``{script: {code point: [font paths, canonical font first, at most 6]}}``.

    A code point covered by fonts of several scripts goes to the script named by its Unicode name
    if any, else to the alphabetically first one. Without any Noto script font, DejaVu's non-LGC
    letters form scripts named by the first word of their Unicode name.
    """
    has_script_fonts = any(f.script is not None for f in fonts)
    owners: dict[int, set[str]] = defaultdict(set)
    covers: dict[int, list[FontFile]] = defaultdict(list)
    for font in fonts:
        for cp in read_cmap(font.path):
            word = letter_script_word(cp)
            if word is None:
                continue
            if word in LGC:
                if font.script is None:
                    owners[cp].add(word)
                    covers[cp].append(font)
                continue
            if font.script is not None:
                owners[cp].add(font.script)
            elif font.dejavu and not has_script_fonts:
                owners[cp].add(word)
            covers[cp].append(font)
    catalog: dict[str, dict[int, list[str]]] = defaultdict(dict)
    for cp, scripts in owners.items():
        word = letter_script_word(cp) or ""
        named = [s for s in scripts if _norm(s) == _norm(word)]
        script = named[0] if named else sorted(scripts)[0]
        usable = [f for f in covers[cp] if f.script == script or f.script is None]
        usable.sort(key=lambda f: f.rank)
        catalog[script][cp] = [f.path for f in usable[:MAX_FONTS_PER_CLASS]]
    return {s: dict(sorted(cps.items())) for s, cps in sorted(catalog.items())}
