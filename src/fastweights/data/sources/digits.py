"""Split-Digits source: scikit-learn's 8x8 handwritten digits as a 32x32 train/test dataset."""

from __future__ import annotations

import numpy as np

from ._resize import resize_bilinear
from .base import LabeledImages, SplitDataset, pixel_stats

__all__ = ["load_digits_split"]


def load_digits_split(*, image_size: int = 32, seed: int = 0) -> SplitDataset:
    """scikit-learn ``load_digits`` (1,797 images, 10 classes) as a :class:`SplitDataset` named "Digits".

    The 8x8 values 0..16 are scaled to 0..255 (``round(v * 255 / 16)``, white ink on black) and
    resized bilinearly (PIL) to ``image_size``. Split: stratified 50/50 with ``train_test_split(
    random_state=seed)`` -> 898 train (the demonstration pool) and 899 test images; ``mean``/``std``
    are the train pixel statistics. Images uint8 ``[N, image_size, image_size]``, labels int64 ``[N]``.
    Source: the Split-Digits meta-test set of ``docs/results.md``, used with the Split-MNIST
    protocol (Hsu et al. 2018). Raises ``ValueError`` on a bad
    ``image_size`` (int in [4, 512]) or ``seed`` (int >= 0).
    """
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    if isinstance(image_size, bool) or not isinstance(image_size, int) or not 4 <= image_size <= 512:
        raise ValueError(f"image_size: expected an int in [4, 512], given {image_size!r}")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed: expected an int >= 0, given {seed!r}")
    data = load_digits()
    raw = np.rint(data.images * (255.0 / 16.0)).clip(0, 255).astype(np.uint8)
    images = resize_bilinear(raw, image_size)
    labels = data.target.astype(np.int64)
    idx = np.arange(len(labels))
    tr, te = train_test_split(idx, test_size=0.5, stratify=labels, random_state=seed)
    tr, te = np.sort(tr), np.sort(te)
    mean, std = pixel_stats(images[tr])
    return SplitDataset(
        name="Digits",
        train=LabeledImages(images[tr], labels[tr]),
        test=LabeledImages(images[te], labels[te]),
        num_classes=10,
        mean=mean,
        std=std,
    )
