"""``fastweights cl-baselines run``: classic continual-learning baselines on the split streams of the ACL
evaluation, in the same harness (the ACL paper's comparison, Irie et al. 2025, Table 3, whose baseline
rows come from Hsu et al. 2018).

For every benchmark × scenario variant × budget × method (one *cell*):

1. the training settings (epochs, batch size, learning rate) are chosen per optimizer by fine-tuning on
   the benchmark's validation copy (held-out *training* images as queries; ``search.runs`` runs per grid
   point, score = mean ACC) — once per benchmark × variant × budget × optimizer;
2. the method's hyper-parameters (``search.grids``) are chosen the same way with those settings;
3. the chosen method is trained on ``runs`` runs of the test stream (few-shot run ``r``: the ``r``-th
   block of ``data.k_shot`` demonstrations per class, as for ACL; seed ``seed * 1000 + r`` for the
   learner's initialisation and the mini-batch order) and summarised by
   :func:`fastweights.cl.metrics.summarize_runs` (ACC, BWT, forgetting, learning accuracy; mean ± std).

Each cell is written atomically to ``<run_dir>/cells/<benchmark>/<variant>/<budget>/<method>.json`` as it
completes; ``--resume`` skips the cells already there (every cell is deterministic for its seed, so a
resumed run gives the same numbers as an uninterrupted one; only the recorded ``seconds`` differ).
``results.json``, ``report.md`` and ``plots/`` are written at the end.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import itertools
import json
import logging
import multiprocessing
import os
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fastweights.cl.baselines import STRATEGIES, Strategy
from fastweights.cl.baselines.learners import build_learner
from fastweights.cl.baselines.trainer import TrainSettings, fit_stream
from fastweights.cl.metrics import average_accuracy, matrix_to_json, summarize_runs
from fastweights.io import atomic_write_json
from fastweights.recipes.cl_baselines.config import BaselinesConfig, method_optimizer, method_strategy
from fastweights.recipes.cl_baselines.data import BENCHMARK_NAMES, Streams, load_benchmark, n_outputs
from fastweights.recipes.run import prepare_run
from fastweights.train.run_folder import run_lock

__all__ = ["run", "grid_points", "run_seed", "make_strategy", "fit_runs", "cell_path", "RESUME_OVERRIDABLE"]

log = logging.getLogger(__name__)

#: config keys a ``--resume`` may change (they do not change any number)
RESUME_OVERRIDABLE = ("threads", "workers")
_OUTPUTS = ("cells", "results.json", "report.md", "plots")


def grid_points(grid: dict[str, list[Any]]) -> list[dict[str, Any]]:
    """Every combination of a ``{name: [values]}`` grid, in the grid's key order (``[{}]`` for ``{}``)."""
    keys = list(grid)
    return [dict(zip(keys, values, strict=True)) for values in itertools.product(*(grid[k] for k in keys))]


def run_seed(cfg: BaselinesConfig, run: int) -> int:
    """The seed of run ``run`` (initialisation and mini-batch order): ``cfg.seed * 1000 + run``; the same
    for every method, so methods are compared on the same initialisations."""
    return cfg.seed * 1000 + run


def fit_runs(
    cfg: BaselinesConfig,
    streams: Streams,
    *,
    variant: str,
    budget: str,
    method: str,
    settings: TrainSettings,
    hparams: dict[str, Any],
    runs: int,
    validation: bool = False,
) -> list[np.ndarray]:
    """The accuracy matrices ``[T, T]`` of ``runs`` runs of one method (a fresh learner and strategy per
    run). Raises ``ValueError`` naming ``search.grids.<method>`` for a hyper-parameter the strategy
    refuses."""
    data = streams.data
    out = []
    for r in range(runs):
        tasks = streams.get(variant, budget, r, validation)
        seed = run_seed(cfg, r)
        torch.manual_seed(seed)
        model = build_learner(
            cfg.learner, channels=data.channels, image_size=cfg.data.image_size, n_out=n_outputs(variant)
        )
        out.append(fit_stream(model, tasks, make_strategy(method, hparams), settings, seed=seed, upper=False))
    return out


def make_strategy(method: str, hparams: dict[str, Any]) -> Strategy:
    """A fresh strategy of ``method`` with ``hparams``. Raises ``ValueError`` naming
    ``search.grids.<method>`` for a hyper-parameter the strategy refuses or does not know."""
    try:
        return STRATEGIES[method_strategy(method)](**hparams)
    except (TypeError, ValueError) as err:
        raise ValueError(f"search.grids.{method}: {err}") from None


