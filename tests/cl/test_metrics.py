import json
import math

import numpy as np
import pytest

from fastweights.cl.metrics import (
    average_accuracy,
    backward_transfer,
    forgetting,
    forward_transfer,
    learning_accuracy,
    mean_ci95,
    summarize_runs,
)

NAN = float("nan")

# R[i, j] = accuracy on task j after learning tasks 0..i. Upper triangle measured (zero-shot).
R3 = np.array(
    [
        [0.90, 0.30, 0.20],
        [0.70, 0.80, 0.40],
        [0.60, 0.75, 0.95],
    ]
)


def test_hand_computed_3x3():
    # ACC = (0.60 + 0.75 + 0.95) / 3
    assert average_accuracy(R3) == pytest.approx(2.30 / 3)
    # BWT = ((0.60 - 0.90) + (0.75 - 0.80)) / 2 = (-0.30 - 0.05) / 2
    assert backward_transfer(R3) == pytest.approx(-0.175)
    # forgetting: task0 max(0.90, 0.70) - 0.60 = 0.30; task1 max(0.80) - 0.75 = 0.05 -> 0.175
    assert forgetting(R3) == pytest.approx(0.175)
    # learning accuracy = (0.90 + 0.80 + 0.95) / 3
    assert learning_accuracy(R3) == pytest.approx(2.65 / 3)
    # FWT = ((R[0,1] - b1) + (R[1,2] - b2)) / 2 = ((0.30 - 0.50) + (0.40 - 0.50)) / 2
    assert forward_transfer(R3, [0.5, 0.5, 0.5]) == pytest.approx(-0.15)


def test_forgetting_uses_max_over_history_not_diagonal():
    # task 0 improves after task 1 (0.95 > 0.90) then drops: forgetting uses the max (0.95),
    # BWT uses the diagonal (0.90).
    R = np.array([[0.90, NAN, NAN], [0.95, 0.80, NAN], [0.50, 0.80, 0.70]])
    assert forgetting(R) == pytest.approx(((0.95 - 0.50) + (0.80 - 0.80)) / 2)
    assert backward_transfer(R) == pytest.approx(((0.50 - 0.90) + (0.80 - 0.80)) / 2)


def test_forgetting_ignores_zero_shot_entries():
    # R[0, 1] (before task 1 was learned) is high, but it is not knowledge learned and then lost.
    R = np.array([[0.9, 0.99], [0.9, 0.6]])
    assert forgetting(R) == pytest.approx(0.0)


def test_nan_upper_triangle_allowed_and_fwt_needs_it():
    R = np.where(np.tri(3, dtype=bool), R3, NAN)
    assert average_accuracy(R) == pytest.approx(average_accuracy(R3))
    assert forgetting(R) == pytest.approx(forgetting(R3))
    with pytest.raises(ValueError, match=r"R\[j-1, j\]"):
        forward_transfer(R, [0.5, 0.5, 0.5])


def test_no_forgetting_perfect_retention():
    R = np.tril(np.ones((4, 4)))
    assert backward_transfer(R) == 0.0
    assert forgetting(R) == 0.0
    assert average_accuracy(R) == 1.0


@pytest.mark.parametrize(
    "bad, match",
    [
        (np.ones((2, 3)), r"R: expected a square 2-D array \[T, T\], given shape \(2, 3\)"),
        (np.ones(3), r"R: expected a square 2-D array"),
        (np.ones((2, 2, 2)), r"R: expected a square 2-D array"),
        (
            np.array([[1.0, 0.0], [NAN, 1.0]]),
            r"R: expected finite entries on and below the diagonal.*\(1, 0\)",
        ),
        (np.array([[np.inf, 0.0], [0.5, 1.0]]), r"R: expected finite entries.*\(0, 0\)"),
    ],
)
def test_invalid_matrix(bad, match):
    for fn in (average_accuracy, backward_transfer, forgetting, learning_accuracy):
        with pytest.raises(ValueError, match=match):
            fn(bad)


def test_single_task():
    R = np.array([[0.7]])
    assert average_accuracy(R) == pytest.approx(0.7)
    assert learning_accuracy(R) == pytest.approx(0.7)
    for fn in (backward_transfer, forgetting):
        with pytest.raises(ValueError, match="at least 2"):
            fn(R)


