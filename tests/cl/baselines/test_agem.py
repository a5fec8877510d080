from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from fastweights.cl.baselines import STRATEGIES
from fastweights.cl.baselines.agem import AGEM, project
from fastweights.cl.baselines.trainer import fit_stream
from tests.cl.baselines._tiny import FAST, check_runs_and_deterministic, tiny_learner, tiny_tasks


def test_project_removes_the_conflicting_component_only():
    g_ref = torch.tensor([1.0, 0.0, 2.0])
    g = torch.tensor([-3.0, 1.0, 0.5])  # g·g_ref = -2
    out = project(g, g_ref)
    torch.testing.assert_close(out, g - (-2.0 / 5.0) * g_ref)
    assert float(torch.dot(out, g_ref)) == pytest.approx(0.0, abs=1e-6)
    agree = torch.tensor([3.0, 1.0, -0.5])  # g·g_ref = 2
    assert project(agree, g_ref) is agree
    assert project(g, torch.zeros(3)) is g
    gen = torch.Generator().manual_seed(0)
    for _ in range(50):
        a, b = torch.randn(20, generator=gen), torch.randn(20, generator=gen)
        assert float(torch.dot(project(a, b), b)) >= -1e-5


def flat_grad(model):
    return torch.cat([p.grad.reshape(-1) for p in model.parameters()])


def agem_with_memory(x, y):
    strategy = AGEM(per_class=100, memory_batch=256)
    strategy.batch(0, x, y, torch.Generator().manual_seed(0))
    strategy.after_task(None, 0, x, y)
    return strategy


@pytest.mark.parametrize("kind", ["mlp", "conv4"])
def test_before_step_projects_against_the_memory_gradient(kind):
    task = tiny_tasks(num_tasks=1)[0]
    model = tiny_learner(kind, n_out=2)
    strategy = agem_with_memory(task.x, task.y)  # the whole task fits in the memory batch
    params = list(model.parameters())
    g_ref = torch.cat(
        [g.reshape(-1) for g in torch.autograd.grad(F.cross_entropy(model(task.x), task.y), params)]
    )

    model.zero_grad()
    F.cross_entropy(model(task.x), 1 - task.y).backward()  # the opposite labels: a conflicting gradient
    g = flat_grad(model)
    assert float(torch.dot(g, g_ref)) < 0
    strategy.before_step(model, 1)
    new = flat_grad(model)
    assert float(torch.dot(new, g_ref)) >= -1e-6 * float(g_ref.norm() * g.norm())
    torch.testing.assert_close(new, project(g, g_ref), rtol=1e-4, atol=1e-6)

    model.zero_grad()
    F.cross_entropy(model(task.x[:8]), task.y[:8]).backward()  # agrees with the memory
    g = flat_grad(model)
    assert float(torch.dot(g, g_ref)) > 0
    strategy.before_step(model, 1)
    assert torch.equal(flat_grad(model), g)
    strategy.before_step(model, 0)  # no memory on task 0: nothing changes
    assert torch.equal(flat_grad(model), g)


class Watched(AGEM):
    def __init__(self):
        super().__init__(per_class=3, memory_batch=4)
        self.at_start = []

    def before_task(self, model, t, x, y):
        super().before_task(model, t, x, y)
        self.at_start.append(
            None if len(self.memory) == 0 else (self.memory.x.clone(), self.memory.y.clone())
        )


def test_memory_holds_per_class_examples_of_past_tasks():
    tasks = tiny_tasks(num_tasks=3, scenario="domain")
    strategy = Watched()
    fit_stream(tiny_learner("mlp", n_out=2), tasks, strategy, FAST, seed=0)
    assert strategy.at_start[0] is None
    for t in (1, 2):
        x, y = strategy.at_start[t]
        assert len(y) == 6 * t
        for s in range(t):  # task s's block: 3 examples of each of its labels, all from task s
            xs, ys = x[6 * s : 6 * (s + 1)], y[6 * s : 6 * (s + 1)]
            assert sorted(ys.tolist()) == [0, 0, 0, 1, 1, 1]
            eq = (xs.flatten(1)[:, None] == tasks[s].x.flatten(1)[None]).all(-1)
            assert torch.all(eq.sum(1) == 1) and len(set(eq.float().argmax(1).tolist())) == 6
            assert torch.equal(tasks[s].y[eq.float().argmax(1)], ys)


def test_registered_hparams_and_errors():
    assert STRATEGIES["agem"] is AGEM
    assert AGEM().hparams() == {"per_class": 20, "memory_batch": 256}
    with pytest.raises(ValueError, match="per_class: expected an int >= 1, got 0"):
        AGEM(per_class=0)
    with pytest.raises(ValueError, match="memory_batch: expected an int >= 1, got 1.5"):
        AGEM(memory_batch=1.5)


@pytest.mark.parametrize("kind", ["mlp", "conv4"])
def test_runs_with_both_learners_deterministically(kind):
    check_runs_and_deterministic(lambda: AGEM(per_class=2, memory_batch=8), kind)
