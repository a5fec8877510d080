from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from fastweights.cl.baselines import STRATEGIES
from fastweights.cl.baselines.base import anchor
from fastweights.cl.baselines.si import SI
from fastweights.cl.baselines.trainer import TrainSettings, fit_stream
from tests.cl.baselines._tiny import (
    FAST,
    assert_one_line_error,
    check_runs_and_deterministic,
    digits_acc_bwt,
    digits_finetune_acc_bwt,
    flat_weights,
    perturbed,
    tiny_learner,
    tiny_tasks,
)


def _sgd_step(model, strategy, lr):
    """One hand-made optimizer step between the hooks, as ``fit_stream`` calls them."""
    strategy.before_step(model, 0)
    with torch.no_grad():
        for p in model.parameters():
            p.sub_(lr * p.grad)
    strategy.after_step(model, 0)


def test_path_integral_and_importance_follow_eqs_4_and_5():
    tasks = tiny_tasks()
    model = tiny_learner("mlp").double()
    x, y = tasks[0].x.double(), tasks[0].y
    strategy = SI(lam=1.0, xi=0.1)
    strategy.before_task(model, 0, x, y)
    start = anchor(model)
    want = {n: torch.zeros_like(p) for n, p in start.items()}
    for i in range(3):  # plain SGD: Δθ = −η g, so ω = Σ η g²
        model.zero_grad()
        F.cross_entropy(model(x[8 * i : 8 * i + 8]), y[8 * i : 8 * i + 8]).backward()
        for n, p in model.named_parameters():
            want[n] += 0.05 * p.grad**2
        _sgd_step(model, strategy, 0.05)
    for n in want:
        torch.testing.assert_close(strategy.omega[n], want[n])
    strategy.after_task(model, 0, x, y)
    for n, p in model.named_parameters():
        total = p.detach() - start[n]
        torch.testing.assert_close(strategy.importance[n], want[n] / (total**2 + 0.1))
        assert torch.equal(strategy.star[n], p.detach()) and strategy.star[n].data_ptr() != p.data_ptr()
        assert not strategy.omega[n].any()  # ω reset for the next task
    assert sum(v.sum() for v in strategy.importance.values()) > 0


def test_path_integral_uses_the_task_loss_gradient_without_the_penalty():
    tasks = tiny_tasks()
    model = tiny_learner("mlp").double()
    x, y = tasks[1].x.double(), tasks[1].y
    strategy = SI(lam=5.0)
    strategy.importance = {n: torch.rand_like(p) for n, p in anchor(model).items()}
    strategy.star = anchor(model)
    perturbed(model, 0.01)  # away from θ*: the penalty has a gradient
    strategy.before_task(model, 1, x, y)
    model.zero_grad()
    task_loss = F.cross_entropy(model(x), y)
    task_grad = torch.autograd.grad(task_loss, list(model.parameters()), retain_graph=True)
    (task_loss + strategy.penalty(model, 1, x, y, None)).backward()
    before = anchor(model)
    _sgd_step(model, strategy, 0.1)
    for (n, p), g in zip(model.named_parameters(), task_grad, strict=True):
        step = p.detach() - before[n]
        assert not torch.allclose(p.grad, g)  # the penalty did contribute to p.grad
        torch.testing.assert_close(strategy.omega[n], -g * step)


def test_penalty_is_zero_at_the_anchor_and_c_omega_distance_away():
    tasks = tiny_tasks()
    model = tiny_learner("mlp")
    strategy = SI(lam=2.0)
    assert strategy.penalty(model, 0, tasks[0].x, tasks[0].y, None) == 0.0
    fit_stream(model, tasks[:1], strategy, FAST, seed=0)
    assert strategy.penalty(model, 1, tasks[0].x, tasks[0].y, None).item() == 0.0
    delta = perturbed(model, 1e-2)
    want = 2.0 * sum((strategy.importance[n] * delta[n] ** 2).sum() for n in delta)
    away = strategy.penalty(model, 1, tasks[0].x, tasks[0].y, None)
    assert away.item() > 0
    torch.testing.assert_close(away, want.to(away.dtype))


@pytest.mark.parametrize("kind", ["mlp", "conv4"])
def test_lambda_changes_the_weights_and_accuracies_and_importance_is_non_zero_on_cpu(kind):
    tasks = tiny_tasks(n=40, q=40)
    settings = TrainSettings(optimizer="adam", lr=1e-3, epochs=5, batch_size=8)
    runs = {}
    for lam in (0.0, 1e4):
        model, strategy = tiny_learner(kind), SI(lam=lam)
        R = fit_stream(model, tasks, strategy, settings, seed=0)
        runs[lam] = (R, flat_weights(model))
        assert sum(v.sum() for v in strategy.importance.values()) > 0
        assert all(bool(v.any()) for v in strategy.importance.values())  # every tensor has some importance
    assert not torch.equal(runs[0.0][1], runs[1e4][1])
    assert not np.array_equal(runs[0.0][0], runs[1e4][0])


@pytest.mark.parametrize("kind", ["mlp", "conv4"])
def test_runs_in_fit_stream_deterministically(kind):
    check_runs_and_deterministic(lambda: SI(lam=10.0), kind)


def test_registry_and_hparams():
    assert STRATEGIES["si"] is SI
    assert SI(lam=3, xi=0.5).hparams() == {"lam": 3.0, "xi": 0.5}


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (lambda: SI(lam=-1.0), "^lam:"),
        (lambda: SI(lam=math.nan), "^lam:"),
        (lambda: SI(xi=0.0), "^xi:"),
        (lambda: SI(xi=-1.0), "^xi:"),
        (lambda: SI(xi=math.inf), "^xi:"),
    ],
)
def test_bad_hyper_parameters_give_one_line_errors(make, match):
    assert_one_line_error(make, match)


@pytest.mark.slow
def test_forgets_less_than_finetuning_on_split_digits():
    # measured (seeds 0-2): fine-tuning ACC 0.80 / BWT -0.23; SI (c = 1000) 0.84-0.87 / -0.13 to -0.16
    acc, bwt = digits_acc_bwt(SI(lam=1e3))
    base_acc, base_bwt = digits_finetune_acc_bwt()
    assert acc > base_acc + 0.02 and bwt > base_bwt + 0.03
