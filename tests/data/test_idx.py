from __future__ import annotations

import gzip
import os
import struct
from pathlib import Path

import numpy as np
import pytest

from fastweights.data.sources.idx import IDX_FILES, load_idx_dataset, read_idx

CODES = {
    np.dtype(np.uint8): 0x08,
    np.dtype(np.int8): 0x09,
    np.dtype(np.int16): 0x0B,
    np.dtype(np.int32): 0x0C,
    np.dtype(np.float32): 0x0D,
    np.dtype(np.float64): 0x0E,
}
FASHION = Path("/usr/share/datasets/fashion-mnist")


def write_idx(path: Path, array: np.ndarray, gz: bool = False) -> Path:
    """Write ``array`` in the IDX format by hand (independent of the reader under test)."""
    header = bytes([0, 0, CODES[array.dtype], array.ndim]) + struct.pack(f">{array.ndim}I", *array.shape)
    data = header + array.astype(array.dtype.newbyteorder(">")).tobytes()
    if gz:
        path = path.with_name(path.name + ".gz")
        data = gzip.compress(data)
    path.write_bytes(data)
    return path


@pytest.mark.parametrize("gz", [False, True])
@pytest.mark.parametrize("dtype", [np.uint8, np.int16, np.float32])
def test_read_idx_roundtrip(tmp_path, gz, dtype):
    arr = (np.arange(2 * 3 * 5) * 7 % 251).astype(dtype).reshape(2, 3, 5)
    got = read_idx(write_idx(tmp_path / "x-idx3", arr, gz))
    assert got.dtype == np.dtype(dtype) and got.dtype.isnative
    np.testing.assert_array_equal(got, arr)


def test_read_idx_malformed(tmp_path):
    good = write_idx(tmp_path / "good", np.zeros((4, 2, 2), np.uint8)).read_bytes()
    cases = {
        "magic": b"\x01" + good[1:],
        "type": good[:2] + b"\x07" + good[3:],
        "trunc": good[:-1],
        "header": good[:6],
        "empty": b"",
    }
    for name, data in cases.items():
        (tmp_path / name).write_bytes(data)
        with pytest.raises(ValueError, match="expected"):
            read_idx(tmp_path / name)
    (tmp_path / "badgz").write_bytes(gzip.compress(good)[:-8])
    with pytest.raises(ValueError, match="gzip"):
        read_idx(tmp_path / "badgz")


def _fake_dataset(folder: Path, n_train=30, n_test=10, gz=True) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    folder.mkdir(parents=True, exist_ok=True)
    tr = rng.integers(0, 256, (n_train, 28, 28), dtype=np.uint8)
    te = rng.integers(0, 256, (n_test, 28, 28), dtype=np.uint8)
    write_idx(folder / IDX_FILES["train_images"], tr, gz)
    write_idx(folder / IDX_FILES["train_labels"], (np.arange(n_train) % 10).astype(np.uint8), not gz)
    write_idx(folder / IDX_FILES["test_images"], te, gz)
    write_idx(folder / IDX_FILES["test_labels"], (np.arange(n_test) % 7).astype(np.uint8), gz)
    return tr, te


def test_load_idx_dataset_fixture(tmp_path):
    tr, te = _fake_dataset(tmp_path / "ds")
    ds = load_idx_dataset(tmp_path / "ds", name="Fake", image_size=32, cache=False)
    assert ds.name == "Fake" and ds.num_classes == 10
    assert ds.train.images.shape == (30, 32, 32) and ds.test.images.shape == (10, 32, 32)
    assert ds.train.labels.dtype == np.int64
    np.testing.assert_array_equal(ds.test.labels, np.arange(10) % 7)
    same = load_idx_dataset(tmp_path / "ds", image_size=28, cache=False)
    np.testing.assert_array_equal(same.train.images, tr)
    # bilinear: the mean brightness is preserved up to rounding/edges
    assert abs(ds.train.images.mean() - tr.mean()) < 2


