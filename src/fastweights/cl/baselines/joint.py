"""Joint (offline) training, the usual upper bound of continual learning (Hsu et al. 2018,
"Re-evaluating continual learning scenarios", Table 2, "Offline"; van de Ven & Tolias 2019, "Joint"):
the learner is trained on the union of every task seen so far."""

from __future__ import annotations

import torch
from torch import Tensor

from .base import Strategy

__all__ = ["Joint"]


class Joint(Strategy):
    """The training set of task ``t`` is the concatenation of the training data of tasks ``0..t`` (in
    task order; the trainer shuffles it), so row ``t`` of the accuracy matrix is a model trained on the
    union of the first ``t + 1`` tasks. Training *continues from the previous task's weights* (no
    re-initialisation; a fresh optimizer per task as for every strategy), so by task ``t`` the early
    tasks have been trained on for ``t + 1`` times the epochs. The stored data is reset at task 0.
    """

    name = "joint"

    def __init__(self) -> None:
        self.xs: list[Tensor] = []
        self.ys: list[Tensor] = []

    def train_data(self, t: int, x: Tensor, y: Tensor) -> tuple[Tensor, Tensor]:
        if t == 0:
            self.xs, self.ys = [], []
        if t != len(self.xs):
            raise ValueError(f"t: expected task {len(self.xs)} (tasks in order from 0), given {t}")
        self.xs.append(x)
        self.ys.append(y)
        return torch.cat(self.xs), torch.cat(self.ys)
