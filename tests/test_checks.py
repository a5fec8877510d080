"""The value checks: the message names the field or argument, the expectation and the value."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
import torch

from fastweights.checks import (
    check_betas,
    check_choice,
    check_choices,
    check_count,
    check_device,
    check_finite,
    check_int,
    check_real,
    describe,
    is_int,
    is_real,
)


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


def test_check_int_returns_the_value_and_names_the_argument():
    assert check_int("n", 3) == 3
    for bad in (0, -1, 2.0, True, "4", None, np.int64(2)):
        with pytest.raises(ValueError, match=f"^n: expected an int >= 1, got {re.escape(repr(bad))}$"):
            check_int("n", bad)


def test_is_int_and_is_real_refuse_bools():
    assert is_int(3) and not is_int(True) and not is_int(3.0) and not is_int(np.int64(3))
    assert is_real(3) and is_real(math.inf) and not is_real(False) and not is_real("1")


def test_check_count_takes_numpy_integers_and_says_given():
    assert check_count("k", np.int64(3), 1) == 3 and type(check_count("k", np.int64(3), 1)) is int
    assert check_count("seed", 0, 0) == 0 and check_count("size", 512, 8, 512) == 512
    with pytest.raises(ValueError, match=r"^k: expected an int >= 1, given 0$"):
        check_count("k", 0, 1)
    with pytest.raises(ValueError, match=r"^size: expected an int in \[8, 512\], given 513$"):
        check_count("size", 513, 8, 512)
    for bad in (True, 2.0, "2", None):
        with pytest.raises(ValueError, match=r"^k: expected an int >= 1, given "):
            check_count("k", bad, 1)


def test_describe_tensors_and_other_values():
    assert describe(torch.zeros(2, 3)) == "tensor of shape [2, 3] and dtype torch.float32"
    assert describe([1]) == "list" and describe(None) == "NoneType"


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
def test_check_finite_is_exact_when_the_sum_overflows(dtype):
    """The fast path sums the entries; finite entries whose sum overflows must still pass, and any NaN
    or Inf entry must fail (also infinities of both signs, whose sum is NaN)."""
    big = torch.full((4, 3), torch.finfo(dtype).max, dtype=dtype)
    assert not torch.isfinite(big.sum())
    check_finite("x", big)
    check_finite("x", None)
    check_finite("x", torch.empty(0, 3, dtype=dtype))
    check_finite("x", torch.tensor([1, 2]))  # integer tensors are skipped
    for bad in ([float("nan")], [float("inf")], [-float("inf")], [float("inf"), -float("inf")]):
        t = big.clone()
        t.view(-1)[: len(bad)] = torch.tensor(bad, dtype=dtype)
        with pytest.raises(ValueError, match="^x: expected finite values, got NaN or Inf$"):
            check_finite("x", t)


def test_importing_the_checks_does_not_import_torch():
    import subprocess
    import sys

    code = "import sys, fastweights.checks; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False"]
