"""Nearest-class-mean classifier on features (cl/ncm.py), on hand-made cases."""

from __future__ import annotations

import numpy as np
import pytest

from fastweights.cl.ncm import evaluate_ncm_tasks, ncm_predict, ncm_task_alone
from fastweights.data.streams import Task


def _f(*rows):
    return np.array(rows, dtype=np.float32)


def test_predicts_the_nearest_mean():
    means, labels = _f([0, 0], [10, 0], [0, 10]), np.array([4, 7, 9])
    assert ncm_predict(means, labels, _f([1, 1], [9, 2], [2, 8], [5, 0.1])).tolist() == [4, 7, 9, 4]


def _tasks():
    """Task 0: labels 0 (near (1, 0)) and 1 (near (0, 1)); task 1: labels 2 (near (-1, 0)) and 3
    (near (0, -1)). Un-normalised, a query at (0.2, 0.1) is nearest to label 0's mean."""
    t0 = Task(
        "a/b",
        _f([1, 0], [0, 1], [3, 0], [0, 3]),
        np.array([0, 1, 0, 1]),
        _f([2, 0.1], [0.1, 2]),
        np.array([0, 1]),
    )
    t1 = Task(
        "c/d",
        _f([-1, 0], [0, -1]),
        np.array([2, 3]),
        _f([-2, 0.2], [0.2, -2], [0.1, 0.3]),
        np.array([2, 3, 3]),
    )
    return [t0, t1]


def test_accuracy_matrix_of_a_class_incremental_stream():
    res = evaluate_ncm_tasks(lambda r: _tasks(), runs=2, normalize=False)
    R = np.array(res["R"])
    # after task 0 only labels 0/1 exist: task 1's queries are all wrong; after task 1 the third query
    # of task 1 ((0.1, 0.3), label 3) is nearest to label 2's mean (-1, 0): wrong
    np.testing.assert_allclose(R, [[1.0, 0.0], [1.0, 2 / 3]])
    assert res["ACC"]["mean"] == pytest.approx((1 + 2 / 3) / 2) and res["ACC"]["std"] == 0.0
    assert res["task_names"] == ["a/b", "c/d"] and res["runs"] == 2


def test_normalisation_changes_distances_and_alone_uses_only_the_task():
    assert ncm_task_alone(_tasks()[1], normalize=False) == pytest.approx(2 / 3)
    # means (10, 0) and (0, 1); the query (1, 0.9) of label 0 is nearer to (0, 1) unless the features
    # are L2-normalised first (then (0.74, 0.67) is nearer to (1, 0))
    t = Task("e/f", _f([10, 0], [0, 1]), np.array([0, 1]), _f([1, 0.9]), np.array([0]))
    assert ncm_task_alone(t, normalize=False) == 0.0 and ncm_task_alone(t) == 1.0


def test_domain_incremental_labels_pool_their_means():
    a = Task("x", _f([0, 0], [4, 0]), np.array([0, 1]), _f([0.5, 0]), np.array([0]))
    b = Task("y", _f([2, 0], [10, 0]), np.array([0, 1]), _f([3.5, 0]), np.array([0]))
    res = evaluate_ncm_tasks(lambda r: [a, b], runs=1, normalize=False)
    # after b, label 0's mean is (1, 0) and label 1's (7, 0): (3.5, 0) -> label 0
    assert np.array(res["R"])[1].tolist() == [1.0, 1.0]


@pytest.mark.parametrize(
    "bad",
    [np.zeros((2, 2), dtype=np.uint8), np.zeros((2, 3, 3), dtype=np.float32), [[0.0, 1.0]]],
)
def test_non_feature_inputs_are_refused(bad):
    t = Task("x", bad, np.array([0, 1]), _f([0, 0]), np.array([0]))
    with pytest.raises(ValueError, match=r"tasks\[0\]\.support_images: expected float features"):
        evaluate_ncm_tasks(lambda r: [t, t], runs=1)
    with pytest.raises(ValueError, match="runs"):
        evaluate_ncm_tasks(lambda r: [t, t], runs=0)
