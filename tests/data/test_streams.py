from __future__ import annotations

import numpy as np
import pytest

from fastweights.data.sources.base import ClassPool, LabeledImages, SplitDataset
from fastweights.data.sources.digits import load_digits_split
from fastweights.data.streams import (
    SPLIT_PAIRS,
    holdout_pool,
    holdout_split,
    pool_split_tasks,
    split_benchmark,
)


def make_ds(n_train=200, n_test=50, seed=0) -> SplitDataset:
    """Images encode their own index: pixel (0, 0) = index // 256, (0, 1) = index % 256."""
    rng = np.random.default_rng(seed)

    def part(n):
        imgs = np.zeros((n, 4, 4), np.uint8)
        imgs[:, 0, 0], imgs[:, 0, 1] = np.arange(n) // 256, np.arange(n) % 256
        return LabeledImages(imgs, rng.permutation(np.arange(n) % 10).astype(np.int64))

    return SplitDataset("toy", part(n_train), part(n_test), 10, 0.1, 0.2)


def index_of(images):
    return images[:, 0, 0].astype(int) * 256 + images[:, 0, 1]


@pytest.mark.parametrize("run", [0, 3])
def test_demos_follow_dataset_order_shot_major(run):
    ds = make_ds()
    tasks = split_benchmark(ds, k_shot=4, run=run)
    assert [t.name for t in tasks] == ["0/1", "2/3", "4/5", "6/7", "8/9"]
    for t, (a, b) in zip(tasks, [(0, 1), (2, 3), (4, 5), (6, 7), (8, 9)], strict=True):
        idx = index_of(t.support_images)
        want_a = np.flatnonzero(ds.train.labels == a)[4 * run : 4 * run + 4]
        want_b = np.flatnonzero(ds.train.labels == b)[4 * run : 4 * run + 4]
        np.testing.assert_array_equal(idx[0::2], want_a)
        np.testing.assert_array_equal(idx[1::2], want_b)
        np.testing.assert_array_equal(t.support_labels, [0, 1] * 4)
        np.testing.assert_array_equal(
            index_of(t.query_images), np.flatnonzero(np.isin(ds.test.labels, [a, b]))
        )
        np.testing.assert_array_equal(
            t.query_labels, (ds.test.labels[index_of(t.query_images)] == b).astype(int)
        )
        assert t.support_labels.dtype == np.int64 and t.query_labels.dtype == np.int64


def test_runs_use_disjoint_demos_and_class_scenario():
    ds = make_ds()
    r0 = split_benchmark(ds, k_shot=5, run=0, scenario="class")
    r1 = split_benchmark(ds, k_shot=5, run=1, scenario="class")
    for a, b in zip(r0, r1, strict=True):
        assert not set(index_of(a.support_images)) & set(index_of(b.support_images))
        np.testing.assert_array_equal(a.support_labels, ds.train.labels[index_of(a.support_images)])
        np.testing.assert_array_equal(a.query_labels, ds.test.labels[index_of(a.query_images)])
    assert set(r0[2].support_labels.tolist()) == {4, 5}


def test_custom_groups():
    ds = make_ds()
    tasks = split_benchmark(ds, k_shot=2, run=0, class_groups=[(3, 1, 7)])
    assert tasks[0].name == "3/1/7"
    np.testing.assert_array_equal(ds.train.labels[index_of(tasks[0].support_images)], [3, 1, 7, 3, 1, 7])
    np.testing.assert_array_equal(tasks[0].support_labels, [0, 1, 2, 0, 1, 2])


def test_digits_benchmark_sizes():
    ds = load_digits_split()
    tasks = split_benchmark(ds, k_shot=5, run=9)
    assert sum(len(t.query_labels) for t in tasks) == len(ds.test)
    assert all(t.support_images.shape == (10, 32, 32) for t in tasks)


