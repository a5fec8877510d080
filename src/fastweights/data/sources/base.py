"""Containers shared by every data source: a few-shot class pool and a train/test split dataset.

All images are stored as ``uint8`` grayscale arrays, white ink on black (``0`` = background), and
are normalised only when they are turned into model inputs (:func:`normalize`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

__all__ = ["ClassPool", "LabeledImages", "SplitDataset", "normalize", "pixel_stats"]


def _check_images(field: str, images: object, ndim: int, layout: str) -> None:
    if not isinstance(images, np.ndarray):
        raise ValueError(f"{field}: expected a numpy array {layout}, given {type(images).__name__}")
    if images.dtype != np.uint8:
        raise ValueError(f"{field}: expected dtype uint8 {layout}, given dtype {images.dtype}")
    if images.ndim != ndim:
        raise ValueError(f"{field}: expected {ndim} dims {layout}, given shape {tuple(images.shape)}")
    if images.shape[-1] != images.shape[-2] or images.shape[-1] == 0:
        raise ValueError(f"{field}: expected square non-empty images {layout}, given shape {images.shape}")


def _check_stats(mean: object, std: object) -> None:
    for field, value in (("mean", mean), ("std", std)):
        try:
            v = float(value)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            v = math.nan
        if not math.isfinite(v) or (field == "std" and v <= 0):
            rule = "a finite float > 0" if field == "std" else "a finite float"
            raise ValueError(f"{field}: expected {rule}, given {value!r}")


def pixel_stats(images: np.ndarray) -> tuple[float, float]:
    """Mean and standard deviation of ``images / 255`` for a ``uint8`` array of any shape.

    Computed exactly from a 256-bin histogram (no float copy of the array). Returns ``(0.0, 1.0)``
    for an empty array.
    """
    if images.size == 0:
        return 0.0, 1.0
    counts = np.bincount(np.asarray(images, dtype=np.uint8).ravel(), minlength=256).astype(np.float64)
    values = np.arange(256, dtype=np.float64) / 255.0
    n = counts.sum()
    mean = float((counts * values).sum() / n)
    var = float((counts * (values - mean) ** 2).sum() / n)
    return mean, (math.sqrt(var) if var > 0 else 1.0)


@dataclass(frozen=True)
class ClassPool:
    """Few-shot source: ``images`` uint8 ``[C, M, S, S]`` = C classes x M examples, white ink on black.

    ``class_names`` and ``alphabets`` (the script/alphabet of each class) have length C; ``mean``
    and ``std`` are the pixel statistics of ``images / 255`` used by :func:`normalize`.
    Raises ``ValueError`` naming the field on a wrong dtype, shape or length.
    """

    name: str
    images: np.ndarray
    class_names: list[str]
    alphabets: list[str]
    mean: float
    std: float

    def __post_init__(self) -> None:
        _check_images("images", self.images, 4, "[C, M, S, S]")
        c = self.images.shape[0]
        for field in ("class_names", "alphabets"):
            value = getattr(self, field)
            if len(value) != c:
                raise ValueError(f"{field}: expected length C = {c} (images.shape[0]), given {len(value)}")
        _check_stats(self.mean, self.std)

    @property
    def num_classes(self) -> int:
        return int(self.images.shape[0])

    @property
    def examples_per_class(self) -> int:
        return int(self.images.shape[1])

    @property
    def image_size(self) -> int:
        return int(self.images.shape[-1])


@dataclass(frozen=True)
class LabeledImages:
    """``images`` uint8 ``[N, S, S]`` with integer ``labels`` int64 ``[N]``."""

    images: np.ndarray
    labels: np.ndarray

    def __post_init__(self) -> None:
        _check_images("images", self.images, 3, "[N, S, S]")
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


@dataclass(frozen=True)
class SplitDataset:
    """A standard classification dataset with a ``train`` and a ``test`` split.

    Labels lie in ``[0, num_classes)``; ``mean``/``std`` are the pixel statistics of the train
    images / 255. Raises ``ValueError`` when the image sizes differ or labels are out of range.
    """

    name: str
    train: LabeledImages
    test: LabeledImages
    num_classes: int
    mean: float
    std: float

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
        _check_stats(self.mean, self.std)

    @property
    def image_size(self) -> int:
        return int(self.train.images.shape[-1])


def normalize(images: np.ndarray, mean: float, std: float) -> np.ndarray:
    """``(images / 255 - mean) / std`` as float32, same shape as ``images`` (uint8, any shape).

    Raises ``ValueError`` if ``images`` is not uint8 or ``std`` is not a finite positive number.
    """
    if not isinstance(images, np.ndarray) or images.dtype != np.uint8:
        raise ValueError(
            f"images: expected a uint8 numpy array, given {getattr(images, 'dtype', type(images))}"
        )
    _check_stats(float(mean), float(std))
    out = images.astype(np.float32)
    out *= np.float32(1.0 / 255.0)
    out -= np.float32(mean)
    out /= np.float32(std)
    return out
