from __future__ import annotations

import pytest

from fastweights.data.sources._splits import SPLIT_NAMES, read_split


def test_read_split_packaged_files():
    assert SPLIT_NAMES == ("train", "val", "test")
    val = read_split("omniglot", "val")
    assert set(val) == {"background", "evaluation"} and not any(val["evaluation"].values())
    assert read_split("cifar100/fc100", "val") == [
        "large_carnivores",
        "large_omnivores_and_herbivores",
        "non-insect_invertebrates",
        "small_mammals",
    ]
    with pytest.raises(ValueError, match="split: expected one of"):
        read_split("omniglot", "validation")
