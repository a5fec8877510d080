from __future__ import annotations

import math

import pytest

from fastweights.train.schedules import warmup_cosine


def test_warmup_cosine_rises_linearly_then_decays_to_min_ratio():
    f = warmup_cosine(warmup_steps=10, total_steps=110, min_ratio=0.01)
    assert [f(s) for s in range(3)] == pytest.approx([0.1, 0.2, 0.3])
    assert f(9) == pytest.approx(1.0)
    mid = 10 + 50 - 1  # halfway through the decay
    assert f(mid) == pytest.approx(0.01 + 0.99 * 0.5)
    assert f(109) == pytest.approx(0.01) and f(500) == pytest.approx(0.01)
    values = [f(s) for s in range(9, 110)]
    assert all(a >= b for a, b in zip(values, values[1:], strict=False))
    assert not any(math.isnan(v) for v in values)


def test_warmup_cosine_rejects_bad_arguments():
    with pytest.raises(ValueError, match="min_ratio"):
        warmup_cosine(warmup_steps=1, total_steps=10, min_ratio=2.0)
    with pytest.raises(ValueError, match="total_steps"):
        warmup_cosine(warmup_steps=1, total_steps=0, min_ratio=0.0)
