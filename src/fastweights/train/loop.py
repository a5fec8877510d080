"""The training loop every recipe shares: steps, validation, best/latest checkpoints, exact resume.

A recipe supplies ``step_fn(step) -> (loss, info)`` (build a batch, return the loss to minimise and
loggable scalars; called ``accumulation_steps`` times per optimiser step) and
``validate_fn() -> {name: value}``; :func:`fit` runs Adam-style optimisation
until ``max_steps`` or a wall-clock budget, validates every ``val_every_steps`` steps (and at the
end), keeps the checkpoint with the best ``objective`` and a latest one, logs one JSONL record per
validation, shows a progress bar, and on Ctrl-C saves before re-raising. With ``resume=True`` the
latest checkpoint continues exactly: model, optimiser, schedule, step, elapsed time, torch/numpy/
python random states, the training-loss average and any recipe-specific state (``extra_state``).

A fresh run saves a step-0 checkpoint before its first step. Every checkpoint records the byte length
of ``metrics.jsonl`` at its save; a resumed run truncates the log back to it, so records written after
the checkpoint (a kill between a validation's log line and its checkpoint) are not repeated: a
killed-and-resumed run logs what the uninterrupted one logs, line for line (up to the wall-clock
``minutes``), and ends with the same weights on CPU. A log with records but no checkpoint (the
checkpoints were removed) is refused instead of starting a second series.

Under ``torchrun`` (:mod:`fastweights.train.distributed`) every rank runs this loop on its share of the
batch: the ranks start from rank 0's weights, gradients are averaged after every backward, the logged
training loss is the mean over ranks, rank 0 validates (its record is broadcast), writes the log and
the checkpoints (which hold every rank's random streams) and shows the progress bar; the ranks agree
on when the time budget is spent. A resumed run must have as many ranks as the one that wrote the
checkpoint. Ctrl-C under torchrun does not save (the ranks may be at different points); the last
checkpoint stays intact.

``precision="bf16"`` runs ``step_fn`` under ``torch.autocast`` (bfloat16 on CPU and CUDA); parameters,
gradients, optimiser state and the fast-weight state of the ops stay float32; validation runs in the
model's own dtype.
"""

from __future__ import annotations

import logging
import math
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn
from tqdm.auto import tqdm

from fastweights.checks import check_choice, check_ints, check_real, check_seed, check_threads
from fastweights.io import JsonlLogger
from fastweights.train import distributed
from fastweights.train.checkpoint import CheckpointManager, capture_rng_state, restore_rng_state
from fastweights.train.run_folder import RunFolderError

__all__ = ["LoopConfig", "fit", "numpy_rng_state", "resume_fallback_hint"]

# what a checkpoint needs to be resumed (an `acl export` slim copy has only the model)
_RESUME_KEYS = ("model", "optimizer", "scheduler", "step", "elapsed_seconds", "best", "rng", "extra")

log = logging.getLogger(__name__)

StepFn = Callable[[int], tuple[Tensor, dict[str, Any]]]
PRECISIONS = ("fp32", "bf16")
StateAccessors = dict[str, tuple[Callable[[], Any], Callable[[Any], None]]]