@pytest.mark.parametrize(
    "kw, match",
    [
        ({"k_shot": 5, "run": 4}, "run: expected class"),  # 20 images per class, 25 needed
        ({"k_shot": 0, "run": 0}, "k_shot"),
        ({"k_shot": 1, "run": -1}, "run"),
        ({"k_shot": 1, "run": 0, "scenario": "task"}, "scenario"),
        ({"k_shot": 1, "run": 0, "class_groups": [(0, 10)]}, "class_groups"),
        ({"k_shot": 1, "run": 0, "class_groups": [(0, 1), (1, 2)]}, "class_groups"),
        ({"k_shot": 1, "run": 0, "class_groups": []}, "class_groups"),
    ],
)
def test_errors(kw, match):
    with pytest.raises(ValueError, match=match):
        split_benchmark(make_ds(), **kw)


def make_pool(classes=12, m=10, rgb=False) -> ClassPool:
    """Images encode (class, example): pixel (0, 0) = class, (0, 1) = example (every channel)."""
    images = np.zeros((classes, m, *((3,) if rgb else ()), 4, 4), np.uint8)
    images[..., 0, 0] = np.arange(classes).reshape(-1, 1, *((1,) if rgb else ()))
    images[..., 0, 1] = np.arange(m).reshape(1, -1, *((1,) if rgb else ()))
    names = [f"c{i}" for i in range(classes)]
    return ClassPool("toy", images, names, ["a"] * classes, 0.1, 0.2)


def ids(images):
    """(class, example) of each image."""
    return images[..., 0, 0].reshape(len(images), -1)[:, 0], images[..., 0, 1].reshape(len(images), -1)[:, 0]


POOL_KW = dict(num_tasks=4, k_shot=3, n_query_per_class=4, seed=7)


def test_pool_split_classes_queries_and_demos():
    pool = make_pool()
    tasks = pool_split_tasks(pool, run=0, **POOL_KW)
    order = np.random.default_rng(7).permutation(12)[:8]
    assert [t.name for t in tasks] == [f"c{order[2 * t]}/c{order[2 * t + 1]}" for t in range(4)]
    seen = set()
    for t, task in enumerate(tasks):
        a, b = order[2 * t], order[2 * t + 1]
        cls, ex = ids(task.support_images)
        np.testing.assert_array_equal(cls, [a, b] * 3)  # shot-major
        np.testing.assert_array_equal(task.support_labels, [0, 1] * 3)
        assert np.all(ex < 6) and len(set(zip(cls.tolist(), ex.tolist(), strict=True))) == 6  # no repeats
        qc, qe = ids(task.query_images)
        np.testing.assert_array_equal(qc, [a] * 4 + [b] * 4)
        np.testing.assert_array_equal(qe, [6, 7, 8, 9] * 2)  # the last 4 examples of each class
        np.testing.assert_array_equal(task.query_labels, [0] * 4 + [1] * 4)
        assert task.support_labels.dtype == np.int64 and task.query_labels.dtype == np.int64
        assert task.support_images.shape == (6, 4, 4) and task.query_images.shape == (8, 4, 4)
        assert not seen & {a, b}
        seen |= {a, b}


def test_pool_split_runs_differ_only_in_demos_and_are_reproducible():
    pool = make_pool()
    r0, r0b, r1 = (pool_split_tasks(pool, run=r, **POOL_KW) for r in (0, 0, 1))
    demos = []
    for a, b, c in zip(r0, r0b, r1, strict=True):
        for x in (b, c):
            assert x.name == a.name
            np.testing.assert_array_equal(x.query_images, a.query_images)
            np.testing.assert_array_equal(x.query_labels, a.query_labels)
            np.testing.assert_array_equal(x.support_labels, a.support_labels)
        np.testing.assert_array_equal(a.support_images, b.support_images)
        demos.append(not np.array_equal(a.support_images, c.support_images))
    assert all(demos)
    other_seed = pool_split_tasks(pool, run=0, **{**POOL_KW, "seed": 8})
    assert [t.name for t in other_seed] != [t.name for t in r0]
    # a longer stream extends a shorter one (same classes and demonstrations for the first tasks)
    longer = pool_split_tasks(pool, run=1, **{**POOL_KW, "num_tasks": 6})
    for a, b in zip(r1, longer[:4], strict=True):
        assert a.name == b.name and np.array_equal(a.support_images, b.support_images)


