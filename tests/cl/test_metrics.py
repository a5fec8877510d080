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


def test_crossed_t_ci95_matches_a_two_by_three_layout_computed_by_hand():
    from scipy import stats

    from fastweights.cl.metrics import crossed_t_ci95

    # grand mean 3.5; row means 2, 5 -> MS_a = 3 * (1.5² + 1.5²) / 1 = 13.5; column means 2, 3, 5.5 ->
    # MS_b = 2 * (1.5² + 0.5² + 2²) / 2 = 6.5; residuals ±0.5, ±0.5, ∓1 -> MS_e = 3 / 2 = 1.5.
    # V = (13.5 + 6.5 - 1.5) / 6 = 18.5 / 6; Satterthwaite: 18.5² / (13.5²/1 + 6.5²/2 + 1.5²/(1·2))
    # = 342.25 / (182.25 + 21.125 + 1.125) = 342.25 / 204.5 ≈ 1.6736 df
    mean, ci, df = crossed_t_ci95([[1.0, 2.0, 3.0], [3.0, 4.0, 8.0]])
    assert mean == pytest.approx(3.5) and df == pytest.approx(342.25 / 204.5)
    assert ci == pytest.approx(stats.t.ppf(0.975, 342.25 / 204.5) * math.sqrt(18.5 / 6))


def test_crossed_t_ci95_keeps_a_negative_component_estimate_in_the_unbiased_variance():
    from scipy import stats

    from fastweights.cl.metrics import crossed_t_ci95

    # grand mean 5.5; row means 1, 10 -> MS_a = 3 * (4.5² + 4.5²) / 1 = 121.5; column means 5.5, 6, 5 ->
    # MS_b = 2 * (0 + 0.5² + 0.5²) / 2 = 0.5; residuals (0, -1.5, 1.5) and their negatives -> MS_e = 9 / 2
    # = 4.5 > MS_b. V = (121.5 + 0.5 - 4.5) / 6 = 117.5 / 6, below the truncated (121.5 + 4.5 - 4.5) / 6;
    # Satterthwaite: 117.5² / (121.5²/1 + 0.5²/2 + 4.5²/2) = 13806.25 / 14772.5 ≈ 0.9346 df (< S - 1 = 1)
    mean, ci, df = crossed_t_ci95([[1.0, 0.0, 2.0], [10.0, 12.0, 8.0]])
    assert mean == pytest.approx(5.5) and df == pytest.approx(13806.25 / 14772.5)
    assert ci == pytest.approx(stats.t.ppf(0.975, 13806.25 / 14772.5) * math.sqrt(117.5 / 6))


def test_crossed_t_ci95_falls_back_to_truncated_components_when_the_unbiased_variance_is_not_positive():
    from scipy import stats

    from fastweights.cl.metrics import crossed_t_ci95

    # row means 1/3, 2/3 -> MS_a = 1/6; equal column means -> MS_b = 0; MS_e = (4/3) / 2 = 2/3: the
    # unbiased 1/6 + 0 - 2/3 < 0, so both components are truncated at zero: V = MS_e / (S R) = 1/9, with
    # min(S, R) - 1 = 1 df
    mean, ci, df = crossed_t_ci95([[0.0, 1.0, 0.0], [1.0, 0.0, 1.0]])
    assert mean == pytest.approx(0.5) and df == 1
    assert ci == pytest.approx(stats.t.ppf(0.975, 1) / 3)
    # exactly zero: row means 1, 3 -> MS_a = 2 * (1 + 1) = 4; column means 2, 2 -> MS_b = 0; residuals ±1
    # -> MS_e = 4 / 1 = 4; 4 + 0 - 4 = 0 -> V = MS_e / 4 = 1, 1 df
    mean, ci, df = crossed_t_ci95([[0.0, 2.0], [4.0, 2.0]])
    assert mean == pytest.approx(2.0) and df == 1
    assert ci == pytest.approx(stats.t.ppf(0.975, 1))
    # no spread at all (every mean square 0, Satterthwaite's denominator 0): a zero-width interval
    mean, ci, df = crossed_t_ci95(np.full((3, 4), 0.25))
    assert (mean, ci, df) == (pytest.approx(0.25), 0.0, 2)


def test_crossed_t_ci95_of_one_row_or_column_is_the_t_interval():
    from fastweights.cl.metrics import crossed_t_ci95, t_ci95

    row = [0.3, 0.1, 0.4, 0.15, 0.9]
    assert crossed_t_ci95([row]) == pytest.approx((*t_ci95(row), 4))
    assert crossed_t_ci95(row) == pytest.approx((*t_ci95(row), 4))  # a 1-D sequence is one row
    assert crossed_t_ci95(np.array(row)[:, None]) == pytest.approx((*t_ci95(row), 4))
    mean, ci, df = crossed_t_ci95([[4.0]])
    assert mean == 4.0 and math.isnan(ci) and df == 0
    for bad in ([], [[]], [[[1.0]]], [[1.0, math.nan]]):
        with pytest.raises(ValueError, match="values: expected"):
            crossed_t_ci95(bad)


