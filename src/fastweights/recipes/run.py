"""The run lifecycle every recipe shares: device choice, run-folder preparation (guard, lock, resume,
``--force``), the recorded command line, the training loop over a prepared run (:func:`fit_run`), the
``train`` / ``evaluate`` verbs built from a recipe's pieces, loading a trained run and the slim
``export`` copy."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shlex
import shutil
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import torch

from fastweights.config import (
    apply_overrides,
    config_from_mapping,
    config_to_yaml,
    deprecated_keys,
    load_run_config,
    rename_deprecated,
)
from fastweights.io import atomic_write_bytes, atomic_write_text, read_jsonl
from fastweights.recipes.contract import Selection
from fastweights.recipes.reporting import save_evaluation
from fastweights.resources import check_fits, model_memory
from fastweights.train import distributed
from fastweights.train.checkpoint import CheckpointManager
from fastweights.train.loop import StateAccessors, fit, resume_fallback_hint
from fastweights.train.model_files import (
    CONFIG_FILE,
    WEIGHTS_FILE,
    CardSections,
    is_export,
    model_card,
    read_export,
    write_export,
)
from fastweights.train.run_folder import (
    LOCK_NAME,
    RunFolderError,
    check_writable,
    folder_contents,
    holds_lock,
    locks_eval_output,
    locks_run_dir,
    output_folder,
    refuse_occupied,
    remove_stale_temporaries,
)

__all__ = [
    "command_line",
    "export",
    "export_verb",
    "fit_run",
    "load_run",
    "run_summary",
    "RecipeRun",
    "start_run",
    "train_verb",
    "evaluate_verb",
    "load_trained",
    "prepare_run",
    "restored_on_failure",
    "resolve_device",
    "check_batch_memory",
    "check_model_memory",
    "model_memory",
    "RESUME_OVERRIDABLE",
    "TRAINED_OUTPUTS",
]

C = TypeVar("C")

log = logging.getLogger(__name__)


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


#: config keys a ``--resume key=value`` may change (``eval.*``: every key of the eval section)
RESUME_OVERRIDABLE = (
    "train.max_steps",
    "train.max_minutes",
    "train.threads",
    "device",
    "eval.*",
    # where decoded data is cached does not change what is trained on
    "data.cache_dir",
    "domain_a.cache_dir",
    "domain_b.cache_dir",
)


def _resume_overrides(
    cfg: C, overrides: list[str] | None, run_dir: Path, overridable: tuple[str, ...] = RESUME_OVERRIDABLE
) -> C:
    """``cfg`` (the run's saved config) with the ``--resume`` overrides applied.

    Raises:
        ValueError: naming the keys outside ``overridable`` whose value would change (an override equal
            to the saved value is accepted) and listing the keys that may change.
    """
    if not overrides:
        return cfg
    overrides = rename_deprecated(list(overrides), deprecated_keys(cfg), "overrides")  # warn once
    new = apply_overrides(cfg, overrides)
    refused = []
    for item in overrides:
        key = item.split("=", 1)[0].strip()
        allowed = key in overridable or ("eval.*" in overridable and key.startswith("eval."))
        if not allowed and apply_overrides(cfg, [item]) != cfg:
            refused.append(key)
    if refused:
        raise ValueError(
            f"overrides: {', '.join(refused)} cannot change when resuming {run_dir} (its config.yaml keeps "
            f"the values it was trained with); keys that may change on --resume: "
            f"{', '.join(overridable)}"
        )
    return new


#: what ``--force`` (without ``--resume``) removes from a folder holding a trained run
TRAINED_OUTPUTS = ("checkpoints/latest.pt", "checkpoints/best.pt", "metrics.jsonl", "results.json")


def _start_over(run_dir: Path, outputs: tuple[str, ...]) -> None:
    """``--force`` without ``--resume``: remove the previous run's ``outputs`` (files or folders)."""
    for name in outputs:
        path = run_dir / name
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink(missing_ok=True)


def _check_resumable(
    run_dir: Path, ckpt: CheckpointManager, config_path: Path, has_log: bool, markers: list[str]
) -> None:
    """A trained run in ``run_dir`` can be resumed: ``latest.pt`` intact beside ``config.yaml``.

    Raises:
        RunFolderError: checkpoints without ``config.yaml``, a log or ``best.pt`` without ``latest.pt``,
            or a damaged ``latest.pt``.
    """
    if ckpt.exists("latest") and not config_path.exists():
        raise RunFolderError(f"run_dir: cannot --resume {run_dir}: it has checkpoints but no config.yaml")
    if not ckpt.exists("latest") and (has_log or ckpt.exists("best") or not config_path.exists()):
        found = [
            n for n, ok in (("metrics.jsonl", has_log), ("checkpoints/best.pt", ckpt.exists("best"))) if ok
        ] or markers
        raise RunFolderError(
            f"run_dir: cannot --resume {run_dir}: it has {', '.join(found)} but no "
            "checkpoints/latest.pt to continue from; restarting would mix two runs (pass --force "
            "without --resume to start over, or choose another folder)"
        )
    ckpt.verify("latest", fallback_hint=resume_fallback_hint(ckpt))  # before anything is written


def _largest_size(cfg: Any) -> str:
    """``"model.d_ff=1000000000000"``: the largest int of ``cfg.model`` (the key a size error names)."""
    section = getattr(cfg, "model", None)
    if section is None or not hasattr(section, "__dataclass_fields__"):
        return "model"
    sizes = [(v, k) for k, v in vars(section).items() if isinstance(v, int) and not isinstance(v, bool)]
    if not sizes:
        return "model"
    value, key = max(sizes)
    return f"model.{key}={value}"


def check_model_memory(
    cfg: Any, build: Callable[[Any], torch.nn.Module], device: torch.device, *, training: bool
) -> None:
    """Refuse a model whose parameters (and, for ``training``, their gradients) cannot fit into the
    memory of ``device`` (:func:`fastweights.resources.memory_limit`), before anything is allocated:
    the parameters are counted on the ``meta`` device (:func:`model_memory`).

    Raises:
        ValueError: naming the largest size of ``cfg.model`` (e.g. ``model.d_ff=1000000000000``), the
            parameter count, the bytes needed and the memory there is.
    """
    found = model_memory(build, cfg)
    if found is None:
        return
    count, size = found
    key, hint = _largest_size(cfg), "reduce it or the other sizes of the model section"
    if count < 0:  # one tensor alone is beyond 2^63 bytes (or what the build could allocate)
        what = "the model's parameters (too many to count: one tensor alone)"
        check_fits(key, 2**63, what, device, hint=hint)
        raise ValueError(f"{key}: {what} need at least 2^63 bytes; {hint}")  # no known limit: still too large
    grads = " and their gradients" if training else ""
    check_fits(
        key,
        size * (2 if training else 1),
        f"the model's {count:,} parameters{grads} (fp32)",
        device,
        hint=hint,
    )


def check_batch_memory(cfg: Any, device: torch.device) -> None:
    """Refuse a training batch whose activations cannot fit into the memory of ``device``: a lower bound,
    one fp32 vector of ``model.d_model`` per position of every sequence of ``train.batch_size`` (times
    ``train.seq_len`` where the recipe has one), the activations of a single layer; configs without
    these keys are not checked.

    Raises:
        ValueError: naming ``train.batch_size``, the estimate and the memory there is.
    """
    t, m = getattr(cfg, "train", None), getattr(cfg, "model", None)
    batch, width = getattr(t, "batch_size", None), getattr(m, "d_model", None)
    if not (isinstance(batch, int) and isinstance(width, int)):
        return
    length = getattr(t, "seq_len", 1)
    length = length if isinstance(length, int) and length > 0 else 1
    per = f"train.seq_len={length} positions x " if length > 1 else ""
    check_fits(
        f"train.batch_size={batch}",
        batch * length * width * 4,
        f"the batch's activations ({per}model.d_model={width} fp32 values per sequence, one layer)",
        device,
        hint="reduce train.batch_size (or use train.accumulation_steps for the same effective batch)",
    )


def prepare_run(
    cfg: C,
    run_dir: Path,
    *,
    resume: bool,
    command: str | None,
    check: Callable[[C], None] | None = None,
    overrides: list[str] | None = None,
    force: bool = False,
    overridable: tuple[str, ...] = RESUME_OVERRIDABLE,
    outputs: tuple[str, ...] = TRAINED_OUTPUTS,
    checkpointed: bool = True,
) -> C:
    """Check ``run_dir`` and write its ``config.yaml`` and ``command.txt``; returns the config to train.

    Call it holding ``run_lock(run_dir)`` (recipes decorate ``train`` with
    :func:`fastweights.train.run_folder.locks_run_dir`). First every folder of ``run_dir`` is tried for
    writing (:func:`~fastweights.train.run_folder.check_writable`: a read-only ``checkpoints/`` is
    refused before the log is cut back or the config rewritten), then stale temporary files of killed
    writes are removed. A fresh run needs a new or empty ``run_dir`` (``force``: start over in a folder
    holding a run, removing its checkpoints, ``metrics.jsonl`` and ``results.json``). ``resume``
    continues the run in ``run_dir`` with its saved ``config.yaml``, changed only by the ``overrides``
    that :data:`RESUME_OVERRIDABLE` allows; a ``run_dir`` that does not exist yet (or holds only the
    config of a run killed before its first checkpoint or log line) starts from step 0. ``check(cfg)``
    (the recipe's config validation) runs before anything is written.

    Args:
        overrides: the command line's ``key=value`` items; only used when resuming (``cfg`` already
            contains them otherwise).
        overridable: the keys a resume may change (``"eval.*"``: every key of the eval section).
        outputs: what ``force`` removes (paths relative to ``run_dir``).
        checkpointed: the run resumes from ``checkpoints/latest.pt`` (a training run); ``False`` for a
            run that resumes from the results it cached (cl-baselines' cells), which needs only its
            ``config.yaml``.

    Raises:
        FileExistsError: if ``run_dir`` already holds a run and neither ``resume`` nor ``force`` is set.
        RunFolderError: if ``run_dir`` holds other files (without ``force``), or ``resume`` finds a log
            or ``best.pt`` but no ``latest.pt`` to continue from, or a checkpoint without ``config.yaml``,
            or a folder of ``run_dir`` (or its ``metrics.jsonl``) cannot be written.
        ValueError: from ``check`` or for overrides that may not change on resume (nothing is written).
        RuntimeError: if the caller does not hold the folder's lock.
    """
    run_dir = Path(run_dir)
    if not holds_lock(run_dir):
        raise RuntimeError(f"prepare_run: hold run_lock({run_dir}) first (see locks_run_dir)")
    check_writable(run_dir, doing="--resume" if resume else "write into")  # before anything changes
    remove_stale_temporaries(run_dir)
    ckpt = CheckpointManager(run_dir)
    markers, others = folder_contents(run_dir)
    config_path = run_dir / "config.yaml"
    log_path = run_dir / "metrics.jsonl"
    has_log = log_path.exists() and log_path.stat().st_size > 0
    continuing = resume and bool(markers)  # --resume wins over --force
    if continuing:
        if not checkpointed:
            if not config_path.is_file():
                raise RunFolderError(
                    f"run_dir: cannot --resume {run_dir}: it has {', '.join(markers)} but no config.yaml"
                )
        else:
            _check_resumable(run_dir, ckpt, config_path, has_log, markers)
        cfg = _resume_overrides(_run_config(config_path, type(cfg)), overrides, run_dir, overridable)
    elif not force:
        refuse_occupied(run_dir, markers, others, "train into it" if checkpointed else "write into it")
    if check is not None:
        check(cfg)
    if force and not continuing:
        _start_over(run_dir, outputs)
    run_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_text(config_path, config_to_yaml(cfg))
    if command:  # a resumed run keeps the commands that started it
        path = run_dir / "command.txt"
        previous = path.read_text() if continuing and path.exists() else ""
        atomic_write_text(path, previous + command + "\n")
    return cfg


def command_line() -> str:
    """The command that started this process (recorded in run folders)."""
    return "fastweights " + " ".join(shlex.quote(a) for a in sys.argv[1:])


def load_run(
    run_dir: Path, config_cls: type, which: str = "best", overrides: list[str] | None = None
) -> tuple[Any, dict[str, Any]]:
    """``(config, checkpoint)`` of a run folder written by a recipe's ``train`` (``config.yaml`` +
    ``checkpoints/``) or of an export folder (``config.json`` + ``model.safetensors``,
    :mod:`fastweights.train.model_files`: ``which`` must be ``"best"``, the one model it holds).
    Nothing read runs code.

    Raises:
        FileNotFoundError: if ``run_dir`` has neither layout or no such checkpoint.
        RunFolderError: if the checkpoint is damaged (saying whether the other one can be used).
        UnsafeFileError: if the checkpoint holds pickled objects that could run code (not read).
        ValueError: for a damaged export or a config the recipe refuses.
    """
    run_dir = Path(run_dir)
    if is_export(run_dir):
        info, state = read_export(run_dir)
        if which != "best":
            raise ValueError(
                f"--checkpoint {which}: {run_dir} is an export, which holds one model (pass best)"
            )
        cfg = config_from_mapping(config_cls, info.get("config"), f"config: {run_dir / CONFIG_FILE}")
        return (apply_overrides(cfg, overrides) if overrides else cfg), state
    if not (run_dir / "config.yaml").exists():
        raise FileNotFoundError(
            f"run_dir: expected {run_dir}/config.yaml (a folder written by `train`) or "
            f"{run_dir}/{CONFIG_FILE} + {WEIGHTS_FILE} (an export)"
        )
    cfg = _run_config(run_dir / "config.yaml", config_cls)
    if overrides:
        cfg = apply_overrides(cfg, overrides)
    ckpt = CheckpointManager(run_dir)
    state = ckpt.load(which)  # type: ignore[arg-type]
    if state is None:
        other = "latest" if which == "best" else "best"
        hint = f"; {other}.pt exists: pass --checkpoint {other}" if ckpt.exists(other) else ""  # type: ignore[arg-type]
        raise FileNotFoundError(f"checkpoint: no {which} checkpoint in {run_dir}/checkpoints{hint}")
    return cfg, state


def _run_config(path: Path, config_cls: type) -> Any:
    """The run folder's config; when it does not load as ``config_cls`` and the folder's ``command.txt``
    says another recipe started it, the error names that recipe.

    Raises:
        ValueError: one line naming ``path``.
    """
    try:
        return load_run_config(config_cls, path)
    except ValueError:
        other = recorded_recipe(path.parent)
        if other is None or other.replace("-", "_") == _recipe_package(config_cls):
            raise
        raise ValueError(
            f"config: {path} holds a `{other}` run, not one of this recipe; use `fastweights {other} …`"
        ) from None


def recorded_recipe(run_dir: Path) -> str | None:
    """The recipe that started the run in ``run_dir``, read from the first command in its ``command.txt``
    (``fastweights <recipe> <verb> …`` or ``fastweights compare <recipe> …``, written by
    :func:`prepare_run`); ``None`` when there is none or it names no recipe."""
    from fastweights.recipes.contract import RECIPES

    try:
        words = (Path(run_dir) / "command.txt").read_text().splitlines()[0].split()
    except (OSError, IndexError, UnicodeDecodeError):
        return None
    if words[:1] != ["fastweights"]:
        return None
    words = words[2:] if words[1:2] == ["compare"] else words[1:]
    return words[0] if words and words[0] in (*RECIPES, "cl-baselines") else None


def _recipe_package(config_cls: type) -> str | None:
    """``"acl"`` for a config class defined in ``fastweights.recipes.acl.config``; ``None`` outside."""
    parts = config_cls.__module__.split(".")
    return parts[2] if parts[:2] == ["fastweights", "recipes"] and len(parts) > 2 else None


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


@dataclass
class RecipeRun:
    """What a recipe's ``train`` needs after :func:`start_run`: this rank's config, the device, the
    data ``load_data`` returned and the recipe state the loop checkpoints.

    Under torchrun ``cfg`` is this rank's share (:func:`fastweights.train.distributed.rank_config`: the
    batch divided by the ranks, ``train.seed + rank``) and ``saved_cfg`` the config as ``config.yaml``
    holds it (the global batch); in a single process both are the same object. ``state`` maps a name
    to the ``(get, set)`` accessors of recipe state that every checkpoint saves and ``--resume``
    restores (an episode sampler's random generator, an actor's environments); recipes register
    theirs before :func:`fit_run`. ``records`` holds facts about the run fixed when it starts (ACL:
    ``init_steps``, the meta-training steps behind ``train.init_from``): saved in every checkpoint and
    its exported copy, restored on resume.
    """

    cfg: Any
    run_dir: Path
    device: torch.device
    data: Any = None
    resume: bool = False
    saved_cfg: Any = None
    state: StateAccessors = field(default_factory=dict)
    records: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.saved_cfg is None:
            self.saved_cfg = self.cfg


def start_run(
    cfg: Any,
    run_dir: Path,
    *,
    resume: bool,
    command: str | None,
    load_data: Callable[[Any, bool], Any] | None = None,
    overrides: list[str] | None = None,
    force: bool = False,
    build: Callable[[Any], torch.nn.Module] | None = None,
) -> RecipeRun:
    """:func:`prepare_run` (``overrides`` and ``force`` as there), then threads, device and seeds from
    ``cfg.train``.

    Before anything is written, the device is checked, the model ``build(cfg)`` makes is checked to fit
    into its memory (:func:`check_model_memory`; parameters counted without allocating them) and
    ``load_data(cfg, continuing)`` (the recipe's data: pools, corpus; ``continuing``: a checkpoint will
    be resumed) runs with the final config, so a missing or bad data folder leaves no run folder behind;
    its result is :attr:`RecipeRun.data`.

    Under torchrun (:mod:`fastweights.train.distributed`) rank 0 does all of the above; the other ranks
    wait for its final config (or its error, raised there as ``RankStopped``), then load their own
    data. Every rank gets its share of the batch and its own seed (:class:`RecipeRun`).
    """
    run_dir = Path(run_dir)
    loaded: list[Any] = [None]
    w = distributed.setup(resolve_device(cfg.device))

    def check_all(c: Any) -> None:
        device = resolve_device(c.device)
        local = distributed.rank_config(c, w)
        if build is not None:
            check_model_memory(local, build, device, training=True)
            check_batch_memory(local, device)
        if load_data is not None:
            loaded[0] = load_data(local, resume and CheckpointManager(run_dir).exists("latest"))

    if w.main:
        try:
            cfg = prepare_run(
                cfg,
                run_dir,
                resume=resume,
                command=command,
                check=check_all,
                overrides=overrides,
                force=force,
            )
        except Exception as err:
            distributed.broadcast_object({"error": f"{type(err).__name__}: {err}"}, w)
            raise
        distributed.broadcast_object({"cfg": cfg}, w)
    else:
        received = distributed.broadcast_object(None, w)
        if "error" in received:
            raise distributed.RankStopped(f"rank 0 stopped: {received['error']}")
        cfg = received["cfg"]
        check_all(cfg)
    local = distributed.rank_config(cfg, w)
    t = local.train
    if t.threads:
        torch.set_num_threads(t.threads)
    torch.manual_seed(t.seed)
    return RecipeRun(
        local,
        run_dir,
        distributed.rank_device(resolve_device(cfg.device), w),
        loaded[0],
        resume,
        cfg,
    )


def fit_run(
    run: RecipeRun,
    model: torch.nn.Module,
    step_fn: Callable[[int], tuple[torch.Tensor, dict[str, Any]]],
    validate_fn: Callable[[], dict[str, float]],
    *,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    selection: Selection,
    description: str = "training",
    postfix: tuple[str, ...] = (),
) -> dict[str, Any]:
    """:func:`fastweights.train.loop.fit` of a prepared run: the loop settings of ``run.cfg.train`` (a
    :class:`~fastweights.train.loop.LoopConfig`), resume as ``start_run`` decided, ``run.state``,
    ``run.records`` and the saved config in every checkpoint, the best checkpoint chosen by
    ``selection`` (the recipe's :class:`~fastweights.recipes.contract.Selection`).

    Returns:
        ``{"step", "minutes", **last validation record}``.
    """
    return fit(
        run.run_dir,
        model=model,
        optimizer=optimizer,
        scheduler=scheduler,
        step_fn=step_fn,
        validate_fn=validate_fn,
        loop=run.cfg.train,
        objective=selection.metric,
        minimize=selection.minimize,
        resume=run.resume,
        extra_state=run.state,
        metadata={"config": asdict(run.saved_cfg)},
        records=run.records or None,
        description=description,
        postfix=postfix,
        map_location=run.device,
    )


#: what a resume rewrites before it saves its first checkpoint (restored when it fails before that)
_RESUME_REWRITES = ("config.yaml", "command.txt", "metrics.jsonl")


def _file_states(folder: Path) -> dict[str, tuple[int, int, int]]:
    """``{relative path: (inode, size, mtime ns)}`` of every file below ``folder`` (lock file aside)."""
    out = {}
    for top, _, names in os.walk(folder):
        for name in names:
            path = Path(top) / name
            with contextlib.suppress(OSError):
                st = path.stat()
                out[str(path.relative_to(folder))] = (st.st_ino, st.st_size, st.st_mtime_ns)
    out.pop(LOCK_NAME, None)
    return out


@contextlib.contextmanager
def restored_on_failure(run_dir: Path) -> Iterator[None]:
    """A ``--resume`` that fails before it saved a checkpoint leaves ``run_dir`` byte-identical.

    Before the block, the files a resume rewrites before its first checkpoint (``config.yaml``,
    ``command.txt``, ``metrics.jsonl``, which the loop cuts back to the checkpoint) are read. When the
    block raises (any exception, Ctrl-C included) and nothing under ``checkpoints/`` changed, those files
    are written back as they were and the files and folders the block created (e.g. TensorBoard event
    files) are removed; once a checkpoint was saved the run has moved on and the folder is left as the
    checkpoint describes it. Best effort: a restore that fails is logged, and the block's own error is
    raised either way. Call it holding the folder's lock.
    """
    run_dir = Path(run_dir)
    before = _file_states(run_dir)
    dirs = {Path(top) for top, _, _ in os.walk(run_dir)}
    saved = {n: (run_dir / n).read_bytes() for n in _RESUME_REWRITES if n in before}
    try:
        yield
    except BaseException:
        after = _file_states(run_dir)
        progress = any(
            after.get(k) != before.get(k) for k in {*before, *after} if Path(k).parts[:1] == ("checkpoints",)
        )
        if not progress:
            try:
                _restore(run_dir, saved, before, after, dirs)
            except OSError as err:
                log.warning("%s: could not restore the folder after the failed --resume (%s)", run_dir, err)
        raise


def _restore(
    run_dir: Path,
    saved: dict[str, bytes],
    before: dict[str, tuple[int, int, int]],
    after: dict[str, tuple[int, int, int]],
    dirs: set[Path],
) -> None:
    """Put back the ``saved`` files that changed and remove the files and folders created since."""
    for name, data in saved.items():
        if after.get(name) != before[name] and (run_dir / name).read_bytes() != data:
            atomic_write_bytes(run_dir / name, data)
    for name in sorted(set(after) - set(before)):
        (run_dir / name).unlink(missing_ok=True)
    for top, _, _ in sorted(os.walk(run_dir), key=lambda t: -len(Path(t[0]).parts)):
        if Path(top) not in dirs:
            with contextlib.suppress(OSError):
                Path(top).rmdir()


_TRAIN_DOC = """

    Args:
        cfg: the recipe's config (validated when it was built).
        run_dir: the run folder (``config.yaml``, ``command.txt``, ``metrics.jsonl``, ``checkpoints/``).
        resume: continue the run in ``run_dir`` exactly (its saved config; ``overrides`` may change
            only :data:`~fastweights.recipes.run.RESUME_OVERRIDABLE`).
        command: the command line recorded in ``command.txt``.
        overrides: the ``key=value`` items given with ``resume``.
        force: start over in a folder that holds a run.

    Returns:
        ``{"step", "minutes", **last validation record}``.

    Raises:
        FileExistsError: if ``run_dir`` already holds a run and neither ``resume`` nor ``force`` is set.
        RunFolderError: if another process holds ``run_dir`` or it cannot be resumed (the message says why).
        ValueError: for overrides that may not change on resume, or data the recipe refuses.
        FileNotFoundError: for a missing data folder or file (nothing is written then).
    """


def train_verb(
    fit_recipe: Callable[[RecipeRun], dict[str, Any]],
    *,
    load_data: Callable[[Any, bool], Any] | None = None,
    build: Callable[[Any], torch.nn.Module] | None = None,
    doc: str | None = None,
) -> Callable[..., dict[str, Any]]:
    """The ``train`` function of a recipe module: the run folder's lock, :func:`start_run` (guards,
    config checks, the model's memory, ``load_data`` before anything is written) and then
    ``fit_recipe(run)``; a ``--resume`` that fails before it saved a checkpoint leaves the folder as it
    was (:func:`restored_on_failure`).

    Args:
        fit_recipe: builds the model and trains it (usually through :func:`fit_run`).
        load_data: the recipe's data for the final config (see :func:`start_run`).
        build: the recipe's ``build_model``: its parameters are counted (on the ``meta`` device) and
            refused before anything is written when they cannot fit (:func:`check_model_memory`).
        doc: the first part of the returned function's docstring (default: ``fit_recipe``'s).
    """

    @locks_run_dir
    def train(
        cfg: Any,
        run_dir: Path,
        *,
        resume: bool = False,
        command: str | None = None,
        overrides: list[str] | None = None,
        force: bool = False,
    ) -> dict[str, Any]:
        guard = (
            restored_on_failure(run_dir) if resume and distributed.world().main else contextlib.nullcontext()
        )
        with guard:
            run = start_run(
                cfg,
                run_dir,
                resume=resume,
                command=command,
                overrides=overrides,
                force=force,
                load_data=load_data,
                build=build,
            )
            return fit_recipe(run)

    train.__doc__ = (doc or fit_recipe.__doc__ or "").rstrip() + _TRAIN_DOC
    train.__module__ = fit_recipe.__module__
    return train


_EVALUATE_DOC = """

    Args:
        run_dir: a run folder written by ``train`` (or an ``export`` copy).
        which: the checkpoint, ``"best"`` or ``"latest"``.
        overrides: ``eval.*`` (or other) ``key=value`` items applied to the run's saved config.
        command: the command recorded as ``results.json`` ``run.eval_command``.
        out_dir: where ``results.json``, ``report.md`` and ``plots/`` go (default ``run_dir``; the
            training log is copied there for the curves).
        force: write into an ``out_dir`` that holds another run or other files.

    Returns:
        The results (``run`` section + the recipe's sections), as written to ``results.json``.

    Raises:
        FileNotFoundError: if ``run_dir`` has no ``config.yaml`` or no such checkpoint.
        RunFolderError: if ``out_dir`` holds another run or other files (unless ``force``), another
            process holds it, or the checkpoint is damaged.
        ValueError: for overrides the config refuses or data the recipe cannot evaluate on.
    """


def evaluate_verb(
    measure: Callable[[Any, dict[str, Any], torch.nn.Module, torch.device], dict[str, Any]],
    *,
    config_cls: type,
    build: Callable[[Any], torch.nn.Module],
    write_report: Callable[[dict[str, Any], Path], Path],
    selection: Selection,
    doc: str,
    model_name: Callable[[Any], str] | None = None,
) -> Callable[..., dict[str, Any]]:
    """The ``evaluate`` function of a recipe module: the output folder's lock and guard, the trained
    model (:func:`load_trained`, in eval mode), ``measure(cfg, checkpoint, model, device)`` → the
    recipe's result sections (a ``"run"`` entry adds fields to the run section), the run summary with
    the evaluation time and ``selected_on`` (``selection.record``: which validation metric chose the
    checkpoint, and its value), then ``results.json`` + ``write_report``
    (:func:`~fastweights.recipes.reporting.save_evaluation`).
    """

    @locks_eval_output
    def evaluate(
        run_dir: Path,
        *,
        which: str = "best",
        overrides: list[str] | None = None,
        command: str | None = None,
        out_dir: Path | None = None,
        force: bool = False,
    ) -> dict[str, Any]:
        run_dir = Path(run_dir)
        cfg, state, model, device = load_trained(run_dir, config_cls, build, which, overrides)
        model.eval()
        t0 = time.monotonic()
        sections = measure(cfg, state, model, device)
        run = {
            **run_summary(cfg, run_dir, state, which, command, model_name=model_name and model_name(cfg)),
            "selected_on": selection.record(state, which, cfg),
            **sections.pop("run", {}),
            "eval_minutes": (time.monotonic() - t0) / 60,
        }
        return save_evaluation({"run": run, **sections}, run_dir, out_dir, write_report)

    evaluate.__doc__ = doc.rstrip() + _EVALUATE_DOC
    evaluate.__module__ = measure.__module__
    return evaluate


def load_trained(
    run_dir: Path, config_cls: type, build: Any, which: str = "best", overrides: list[str] | None = None
) -> tuple[Any, dict[str, Any], torch.nn.Module, torch.device]:
    """``(config, checkpoint, model with its weights, device)`` of a run folder, for evaluation.

    Raises:
        FileNotFoundError: if ``run_dir`` has no ``config.yaml`` or no such checkpoint.
        RunFolderError: if the checkpoint is damaged.
        ValueError: if the model cannot fit into the device's memory (:func:`check_model_memory`).
    """
    cfg, state = load_run(Path(run_dir), config_cls, which, overrides)
    if cfg.train.threads:
        torch.set_num_threads(cfg.train.threads)
    device = resolve_device(cfg.device)
    check_model_memory(cfg, build, device, training=False)
    model = build(cfg).to(device)
    model.load_state_dict(state["model"])
    return cfg, state, model, device


def export_verb(
    name: str,
    *,
    config_cls: type,
    selection: Selection,
    headline: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
    card_sections: CardSections | None = None,
) -> Callable[..., Path]:
    """The ``export`` function of a recipe module: :func:`export` with the recipe's config class,
    selection, evaluation headline and model-card sections."""

    def export_run(run_dir: Path, out_dir: Path, *, which: str = "best", force: bool = False) -> Path:
        return export(
            run_dir,
            out_dir,
            which=which,
            force=force,
            recipe=name,
            config_cls=config_cls,
            selection=selection,
            headline=headline,
            card_sections=card_sections,
        )

    export_run.__doc__ = export.__doc__
    return export_run


def export(
    run_dir: Path,
    out_dir: Path,
    *,
    which: str = "best",
    force: bool = False,
    recipe: str,
    config_cls: type,
    selection: Selection,
    headline: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
    card_sections: CardSections | None = None,
) -> Path:
    """Write a shareable copy of a run's ``which`` checkpoint in the field's format
    (:mod:`fastweights.train.model_files`): ``model.safetensors`` (the weights only, no optimiser),
    ``config.json`` (the full config, steps, ``records`` such as ``init_steps``, the selection metric
    and its value), a ``README.md`` model card (with the source run's evaluation table when its
    ``results.json`` evaluated this checkpoint) and the run's ``metrics.jsonl`` / ``command.txt``.
    Returns the path of ``model.safetensors``. ``run_dir`` may itself be an export (re-exported as is).

    ``out_dir`` must be new or empty (``force``: overwrite whatever it holds, even ``run_dir`` itself;
    an earlier export's ``checkpoints/`` there are removed); it is locked while written.

    Raises:
        FileNotFoundError: if ``run_dir`` has no such checkpoint.
        RunFolderError: if ``out_dir`` holds a run or other files (without ``force``), another process
            holds it, or the checkpoint is damaged.
        UnsafeFileError: if the checkpoint holds pickled objects that could run code (not read).
    """
    run_dir, out_dir = Path(run_dir), Path(out_dir)
    with output_folder(out_dir, source=run_dir, force=force, purpose="export"):
        cfg, state = load_run(run_dir, config_cls, which)
        selected_on = selection.record(state, state.get("exported_from", which), cfg)
        records = dict(state.get("records") or {})
        if "init_steps" not in records and getattr(cfg.train, "init_from", None) == "":
            records["init_steps"] = 0  # a run from scratch (copies of older versions did not record it)
        state = {**state, "records": records}
        card = model_card(
            recipe=recipe,
            cfg=cfg,
            state=state,
            which=which,
            selected_on=selected_on,
            source_dir=run_dir,
            headline=headline,
            sections=card_sections(cfg) if card_sections is not None else [],
        )
        path = write_export(
            out_dir,
            recipe=recipe,
            config=json.loads(json.dumps(asdict(cfg))),
            state=state,
            which=state.get("exported_from", which),
            selected_on=selected_on,
            source_dir=run_dir,
            card=card,
        )
        if force and not _same_folder(out_dir, run_dir):  # what an earlier export of the old format left
            for old in ("best.pt", "latest.pt"):
                (out_dir / "checkpoints" / old).unlink(missing_ok=True)
    return path


def _same_folder(a: Path, b: Path) -> bool:
    return a.resolve() == b.resolve()