def test_pool_split_class_scenario_shifts_labels():
    pool = make_pool()
    dom = pool_split_tasks(pool, run=2, **POOL_KW)
    cls = pool_split_tasks(pool, run=2, scenario="class", **POOL_KW)
    for t, (d, c) in enumerate(zip(dom, cls, strict=True)):
        np.testing.assert_array_equal(c.support_labels, d.support_labels + 2 * t)
        np.testing.assert_array_equal(c.query_labels, d.query_labels + 2 * t)
        np.testing.assert_array_equal(c.support_images, d.support_images)
    three = pool_split_tasks(pool, run=0, n_way=3, scenario="class", **{**POOL_KW, "num_tasks": 3})
    np.testing.assert_array_equal(three[2].support_labels, [6, 7, 8] * 3)


def test_pool_split_rgb():
    tasks = pool_split_tasks(make_pool(rgb=True), run=0, **POOL_KW)
    assert tasks[0].support_images.shape == (6, 3, 4, 4) and tasks[0].query_images.shape == (8, 3, 4, 4)
    cls, _ = ids(tasks[0].query_images)
    assert np.all(tasks[0].query_images[:, :, 0, 0] == cls[:, None])


@pytest.mark.parametrize(
    "kw, match",
    [
        (
            {"num_tasks": 7},
            r"num_tasks: expected num_tasks \* n_way <= the 12 classes of pool 'toy', given 7 \* 2",
        ),
        ({"n_way": 3, "num_tasks": 5}, r"num_tasks: .*given 5 \* 3 = 15"),
        (
            {"k_shot": 7},
            r"k_shot: expected k_shot \+ n_query_per_class <= the 10 examples .*given 7 \+ 4 = 11",
        ),
        ({"k_shot": 0}, "k_shot: expected an int >= 1, given 0"),
        ({"n_way": 1}, "n_way: expected an int >= 2"),
        ({"n_query_per_class": 0}, "n_query_per_class: expected an int >= 1"),
        ({"run": -1}, "run: expected an int >= 0"),
        ({"seed": -2}, "seed: expected an int >= 0"),
        ({"num_tasks": 2.0}, "num_tasks: expected an int >= 1, given 2.0"),
        ({"scenario": "task"}, "scenario: expected one of"),
    ],
)
def test_pool_split_errors(kw, match):
    with pytest.raises(ValueError, match=match):
        pool_split_tasks(make_pool(), **{"run": 0, **POOL_KW, **kw})
    with pytest.raises(ValueError, match="pool: expected a ClassPool, given SplitDataset"):
        pool_split_tasks(make_ds(), run=0, **POOL_KW)


def test_full_budget_takes_every_train_image_of_the_group_in_dataset_order():
    ds = make_ds()
    for scenario in ("domain", "class"):
        tasks = split_benchmark(ds, k_shot=None, run=0, scenario=scenario)
        again = split_benchmark(ds, k_shot=None, run=7, scenario=scenario)  # run ignored
        for t, a, (c0, c1) in zip(tasks, again, SPLIT_PAIRS, strict=True):
            want = np.flatnonzero(np.isin(ds.train.labels, [c0, c1]))
            np.testing.assert_array_equal(index_of(t.support_images), want)
            labels = ds.train.labels[want]
            np.testing.assert_array_equal(
                t.support_labels, (labels == c1) if scenario == "domain" else labels
            )
            np.testing.assert_array_equal(
                index_of(t.query_images), np.flatnonzero(np.isin(ds.test.labels, [c0, c1]))
            )
            np.testing.assert_array_equal(a.support_images, t.support_images)
            assert t.support_labels.dtype == np.int64
    assert sum(len(t.support_labels) for t in tasks) == len(ds.train)


