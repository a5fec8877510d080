from __future__ import annotations

import numpy as np
import pytest

from fastweights.data.sources.base import (
    ClassPool,
    LabeledImages,
    SplitDataset,
    channel_stats,
    image_stats,
    normalize,
    pixel_stats,
)


def test_normalize_and_stats():
    x = np.array([[0, 255], [51, 102]], dtype=np.uint8)
    mean, std = pixel_stats(x)
    assert mean == pytest.approx((x / 255).mean()) and std == pytest.approx((x / 255).std())
    y = normalize(x, mean, std)
    assert y.dtype == np.float32 and y.shape == x.shape
    np.testing.assert_allclose(y, (x / 255 - mean) / std, rtol=1e-6, atol=1e-6)
    with pytest.raises(ValueError, match="images"):
        normalize(x.astype(np.float32), 0.0, 1.0)
    with pytest.raises(ValueError, match="std"):
        normalize(x, 0.0, 0.0)


def test_class_pool_validation():
    imgs = np.zeros((3, 2, 4, 4), np.uint8)
    ClassPool("p", imgs, ["a", "b", "c"], ["x"] * 3, 0.1, 0.2)
    with pytest.raises(ValueError, match="images: expected dtype uint8"):
        ClassPool("p", imgs.astype(np.float32), ["a", "b", "c"], ["x"] * 3, 0.1, 0.2)
    with pytest.raises(ValueError, match="images: expected 4 dims"):
        ClassPool("p", imgs[0], ["a", "b"], ["x"] * 2, 0.1, 0.2)
    with pytest.raises(ValueError, match="class_names: expected length C = 3"):
        ClassPool("p", imgs, ["a"], ["x"] * 3, 0.1, 0.2)
    with pytest.raises(ValueError, match="alphabets"):
        ClassPool("p", imgs, ["a", "b", "c"], ["x"], 0.1, 0.2)
    with pytest.raises(ValueError, match="std"):
        ClassPool("p", imgs, ["a", "b", "c"], ["x"] * 3, 0.1, float("nan"))


def test_split_dataset_validation():
    tr = LabeledImages(np.zeros((4, 8, 8), np.uint8), np.array([0, 1, 2, 1]))
    te = LabeledImages(np.zeros((2, 8, 8), np.uint8), np.array([0, 2]))
    SplitDataset("d", tr, te, 3, 0.5, 0.5)
    with pytest.raises(ValueError, match="train.labels"):
        SplitDataset("d", tr, te, 2, 0.5, 0.5)
    with pytest.raises(ValueError, match="labels: expected an int64"):
        LabeledImages(np.zeros((2, 8, 8), np.uint8), np.array([0, 1], dtype=np.int32))
    with pytest.raises(ValueError, match="labels: expected shape"):
        LabeledImages(np.zeros((2, 8, 8), np.uint8), np.array([0, 1, 2]))
    with pytest.raises(ValueError, match="test: expected images"):
        SplitDataset("d", tr, LabeledImages(np.zeros((2, 4, 4), np.uint8), np.array([0, 2])), 3, 0.5, 0.5)


