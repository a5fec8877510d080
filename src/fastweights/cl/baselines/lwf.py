"""Learning without Forgetting (Li & Hoiem 2017, "Learning without forgetting", §3, Eq. 2), the
single-head variant of Hsu et al. 2018 ("Re-evaluating continual learning scenarios", Table 2) and van de
Ven & Tolias 2019 ("Three scenarios for continual learning"): the model after the previous task is a
frozen teacher whose softened outputs on the current inputs the learner must keep reproducing."""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from fastweights.checks import check_real

from .base import Strategy, check_hparam

__all__ = ["LwF"]


class LwF(Strategy):
    """Penalty ``λ · T² · KL(softmax(teacher(x)/T) ‖ softmax(model(x)/T))`` (mean over the mini-batch
    ``x``), where ``teacher`` is a frozen deep copy of the model taken at the end of the previous task
    (eval mode, no gradients; none on task 0) and the KL divergence runs over every output of the
    shared head. The ``T²`` factor keeps the gradient scale independent of ``T`` (Hinton et al. 2015,
    §2).

    Args:
        lam: ``λ >= 0``, the weight of the distillation term.
        temperature: ``T > 0`` (2 in Li & Hoiem 2017).

    Raises:
        ValueError: naming ``lam`` or ``temperature`` for a negative / non-positive or non-finite value.
    """

    name = "lwf"
    HPARAMS = ("lam", "temperature")

    def __init__(self, lam: float = 1.0, temperature: float = 2.0) -> None:
        self.lam = check_hparam("lam", lam)
        check_real("temperature", temperature, 0.0, low_open=True)
        self.temperature = float(temperature)
        self.teacher: nn.Module | None = None

    def before_task(self, model: nn.Module, t: int, x: Tensor, y: Tensor) -> None:
        if t == 0:
            self.teacher = None

    def penalty(self, model: nn.Module, t: int, x: Tensor, y: Tensor, logits: Tensor) -> Tensor | float:
        if self.teacher is None or self.lam == 0:
            return 0.0
        T = self.temperature
        with torch.no_grad():
            target = F.log_softmax(self.teacher(x) / T, dim=-1)
        kl = F.kl_div(F.log_softmax(logits / T, dim=-1), target, log_target=True, reduction="batchmean")
        return self.lam * T * T * kl

    def after_task(self, model: nn.Module, t: int, x: Tensor, y: Tensor) -> None:
        teacher = copy.deepcopy(model).eval()
        teacher.requires_grad_(False)
        self.teacher = teacher
