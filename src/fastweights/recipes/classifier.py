"""The in-context classifier family's training pieces (the acl, fewshot and sequential recipes): the
optimiser / schedule / loop section of their configs (:class:`OptimConfig`), Adam with that schedule
(:func:`make_optimizer`) and :func:`fit_run`, the training loop with both random streams checkpointed."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import torch

from fastweights.checks import check_betas, check_choice, check_ints, check_real
from fastweights.recipes.run import RecipeRun, loop_settings
from fastweights.train.loop import PRECISIONS, fit, numpy_rng_state
from fastweights.train.schedules import SCHEDULES, lr_multiplier

__all__ = ["OptimConfig", "make_optimizer", "fit_run"]


@dataclass
class OptimConfig:
    """Optimiser, schedule and loop fields shared by the few-shot and sequential recipes (modern-srwm:
    Adam with betas (0.9, 0.995), eps 1e-9; warm-up then constant, or the reference's Noam schedule)."""

    batch_size: int = 16
    lr: float = 1e-3
    warmup_steps: int = 100
    schedule: str = "constant"
    adam_betas: tuple[float, float] = (0.9, 0.995)
    adam_eps: float = 1e-9
    grad_clip: float = 0.0
    synthetic_steps: int = 0  # first steps on synthetic feature-space tasks (no backbone); 0 = off
    synthetic_noise: float = 0.5
    max_steps: int = 1000
    max_minutes: float = 0.0  # wall-clock budget incl. validation; 0 = none
    val_every_steps: int = 100
    val_episodes: int = 200
    checkpoint_every_steps: int = 100
    seed: int = 1
    threads: int = 0  # 0 = torch default
    precision: str = "fp32"  # fp32 | bf16: autocast of the training step (fp32 weights and fast-weight state)

    def __post_init__(self) -> None:
        """Check every field (``ValueError`` naming it; the config loader adds the section)."""
        check_ints(self, ("batch_size", "val_every_steps", "val_episodes", "checkpoint_every_steps"))
        check_ints(self, ("warmup_steps", "synthetic_steps", "max_steps", "seed", "threads"), low=0)
        check_real("lr", self.lr, 0)  # 0 freezes the weights (e.g. to evaluate a loaded model)
        check_real("adam_eps", self.adam_eps, 0, low_open=True)
        check_betas("adam_betas", self.adam_betas)
        check_choice("schedule", self.schedule, SCHEDULES)
        check_choice("precision", self.precision, PRECISIONS)
        for name in ("grad_clip", "synthetic_noise", "max_minutes"):
            check_real(name, getattr(self, name), 0)


def make_optimizer(
    model: torch.nn.Module, o: Any, d_model: int
) -> tuple[torch.optim.Optimizer, torch.optim.lr_scheduler.LRScheduler]:
    """Adam(``o.lr``, ``o.adam_betas``, ``o.adam_eps``) with the ``o.schedule`` multiplier."""
    opt = torch.optim.Adam(model.parameters(), lr=o.lr, betas=tuple(o.adam_betas), eps=o.adam_eps)
    mult = lr_multiplier(o.schedule, warmup_steps=o.warmup_steps, base_lr=o.lr, d_model=d_model)
    return opt, torch.optim.lr_scheduler.LambdaLR(opt, mult)


def fit_run(
    run: RecipeRun,
    model: torch.nn.Module,
    step_fn: Any,
    validate_fn: Any,
    *,
    description: str,
    postfix: tuple[str, ...] = ("k_shot",),
    objective: str = "val_acc",
) -> dict[str, Any]:
    """:func:`fastweights.train.loop.fit` with Adam + schedule of ``cfg.train``, the best checkpoint
    maximising the validation record's ``objective`` (default ``val_acc``), and both random streams and
    the config saved in every checkpoint."""
    opt, sched = make_optimizer(model, run.cfg.train, run.cfg.model.d_model)
    return fit(
        run.run_dir,
        model=model,
        optimizer=opt,
        scheduler=sched,
        step_fn=step_fn,
        validate_fn=validate_fn,
        settings=loop_settings(run.cfg.train),
        objective=objective,
        resume=run.resume,
        extra_state={
            "sampler_rng": numpy_rng_state(run.rng),
            "synthetic_rng": (run.synthetic.get_state, run.synthetic.set_state),
        },
        metadata={"config": asdict(run.saved_cfg)},
        description=description,
        postfix=postfix,
        map_location=run.device,
    )
