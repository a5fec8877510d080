"""Synaptic intelligence (Zenke, Poole & Ganguli 2017, "Continual learning through synaptic
intelligence", Eqs. 4–5): each parameter's importance is its share of the drop of the training loss
along the optimisation path."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from fastweights.checks import check_real

from .base import Strategy, anchor, check_hparam
from .quadratic import accumulate, quadratic_penalty

__all__ = ["SI"]


class SI(Strategy):
    """SI. While task ``t`` trains, every optimizer step adds ``ω_i += −g_i Δθ_i`` (``Δθ`` the step
    taken, ``g`` the gradient of the task's loss before the step: ``p.grad`` minus the penalty's own
    gradient ``2cΩ(θ − θ*)``, subtracted in closed form, so that ``ω`` measures the task loss's drop
    and not the pull of the penalty). At the end of the task ``Ω_i += ω_i / (Δ_i² + ξ)`` with ``Δ``
    the total change of the weights over the task (Eq. 5), ``ω`` is reset and ``θ*`` becomes the
    current weights; the penalty is ``c Σ_i Ω_i (θ_i − θ*_i)²`` (Eq. 4; ``c`` is ``lam``).

    Args:
        lam: ``c >= 0``.
        xi: damping ``ξ > 0`` (Zenke et al.: ``0.1`` on split MNIST).

    Raises:
        ValueError: naming ``lam`` or ``xi`` for a bad value.
    """

    name = "si"
    HPARAMS = ("lam", "xi")

    def __init__(self, lam: float = 1.0, xi: float = 0.1) -> None:
        self.lam = check_hparam("lam", lam)
        check_real("xi", xi, 0.0, low_open=True)
        self.xi = float(xi)
        self.importance: dict[str, Tensor] | None = None  # Ω
        self.star: dict[str, Tensor] | None = None  # θ*
        self.omega: dict[str, Tensor] = {}  # ω of the task being trained
        self._start: dict[str, Tensor] = {}  # the weights when the task began
        self._before: dict[str, Tensor] = {}  # the weights before the current step
        self._grad: dict[str, Tensor] = {}  # the task loss's gradient of the current step

    def before_task(self, model: nn.Module, t: int, x: Tensor, y: Tensor) -> None:
        self._start = anchor(model)
        self.omega = {n: torch.zeros_like(p) for n, p in self._start.items()}

    def penalty(self, model: nn.Module, t: int, x: Tensor, y: Tensor, logits: Tensor) -> Tensor | float:
        if self.importance is None or self.star is None or self.lam == 0:
            return 0.0
        return self.lam * quadratic_penalty(model, self.importance, self.star)

    @torch.no_grad()
    def before_step(self, model: nn.Module, t: int) -> None:
        self._before, self._grad = {}, {}
        for n, p in model.named_parameters():
            if n not in self.omega or p.grad is None:
                continue
            g = p.grad.clone()
            if self.importance is not None and self.star is not None and self.lam != 0:
                g -= 2 * self.lam * self.importance[n] * (p - self.star[n])
            self._before[n], self._grad[n] = p.detach().clone(), g

    @torch.no_grad()
    def after_step(self, model: nn.Module, t: int) -> None:
        for n, p in model.named_parameters():
            if n in self._grad:
                self.omega[n] -= self._grad[n] * (p - self._before[n])
        self._before, self._grad = {}, {}

    @torch.no_grad()
    def after_task(self, model: nn.Module, t: int, x: Tensor, y: Tensor) -> None:
        now = anchor(model)
        new = {n: self.omega[n] / ((now[n] - self._start[n]) ** 2 + self.xi) for n in self.omega}
        self.importance = accumulate(self.importance, new)
        self.star = now
        self.omega = {n: torch.zeros_like(v) for n, v in self.omega.items()}
