"""Handwriting: procedural pen-stroke characters (``fastweights.data.sources.handwriting``), its
rasteriser (``_stroke_render``) and the benchmark-concept image rule it is built with
(``fastweights.data.concepts``)."""

from __future__ import annotations

import functools
import itertools

import numpy as np
import pytest
from PIL import Image
from scipy.ndimage import gaussian_filter

from fastweights.data import registry
from fastweights.data.concepts import (
    CONCEPT_NCC,
    benchmark_lookalikes,
    concept_templates,
    examples_lookalike,
    exclude_benchmark_concepts,
    handwriting_exclusion,
    ink_vectors,
)
from fastweights.data.registry import CLASS_POOLS, RGB_SOURCES, PoolConfig, load_class_pools, load_pools_for
from fastweights.data.sources import handwriting as hw
from fastweights.data.sources._render import shape_vector
from fastweights.data.sources._stroke_render import (
    catmull_rom,
    elastic_fields,
    render_segments,
    render_segments_reference,
)
from fastweights.data.sources.base import ClassPool
from fastweights.data.sources.digits import load_digits_split
from fastweights.data.sources.font_classes import load_font_letters
from fastweights.data.sources.handwriting import (
    DUPLICATE_NCC,
    HandwritingConfig,
    contact_sheet,
    handwriting_arrays,
    load_handwriting,
)

SPLITS = ("train", "val", "test")
SMALL = dict(train_classes=24, val_classes=8, test_classes=8, classes_per_alphabet=8, examples_per_class=8)


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("handwriting")


@pytest.fixture(scope="module")
def arrays(cache):
    return handwriting_arrays(cache_dir=cache, **SMALL)


@pytest.fixture(scope="module")
def pools(cache, arrays):
    return load_handwriting(cache_dir=cache, **SMALL)


def _ncc(images: np.ndarray) -> np.ndarray:
    """Pairwise Pearson correlation of the pixels of ``[N, S, S]`` images: ``[N, N]``."""
    v = images.reshape(len(images), -1).astype(np.float64)
    v -= v.mean(1, keepdims=True)
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    return v @ v.T


def test_shapes_dtypes_value_range_and_names(pools):
    assert set(pools) == set(SPLITS)
    for split, pool in pools.items():
        c = SMALL[f"{split}_classes"]
        assert pool.name == f"Handwriting/{split}"
        assert pool.images.dtype == np.uint8 and pool.images.shape == (c, 8, 32, 32)
        assert pool.channels == 1 and isinstance(pool.mean, float) and isinstance(pool.std, float)
        assert len(set(pool.class_names)) == c and len(set(pool.alphabets)) == c // 8
        assert all(n.startswith(f"{split}-") and "stroke" in n for n in pool.class_names)
        per_image = pool.images.reshape(c * 8, -1)
        assert per_image.max(1).min() >= 180  # every example has ink near full strength ...
        assert np.median(per_image, axis=1).max() == 0  # ... on a black background
        ink = (per_image > 127).mean(1)
        assert 0.01 < ink.min() and ink.max() < 0.5  # strokes, neither empty nor a filled canvas
    train = pools["train"].images / 255.0
    assert pools["val"].mean == pytest.approx(train.mean()) and pools["test"].std == pytest.approx(
        train.std()
    )


def test_deterministic_by_seed(cache, arrays):
    again = handwriting_arrays(cache=False, **SMALL)
    assert set(again) == set(arrays)
    for key in arrays:
        if key != "build_seconds":
            np.testing.assert_array_equal(again[key], arrays[key], err_msg=key)
    other = handwriting_arrays(cache=False, seed=1, **SMALL)
    for split in SPLITS:
        assert not np.array_equal(other[f"{split}_prototypes"], arrays[f"{split}_prototypes"])
        assert not np.array_equal(other[f"{split}_images"], arrays[f"{split}_images"])


def test_a_writer_does_not_depend_on_how_many_are_drawn():
    cfg = HandwritingConfig(**SMALL)
    style = hw.alphabet_style(cfg, "test", 0)
    strokes = hw.character(cfg, style, np.random.default_rng(3))
    three = hw.draw_writers(cfg, strokes, "test", 0, 5, 3)
    np.testing.assert_array_equal(three, hw.draw_writers(cfg, strokes, "test", 0, 5, 6)[:3])
    assert three.shape == (3, 32, 32) and three.dtype == np.uint8


