from __future__ import annotations

import json
import logging
import time
from pathlib import Path

import numpy as np
import pytest

from fastweights.data.sources import _fonts, _render, glyphs
from fastweights.data.sources._glyph_build import _popcount_dist, held_out_lookalikes
from fastweights.data.sources.base import pixel_stats
from fastweights.data.sources.glyphs import font_glyphs_info, load_font_glyphs

TINY = dict(max_scripts=6, max_classes_per_script=8, examples_per_class=4, image_size=32, progress=False)
LGC = {"Latin", "Greek", "Cyrillic"}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    cache = tmp_path_factory.mktemp("glyphs")
    t0 = time.perf_counter()
    pools = load_font_glyphs(seed=0, cache_dir=cache, workers=2, **TINY)
    return pools, cache, time.perf_counter() - t0


def _codepoints(pool):
    return [int(name.rsplit("U+", 1)[1].rstrip(")"), 16) for name in pool.class_names]


def test_shapes_dtypes_and_metadata(built):
    pools, _, _ = built
    assert set(pools) == {"train", "val", "test"}
    for split, pool in pools.items():
        c = pool.num_classes
        assert c > 0, split
        assert pool.images.dtype == np.uint8
        assert pool.images.shape == (c, 4, 32, 32)
        assert len(pool.class_names) == len(pool.alphabets) == c
        assert 0 < pool.mean < 0.5 and 0 < pool.std < 1  # mostly black background
        assert (pool.images.reshape(c * 4, -1).max(1) >= 128).all()  # every example has ink
        per_script = {a: pool.alphabets.count(a) for a in set(pool.alphabets)}
        assert max(per_script.values()) <= 8
    # white ink on black: the border is (nearly) empty
    border = pools["train"].images[..., [0, -1], :].astype(float).mean()
    assert border < 10


def test_splits_disjoint_by_alphabet_and_class(built):
    pools, _, _ = built
    alph = {s: set(p.alphabets) for s, p in pools.items()}
    cps = {s: set(_codepoints(p)) for s, p in pools.items()}
    for a, b in (("train", "val"), ("train", "test"), ("val", "test")):
        assert not alph[a] & alph[b]
        assert not cps[a] & cps[b]
    assert LGC <= alph["train"]
    assert not LGC & (alph["val"] | alph["test"])
    for p in pools.values():
        assert len(set(p.class_names)) == p.num_classes


def test_every_split_is_normalised_with_the_train_statistics(built):
    pools, cache, _ = built
    mean, std = pixel_stats(pools["train"].images)
    for split, pool in pools.items():
        assert (pool.mean, pool.std) == (mean, std), split
    # the held-out splits' own statistics differ: they are not what the pools carry
    assert pixel_stats(pools["test"].images) != (mean, std)
    info = font_glyphs_info(seed=0, cache_dir=cache, **TINY)
    assert info["normalisation"] == {"source": "train", "mean": mean, "std": std}


def test_held_out_classes_do_not_look_like_train_classes(built):
    pools, _, _ = built
    catalog = _fonts.build_catalog(_fonts.discover_fonts(None))
    font_of = {cp: paths[0] for cps in catalog.values() for cp, paths in cps.items()}

    def canonical(pool):
        items = [(font_of[cp], cp) for cp in _codepoints(pool)]
        hashes, shapes = _render.canonical_job(items, res=_render.BASE_RES)
        return hashes.view(np.uint64), shapes

    train = canonical(pools["train"])
    for split in ("val", "test"):
        by_hash, by_shape = held_out_lookalikes(*canonical(pools[split]), *train)
        assert not by_hash.any() and not by_shape.any(), split


def test_examples_of_a_class_differ(built):
    pools, _, _ = built
    imgs = pools["train"].images
    c, m = imgs.shape[:2]
    flat = imgs.reshape(c, m, -1).astype(np.int32)
    distinct = [len({row.tobytes() for row in flat[i]}) for i in range(c)]
    assert min(distinct) == m
    # drawers change the image substantially, not by a pixel or two
    diff = np.abs(flat[:, 0] - flat[:, 1]).sum(-1) / 255
    assert np.median(diff) > 20


def test_deterministic_for_seed_and_independent_of_workers(built, tmp_path):
    pools, _, _ = built
    again = load_font_glyphs(seed=0, cache_dir=tmp_path / "a", workers=1, **TINY)
    for split in pools:
        assert again[split].images.tobytes() == pools[split].images.tobytes()
        assert again[split].class_names == pools[split].class_names
    other = load_font_glyphs(seed=1, cache_dir=tmp_path / "b", workers=1, **TINY)
    assert other["train"].images.tobytes() != pools["train"].images.tobytes()


def test_cache_reload_identical_and_info(built):
    pools, cache, _ = built
    files = sorted(Path(cache).glob("font_glyphs-*"))
    assert [f.suffix for f in files] == [".json", ".npz"]
    assert not list(Path(cache).glob("*.tmp"))
    t0 = time.perf_counter()
    again = load_font_glyphs(seed=0, cache_dir=cache, workers=2, **TINY)
    assert time.perf_counter() - t0 < 2.0
    for split in pools:
        np.testing.assert_array_equal(again[split].images, pools[split].images)
        assert again[split].alphabets == pools[split].alphabets
        assert again[split].mean == pools[split].mean
    info = font_glyphs_info(seed=0, cache_dir=cache, **TINY)
    assert info == json.loads(files[0].read_text())
    assert set(info["dropped"]) == {"no_ink", "lgc_lookalike", "duplicate", "leakage", "leakage_shape"}
    for split, pool in pools.items():
        assert info["splits"][split]["num_classes"] == pool.num_classes
        assert set(info["splits"][split]["scripts"]) == set(pool.alphabets)


