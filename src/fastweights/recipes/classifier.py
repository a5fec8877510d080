"""The in-context classifier family's training pieces (the acl, fewshot and sequential recipes): the
optimiser / schedule / loop section of their configs (:class:`OptimConfig`), Adam with that schedule
(:func:`make_optimizer`), the episode-sampling random streams (:func:`sampling_streams`), the
validation policy (:func:`validation_sampling`) and :func:`fit_classifier`, the training loop with that
optimiser."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from fastweights.checks import check_betas, check_choice, check_ints, check_real
from fastweights.recipes.contract import Selection
from fastweights.recipes.run import RecipeRun, fit_run
from fastweights.train.loop import LoopConfig, numpy_rng_state
from fastweights.train.schedules import SCHEDULES, lr_multiplier

__all__ = [
    "OptimConfig",
    "make_optimizer",
    "sampling_streams",
    "VALIDATION_SEED",
    "VALIDATION_MAX_BATCH",
    "validation_sampling",
    "fit_classifier",
]

# The meta-validation policy of the acl, fewshot and sequential recipes (see validation_sampling).
VALIDATION_SEED = 12345
VALIDATION_MAX_BATCH = 50


@dataclass
class OptimConfig(LoopConfig):
    """The ``train`` section shared by the acl, fewshot and sequential recipes: the loop fields of
    :class:`~fastweights.train.loop.LoopConfig` plus the optimiser, schedule, synthetic warm-up stage
    and validation size (modern-srwm: Adam with betas (0.9, 0.995), eps 1e-9; warm-up then constant, or
    the reference's Noam schedule)."""

    batch_size: int = 16
    lr: float = 1e-3
    warmup_steps: int = 100
    schedule: str = "constant"
    adam_betas: tuple[float, float] = (0.9, 0.995)
    adam_eps: float = 1e-9
    synthetic_steps: int = 0  # first steps on synthetic feature-space tasks (no backbone); 0 = off
    synthetic_noise: float = 0.5
    val_episodes: int = 200

    def __post_init__(self) -> None:
        """Check every field (``ValueError`` naming it; the config loader adds the section)."""
        super().__post_init__()
        check_ints(self, ("batch_size", "val_episodes"))
        check_ints(self, ("warmup_steps", "synthetic_steps"), low=0)
        check_real("lr", self.lr, 0)  # 0 freezes the weights (e.g. to evaluate a loaded model)
        check_real("adam_eps", self.adam_eps, 0, low_open=True)
        check_betas("adam_betas", self.adam_betas)
        check_choice("schedule", self.schedule, SCHEDULES)
        check_real("synthetic_noise", self.synthetic_noise, 0)


def make_optimizer(
    model: torch.nn.Module, o: Any, d_model: int
) -> tuple[torch.optim.Optimizer, torch.optim.lr_scheduler.LRScheduler]:
    """Adam(``o.lr``, ``o.adam_betas``, ``o.adam_eps``) with the ``o.schedule`` multiplier."""
    opt = torch.optim.Adam(model.parameters(), lr=o.lr, betas=tuple(o.adam_betas), eps=o.adam_eps)
    mult = lr_multiplier(o.schedule, warmup_steps=o.warmup_steps, base_lr=o.lr, d_model=d_model)
    return opt, torch.optim.lr_scheduler.LambdaLR(opt, mult)


def sampling_streams(run: RecipeRun) -> tuple[np.random.Generator, torch.Generator]:
    """The two random streams of episode sampling (numpy) and the synthetic stage (torch), both seeded
    with ``train.seed`` and registered in ``run.state`` (checkpoint keys ``sampler_rng`` and
    ``synthetic_rng``) so ``--resume`` continues them exactly."""
    seed = run.cfg.train.seed
    rng, synthetic = np.random.default_rng(seed), torch.Generator().manual_seed(seed)
    run.state["sampler_rng"] = numpy_rng_state(rng)
    run.state["synthetic_rng"] = (synthetic.get_state, synthetic.set_state)
    return rng, synthetic


def validation_sampling(episodes: int, seed_offset: int = 0) -> dict[str, int]:
    """How the acl, fewshot and sequential recipes draw their meta-validation episodes: from the fixed
    seed ``VALIDATION_SEED + seed_offset`` (12345; the same episodes at every validation, independent of
    the training streams, so checkpoints are compared on one set; ``seed_offset`` tells the sets of one
    validation apart, e.g. one per domain order) in batches of ``min(VALIDATION_MAX_BATCH, episodes)``
    (at most 50) episodes.

    Args:
        episodes: the validation's episode count (``train.val_episodes`` or the recipe's own); it sets
            the batch size only.
        seed_offset: added to the seed.

    Returns:
        ``{"batch_size": ..., "seed": ...}``, keyword arguments of the ``cl`` evaluators
        (:func:`~fastweights.cl.fewshot.evaluate_fewshot`,
        :func:`~fastweights.cl.sequential.evaluate_sequential`,
        :func:`~fastweights.cl.protocols.evaluate_task_pairs`,
        :func:`~fastweights.cl.protocols.evaluate_task_sequence`). Nothing is checked here: those
        evaluators raise ``ValueError`` for ``episodes < 1``.
    """
    return {"batch_size": min(VALIDATION_MAX_BATCH, episodes), "seed": VALIDATION_SEED + seed_offset}


def fit_classifier(
    run: RecipeRun,
    model: torch.nn.Module,
    step_fn: Any,
    validate_fn: Any,
    *,
    description: str,
    postfix: tuple[str, ...] = ("k_shot",),
    selection: Selection,
) -> dict[str, Any]:
    """:func:`~fastweights.recipes.run.fit_run` with Adam + schedule of ``cfg.train``
    (:func:`make_optimizer`), the best checkpoint chosen by the recipe's ``selection``."""
    opt, sched = make_optimizer(model, run.cfg.train, run.cfg.model.d_model)
    return fit_run(
        run,
        model,
        step_fn,
        validate_fn,
        optimizer=opt,
        scheduler=sched,
        selection=selection,
        description=description,
        postfix=postfix,
    )
