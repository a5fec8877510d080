from __future__ import annotations

import pickle

import numpy as np
import pytest

from fastweights.data.sources._splits import read_split
from fastweights.data.sources.base import channel_stats
from fastweights.data.sources.cifar import load_cifar10, load_cifar100_pools
from tests.data.formats import write_cifar10, write_cifar100

SPLITS = ("train", "val", "test")
PAIRS = [tuple(p) for s in SPLITS for p in read_split("cifar100/cifar-fs", s)]  # all 100 (superclass, class)
FINE = sorted(f for _, f in PAIRS)
COARSE_OF = {f: c for c, f in PAIRS}


def test_packaged_split_lists():
    assert len(FINE) == len(set(FINE)) == 100 and len(set(COARSE_OF.values())) == 20
    assert all(list(COARSE_OF.values()).count(c) == 5 for c in set(COARSE_OF.values()))
    fc = {s: read_split("cifar100/fc100", s) for s in SPLITS}
    assert [len(fc[s]) for s in SPLITS] == [12, 4, 4] and len({c for s in SPLITS for c in fc[s]}) == 20
    assert fc["test"] == ["aquatic_mammals", "insects", "medium_mammals", "people"]
    assert [len(read_split("cifar100/cifar-fs", s)) for s in SPLITS] == [64, 16, 20]


@pytest.fixture(scope="module")
def cifar100(tmp_path_factory):
    root = tmp_path_factory.mktemp("cifar100")
    return root, write_cifar100(root, FINE, COARSE_OF, train_per_class=2, test_per_class=1)


def _as_set(images: np.ndarray) -> set[bytes]:
    return {img.tobytes() for img in images}


def test_fc100(cifar100):
    root, per_class = cifar100
    pools = load_cifar100_pools(root, "fc100")
    fc = {s: read_split("cifar100/fc100", s) for s in SPLITS}
    assert {s: p.images.shape for s, p in pools.items()} == {
        "train": (60, 3, 3, 32, 32),
        "val": (20, 3, 3, 32, 32),
        "test": (20, 3, 3, 32, 32),
    }
    for split, pool in pools.items():
        assert pool.name == f"FC100/{split}" and pool.channels == 3 and pool.images.dtype == np.uint8
        expected = [n for sup in fc[split] for n in sorted(f for f, c in COARSE_OF.items() if c == sup)]
        assert pool.class_names == expected and set(pool.alphabets) == set(fc[split])
        assert all(COARSE_OF[n] == a for n, a in zip(pool.class_names, pool.alphabets, strict=True))
        for c, name in enumerate(pool.class_names):  # train + test images of the class (channel order kept)
            assert _as_set(pool.images[c]) == _as_set(per_class[name])
        means, _ = channel_stats(pools["train"].images)
        assert pool.mean == pytest.approx(means)
    assert "dolphin" in pools["test"].class_names and "lion" in pools["val"].class_names


def test_cifar_fs(cifar100):
    root, per_class = cifar100
    pools = load_cifar100_pools(root, "cifar_fs", image_size=16)
    for split, pool in pools.items():
        pairs = read_split("cifar100/cifar-fs", split)
        assert pool.class_names == [f for _, f in pairs] and pool.alphabets == [c for c, _ in pairs]
        assert pool.images.shape == (len(pairs), 3, 3, 16, 16)
    assert [p.num_classes for p in pools.values()] == [64, 16, 20]


def test_duplicate_image_across_splits_raises(tmp_path):
    write_cifar100(tmp_path, FINE, COARSE_OF, train_per_class=1, test_per_class=1)
    path = tmp_path / "cifar-100-python" / "test"
    with open(path, "rb") as f:
        test = pickle.load(f)
    with open(tmp_path / "cifar-100-python" / "train", "rb") as f:
        train = pickle.load(f)
    dolphin, lion = FINE.index("dolphin"), FINE.index("lion")  # FC100 test / val classes
    test[b"data"][test[b"fine_labels"].index(dolphin)] = train[b"data"][train[b"fine_labels"].index(lion)]
    with open(path, "wb") as f:
        pickle.dump(test, f, protocol=2)
    with pytest.raises(ValueError, match="no image in two splits") as err:
        load_cifar100_pools(tmp_path, "fc100")
    assert "val:lion ~ test:dolphin" in str(err.value)


def test_missing_and_malformed(tmp_path):
    with pytest.raises(FileNotFoundError) as err:
        load_cifar100_pools(tmp_path, "cifar_fs")
    assert str(tmp_path / "cifar-100-python" / "meta") in str(err.value)
    assert "{train,test,meta}" in str(err.value)
    write_cifar100(tmp_path, FINE, COARSE_OF, train_per_class=1, test_per_class=1)
    path = tmp_path / "cifar-100-python" / "train"
    with open(path, "rb") as f:
        good = f.read()
    data = pickle.loads(good)
    with open(path, "wb") as f:
        pickle.dump({k: v for k, v in data.items() if k != b"data"}, f, protocol=2)
    with pytest.raises(ValueError, match="'data' uint8 \\[N, 3072\\]") as err:
        load_cifar100_pools(tmp_path)
    assert str(path) in str(err.value)
    path.write_bytes(good[:100])
    with pytest.raises(ValueError, match="pickled dict of numpy arrays"):
        load_cifar100_pools(tmp_path)
    path.write_bytes(good)
    wrong = dict(COARSE_OF, dolphin="fish")
    write_cifar100(tmp_path, FINE, wrong, train_per_class=1, test_per_class=1)
    with pytest.raises(
        ValueError, match="expected class 'dolphin' of superclass 'aquatic_mammals', given superclass 'fish'"
    ):
        load_cifar100_pools(tmp_path, "cifar_fs")
    with pytest.raises(ValueError, match="benchmark"):
        load_cifar100_pools(tmp_path, "cifar100")


def test_cifar10(tmp_path):
    tr_imgs, tr_labels, te_imgs, te_labels = write_cifar10(tmp_path)
    ds = load_cifar10(tmp_path)
    assert ds.name == "CIFAR-10" and ds.num_classes == 10 and ds.channels == 3
    assert ds.train.images.shape == (20, 3, 32, 32) and ds.test.images.shape == (6, 3, 32, 32)
    np.testing.assert_array_equal(ds.train.images, tr_imgs)  # row = R plane | G plane | B plane
    np.testing.assert_array_equal(ds.test.labels, te_labels)
    assert ds.train.labels.dtype == np.int64 and list(ds.train.labels) == list(tr_labels)
    assert ds.mean == pytest.approx(channel_stats(tr_imgs)[0])
    assert load_cifar10(tmp_path, image_size=16).train.images.shape == (20, 3, 16, 16)
    (tmp_path / "cifar-10-batches-py" / "data_batch_3").unlink()
    with pytest.raises(FileNotFoundError) as err:
        load_cifar10(tmp_path)
    assert str(tmp_path / "cifar-10-batches-py" / "data_batch_3") in str(err.value)
    assert "data_batch_{1..5}" in str(err.value) and "test_batch" in str(err.value)