def test_decoded_arrays_are_cached_per_size_and_file_version(tmp_path, monkeypatch):
    _fake_dataset(tmp_path / "ds")
    cache = tmp_path / "cache"
    first = load_idx_dataset(tmp_path / "ds", name="Fake", image_size=32, cache_dir=cache)
    assert [p.name.startswith("idx-Fake-") for p in cache.iterdir()] == [True]
    fresh = load_idx_dataset(tmp_path / "ds", name="Fake", image_size=32, cache=False)
    import fastweights.data.sources.idx as idx

    def no_decoding(path):
        raise AssertionError(f"decoded {path} again")

    with monkeypatch.context() as m:
        m.setattr(idx, "read_idx", no_decoding)
        again = load_idx_dataset(tmp_path / "ds", name="Fake", image_size=32, cache_dir=cache)
    for ds in (fresh, again):  # the cached copy is the decoded data set, bit for bit
        for split in ("train", "test"):
            np.testing.assert_array_equal(getattr(ds, split).images, getattr(first, split).images)
            np.testing.assert_array_equal(getattr(ds, split).labels, getattr(first, split).labels)
            assert getattr(ds, split).labels.dtype == np.int64
        assert (ds.mean, ds.std, ds.num_classes) == (first.mean, first.std, first.num_classes)
    load_idx_dataset(tmp_path / "ds", name="Fake", image_size=28, cache_dir=cache)  # another size
    assert len(list(cache.iterdir())) == 2
    labels = write_idx(tmp_path / "ds" / IDX_FILES["test_labels"], np.arange(10, dtype=np.uint8) % 3, gz=True)
    os.utime(labels, ns=(1, 1))  # a changed file is decoded again (its time, not only its size, counts)
    changed = load_idx_dataset(tmp_path / "ds", name="Fake", image_size=32, cache_dir=cache)
    np.testing.assert_array_equal(changed.test.labels, np.arange(10) % 3)
    assert len(list(cache.iterdir())) == 3


def test_load_idx_dataset_mismatched_counts(tmp_path):
    _fake_dataset(tmp_path)
    write_idx(tmp_path / IDX_FILES["test_labels"], np.zeros(3, np.uint8), gz=True)
    with pytest.raises(ValueError, match="expected 10 labels"):
        load_idx_dataset(tmp_path)


def test_missing_files(tmp_path):
    with pytest.raises(FileNotFoundError) as err:
        load_idx_dataset(tmp_path / "nowhere")
    msg = str(err.value)
    assert all(name in msg for name in IDX_FILES.values())
    assert "nowhere" in msg and "apt-get install dataset-fashion-mnist" in msg
    _fake_dataset(tmp_path / "partial")
    (tmp_path / "partial" / (IDX_FILES["test_images"] + ".gz")).unlink()
    with pytest.raises(FileNotFoundError, match="found all but t10k-images-idx3-ubyte in .*partial"):
        load_idx_dataset(tmp_path / "partial")
    with pytest.raises(FileNotFoundError) as err:  # the Fashion-MNIST package hint only for Fashion-MNIST
        load_idx_dataset(tmp_path / "nowhere", name="MNIST", torchvision_name="MNIST")
    assert "found none" in str(err.value) and "apt-get" not in str(err.value)


@pytest.mark.skipif(not FASHION.is_dir(), reason="Debian package dataset-fashion-mnist not installed")
def test_real_fashion_mnist():
    ds = load_idx_dataset()
    assert ds.name == "Fashion-MNIST" and ds.num_classes == 10
    assert ds.train.images.shape == (60000, 32, 32) and ds.test.images.shape == (10000, 32, 32)
    np.testing.assert_array_equal(np.bincount(ds.test.labels), [1000] * 10)
    assert ds.mean == pytest.approx(0.286, abs=0.01)


@pytest.mark.parametrize("sub", ["raw", "MNIST/raw"])
def test_torchvision_raw_layout(tmp_path, sub):
    tr, _ = _fake_dataset(tmp_path / sub, gz=False)
    ds = load_idx_dataset(tmp_path, name="MNIST", image_size=28, torchvision_name="MNIST")
    np.testing.assert_array_equal(ds.train.images, tr)
    with pytest.raises(FileNotFoundError) as err:  # without the name, <root>/MNIST/raw is not searched
        load_idx_dataset(tmp_path / "elsewhere", name="MNIST", torchvision_name="FashionMNIST")
    msg = str(err.value)
    assert (
        str(tmp_path / "elsewhere" / "FashionMNIST" / "raw") in msg
        and str(tmp_path / "elsewhere" / "raw") in msg
    )
