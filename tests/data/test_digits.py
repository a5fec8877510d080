from __future__ import annotations

import numpy as np
import pytest

from fastweights.data.sources.base import pixel_stats
from fastweights.data.sources.digits import load_digits_split


@pytest.fixture(scope="module")
def digits():
    return load_digits_split()


def test_shapes_dtypes_and_split_sizes(digits):
    assert digits.name == "Digits" and digits.num_classes == 10
    assert digits.train.images.shape == (898, 32, 32) and digits.test.images.shape == (899, 32, 32)
    assert digits.train.images.dtype == np.uint8 and digits.train.labels.dtype == np.int64
    assert digits.train.images.max() == 255 and digits.train.images.min() == 0


def test_stratified_and_disjoint(digits):
    tr = np.bincount(digits.train.labels, minlength=10)
    te = np.bincount(digits.test.labels, minlength=10)
    assert np.abs(tr - te).max() <= 1
    all_imgs = {im.tobytes() for im in digits.train.images}
    # the sklearn set contains a few exact duplicates; the split itself must be a partition
    overlap = sum(im.tobytes() in all_imgs for im in digits.test.images)
    assert overlap < 5


def test_matches_sklearn_pixels_and_stats(digits):
    from sklearn.datasets import load_digits

    d8 = load_digits_split(image_size=8)
    ref = np.rint(load_digits().images * 255 / 16).astype(np.uint8)
    found = {im.tobytes() for im in ref}
    assert all(im.tobytes() in found for im in d8.train.images[:50])
    assert (digits.mean, digits.std) == pytest.approx(pixel_stats(digits.train.images))
    assert 0.2 < digits.mean < 0.4


def test_seed_changes_split_deterministically(digits):
    again = load_digits_split(seed=0)
    np.testing.assert_array_equal(again.train.labels, digits.train.labels)
    np.testing.assert_array_equal(again.test.images, digits.test.images)
    other = load_digits_split(seed=1)
    assert not np.array_equal(other.train.images, digits.train.images)
    assert load_digits_split(image_size=16).train.images.shape == (898, 16, 16)


@pytest.mark.parametrize("kwargs", [{"image_size": 0}, {"image_size": 2.5}, {"seed": -1}])
def test_bad_arguments(kwargs):
    with pytest.raises(ValueError, match=next(iter(kwargs))):
        load_digits_split(**kwargs)
