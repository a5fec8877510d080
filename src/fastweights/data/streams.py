"""Task streams for continual learning: split benchmarks (Split-MNIST style) built from a dataset."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .sources.base import SplitDataset

__all__ = ["Task", "split_benchmark", "SCENARIOS", "SPLIT_PAIRS"]

SCENARIOS = ("domain", "class")
SPLIT_PAIRS = ((0, 1), (2, 3), (4, 5), (6, 7), (8, 9))


@dataclass
class Task:
    """One task of a continual-learning stream (uint8 images, int64 labels).

    ``support_images [N*K, S, S]`` / ``support_labels [N*K]``: demonstrations, shot-major
    (``a, b, a, b, ...``); ``query_images [Q, S, S]`` / ``query_labels [Q]``: the evaluation images.
    Images of an RGB dataset have a channel axis before the pixels (``[N*K, 3, S, S]``, ``[Q, 3, S, S]``).
    """

    name: str
    support_images: np.ndarray
    support_labels: np.ndarray
    query_images: np.ndarray
    query_labels: np.ndarray


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
    k_shot: int,
    run: int,
    scenario: str = "domain",
    class_groups: Sequence[Sequence[int]] = SPLIT_PAIRS,
) -> list[Task]:
    """The split-benchmark task sequence of the Split-MNIST protocol (Hsu et al. 2018; ACL paper).

    One :class:`Task` per group of ``class_groups`` (default digit pairs 0/1, 2/3, ..., 8/9), named
    like ``"0/1"``. Demonstrations come from ``ds.train``: run ``r`` takes the train images
    ``[k_shot * r, k_shot * (r + 1))`` of each class in dataset order, arranged shot-major
    (``c0, c1, c0, c1, ...``), so different runs use disjoint demonstrations; queries are all
    ``ds.test`` images of the group's classes in dataset order. Labels: ``scenario="domain"`` ->
    position of the class within its group (0, 1, ...); ``"class"`` -> the original class ids.
    Returns tasks with support uint8 ``[N*K, S, S]``/int64 ``[N*K]`` and query uint8 ``[Q, S, S]``/
    int64 ``[Q]``. Raises ``ValueError`` on a bad argument or when a class has fewer than
    ``k_shot * (run + 1)`` train images.
    """
    if not isinstance(ds, SplitDataset):
        raise ValueError(f"ds: expected a SplitDataset, given {type(ds).__name__}")
    for name, value, lo in (("k_shot", k_shot, 1), ("run", run, 0)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < lo:
            raise ValueError(f"{name}: expected an int >= {lo}, given {value!r}")
    if scenario not in SCENARIOS:
        raise ValueError(f"scenario: expected one of {SCENARIOS}, given {scenario!r}")
    groups = _check_groups(class_groups, ds.num_classes)
    k, lo, hi = int(k_shot), int(k_shot) * int(run), int(k_shot) * (int(run) + 1)
    tasks = []
    for group in groups:
        demos = []
        for c in group:
            idx = np.flatnonzero(ds.train.labels == c)
            if len(idx) < hi:
                raise ValueError(
                    f"run: expected class {c} of {ds.name!r} to have >= k_shot * (run + 1) = {hi} train "
                    f"images, given {len(idx)} (k_shot={k}, run={run})"
                )
            demos.append(idx[lo:hi])
        support = np.stack(demos, axis=1).reshape(-1)  # [K, N] -> shot-major
        query = np.flatnonzero(np.isin(ds.test.labels, group))
        lut = np.full(ds.num_classes, -1, dtype=np.int64)
        lut[list(group)] = np.arange(len(group)) if scenario == "domain" else group
        tasks.append(
            Task(
                name="/".join(str(c) for c in group),
                support_images=ds.train.images[support],
                support_labels=lut[ds.train.labels[support]],
                query_images=ds.test.images[query],
                query_labels=lut[ds.test.labels[query]],
            )
        )
    return tasks