def test_rgb_containers_and_per_channel_stats():
    rgb = np.zeros((3, 2, 3, 4, 4), np.uint8)
    pool = ClassPool("p", rgb, ["a", "b", "c"], ["x"] * 3, (0.1, 0.2, 0.3), [0.5, 0.5, 0.5])
    assert pool.channels == 3 and pool.image_size == 4 and pool.mean == (0.1, 0.2, 0.3)
    assert pool.std == (0.5, 0.5, 0.5) and isinstance(pool.std, tuple)
    assert ClassPool("p", rgb, ["a", "b", "c"], ["x"] * 3, 0.1, 0.2).mean == (0.1, 0.1, 0.1)  # broadcast
    gray = ClassPool("p", rgb[:, :, 0], ["a", "b", "c"], ["x"] * 3, 0.1, 0.2)
    assert gray.channels == 1 and gray.mean == 0.1
    with pytest.raises(ValueError, match="mean: expected a finite float, given"):
        ClassPool("p", rgb[:, :, 0], ["a", "b", "c"], ["x"] * 3, (0.1, 0.2, 0.3), 0.2)
    with pytest.raises(ValueError, match="std: expected a finite float > 0 or a sequence of 3"):
        ClassPool("p", rgb, ["a", "b", "c"], ["x"] * 3, 0.1, (0.2, 0.0, 0.2))
    with pytest.raises(ValueError, match="mean"):
        ClassPool("p", rgb, ["a", "b", "c"], ["x"] * 3, (0.1, 0.2), 0.2)
    with pytest.raises(ValueError, match="images: expected 4 dims"):  # 4 channels is not RGB
        ClassPool("p", np.zeros((3, 2, 4, 4, 4), np.uint8), ["a", "b", "c"], ["x"] * 3, 0.1, 0.2)
    tr = LabeledImages(np.zeros((4, 3, 8, 8), np.uint8), np.array([0, 1, 2, 1]))
    te = LabeledImages(np.zeros((2, 3, 8, 8), np.uint8), np.array([0, 2]))
    ds = SplitDataset("d", tr, te, 3, (0.5, 0.4, 0.3), (0.2, 0.2, 0.2))
    assert tr.channels == ds.channels == 3 and ds.image_size == 8
    with pytest.raises(ValueError, match="test: expected images"):
        SplitDataset("d", tr, LabeledImages(np.zeros((2, 8, 8), np.uint8), np.array([0, 2])), 3, 0.5, 0.5)


def test_channel_stats_exact_and_normalize_per_channel():
    rng = np.random.default_rng(0)
    x = rng.integers(0, 256, (5, 2, 3, 6, 6), dtype=np.uint8)
    means, stds = channel_stats(x, chunk=3)  # chunks over the 10 leading images
    ref = x.astype(np.float64) / 255
    np.testing.assert_allclose(means, ref.mean(axis=(0, 1, 3, 4)), rtol=1e-12)
    np.testing.assert_allclose(stds, ref.std(axis=(0, 1, 3, 4)), rtol=1e-12)
    assert image_stats(x, 3) == (means, stds) and image_stats(x[:, :, 0], 1) == pixel_stats(x[:, :, 0])
    y = normalize(x, means, stds)
    assert y.dtype == np.float32 and y.shape == x.shape
    np.testing.assert_allclose(y.mean(axis=(0, 1, 3, 4)), 0, atol=1e-5)
    np.testing.assert_allclose(y.std(axis=(0, 1, 3, 4)), 1, atol=1e-5)
    with pytest.raises(ValueError, match="mean"):
        normalize(x, (0.1, 0.2), 1.0)
    with pytest.raises(ValueError, match="channels"):
        image_stats(x, 2)
    with pytest.raises(ValueError, match="images"):
        channel_stats(np.zeros((4, 4), np.uint8))


@pytest.mark.parametrize("layout", ["contiguous", "strided", "read-only"])
def test_stats_are_the_exact_histogram_statistics_for_any_layout(layout):
    rng = np.random.default_rng(3)
    images = rng.integers(0, 256, (7, 3, 5, 5), dtype=np.uint8) // rng.integers(1, 9, (7, 3, 5, 5)).astype(
        np.uint8
    )
    if layout == "strided":
        images = np.ascontiguousarray(np.swapaxes(images, 2, 3))[:, :, ::-1]
    if layout == "read-only":
        images.setflags(write=False)
    counts = np.bincount(images.ravel().astype(np.int64), minlength=256)  # the plain numpy histogram
    values = np.arange(256) / 255.0
    mean = (counts * values).sum() / counts.sum()
    std = np.sqrt((counts * (values - mean) ** 2).sum() / counts.sum())
    assert pixel_stats(images) == (mean, std)  # bit for bit: the same counts, the same sums
    means, stds = channel_stats(images)
    for c in range(3):
        cc = np.bincount(images[:, c].ravel().astype(np.int64), minlength=256)
        m = (cc * values).sum() / cc.sum()
        assert means[c] == m and stds[c] == np.sqrt((cc * (values - m) ** 2).sum() / cc.sum())