def _val_score(
    cfg: BaselinesConfig,
    streams: Streams,
    variant: str,
    budget: str,
    method: str,
    settings: TrainSettings,
    hparams: dict[str, Any],
) -> float:
    """Mean ACC of ``search.runs`` runs on the validation streams: the score of one grid point."""
    mats = fit_runs(
        cfg,
        streams,
        variant=variant,
        budget=budget,
        method=method,
        settings=settings,
        hparams=hparams,
        runs=cfg.search.runs,
        validation=True,
    )
    return float(np.mean([average_accuracy(R) for R in mats]))


def cell_path(run_dir: Path, benchmark: str, variant: str, budget: str, name: str) -> Path:
    """Where one cell's JSON lives in a run folder."""
    return Path(run_dir) / "cells" / benchmark / variant / budget / f"{name}.json"


def _settings_problem(cell: Any, optimizer: str) -> str | None:
    """What is wrong with a cached training-settings cell (``None``: it is one, for ``optimizer``)."""
    if not isinstance(cell, dict):
        return f"expected a JSON object, got {type(cell).__name__}"
    if cell.get("optimizer") != optimizer:
        return f"expected optimizer {optimizer!r}, got {cell.get('optimizer')!r}"
    if not isinstance(cell.get("search"), list) or not isinstance(cell.get("best"), dict):
        return "expected the keys best (an object) and search (a list)"
    try:
        TrainSettings(**cell["best"])
    except (TypeError, ValueError) as err:
        return f"best: not training settings ({err})"
    return None


def _method_problem(cell: Any, method: str) -> str | None:
    """What is wrong with a cached method cell (``None``: it is one, for ``method``)."""
    if not isinstance(cell, dict):
        return f"expected a JSON object, got {type(cell).__name__}"
    if cell.get("method") != method:
        return f"expected method {method!r}, got {cell.get('method')!r}"
    kinds = {"settings": dict, "hparams": dict, "search": list, "test": dict, "R_runs": list}
    wrong = [k for k, kind in kinds.items() if not isinstance(cell.get(k), kind)]
    if wrong:
        return f"expected the keys {', '.join(kinds)}; missing or of the wrong type: {', '.join(wrong)}"
    acc, R = cell["test"].get("ACC"), cell["test"].get("R")
    if not (isinstance(acc, dict) and all(isinstance(acc.get(k), int | float) for k in ("mean", "std"))):
        return "test.ACC: expected an object with the numbers mean and std"
    if not isinstance(R, list):
        return "test.R: expected the mean accuracy matrix (a list)"
    return None