def test_splits_are_disjoint_and_no_two_classes_are_alike(arrays, pools):
    names = {s: set(p.class_names) for s, p in pools.items()}
    alphabets = {s: set(p.alphabets) for s, p in pools.items()}
    for a, b in itertools.combinations(SPLITS, 2):
        assert not names[a] & names[b] and not alphabets[a] & alphabets[b]
    protos = np.concatenate([arrays[f"{s}_prototypes"] for s in SPLITS])
    assert len({p.tobytes() for p in protos}) == len(protos)  # no two classes identical
    vectors = np.stack([shape_vector(Image.fromarray(p)) for p in protos])
    ncc = vectors @ vectors.T
    np.fill_diagonal(ncc, -1.0)
    assert ncc.max() < DUPLICATE_NCC  # nor near-duplicates, across splits too
    images = np.concatenate([p.images.reshape(-1, 32 * 32) for p in pools.values()])
    assert len({row.tobytes() for row in images}) == len(images)  # every example is its own drawing


def test_writers_differ_but_resemble_their_own_class_more(pools):
    """Examples of one class are all different, yet on average correlate more with each other than with
    other classes' examples, for every class, and a nearest-class-mean reader (leave one out) recognises
    them far above chance."""
    images = pools["train"].images
    c, m = images.shape[:2]
    ncc = _ncc(images.reshape(c * m, 32, 32))
    label = np.repeat(np.arange(c), m)
    same = label[:, None] == label[None, :]
    off_diag = same & ~np.eye(c * m, dtype=bool)
    assert ncc[off_diag].max() < 0.99  # no writer copies another
    within = np.array([ncc[label == k][:, label == k][~np.eye(m, dtype=bool)].mean() for k in range(c)])
    between = np.array([ncc[label == k][:, label != k].mean() for k in range(c)])
    assert (within > between).all(), (within - between).min()
    assert within.mean() > 2 * between.mean()
    v = images.reshape(c * m, -1).astype(np.float64)
    hits = 0
    for i in range(c * m):
        means = np.stack([v[(label == k) & (np.arange(c * m) != i)].mean(0) for k in range(c)])
        means -= means.mean(1, keepdims=True)
        hits += int(np.argmax(means @ (v[i] - v[i].mean()) / np.linalg.norm(means, axis=1)) == label[i])
    assert hits / (c * m) > 10 / c  # chance is 1 / c


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"image_size": 4}, r"image_size: expected an int in \[8, 512\], given 4"),
        ({"image_size": 32.0}, r"image_size: expected an int in \[8, 512\], given 32.0"),
        ({"examples_per_class": 0}, r"examples_per_class: expected an int >= 1, given 0"),
        ({"train_classes": 0}, r"train_classes: expected an int >= 1, given 0"),
        ({"val_classes": -1}, r"val_classes: expected an int >= 1, given -1"),
        ({"test_classes": True}, r"test_classes: expected an int >= 1, given True"),
        ({"classes_per_alphabet": 0}, r"classes_per_alphabet: expected an int >= 1, given 0"),
        ({"min_strokes": 0}, r"min_strokes: expected an int in \[1, 8\], given 0"),
        ({"max_strokes": 9}, r"max_strokes: expected an int in \[min_strokes = 1, 8\], given 9"),
        (
            {"min_strokes": 3, "max_strokes": 2},
            r"max_strokes: expected an int in \[min_strokes = 3, 8\], given 2",
        ),
        ({"min_points": 1}, r"min_points: expected an int in \[2, 10\], given 1"),
        ({"max_points": 11}, r"max_points: expected an int in \[min_points = 3, 10\], given 11"),
        ({"max_points": "6"}, r"max_points: expected an int in \[min_points = 3, 10\], given '6'"),
        ({"seed": -1}, r"seed: expected an int >= 0, given -1"),
        ({"cache_dir": ""}, r"cache_dir: expected a folder path or None, given ''"),
        ({"colour": 1}, r"handwriting: expected settings among \[.*'seed'.*\], given \['colour'\]"),
    ],
)
def test_bad_settings_are_one_line_errors_naming_the_key(settings, message, tmp_path):
    with pytest.raises(ValueError, match=f"^{message}$") as err:
        handwriting_arrays(**{"cache_dir": tmp_path, **SMALL, **settings})
    assert "\n" not in str(err.value)
    assert not list(tmp_path.iterdir())  # refused before anything is built or written