def test_pool_split_full_budget_takes_every_non_query_example():
    pool = make_pool()
    kw = {**POOL_KW, "k_shot": None}
    tasks = pool_split_tasks(pool, run=0, **kw)
    fewshot = pool_split_tasks(pool, run=0, **POOL_KW)
    for t, f in zip(tasks, fewshot, strict=True):
        cls, ex = ids(t.support_images)
        qc, _ = ids(t.query_images)
        a, b = qc[0], qc[-1]
        np.testing.assert_array_equal(cls, [a, b] * 6)  # shot-major, the 10 − 4 non-query examples
        np.testing.assert_array_equal(ex, np.repeat(np.arange(6), 2))
        np.testing.assert_array_equal(t.support_labels, [0, 1] * 6)
        assert t.name == f.name and np.array_equal(t.query_images, f.query_images)
    np.testing.assert_array_equal(
        pool_split_tasks(pool, run=3, **kw)[1].support_images, tasks[1].support_images
    )


def make_marked_ds() -> SplitDataset:
    """:func:`make_ds` with pixel (1, 0) = 1 on every test image (train 0)."""
    ds = make_ds()
    test = ds.test.images.copy()
    test[:, 1, 0] = 1
    return SplitDataset(ds.name, ds.train, LabeledImages(test, ds.test.labels), 10, ds.mean, ds.std)


def test_holdout_split_carves_validation_from_train_only():
    ds = make_marked_ds()
    val = holdout_split(ds, per_class=3)
    assert val.name == "toy (validation)" and (val.mean, val.std, val.num_classes) == (ds.mean, ds.std, 10)
    assert len(val.test) == 30 and len(val.train) == len(ds.train) - 30
    assert np.all(val.train.images[:, 1, 0] == 0) and np.all(val.test.images[:, 1, 0] == 0)  # no test image
    train_idx, held_idx = index_of(val.train.images), index_of(val.test.images)
    assert not set(train_idx) & set(held_idx)
    assert sorted(np.concatenate([train_idx, held_idx]).tolist()) == list(range(len(ds.train)))
    for c in range(10):
        np.testing.assert_array_equal(
            held_idx[val.test.labels == c], np.flatnonzero(ds.train.labels == c)[-3:]
        )
    np.testing.assert_array_equal(ds.train.labels[train_idx], val.train.labels)
    tasks = split_benchmark(val, k_shot=None, run=0)  # the protocol runs unchanged on the copy
    assert sum(len(t.query_labels) for t in tasks) == 30


def test_holdout_pool_drops_the_query_examples():
    pool = make_pool()
    val = holdout_pool(pool, 4)
    assert val.images.shape == (12, 6, 4, 4) and val.name == "toy (validation)"
    assert val.class_names == pool.class_names and (val.mean, val.std) == (pool.mean, pool.std)
    test_queries = set()
    for t in pool_split_tasks(pool, run=0, **POOL_KW):
        cls, ex = ids(t.query_images)
        test_queries |= set(zip(cls.tolist(), ex.tolist(), strict=True))
    for t in pool_split_tasks(val, run=0, **{**POOL_KW, "k_shot": 1, "n_query_per_class": 2}):
        for images in (t.support_images, t.query_images):
            cls, ex = ids(images)
            assert np.all(ex < 6) and not test_queries & set(zip(cls.tolist(), ex.tolist(), strict=True))
        np.testing.assert_array_equal(ids(t.query_images)[1], [4, 5, 4, 5])


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: holdout_split(make_ds(), 0), "per_class: expected an int >= 1, given 0"),
        (
            lambda: holdout_split(make_ds(), 20),
            r"per_class: expected fewer than the 20 train images of class 0",
        ),
        (lambda: holdout_split(make_pool(), 1), "ds: expected a SplitDataset, given ClassPool"),
        (lambda: holdout_pool(make_pool(), 0), "n_query_per_class: expected an int >= 1, given 0"),
        (lambda: holdout_pool(make_pool(), 9), r"n_query_per_class: expected <= 8 \(the pool's 10 examples"),
        (lambda: holdout_pool(make_ds(), 1), "pool: expected a ClassPool, given SplitDataset"),
    ],
)
def test_holdout_errors(call, match):
    with pytest.raises(ValueError, match=match):
        call()


