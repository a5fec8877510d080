"""The one interface of the continual-learning baselines: a :class:`Strategy` is a set of hooks that
:func:`fastweights.cl.baselines.trainer.fit_stream` calls while it trains a learner by gradient descent
on one task after another (no task identity at test time: one shared head).

Order of the calls for task ``t`` (``x``: float model inputs ``[N, C, S, S]``, ``y``: int64 ``[N]``)::

    x_t, y_t = strategy.train_data(t, x, y)          # what the learner trains on (joint: all tasks so far)
    strategy.before_task(model, t, x_t, y_t)
    for each epoch, for each mini-batch (xb, yb) of (x_t, y_t):
        xb, yb = strategy.batch(t, xb, yb, generator)     # replay: append memory samples
        logits = model(xb)
        loss = cross_entropy(logits, yb) + strategy.penalty(model, t, xb, yb, logits)
        loss.backward()
        strategy.before_step(model, t)                # A-GEM: project the gradient
        optimizer.step()
        strategy.after_step(model, t)                 # SI: path integral
    strategy.after_task(model, t, x_t, y_t)           # EWC/MAS/SI importances, LwF teacher, memories

The base class is plain fine-tuning (every hook a no-op): the "SGD" and "Adam" baselines of Hsu et al.
2018 ("Re-evaluating continual learning scenarios", Table 2) differ only in the optimizer.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from fastweights.checks import check_real

__all__ = ["Strategy", "Finetune", "anchor", "check_hparam"]


def check_hparam(name: str, value: Any, *, low: float = 0.0, high: float | None = None) -> float:
    """``value`` as a float in ``[low, high]`` (``high=None``: unbounded), else a one-line ``ValueError``
    naming ``name`` (:func:`fastweights.checks.check_real`)."""
    check_real(name, value, low, high)
    return float(value)


def anchor(model: nn.Module) -> dict[str, Tensor]:
    """Detached *copies* of the trainable parameters (``clone()``: on CPU, ``detach()`` alone would be a
    view of the live parameter — the bug that makes Avalanche's SI a no-op there)."""
    return {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}


class Strategy:
    """Base strategy = fine-tuning: train on each task's data in turn, nothing else.

    Subclasses declare their hyper-parameters as keyword arguments of ``__init__`` (checked there, each
    error naming the argument) and list them in :attr:`HPARAMS`; ``name`` is the registry name.
    """

    name: ClassVar[str] = "finetune"
    HPARAMS: ClassVar[tuple[str, ...]] = ()

    def hparams(self) -> dict[str, float | int]:
        """The strategy's hyper-parameters by name (recorded in results)."""
        return {k: getattr(self, k) for k in self.HPARAMS}

    def train_data(self, t: int, x: Tensor, y: Tensor) -> tuple[Tensor, Tensor]:
        """The training set of task ``t`` given its data ``x [N, ...]`` / ``y [N]`` (default: unchanged)."""
        return x, y

    def before_task(self, model: nn.Module, t: int, x: Tensor, y: Tensor) -> None:
        """Called once before training on task ``t``."""

    def batch(self, t: int, x: Tensor, y: Tensor, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        """The mini-batch actually trained on (default: ``x``, ``y`` unchanged)."""
        return x, y

    def penalty(self, model: nn.Module, t: int, x: Tensor, y: Tensor, logits: Tensor) -> Tensor | float:
        """Added to the mini-batch's mean cross-entropy (a scalar; default ``0``)."""
        return 0.0

    def before_step(self, model: nn.Module, t: int) -> None:
        """After ``backward()``, before ``optimizer.step()`` (gradients in ``p.grad``)."""

    def after_step(self, model: nn.Module, t: int) -> None:
        """After ``optimizer.step()``."""

    def after_task(self, model: nn.Module, t: int, x: Tensor, y: Tensor) -> None:
        """Called once after training on task ``t`` with the data it was trained on."""


class Finetune(Strategy):
    """Fine-tuning: no protection against forgetting (the lower bound). With SGD and with Adam it is
    the "SGD" / "Adam" rows of Hsu et al. 2018, Table 2."""

    name = "finetune"