def test_too_few_distinct_shapes_for_the_classes_asked_is_an_error():
    """One straight stroke per class: only a handful of directions differ, not 40 classes."""
    settings = dict(min_strokes=1, max_strokes=1, min_points=2, max_points=2, classes_per_alphabet=16)
    pattern = (
        r"^handwriting: expected 16 distinct classes in alphabet train-000, given \d+ after 800 candidates"
    )
    with pytest.raises(ValueError, match=pattern) as err:
        handwriting_arrays(cache=False, **{**SMALL, **settings})
    assert "\n" not in str(err.value) and "allow more strokes or points" in str(err.value)


def test_cache_hit_returns_the_same_data_without_building(cache, arrays, monkeypatch):
    files = sorted(p.name for p in cache.glob("handwriting-*.npz"))
    assert len(files) == 1
    monkeypatch.setattr(hw, "_build", lambda cfg: pytest.fail("rebuilt although cached"))
    again = handwriting_arrays(cache_dir=cache, **SMALL)
    for key in arrays:
        np.testing.assert_array_equal(again[key], arrays[key], err_msg=key)
    pools = load_handwriting(cache_dir=cache, **SMALL)
    np.testing.assert_array_equal(pools["val"].images, arrays["val_images"])
    keyed = {
        hw._cache_path(HandwritingConfig(**{**SMALL, **c}), cache).name
        for c in ({}, {"seed": 1}, {"image_size": 28})
    }
    assert len(keyed) == 3 and files[0] in keyed  # every setting is part of the key


def test_registry_names_the_source(cache, pools, monkeypatch):
    assert "handwriting" in CLASS_POOLS and "handwriting" not in RGB_SOURCES
    via = load_class_pools("handwriting", image_size=32, cache_dir=cache, **SMALL)
    for split in SPLITS:  # a fresh build holds no benchmark look-alike: the registry removes nothing
        assert via[split].class_names == pools[split].class_names
        np.testing.assert_array_equal(via[split].images, pools[split].images)
    # pool configs (the ACL domains) pass examples_per_class, seed and cache_dir; channels=3 repeats it
    monkeypatch.setattr(registry, "load_handwriting", functools.partial(load_handwriting, **SMALL))
    cfg = PoolConfig(source="handwriting", channels=3, examples_per_class=8, cache_dir=str(cache))
    rgb = load_pools_for(cfg, "domain_c")
    assert rgb["train"].images.shape == (24, 8, 3, 32, 32) and rgb["train"].name == "Handwriting/train"
    np.testing.assert_array_equal(rgb["train"].images[:, :, 1], pools["train"].images)
    from fastweights.recipes.acl.config import ACLDataConfig

    assert (
        ACLDataConfig(sources=["fontglyphs", "emoji", "handwriting"], channels=3).domains[-1] == "handwriting"
    )


def test_the_concept_rule_flags_the_benchmarks_own_images(tmp_path):
    """Positive control, at the rates ``concepts.CONCEPT_NCC`` documents: Split-Digits' digits (as the
    benchmark feeds them, 32 px) and FontLetters' letters are flagged, mostly as themselves."""
    from sklearn.datasets import load_digits

    data = load_digits()
    reasons = benchmark_lookalikes(data.images)
    assert np.mean([r is not None for r in reasons]) >= 0.96
    templates, names = concept_templates()
    ncc = ink_vectors(data.images) @ templates.T
    columns = {t: [n.startswith(f"digit {t} ") for n in names] for t in range(10)}
    own = [ncc[i, columns[t]].max() >= CONCEPT_NCC for i, t in enumerate(data.target)]  # by its own digit
    assert np.mean(own) >= 0.90
    split_digits = load_digits_split(image_size=32).test
    assert np.mean([r is not None for r in benchmark_lookalikes(split_digits.images)]) >= 0.95
    letters = load_font_letters(train_per_class=100, test_per_class=1, cache_dir=tmp_path).train
    flagged = benchmark_lookalikes(letters.images)
    assert np.mean([r is not None for r in flagged]) >= 0.99
    seven = split_digits.images[split_digits.labels == 7][:9]
    assert examples_lookalike(seven).startswith("its median example looks like digit")  # a class of 7s
    assert benchmark_lookalikes(np.zeros((1, 32, 32), dtype=np.uint8)) == [None]  # no ink, no concept


