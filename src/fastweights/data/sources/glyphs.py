"""FontGlyphs: an Omniglot-like few-shot set of letters rendered from installed fonts.

Design (measured numbers in ``docs/results.md``): alphabet = script (from the Noto
font file name; Latin/Greek/Cyrillic from NotoSans/NotoSerif/DejaVu), class = a letter code point
(Unicode Lu/Ll/Lt/Lo), examples = the glyph drawn by random "drawers" (font choice among up to 6
fonts, stroke-width change, random affine map). Look-alike glyphs are removed with a 64-bit DCT
perceptual hash and, for held-out classes against meta-train ones, also by the normalised
cross-correlation of 16 x 16 shape vectors; the split into meta-train / validation / test is by
alphabet, and every split is normalised with the meta-train pixel statistics.
Everything is deterministic for a given ``seed`` and cached on disk (npz + json info).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import unicodedata
import zipfile
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from fastweights.checks import check_count
from fastweights.io import atomic_write_text, atomic_write_with

from ._cache import default_cache_dir
from ._fonts import discover_fonts, font_fingerprint
from ._glyph_build import FILTERS, SPLITS, GlyphConfig, build_glyphs
from .base import ClassPool

__all__ = ["load_font_glyphs", "font_glyphs_info", "default_cache_dir", "SPLITS"]

log = logging.getLogger(__name__)
CACHE_VERSION = 2  # bump whenever rendering or filtering changes: it is part of the cache key
# 2: train pixel statistics for every split; held-out shape-correlation filter (``LEAKAGE_NCC``)


def _check_split_arg(name: str, value: object) -> float | tuple[str, ...]:
    if isinstance(value, (int, float)) and not isinstance(value, bool) and 0.0 <= value < 1.0:
        return float(value)
    if isinstance(value, Sequence) and not isinstance(value, str) and all(isinstance(v, str) for v in value):
        return tuple(value)
    raise ValueError(f"{name}: expected a fraction in [0, 1) or a list of script names, given {value!r}")


def _class_name(cp: int) -> str:
    return f"{unicodedata.name(chr(cp), 'UNNAMED')} (U+{cp:04X})"


def _pools(arrays: Any) -> dict[str, ClassPool]:
    pools = {}
    mean, std = (float(v) for v in arrays["stats"])  # train statistics, used for every split
    for split in SPLITS:
        cps = [int(c) for c in arrays[f"{split}_codepoints"]]
        pools[split] = ClassPool(
            name=f"FontGlyphs/{split}",
            images=arrays[f"{split}_images"],
            class_names=[_class_name(c) for c in cps],
            alphabets=[str(a) for a in arrays[f"{split}_alphabets"]],
            mean=mean,
            std=std,
        )
    return pools


def _resolve(
    image_size: int,
    examples_per_class: int,
    max_classes_per_script: int,
    max_scripts: int | None,
    font_dirs: Sequence[str | os.PathLike] | None,
    seed: int,
    cache_dir: str | os.PathLike | None,
    workers: int,
    val_scripts: Any,
    test_scripts: Any,
) -> tuple[GlyphConfig, list, Path]:
    check_count("image_size", image_size, 8, 512)
    check_count("examples_per_class", examples_per_class, 1)
    check_count("max_classes_per_script", max_classes_per_script, 1)
    if max_scripts is not None:
        check_count("max_scripts", max_scripts, 1)
    check_count("seed", seed, 0)
    check_count("workers", workers, 1)
    val, test = _check_split_arg("val_scripts", val_scripts), _check_split_arg("test_scripts", test_scripts)
    if isinstance(val, float) and isinstance(test, float) and val + test >= 1.0:
        raise ValueError(f"val_scripts + test_scripts: expected a sum < 1, given {val} + {test}")
    cfg = GlyphConfig(
        int(image_size),
        int(examples_per_class),
        int(max_classes_per_script),
        None if max_scripts is None else int(max_scripts),
        int(seed),
        val,
        test,
    )
    fonts = discover_fonts(None if font_dirs is None else [str(d) for d in font_dirs])
    key_src = json.dumps(
        {
            "version": CACHE_VERSION,
            "config": asdict(cfg),
            "filters": FILTERS,
            "fonts": font_fingerprint(fonts),
        },
        sort_keys=True,
    )
    key = hashlib.sha256(key_src.encode()).hexdigest()[:16]
    folder = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    return cfg, fonts, folder / f"font_glyphs-{key}.npz"


def _load_or_build(
    cfg: GlyphConfig, fonts: list, path: Path, workers: int, progress: bool
) -> dict[str, ClassPool]:
    if path.exists():
        try:
            with np.load(path, allow_pickle=False) as z:
                return _pools({k: z[k] for k in z.files})
        except (
            OSError,
            ValueError,
            KeyError,
            EOFError,
            zipfile.BadZipFile,
        ) as err:  # corrupt or stale file: rebuild it
            log.warning("ignoring unreadable glyph cache %s (%s); rebuilding", path, err)
    arrays, info = build_glyphs(cfg, fonts, workers, progress)
    info = {"config": asdict(cfg), **info}
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path.with_suffix(".json"), json.dumps(info, indent=1))
    atomic_write_with(path, lambda f: np.savez(f, **arrays), mode=0o644)
    log.info("FontGlyphs built in %.1f s -> %s", info["build_seconds"], path)
    return _pools(arrays)


def load_font_glyphs(
    *,
    image_size: int = 32,
    examples_per_class: int = 20,
    max_classes_per_script: int = 80,
    max_scripts: int | None = None,
    font_dirs: Sequence[str | os.PathLike] | None = None,
    seed: int = 0,
    cache_dir: str | os.PathLike | None = None,
    workers: int = 2,
    val_scripts: float | Sequence[str] = 0.15,
    test_scripts: float | Sequence[str] = 0.25,
    progress: bool = True,
) -> dict[str, ClassPool]:
    """Render (or load from cache) the FontGlyphs few-shot set, split by alphabet.

    Returns ``{"train", "val", "test"}`` -> :class:`ClassPool` with ``images`` uint8
    ``[C, examples_per_class, image_size, image_size]`` (white ink on black), ``class_names``
    (Unicode name and code point) and ``alphabets`` (script of each class); ``mean``/``std`` are the
    pixel statistics of the train images (``images / 255``) in all three pools. Source: the glyph set
    of ``docs/results.md``, an Omniglot-like substitute for the Omniglot background/evaluation split
    (Lake et al. 2015).

    - Fonts: Noto ``.ttf``/``.otf`` files in ``font_dirs`` (default ``/usr/share/fonts/{truetype,
      opentype}/noto``) plus matplotlib's DejaVu fonts; at most ``max_classes_per_script`` classes
      per script and, if given, ``max_scripts`` scripts (Latin/Greek/Cyrillic kept first).
    - Splits: ``val_scripts``/``test_scripts`` are fractions of the non-Latin/Greek/Cyrillic
      scripts drawn with ``seed`` (at least one each when >= 3 such scripts exist) or explicit
      script names; Latin, Greek and Cyrillic are always meta-train. A held-out class is dropped when
      its clean render looks like a meta-train class's: DCT hashes within 6 bits, or 16 x 16 shape
      vectors correlating >= 0.88 (``_glyph_build.LEAKAGE_NCC``, chosen by inspection of pairs).
    - Cache: ``cache_dir`` (default ``$FASTWEIGHTS_CACHE`` or ``~/.cache/fastweights``) holds
      ``font_glyphs-<hash>.npz`` and a ``.json`` info, keyed by all arguments except ``workers``,
      ``cache_dir`` and ``progress``, by the font file list, the filter thresholds and
      ``CACHE_VERSION``; the output does not depend on ``workers``.

    Raises ``ValueError`` on bad arguments (name, expected, given) and ``FileNotFoundError`` when
    no font is found.
    """
    cfg, fonts, path = _resolve(
        image_size,
        examples_per_class,
        max_classes_per_script,
        max_scripts,
        font_dirs,
        seed,
        cache_dir,
        workers,
        val_scripts,
        test_scripts,
    )
    return _load_or_build(cfg, fonts, path, int(workers), progress)


def font_glyphs_info(**kwargs: Any) -> dict:
    """The json info of the FontGlyphs build for these :func:`load_font_glyphs` arguments.

    Keys: ``config``, ``fonts``, ``catalog_classes``, ``candidates``, ``dropped`` (``no_ink``,
    ``lgc_lookalike``, ``duplicate``, ``leakage`` (by hash), ``leakage_shape`` (by shape correlation,
    beyond the hash)), ``splits`` (per split: ``num_scripts``, ``num_classes``, ``scripts`` -> class
    count), ``normalisation`` (``source`` = ``"train"``, ``mean``, ``std``), ``build_seconds``. Builds
    the set if needed.
    """
    params = {
        "image_size": 32,
        "examples_per_class": 20,
        "max_classes_per_script": 80,
        "max_scripts": None,
        "font_dirs": None,
        "seed": 0,
        "cache_dir": None,
        "workers": 2,
        "val_scripts": 0.15,
        "test_scripts": 0.25,
    }
    unknown = set(kwargs) - set(params) - {"progress"}
    if unknown:
        raise ValueError(f"font_glyphs_info: expected arguments of load_font_glyphs, given {sorted(unknown)}")
    progress = bool(kwargs.pop("progress", True))
    params.update(kwargs)
    cfg, fonts, path = _resolve(**params)
    info_path = path.with_suffix(".json")
    if not (path.exists() and info_path.exists()):
        if path.exists():
            path.unlink()
        _load_or_build(cfg, fonts, path, int(params["workers"]), progress)
    return json.loads(info_path.read_text())
