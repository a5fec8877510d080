from __future__ import annotations

import pytest
import torch

from fastweights.cl.baselines.base import anchor
from fastweights.cl.baselines.quadratic import accumulate, quadratic_penalty
from tests.cl.baselines._tiny import tiny_learner


def test_penalty_is_zero_at_the_anchor_and_the_weighted_squared_distance_away():
    model = tiny_learner("mlp").double()
    star = anchor(model)
    importance = {n: torch.rand_like(p) for n, p in star.items()}
    assert quadratic_penalty(model, importance, star).item() == 0.0
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.01)
    want = sum((importance[n] * 0.01**2).sum() for n in star)
    torch.testing.assert_close(quadratic_penalty(model, importance, star), want)
    penalty = quadratic_penalty(model, importance, star)
    penalty.backward()
    for n, p in model.named_parameters():  # d/dθ Σ Ω (θ − θ*)² = 2 Ω (θ − θ*)
        torch.testing.assert_close(p.grad, 2 * importance[n] * (p.detach() - star[n]))


def test_penalty_needs_an_importance_of_some_parameter():
    model = tiny_learner("mlp")
    with pytest.raises(ValueError, match="^importance: expected entries"):
        quadratic_penalty(model, {}, anchor(model))


def test_accumulate_decays_the_old_importance():
    old, new = {"a": torch.tensor([1.0, 2.0])}, {"a": torch.tensor([10.0, 20.0])}
    assert torch.equal(accumulate(None, new)["a"], new["a"])
    assert torch.equal(accumulate(old, new)["a"], torch.tensor([11.0, 22.0]))
    assert torch.equal(accumulate(old, new, 0.5)["a"], torch.tensor([10.5, 21.0]))
    assert torch.equal(old["a"], torch.tensor([1.0, 2.0]))  # inputs unchanged
