"""Task streams for continual learning: split benchmarks (Split-MNIST style) built from a dataset
(:func:`split_benchmark`) or from a few-shot class pool (:func:`pool_split_tasks`), and validation
copies of both carved from training data only (:func:`holdout_split`, :func:`holdout_pool`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from fastweights.checks import check_choice, check_count

from .sources.base import ClassPool, LabeledImages, SplitDataset

__all__ = [
    "Task",
    "ClassExamples",
    "class_sequence_tasks",
    "split_benchmark",
    "pool_split_tasks",
    "holdout_split",
    "holdout_pool",
    "SCENARIOS",
    "SPLIT_PAIRS",
]

SCENARIOS = ("domain", "class")
SPLIT_PAIRS = ((0, 1), (2, 3), (4, 5), (6, 7), (8, 9))


@dataclass
class Task:
    """One task of a continual-learning stream (uint8 images, or float32 ``[*, F]`` features of a frozen
    encoder; int64 labels).

    ``support_images [N*K, S, S]`` / ``support_labels [N*K]``: demonstrations, shot-major
    (``a, b, a, b, ...``); ``query_images [Q, S, S]`` / ``query_labels [Q]``: the evaluation images.
    Images of an RGB dataset have a channel axis before the pixels (``[N*K, 3, S, S]``, ``[Q, 3, S, S]``).
    """

    name: str
    support_images: np.ndarray
    support_labels: np.ndarray
    query_images: np.ndarray
    query_labels: np.ndarray


def _shot_major(demos: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """``K`` demonstration indices per class of a task → ``(indices [N*K], position [N*K])`` in
    shot-major order ``c0, c1, ..., c0, c1, ...``; ``position`` is the class's index in the task."""
    stacked = np.stack(demos, axis=1)  # [K, N]
    return stacked.reshape(-1), np.tile(np.arange(len(demos)), stacked.shape[0])


def _task_labels(scenario: str, class_labels: Sequence[int]) -> np.ndarray:
    """int64 label of each position of a task: ``0..N-1`` (domain-incremental, shared outputs) or
    ``class_labels`` (class-incremental)."""
    if scenario == "domain":
        return np.arange(len(class_labels), dtype=np.int64)
    return np.asarray(class_labels, dtype=np.int64)


def _check_groups(groups: object, num_classes: int) -> list[tuple[int, ...]]:
    out: list[tuple[int, ...]] = []
    if isinstance(groups, Sequence) and not isinstance(groups, str) and len(groups) > 0:
        for g in groups:
            if not isinstance(g, Sequence) or len(g) == 0:
                break
            if not all(isinstance(c, (int, np.integer)) and not isinstance(c, bool) for c in g):
                break
            out.append(tuple(int(c) for c in g))
        else:
            flat = [c for g in out for c in g]
            if len(set(flat)) == len(flat) and all(0 <= c < num_classes for c in flat):
                return out
    raise ValueError(
        f"class_groups: expected a non-empty sequence of non-empty groups of distinct class ids in "
        f"[0, {num_classes}), given {groups!r}"
    )


