"""The config value checks: the message names the field, the expectation and the value."""

from __future__ import annotations

import math

import pytest

from fastweights.checks import check_betas, check_choice, check_choices, check_device, check_int, check_real


@pytest.mark.parametrize("value", [0, -1, 1.5, "3", True, None])
def test_check_int_refuses(value):
    with pytest.raises(ValueError, match=r"^n: expected an int >= 1, got "):
        check_int("n", value)


def test_check_int_bounds():
    check_int("n", 0, low=0)
    check_int("n", 5, low=0, high=5)
    with pytest.raises(ValueError, match=r"n: expected an int in \[0, 5\], got 6"):
        check_int("n", 6, low=0, high=5)


@pytest.mark.parametrize("value", [math.inf, -math.inf, math.nan, "x", None, True])
def test_check_real_refuses_non_finite_and_non_numbers(value):
    with pytest.raises(ValueError, match=r"^lr: expected a finite number"):
        check_real("lr", value)


def test_check_real_intervals():
    check_real("lr", 1e-3, 0, low_open=True)
    check_real("p", 0.0, 0, 1, high_open=True)
    with pytest.raises(ValueError, match=r"lr: expected a finite number > 0, got 0"):
        check_real("lr", 0, 0, low_open=True)
    with pytest.raises(ValueError, match=r"p: expected a finite number in \[0, 1\), got 1"):
        check_real("p", 1, 0, 1, high_open=True)
    with pytest.raises(ValueError, match=r"x: expected a finite number <= 2"):
        check_real("x", 3, high=2)


def test_check_choice_and_choices():
    check_choice("norm", "batch", ("instance", "batch"))
    with pytest.raises(ValueError, match=r"norm: expected one of \['instance', 'batch'\], got 'group'"):
        check_choice("norm", "group", ("instance", "batch"))
    check_choices("s", ["domain"], ("domain", "class"))
    for bad in ([], ["task"]):
        with pytest.raises(ValueError, match=r"s: expected a non-empty list of values from"):
            check_choices("s", bad, ("domain", "class"))


@pytest.mark.parametrize("value", [(0.9,), (0.9, 1.0), (0.9, -0.1), "ab", None, (0.9, 0.99, 0.5)])
def test_check_betas(value):
    check_betas("adam_betas", (0.9, 0.995))
    with pytest.raises(ValueError, match=r"adam_betas: expected two numbers in \[0, 1\)"):
        check_betas("adam_betas", value)


@pytest.mark.parametrize("value", ["mps", "gpu", "cuda:", "cuda:x", "", None, 0])
def test_check_device(value):
    for ok in ("auto", "cpu", "cuda", "cuda:1"):
        check_device("device", ok)
    with pytest.raises(ValueError, match=r"device: expected auto, cpu, cuda or cuda:N, got"):
        check_device("device", value)
