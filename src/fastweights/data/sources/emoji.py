"""EmojiImages: an offline RGB few-shot set of emoji photographed on random backgrounds.

It plays the role of a natural-image few-shot benchmark in the offline presets (a colour domain
next to the grayscale FontGlyphs) while needing nothing but two Debian packages:

- Classes: one per fully-qualified emoji of Unicode's ``emoji-test.txt`` (Debian ``unicode-data``,
  :data:`EMOJI_TEST`), drawn by the Noto Color Emoji font (Debian ``fonts-noto-color-emoji``,
  :data:`EMOJI_FONT`; PIL draws its bitmaps at size 109 only, ``embedded_color=True``, Raqm shaping
  for ZWJ sequences, flags and keycaps). Dropped: the ``Component`` group (skin-tone and hair
  swatches); every skin-tone (U+1F3FB-1F3FF), hair-style (U+1F9B0-1F9B3) and gendered (ZWJ + ♀/♂)
  variant, in favour of its base emoji (``_emoji_build.base_key``), so "man running: medium skin
  tone" is not a class beside "person running"; emoji the installed font cannot draw as one glyph
  (blank render, or its parts side by side); and near-duplicate renders (correlation >= 0.99 of the
  32 x 32 renders with a class earlier in file order, ``_emoji_build.distinct_renders``: "flag:
  France" and "flag: St. Martin" draw "flag: Clipperton Island"'s tricolour, "black medium square" is
  "black large square" once fitted).
- Alphabets: the emoji-test subgroups (``face-smiling``, ``animal-bird``, ``country-flag``, ...).
  The meta-train / meta-val / meta-test split is by subgroup and ships as package data
  (``data/splits/emoji/{train,val,test}.json``, ``{group: [subgroup, ...]}``), made once by
  ``scripts/make_emoji_splits.py`` (:func:`._emoji_build.assign_subgroups`: ~70 / 10 / 20 % of each
  group's classes). A subgroup of the installed emoji-test.txt that the lists do not name (a newer
  Unicode version) is left out with a logged warning.
- Examples (``examples_per_class``): the clean render (fitted into 112 of 128 px) with a random
  scale (0.6-1.0), rotation (±25°) and shift (±12 %), pasted on a uniform random background colour,
  then with probability ``occlusion`` a random rectangle (25-50 % of each side) of the background
  colour or of uniform noise, then contrast (0.7-1.3) and brightness (0.75-1.25) jitter. All of it is
  deterministic for ``seed`` (per class from ``(seed, code points)``).

Measured (Debian bookworm: unicode-data 15.0.0-1, fonts-noto-color-emoji 2.042; seed 0, 32 px, 20
examples): 3,655 fully-qualified emoji, 1,899 variants dropped, 1,756 base emoji in 99 subgroups, all
drawable, 15 near-duplicates dropped -> 1,741 classes: train 1,291 (52 subgroups), val 145 (19), test
305 (28); built in 7.5 s of CPU on one core (1.3 s the clean renders, 0.3 s the near-duplicate check,
the rest the 34,820 examples; 13.8 s wall while other jobs shared the machine's 2 cores), cached as a
108 MB npz (uncompressed), loaded again in under 1 s.
See ``docs/results.md`` ("EmojiImages").
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

import numpy as np

from fastweights.checks import check_int, check_real

from . import _emoji_build as build
from ._cache import cache_key, default_cache_dir, files_fingerprint, load_or_build_npz
from ._pools import PoolParts, make_pools
from ._splits import SPLIT_NAMES, read_split
from .base import ClassPool

__all__ = ["load_emoji_images", "emoji_catalog", "emoji_subgroup_splits", "EMOJI_FONT", "EMOJI_TEST"]

log = logging.getLogger(__name__)
EMOJI_FONT = Path("/usr/share/fonts/truetype/noto/NotoColorEmoji.ttf")
EMOJI_TEST = Path("/usr/share/unicode/emoji/emoji-test.txt")
PACKAGES = {"font": "fonts-noto-color-emoji", "emoji_test": "unicode-data"}
CACHE_VERSION = 1  # bump whenever rendering or filtering changes: it is part of the cache key


def _require(path: Path, package: str) -> Path:
    if not path.is_file():
        raise FileNotFoundError(
            f"{path}: expected this file (install the Debian package {package}), found none"
        )
    return path


def emoji_catalog(emoji_test: Path | None = None) -> tuple[list[build.Emoji], int]:
    """The candidate classes of ``emoji_test`` (default :data:`EMOJI_TEST`): base emoji in file order
    and the number of variants dropped (:func:`._emoji_build.base_classes`).

    Raises ``FileNotFoundError`` naming the file and the Debian package ``unicode-data``.
    """
    path = _require(EMOJI_TEST if emoji_test is None else Path(emoji_test), PACKAGES["emoji_test"])
    return build.base_classes(build.parse_emoji_test(path))


def emoji_subgroup_splits() -> dict[str, str]:
    """The packaged split of the subgroups: ``{subgroup: "train" | "val" | "test"}``.

    Raises ``ValueError`` if a subgroup is listed in two splits or a file is not ``{group: [subgroup]}``.
    """
    out: dict[str, str] = {}
    for split in SPLIT_NAMES:
        tree = read_split("emoji", split)
        ok = isinstance(tree, dict) and all(
            isinstance(v, list) and all(isinstance(s, str) for s in v) for v in tree.values()
        )
        if not ok:
            raise ValueError(f"emoji/{split}.json: expected {{group: [subgroup, ...]}}, given {tree!r:.200}")
        for subs in tree.values():
            for s in subs:
                if s in out:
                    raise ValueError(f"emoji/{split}.json: subgroup {s!r} is already in the {out[s]} split")
                out[s] = split
    return out


def _build(cfg: build.EmojiConfig, font: Path, emoji_test: Path) -> dict[str, np.ndarray]:
    t0 = time.perf_counter()
    classes, n_variants = emoji_catalog(emoji_test)
    split_of = emoji_subgroup_splits()
    unknown = sorted({e.subgroup for e in classes} - set(split_of))
    if unknown:
        log.warning(
            "EmojiImages: subgroups %s of %s are in no packaged split (data/splits/emoji); left out",
            unknown,
            emoji_test,
        )
    classes = [e for e in classes if e.subgroup in split_of]
    if cfg.max_classes_per_subgroup is not None:
        seen: dict[str, int] = {}
        kept = []
        for e in classes:
            seen[e.subgroup] = seen.get(e.subgroup, 0) + 1
            if seen[e.subgroup] <= cfg.max_classes_per_subgroup:
                kept.append(e)
        classes = kept
    renders, drawn = [], []
    for e in classes:
        r = build.render_emoji(font, e.text)
        if r is not None:
            renders.append(r)
            drawn.append(e)
    n_blank = len(classes) - len(drawn)
    keep = build.distinct_renders(renders)
    n_dup = len(drawn) - len(keep)
    arrays: dict[str, np.ndarray] = {}
    size, m = cfg.image_size, cfg.examples_per_class
    for split in SPLIT_NAMES:
        members = [i for i in keep if split_of[drawn[i].subgroup] == split]
        imgs = np.zeros((len(members), m, 3, size, size), dtype=np.uint8)
        for k, i in enumerate(members):
            rng = build.class_rng(cfg.seed, drawn[i])
            imgs[k] = build.examples(renders[i], rng, m, size, cfg.occlusion)
        arrays[f"{split}_images"] = imgs
        arrays[f"{split}_labels"] = np.array([drawn[i].label for i in members], dtype=str)
        arrays[f"{split}_subgroups"] = np.array([drawn[i].subgroup for i in members], dtype=str)
    log.info(
        "EmojiImages: %d base emoji (%d variants dropped), %d undrawable, %d near-duplicates dropped, "
        "%s classes, built in %.1f s",
        len(classes),
        n_variants,
        n_blank,
        n_dup,
        " / ".join(str(len(arrays[f"{s}_labels"])) for s in SPLIT_NAMES),
        time.perf_counter() - t0,
    )
    return arrays


def load_emoji_images(
    *,
    image_size: int = 32,
    examples_per_class: int = 20,
    seed: int = 0,
    cache_dir: str | os.PathLike | None = None,
    occlusion: float = 0.25,
    max_classes_per_subgroup: int | None = None,
    cache: bool = True,
) -> dict[str, ClassPool]:
    """Render (or load from cache) the EmojiImages few-shot set, split by emoji subgroup.

    Returns ``{"train", "val", "test"}`` -> :class:`ClassPool` named ``EmojiImages/<split>`` with RGB
    uint8 ``images`` ``[C, examples_per_class, 3, image_size, image_size]`` (channels first),
    ``class_names`` like ``"grinning face (U+1F600)"``, ``alphabets`` = subgroups, and the per-channel
    pixel statistics of the train images in all three pools. See the module docstring for the
    classes, the split and the examples; ``occlusion`` is the probability of an occluding rectangle
    per example; ``max_classes_per_subgroup`` keeps the first classes of each subgroup (file order;
    small builds for tests). Source: our construction (this project), in the role of Mini-ImageNet
    (Vinyals et al. 2016) for machines without one.

    Cache: ``cache_dir`` (default ``$FASTWEIGHTS_CACHE`` or ``~/.cache/fastweights``) holds
    ``emoji_images-<key>.npz``, keyed by the arguments, the rendering constants, ``CACHE_VERSION``,
    PIL's layout engine and the paths, sizes and modification times of the font and emoji-test.txt
    (``cache=False`` builds without reading or writing it).

    Raises ``FileNotFoundError`` naming the missing font or emoji-test.txt and the Debian package
    that installs it; ``ValueError`` for bad arguments (name, expected, given) or malformed split
    lists.
    """
    check_int("image_size", image_size, 8, 512)
    check_int("examples_per_class", examples_per_class)
    check_int("seed", seed, 0)
    check_real("occlusion", occlusion, 0.0, 1.0)
    if max_classes_per_subgroup is not None:
        check_int("max_classes_per_subgroup", max_classes_per_subgroup)
    font = _require(EMOJI_FONT, PACKAGES["font"])
    emoji_test = _require(EMOJI_TEST, PACKAGES["emoji_test"])
    cfg = build.EmojiConfig(image_size, examples_per_class, seed, float(occlusion), max_classes_per_subgroup)
    key = cache_key(
        {
            "v": CACHE_VERSION,
            "config": cfg.__dict__,
            "render": build.RENDER,
            "layout": build.layout_engine().name,
            "files": files_fingerprint([font, emoji_test]),
        }
    )
    folder = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    arrays = load_or_build_npz(
        folder / f"emoji_images-{key}.npz" if cache else None, lambda: _build(cfg, font, emoji_test)
    )
    parts = {}
    for split in SPLIT_NAMES:
        labels = [str(x) for x in arrays[f"{split}_labels"]]
        subgroups = [str(x) for x in arrays[f"{split}_subgroups"]]
        parts[split] = PoolParts(arrays[f"{split}_images"], labels, subgroups, labels)
    return make_pools("EmojiImages", parts)
