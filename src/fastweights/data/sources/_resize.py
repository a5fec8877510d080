"""Bilinear resizing of uint8 image stacks (grayscale or RGB), shared by every data source."""

from __future__ import annotations

import numpy as np
from PIL import Image

__all__ = ["resize_bilinear", "resize_image"]


def resize_image(image: np.ndarray, size: int) -> np.ndarray:
    """Resize one uint8 image ``[H, W]`` (grayscale) or ``[H, W, 3]`` (RGB) to ``[size, size(, 3)]``.

    PIL's bilinear filter, which widens its support when shrinking (an antialiased resize): what
    ``torchvision.transforms.Resize(size)`` does to a PIL image of a square data set.
    Returns a copy even when the size is already right.
    """
    if image.shape[:2] == (size, size):
        return np.array(image, copy=True)
    img = Image.fromarray(np.ascontiguousarray(image))
    return np.asarray(img.resize((size, size), Image.Resampling.BILINEAR))


def resize_bilinear(images: np.ndarray, size: int) -> np.ndarray:
    """Resize uint8 ``[N, H, W]`` to ``[N, size, size]``, or channels-last RGB ``[N, H, W, 3]`` to
    ``[N, size, size, 3]``, image by image with :func:`resize_image` (about 10 µs per 28x28 image).

    As automated-cl's MNIST transforms for the ACL paper: ``Resize(32)`` before ``ToTensor``.
    """
    n, h, w = images.shape[:3]
    if (h, w) == (size, size):
        return images.copy()
    out = np.empty((n, size, size, *images.shape[3:]), dtype=np.uint8)
    for i in range(n):
        out[i] = resize_image(images[i], size)
    return out
