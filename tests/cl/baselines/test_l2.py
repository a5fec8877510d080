from __future__ import annotations

import pytest
import torch

from fastweights.cl.baselines.base import Finetune, anchor, check_hparam
from fastweights.cl.baselines.l2 import L2
from tests.cl.baselines._tiny import (
    assert_one_line_error,
    check_runs_and_deterministic,
    perturbed,
    tiny_learner,
    tiny_tasks,
)


def test_no_penalty_on_the_first_task_then_zero_at_the_anchor_and_half_lam_squared_away():
    model, task = tiny_learner("mlp"), tiny_tasks(1)[0]
    strategy = L2(lam=3.0)
    assert strategy.penalty(model, 0, task.x, task.y, model(task.x)) == 0.0
    strategy.after_task(model, 0, task.x, task.y)
    assert float(strategy.penalty(model, 1, task.x, task.y, model(task.x)).detach()) == 0.0
    offsets = perturbed(model, 0.01)
    expected = 0.5 * 3.0 * sum(float((d**2).sum()) for d in offsets.values())
    got = strategy.penalty(model, 1, task.x, task.y, model(task.x))
    assert float(got.detach()) == pytest.approx(expected, rel=1e-5)
    got.backward()  # differentiable in the parameters
    assert all(p.grad is not None for p in model.parameters())


def test_anchor_is_a_copy_not_a_view():
    model = tiny_learner("mlp")
    star = anchor(model)
    perturbed(model, 1.0)
    assert all(not torch.equal(star[n], p) for n, p in model.named_parameters())


@pytest.mark.parametrize("kind", ["mlp", "conv4"])
def test_runs_with_both_learners_and_is_deterministic(kind):
    R_l2 = check_runs_and_deterministic(lambda: L2(lam=100.0), kind)
    R_ft = check_runs_and_deterministic(Finetune, kind)
    assert (R_l2 != R_ft).any()  # the pull changes what is learned


@pytest.mark.parametrize("value", [-1.0, float("nan"), float("inf"), "big", True])
def test_bad_lam_is_one_line_naming_it(value):
    assert_one_line_error(lambda: L2(lam=value), r"^lam: ")
    assert_one_line_error(lambda: check_hparam("lam", value), r"^lam: ")