def test_fwt_baseline_shape():
    with pytest.raises(ValueError, match=r"baseline: expected shape \(3,\), given \(2,\)"):
        forward_transfer(R3, [0.5, 0.5])


def test_mean_ci95_formula():
    vals = [0.5, 0.6, 0.7, 0.8]
    mean, ci = mean_ci95(vals)
    assert mean == pytest.approx(0.65)
    std = math.sqrt(sum((v - 0.65) ** 2 for v in vals) / 4)  # population std
    assert ci == pytest.approx(1.96 * std / math.sqrt(4))
    assert ci == pytest.approx(1.96 * np.std(vals) / 2)
    assert mean_ci95([0.3]) == (pytest.approx(0.3), 0.0)


@pytest.mark.parametrize("bad", [[], [[0.1, 0.2]], [0.1, NAN]])
def test_mean_ci95_invalid(bad):
    with pytest.raises(ValueError, match="values: expected"):
        mean_ci95(bad)


def test_summarize_runs():
    a = np.array([[0.9, NAN], [0.6, 0.8]])
    b = np.array([[0.7, NAN], [0.4, 1.0]])
    s = summarize_runs([a, b])
    assert s["runs"] == 2
    assert s["R"] == [[pytest.approx(0.8), None], [pytest.approx(0.5), pytest.approx(0.9)]]
    assert s["R_std"][0][0] == pytest.approx(0.1)
    assert s["R_std"][0][1] is None
    # ACC per run: 0.7, 0.7 ; BWT per run: -0.3, -0.3 ; learning acc: 0.85, 0.85
    assert s["ACC"] == {
        "mean": pytest.approx(0.7),
        "std": pytest.approx(0.0),
        "per_run": pytest.approx([0.7, 0.7]),
    }
    assert s["BWT"]["mean"] == pytest.approx(-0.3) and s["BWT"]["per_run"] == pytest.approx([-0.3, -0.3])
    assert s["forgetting"]["mean"] == pytest.approx(0.3)
    assert s["learning_accuracy"]["mean"] == pytest.approx(0.85)
    json.dumps(s, allow_nan=False)  # strict-JSON safe


def test_summarize_runs_std_is_population():
    runs = [np.array([[1.0, 0.0], [v, 1.0]]) for v in (0.2, 0.4, 0.9)]
    s = summarize_runs(runs)
    accs = [(v + 1.0) / 2 for v in (0.2, 0.4, 0.9)]
    assert s["ACC"]["std"] == pytest.approx(np.std(accs))


def test_summarize_runs_errors():
    with pytest.raises(ValueError, match="matrices: expected at least one"):
        summarize_runs([])
    with pytest.raises(ValueError, match="matrices: expected the same shape"):
        summarize_runs([np.eye(2), np.eye(3)])


def test_t_ci95_is_the_student_interval_and_undefined_for_one_value():
    from scipy import stats

    from fastweights.cl.metrics import t_ci95

    mean, ci = t_ci95([1.0, 2.0, 3.0, 6.0])
    assert mean == pytest.approx(3.0)
    assert ci == pytest.approx(stats.t.ppf(0.975, 3) * np.std([1.0, 2.0, 3.0, 6.0], ddof=1) / 2.0)
    assert math.isnan(t_ci95([4.0])[1]) and t_ci95([4.0])[0] == 4.0
    for bad in ([], [[1.0, 2.0]], [1.0, math.nan]):
        with pytest.raises(ValueError, match="values: expected"):
            t_ci95(bad)


def test_paired_difference_pairs_by_position_and_refuses_unequal_lengths():
    from fastweights.cl.metrics import paired_difference

    d = paired_difference([0.5, 0.6, 0.7], [0.5, 0.6, 0.7])
    assert d["mean"] == 0.0 and d["ci95"] == 0.0 and d["verdict"] == "not distinguishable"
    assert paired_difference([1.0, 1.0], [2.0, 2.0])["verdict"] == "better"  # no spread: any gap counts
    with pytest.raises(ValueError, match=r"^other: expected as many values as reference \(2"):
        paired_difference([1.0, 2.0], [1.0])
    with pytest.raises(ValueError, match="reference: expected finite"):
        paired_difference([math.inf], [1.0])
