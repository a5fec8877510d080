from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from fastweights.cl.baselines.base import Strategy
from fastweights.cl.baselines.trainer import TaskInputs, TrainSettings, accuracy, fit_stream, task_inputs
from fastweights.data.streams import Task
from tests.cl.baselines._tiny import check_runs_and_deterministic, tiny_learner, tiny_tasks


class Recorder(Strategy):
    """Logs every hook call and measures each task's query accuracy by hand after each task."""

    def __init__(self, tasks: list[TaskInputs]) -> None:
        self.calls: list[tuple[str, int]] = []
        self.tasks = tasks
        self.rows: list[list[float]] = []

    def train_data(self, t, x, y):
        self.calls.append(("train_data", t))
        return x, y

    def before_task(self, model, t, x, y):
        self.calls.append(("before_task", t))

    def batch(self, t, x, y, generator):
        self.calls.append(("batch", t))
        return x, y

    def penalty(self, model, t, x, y, logits):
        self.calls.append(("penalty", t))
        return 0.0

    def before_step(self, model, t):
        assert all(p.grad is not None for p in model.parameters())
        self.calls.append(("before_step", t))

    def after_step(self, model, t):
        self.calls.append(("after_step", t))

    def after_task(self, model, t, x, y):
        self.calls.append(("after_task", t))
        model.eval()
        with torch.no_grad():
            self.rows.append(
                [float((model(q.query_x).argmax(-1) == q.query_y).double().mean()) for q in self.tasks]
            )
        model.train()


def test_hook_order_and_every_entry_of_R_measured():
    tasks = tiny_tasks(n=20)
    rec = Recorder(tasks)
    R = fit_stream(tiny_learner("mlp"), tasks, rec, TrainSettings(epochs=2, batch_size=8), seed=0)
    step = [("batch", 0), ("penalty", 0), ("before_step", 0), ("after_step", 0)]

    def per_task(t):
        return [("train_data", t), ("before_task", t)] + [(n, t) for n, _ in step] * 6 + [("after_task", t)]

    assert rec.calls == per_task(0) + per_task(1) + per_task(2)  # 2 epochs × ceil(20 / 8) batches
    assert R.dtype == np.float64 and R.shape == (3, 3)
    np.testing.assert_allclose(R, np.array(rec.rows))
    assert R[0, 0] == 1.0 and R[1, 1] == 1.0  # learnable tasks
    assert R[0, 1] == 0.0 and R[0, 2] == 0.0  # class-incremental: task 1's classes not learnt yet


def test_fit_stream_deterministic_for_a_seed():
    check_runs_and_deterministic(Strategy, "mlp")


def test_fresh_optimizer_per_task(monkeypatch):
    made = []
    original = TrainSettings.make_optimizer

    def spy(self, params):
        made.append(original(self, params))
        return made[-1]

    monkeypatch.setattr(TrainSettings, "make_optimizer", spy)
    fit_stream(
        tiny_learner("mlp"), tiny_tasks(n=20), Strategy(), TrainSettings(epochs=3, batch_size=10), seed=0
    )
    assert len(made) == 3 and len({id(o) for o in made}) == 3
    for opt in made:  # Adam's step count restarts with every task: 3 epochs × 2 batches
        assert all(int(s["step"]) == 6 for s in opt.state.values())


def test_sgd_step_is_plain_gradient_descent():
    tasks = tiny_tasks(num_tasks=1, n=8)
    model = tiny_learner("mlp")
    before = [p.detach().clone() for p in model.parameters()]
    loss = F.cross_entropy(model(tasks[0].x), tasks[0].y)
    grads = torch.autograd.grad(loss, list(model.parameters()))
    fit_stream(
        model, tasks, Strategy(), TrainSettings(optimizer="sgd", lr=0.1, epochs=1, batch_size=8), seed=0
    )
    for p, b, g in zip(model.parameters(), before, grads, strict=True):
        torch.testing.assert_close(p.detach(), b - 0.1 * g)


class Fixed(nn.Module):
    """Returns stored logits for inputs that are their row indices."""

    def __init__(self, logits: Tensor) -> None:
        super().__init__()
        self.logits = logits

    def forward(self, x: Tensor) -> Tensor:
        return self.logits[x.long()]


def test_accuracy_matches_a_hand_count_and_restores_mode():
    logits = torch.randn(11, 4, generator=torch.Generator().manual_seed(3))
    y = torch.tensor([0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2])
    hand = sum(int(logits[i].argmax()) == int(y[i]) for i in range(11)) / 11
    model = Fixed(logits).train()
    assert accuracy(model, torch.arange(11), y, batch=3) == pytest.approx(hand)
    assert model.training
    assert isinstance(accuracy(model.eval(), torch.arange(11), y), float)
    assert not model.training
    assert accuracy(model, torch.arange(11), logits.argmax(-1)) == 1.0
    assert accuracy(model, torch.zeros(0), torch.zeros(0, dtype=torch.long)) == 0.0


def test_task_inputs_normalise_and_keep_labels():
    rng = np.random.default_rng(0)
    task = Task(
        "0/1",
        rng.integers(0, 256, (4, 16, 16), dtype=np.uint8),
        np.array([0, 1, 0, 1]),
        rng.integers(0, 256, (3, 16, 16), dtype=np.uint8),
        np.array([1, 0, 1]),
    )
    (tt,) = task_inputs([task], mean=0.5, std=0.25, channels=1)
    assert tt.name == "0/1" and tt.x.shape == (4, 1, 16, 16) and tt.query_x.shape == (3, 1, 16, 16)
    assert tt.x.dtype == torch.float32 and tt.y.dtype == torch.int64
    torch.testing.assert_close(tt.x[:, 0], torch.from_numpy(task.support_images / 255.0 - 0.5).float() / 0.25)
    assert tt.query_y.tolist() == [1, 0, 1]


def test_fit_stream_errors():
    model, s = tiny_learner("mlp"), TrainSettings()
    with pytest.raises(ValueError, match="tasks: expected at least one task, given none"):
        fit_stream(model, [], Strategy(), s, seed=0)
    t = tiny_tasks(num_tasks=1)[0]
    empty = TaskInputs("e", t.x[:0], t.y[:0], t.query_x, t.query_y)
    with pytest.raises(ValueError, match=r"tasks\[0\] \(e\): expected training examples, given none"):
        fit_stream(model, [empty], Strategy(), s, seed=0)


@pytest.mark.parametrize(
    "kw, match",
    [
        ({"optimizer": "rmsprop"}, "optimizer: expected one of"),
        ({"lr": 0.0}, "lr: expected a finite number > 0"),
        ({"lr": float("nan")}, "lr: "),
        ({"epochs": 0}, "epochs: expected an int >= 1"),
        ({"batch_size": 2.0}, "batch_size: expected an int >= 1"),
    ],
)
def test_train_settings_errors(kw, match):
    with pytest.raises(ValueError, match=match):
        TrainSettings(**kw)