def test_corrupt_cache_is_rebuilt(built, tmp_path, caplog):
    pools, _, _ = built
    with caplog.at_level(logging.INFO, logger="fastweights.data.sources"):
        load_font_glyphs(seed=0, cache_dir=tmp_path, workers=1, **TINY)
    dropped = font_glyphs_info(seed=0, cache_dir=tmp_path, **TINY)["dropped"]
    # the build log reports what each filter removed
    assert (
        f"{dropped['leakage']} held-out classes by hash (<= 6 bits) and {dropped['leakage_shape']} more "
        "by shape correlation" in caplog.text
    )
    (npz,) = tmp_path.glob("*.npz")
    npz.write_bytes(b"not a zip file")
    again = load_font_glyphs(seed=0, cache_dir=tmp_path, workers=1, **TINY)
    assert again["test"].images.tobytes() == pools["test"].images.tobytes()


def test_cache_key_covers_version_and_filter_thresholds(tmp_path, monkeypatch):
    args = (32, 4, 8, 6, None, 0, tmp_path, 1, 0.15, 0.25)
    path = glyphs._resolve(*args)[2]
    assert glyphs._resolve(*args)[2] == path
    monkeypatch.setitem(glyphs.FILTERS, "leakage_ncc", 0.5)
    assert glyphs._resolve(*args)[2] != path
    monkeypatch.undo()
    monkeypatch.setattr(glyphs, "CACHE_VERSION", glyphs.CACHE_VERSION - 1)  # an old cache is not reused
    assert glyphs._resolve(*args)[2] != path


def test_explicit_split_scripts(tmp_path):
    pools = load_font_glyphs(
        cache_dir=tmp_path,
        workers=1,
        val_scripts=["Armenian"],
        test_scripts=["Georgian"],
        font_dirs=[],
        **{**TINY, "max_scripts": None},
    )  # DejaVu only: works without Noto
    assert set(pools["val"].alphabets) == {"Armenian"}
    assert set(pools["test"].alphabets) == {"Georgian"}
    assert LGC <= set(pools["train"].alphabets)
    with pytest.raises(ValueError, match="val_scripts"):
        load_font_glyphs(
            cache_dir=tmp_path,
            val_scripts=["Latin"],
            test_scripts=["Georgian"],
            font_dirs=[],
            **{**TINY, "max_scripts": None},
        )


def test_no_fonts_raises_file_not_found(tmp_path, monkeypatch):
    monkeypatch.setattr(_fonts, "dejavu_dir", lambda: tmp_path / "no-dejavu")
    with pytest.raises(FileNotFoundError, match="no-noto") as err:
        load_font_glyphs(font_dirs=[tmp_path / "no-noto"], cache_dir=tmp_path, **TINY)
    assert "no-dejavu" in str(err.value)


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"image_size": 0}, "image_size"),
        ({"examples_per_class": 0}, "examples_per_class"),
        ({"max_classes_per_script": 0}, "max_classes_per_script"),
        ({"workers": 0}, "workers"),
        ({"val_scripts": 0.6, "test_scripts": 0.5}, "val_scripts \\+ test_scripts"),
        ({"test_scripts": 1.5}, "test_scripts"),
    ],
)
def test_bad_arguments(tmp_path, kwargs, field):
    with pytest.raises(ValueError, match=field):
        load_font_glyphs(cache_dir=tmp_path, **{**TINY, **kwargs})


def test_noto_file_names_give_scripts():
    assert _fonts.parse_noto_name("NotoSansArmenian-Bold.ttf") == ("Armenian", 0, True)
    assert _fonts.parse_noto_name("NotoSerif-Regular.ttf") == (None, 1, False)
    assert _fonts.parse_noto_name("NotoNastaliqUrdu-Regular.ttf")[0] == "Arabic"
    assert _fonts.parse_noto_name("NotoSansTifinaghAPT-Regular.ttf")[0] == "Tifinagh"
    for skipped in (
        "NotoSansSymbols2-Regular.ttf",
        "NotoMusic-Regular.ttf",
        "NotoSansMath-Regular.ttf",
        "NotoSansSignWriting-Regular.ttf",
        "NotoSans-Italic.ttf",
        "NotoSansDisplay-Bold.ttf",
        "NotoColorEmoji.ttf",
    ):
        assert _fonts.parse_noto_name(skipped) is None, skipped


def test_phash_and_hamming_distance():
    dejavu = str(_fonts.dejavu_dir() / "DejaVuSans.ttf")
    a = _render.phash(_render.clean_render(dejavu, ord("A")))
    a_bold = _render.phash(_render.clean_render(str(_fonts.dejavu_dir() / "DejaVuSans-Bold.ttf"), ord("A")))
    o = _render.phash(_render.clean_render(dejavu, ord("O")))
    d = _popcount_dist(np.array([a], np.uint64), np.array([a, a_bold, o], np.uint64))[0]
    assert d[0] == 0 and d[1] < d[2]
    x = np.array([0, 0xFF, 2**64 - 1], dtype=np.uint64)
    np.testing.assert_array_equal(_popcount_dist(x, x), [[0, 8, 64], [8, 0, 56], [64, 56, 0]])
