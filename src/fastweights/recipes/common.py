"""Pieces every recipe shares: device choice, the in-context classifier, optimiser + schedule, the
training-loop settings, run-folder preparation and the recorded command line."""

from __future__ import annotations

import os
import shlex
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import torch

from fastweights.config import apply_overrides, config_from_yaml, config_to_yaml
from fastweights.data.registry import CLASS_POOLS, SPLIT_DATASETS, load_class_pools, load_split_dataset
from fastweights.data.sources.base import ClassPool
from fastweights.data.split_pools import split_dataset_pools
from fastweights.io import atomic_write_text, read_jsonl
from fastweights.models.backbones import Conv4
from fastweights.models.in_context import InContextClassifier
from fastweights.recipes.acl_config import ModelConfig
from fastweights.train.checkpoint import CheckpointManager
from fastweights.train.loop import LoopSettings, fit, numpy_rng_state, open_run_dir
from fastweights.train.schedules import lr_multiplier

__all__ = [
    "OptimConfig",
    "build_classifier",
    "command_line",
    "curriculum_stage",
    "make_optimizer",
    "loop_settings",
    "load_pools",
    "load_run",
    "run_summary",
    "command_markdown",
    "RecipeRun",
    "start_run",
    "fit_run",
    "load_trained",
    "prepare_run",
    "resolve_device",
]

C = TypeVar("C")


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


def curriculum_stage(t: Any, step: int) -> tuple[int, int]:
    """``(n_way, k_shot)`` at ``step``: the first stage of ``t.curriculum`` with ``step < until_step``,
    else ``(t.n_way, t.k_shot)``."""
    for s in t.curriculum:
        if step < s.until_step:
            return s.n_way, s.k_shot
    return t.n_way, t.k_shot


def resolve_device(name: str) -> torch.device:
    """``"auto"`` → CUDA when available, else CPU; anything else is passed to ``torch.device``.

    Raises:
        ValueError: naming ``device`` for an unknown device or CUDA without a CUDA build/GPU.
    """
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError as err:
        raise ValueError(f"device: expected auto, cpu, cuda or cuda:N, got {name!r} ({err})") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(
            f"device: {name!r} requested but CUDA is not available (torch {torch.__version__}); "
            "use device=cpu or device=auto"
        )
    return device


def _as_rgb(pool: ClassPool) -> ClassPool:
    if pool.channels == 3:
        return pool
    rgb = np.repeat(pool.images[:, :, None], 3, axis=2)  # [C, M, 3, S, S]
    mean, std = float(np.asarray(pool.mean).reshape(-1)[0]), float(np.asarray(pool.std).reshape(-1)[0])
    return ClassPool(pool.name, rgb, pool.class_names, pool.alphabets, (mean,) * 3, (std,) * 3)


def load_pools(p: Any, key: str = "data") -> dict[str, ClassPool]:
    """``{"train", "val", "test"}`` class pools of a ``PoolConfig`` (``recipes.fewshot_config``).

    Few-shot sources (``data.registry.CLASS_POOLS``) give disjoint meta-train/val/test classes;
    classification datasets (``SPLIT_DATASETS``) give their classes with disjoint *examples* (see
    :func:`fastweights.data.split_pools.split_dataset_pools`).

    ``p.channels = 3`` repeats a grayscale source to three channels. ``key`` is the config section
    (``data``, ``domain_a``, …) that errors name.

    Raises:
        ValueError: for an unknown source, a missing ``<key>.root``, or pools whose channels differ
            from ``p.channels``.
    """
    if p.source in CLASS_POOLS:
        options: dict[str, Any] = {}
        if p.source == "fontglyphs":
            options = dict(
                examples_per_class=p.examples_per_class,
                max_classes_per_script=p.max_classes_per_script,
                max_scripts=p.max_scripts,
                seed=p.seed,
                cache_dir=p.cache_dir,
            )
        if p.root is None and p.source != "fontglyphs" and not os.environ.get("FASTWEIGHTS_DATA"):
            raise ValueError(
                f"{key}.root: expected the local folder holding the {p.source!r} files "
                f"(or set $FASTWEIGHTS_DATA); none given"
            )
        pools = load_class_pools(p.source, p.root, image_size=p.image_size, **options)
    elif p.source in SPLIT_DATASETS:
        pools = split_dataset_pools(load_split_dataset(p.source, p.root, image_size=p.image_size))
    else:
        raise ValueError(f"{key}.source: expected one of {CLASS_POOLS + SPLIT_DATASETS}, got {p.source!r}")
    if p.channels == 3:  # grayscale sources repeated to RGB (the reference's omniglot_rgb84x84 input)
        pools = {split: _as_rgb(pool) for split, pool in pools.items()}
    for split, pool in pools.items():
        if pool.channels != p.channels:
            raise ValueError(
                f"channels: {p.source}/{split} images have {pool.channels} channel(s), "
                f"config says {p.channels}"
            )
    return pools