def split_benchmark(
    ds: SplitDataset,
    *,
    k_shot: int | None,
    run: int,
    scenario: str = "domain",
    class_groups: Sequence[Sequence[int]] = SPLIT_PAIRS,
) -> list[Task]:
    """The split-benchmark task sequence of the Split-MNIST protocol (Hsu et al. 2018; ACL paper).

    One :class:`Task` per group of ``class_groups`` (default digit pairs 0/1, 2/3, ..., 8/9), named
    like ``"0/1"``. Demonstrations come from ``ds.train``: run ``r`` takes the train images
    ``[k_shot * r, k_shot * (r + 1))`` of each class in dataset order, arranged shot-major
    (``c0, c1, c0, c1, ...``), so different runs use disjoint demonstrations; queries are all
    ``ds.test`` images of the group's classes in dataset order. ``k_shot=None`` (the full-data budget
    of the continual-learning baselines) takes every train image of the group's classes instead, in
    dataset order (``run`` is then ignored). Labels: ``scenario="domain"`` ->
    position of the class within its group (0, 1, ...); ``"class"`` -> the original class ids.
    Returns tasks with support uint8 ``[N*K, S, S]``/int64 ``[N*K]`` and query uint8 ``[Q, S, S]``/
    int64 ``[Q]``. Raises ``ValueError`` on a bad argument or when a class has fewer than
    ``k_shot * (run + 1)`` train images.
    """
    if not isinstance(ds, SplitDataset):
        raise ValueError(f"ds: expected a SplitDataset, given {type(ds).__name__}")
    k = None if k_shot is None else check_count("k_shot", k_shot, 1)
    run = check_count("run", run, 0)
    check_choice("scenario", scenario, SCENARIOS)
    groups = _check_groups(class_groups, ds.num_classes)
    tasks = []
    for group in groups:
        labels = _task_labels(scenario, group)
        lut = np.full(ds.num_classes, -1, dtype=np.int64)
        lut[list(group)] = labels
        query = np.flatnonzero(np.isin(ds.test.labels, group))
        if k is None:
            support = np.flatnonzero(np.isin(ds.train.labels, group))
            support_labels = lut[ds.train.labels[support]]
        else:
            support, support_labels = _demonstrations(ds, group, labels, k, run)
        tasks.append(
            Task(
                name="/".join(str(c) for c in group),
                support_images=ds.train.images[support],
                support_labels=support_labels,
                query_images=ds.test.images[query],
                query_labels=lut[ds.test.labels[query]],
            )
        )
    return tasks


def _demonstrations(
    ds: SplitDataset, group: tuple[int, ...], labels: np.ndarray, k: int, run: int
) -> tuple[np.ndarray, np.ndarray]:
    """Run ``run``'s ``k`` train indices per class of ``group`` (shot-major) and their labels."""
    lo, hi = k * run, k * (run + 1)
    demos = []
    for c in group:
        idx = np.flatnonzero(ds.train.labels == c)
        if len(idx) < hi:
            raise ValueError(
                f"run: expected class {c} of {ds.name!r} to have >= k_shot * (run + 1) = {hi} train "
                f"images, given {len(idx)} (k_shot={k}, run={run})"
            )
        demos.append(idx[lo:hi])
    support, position = _shot_major(demos)
    return support, labels[position]