def _cached(
    path: Path, compute: Callable[[], dict[str, Any]], problem: Callable[[Any], str | None]
) -> dict[str, Any]:
    """The cell at ``path`` if a previous (killed) run wrote it, else ``compute()`` written atomically.

    The cells are a cache: one that is damaged (not JSON) or not a cell of this job (``problem(cell)``
    says what is wrong) is logged as a warning naming it and recomputed; the new cell replaces it
    atomically."""
    if path.is_file():
        try:
            cell = json.loads(path.read_text(encoding="utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as err:
            log.warning("%s is damaged (%s); recomputing it", path, err)
        else:
            wrong = problem(cell)
            if wrong is None:
                return cell  # type: ignore[no-any-return]
            log.warning("%s is not a cell of this run (%s); recomputing it", path, wrong)
    start = time.perf_counter()
    cell = compute()
    cell["seconds"] = round(time.perf_counter() - start, 2)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_json(path, cell)
    return cell


def _settings_cell(cfg: BaselinesConfig, streams: Streams, variant: str, budget: str, optimizer: str) -> dict:
    grid = getattr(cfg.train, budget)
    lrs = grid.lr if optimizer == "adam" else grid.sgd_lr
    points = [
        TrainSettings(optimizer=optimizer, lr=lr, epochs=e, batch_size=b, min_steps=grid.min_steps)
        for e, b, lr in itertools.product(grid.epochs, grid.batch_size, lrs)
    ]
    # fine-tuning with that optimizer (the "sgd" / "adam" rows) scores each point; one point: no search
    table = [
        {
            "settings": vars(st),
            "val_ACC": _val_score(cfg, streams, variant, budget, optimizer, st, {})
            if len(points) > 1
            else None,
        }
        for st in points
    ]
    best = max(table, key=lambda row: -1.0 if row["val_ACC"] is None else row["val_ACC"])
    return {"optimizer": optimizer, "best": best["settings"], "search": table}


def _method_cell(
    cfg: BaselinesConfig, streams: Streams, variant: str, budget: str, method: str, settings: TrainSettings
) -> dict[str, Any]:
    points = grid_points(cfg.search.grids.get(method, {}))
    search = []
    if len(points) > 1:
        for hp in points:
            search.append(
                {"hparams": hp, "val_ACC": _val_score(cfg, streams, variant, budget, method, settings, hp)}
            )
        hparams = max(search, key=lambda row: row["val_ACC"])["hparams"]
    else:
        hparams = points[0]
    mats = fit_runs(
        cfg,
        streams,
        variant=variant,
        budget=budget,
        method=method,
        settings=settings,
        hparams=hparams,
        runs=cfg.runs,
    )
    return {
        "method": method,
        "strategy": method_strategy(method),
        "settings": vars(settings),
        "hparams": make_strategy(method, hparams).hparams(),
        "search": search,
        "test": summarize_runs(mats),
        "R_runs": [matrix_to_json(R) for R in mats],
    }


def _check_data(cfg: BaselinesConfig) -> dict[str, Streams]:
    """Every benchmark loaded (and its validation copy carved) before anything is trained."""
    out = {}
    for name in cfg.data.benchmarks:
        data = load_benchmark(cfg.data, name)
        if cfg.learner == "conv4" and data.image_size % 16:
            raise ValueError(
                f"data.image_size: expected a multiple of 16 for learner conv4, got {data.image_size}"
            )
        out[name] = Streams(data, cfg.data, cfg.search.val_fraction)
    for method in cfg.methods:  # a bad grid value fails now, not after an hour of training
        for hp in grid_points(cfg.search.grids.get(method, {})):
            make_strategy(method, hp)
    return out


_STREAMS: dict[tuple[str, str, float], Streams] = {}  # the benchmarks this process has loaded


def _die_with_parent() -> None:
    """Linux: a worker gets SIGKILL when the process that started it dies (even by ``kill -9``), so no
    orphan keeps writing cells into a run folder whose lock is gone."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    parent = multiprocessing.parent_process()
    if parent is not None and os.getppid() != parent.pid:  # it died before the line above
        os._exit(1)


def _worker_init(threads: int, spawned: bool = True) -> None:
    if spawned:
        _die_with_parent()
    if threads:
        torch.set_num_threads(threads)
    if spawned:  # a spawned worker starts without the CLI's logging setup
        logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")


def _streams(cfg: BaselinesConfig, bench: str) -> Streams:
    """The benchmark's streams, loaded once per process."""
    key = _streams_key(cfg, bench)
    if key not in _STREAMS:
        _STREAMS[key] = Streams(load_benchmark(cfg.data, bench), cfg.data, cfg.search.val_fraction)
    return _STREAMS[key]


def _streams_key(cfg: BaselinesConfig, bench: str) -> tuple[str, str, float]:
    return bench, repr(cfg.data), cfg.search.val_fraction


@dataclass(frozen=True)
class CellJob:
    """One cell to compute, sent to a worker process: a benchmark × variant × budget and either an
    optimizer (a training-settings cell, ``settings=None``) or a method with the training settings
    found for its optimizer."""

    run_dir: Path
    benchmark: str
    variant: str
    budget: str
    name: str  # the optimizer of a settings cell, the method of a method cell
    settings: tuple[tuple[str, Any], ...] | None = None  # a method cell's ``TrainSettings`` fields

    @property
    def stream(self) -> tuple[str, str, str]:
        """``(benchmark, variant, budget)``."""
        return self.benchmark, self.variant, self.budget

    @property
    def label(self) -> str:
        """``"<benchmark name>/<variant>/<budget>"``: the key of the cell in ``results.json``."""
        return f"{BENCHMARK_NAMES[self.benchmark]}/{self.variant}/{self.budget}"

    def longest_first(self) -> tuple[bool, bool, bool]:
        """Sort key: full budget, the large benchmarks and 5-task streams first."""
        return self.budget != "full", self.benchmark == "digits", self.variant == "class-2task"


def _settings_job(cfg: BaselinesConfig, job: CellJob) -> dict[str, Any]:
    """The training-settings cell of one benchmark × variant × budget for optimizer ``job.name``."""
    log.info("%s: training settings for %s", job.label, job.name)
    return _cached(
        cell_path(job.run_dir, job.benchmark, job.variant, job.budget, f"_settings-{job.name}"),
        functools.partial(
            _settings_cell, cfg, _streams(cfg, job.benchmark), job.variant, job.budget, job.name
        ),
        functools.partial(_settings_problem, optimizer=job.name),
    )


def _method_job(cfg: BaselinesConfig, job: CellJob) -> dict[str, Any]:
    """One method's cell (its hyper-parameter search and test runs)."""
    assert job.settings is not None, "a method cell needs its training settings"
    cell = _cached(
        cell_path(job.run_dir, job.benchmark, job.variant, job.budget, job.name),
        functools.partial(
            _method_cell,
            cfg,
            _streams(cfg, job.benchmark),
            job.variant,
            job.budget,
            job.name,
            TrainSettings(**dict(job.settings)),
        ),
        functools.partial(_method_problem, method=job.name),
    )
    log.info("%s: %s ACC %.1f", job.label, job.name, 100 * cell["test"]["ACC"]["mean"])
    return cell


def _map(cfg: BaselinesConfig, fn: Any, jobs: list[CellJob], pool: Any) -> list[Any]:
    """``fn(cfg, job)`` for every job, in ``pool`` (longest first) or in this process (``pool=None``);
    results in the order of ``jobs``."""
    if pool is None:
        return [fn(cfg, job) for job in jobs]
    futures = {
        i: pool.submit(fn, cfg, jobs[i])
        for i in sorted(range(len(jobs)), key=lambda i: jobs[i].longest_first())
    }
    return [futures[i].result() for i in range(len(jobs))]


def _measure(cfg: BaselinesConfig, run_dir: Path, pool: Any) -> dict[str, Any]:
    """Every cell, as ``{"<benchmark>/<variant>/<budget>": {method: cell}}``: first the training settings
    of every benchmark × variant × budget × optimizer, then every method's cell with them (each phase
    spread over ``pool``'s workers when there is a pool)."""
    streams = [(b, v, g) for b in cfg.data.benchmarks for v in cfg.scenarios for g in cfg.budgets]
    optimizers = sorted({method_optimizer(m, cfg.train.optimizer) for m in cfg.methods})
    setting_jobs = [CellJob(run_dir, *s, opt) for s in streams for opt in optimizers]
    found = {
        (*job.stream, job.name): cell["best"]
        for job, cell in zip(setting_jobs, _map(cfg, _settings_job, setting_jobs, pool), strict=True)
    }
    method_jobs = [
        CellJob(run_dir, *s, m, tuple(found[(*s, method_optimizer(m, cfg.train.optimizer))].items()))
        for s in streams
        for m in cfg.methods
    ]
    out: dict[str, Any] = {}
    for job, cell in zip(method_jobs, _map(cfg, _method_job, method_jobs, pool), strict=True):
        out.setdefault(job.label, {})[job.name] = cell
    return out


def _parallel(cfg: BaselinesConfig, run_dir: Path) -> dict[str, Any]:
    """:func:`_measure` with ``cfg.workers`` spawned processes (``cfg.threads`` torch threads each)."""
    from concurrent.futures import ProcessPoolExecutor

    ctx = multiprocessing.get_context("spawn")
    pool = ProcessPoolExecutor(cfg.workers, mp_context=ctx, initializer=_worker_init, initargs=(cfg.threads,))
    try:
        cells = _measure(cfg, run_dir, pool)
    except BaseException:
        pool.shutdown(wait=True, cancel_futures=True)
        raise
    pool.shutdown()
    return cells


def run(
    cfg: BaselinesConfig,
    run_dir: Path,
    *,
    resume: bool = False,
    force: bool = False,
    command: str | None = None,
    overrides: list[str] | None = None,
) -> dict[str, Any]:
    """Measure every cell of ``cfg`` into ``run_dir``; returns the results (also ``results.json``).

    Raises:
        FileExistsError: ``run_dir`` holds a run and neither ``resume`` nor ``force`` is given.
        RunFolderError: ``run_dir`` holds other files (without ``force``), is locked by another process,
            or cannot be resumed.
        ValueError / FileNotFoundError: bad config values, missing data (naming the key / folder).
    """
    from fastweights.recipes.cl_baselines.report import write_report

    run_dir = Path(run_dir)
    with run_lock(run_dir):
        loaded: dict[str, dict[str, Streams]] = {}
        for tmp in (run_dir / "cells").glob("**/.*.tmp"):  # cells of a killed run's atomic writes
            tmp.unlink(missing_ok=True)
        cfg = prepare_run(
            cfg,
            run_dir,
            resume=resume,
            force=force,
            command=command,
            overrides=overrides,
            check=lambda c: loaded.update(streams=_check_data(c)),
            overridable=RESUME_OVERRIDABLE,
            outputs=_OUTPUTS,
            checkpointed=False,
        )
        try:
            if cfg.workers == 1:
                _worker_init(cfg.threads, spawned=False)
                for bench, streams in loaded.pop("streams").items():
                    _STREAMS[_streams_key(cfg, bench)] = streams
                cells = _measure(cfg, run_dir, None)
            else:
                loaded.clear()  # each worker loads the data it needs
                cells = _parallel(cfg, run_dir)
        finally:
            _STREAMS.clear()
        results = {"config": json.loads(json.dumps(_plain(cfg))), "cells": cells}
        atomic_write_json(run_dir / "results.json", results)
        write_report(results, run_dir)
    return results


def _plain(cfg: BaselinesConfig) -> dict[str, Any]:
    from omegaconf import OmegaConf

    return OmegaConf.to_container(OmegaConf.structured(cfg))  # type: ignore[return-value]
