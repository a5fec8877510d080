from __future__ import annotations

import numpy as np
import pytest

from fastweights.data.sources._pools import PoolParts, check_disjoint, make_pools, stack_classes


def parts(images: np.ndarray, names: list[str]) -> PoolParts:
    return PoolParts(images, names, ["g"] * len(names), list(names))


def test_make_pools_uses_train_statistics():
    rng = np.random.default_rng(0)
    tr = rng.integers(0, 100, (2, 3, 5, 5), dtype=np.uint8)
    te = rng.integers(100, 256, (2, 3, 5, 5), dtype=np.uint8)
    pools = make_pools("D", {"train": parts(tr, ["a", "b"]), "test": parts(te, ["c", "d"])})
    assert pools["test"].name == "D/test" and pools["test"].mean == pools["train"].mean
    assert pools["train"].mean == pytest.approx(tr.mean() / 255)
    alone = make_pools("D", {"test": parts(te, ["c", "d"])})
    assert alone["test"].mean == pytest.approx(te.mean() / 255)
    rgb = make_pools("D", {"train": parts(rng.integers(0, 256, (2, 3, 3, 4, 4), dtype=np.uint8), ["a", "b"])})
    assert len(rgb["train"].mean) == 3


def test_check_disjoint():
    rng = np.random.default_rng(1)
    a = rng.integers(0, 256, (2, 2, 4, 4), dtype=np.uint8)
    b = rng.integers(0, 256, (2, 2, 4, 4), dtype=np.uint8)
    check_disjoint("D", {"train": parts(a, ["x", "y"]), "test": parts(b, ["z", "w"])})
    dup = b.copy()
    dup[0, 0] = dup[1, 1]  # a duplicate within a split is allowed
    check_disjoint("D", {"train": parts(a, ["x", "y"]), "test": parts(dup, ["z", "w"])})
    with pytest.raises(
        ValueError, match="D: expected disjoint classes across splits, given 1 shared: train:y = test:y"
    ):
        check_disjoint("D", {"train": parts(a, ["x", "y"]), "test": parts(b, ["y", "w"])})
    dup[1, 0] = a[0, 1]
    with pytest.raises(ValueError, match="identical images in the classes train:x ~ test:w"):
        check_disjoint("D", {"train": parts(a, ["x", "y"]), "test": parts(dup, ["z", "w"])})


def test_stack_classes():
    out = stack_classes("D", [np.zeros((2, 3)), np.ones((2, 3))], ["a", "b"])
    assert out.shape == (2, 2, 3)
    with pytest.raises(
        ValueError,
        match="D: expected the same number of images in every class \\(2, as a\\), given c \\(1\\)",
    ):
        stack_classes("D", [np.zeros((2, 3)), np.ones((2, 3)), np.ones((1, 3))], ["a", "b", "c"])
    with pytest.raises(ValueError, match="at least one class"):
        stack_classes("D", [], [])
