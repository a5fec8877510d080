"""L2: an isotropic quadratic pull towards the weights reached after the previous task (the "L2" row of
Hsu et al. 2018, Table 2; Kirkpatrick et al. 2017, Fig. 2 — EWC with the identity in place of the
Fisher information)."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from .base import Strategy, anchor, check_hparam
from .quadratic import quadratic_penalty

__all__ = ["L2"]


class L2(Strategy):
    """Penalty ``(λ/2) Σ_i (θ_i − θ*_i)²`` with ``θ*`` the parameters after the previous task (none on
    the first task).

    Args:
        lam: ``λ >= 0``.

    Raises:
        ValueError: naming ``lam`` for a negative or non-finite value.
    """

    name = "l2"
    HPARAMS = ("lam",)

    def __init__(self, lam: float = 1.0) -> None:
        self.lam = check_hparam("lam", lam)
        self.star: dict[str, Tensor] | None = None
        self.ones: dict[str, Tensor] = {}  # the identity importance

    def penalty(self, model: nn.Module, t: int, x: Tensor, y: Tensor, logits: Tensor) -> Tensor | float:
        if self.star is None or self.lam == 0:
            return 0.0
        return 0.5 * self.lam * quadratic_penalty(model, self.ones, self.star)

    def after_task(self, model: nn.Module, t: int, x: Tensor, y: Tensor) -> None:
        self.star = anchor(model)
        self.ones = {n: torch.ones_like(p) for n, p in self.star.items()}
