"""Experience replay ("naive rehearsal" of Hsu et al. 2018, "Re-evaluating continual learning
scenarios", Table 2): a reservoir-sampled memory of past examples (Vitter 1985, Algorithm R; Chaudhry et
al. 2019, "On tiny episodic memories in continual learning") mixed into every mini-batch of the later
tasks."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from .memory import Rehearsal

__all__ = ["Replay"]


class Replay(Rehearsal):
    """Experience replay with a reservoir memory.

    - Capacity: ``per_class × (classes seen so far)``, where the classes seen are the distinct labels of
      each task's training set summed over the tasks trained on (tasks of a split benchmark have
      disjoint classes, so in the domain-incremental scenario, where every task reuses labels 0, 1, a
      task still adds its own two classes).
    - Filling: at the end of task ``t`` the capacity grows to that of tasks ``0..t`` and the task's
      training examples are offered in a random order to Algorithm R
      (:meth:`~fastweights.cl.baselines.memory.Memory.reservoir`), counting every example offered since
      task 0. A grown memory first fills its new slots with the newest task's examples, so older tasks
      hold fewer than ``per_class`` per class once the memory is full (a uniform sample of everything
      seen only for a fixed capacity). While task ``t`` is trained the memory holds examples of tasks
      ``< t`` only: ``min(capacity, examples seen)`` of them.
    - Replay: every mini-batch of a task ``t > 0`` is concatenated with ``min(len(batch), len(memory))``
      distinct memory examples drawn with the trainer's generator; the loss is the mean cross-entropy
      over both.

    Args:
        per_class: memory slots per class seen (int >= 1).

    Raises:
        ValueError: naming ``per_class`` unless it is an int >= 1.
    """

    name = "replay"
    HPARAMS = ("per_class",)

    def __init__(self, per_class: int = 20) -> None:
        super().__init__(per_class)
        self.classes_seen = 0

    def before_task(self, model: nn.Module, t: int, x: Tensor, y: Tensor) -> None:
        super().before_task(model, t, x, y)
        if t == 0:
            self.classes_seen = 0

    def batch(self, t: int, x: Tensor, y: Tensor, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        super().batch(t, x, y, generator)
        if t == 0 or len(self.memory) == 0:
            return x, y
        xm, ym = self.memory.sample(len(y), generator)
        return torch.cat([x, xm]), torch.cat([y, ym])

    def after_task(self, model: nn.Module, t: int, x: Tensor, y: Tensor) -> None:
        self.classes_seen += len(torch.unique(y))
        self.memory.reservoir(x, y, self.per_class * self.classes_seen, self._generator())
