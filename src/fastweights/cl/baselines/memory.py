"""Episodic memories of the rehearsal baselines (experience replay, A-GEM): a store of past training
examples and the two ways of filling it — reservoir sampling (Vitter 1985, "Random sampling with a
reservoir", Algorithm R; used for replay by Chaudhry et al. 2019, "On tiny episodic memories in continual
learning") and a random choice of a fixed number of examples per class."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from fastweights.checks import check_int

from .base import Strategy

__all__ = ["Memory", "per_class_choice", "Rehearsal"]


class Memory:
    """Stored examples ``x [M, ...]`` float / ``y [M]`` int64 (empty until something is added) and the
    number ``seen`` of examples offered to :meth:`reservoir` so far."""

    def __init__(self) -> None:
        self.x: Tensor | None = None
        self.y: Tensor | None = None
        self.seen = 0

    def __len__(self) -> int:
        return 0 if self.y is None else len(self.y)

    def add(self, x: Tensor, y: Tensor) -> None:
        """Append ``x [n, ...]`` / ``y [n]`` (copies)."""
        x, y = x.detach().clone(), y.detach().clone()
        self.x = x if self.x is None else torch.cat([self.x, x])
        self.y = y if self.y is None else torch.cat([self.y, y])

    def reservoir(self, x: Tensor, y: Tensor, capacity: int, generator: torch.Generator) -> None:
        """Offer the examples ``x [n, ...]`` / ``y [n]`` to the memory in a random order (Algorithm R):
        the ``i``-th example offered overall (``i = seen + 1, ...``) is appended while the memory holds
        fewer than ``capacity``, else it replaces slot ``j`` when ``j = ⌊u·i⌋ < capacity`` (``u`` uniform
        in ``[0, 1)``). For a fixed ``capacity`` the memory is a uniform sample of every example seen.

        Raises:
            ValueError: if ``capacity`` is smaller than the memory.
        """
        if capacity < len(self):
            raise ValueError(f"capacity: expected >= the {len(self)} stored examples, given {capacity}")
        order = torch.randperm(len(y), generator=generator)
        free = min(capacity - len(self), len(order))
        self.add(x[order[:free]], y[order[:free]])
        rest = order[free:]
        counts = self.seen + free + 1 + torch.arange(len(rest), dtype=torch.float64)
        slots = (torch.rand(len(rest), generator=generator, dtype=torch.float64) * counts).long()
        if self.x is not None and self.y is not None:
            for i in torch.nonzero(slots < capacity).flatten().tolist():  # in order: a later example wins
                self.x[slots[i]] = x[rest[i]]
                self.y[slots[i]] = y[rest[i]]
        self.seen += len(order)

    def sample(self, k: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        """``min(k, len(self))`` distinct stored examples drawn uniformly at random (``x``, ``y``).

        Raises:
            ValueError: if the memory is empty.
        """
        if self.x is None or self.y is None:
            raise ValueError("memory: expected stored examples to sample, given an empty memory")
        idx = torch.randperm(len(self.y), generator=generator)[:k]
        return self.x[idx], self.y[idx]


def per_class_choice(y: Tensor, per_class: int, generator: torch.Generator) -> Tensor:
    """Indices int64 of ``min(per_class, count)`` examples of each label of ``y [N]`` chosen uniformly at
    random without replacement (labels in increasing order)."""
    picks = []
    for c in torch.unique(y).tolist():
        idx = torch.nonzero(y == c).flatten()
        picks.append(idx[torch.randperm(len(idx), generator=generator)[:per_class]])
    return torch.cat(picks)


class Rehearsal(Strategy):
    """Base of the strategies with an episodic :class:`Memory` of ``per_class`` examples per class.

    Their random choices use the trainer's generator: :meth:`batch` keeps the one it is given, which
    :meth:`after_task` (filling the memory) and :meth:`before_step` then draw from. The memory is
    emptied before task 0, so one instance can train several streams.

    Raises:
        ValueError: naming ``per_class`` unless it is an int >= 1.
    """

    def __init__(self, per_class: int = 20) -> None:
        check_int("per_class", per_class)
        self.per_class = per_class
        self.memory = Memory()
        self.generator: torch.Generator | None = None

    def before_task(self, model: nn.Module, t: int, x: Tensor, y: Tensor) -> None:
        if t == 0:
            self.memory = Memory()

    def batch(self, t: int, x: Tensor, y: Tensor, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        self.generator = generator
        return x, y

    def _generator(self) -> torch.Generator:
        if self.generator is None:
            raise RuntimeError("generator: expected batch() to have been called during the task, it was not")
        return self.generator
