"""Select a data source by its config name: few-shot class pools and train/test split datasets.

Real benchmarks are read from local folders only (never downloaded). ``root=None`` means
``$FASTWEIGHTS_DATA``; the embedded sources (FontGlyphs, EmojiImages, Handwriting, scikit-learn digits,
FontLetters, ColourDigits) need no folder, and Fashion-MNIST defaults to Debian's
``dataset-fashion-mnist`` files.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from fastweights.checks import check_choice, check_int
from fastweights.resources import check_fits

from .concepts import exclude_benchmark_concepts
from .sources.base import ClassPool, SplitDataset
from .sources.cifar import load_cifar10, load_cifar100_pools
from .sources.digits import load_digits_split
from .sources.emoji import load_emoji_images
from .sources.font_classes import load_colour_digits, load_font_letters
from .sources.glyphs import load_font_glyphs
from .sources.handwriting import load_handwriting
from .sources.idx import load_idx_dataset
from .sources.miniimagenet import load_mini_imagenet
from .sources.omniglot import load_omniglot
from .split_pools import split_dataset_pools

__all__ = [
    "CLASS_POOLS",
    "SPLIT_DATASETS",
    "PoolConfig",
    "load_class_pools",
    "load_split_dataset",
    "load_pools_for",
    "data_root",
    "RGB_SOURCES",
    "check_channels",
]

FASHION_MNIST_DEBIAN = "/usr/share/datasets/fashion-mnist"


def _fontglyphs(root: Path | None, size: int, **kw: Any) -> dict[str, ClassPool]:
    return load_font_glyphs(image_size=size, **kw)


def _emoji(root: Path | None, size: int, **kw: Any) -> dict[str, ClassPool]:
    return load_emoji_images(image_size=size, **kw)


def _handwriting(root: Path | None, size: int, **kw: Any) -> dict[str, ClassPool]:
    return load_handwriting(image_size=size, **kw)


def _fc100(root: Path, size: int, **kw: Any) -> dict[str, ClassPool]:
    return load_cifar100_pools(root, "fc100", image_size=size, **kw)


def _cifar_fs(root: Path, size: int, **kw: Any) -> dict[str, ClassPool]:
    return load_cifar100_pools(root, "cifar_fs", image_size=size, **kw)


def _digits(root: Path | None, size: int, **kw: Any) -> SplitDataset:
    return load_digits_split(image_size=size, **kw)


def _font_letters(root: Path | None, size: int, **kw: Any) -> SplitDataset:
    return load_font_letters(image_size=size, **kw)


def _colour_digits(root: Path | None, size: int, **kw: Any) -> SplitDataset:
    return load_colour_digits(image_size=size, **kw)


def _fashion_mnist(root: Path | None, size: int, **kw: Any) -> SplitDataset:
    folder = root if root is not None else Path(FASHION_MNIST_DEBIAN)
    return load_idx_dataset(
        folder, name="Fashion-MNIST", image_size=size, torchvision_name="FashionMNIST", **kw
    )


def _mnist(root: Path, size: int, **kw: Any) -> SplitDataset:
    return load_idx_dataset(root, name="MNIST", image_size=size, torchvision_name="MNIST", **kw)


def _sized(loader: Callable[..., Any]) -> Callable[..., Any]:
    def call(root: Path, size: int, **kw: Any) -> Any:
        return loader(root, image_size=size, **kw)

    return call


# name -> (default image size, needs a root folder, loader(root, image_size, **options))
_POOLS: dict[str, tuple[int, bool, Callable[..., dict[str, ClassPool]]]] = {
    "fontglyphs": (32, False, _fontglyphs),
    "emoji": (32, False, _emoji),
    "omniglot": (28, True, _sized(load_omniglot)),
    "mini_imagenet": (84, True, _sized(load_mini_imagenet)),
    "fc100": (32, True, _fc100),
    "cifar_fs": (32, True, _cifar_fs),
    "handwriting": (32, False, _handwriting),
}
_DATASETS: dict[str, tuple[int, bool, Callable[..., SplitDataset]]] = {
    "digits": (32, False, _digits),
    "fashion_mnist": (32, False, _fashion_mnist),
    "mnist": (32, True, _mnist),
    "cifar10": (32, True, _sized(load_cifar10)),
    "font_letters": (32, False, _font_letters),
    "colour_digits": (32, False, _colour_digits),
}
#: the split data sets whose loader caches its decoded or rendered arrays (``cache_dir``)
_CACHED_DATASETS = ("fashion_mnist", "mnist", "font_letters", "colour_digits")
CLASS_POOLS = tuple(_POOLS)
SPLIT_DATASETS = tuple(_DATASETS)
#: sources whose images are RGB (the others are grayscale, repeated to RGB on request)
RGB_SOURCES = ("emoji", "mini_imagenet", "fc100", "cifar_fs", "cifar10", "colour_digits")


def check_channels(name: str, channels: int, sources: list[str]) -> None:
    """``channels`` can feed every source of ``sources``: an RGB source (:data:`RGB_SOURCES`) needs 3
    (grayscale ones take 1 or 3). Names that are no source are left to the source checks.

    Raises:
        ValueError: ``<name>: expected 3 …`` naming the RGB sources and the value given.
    """
    rgb = [s for s in sources if s in RGB_SOURCES]
    if rgb and channels != 3:
        raise ValueError(
            f"{name}: expected 3 for the RGB source(s) {rgb} (grayscale sources are repeated to 3 "
            f"channels), got {channels!r}"
        )


def data_root(root: str | os.PathLike | None, name: str) -> Path:
    """``root`` as a path, else ``$FASTWEIGHTS_DATA``; ``ValueError`` naming ``name`` if neither is set."""
    if root is None:
        root = os.environ.get("FASTWEIGHTS_DATA") or None
    if root is None:
        raise ValueError(
            f"root: expected the local folder holding the {name!r} files (or $FASTWEIGHTS_DATA), given None"
        )
    return Path(root)


def _load(table: dict, kind: str, name: str, root: Any, image_size: int | None, options: dict) -> Any:
    if name not in table:
        raise ValueError(f"name: expected one of {sorted(table)} ({kind}), given {name!r}")
    default_size, needs_root, loader = table[name]
    folder = data_root(root, name) if needs_root else (None if root is None else Path(root))
    return loader(folder, default_size if image_size is None else image_size, **options)


def load_class_pools(
    name: str, root: str | os.PathLike | None = None, *, image_size: int | None = None, **options: Any
) -> dict[str, ClassPool]:
    """Few-shot pools ``{"train", "val", "test"} -> ClassPool`` of the source ``name``.

    ``name`` (default image size, loader): ``"fontglyphs"`` (32, :func:`load_font_glyphs`; ``root``
    ignored), ``"emoji"`` (32, RGB, :func:`load_emoji_images`; ``root`` ignored), ``"omniglot"`` (28,
    grayscale, :func:`load_omniglot`), ``"mini_imagenet"`` (84, RGB, :func:`load_mini_imagenet`),
    ``"fc100"`` and ``"cifar_fs"`` (32, RGB, :func:`load_cifar100_pools`), ``"handwriting"`` (32,
    grayscale, procedural pen-stroke characters, :func:`load_handwriting`; ``root`` ignored).
    ``root`` (default ``$FASTWEIGHTS_DATA``) is the folder the loader documents; ``options`` are passed
    to the loader (e.g. ``cache_dir``). Raises ``ValueError`` for an unknown name or a missing root,
    and whatever the loader raises (``FileNotFoundError`` naming the expected layout, ``ValueError``).
    The ``train`` and ``val`` pools of the embedded sources hold no class that shows a test benchmark's
    concept (digits, garments, letters A-J; :func:`fastweights.data.concepts.exclude_benchmark_concepts`).
    """
    return exclude_benchmark_concepts(
        name, _load(_POOLS, "few-shot class pools", name, root, image_size, options)
    )


def load_split_dataset(
    name: str,
    root: str | os.PathLike | None = None,
    *,
    image_size: int | None = None,
    cache_dir: str | os.PathLike | None = None,
    **options: Any,
) -> SplitDataset:
    """A train/test :class:`SplitDataset` of the source ``name`` (default image size 32 for all).

    ``"digits"`` (scikit-learn, :func:`load_digits_split`; ``root`` ignored), ``"fashion_mnist"`` (IDX
    files; ``root`` default Debian's ``/usr/share/datasets/fashion-mnist``; torchvision's
    ``<root>/FashionMNIST/raw`` also accepted), ``"mnist"`` (IDX files in ``<root>``, ``<root>/raw`` or
    ``<root>/MNIST/raw``), ``"cifar10"`` (RGB, ``<root>/cifar-10-batches-py``, :func:`load_cifar10`),
    ``"font_letters"`` (letters A-J rendered from fonts, a notMNIST analogue, :func:`load_font_letters`;
    ``root`` ignored), ``"colour_digits"`` (RGB digits rendered from fonts, an SVHN analogue,
    :func:`load_colour_digits`; ``root`` ignored).
    ``root`` defaults to ``$FASTWEIGHTS_DATA`` where a folder is needed. ``cache_dir`` is where the
    loaders that cache their decoded or rendered arrays (the IDX sets, ``font_letters``,
    ``colour_digits``) keep them (default ``$FASTWEIGHTS_CACHE`` or ``~/.cache/fastweights``); the other
    sources ignore it. Raises ``ValueError`` for an unknown name or a missing root, and whatever the
    loader raises.
    """
    if cache_dir is not None and name in _CACHED_DATASETS:
        options = {**options, "cache_dir": cache_dir}
    return _load(_DATASETS, "split datasets", name, root, image_size, options)


@dataclass
class PoolConfig:
    """Where few-shot classes come from: ``source`` is a name of :data:`CLASS_POOLS`
    (``fontglyphs``, ``emoji`` and ``handwriting`` embedded; ``omniglot``, ``mini_imagenet``, ``fc100``,
    ``cifar_fs`` from ``root``) or of :data:`SPLIT_DATASETS` (e.g. ``fashion_mnist``: its classes become a
    pool). ``channels`` is 1 or 3; an RGB source (:data:`RGB_SOURCES`) needs 3, a grayscale one is repeated to
    3 channels when it is 3."""

    source: str = "fontglyphs"
    root: str | None = None  # local folder of a real benchmark (default $FASTWEIGHTS_DATA)
    image_size: int = 32
    channels: int = 1
    rotations: bool = True  # 0/90/180/270° copies as extra meta-training classes (Omniglot-style)
    # FontGlyphs rendering (ignored by the other sources; emoji and handwriting use examples_per_class,
    # seed, cache_dir)
    examples_per_class: int = 20
    max_classes_per_script: int = 80
    max_scripts: int | None = None
    seed: int = 0
    cache_dir: str | None = None

    @property
    def domains(self) -> list[str]:
        """The sources this section loads: ``[source]``."""
        return [self.source]

    def __post_init__(self) -> None:
        check_choice("source", self.source, CLASS_POOLS + SPLIT_DATASETS)
        if self.root is not None and not str(self.root).strip():
            raise ValueError("root: expected a folder path or null, got ''")
        check_int("image_size", self.image_size, low=8, high=512)
        check_choice("channels", self.channels, (1, 3))
        check_channels("channels", self.channels, self.domains)
        check_int("examples_per_class", self.examples_per_class)
        check_int("max_classes_per_script", self.max_classes_per_script)
        if self.max_scripts is not None:
            check_int("max_scripts", self.max_scripts)
        check_int("seed", self.seed, low=0)


def _as_rgb(pool: ClassPool) -> ClassPool:
    """A grayscale pool ``[C, M, S, S]`` repeated to RGB ``[C, M, 3, S, S]`` (RGB pools unchanged)."""
    if pool.channels == 3:
        return pool
    rgb = np.repeat(pool.images[:, :, None], 3, axis=2)
    mean, std = float(np.asarray(pool.mean).reshape(-1)[0]), float(np.asarray(pool.std).reshape(-1)[0])
    return ClassPool(pool.name, rgb, pool.class_names, pool.alphabets, (mean,) * 3, (std,) * 3)


#: the sources rendered ``examples_per_class`` times per class, and the channels they render
_RENDERED_CHANNELS = {"fontglyphs": 1, "emoji": 3}


def load_pools_for(p: PoolConfig, key: str = "data") -> dict[str, ClassPool]:
    """``{"train", "val", "test"}`` class pools of a :class:`PoolConfig`.

    Few-shot sources (:data:`CLASS_POOLS`) give disjoint meta-train/val/test classes; classification
    datasets (:data:`SPLIT_DATASETS`) give their classes with disjoint *examples* (see
    :func:`fastweights.data.split_pools.split_dataset_pools`). ``p.channels = 3`` repeats a grayscale
    source to three channels (the reference's ``omniglot_rgb84x84`` input). ``key`` is the config
    section (``data``, ``domain_a``, …) that errors name.

    Raises:
        ValueError: for an unknown source, a missing ``<key>.root``, pools whose channels differ
            from ``p.channels``, or an ``examples_per_class`` whose images cannot fit into memory (one
            class alone; checked before anything is rendered, :func:`fastweights.resources.check_fits`).
    """
    if p.source in _RENDERED_CHANNELS:
        channels = _RENDERED_CHANNELS[p.source]
        check_fits(
            f"{key}.examples_per_class={p.examples_per_class}",
            p.examples_per_class * p.image_size**2 * channels,
            f"the images of one {p.source} class ({p.examples_per_class:,} of {p.image_size}x{p.image_size} "
            f"px, {channels} channel(s), uint8)",
            hint=f"reduce {key}.examples_per_class",
        )
    needs_root = {**_POOLS, **_DATASETS}[p.source][1] if p.source in CLASS_POOLS + SPLIT_DATASETS else False
    if p.root is None and needs_root and not os.environ.get("FASTWEIGHTS_DATA"):
        raise ValueError(
            f"{key}.root: expected the local folder holding the {p.source!r} files "
            f"(or set $FASTWEIGHTS_DATA); none given"
        )
    if p.source in CLASS_POOLS:
        options: dict[str, Any] = {}
        if p.source == "fontglyphs":
            options = dict(
                examples_per_class=p.examples_per_class,
                max_classes_per_script=p.max_classes_per_script,
                max_scripts=p.max_scripts,
                seed=p.seed,
                cache_dir=p.cache_dir,
            )
        elif p.source in ("emoji", "handwriting"):
            options = dict(examples_per_class=p.examples_per_class, seed=p.seed, cache_dir=p.cache_dir)
        pools = load_class_pools(p.source, p.root, image_size=p.image_size, **options)
    elif p.source in SPLIT_DATASETS:
        data = load_split_dataset(p.source, p.root, image_size=p.image_size, cache_dir=p.cache_dir)
        pools = split_dataset_pools(data)
    else:
        raise ValueError(f"{key}.source: expected one of {CLASS_POOLS + SPLIT_DATASETS}, got {p.source!r}")
    if p.channels == 3:
        pools = {split: _as_rgb(pool) for split, pool in pools.items()}
    for split, pool in pools.items():
        if pool.channels != p.channels:
            raise ValueError(
                f"{key}.channels: {p.source}/{split} images have {pool.channels} channel(s), "
                f"config says {p.channels}"
            )
    return pools
