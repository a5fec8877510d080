from __future__ import annotations

import numpy as np
import pytest

from fastweights.data.sources.base import ClassPool, LabeledImages, SplitDataset, normalize, pixel_stats


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
