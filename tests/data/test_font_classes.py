from __future__ import annotations

import numpy as np
import pytest

from fastweights.data.registry import RGB_SOURCES, PoolConfig, load_pools_for, load_split_dataset
from fastweights.data.sources import font_classes
from fastweights.data.sources._fonts import FontFile
from fastweights.data.sources.base import image_stats
from fastweights.data.sources.font_classes import load_colour_digits, load_font_letters

SMALL = dict(image_size=32, train_per_class=4, test_per_class=3)
LOADERS = {"letters": load_font_letters, "colour": load_colour_digits}


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("font_classes")


@pytest.fixture(scope="module")
def letters(cache):
    return load_font_letters(seed=0, cache_dir=cache, **SMALL)


@pytest.fixture(scope="module")
def colour(cache):
    return load_colour_digits(seed=0, cache_dir=cache, **SMALL)


def _luma(images: np.ndarray) -> np.ndarray:
    """Per-pixel luma on a 0..1 scale of RGB ``[N, 3, S, S]`` uint8 images -> ``[N, S, S]``."""
    return np.einsum("nchw,c->nhw", images.astype(np.float64) / 255.0, np.asarray(font_classes.LUMA))


def test_font_letters_shapes_labels_and_stats(letters):
    assert letters.name == "FontLetters" and letters.num_classes == 10 and letters.channels == 1
    assert letters.train.images.shape == (40, 32, 32) and letters.test.images.shape == (30, 32, 32)
    assert letters.train.images.dtype == np.uint8 and letters.train.labels.dtype == np.int64
    np.testing.assert_array_equal(letters.train.labels, np.repeat(np.arange(10), 4))
    np.testing.assert_array_equal(letters.test.labels, np.repeat(np.arange(10), 3))
    assert (letters.mean, letters.std) == image_stats(letters.train.images, 1)
    assert isinstance(letters.mean, float) and 0 < letters.mean < 0.5  # white ink on black
    imgs = np.concatenate([letters.train.images, letters.test.images])
    assert (imgs.reshape(len(imgs), -1).max(1) >= 128).all()  # every example has ink
    assert imgs[:, [0, -1], :].astype(float).mean() < 10  # the border is (nearly) empty
    assert font_classes.LETTERS == tuple(range(ord("A"), ord("J") + 1))


def test_colour_digits_rgb_channels_first_and_contrast(colour):
    assert colour.name == "ColourDigits" and colour.num_classes == 10 and colour.channels == 3
    assert colour.train.images.shape == (40, 3, 32, 32) and colour.test.images.shape == (30, 3, 32, 32)
    assert colour.train.images.dtype == np.uint8 and colour.test.labels.dtype == np.int64
    np.testing.assert_array_equal(colour.test.labels, np.repeat(np.arange(10), 3))
    mean, std = image_stats(colour.train.images, 3)
    assert colour.mean == mean and colour.std == std and len(colour.mean) == 3
    for split in (colour.train, colour.test):
        luma = _luma(split.images).reshape(len(split), -1)
        # every pixel mixes the two colours and each image holds both exactly: its luma range is theirs
        assert (luma.max(1) - luma.min(1) >= font_classes.MIN_CONTRAST - 1e-9).all()
        # colour differs between examples (not one palette for everything)
        corners = split.images[:, :, 0, 0]
        assert len({c.tobytes() for c in corners}) > len(split) // 2


def test_colour_pairs_keep_the_minimum_contrast():
    pairs = font_classes._colour_pairs(np.random.default_rng(0), 2000)
    assert pairs.shape == (2000, 2, 3) and pairs.dtype == np.uint8
    diff = np.abs(font_classes._luma(pairs[:, 0]) - font_classes._luma(pairs[:, 1]))
    assert diff.min() >= font_classes.MIN_CONTRAST
    assert pairs.std(axis=0).min() > 50  # spread over the colour cube


def test_neighbour_shift_is_zero_filled():
    img = np.arange(16, dtype=np.uint8).reshape(4, 4)
    out = font_classes._shifted(img, 1, -2)
    np.testing.assert_array_equal(out, [[0, 0, 0, 0], [2, 3, 0, 0], [6, 7, 0, 0], [10, 11, 0, 0]])
    assert not font_classes._shifted(img, 0, 4).any()


@pytest.mark.parametrize("kind", sorted(LOADERS))
def test_train_and_test_share_no_image(kind, letters, colour):
    ds = {"letters": letters, "colour": colour}[kind]
    train = {im.tobytes() for im in ds.train.images}
    assert not any(im.tobytes() in train for im in ds.test.images)
    assert len(train) == len(ds.train)  # no duplicate within train either


