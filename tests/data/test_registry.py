from __future__ import annotations

import numpy as np
import pytest

from fastweights.data import registry
from fastweights.data.registry import (
    CLASS_POOLS,
    RGB_SOURCES,
    SPLIT_DATASETS,
    PoolConfig,
    check_channels,
    load_class_pools,
    load_pools_for,
    load_split_dataset,
)
from tests.data.formats import split_tree, write_cifar10, write_mini_imagenet_pkl, write_omniglot_pngs
from tests.data.test_idx import _fake_dataset


def test_names():
    assert CLASS_POOLS == (
        "fontglyphs",
        "emoji",
        "omniglot",
        "mini_imagenet",
        "fc100",
        "cifar_fs",
        "handwriting",
    )
    assert SPLIT_DATASETS == ("digits", "fashion_mnist", "mnist", "cifar10", "font_letters", "colour_digits")
    with pytest.raises(ValueError, match="name: expected one of .*'omniglot'.*given 'imagenet'"):
        load_class_pools("imagenet", "/tmp")
    with pytest.raises(ValueError, match="name: expected one of .*'cifar10'.*given 'svhn'"):
        load_split_dataset("svhn", "/tmp")


def test_fontglyphs_dispatch(monkeypatch):
    calls = []
    monkeypatch.setattr(registry, "load_font_glyphs", lambda **kw: calls.append(kw) or {"train": None})
    monkeypatch.setattr(registry, "exclude_benchmark_concepts", lambda name, pools: pools)  # tested apart
    assert load_class_pools("fontglyphs") == {"train": None}
    load_class_pools("fontglyphs", image_size=16, seed=3)
    assert calls == [{"image_size": 32}, {"image_size": 16, "seed": 3}]


def test_pools_from_local_folders(tmp_path, monkeypatch):
    chars = [("background", "Armenian", "character01"), ("evaluation", "ULOG", "character26")]
    write_omniglot_pngs(tmp_path, chars)
    splits = {"train": split_tree(chars[:1]), "test": split_tree(chars[1:])}
    pools = load_class_pools("omniglot", tmp_path, splits=splits, cache=False)
    assert pools["train"].images.shape == (1, 2, 28, 28)  # default size 28
    assert "omniglot" not in RGB_SOURCES and "mini_imagenet" in RGB_SOURCES
    write_mini_imagenet_pkl(tmp_path, {"train": ["n1"], "val": ["n2"], "test": ["n3"]}, per_class=2)
    monkeypatch.setenv("FASTWEIGHTS_DATA", str(tmp_path))  # root=None -> $FASTWEIGHTS_DATA
    pools = load_class_pools("mini_imagenet", cache=False)
    assert pools["val"].images.shape == (1, 2, 3, 84, 84)  # default size 84, RGB
    monkeypatch.delenv("FASTWEIGHTS_DATA")
    with pytest.raises(ValueError, match="root: expected the local folder .*FASTWEIGHTS_DATA"):
        load_class_pools("fc100")
    with pytest.raises(FileNotFoundError, match="cifar-100-python"):
        load_class_pools("cifar_fs", tmp_path)


def test_split_datasets(tmp_path):
    digits = load_split_dataset("digits", image_size=16)
    assert digits.name == "Digits" and digits.train.images.shape[1:] == (16, 16)
    tr, _ = _fake_dataset(tmp_path / "MNIST" / "raw")
    mnist = load_split_dataset("mnist", tmp_path)
    assert mnist.name == "MNIST" and mnist.train.images.shape == (len(tr), 32, 32)
    fashion = load_split_dataset("fashion_mnist", tmp_path / "MNIST" / "raw", image_size=28)
    assert fashion.name == "Fashion-MNIST"
    np.testing.assert_array_equal(fashion.train.images, tr)
    write_cifar10(tmp_path)
    cifar = load_split_dataset("cifar10", tmp_path)
    assert cifar.channels == 3 and cifar.train.images.shape == (20, 3, 32, 32)
    assert {"cifar10"} == {"digits", "mnist", "fashion_mnist", "cifar10"} & set(RGB_SOURCES)


def test_channels_must_fit_the_sources():
    """An RGB source needs 3 channels (refused by the config, before any data is built); grayscale
    sources take 1 or 3 (repeated)."""
    assert set(RGB_SOURCES) == {"emoji", "mini_imagenet", "fc100", "cifar_fs", "cifar10", "colour_digits"}
    check_channels("channels", 3, ["fontglyphs", "emoji"])
    check_channels("channels", 1, ["fontglyphs", "omniglot", "nope"])  # unknown names: the source checks
    with pytest.raises(
        ValueError, match=r"^data\.channels: expected 3 for the RGB source\(s\) \['fc100', 'emoji'\]"
    ):
        check_channels("data.channels", 1, ["fc100", "fontglyphs", "emoji"])
    for source in RGB_SOURCES:
        with pytest.raises(ValueError, match=rf"^channels: expected 3 .*'{source}'.*got 1$"):
            PoolConfig(source=source, channels=1)
        assert PoolConfig(source=source, channels=3).domains == [source]
    assert PoolConfig(source="fashion_mnist", channels=3).channels == 3


@pytest.mark.parametrize("source", ["omniglot", "mnist", "cifar10"])
def test_a_source_without_its_folder_names_the_section_key(source, monkeypatch):
    monkeypatch.delenv("FASTWEIGHTS_DATA", raising=False)
    with pytest.raises(
        ValueError, match=rf"^domain_b\.root: expected the local folder holding the '{source}'"
    ):
        load_pools_for(PoolConfig(source=source, channels=3), "domain_b")


def test_cache_dir_reaches_the_loaders_that_cache_and_the_others_ignore_it(tmp_path):
    _fake_dataset(tmp_path / "mnist")
    cache = tmp_path / "cache"
    ds = load_split_dataset("mnist", tmp_path / "mnist", image_size=16, cache_dir=cache)
    assert ds.train.images.shape[1:] == (16, 16)
    assert [p.name.startswith("idx-MNIST-") for p in cache.iterdir()] == [True]
    digits = load_split_dataset("digits", image_size=16, cache_dir=tmp_path / "unused")
    assert digits.num_classes == 10 and not (tmp_path / "unused").exists()


def test_pools_of_a_split_data_set_use_the_configs_cache_dir(tmp_path, monkeypatch):
    seen = {}

    def spy(folder, **kwargs):
        seen.update(kwargs)
        raise RuntimeError("stop here")

    monkeypatch.setattr(registry, "load_idx_dataset", spy)
    with pytest.raises(RuntimeError, match="stop here"):
        load_pools_for(PoolConfig(source="mnist", root=str(tmp_path), cache_dir=str(tmp_path / "c")))
    assert seen["cache_dir"] == str(tmp_path / "c")
