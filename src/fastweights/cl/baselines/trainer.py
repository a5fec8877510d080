"""The plain PyTorch training loop of the continual-learning baselines and their accuracy matrix.

:func:`fit_stream` trains one learner on the tasks of a stream in order (the hooks of a
:class:`~fastweights.cl.baselines.base.Strategy` around a standard mini-batch loop), and after each
task measures the accuracy on every task's test queries: ``R[i, j]`` = accuracy on task ``j`` after
training on tasks ``0..i`` — the same matrix the in-context learners get from
:func:`fastweights.cl.split_protocol.evaluate_split_tasks`, so :func:`fastweights.cl.metrics.summarize_runs`
gives ACC / BWT / forgetting for both.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from fastweights.checks import check_choice, check_int, check_real
from fastweights.cl.tasks import to_model_images
from fastweights.data.sources.base import Stat
from fastweights.data.streams import Task
from fastweights.train.modes import eval_mode

from .base import Strategy

__all__ = ["OPTIMIZERS", "TrainSettings", "TaskInputs", "task_inputs", "accuracy", "fit_stream"]

OPTIMIZERS = ("sgd", "adam")


@dataclass(frozen=True)
class TrainSettings:
    """How each task is trained: ``epochs`` passes over its training set in shuffled mini-batches of
    ``batch_size`` (the last one smaller) — more passes when needed to make at least ``min_steps``
    optimizer steps (small training sets) — with a fresh ``optimizer`` (``"sgd"`` or ``"adam"``,
    learning rate ``lr``; SGD without momentum, Adam fused) for every task.

    Raises:
        ValueError: naming the field for a bad value.
    """

    optimizer: str = "adam"
    lr: float = 1e-3
    epochs: int = 1
    batch_size: int = 128
    min_steps: int = 0

    def __post_init__(self) -> None:
        check_choice("optimizer", self.optimizer, OPTIMIZERS)
        check_real("lr", self.lr, low=0.0, low_open=True)
        check_int("epochs", self.epochs)
        check_int("batch_size", self.batch_size)
        check_int("min_steps", self.min_steps, low=0)

    def passes(self, n: int) -> int:
        """Passes over a training set of ``n`` examples: ``epochs``, or enough for ``min_steps`` steps."""
        per_pass = -(-n // self.batch_size)
        return max(self.epochs, -(-self.min_steps // max(per_pass, 1)))

    def make_optimizer(self, params: Sequence[nn.Parameter]) -> torch.optim.Optimizer:
        """A new optimizer over ``params``."""
        if self.optimizer == "sgd":
            return torch.optim.SGD(params, lr=self.lr)
        # fused: one kernel per step (on this CPU 6.0 ms vs 10.0 ms a step of the 2 × 400 MLP, batch 128)
        return torch.optim.Adam(params, lr=self.lr, fused=True)


@dataclass(frozen=True)
class TaskInputs:
    """One task of a stream as model inputs: ``x`` float32 ``[N, C, S, S]`` / ``y`` int64 ``[N]`` to
    train on, and ``query_x`` / ``query_y`` to test on (no batch-of-sequences axis; cf. the in-context
    learners' :class:`fastweights.cl.tasks.TaskTensors`)."""

    name: str
    x: Tensor
    y: Tensor
    query_x: Tensor
    query_y: Tensor


def task_inputs(tasks: Sequence[Task], *, mean: Stat, std: Stat, channels: int) -> list[TaskInputs]:
    """uint8 :class:`~fastweights.data.streams.Task` objects → normalised float32 tensors (``(x/255 −
    mean) / std``, a channel axis for grayscale). Raises ``ValueError`` from
    :func:`fastweights.cl.tasks.to_model_images` for mismatched channels or statistics."""

    def conv(images: np.ndarray) -> Tensor:
        return to_model_images(images, mean, std, "cpu", channels=channels)

    out = []
    for t in tasks:
        out.append(
            TaskInputs(
                name=t.name,
                x=conv(t.support_images),
                y=torch.from_numpy(t.support_labels),
                query_x=conv(t.query_images),
                query_y=torch.from_numpy(t.query_labels),
            )
        )
    return out


@torch.no_grad()
def accuracy(model: nn.Module, x: Tensor, y: Tensor, batch: int = 4096) -> float:
    """Fraction of ``x [N, ...]`` whose argmax logit is ``y [N]`` (model in eval mode, batches of
    ``batch``; the model's training mode is restored)."""
    correct = 0
    with eval_mode(model):
        for i in range(0, len(x), batch):
            correct += int((model(x[i : i + batch]).argmax(-1) == y[i : i + batch]).sum())
    return correct / max(len(x), 1)


def _train_task(
    model: nn.Module,
    strategy: Strategy,
    t: int,
    x: Tensor,
    y: Tensor,
    settings: TrainSettings,
    generator: torch.Generator,
) -> None:
    optimizer = settings.make_optimizer([p for p in model.parameters() if p.requires_grad])
    model.train()
    for _ in range(settings.passes(len(x))):
        order = torch.randperm(len(x), generator=generator)
        for i in range(0, len(x), settings.batch_size):
            idx = order[i : i + settings.batch_size]
            xb, yb = strategy.batch(t, x[idx], y[idx], generator)
            logits = model(xb)
            loss = F.cross_entropy(logits, yb) + strategy.penalty(model, t, xb, yb, logits)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            strategy.before_step(model, t)
            optimizer.step()
            strategy.after_step(model, t)


def fit_stream(
    model: nn.Module,
    tasks: Sequence[TaskInputs],
    strategy: Strategy,
    settings: TrainSettings,
    *,
    seed: int,
    upper: bool = True,
) -> np.ndarray:
    """Train ``model`` on ``tasks`` in order with ``strategy``; return the accuracy matrix ``R``
    float64 ``[T, T]``: every entry measured, or with ``upper=False`` only ``j <= i`` (NaN above the
    diagonal — tasks not trained on yet, needed only for forward transfer; 40% fewer test passes at
    T = 5).

    Deterministic for a given ``seed`` (mini-batch order and any sampling of the strategy use one
    ``torch.Generator`` seeded with it; build ``model`` under ``torch.manual_seed`` for a deterministic
    initialisation). Labels must lie in ``[0, model outputs)``.

    Raises:
        ValueError: for an empty stream or a task whose training set is empty.
    """
    if len(tasks) == 0:
        raise ValueError("tasks: expected at least one task, given none")
    generator = torch.Generator().manual_seed(int(seed))
    T = len(tasks)
    R = np.full((T, T), np.nan, dtype=np.float64)
    for t, task in enumerate(tasks):
        x, y = strategy.train_data(t, task.x, task.y)
        if len(x) == 0:
            raise ValueError(f"tasks[{t}] ({task.name}): expected training examples, given none")
        strategy.before_task(model, t, x, y)
        _train_task(model, strategy, t, x, y, settings, generator)
        strategy.after_task(model, t, x, y)
        seen = tasks if upper else tasks[: t + 1]
        R[t, : len(seen)] = [accuracy(model, q.query_x, q.query_y) for q in seen]
    return R
