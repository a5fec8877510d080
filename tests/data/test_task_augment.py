"""Per-task grayscale / low-resolution views of meta-training episodes (data/task_augment.py)."""

from __future__ import annotations

import numpy as np
import pytest

from fastweights.data.episodes import EpisodeSampler
from fastweights.data.sources.base import ClassPool
from fastweights.data.task_augment import TaskAugment, to_grayscale, to_low_res


def _pool(rgb: bool, classes: int = 12, examples: int = 8, size: int = 16) -> ClassPool:
    rng = np.random.default_rng(3)
    shape = (classes, examples, 3, size, size) if rgb else (classes, examples, size, size)
    images = rng.integers(0, 256, size=shape, dtype=np.uint8)
    names = [f"c{i}" for i in range(classes)]
    return ClassPool("toy", images, names, ["a"] * classes, mean=0.5, std=0.25)


def _episodes(rgb: bool, seed: int = 0, first_shot: bool = True):
    sampler = EpisodeSampler(_pool(rgb))
    rng = np.random.default_rng(seed)
    return sampler.sample(rng, batch_size=6, num_tasks=3, n_way=2, k_shot=2, n_query=1, first_shot=first_shot)


def _is_gray(images: np.ndarray) -> np.ndarray:
    """Per leading index: all three channels equal."""
    return (images[..., 0, :, :] == images[..., 1, :, :]).all(axis=(-1, -2)) & (
        images[..., 1, :, :] == images[..., 2, :, :]
    ).all(axis=(-1, -2))


def test_to_grayscale_luma_and_shape():
    img = np.zeros((1, 3, 2, 2), dtype=np.uint8)
    img[0, 0] = 255  # pure red
    out = to_grayscale(img)
    assert out.shape == img.shape and out.dtype == np.uint8
    assert (out == round(0.299 * 255)).all()


def test_to_low_res_keeps_constant_images_and_blurs_detail():
    flat = np.full((2, 3, 16, 16), 77, dtype=np.uint8)
    assert np.array_equal(to_low_res(flat, 4), flat)
    checker = (np.indices((16, 16)).sum(0) % 2 * 255).astype(np.uint8)[None]
    out = to_low_res(checker, 4)
    assert out.shape == checker.shape and out.dtype == np.uint8
    assert out.std() < 0.1 * checker.std()  # a one-pixel checkerboard does not survive 4x4 pixels


def test_inactive_is_identity_and_draws_nothing():
    batches = _episodes(rgb=True)
    rng = np.random.default_rng(5)
    state = rng.bit_generator.state
    assert TaskAugment().apply(batches, rng, channels=3) is batches
    assert rng.bit_generator.state == state


def test_grayscale_ignored_for_grayscale_domains():
    batches = _episodes(rgb=False)
    rng = np.random.default_rng(5)
    state = rng.bit_generator.state
    out = TaskAugment(grayscale=1.0).apply(batches, rng, channels=1)
    assert rng.bit_generator.state == state
    for a, b in zip(batches, out, strict=True):
        assert np.array_equal(a.support_images, b.support_images)


@pytest.mark.parametrize("p", [0.0, 1.0])
def test_probability_extremes(p):
    batches = _episodes(rgb=True)
    out = TaskAugment(grayscale=p).apply(batches, np.random.default_rng(1), channels=3)
    for eb in out:
        assert _is_gray(eb.support_images).all() == (p == 1.0)
        assert _is_gray(eb.query_images).all() == (p == 1.0)


def test_one_view_per_task_and_labels_untouched():
    batches = _episodes(rgb=True)
    before = [eb.support_images.copy() for eb in batches]
    out = TaskAugment(grayscale=0.5, low_res=0.5, low_res_size=4).apply(
        batches, np.random.default_rng(2), channels=3
    )
    gray_tasks = 0
    for i, (a, b) in enumerate(zip(batches, out, strict=True)):
        assert np.array_equal(a.support_images, before[i])  # inputs not modified in place
        g = _is_gray(b.support_images)  # [B, N*K]
        assert (g.all(axis=1) | ~g.any(axis=1)).all()  # every image of a task, or none
        assert np.array_equal(g.all(axis=1), _is_gray(b.query_images).all(axis=1))
        assert np.array_equal(g.all(axis=1), _is_gray(b.first_shot_images).all(axis=1))
        gray_tasks += int(g.all(axis=1).sum())
        low = ~(b.support_images == to_grayscale(a.support_images)).all(axis=(2, 3, 4)) & ~(
            b.support_images == a.support_images
        ).all(axis=(2, 3, 4))
        assert (low.all(axis=1) | ~low.any(axis=1)).all()
        for name in ("support_labels", "query_labels", "first_shot_labels"):
            assert np.array_equal(getattr(a, name), getattr(b, name))
    assert 0 < gray_tasks < 6 * 3


def test_deterministic_from_the_stream():
    aug = TaskAugment(grayscale=0.5, low_res=0.5)
    a = aug.apply(_episodes(rgb=True), np.random.default_rng(9), channels=3)
    b = aug.apply(_episodes(rgb=True), np.random.default_rng(9), channels=3)
    for x, y in zip(a, b, strict=True):
        assert np.array_equal(x.support_images, y.support_images)
        assert np.array_equal(x.query_images, y.query_images)


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"grayscale": -0.1}, "grayscale"),
        ({"grayscale": 2}, "grayscale"),
        ({"low_res": 1.5}, "low_res"),
        ({"low_res": "often"}, "low_res"),
        ({"low_res_size": 1}, "low_res_size"),
        ({"low_res_size": 4.5}, "low_res_size"),
    ],
)
def test_bad_settings_name_the_field(kwargs, name):
    with pytest.raises(ValueError, match=name):
        TaskAugment(**kwargs)


def test_fixed_views_draw_nothing_and_show_every_task():
    """Probability 1 (meta-validation's fixed views, ``train.val_views``): no draw from the stream, so
    the episodes after it are those of a run without the view; every task is changed."""
    batches = _episodes(rgb=True)
    rng = np.random.default_rng(5)
    state = rng.bit_generator.state
    out = TaskAugment(grayscale=1.0, low_res=1.0, low_res_size=4).apply(batches, rng, channels=3)
    assert rng.bit_generator.state == state
    for before, after in zip(batches, out, strict=True):
        assert _is_gray(after.support_images).all() and _is_gray(after.query_images).all()
        expected = to_low_res(to_grayscale(before.support_images), 4)
        assert np.array_equal(after.support_images, expected)
        assert np.array_equal(after.support_labels, before.support_labels)