def pool_split_tasks(
    pool: ClassPool,
    *,
    num_tasks: int,
    n_way: int = 2,
    k_shot: int | None,
    run: int,
    n_query_per_class: int,
    scenario: str = "domain",
    seed: int = 0,
) -> list[Task]:
    """A split-benchmark task sequence drawn from a few-shot class pool: ``num_tasks`` ``n_way``-way tasks
    with disjoint classes (the ACL paper's long-span Split-Omniglot, 5, 10 and 20 two-way tasks;
    here Split-FontGlyphs and Split-Emoji).

    - Classes: the first ``num_tasks * n_way`` classes of ``np.random.default_rng(seed).permutation``
      of the pool's classes, task ``t`` taking ``n_way`` consecutive ones; the same for every ``run``
      (runs differ only in their demonstrations), and a longer stream extends a shorter one.
    - Queries: the last ``n_query_per_class`` examples of each class (fixed), class after class.
    - Demonstrations: ``k_shot`` examples per class drawn without replacement from the other
      ``examples_per_class - n_query_per_class`` ones with ``np.random.default_rng([seed, run])``,
      class after class in stream order, arranged shot-major (``c0, c1, c0, c1, ...``) like
      :func:`split_benchmark`; demonstrations and queries never share an example. ``k_shot=None`` (the
      full-data budget of the continual-learning baselines): every non-query example, in pool order.
    - Labels: ``scenario="domain"`` → the class's position in its task (``0..n_way-1``); ``"class"`` →
      ``n_way * t + position``.

    Tasks are named by their classes' ``pool.class_names`` joined with ``/``. Support uint8
    ``[n_way*k_shot, S, S]`` (``[.., 3, S, S]`` for RGB pools) / int64 ``[n_way*k_shot]``; queries
    uint8 ``[n_way*n_query_per_class, S, S]`` / int64.

    Raises:
        ValueError: for a bad argument (naming it), a pool with fewer than ``num_tasks * n_way`` classes
            or fewer than ``k_shot + n_query_per_class`` examples per class.
    """
    if not isinstance(pool, ClassPool):
        raise ValueError(f"pool: expected a ClassPool, given {type(pool).__name__}")
    num_tasks, n_way = check_count("num_tasks", num_tasks, 1), check_count("n_way", n_way, 2)
    m = pool.examples_per_class
    n_query = check_count("n_query_per_class", n_query_per_class, 1)
    k = None if k_shot is None else check_count("k_shot", k_shot, 1)
    run = check_count("run", run, 0)
    seed = check_count("seed", seed, 0)
    check_choice("scenario", scenario, SCENARIOS)
    if num_tasks * n_way > pool.num_classes:
        raise ValueError(
            f"num_tasks: expected num_tasks * n_way <= the {pool.num_classes} classes of pool {pool.name!r}, "
            f"given {num_tasks} * {n_way} = {num_tasks * n_way}"
        )
    if (k or 1) + n_query > m:
        raise ValueError(
            f"k_shot: expected k_shot + n_query_per_class <= the {m} examples per class of pool "
            f"{pool.name!r}, given {k or 1} + {n_query} = {(k or 1) + n_query}"
        )
    order = np.random.default_rng(seed).permutation(pool.num_classes)[: num_tasks * n_way]
    rng = np.random.default_rng([seed, run])
    tasks = []
    for t in range(num_tasks):
        classes = order[t * n_way : (t + 1) * n_way]
        images = pool.images[classes]  # [n_way, M, ...]
        if k is None:
            support, position = _shot_major([np.arange(m - n_query) for _ in classes])
        else:
            support, position = _shot_major([rng.choice(m - n_query, size=k, replace=False) for _ in classes])
        labels = _task_labels(scenario, range(n_way * t, n_way * (t + 1)))
        tasks.append(
            Task(
                name="/".join(pool.class_names[c] for c in classes),
                support_images=images[position, support],
                support_labels=labels[position],
                query_images=images[:, m - n_query :].reshape(-1, *images.shape[2:]),
                query_labels=np.repeat(labels, n_query),
            )
        )
    return tasks


@dataclass
class ClassExamples:
    """One class of a hand-assembled task stream: ``demos [D, ...]`` (demonstration candidates) and
    ``queries [Q, ...]`` (evaluation examples), uint8 images or float32 features alike."""

    name: str
    demos: np.ndarray
    queries: np.ndarray


