"""Memory aware synapses (Aljundi et al. 2018, "Memory aware synapses: learning what (not) to forget",
Eqs. 2–4): a parameter's importance is how strongly the learned function's output moves with it, with
no labels needed."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from fastweights.checks import check_int
from fastweights.train.modes import eval_mode

from .base import Strategy, anchor, check_hparam
from .per_sample import mean_over_samples, strided_subset
from .quadratic import accumulate, quadratic_penalty

__all__ = ["MAS", "output_sensitivity"]


def _squared_norm(logits: Tensor, _: Tensor) -> Tensor:
    return (logits**2).sum()


def output_sensitivity(model: nn.Module, x: Tensor) -> dict[str, Tensor]:
    """``Ω_i = (1/N) Σ_k |∂ ||f(x_k)||₂² / ∂θ_i|`` over the inputs ``x [N, ...]`` (Eqs. 2 and 4; ``f``
    the logits, per-sample gradients, model in eval mode, its mode restored). Returns
    ``{name: param.shape}``. Raises ``ValueError`` naming ``x`` for an empty set."""
    if len(x) == 0:
        raise ValueError("x: expected at least one example for the MAS importance, given none")
    with eval_mode(model):
        dummy = torch.zeros(len(x), dtype=torch.long, device=x.device)  # ||f(x)||² needs no label
        return mean_over_samples(model, x, dummy, _squared_norm, torch.abs)


class MAS(Strategy):
    """MAS: after each task its importance (:func:`output_sensitivity` on at most
    ``importance_samples`` of its examples, spread evenly) is *added* to the importance so far (our
    choice of accumulation: a sum, so every task keeps its full weight; a running mean would shrink
    the older tasks' share as tasks arrive), and ``θ*`` becomes the current weights; the penalty is
    ``λ Σ_i Ω_i (θ_i − θ*_i)²`` (Eq. 3).

    Args:
        lam: ``λ >= 0``.
        importance_samples: examples per task the importance is computed on (an int >= 1).

    Raises:
        ValueError: naming ``lam`` or ``importance_samples`` for a bad value.
    """

    name = "mas"
    HPARAMS = ("lam", "importance_samples")

    def __init__(self, lam: float = 1.0, importance_samples: int = 1024) -> None:
        self.lam = check_hparam("lam", lam)
        check_int("importance_samples", importance_samples)
        self.importance_samples = int(importance_samples)
        self.importance: dict[str, Tensor] | None = None
        self.star: dict[str, Tensor] | None = None

    def penalty(self, model: nn.Module, t: int, x: Tensor, y: Tensor, logits: Tensor) -> Tensor | float:
        if self.importance is None or self.star is None or self.lam == 0:
            return 0.0
        return self.lam * quadratic_penalty(model, self.importance, self.star)

    def after_task(self, model: nn.Module, t: int, x: Tensor, y: Tensor) -> None:
        new = output_sensitivity(model, strided_subset(x, y, self.importance_samples)[0])
        self.importance = accumulate(self.importance, new)
        self.star = anchor(model)