def build_classifier(m: ModelConfig, *, image_size: int, in_channels: int = 1) -> InContextClassifier:
    """Conv-4 → ``num_layers`` × [sequence layer, FF] → head (Irie et al. 2022, §4; ACL paper §3)."""
    backbone = Conv4(
        in_channels,
        m.channels,
        image_size=image_size,
        norm=m.norm,
        dropout=m.vision_dropout,
        pool_before_norm=m.pool_before_norm,
    )
    return InContextClassifier(
        backbone,
        m.num_classes,
        d_model=m.d_model,
        num_layers=m.num_layers,
        num_heads=m.num_heads,
        d_ff=m.ff_factor * m.d_model,
        dropout=m.dropout,
        sequence_layer=m.sequence_layer,
    )


def make_optimizer(
    model: torch.nn.Module, o: Any, d_model: int
) -> tuple[torch.optim.Optimizer, torch.optim.lr_scheduler.LRScheduler]:
    """Adam(``o.lr``, ``o.adam_betas``, ``o.adam_eps``) with the ``o.schedule`` multiplier."""
    opt = torch.optim.Adam(model.parameters(), lr=o.lr, betas=tuple(o.adam_betas), eps=o.adam_eps)
    mult = lr_multiplier(o.schedule, warmup_steps=o.warmup_steps, base_lr=o.lr, d_model=d_model)
    return opt, torch.optim.lr_scheduler.LambdaLR(opt, mult)


def loop_settings(o: Any) -> LoopSettings:
    """The loop settings of a recipe's ``train`` section (``tensorboard`` and ``accumulation_steps`` when
    it has those fields)."""
    return LoopSettings(
        max_steps=o.max_steps,
        max_minutes=o.max_minutes,
        val_every_steps=o.val_every_steps,
        checkpoint_every_steps=o.checkpoint_every_steps,
        grad_clip=o.grad_clip,
        tensorboard=getattr(o, "tensorboard", False),
        accumulation_steps=getattr(o, "accumulation_steps", 1),
    )


def prepare_run(
    cfg: C,
    run_dir: Path,
    *,
    resume: bool,
    command: str | None,
    check: Callable[[C], None] | None = None,
) -> C:
    """Check/create ``run_dir``, reload its ``config.yaml`` when resuming, run ``check(cfg)`` (the
    recipe's config validation) before anything is written, then write config and command.

    Raises:
        FileExistsError: if ``run_dir`` already holds a run and ``resume`` is False.
        ValueError: from ``check`` (nothing is written then).
    """
    run_dir = Path(run_dir)
    open_run_dir(run_dir, resume)
    if resume and (run_dir / "config.yaml").exists():
        cfg = config_from_yaml(type(cfg), (run_dir / "config.yaml").read_text())
    if check is not None:
        check(cfg)
    run_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_text(run_dir / "config.yaml", config_to_yaml(cfg))
    if command:  # a resumed run keeps the commands that started it
        path = run_dir / "command.txt"
        previous = path.read_text() if resume and path.exists() else ""
        atomic_write_text(path, previous + command + "\n")
    return cfg


def command_line() -> str:
    """The command that started this process (recorded in run folders)."""
    return "fastweights " + " ".join(shlex.quote(a) for a in sys.argv[1:])


def load_run(
    run_dir: Path, config_cls: type, which: str = "best", overrides: list[str] | None = None
) -> tuple[Any, dict[str, Any]]:
    """``(config, checkpoint)`` of a run folder written by a recipe's ``train``.

    Raises:
        FileNotFoundError: if ``run_dir`` has no ``config.yaml`` or no such checkpoint.
    """
    run_dir = Path(run_dir)
    if not (run_dir / "config.yaml").exists():
        raise FileNotFoundError(f"run_dir: expected {run_dir}/config.yaml (a folder written by `train`)")
    cfg = config_from_yaml(config_cls, (run_dir / "config.yaml").read_text())
    if overrides:
        cfg = apply_overrides(cfg, overrides)
    state = CheckpointManager(run_dir).load(which)  # type: ignore[arg-type]
    if state is None:
        raise FileNotFoundError(f"checkpoint: no {which} checkpoint in {run_dir}/checkpoints")
    return cfg, state