def test_shared_test_images_are_redrawn():
    train = np.random.default_rng(0).integers(0, 256, size=(2, 3, 5, 5), dtype=np.uint8)
    test = train[:, :2].copy()
    test[1, 1] = 7  # not in train: kept
    calls = []

    def redraw(i, count, attempt):
        calls.append((i, count, attempt))
        return np.full((count, 5, 5), 10 * i + attempt, dtype=np.uint8)

    out = font_classes._redraw_shared(test, train, redraw)
    assert calls == [(0, 2, 1), (1, 1, 1)]
    assert (out[0] == 1).all() and (out[1, 0] == 11).all() and (out[1, 1] == 7).all()
    with pytest.raises(RuntimeError, match="after 10 redraws"):
        font_classes._redraw_shared(test, train, lambda i, count, attempt: train[i, :count])


@pytest.mark.parametrize("kind", sorted(LOADERS))
def test_deterministic_for_a_seed(kind, tmp_path, letters, colour):
    ds = {"letters": letters, "colour": colour}[kind]
    again = LOADERS[kind](seed=0, cache_dir=tmp_path / "a", **SMALL)  # rebuilt in a fresh cache
    for split in ("train", "test"):
        np.testing.assert_array_equal(getattr(again, split).images, getattr(ds, split).images)
    other = LOADERS[kind](seed=1, cache_dir=tmp_path / "b", **SMALL)
    assert not np.array_equal(other.train.images, ds.train.images)
    assert not np.array_equal(other.test.images, ds.test.images)


@pytest.mark.parametrize("kind", sorted(LOADERS))
def test_cache_is_reused_and_keyed_by_the_options(kind, tmp_path, monkeypatch):
    first = LOADERS[kind](cache_dir=tmp_path, **SMALL)
    prefix = "font_letters" if kind == "letters" else "colour_digits"
    assert [p.name.startswith(prefix + "-") for p in tmp_path.glob("*.npz")] == [True]

    def fail(*args, **kwargs):
        raise AssertionError("rendered although cached")

    monkeypatch.setattr(font_classes, "examples_job", fail)
    cached = LOADERS[kind](cache_dir=tmp_path, **SMALL)
    np.testing.assert_array_equal(cached.train.images, first.train.images)
    np.testing.assert_array_equal(cached.test.labels, first.test.labels)
    assert (cached.mean, cached.std) == (first.mean, first.std)
    for change in ({"test_per_class": 2}, {"seed": 5}, {"image_size": 16}):
        with pytest.raises(AssertionError, match="rendered although cached"):
            LOADERS[kind](cache_dir=tmp_path, **{**SMALL, **change})


@pytest.mark.parametrize("kind", sorted(LOADERS))
@pytest.mark.parametrize(
    "arg, value",
    [
        ("image_size", 0),
        ("image_size", 32.0),
        ("image_size", True),
        ("train_per_class", 0),
        ("train_per_class", "4"),
        ("test_per_class", -1),
        ("seed", -1),
        ("seed", None),
        ("cache_dir", 5),
        ("cache_dir", ""),
    ],
)
def test_bad_arguments(kind, arg, value, tmp_path):
    kwargs = {**SMALL, "cache_dir": tmp_path, arg: value}
    with pytest.raises(ValueError, match=rf"^{arg}: expected [^\n]*$"):
        LOADERS[kind](**kwargs)
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("kind", sorted(LOADERS))
def test_no_latin_font_names_the_package(kind, tmp_path, monkeypatch):
    armenian = FontFile("/nonexistent/NotoSansArmenian-Regular.ttf", "Armenian", False, (0, 0, 0, "x"))
    monkeypatch.setattr(font_classes, "discover_fonts", lambda dirs: [armenian])
    one_line = (
        r"^no Latin font draws U\+00(41|30): [^\n]*/usr/share/fonts/truetype/noto[^\n]*fonts-noto-core`$"
    )
    with pytest.raises(FileNotFoundError, match=one_line):
        LOADERS[kind](cache_dir=tmp_path, **SMALL)


def test_registry_names(tmp_path, monkeypatch):
    ds = load_split_dataset(
        "font_letters", image_size=16, train_per_class=2, test_per_class=1, cache_dir=tmp_path
    )
    assert ds.name == "FontLetters" and ds.train.images.shape == (20, 16, 16)
    ds = load_split_dataset(
        "colour_digits", "/ignored", train_per_class=2, test_per_class=1, cache_dir=tmp_path
    )
    assert ds.name == "ColourDigits" and ds.test.images.shape == (10, 3, 32, 32)  # default size 32
    assert "colour_digits" in RGB_SOURCES and "font_letters" not in RGB_SOURCES
    with pytest.raises(ValueError, match=r"^channels: expected 3 .*'colour_digits'"):
        PoolConfig(source="colour_digits", channels=1)
    monkeypatch.setenv("FASTWEIGHTS_CACHE", str(tmp_path))  # the pools use the default options
    pools = load_pools_for(PoolConfig(source="font_letters", image_size=16))
    assert pools["train"].images.shape == (10, 83, 16, 16) and pools["test"].images.shape == (10, 100, 16, 16)
