"""Containers shared by every data source: a few-shot class pool and a train/test split dataset.

All images are stored as ``uint8`` arrays, grayscale ``[..., S, S]`` (white ink on black, ``0`` =
background) or RGB channels-first ``[..., 3, S, S]``, and are normalised only when they are turned
into model inputs (:func:`normalize`, ``fastweights.cl.tasks.to_model_images``). Pixel statistics
(``mean``/``std`` of ``images / 255``) are a float for grayscale data and a tuple of 3 floats (one per
channel) for RGB data.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

__all__ = [
    "ClassPool",
    "LabeledImages",
    "SplitDataset",
    "Stat",
    "normalize",
    "pixel_stats",
    "channel_stats",
    "image_stats",
]

Stat = float | tuple[float, ...]
"""A pixel statistic: a float (grayscale) or one float per channel (RGB)."""


def _check_images(field: str, images: object, ndim: int, layout: str) -> int:
    """Validate grayscale ``ndim``-dim or RGB ``ndim + 1``-dim uint8 square images; return the channels."""
    if not isinstance(images, np.ndarray):
        raise ValueError(f"{field}: expected a numpy array {layout}, given {type(images).__name__}")
    if images.dtype != np.uint8:
        raise ValueError(f"{field}: expected dtype uint8 {layout}, given dtype {images.dtype}")
    if images.ndim not in (ndim, ndim + 1) or (images.ndim == ndim + 1 and images.shape[-3] != 3):
        raise ValueError(f"{field}: expected {ndim} dims {layout}, given shape {tuple(images.shape)}")
    if images.shape[-1] != images.shape[-2] or images.shape[-1] == 0:
        raise ValueError(f"{field}: expected square non-empty images {layout}, given shape {images.shape}")
    return 1 if images.ndim == ndim else 3


def _finite(value: object) -> float:
    try:
        return float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return math.nan


def _check_stat(field: str, value: object, channels: int) -> Stat:
    """``value`` as a float (``channels == 1``) or a tuple of ``channels`` floats; a float is broadcast."""
    if isinstance(value, (Sequence, np.ndarray)) and not isinstance(value, str) and np.ndim(value) > 0:
        items = [_finite(v) for v in value]
        ok = len(items) == channels
    else:
        items, ok = [_finite(value)] * channels, True
    if ok and all(math.isfinite(v) and (field != "std" or v > 0) for v in items):
        return items[0] if channels == 1 else tuple(items)
    rule = "finite float" + (" > 0" if field == "std" else "")
    expected = f"a {rule}" if channels == 1 else f"a {rule} or a sequence of {channels} of them"
    raise ValueError(f"{field}: expected {expected}, given {value!r}")


def _set_stats(obj: object, channels: int) -> None:
    """Validate and canonicalise ``obj.mean``/``obj.std`` of a frozen dataclass in place."""
    for field in ("mean", "std"):
        object.__setattr__(obj, field, _check_stat(field, getattr(obj, field), channels))


def _stats_from_counts(counts: np.ndarray) -> tuple[float, float]:
    values = np.arange(256, dtype=np.float64) / 255.0
    n = counts.sum()
    mean = float((counts * values).sum() / n)
    var = float((counts * (values - mean) ** 2).sum() / n)
    return mean, (math.sqrt(var) if var > 0 else 1.0)


def _histogram(values: np.ndarray) -> np.ndarray:
    """Counts ``[256]`` (float64) of the byte values of a uint8 array of any shape: torch's integer
    ``bincount`` (~15x numpy's, which first widens every byte to int64; the same counts)."""
    with warnings.catch_warnings():  # a read-only array (e.g. a cache file's) is only read here
        warnings.simplefilter("ignore", UserWarning)
        flat = torch.from_numpy(np.ascontiguousarray(values)).flatten()
    return flat.bincount(minlength=256).numpy().astype(np.float64)


def pixel_stats(images: np.ndarray) -> tuple[float, float]:
    """Mean and standard deviation of ``images / 255`` for a ``uint8`` array of any shape.

    Computed exactly from a 256-bin histogram (no float copy of the array). Returns ``(0.0, 1.0)``
    for an empty array.
    """
    if images.size == 0:
        return 0.0, 1.0
    counts = _histogram(np.asarray(images, dtype=np.uint8))
    return _stats_from_counts(counts)


def channel_stats(images: np.ndarray, chunk: int = 256) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Per-channel ``(means, stds)`` of ``images / 255`` for uint8 ``[N, ..., C, S, S]`` (channel axis -3).

    Exact (256-bin histograms), accumulated over ``chunk`` leading entries at a time so that only a
    small copy is made. A channel with no pixels gets ``(0.0, 1.0)``. Raises ``ValueError`` for a
    non-uint8 array or one with fewer than 3 dims.
    """
    if not isinstance(images, np.ndarray) or images.dtype != np.uint8 or images.ndim < 3:
        raise ValueError(
            "images: expected a uint8 numpy array [N, ..., C, S, S], given "
            f"{getattr(images, 'dtype', type(images).__name__)} {getattr(images, 'shape', '')}"
        )
    flat = images.reshape(-1, *images.shape[-3:])
    means, stds = [], []
    for c in range(flat.shape[1]):
        counts = np.zeros(256, dtype=np.float64)
        for i in range(0, len(flat), chunk):
            counts += _histogram(flat[i : i + chunk, c])
        m, s = _stats_from_counts(counts) if counts.sum() else (0.0, 1.0)
        means.append(m)
        stds.append(s)
    return tuple(means), tuple(stds)


def image_stats(images: np.ndarray, channels: int) -> tuple[Stat, Stat]:
    """``(mean, std)`` in the form the containers store: floats for ``channels == 1`` (:func:`pixel_stats`
    over the whole array), tuples of 3 floats for ``channels == 3`` (:func:`channel_stats`, axis -3).

    Raises ``ValueError`` if ``channels`` is not 1 or 3.
    """
    if channels == 1:
        return pixel_stats(images)
    if channels == 3:
        return channel_stats(images)
    raise ValueError(f"channels: expected 1 or 3, given {channels!r}")


@dataclass(frozen=True)
class ClassPool:
    """Few-shot source: C classes x M examples, uint8 ``images`` ``[C, M, S, S]`` (grayscale, white
    ink on black) or ``[C, M, 3, S, S]`` (RGB, channels first).

    ``class_names`` and ``alphabets`` (the script/alphabet/superclass of each class) have length C;
    ``mean`` and ``std`` are the pixel statistics of ``images / 255`` used by :func:`normalize`: a
    float for grayscale pools, 3 floats (one per channel) for RGB pools (a float is broadcast to 3).
    Raises ``ValueError`` naming the field on a wrong dtype, shape, length or statistic.
    """

    name: str
    images: np.ndarray
    class_names: list[str]
    alphabets: list[str]
    mean: Stat
    std: Stat

    def __post_init__(self) -> None:
        channels = _check_images("images", self.images, 4, "[C, M, S, S] or [C, M, 3, S, S]")
        c = self.images.shape[0]
        for field in ("class_names", "alphabets"):
            value = getattr(self, field)
            if len(value) != c:
                raise ValueError(f"{field}: expected length C = {c} (images.shape[0]), given {len(value)}")
        _set_stats(self, channels)

    @property
    def num_classes(self) -> int:
        return int(self.images.shape[0])

    @property
    def examples_per_class(self) -> int:
        return int(self.images.shape[1])

    @property
    def image_size(self) -> int:
        return int(self.images.shape[-1])

    @property
    def channels(self) -> int:
        """1 for grayscale ``[C, M, S, S]`` images, 3 for RGB ``[C, M, 3, S, S]``."""
        return 1 if self.images.ndim == 4 else 3


@dataclass(frozen=True)
class LabeledImages:
    """uint8 ``images`` ``[N, S, S]`` (grayscale) or ``[N, 3, S, S]`` (RGB) with int64 ``labels`` ``[N]``."""

    images: np.ndarray
    labels: np.ndarray

    def __post_init__(self) -> None:
        _check_images("images", self.images, 3, "[N, S, S] or [N, 3, S, S]")
        if not isinstance(self.labels, np.ndarray) or self.labels.dtype != np.int64:
            given = getattr(self.labels, "dtype", type(self.labels).__name__)
            raise ValueError(f"labels: expected an int64 numpy array [N], given {given}")
        if self.labels.shape != (self.images.shape[0],):
            raise ValueError(
                f"labels: expected shape ({self.images.shape[0]},) matching images, "
                f"given {tuple(self.labels.shape)}"
            )

    def __len__(self) -> int:
        return int(self.labels.shape[0])

    @property
    def channels(self) -> int:
        """1 for grayscale ``[N, S, S]`` images, 3 for RGB ``[N, 3, S, S]``."""
        return 1 if self.images.ndim == 3 else 3


@dataclass(frozen=True)
class SplitDataset:
    """A standard classification dataset with a ``train`` and a ``test`` split.

    Labels lie in ``[0, num_classes)``; ``mean``/``std`` are the pixel statistics of the train
    images / 255 (a float for grayscale, 3 floats for RGB). Raises ``ValueError`` when the image
    shapes differ, labels are out of range or a statistic is malformed.
    """

    name: str
    train: LabeledImages
    test: LabeledImages
    num_classes: int
    mean: Stat
    std: Stat

    def __post_init__(self) -> None:
        if self.train.images.shape[1:] != self.test.images.shape[1:]:
            raise ValueError(
                f"test: expected images of shape {self.train.images.shape[1:]} like train, "
                f"given {self.test.images.shape[1:]}"
            )
        if not isinstance(self.num_classes, int) or self.num_classes < 1:
            raise ValueError(f"num_classes: expected an int >= 1, given {self.num_classes!r}")
        for split in ("train", "test"):
            labels = getattr(self, split).labels
            if labels.size and (labels.min() < 0 or labels.max() >= self.num_classes):
                raise ValueError(
                    f"{split}.labels: expected values in [0, {self.num_classes}), "
                    f"given range [{labels.min()}, {labels.max()}]"
                )
        _set_stats(self, self.channels)

    @property
    def image_size(self) -> int:
        return int(self.train.images.shape[-1])

    @property
    def channels(self) -> int:
        """1 for grayscale, 3 for RGB images."""
        return self.train.channels


def normalize(images: np.ndarray, mean: Stat, std: Stat) -> np.ndarray:
    """``(images / 255 - mean) / std`` as float32, same shape as ``images`` (uint8).

    ``mean``/``std`` are floats, or sequences of C floats applied along the channel axis -3 of
    ``[..., C, S, S]`` images. Raises ``ValueError`` if ``images`` is not uint8, a statistic is not
    finite (``std`` > 0) or the number of per-channel values does not match ``images.shape[-3]``.
    """
    if not isinstance(images, np.ndarray) or images.dtype != np.uint8:
        raise ValueError(
            f"images: expected a uint8 numpy array, given {getattr(images, 'dtype', type(images))}"
        )
    per_channel = np.ndim(mean) > 0 or np.ndim(std) > 0
    channels = int(images.shape[-3]) if per_channel and images.ndim >= 3 else 1
    m = np.asarray(_check_stat("mean", mean, channels), dtype=np.float32).reshape(-1, 1, 1)
    s = np.asarray(_check_stat("std", std, channels), dtype=np.float32).reshape(-1, 1, 1)
    if channels == 1:
        m, s = m.reshape(()), s.reshape(())
    out = images.astype(np.float32)
    out *= np.float32(1.0 / 255.0)
    out -= m
    out /= s
    return out