# ------------------------------------------------------------------ class_sequence_tasks (mini streams)


def _classes(n_tasks=2, ways=2, demos=6, queries=(3, 2), dim=4):
    from fastweights.data.streams import ClassExamples

    out = []
    for t in range(n_tasks):
        group = []
        for c in range(ways):
            base = 100 * (t * ways + c)
            d = (base + np.arange(demos * dim, dtype=np.float32)).reshape(demos, dim)
            q = (base + 50 + np.arange(queries[c] * dim, dtype=np.float32)).reshape(queries[c], dim)
            group.append(ClassExamples(f"t{t}c{c}", d, q))
        out.append(group)
    return out


def test_class_sequence_tasks_labels_order_and_runs():
    from fastweights.data.streams import class_sequence_tasks

    tasks = _classes()
    a = class_sequence_tasks(tasks, k_shot=3, run=0, seed=5)
    assert [t.name for t in a] == ["t0c0/t0c1", "t1c0/t1c1"]
    assert a[1].support_labels.tolist() == [2, 3, 2, 3, 2, 3]  # shot-major, class-incremental labels
    assert a[1].query_labels.tolist() == [2, 2, 2, 3, 3]
    np.testing.assert_array_equal(
        a[0].query_images, np.concatenate([tasks[0][0].queries, tasks[0][1].queries])
    )
    for t, task in enumerate(a):  # demonstrations are distinct demos of the right class
        for c in range(2):
            rows = task.support_images[task.support_labels == 2 * t + c]
            assert len({r.tobytes() for r in rows}) == 3
            assert all(any(np.array_equal(r, d) for d in tasks[t][c].demos) for r in rows)
    again = class_sequence_tasks(tasks, k_shot=3, run=0, seed=5)
    other = class_sequence_tasks(tasks, k_shot=3, run=1, seed=5)
    np.testing.assert_array_equal(a[0].support_images, again[0].support_images)
    assert not np.array_equal(a[0].support_images, other[0].support_images)
    dom = class_sequence_tasks(tasks, k_shot=3, run=0, seed=5, scenario="domain")
    assert dom[1].support_labels.tolist() == [0, 1, 0, 1, 0, 1]


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        (dict(k_shot=7), "k_shot: expected <= the 6 demos"),
        (dict(k_shot=0), "k_shot: expected an int >= 1"),
        (dict(run=-1), "run: expected an int >= 0"),
        (dict(scenario="task"), "scenario"),
    ],
)
def test_class_sequence_tasks_bad_arguments(kwargs, match):
    from fastweights.data.streams import class_sequence_tasks

    args = {"k_shot": 2, "run": 0, **kwargs}
    with pytest.raises(ValueError, match=match):
        class_sequence_tasks(_classes(), **args)


def test_class_sequence_tasks_refuse_empty_or_mixed_streams():
    from fastweights.data.streams import ClassExamples, class_sequence_tasks

    with pytest.raises(ValueError, match="tasks: expected a non-empty list"):
        class_sequence_tasks([], k_shot=1, run=0)
    tasks = _classes()
    tasks[1][0] = ClassExamples("odd", np.zeros((6, 5), np.float32), np.zeros((2, 5), np.float32))
    with pytest.raises(ValueError, match="tasks: expected examples of shape"):
        class_sequence_tasks(tasks, k_shot=1, run=0)
