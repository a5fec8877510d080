"""Elastic weight consolidation (Kirkpatrick et al. 2017, "Overcoming catastrophic forgetting in neural
networks", Eq. 3) and its online variant (Schwarz et al. 2018, "Progress & compress", online EWC).

The Fisher information is the *exact expected* diagonal Fisher of the model's predictive distribution,
``F_i = (1/N) Σ_x Σ_c p_θ(c|x) (∂ log p_θ(c|x) / ∂θ_i)²`` — every class weighted by its predicted
probability, not one label sampled, and not the true labels (the "empirical Fisher", a poor
approximation away from a perfect fit: Kunstner et al. 2019, "Limitations of the empirical Fisher
approximation"; van de Ven 2025, "On the computation of the Fisher information in continual
learning", compares the variants). It is computed from per-sample gradients
(:mod:`~fastweights.cl.baselines.per_sample`) with the model in eval mode, on at most
``fisher_samples`` examples of the task spread evenly over its training set.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from fastweights.checks import check_int
from fastweights.train.modes import eval_mode

from .base import Strategy, anchor, check_hparam
from .per_sample import mean_over_samples, strided_subset
from .quadratic import accumulate, quadratic_penalty

__all__ = ["EWC", "OnlineEWC", "fisher_diagonal"]


def _neg_log_prob(logits: Tensor, c: Tensor) -> Tensor:
    return F.cross_entropy(logits.unsqueeze(0), c.unsqueeze(0))  # −log p(c | x)


def fisher_diagonal(model: nn.Module, x: Tensor) -> dict[str, Tensor]:
    """The exact expected diagonal Fisher information ``{name: param.shape}`` of ``model`` on the inputs
    ``x [N, ...]`` (formula in the module docstring; one per-sample gradient pass per class, class
    probabilities held fixed). The model is put in eval mode and its mode restored.

    Raises ``ValueError`` naming ``x`` for an empty set.
    """
    if len(x) == 0:
        raise ValueError("x: expected at least one example for the Fisher information, given none")
    with eval_mode(model):
        with torch.no_grad():
            probs = torch.cat([F.softmax(model(x[i : i + 256]), -1) for i in range(0, len(x), 256)])
        fisher: dict[str, Tensor] = {}
        for c in range(probs.shape[1]):
            target = torch.full((len(x),), c, dtype=torch.long, device=x.device)
            part = mean_over_samples(model, x, target, _neg_log_prob, torch.square, weight=probs[:, c])
            fisher = accumulate(fisher or None, part)
    return fisher


class EWC(Strategy):
    """EWC: after task ``t`` its Fisher ``F_t`` and the weights ``θ*_t`` are kept; the penalty while
    training later tasks is ``(λ/2) Σ_{t' < t} Σ_i F_{t',i} (θ_i − θ*_{t',i})²`` (one quadratic term per
    past task: Kirkpatrick et al. 2017, Eq. 3 and the text after it on more than two tasks).

    Args:
        lam: ``λ >= 0``.
        fisher_samples: examples per task the Fisher is computed on (an int >= 1).

    Raises:
        ValueError: naming ``lam`` or ``fisher_samples`` for a bad value.
    """

    name = "ewc"
    HPARAMS = ("lam", "fisher_samples")

    def __init__(self, lam: float = 100.0, fisher_samples: int = 1024) -> None:
        self.lam = check_hparam("lam", lam)
        check_int("fisher_samples", fisher_samples)
        self.fisher_samples = int(fisher_samples)
        self.terms: list[tuple[dict[str, Tensor], dict[str, Tensor]]] = []  # (Fisher, anchor) per task

    def task_fisher(self, model: nn.Module, x: Tensor, y: Tensor) -> dict[str, Tensor]:
        """The Fisher of the task just trained (:func:`fisher_diagonal` on ``fisher_samples`` of ``x``)."""
        return fisher_diagonal(model, strided_subset(x, y, self.fisher_samples)[0])

    def penalty(self, model: nn.Module, t: int, x: Tensor, y: Tensor, logits: Tensor) -> Tensor | float:
        if not self.terms or self.lam == 0:
            return 0.0
        total = sum(quadratic_penalty(model, fisher, star) for fisher, star in self.terms)
        return 0.5 * self.lam * total

    def after_task(self, model: nn.Module, t: int, x: Tensor, y: Tensor) -> None:
        self.terms.append((self.task_fisher(model, x, y), anchor(model)))


class OnlineEWC(EWC):
    """Online EWC: one running Fisher ``F ← γ F + F_t`` after each task ``t`` and one anchor, the
    latest weights ``θ*``; penalty ``(λ/2) Σ_i F_i (θ_i − θ*_i)²`` (Schwarz et al. 2018, online EWC; a
    further ``γ`` in front of ``F`` in the penalty, as some write it, only rescales ``λ``).
    With ``γ = 1`` the Fishers add up but, unlike :class:`EWC`, all pull towards the latest weights.

    Args:
        lam: ``λ >= 0``.
        gamma: ``γ ∈ [0, 1]``, the decay of the older tasks' Fisher.
        fisher_samples: examples per task the Fisher is computed on (an int >= 1).

    Raises:
        ValueError: naming ``lam``, ``gamma`` or ``fisher_samples`` for a bad value.
    """

    name = "online_ewc"
    HPARAMS = ("lam", "gamma", "fisher_samples")

    def __init__(self, lam: float = 100.0, gamma: float = 1.0, fisher_samples: int = 1024) -> None:
        super().__init__(lam=lam, fisher_samples=fisher_samples)
        self.gamma = check_hparam("gamma", gamma, high=1.0)

    @property
    def fisher(self) -> dict[str, Tensor] | None:
        """The running Fisher (``None`` before the first task ends)."""
        return self.terms[0][0] if self.terms else None

    def after_task(self, model: nn.Module, t: int, x: Tensor, y: Tensor) -> None:
        self.terms = [(accumulate(self.fisher, self.task_fisher(model, x, y), self.gamma), anchor(model))]
