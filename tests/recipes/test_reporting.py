"""Results values as the reports show them: percent strings, mean entries, accuracy matrices, labels."""

import math

import numpy as np
import pytest

from fastweights.recipes.reporting import as_float, as_matrix, mean_entry, pct, pm, task_labels


def test_percent_strings():
    assert pct(0.61) == "61.00" and pct(0.6789, 1) == "67.9" and pct(1) == "100.00"
    assert pct(None) == "—" and pct(float("nan")) == "—"
    assert pm(0.61, 0.012) == "61.00 ± 1.20"
    assert pm(0.923, 0.004, digits=1) == "92.3 ± 0.4"
    assert pm(0.61, None) == "61.00" and pm(0.61, float("nan")) == "61.00"
    assert math.isnan(as_float(None)) and as_float(3) == 3.0


def test_mean_entry():
    e = {"mean": 0.5, "ci95": 0.1}
    assert mean_entry(e, "x") is e
    with pytest.raises(ValueError, match=r"^t\['A'\]: expected a dict with key 'mean', given \['ci95'\]$"):
        mean_entry({"ci95": 0.1}, "t['A']")
    with pytest.raises(ValueError, match="given float"):
        mean_entry(0.5, "t")


def test_as_matrix():
    R = as_matrix([[0.9, None], [0.8, 0.7]])
    assert R.dtype == np.float64 and R.shape == (2, 2) and math.isnan(R[0, 1])
    with pytest.raises(ValueError, match=r"^split\['R'\]: expected a non-empty square 2-D matrix"):
        as_matrix([[0.9, 0.1]], name="split['R']")
    with pytest.raises(ValueError, match="R: expected a square matrix of numbers/None"):
        as_matrix([[0.9, "x"], [0.1, 0.2]])
    with pytest.raises(ValueError, match="square 2-D"):
        as_matrix([])


def test_task_labels():
    assert task_labels(None, 3) == ["1", "2", "3"]
    assert task_labels(["0/1", 2], 2) == ["0/1", "2"]
    with pytest.raises(ValueError, match="task_names: expected 3 names"):
        task_labels(["a"], 3)
