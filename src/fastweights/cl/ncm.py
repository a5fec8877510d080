"""Nearest-class-mean (NCM) classifier on frozen features: the reference point of the frozen-encoder ACL
experiment (ACL paper §4.3, Table 4 compares with prompt-based learners; an NCM on the same frozen features
is the simplest continual learner that cannot forget: each class is its mean, Mensink et al. 2013).

After each task of a stream, the mean of every label seen so far (over all its demonstrations so far;
in a class-incremental stream a label is a class) is kept; a query is predicted as the label of the
nearest mean (Euclidean distance, on L2-normalised features by default) among the labels seen so far.
The accuracy matrix ``R[i, j]`` has the layout of
:func:`fastweights.cl.split_protocol.evaluate_split_tasks`; unlike the in-context learners, which score
every output, the NCM classifier cannot predict a label it has not seen, so its ``R[i, j]`` for
``j > i`` is 0 in a class-incremental stream.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from fastweights.checks import check_int
from fastweights.cl.metrics import summarize_runs
from fastweights.data.streams import Task

__all__ = ["ncm_predict", "evaluate_ncm_tasks", "ncm_task_alone"]


def _features(name: str, x: object, normalize: bool) -> np.ndarray:
    if not isinstance(x, np.ndarray) or x.ndim != 2 or not np.issubdtype(x.dtype, np.floating):
        got = f"{getattr(x, 'dtype', type(x).__name__)} {getattr(x, 'shape', '')}"
        raise ValueError(f"{name}: expected float features [N, F] (a frozen encoder's), given {got}")
    x = x.astype(np.float64)
    if normalize:
        x = x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)
    return x


def ncm_predict(means: np.ndarray, labels: np.ndarray, queries: np.ndarray) -> np.ndarray:
    """Label of the nearest of ``means [C, F]`` (labelled ``labels [C]``) for each query ``[Q, F]``
    (Euclidean distance; ties go to the first mean): int64 ``[Q]``."""
    d = (queries**2).sum(1, keepdims=True) - 2 * queries @ means.T + (means**2).sum(1)[None, :]
    return labels[np.argmin(d, axis=1)].astype(np.int64)


def _accuracy_matrix(tasks: list[Task], normalize: bool) -> np.ndarray:
    sums: dict[int, np.ndarray] = {}
    counts: dict[int, int] = {}
    queries = [_features(f"tasks[{j}].query_images", t.query_images, normalize) for j, t in enumerate(tasks)]
    R = np.zeros((len(tasks), len(tasks)))
    for i, task in enumerate(tasks):
        support = _features(f"tasks[{i}].support_images", task.support_images, normalize)
        for lab in np.unique(task.support_labels):
            rows = support[task.support_labels == lab]
            sums[int(lab)] = sums.get(int(lab), 0) + rows.sum(0)
            counts[int(lab)] = counts.get(int(lab), 0) + len(rows)
        labels = np.array(sorted(sums), dtype=np.int64)
        means = np.stack([sums[int(lab)] / counts[int(lab)] for lab in labels])
        for j, t in enumerate(tasks):
            R[i, j] = float((ncm_predict(means, labels, queries[j]) == t.query_labels).mean())
    return R


def evaluate_ncm_tasks(
    tasks_for_run: Callable[[int], list[Task]], *, runs: int, normalize: bool = True
) -> dict[str, Any]:
    """Accuracy matrices ``R[i, j]`` of the NCM classifier on the streams ``tasks_for_run(0..runs-1)``
    (features in the tasks' ``support_images`` / ``query_images``, float ``[N, F]``), summarised like
    the in-context learners' (:func:`fastweights.cl.metrics.summarize_runs`: ``R``, ``R_std``, ``ACC``,
    ``BWT``, ``forgetting``, ``learning_accuracy``, ``runs``) plus ``task_names``.

    Raises:
        ValueError: for ``runs < 1`` or tasks whose examples are not float feature matrices.
    """
    check_int("runs", runs)
    matrices, names = [], []
    for r in range(runs):
        tasks = tasks_for_run(r)
        names = names or [t.name for t in tasks]
        matrices.append(_accuracy_matrix(tasks, normalize))
    out = summarize_runs(matrices)
    out["task_names"] = names
    return out


def ncm_task_alone(task: Task, *, normalize: bool = True) -> float:
    """Accuracy of the NCM classifier on ``task``'s queries after only ``task``'s demonstrations."""
    return float(_accuracy_matrix([task], normalize)[0, 0])