@dataclass
class LoopConfig:
    """When to stop, validate and checkpoint; clipping, seed, threads and precision of the training step.

    The ``train`` section of every recipe's config extends it (adding its optimiser fields and
    changing defaults); :func:`fit` reads these fields. ``accumulation_steps`` batches (``step_fn``
    calls) are averaged into one optimiser step.

    Raises:
        ValueError: naming the field (the config loader adds ``train.``) for a negative budget, step
            count or clip, a seed outside ``[0, MAX_SEED]`` or a thread count outside ``[0, MAX_THREADS]``
            (:mod:`fastweights.checks`), a period or accumulation count below 1, or an unknown precision.
    """

    max_steps: int = 1000  # optimiser steps
    max_minutes: float = 0.0  # wall-clock budget incl. validation; 0 = none
    val_every_steps: int = 100
    checkpoint_every_steps: int = 100
    grad_clip: float = 0.0  # max gradient norm; 0 = off
    seed: int = 1
    threads: int = 0  # torch threads; 0 = torch default
    precision: str = "fp32"  # fp32 | bf16: autocast of the training step (fp32 weights and fast-weight state)
    tensorboard: bool = False  # also write TensorBoard scalars to run_dir/tensorboard
    accumulation_steps: int = 1  # batches per optimiser step (gradients averaged)

    def __post_init__(self) -> None:
        check_ints(self, ("val_every_steps", "checkpoint_every_steps", "accumulation_steps"))
        check_ints(self, ("max_steps",), low=0)
        check_seed("seed", self.seed)
        check_threads("threads", self.threads)
        check_real("max_minutes", self.max_minutes, 0)
        check_real("grad_clip", self.grad_clip, 0)
        check_choice("precision", self.precision, PRECISIONS)


def resume_fallback_hint(ckpt: CheckpointManager) -> Callable[[str, Path], str]:
    """The advice when ``latest.pt`` is damaged on resume and ``best.pt`` reads."""
    return lambda _, p: f"to resume from it, copy it over {ckpt.path('latest')}"


def numpy_rng_state(rng: np.random.Generator) -> tuple[Callable[[], Any], Callable[[Any], None]]:
    """``(get, set)`` accessors of a numpy generator's state, for ``fit(extra_state=...)``."""
    return (lambda: rng.bit_generator.state), (lambda v: setattr(rng.bit_generator, "state", v))


