from __future__ import annotations

import numpy as np
import pytest

from fastweights.data.episodes import EpisodeSampler
from fastweights.data.sources.base import ClassPool

C, M, S = 12, 10, 4


def make_pool(c=C, m=M) -> ClassPool:
    """Image (class i, example j): marker 255 at (0, 0), i at (0, 1), j at (1, 0); 0 elsewhere."""
    images = np.zeros((c, m, S, S), dtype=np.uint8)
    images[:, :, 0, 0] = 255
    images[:, :, 0, 1] = np.arange(c)[:, None]
    images[:, :, 1, 0] = np.arange(m)[None, :]
    return ClassPool("toy", images, [f"c{i}" for i in range(c)], ["a"] * c, 0.1, 0.2)


def decode(images: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(class, example, rotation) of every image ``[..., S, S]``."""
    flat = images.reshape(-1, S, S)
    out = np.zeros((len(flat), 3), dtype=np.int64)
    for n, img in enumerate(flat):
        (r,) = [r for r in range(4) if np.rot90(img, -r)[0, 0] == 255]
        un = np.rot90(img, -r)
        out[n] = un[0, 1], un[1, 0], r
    out = out.reshape(*images.shape[:-2], 3)
    return out[..., 0], out[..., 1], out[..., 2]


def sample(pool=None, seed=0, rotations=False, **kw):
    args = dict(batch_size=6, num_tasks=2, n_way=3, k_shot=2, n_query=3)
    args.update(kw)
    return EpisodeSampler(pool or make_pool(), rotations=rotations).sample(
        np.random.default_rng(seed), **args
    )


def test_shapes_and_dtypes():
    eps = sample(first_shot=True)
    assert len(eps) == 2
    for e in eps:
        assert e.support_images.shape == (6, 6, S, S) and e.support_images.dtype == np.uint8
        assert e.support_labels.shape == (6, 6) and e.support_labels.dtype == np.int64
        assert e.query_images.shape == (6, 9, S, S) and e.query_labels.shape == (6, 9)
        assert e.first_shot_images.shape == (6, 3, S, S) and e.first_shot_labels.shape == (6, 3)
    assert sample()[0].first_shot_images is None and sample()[0].first_shot_labels is None


@pytest.mark.parametrize("rotations", [False, True])
def test_episode_structure(rotations):
    eps = sample(rotations=rotations, first_shot=True, batch_size=20, num_tasks=3, n_way=4)
    seen_classes = [set() for _ in range(20)]
    for e in eps:
        sc, sx, sr = decode(e.support_images)
        qc, qx, qr = decode(e.query_images)
        fc, fx, fr = decode(e.first_shot_images)
        for b in range(20):
            eff = lambda c, r: c + C * r  # noqa: E731 - effective (rotated) class id
            s_eff, q_eff, f_eff = eff(sc[b], sr[b]), eff(qc[b], qr[b]), eff(fc[b], fr[b])
            classes = set(s_eff)
            assert len(classes) == 4 and set(q_eff) == classes and set(f_eff) == classes
            assert sorted(np.unique(s_eff, return_counts=True)[1]) == [2] * 4
            assert sorted(np.unique(q_eff, return_counts=True)[1]) == [3] * 4
            assert not classes & seen_classes[b]  # distinct classes across the tasks of a sequence
            seen_classes[b] |= classes
            label_of = {}
            for effs, labels in (
                (s_eff, e.support_labels[b]),
                (q_eff, e.query_labels[b]),
                (f_eff, e.first_shot_labels[b]),
            ):
                for c, lab in zip(effs, labels, strict=True):
                    assert label_of.setdefault(c, lab) == lab  # one label per class, shared by all splits
            assert sorted(label_of.values()) == [0, 1, 2, 3]
            for c in classes:  # support / query / first-shot examples of a class are disjoint
                ex = [x[b][effs == c] for x, effs in ((sx, s_eff), (qx, q_eff), (fx, f_eff))]
                allx = np.concatenate(ex)
                assert len(set(allx.tolist())) == len(allx) == 2 + 3 + 1


def test_label_permutation_varies_and_is_roughly_uniform():
    eps = sample(batch_size=300, num_tasks=1, n_way=3)
    c, _, _ = decode(eps[0].support_images)
    order = np.argsort(c, axis=1, kind="stable")
    labels_by_class = np.take_along_axis(eps[0].support_labels, order, axis=1)[:, ::2]
    perms = {tuple(row) for row in labels_by_class}
    assert len(perms) == 6  # all 3! assignments occur
    counts = np.bincount(c[:, 0], minlength=C)  # first demo's class ~ uniform over classes
    assert counts.min() > 5


def test_demos_interleaved_at_random():
    e = sample(batch_size=50, num_tasks=1, n_way=3, k_shot=3)[0]
    rows = e.support_labels
    blocked = [len(np.flatnonzero(np.diff(row))) == 2 for row in rows]  # a a a b b b c c c
    periodic = [np.array_equal(row[:3], row[3:6]) and np.array_equal(row[:3], row[6:]) for row in rows]
    assert sum(blocked) < 5 and sum(periodic) < 5  # P(blocked) = 1/280, P(shot-major) = 1/280 per row
    # every class occurs at every position across the batch, i.e. no fixed layout
    c, _, _ = decode(e.support_images)
    assert all(len(set(c[:, j].tolist())) > 3 for j in range(9))


def test_reproducible_with_seed():
    a, b, c = (
        sample(seed=3, first_shot=True),
        sample(seed=3, first_shot=True),
        sample(seed=4, first_shot=True),
    )
    for x, y in zip(a, b, strict=True):
        for field in (
            "support_images",
            "support_labels",
            "query_images",
            "query_labels",
            "first_shot_images",
            "first_shot_labels",
        ):
            np.testing.assert_array_equal(getattr(x, field), getattr(y, field))
    assert not np.array_equal(a[0].support_images, c[0].support_images)


def test_rotations_make_four_classes_per_pool_class():
    pool = make_pool(c=3)
    with pytest.raises(ValueError, match="n_way \\* num_tasks"):
        sample(pool, n_way=5, num_tasks=2)
    eps = sample(pool, rotations=True, n_way=5, num_tasks=2, batch_size=40)
    assert EpisodeSampler(pool, rotations=True).num_classes == 12
    rots = np.concatenate([decode(e.support_images)[2].ravel() for e in eps])
    assert set(rots.tolist()) == {0, 1, 2, 3}
    img = pool.images[1, 2]
    c, x, r = decode(eps[0].support_images)
    b, i = np.argwhere(r == 1)[0]
    np.testing.assert_array_equal(eps[0].support_images[b, i], np.rot90(pool.images[c[b, i], x[b, i]], 1))
    assert img.sum() == pool.images[1, 2].sum()  # the pool itself is not modified


def test_label_space():
    eps = sample(batch_size=100, n_way=2, label_space=5)
    labels = np.concatenate([e.support_labels.ravel() for e in eps])
    assert set(labels.tolist()) == {0, 1, 2, 3, 4}
    for e in eps:
        assert all(len(set(row)) == 2 for row in e.support_labels)


@pytest.mark.parametrize(
    "kw, match",
    [
        ({"n_way": 7}, "n_way \\* num_tasks"),
        ({"k_shot": 5, "n_query": 5, "first_shot": True}, "k_shot \\+ n_query \\+ 1"),
        ({"k_shot": 8, "n_query": 3}, "k_shot \\+ n_query"),
        ({"k_shot": 0}, "k_shot"),
        ({"n_query": -1}, "n_query"),
        ({"batch_size": 0}, "batch_size"),
        ({"num_tasks": 0}, "num_tasks"),
        ({"n_way": True}, "n_way"),
        ({"label_space": 2}, "label_space"),
    ],
)
def test_bad_arguments(kw, match):
    with pytest.raises(ValueError, match=match):
        sample(**kw)


def test_bad_rng_and_pool():
    with pytest.raises(ValueError, match="rng"):
        EpisodeSampler(make_pool()).sample(0, batch_size=1, num_tasks=1, n_way=2, k_shot=1, n_query=1)
    with pytest.raises(ValueError, match="pool"):
        EpisodeSampler(np.zeros((2, 2, 4, 4), np.uint8))


def test_rgb_pool_episodes_rotate_the_pixel_axes():
    gray = make_pool()
    rgb_images = np.stack([gray.images, 255 - gray.images, gray.images // 2], axis=2)  # [C, M, 3, S, S]
    pool = ClassPool("rgb", rgb_images, gray.class_names, gray.alphabets, (0.1, 0.2, 0.3), (0.2, 0.2, 0.2))
    eps = EpisodeSampler(pool, rotations=True).sample(
        np.random.default_rng(0), batch_size=8, num_tasks=2, n_way=3, k_shot=2, n_query=3, first_shot=True
    )
    ref = EpisodeSampler(gray, rotations=True).sample(
        np.random.default_rng(0), batch_size=8, num_tasks=2, n_way=3, k_shot=2, n_query=3, first_shot=True
    )
    for e, g in zip(eps, ref, strict=True):
        assert e.support_images.shape == (8, 6, 3, S, S) and e.query_images.shape == (8, 9, 3, S, S)
        assert e.first_shot_images.shape == (8, 3, 3, S, S) and e.support_images.dtype == np.uint8
        # the same draws as for the gray pool, and every channel rotated alike
        np.testing.assert_array_equal(e.support_images[:, :, 0], g.support_images)
        np.testing.assert_array_equal(e.query_images[:, :, 1], 255 - g.query_images)
        np.testing.assert_array_equal(e.first_shot_images[:, :, 2], g.first_shot_images // 2)
        np.testing.assert_array_equal(e.support_labels, g.support_labels)
    assert set(decode(ref[0].support_images)[2].ravel().tolist()) > {0}  # rotations did occur
