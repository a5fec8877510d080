"""Bilinear resizing of uint8 image stacks (shared by the digits and IDX sources)."""

from __future__ import annotations

import numpy as np
from PIL import Image


def resize_bilinear(images: np.ndarray, size: int) -> np.ndarray:
    """Resize uint8 ``[N, H, W]`` to uint8 ``[N, size, size]`` with PIL's bilinear filter.

    This is what ``torchvision.transforms.Resize(size)`` does to a PIL image of a square dataset
    (spec ``srwm_acl.md`` §5.4/§5.5: ``Resize(32)`` before ``ToTensor``); about 10 µs per image.
    """
    n, h, w = images.shape
    if (h, w) == (size, size):
        return images.copy()
    out = np.empty((n, size, size), dtype=np.uint8)
    for i in range(n):
        img = Image.fromarray(np.ascontiguousarray(images[i]))
        out[i] = np.asarray(img.resize((size, size), Image.Resampling.BILINEAR))
    return out
