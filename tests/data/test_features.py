"""Frozen-encoder feature cache (data/features.py): computed once, keyed by encoder, weights, input size,
source and image content; FeaturePool through the episode sampler."""

from __future__ import annotations

import numpy as np
import pytest

from fastweights.data.episodes import EpisodeSampler
from fastweights.data.features import FeaturePool, encode_cached, feature_pool
from fastweights.data.sources.base import ClassPool


class CountingEncoder:
    """A stand-in encoder: features = per-image mean and max of the pixels, scaled by the input size."""

    feature_dim = 2

    def __init__(self, name: str = "toy", weights: str = "ab" * 32) -> None:
        self.name, self.weights_sha256, self.calls = name, weights, 0

    def fingerprint(self):
        return {}

    def encode(self, images, *, image_size, batch_size=64, progress=None):
        self.calls += 1
        flat = images.reshape(len(images), -1).astype(np.float32)
        if progress is not None:
            progress(len(images))
        return np.stack([flat.mean(1), flat.max(1)], axis=1) * image_size / 100


def _images(seed: int = 0, n: int = 6) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, size=(n, 3, 8, 8), dtype=np.uint8)


def test_features_are_computed_once_and_read_back(tmp_path):
    enc, images = CountingEncoder(), _images()
    first = encode_cached(enc, images, source="toy/train", image_size=16, cache_dir=tmp_path)
    second = encode_cached(enc, images, source="toy/train", image_size=16, cache_dir=tmp_path)
    assert enc.calls == 1 and first.dtype == np.float32 and first.shape == (6, 2)
    np.testing.assert_array_equal(first, second)
    exact = enc.encode(images, image_size=16)
    np.testing.assert_allclose(first, exact, rtol=1e-3)  # stored as float16
    [entry] = list((tmp_path / "features").rglob("*.npz"))
    assert entry.parent.name == "toy-" + "ab" * 6 and entry.name.startswith("toy_train-16px-")


@pytest.mark.parametrize(
    "change",
    ["encoder name", "weights", "image size", "source", "image content", "image shape"],
)
def test_any_key_change_invalidates_the_cached_entry(tmp_path, change):
    enc, images = CountingEncoder(), _images()
    kw = dict(source="toy/train", image_size=16, cache_dir=tmp_path)
    encode_cached(enc, images, **kw)
    if change == "encoder name":
        enc = CountingEncoder(name="other")
    elif change == "weights":
        enc = CountingEncoder(weights="cd" * 32)
    elif change == "image size":
        kw["image_size"] = 24
    elif change == "source":
        kw["source"] = "toy/test"
    elif change == "image content":
        images = images.copy()
        images[0, 0, 0, 0] ^= 1
    else:
        images = images.reshape(6, 3, 4, 16)
    before = enc.calls
    encode_cached(enc, images, **kw)
    assert enc.calls == before + 1  # recomputed, not read from the stale entry
    assert len(list((tmp_path / "features").rglob("*.npz"))) == 2


def test_a_damaged_entry_is_recomputed(tmp_path):
    enc, images = CountingEncoder(), _images()
    encode_cached(enc, images, source="s", image_size=16, cache_dir=tmp_path)
    [entry] = list((tmp_path / "features").rglob("*.npz"))
    entry.write_bytes(b"not an npz")
    out = encode_cached(enc, images, source="s", image_size=16, cache_dir=tmp_path)
    assert enc.calls == 2 and out.shape == (6, 2)


def _pool(channels: int = 3) -> ClassPool:
    shape = (4, 5, 3, 8, 8) if channels == 3 else (4, 5, 8, 8)
    images = np.random.default_rng(1).integers(0, 256, size=shape, dtype=np.uint8)
    return ClassPool("toy/train", images, [f"c{i}" for i in range(4)], ["a"] * 4, 0.5, 0.25)


def test_feature_pool_keeps_classes_and_samples_episodes(tmp_path):
    pool = feature_pool(_pool(), CountingEncoder(), image_size=16, cache_dir=tmp_path)
    assert isinstance(pool, FeaturePool) and pool.images.shape == (4, 5, 2) and pool.channels == 0
    assert pool.class_names == ["c0", "c1", "c2", "c3"] and pool.encoder == "toy" and pool.feature_dim == 2
    assert (pool.mean, pool.std) == (0.0, 1.0)
    [batch] = EpisodeSampler(pool).sample(
        np.random.default_rng(0), batch_size=3, num_tasks=1, n_way=2, k_shot=2, n_query=1
    )
    assert batch.support_images.shape == (3, 4, 2) and batch.query_images.dtype == np.float32
    with pytest.raises(ValueError, match="rotations"):
        EpisodeSampler(pool, rotations=True)


@pytest.mark.parametrize(
    ("images", "names", "match"),
    [
        (np.zeros((2, 3, 4), dtype=np.float64), 2, "images: expected float32"),
        (np.zeros((2, 3), dtype=np.float32), 2, "images: expected float32"),
        (np.zeros((2, 0, 4), dtype=np.float32), 2, "images: expected float32"),
        (np.zeros((2, 3, 4), dtype=np.uint8), 2, "images: expected float32"),
        (np.zeros((2, 3, 4), dtype=np.float32), 3, "class_names: expected length C = 2"),
    ],
)
def test_bad_feature_pools_are_one_line_errors(images, names, match):
    with pytest.raises(ValueError, match=match):
        FeaturePool("p", images, [str(i) for i in range(names)], ["a"] * names, 0.0, 1.0)
