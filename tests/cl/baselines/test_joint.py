from __future__ import annotations

import pytest
import torch

from fastweights.cl.baselines import STRATEGIES
from fastweights.cl.baselines.joint import Joint
from fastweights.cl.baselines.learners import build_learner
from fastweights.cl.baselines.trainer import TrainSettings, fit_stream, task_inputs
from fastweights.cl.metrics import average_accuracy
from fastweights.data.registry import load_split_dataset
from fastweights.data.streams import split_benchmark
from tests.cl.baselines._tiny import FAST, check_runs_and_deterministic, tiny_learner, tiny_tasks


class Watched(Joint):
    def __init__(self):
        super().__init__()
        self.trained_on = []

    def before_task(self, model, t, x, y):
        self.trained_on.append((x, y))


def test_training_set_of_task_t_is_the_union_of_tasks_0_to_t():
    tasks = tiny_tasks(num_tasks=3)
    strategy = Watched()
    fit_stream(tiny_learner("mlp"), tasks, strategy, FAST, seed=0)
    for t, (x, y) in enumerate(strategy.trained_on):
        assert torch.equal(x, torch.cat([k.x for k in tasks[: t + 1]]))
        assert torch.equal(y, torch.cat([k.y for k in tasks[: t + 1]]))
    fit_stream(tiny_learner("mlp"), tasks[:1], strategy, FAST, seed=0)  # a new stream starts afresh
    assert torch.equal(strategy.trained_on[-1][0], tasks[0].x)


def test_tasks_out_of_order_and_registry():
    strategy = Joint()
    x, y = torch.zeros(2, 1, 4, 4), torch.zeros(2, dtype=torch.long)
    strategy.train_data(0, x, y)
    with pytest.raises(ValueError, match=r"t: expected task 1 \(tasks in order from 0\), given 3"):
        strategy.train_data(3, x, y)
    assert STRATEGIES["joint"] is Joint and Joint().hparams() == {}


@pytest.mark.parametrize("kind", ["mlp", "conv4"])
def test_runs_with_both_learners_deterministically(kind):
    check_runs_and_deterministic(Joint, kind)


@pytest.mark.slow
@pytest.mark.parametrize("scenario", ["domain", "class"])
def test_joint_is_the_upper_bound_on_split_digits(scenario):
    """Full budget (every training image), MLP 2 × 400, Adam, 2 epochs per task, one seed: joint
    training is at least as good as every other method."""
    torch.set_num_threads(1)
    ds = load_split_dataset("digits")
    tasks = task_inputs(
        split_benchmark(ds, k_shot=None, run=0, scenario=scenario), mean=ds.mean, std=ds.std, channels=1
    )
    settings = TrainSettings(optimizer="adam", lr=1e-3, epochs=2, batch_size=32)
    acc = {}
    for name, make in STRATEGIES.items():  # every method, with its default hyper-parameters
        torch.manual_seed(0)
        model = build_learner("mlp", channels=1, image_size=32, n_out=2 if scenario == "domain" else 10)
        acc[name] = average_accuracy(fit_stream(model, tasks, make(), settings, seed=0))
    assert all(acc["joint"] >= v for v in acc.values()), acc
    assert acc["joint"] > 0.9, acc
    if scenario == "class":  # rehearsal beats fine-tuning where the shared head forgets whole tasks
        assert min(acc["replay"], acc["agem"]) > acc["finetune"] + 0.2, acc
