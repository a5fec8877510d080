"""The in-context classifier family's training pieces (the acl, fewshot and sequential recipes): the
optimiser / schedule / loop section of their configs (:class:`OptimConfig`), Adam with that schedule
(:func:`make_optimizer`), the episode-sampling random streams (:func:`sampling_streams`), the
validation policy (:func:`validation_sampling`), the opt-in bfloat16 backbone
(:func:`set_backbone_precision`) and :func:`fit_classifier`, the training loop with that optimiser."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from fastweights.checks import check_betas, check_choice, check_ints, check_real
from fastweights.models.backbones import CONV4_PRECISIONS, Conv4
from fastweights.recipes.contract import Selection
from fastweights.recipes.run import RecipeRun, fit_run
from fastweights.train.loop import LoopConfig, numpy_rng_state
from fastweights.train.precision import native_bf16
from fastweights.train.schedules import SCHEDULES, lr_multiplier

__all__ = [
    "OptimConfig",
    "make_optimizer",
    "sampling_streams",
    "VALIDATION_SEED",
    "VALIDATION_MAX_BATCH",
    "validation_sampling",
    "set_backbone_precision",
    "fit_classifier",
]

log = logging.getLogger(__name__)

# The meta-validation policy of the acl, fewshot and sequential recipes (see validation_sampling).
VALIDATION_SEED = 12345
VALIDATION_MAX_BATCH = 50


@dataclass
class OptimConfig(LoopConfig):
    """The ``train`` section shared by the acl, fewshot and sequential recipes: the loop fields of
    :class:`~fastweights.train.loop.LoopConfig` plus the optimiser, schedule, synthetic warm-up stage
    and validation size (modern-srwm: Adam with betas (0.9, 0.995), eps 1e-9; warm-up then constant, or
    the reference's Noam schedule).

    ``backbone_precision: bf16`` runs the Conv-4 backbone of the training steps in bfloat16 on a device
    with native bfloat16 (:func:`set_backbone_precision`; validation and evaluation stay in float32);
    unlike ``precision: bf16`` (the whole step under autocast) the sequence layers stay float32."""

    batch_size: int = 16
    lr: float = 1e-3
    warmup_steps: int = 100
    schedule: str = "constant"
    adam_betas: tuple[float, float] = (0.9, 0.995)
    adam_eps: float = 1e-9
    synthetic_steps: int = 0  # first steps on synthetic feature-space tasks (no backbone); 0 = off
    synthetic_noise: float = 0.5
    val_episodes: int = 200
    backbone_precision: str = "fp32"  # fp32 | bf16: the Conv-4 backbone of the training steps

    def __post_init__(self) -> None:
        """Check every field (``ValueError`` naming it; the config loader adds the section)."""
        super().__post_init__()
        check_ints(self, ("batch_size", "val_episodes"))
        check_ints(self, ("warmup_steps", "synthetic_steps"), low=0)
        check_real("lr", self.lr, 0)  # 0 freezes the weights (e.g. to evaluate a loaded model)
        check_real("adam_eps", self.adam_eps, 0, low_open=True)
        check_betas("adam_betas", self.adam_betas)
        check_choice("schedule", self.schedule, SCHEDULES)
        check_choice("backbone_precision", self.backbone_precision, CONV4_PRECISIONS)
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


def set_backbone_precision(model: torch.nn.Module, precision: str, device: torch.device) -> str:
    """Set the Conv-4 backbone of ``model`` (``model.backbone``) to compute its training steps in
    ``precision`` (``train.backbone_precision``), and log which path runs. ``"bf16"`` takes effect only
    where ``device`` computes bfloat16 natively (:func:`fastweights.train.precision.native_bf16`:
    AVX-512 BF16 or AMX on CPU, compute capability 8.0+ on CUDA); elsewhere bfloat16 would be emulated,
    slower than float32, so the backbone stays float32 with a warning. A model without a Conv-4 backbone
    (a frozen encoder's cached features) has nothing to set.

    Returns:
        The precision the backbone's training steps run in: ``"fp32"`` or ``"bf16"``.
    """
    backbone = getattr(model, "backbone", None)
    if precision == "fp32" or not isinstance(backbone, Conv4):
        if precision != "fp32":
            log.info(
                "train.backbone_precision=%s: no Conv-4 backbone (features are inputs); nothing to set",
                precision,
            )
        if isinstance(backbone, Conv4):
            backbone.precision = "fp32"
        return "fp32"
    native, what = native_bf16(device)
    if not native:
        log.warning(
            "train.backbone_precision=bf16: this %s has no native bfloat16 (%s); the backbone runs in "
            "float32",
            device.type.upper(),
            what,
        )
        backbone.precision = "fp32"
        return "fp32"
    backbone.precision = "bf16"
    log.info(
        "train.backbone_precision=bf16: the Conv-4 backbone's training steps run in bfloat16 (native on this "
        "%s: %s); sequence layers, weights, gradients, validation and evaluation in float32",
        device.type.upper(),
        what,
    )
    return "bf16"


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
    (:func:`make_optimizer`), the best checkpoint chosen by the recipe's ``selection``; the backbone's
    training precision set from ``train.backbone_precision`` (:func:`set_backbone_precision`)."""
    set_backbone_precision(model, run.cfg.train.backbone_precision, run.device)
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
