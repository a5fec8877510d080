from __future__ import annotations

import pytest
import torch

from fastweights.ops._common import check_finite, check_positive_int


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
def test_check_finite_is_exact_when_the_sum_overflows(dtype):
    """The fast path sums the entries; finite entries whose sum overflows must still pass, and any NaN
    or Inf entry must fail (also infinities of both signs, whose sum is NaN)."""
    big = torch.full((4, 3), torch.finfo(dtype).max, dtype=dtype)
    assert not torch.isfinite(big.sum())
    check_finite("x", big)
    check_finite("x", None)
    check_finite("x", torch.empty(0, 3, dtype=dtype))
    for bad in ([float("nan")], [float("inf")], [-float("inf")], [float("inf"), -float("inf")]):
        t = big.clone()
        t.view(-1)[: len(bad)] = torch.tensor(bad, dtype=dtype)
        with pytest.raises(ValueError, match="^x: expected finite values, got NaN or Inf$"):
            check_finite("x", t)


def test_check_positive_int_names_the_argument():
    assert check_positive_int("n", 3) == 3
    for bad in (0, -1, 2.0, True, "4", None):
        with pytest.raises(ValueError, match=f"^n: expected an int >= 1, got {bad!r}$"):
            check_positive_int("n", bad)