def fit(
    run_dir: Path,
    *,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    step_fn: StepFn,
    validate_fn: Callable[[], dict[str, float]],
    loop: LoopConfig,
    objective: str,
    minimize: bool = False,
    resume: bool = False,
    extra_state: StateAccessors | None = None,
    metadata: dict[str, Any] | None = None,
    records: dict[str, Any] | None = None,
    description: str = "training",
    postfix: tuple[str, ...] = (),
    map_location: torch.device | str | None = None,
) -> dict[str, Any]:
    """Optimise ``model`` with ``step_fn`` losses; see the module docstring.

    Args:
        run_dir: folder for ``checkpoints/`` and ``metrics.jsonl``.
        step_fn: ``step_fn(step)`` → ``(loss, info)``; ``info`` scalars go into the log records and
            the keys named in ``postfix`` into the progress bar.
        validate_fn: returns the validation scalars; must contain ``objective`` (higher is better, or
            lower with ``minimize=True``).
        loop: the stopping, validation, checkpoint, clipping, precision and accumulation settings (a
            recipe's ``train`` section; its other fields are not read here).
        extra_state: ``{name: (get, set)}`` recipe state saved in checkpoints and restored on resume
            (e.g. an episode sampler's random generator).
        metadata: saved as is in every checkpoint (e.g. the config as a dict).
        records: facts about the run fixed when it starts (e.g. the training steps behind the
            checkpoint it started from), saved in every checkpoint under ``"records"``; on resume the
            checkpoint's values replace these in place (keys a checkpoint of an older version lacks
            keep the values given).

    Returns:
        ``{"step", "minutes", **last validation}``.

    Raises:
        FloatingPointError: if a loss is NaN/Inf (the last checkpoint stays intact).
        KeyError: if ``validate_fn`` does not return ``objective``.
        RunFolderError: if ``latest.pt`` is damaged or not resumable (e.g. an export), if
            ``metrics.jsonl`` has records but there is no checkpoint to continue from, or if a
            checkpoint cannot be written (full disk, read-only folder; the previous one stays intact),
            or if the checkpoint to resume lacks a name of ``extra_state``.
        ValueError: if ``metrics.jsonl`` is shorter than the checkpoint recorded.
    """
    s = loop
    device = next(iter(model.parameters()), torch.empty(0)).device
    w = distributed.setup(device)
    ckpt = CheckpointManager(Path(run_dir))
    log_path = Path(run_dir) / "metrics.jsonl"
    extra_state = extra_state or {}
    sign = -1.0 if minimize else 1.0  # ``best`` is stored as sign * objective (higher is better)
    step, elapsed, best = 0, 0.0, -math.inf
    loss_ema: float | None = None
    last_val: dict[str, Any] = {}
    state = _load_resumable(ckpt, map_location, w) if resume else None
    keep_bytes = state.get("metrics_bytes") if state is not None else None
    if state is None and w.main and log_path.exists() and log_path.stat().st_size > 0:
        raise RunFolderError(
            f"run_dir: {log_path} already has records but there is no checkpoint to continue from "
            f"({ckpt.path('latest')}); move the folder away or choose another one"
        )
    if state is not None:
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        step, elapsed, best = state["step"], state["elapsed_seconds"], state["best"]
        mine = state["ranks"][w.rank] if w.distributed else state
        restore_rng_state(mine["rng"])
        for name, (_, set_state) in extra_state.items():
            if name not in mine["extra"]:
                raise RunFolderError(
                    f"checkpoint: {ckpt.path('latest')} holds no {name!r} state, which this run needs to "
                    "continue exactly (written by another recipe or version); train into a new folder"
                )
            set_state(mine["extra"][name])
        if records is not None:
            records.update(state.get("records", {}))
        last_val = state.get("last_val", {})
        loss_ema = state.get("loss_ema")
        if w.main:
            log.info("resumed %s at step %d (%.1f min)", run_dir, step, elapsed / 60)
    distributed.broadcast_module(model, w)  # every rank starts from rank 0's weights

    def save(is_best: bool) -> None:
        mine = {"rng": capture_rng_state(), "extra": {name: get() for name, (get, _) in extra_state.items()}}
        ranks = distributed.gather_objects(mine, w)  # a collective: every rank calls save together
        if not w.main:
            return
        ckpt.save(
            {
                "model": model.state_dict(),
                "optimizer": optimizer.state_dict(),
                "scheduler": scheduler.state_dict(),
                "step": step,
                "elapsed_seconds": elapsed,
                "best": best,
                **mine,
                "world_size": w.size,
                **({"ranks": ranks} if w.distributed else {}),
                "last_val": last_val,
                "loss_ema": loss_ema,
                "metrics_bytes": logger.size,  # rank 0 only, which has the logger
                **({"records": dict(records)} if records is not None else {}),
                **(metadata or {}),
            },
            is_best=is_best,
        )

    logger = JsonlLogger(log_path, keep_bytes=keep_bytes) if w.main else None
    if state is None:
        # a step-0 checkpoint: from now on a log line always has a checkpoint to resume from, so a
        # log without checkpoint means the checkpoints were removed (refused above), never a kill
        save(False)
    budget = s.max_minutes * 60 if s.max_minutes > 0 else math.inf
    start = time.monotonic() - elapsed

    def time_up() -> bool:  # the ranks agree: any rank's clock past the budget stops them all
        if budget == math.inf:
            return False
        return distributed.all_mean([float(time.monotonic() - start >= budget)], w)[0] > 0

    bar = tqdm(
        total=None if s.max_minutes > 0 else s.max_steps,  # a time budget makes the step total meaningless
        initial=step,
        desc=description,
        unit="it",
        dynamic_ncols=True,
        mininterval=0.5 if sys.stderr.isatty() else 30.0,  # keep redirected logs small
        disable=not w.main,
    )
    writer = None
    if s.tensorboard and w.main:
        from torch.utils.tensorboard import SummaryWriter

        # scalars are logged at steps 1, 2, …; a resumed run drops what was logged after its checkpoint
        writer = SummaryWriter(str(Path(run_dir) / "tensorboard"), purge_step=step + 1 if resume else None)
    autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=s.precision == "bf16")
    model.train()
    try:
        while step < s.max_steps and not time_up():
            optimizer.zero_grad(set_to_none=True)
            step_loss = 0.0
            for _ in range(s.accumulation_steps):
                with autocast:
                    loss, info = step_fn(step)
                if not torch.isfinite(loss):
                    step_loss = loss.item()
                    break
                (loss.float() / s.accumulation_steps).backward()
                step_loss += loss.item() / s.accumulation_steps
            (step_loss,) = distributed.all_mean([step_loss], w)  # NaN on one rank stops them all
            if not math.isfinite(step_loss):
                raise FloatingPointError(f"training loss became {step_loss} at step {step}")
            distributed.average_gradients(model, w)
            if s.grad_clip > 0:
                nn.utils.clip_grad_norm_(model.parameters(), s.grad_clip)
            optimizer.step()
            scheduler.step()
            step += 1
            elapsed = time.monotonic() - start
            loss_ema = step_loss if loss_ema is None else 0.95 * loss_ema + 0.05 * step_loss
            bar.update(1)
            if writer is not None:
                writer.add_scalar("train/loss", step_loss, step)
                writer.add_scalar("train/lr", scheduler.get_last_lr()[0], step)
            shown = {k: info[k] for k in postfix if k in info}
            bar.set_postfix(
                loss=f"{loss_ema:.3f}", **shown, val=last_val.get(objective, float("nan")), refresh=False
            )
            done = step >= s.max_steps or time_up()
            if step % s.val_every_steps == 0 or done:
                last_val = distributed.broadcast_object(validate_fn() if w.main else None, w)
                model.train()
                elapsed = time.monotonic() - start
                if logger is not None:
                    logger.log(
                        step=step,
                        minutes=elapsed / 60,
                        train_loss=loss_ema,
                        lr=scheduler.get_last_lr()[0],
                        **info,
                        **last_val,
                    )
                bar.set_postfix(loss=f"{loss_ema:.3f}", **shown, val=last_val[objective])
                if writer is not None:
                    for key, value in last_val.items():
                        writer.add_scalar(f"val/{key}", value, step)
                is_best = sign * last_val[objective] > best
                best = max(best, sign * last_val[objective])
                save(is_best)
                if done:
                    break
            elif step % s.checkpoint_every_steps == 0:
                save(False)
    except KeyboardInterrupt:
        elapsed = time.monotonic() - start
        if w.distributed:  # saving is a collective the other ranks may never reach
            log.warning("interrupted at step %d; --resume continues from the last checkpoint", step)
        else:
            save(False)
            log.warning("interrupted at step %d; resume with --resume", step)
        raise
    finally:
        bar.close()
        if logger is not None:
            logger.close()
        if writer is not None:
            writer.close()
    return {"step": step, "minutes": elapsed / 60, **last_val}


def _load_resumable(
    ckpt: CheckpointManager, map_location: Any, w: distributed.World
) -> dict[str, Any] | None:
    """The latest checkpoint for ``resume`` (``None`` when there is none).

    Raises:
        RunFolderError: if it is damaged (saying whether ``best.pt`` can stand in), lacks resume state,
            or was written by a run on another number of ranks.
    """
    state = ckpt.load("latest", map_location=map_location, fallback_hint=resume_fallback_hint(ckpt))
    if state is None:
        return None
    missing = [k for k in _RESUME_KEYS if k not in state]
    if missing:
        raise RunFolderError(
            f"checkpoint: {ckpt.path('latest')} cannot be resumed (no {', '.join(missing)}; "
            "an exported copy holds only the model); train into a new folder instead"
        )
    ranks = state.get("world_size", 1)
    if ranks != w.size:
        raise RunFolderError(
            f"checkpoint: {ckpt.path('latest')} was written by a run on {ranks} rank(s); resume it with "
            f"as many (torchrun --nproc_per_node x nodes = {ranks}), got {w.size}"
        )
    return state
