from __future__ import annotations

import numpy as np
import pytest

from fastweights.data.sources.base import LabeledImages, SplitDataset
from fastweights.data.sources.digits import load_digits_split
from fastweights.data.streams import split_benchmark


def make_ds(n_train=200, n_test=50, seed=0) -> SplitDataset:
    """Images encode their own index: pixel (0, 0) = index // 256, (0, 1) = index % 256."""
    rng = np.random.default_rng(seed)

    def part(n):
        imgs = np.zeros((n, 4, 4), np.uint8)
        imgs[:, 0, 0], imgs[:, 0, 1] = np.arange(n) // 256, np.arange(n) % 256
        return LabeledImages(imgs, rng.permutation(np.arange(n) % 10).astype(np.int64))

    return SplitDataset("toy", part(n_train), part(n_test), 10, 0.1, 0.2)


def index_of(images):
    return images[:, 0, 0].astype(int) * 256 + images[:, 0, 1]


@pytest.mark.parametrize("run", [0, 3])
def test_demos_follow_dataset_order_shot_major(run):
    ds = make_ds()
    tasks = split_benchmark(ds, k_shot=4, run=run)
    assert [t.name for t in tasks] == ["0/1", "2/3", "4/5", "6/7", "8/9"]
    for t, (a, b) in zip(tasks, [(0, 1), (2, 3), (4, 5), (6, 7), (8, 9)], strict=True):
        idx = index_of(t.support_images)
        want_a = np.flatnonzero(ds.train.labels == a)[4 * run : 4 * run + 4]
        want_b = np.flatnonzero(ds.train.labels == b)[4 * run : 4 * run + 4]
        np.testing.assert_array_equal(idx[0::2], want_a)
        np.testing.assert_array_equal(idx[1::2], want_b)
        np.testing.assert_array_equal(t.support_labels, [0, 1] * 4)
        np.testing.assert_array_equal(
            index_of(t.query_images), np.flatnonzero(np.isin(ds.test.labels, [a, b]))
        )
        np.testing.assert_array_equal(
            t.query_labels, (ds.test.labels[index_of(t.query_images)] == b).astype(int)
        )
        assert t.support_labels.dtype == np.int64 and t.query_labels.dtype == np.int64


def test_runs_use_disjoint_demos_and_class_scenario():
    ds = make_ds()
    r0 = split_benchmark(ds, k_shot=5, run=0, scenario="class")
    r1 = split_benchmark(ds, k_shot=5, run=1, scenario="class")
    for a, b in zip(r0, r1, strict=True):
        assert not set(index_of(a.support_images)) & set(index_of(b.support_images))
        np.testing.assert_array_equal(a.support_labels, ds.train.labels[index_of(a.support_images)])
        np.testing.assert_array_equal(a.query_labels, ds.test.labels[index_of(a.query_images)])
    assert set(r0[2].support_labels.tolist()) == {4, 5}


def test_custom_groups():
    ds = make_ds()
    tasks = split_benchmark(ds, k_shot=2, run=0, class_groups=[(3, 1, 7)])
    assert tasks[0].name == "3/1/7"
    np.testing.assert_array_equal(ds.train.labels[index_of(tasks[0].support_images)], [3, 1, 7, 3, 1, 7])
    np.testing.assert_array_equal(tasks[0].support_labels, [0, 1, 2, 0, 1, 2])


def test_digits_benchmark_sizes():
    ds = load_digits_split()
    tasks = split_benchmark(ds, k_shot=5, run=9)
    assert sum(len(t.query_labels) for t in tasks) == len(ds.test)
    assert all(t.support_images.shape == (10, 32, 32) for t in tasks)


@pytest.mark.parametrize(
    "kw, match",
    [
        ({"k_shot": 5, "run": 4}, "run: expected class"),  # 20 images per class, 25 needed
        ({"k_shot": 0, "run": 0}, "k_shot"),
        ({"k_shot": 1, "run": -1}, "run"),
        ({"k_shot": 1, "run": 0, "scenario": "task"}, "scenario"),
        ({"k_shot": 1, "run": 0, "class_groups": [(0, 10)]}, "class_groups"),
        ({"k_shot": 1, "run": 0, "class_groups": [(0, 1), (1, 2)]}, "class_groups"),
        ({"k_shot": 1, "run": 0, "class_groups": []}, "class_groups"),
    ],
)
def test_errors(kw, match):
    with pytest.raises(ValueError, match=match):
        split_benchmark(make_ds(), **kw)