def run_summary(
    cfg: Any,
    run_dir: Path,
    state: dict[str, Any],
    which: str,
    command: str | None,
    *,
    model_name: str | None = None,
) -> dict:
    """The ``"run"`` section of ``results.json``: ``steps``/``train_minutes`` of the evaluated
    checkpoint, ``trained_steps`` = the last step logged in ``metrics.jsonl`` and ``sequence_layer`` =
    ``model_name`` (default ``cfg.model.sequence_layer``)."""
    cmd = run_dir / "command.txt"
    log = run_dir / "metrics.jsonl"
    records = read_jsonl(log) if log.exists() else []
    return {
        "preset": cfg.name,
        "run_dir": str(run_dir),
        "sequence_layer": model_name or cfg.model.sequence_layer,
        "checkpoint": which,
        "steps": state["step"],
        "train_minutes": state["elapsed_seconds"] / 60,
        "trained_steps": records[-1]["step"] if records else state["step"],
        "command": cmd.read_text().strip() if cmd.exists() else "",
        "eval_command": command or "",
    }


def command_markdown(command: str) -> str:
    """A recorded command (possibly several lines, e.g. a resumed run) as Markdown."""
    if "\n" not in command.strip():
        return f"`{command.strip()}`"
    return "\n\n```\n" + command.strip() + "\n```\n"


@dataclass
class RecipeRun:
    """What a recipe's ``train`` needs after :func:`start_run`: the (reloaded) config, the device and the
    two random streams the loop checkpoints (episode sampling and the synthetic stage)."""

    cfg: Any
    run_dir: Path
    device: torch.device
    rng: np.random.Generator
    synthetic: torch.Generator


def start_run(
    cfg: Any,
    run_dir: Path,
    *,
    resume: bool,
    command: str | None,
    check: Callable[[Any], None] | None = None,
) -> RecipeRun:
    """:func:`prepare_run` (``check`` + the device and loop settings are validated before anything is
    written), then threads, device and seeds from ``cfg.train``."""
    run_dir = Path(run_dir)

    def check_all(c: Any) -> None:
        resolve_device(c.device)
        loop_settings(c.train)
        if check is not None:
            check(c)

    cfg = prepare_run(cfg, run_dir, resume=resume, command=command, check=check_all)
    t = cfg.train
    if t.threads:
        torch.set_num_threads(t.threads)
    torch.manual_seed(t.seed)
    return RecipeRun(
        cfg,
        run_dir,
        resolve_device(cfg.device),
        np.random.default_rng(t.seed),
        torch.Generator().manual_seed(t.seed),
    )


def fit_run(
    run: RecipeRun,
    model: torch.nn.Module,
    step_fn: Any,
    validate_fn: Any,
    *,
    resume: bool,
    description: str,
    postfix: tuple[str, ...] = ("k_shot",),
) -> dict[str, Any]:
    """:func:`fastweights.train.loop.fit` with Adam + schedule of ``cfg.train``, objective ``val_acc``
    and both random streams and the config saved in every checkpoint."""
    opt, sched = make_optimizer(model, run.cfg.train, run.cfg.model.d_model)
    return fit(
        run.run_dir,
        model=model,
        optimizer=opt,
        scheduler=sched,
        step_fn=step_fn,
        validate_fn=validate_fn,
        settings=loop_settings(run.cfg.train),
        objective="val_acc",
        resume=resume,
        extra_state={
            "sampler_rng": numpy_rng_state(run.rng),
            "synthetic_rng": (run.synthetic.get_state, run.synthetic.set_state),
        },
        metadata={"config": asdict(run.cfg)},
        description=description,
        postfix=postfix,
        map_location=run.device,
    )


def load_trained(
    run_dir: Path, config_cls: type, build: Any, which: str = "best", overrides: list[str] | None = None
) -> tuple[Any, dict[str, Any], torch.nn.Module, torch.device]:
    """``(config, checkpoint, model with its weights, device)`` of a run folder, for evaluation.

    Raises:
        FileNotFoundError: if ``run_dir`` has no ``config.yaml`` or no such checkpoint.
    """
    cfg, state = load_run(Path(run_dir), config_cls, which, overrides)
    if cfg.train.threads:
        torch.set_num_threads(cfg.train.threads)
    device = resolve_device(cfg.device)
    model = build(cfg).to(device)
    model.load_state_dict(state["model"])
    return cfg, state, model, device