def class_sequence_tasks(
    tasks: Sequence[Sequence[ClassExamples]], *, k_shot: int, run: int, scenario: str = "class", seed: int = 0
) -> list[Task]:
    """A task stream from explicit classes: task ``t`` holds the classes ``tasks[t]`` (the ACL paper's
    "mini" benchmarks, §4.3: the first 2 classes of each data set of 5-datasets, or of each of the
    first 5 tasks of Split-CIFAR100).

    Demonstrations: ``k_shot`` per class drawn without replacement from its ``demos`` with
    ``np.random.default_rng([seed, run])`` (class after class in stream order), arranged shot-major like
    :func:`split_benchmark`; queries: every one of its ``queries``, class after class. Labels:
    ``"class"`` → running class index over the stream (``0, 1`` for task 0, ``2, 3`` for task 1 with two
    classes per task); ``"domain"`` → the class's position in its task. Tasks are named by their classes'
    names joined with ``/``.

    Raises:
        ValueError: naming the argument for an empty stream or task, a class with fewer than ``k_shot``
            demos or no query, or examples of different shapes.
    """
    k, run, seed = (
        check_count("k_shot", k_shot, 1),
        check_count("run", run, 0),
        check_count("seed", seed, 0),
    )
    check_choice("scenario", scenario, SCENARIOS)
    if not tasks or any(not classes for classes in tasks):
        raise ValueError("tasks: expected a non-empty list of non-empty class lists, given an empty one")
    shape = tasks[0][0].demos.shape[1:]
    rng = np.random.default_rng([seed, run])
    out, first = [], 0
    for classes in tasks:
        for c in classes:
            if len(c.demos) < k or len(c.queries) == 0:
                raise ValueError(
                    f"k_shot: expected <= the {len(c.demos)} demos of class {c.name!r} and >= 1 query, given "
                    f"k_shot={k} and {len(c.queries)} queries"
                )
            if c.demos.shape[1:] != shape or c.queries.shape[1:] != shape:
                raise ValueError(
                    f"tasks: expected examples of shape {shape} in every class, given {c.name!r}"
                )
        picks = [rng.choice(len(c.demos), size=k, replace=False) for c in classes]
        index, position = _shot_major(picks)
        labels = _task_labels(scenario, range(first, first + len(classes)))
        out.append(
            Task(
                name="/".join(c.name for c in classes),
                support_images=np.stack([classes[p].demos[i] for i, p in zip(index, position, strict=True)]),
                support_labels=labels[position],
                query_images=np.concatenate([c.queries for c in classes]),
                query_labels=np.concatenate(
                    [np.full(len(c.queries), lab) for c, lab in zip(classes, labels, strict=True)]
                ),
            )
        )
        first += len(classes)
    return out


def holdout_split(ds: SplitDataset, per_class: int) -> SplitDataset:
    """A validation copy of ``ds`` carved from its training data only: ``train`` = every train image but
    the last ``per_class`` of each class, ``test`` = those last ``per_class`` images (dataset order).
    Hyper-parameter searches run the benchmark's protocol on it, so the test split is never seen.
    Statistics (``mean``/``std``) are kept from ``ds``; the name gets ``" (validation)"``.

    Raises:
        ValueError: unless ``per_class`` is an int >= 1 and every class has more train images than that.
    """
    if not isinstance(ds, SplitDataset):
        raise ValueError(f"ds: expected a SplitDataset, given {type(ds).__name__}")
    v = check_count("per_class", per_class, 1)
    labels = ds.train.labels
    held = np.zeros(len(labels), dtype=bool)
    for c in range(ds.num_classes):
        idx = np.flatnonzero(labels == c)
        if len(idx) <= v:
            raise ValueError(
                f"per_class: expected fewer than the {len(idx)} train images of class {c} of {ds.name!r}, "
                f"given {v}"
            )
        held[idx[-v:]] = True
    return SplitDataset(
        name=f"{ds.name} (validation)",
        train=LabeledImages(ds.train.images[~held], labels[~held]),
        test=LabeledImages(ds.train.images[held], labels[held]),
        num_classes=ds.num_classes,
        mean=ds.mean,
        std=ds.std,
    )


def holdout_pool(pool: ClassPool, n_query_per_class: int) -> ClassPool:
    """``pool`` without the last ``n_query_per_class`` examples of each class — the queries of
    :func:`pool_split_tasks` — so that a stream drawn from it (with its own last examples as validation
    queries) never sees a test query. Statistics are kept; the name gets ``" (validation)"``.

    Raises:
        ValueError: unless ``n_query_per_class`` is an int in ``[1, examples_per_class - 2]``.
    """
    if not isinstance(pool, ClassPool):
        raise ValueError(f"pool: expected a ClassPool, given {type(pool).__name__}")
    n = check_count("n_query_per_class", n_query_per_class, 1)
    m = pool.examples_per_class
    if n > m - 2:
        raise ValueError(
            f"n_query_per_class: expected <= {m - 2} (the pool's {m} examples per class less 2), given {n}"
        )
    return ClassPool(
        name=f"{pool.name} (validation)",
        images=pool.images[:, : m - n],
        class_names=list(pool.class_names),
        alphabets=list(pool.alphabets),
        mean=pool.mean,
        std=pool.std,
    )