def test_kept_classes_pass_the_concept_rule_and_candidates_were_dropped(arrays, pools):
    """The rule was applied while building: no meta-training/validation class is flagged by it, neither by
    its clean render nor by its writers, while some candidates were (reasons recorded)."""
    for split in ("train", "val"):
        assert benchmark_lookalikes(arrays[f"{split}_prototypes"]) == [None] * SMALL[f"{split}_classes"]
        assert handwriting_exclusion(pools[split]) == [None] * SMALL[f"{split}_classes"]
    dropped = [str(r) for s in ("train", "val") for r in arrays[f"{s}_lookalikes"]]
    assert dropped and all(r.startswith(("looks like ", "its median example looks like ")) for r in dropped)
    assert all(f">= {CONCEPT_NCC}" in r for r in dropped)
    assert len(arrays["test_lookalikes"]) == 0  # test classes are not meta-trained on: not filtered


def test_exclusion_removes_a_class_of_digits_from_train_and_val_only(pools):
    digits = load_digits_split(image_size=32).train
    threes = digits.images[digits.labels == 3][: pools["val"].examples_per_class]
    out = {}
    for split, pool in pools.items():
        images = np.concatenate([pool.images, threes[None]])
        out[split] = ClassPool(
            pool.name, images, [*pool.class_names, "threes"], [*pool.alphabets, "x"], pool.mean, pool.std
        )
    kept = exclude_benchmark_concepts("handwriting", out)
    for split in ("train", "val"):
        assert kept[split].class_names == pools[split].class_names
    assert kept["test"] is out["test"]
    rgb = ClassPool("rgb", np.zeros((1, 2, 3, 8, 8), np.uint8), ["a"], ["b"], 0.0, 1.0)
    with pytest.raises(ValueError, match=r"^rgb: expected a grayscale pool"):
        handwriting_exclusion(rgb)


def test_fast_rasteriser_equals_the_reference():
    rng = np.random.default_rng(0)
    for size, b, n in ((8, 2, 3), (32, 5, 40), (47, 3, 25)):
        start = rng.uniform(-6, size + 6, (b, n, 2))
        end = start + rng.normal(0, 3, (b, n, 2)) * rng.uniform(0, 3, (b, n, 1))
        radius = rng.uniform(-0.7, 2.5, (b, n, 2))
        ink = rng.uniform(0, 1, (b, n))
        fast = render_segments(start, end, radius, ink, size)
        ref = render_segments_reference(start, end, radius, ink, size)
        assert fast.shape == (b, size, size) and fast.dtype == np.float32
        np.testing.assert_allclose(fast, ref, atol=1e-6)
    dot = render_segments(
        np.full((1, 1, 2), 4.5), np.full((1, 1, 2), 4.5), np.full((1, 1, 2), 1.0), np.ones((1, 1)), 9
    )
    assert dot[0, 4, 4] == 1.0 and dot[0, 4, 6] == pytest.approx(0.0) and dot[0, 4, 5] == pytest.approx(0.5)


def test_spline_passes_through_its_control_points_and_fields_are_simards():
    pts = np.array([[[0.0, 0.0], [3.0, 1.0], [3.0, 1.0], [5.0, -2.0], [1.0, 4.0]]])
    curve = catmull_rom(pts, 7)
    assert curve.shape == (1, 4 * 7 + 1, 2) and np.isfinite(curve).all()
    np.testing.assert_allclose(curve[0, ::7], pts[0], atol=1e-9)
    with pytest.raises(ValueError, match=r"^points: expected shape \[B, K >= 2, 2\], given \(1, 1, 2\)$"):
        catmull_rom(pts[:, :1], 4)
    noise = np.random.default_rng(1).uniform(-1, 1, (2, 2, 28, 28))
    want = 34.0 * gaussian_filter(noise, sigma=(0, 0, 4.0, 4.0), mode="reflect")
    np.testing.assert_allclose(elastic_fields(noise, 34.0, 4.0), want, atol=1e-12)


def test_contact_sheet_layout(pools):
    sheet = contact_sheet(pools["train"].images[:3, :4], scale=2, gap=1)
    assert sheet.shape == (3 * 65 + 1, 4 * 65 + 1) and sheet.dtype == np.uint8
    np.testing.assert_array_equal(sheet[1:65, 1:65], pools["train"].images[0, 0].repeat(2, 0).repeat(2, 1))
    assert sheet[0].tolist() == [96] * sheet.shape[1]
    with pytest.raises(ValueError, match=r"^images: expected a uint8 array \[rows, cols, S, S\]"):
        contact_sheet(pools["train"].images[0])
