"""Images from outside the data sets into the data sets' uint8 form: how shapes are read, pixel ranges,
colour modes and the loaders' resize."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

from fastweights.data.images import dataset_images, uint8_images
from fastweights.data.sources._resize import resize_image


def _gray(n: int, h: int = 8, w: int = 8) -> np.ndarray:
    return np.random.default_rng(n).integers(0, 256, size=(n, h, w), dtype=np.uint8)


def test_shapes_are_read_as_documented():
    g = _gray(5)
    assert [a.shape for a in uint8_images(g[0])] == [(8, 8)]  # [H, W]: one image
    assert len(uint8_images(g)) == 5  # [N, H, W]: a stack
    assert len(uint8_images(g[:4])) == 4  # [4, H, W] is four grayscale images, not one RGBA image
    assert [a.shape for a in uint8_images(g[:3])] == [(8, 8, 3)]  # [3, H, W]: one RGB image (CHW)
    assert [a.shape for a in uint8_images(g[:1])] == [(8, 8)]  # [1, H, W]: one grayscale image
    hwc = np.stack([g[0], g[1], g[2]], axis=-1)
    assert np.array_equal(uint8_images(hwc)[0], hwc)  # [H, W, 3]
    rgba = np.concatenate([hwc, np.full((8, 8, 1), 7, np.uint8)], axis=-1)
    assert np.array_equal(uint8_images(rgba)[0], hwc)  # alpha dropped
    assert np.array_equal(uint8_images(torch.from_numpy(np.moveaxis(hwc, -1, 0)))[0], hwc)  # CHW tensor
    both = np.random.default_rng(0).integers(0, 256, size=(3, 5, 3), dtype=np.uint8)
    assert uint8_images(both)[0].shape == (3, 5, 3)  # an array: HWC
    assert uint8_images(torch.from_numpy(both))[0].shape == (5, 3, 3)  # a tensor: CHW
    assert len(uint8_images(g[:, None])) == 5 and uint8_images(g[:, None])[0].shape == (8, 8)  # [N, 1, H, W]
    assert len(uint8_images(g[:, :, :, None])) == 5  # [N, H, W, 1]
    pil = [Image.fromarray(g[0]), Image.fromarray(hwc), Image.fromarray(g[1]).convert("P")]
    assert [a.shape for a in uint8_images(pil)] == [(8, 8), (8, 8, 3), (8, 8, 3)]


def test_pixel_ranges():
    g = _gray(2)
    assert np.array_equal(uint8_images(torch.from_numpy(g).double() / 255)[0], g[0])  # floats in [0, 1]
    assert np.array_equal(uint8_images(g.astype(np.int32))[1], g[1])
    assert uint8_images(np.ones((4, 4), dtype=bool))[0].max() == 255
    with pytest.raises(ValueError, match=r"float pixels in \[0, 1\]"):
        uint8_images(g.astype(np.float32))
    with pytest.raises(ValueError, match=r"integer pixels in \[0, 255\]"):
        uint8_images(np.array([[0, 256], [3, 4]]))
    with pytest.raises(ValueError, match="finite"):
        uint8_images(np.full((4, 4), np.nan))
    with pytest.raises(ValueError, match=r"images\[1\]: expected one image"):
        uint8_images([g[0], g])
    with pytest.raises(ValueError, match="expected a PIL image"):
        uint8_images("a.png")


def test_dataset_images_resize_and_convert_like_the_loaders():
    g = _gray(3, 20, 30)
    out = dataset_images(list(g), size=16, channels=1)
    assert out.shape == (3, 16, 16) and out.dtype == np.uint8
    assert np.array_equal(out[0], resize_image(g[0], 16))
    rgb = dataset_images(list(g), size=16, channels=3)  # grayscale repeated to 3 channels
    assert rgb.shape == (3, 3, 16, 16) and all(np.array_equal(rgb[:, c], out) for c in range(3))
    colour = np.stack([g[0], g[1], g[2]], axis=-1)
    back = dataset_images([colour], size=16, channels=1)[0]  # RGB → PIL "L", then resized
    assert np.array_equal(back, resize_image(np.asarray(Image.fromarray(colour).convert("L")), 16))
    with pytest.raises(ValueError, match="channels"):
        dataset_images(list(g), size=16, channels=2)