def test_crossed_paired_difference_with_one_seed_is_the_paired_t_interval_over_draws():
    from fastweights.cl.metrics import crossed_paired_difference, paired_difference

    rng = np.random.default_rng(0)
    ref, oth = rng.uniform(0.5, 0.9, 10), rng.uniform(0.5, 0.9, 10)
    got, want = crossed_paired_difference(ref, oth[None, :]), paired_difference(ref, oth)
    assert got["mean"] == pytest.approx(want["mean"]) and got["ci95"] == pytest.approx(want["ci95"])
    assert got["verdict"] == want["verdict"] and (got["seeds"], got["draws"], got["df"]) == (1, 10, 9)
    assert got["differences"][0] == pytest.approx(want["differences"])


def test_crossed_paired_difference_without_draw_effects_is_the_interval_over_seed_means():
    from fastweights.cl.metrics import crossed_paired_difference, paired_difference

    # nothing varies by draw: the difference is each seed's offset, and the seeds' t interval remains
    seeds = np.array([0.74, 0.76, 0.75])
    got = crossed_paired_difference(np.full(10, 0.70), np.repeat(seeds[:, None], 10, axis=1))
    want = paired_difference([0.70] * 3, seeds)
    assert got["mean"] == pytest.approx(want["mean"]) and got["ci95"] == pytest.approx(want["ci95"])
    assert got["verdict"] == want["verdict"] == "better" and got["df"] == 2


def test_crossed_paired_difference_counts_the_draw_to_draw_spread_of_the_difference():
    from fastweights.cl.metrics import crossed_paired_difference, paired_difference

    # the same seed means as above, but the baseline swings by ±0.1 from draw to draw and ACL does not:
    # the method as a constant (its mean) would call ACL better; the crossed interval does not
    ref = np.array([0.6, 0.8] * 5)
    oth = np.repeat(np.array([0.74, 0.76, 0.75])[:, None], 10, axis=1)
    got = crossed_paired_difference(ref, oth)
    assert got["mean"] == pytest.approx(0.05) and got["verdict"] == "not distinguishable"
    assert paired_difference([ref.mean()] * 3, oth.mean(axis=1))["verdict"] == "better"


def test_crossed_paired_difference_invariances():
    from fastweights.cl.metrics import crossed_paired_difference

    rng = np.random.default_rng(1)
    ref, oth = rng.uniform(0.4, 0.9, 7), rng.uniform(0.4, 0.9, (3, 7))
    base = crossed_paired_difference(ref, oth)
    # a draw's difficulty shared by both sides cancels: that is the pairing
    shared = rng.normal(0.0, 0.2, 7)
    got = crossed_paired_difference(ref + shared, oth + shared)
    assert (got["mean"], got["ci95"]) == pytest.approx((base["mean"], base["ci95"]))
    # the order of seeds and of draws (the same order on both sides) does not matter
    s, r = rng.permutation(3), rng.permutation(7)
    got = crossed_paired_difference(ref[r], oth[s][:, r])
    assert (got["mean"], got["ci95"]) == pytest.approx((base["mean"], base["ci95"]))
    # a constant shifts the mean only; a scale scales mean and interval
    got = crossed_paired_difference(ref, oth + 0.25)
    assert (got["mean"], got["ci95"]) == pytest.approx((base["mean"] + 0.25, base["ci95"]))
    got = crossed_paired_difference(100 * ref, 100 * oth)
    assert (got["mean"], got["ci95"]) == pytest.approx((100 * base["mean"], 100 * base["ci95"]))
    # the verdict's direction follows higher_is_better
    clear = crossed_paired_difference(ref, oth + 1.0)
    assert clear["verdict"] == "better"
    assert crossed_paired_difference(ref, oth + 1.0, higher_is_better=False)["verdict"] == "worse"


def test_crossed_paired_difference_refuses_mismatched_or_bad_inputs():
    from fastweights.cl.metrics import crossed_paired_difference

    with pytest.raises(ValueError, match=r"^other: expected shape \[S, 3\]"):
        crossed_paired_difference([0.1, 0.2, 0.3], [[0.1, 0.2]])
    with pytest.raises(ValueError, match=r"^other: expected shape \[S, 2\]"):
        crossed_paired_difference([0.1, 0.2], [0.1, 0.2])  # one seed is a [1, R] array
    with pytest.raises(ValueError, match="^other: expected finite"):
        crossed_paired_difference([0.1, 0.2], [[0.1, math.nan]])
    with pytest.raises(ValueError, match="^reference: expected finite"):
        crossed_paired_difference([math.inf, 0.2], [[0.1, 0.2]])


def test_paired_difference_pairs_by_position_and_refuses_unequal_lengths():
    from fastweights.cl.metrics import paired_difference

    d = paired_difference([0.5, 0.6, 0.7], [0.5, 0.6, 0.7])
    assert d["mean"] == 0.0 and d["ci95"] == 0.0 and d["verdict"] == "not distinguishable"
    assert paired_difference([1.0, 1.0], [2.0, 2.0])["verdict"] == "better"  # no spread: any gap counts
    with pytest.raises(ValueError, match=r"^other: expected as many values as reference \(2"):
        paired_difference([1.0, 2.0], [1.0])
    with pytest.raises(ValueError, match="reference: expected finite"):
        paired_difference([math.inf], [1.0])
