"""Kill -9 at any instant, then ``--resume``: the same final weights and the same metrics log as an
uninterrupted run (ACL, few-shot and RL smoke presets on CPU, one thread)."""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import sys
from pathlib import Path

import pytest
import torch

from fastweights import io
from fastweights.cli import main
from fastweights.recipes import cl_baselines
from fastweights.recipes.cl_baselines import report as cb_report
from fastweights.train import checkpoint


def _die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def _in_fork(target, *args) -> int:
    """Run ``target(*args)`` in a child forked from this (already imported) test process and return its
    exit code (``-SIGKILL`` when it killed itself). A fork starts in milliseconds where a fresh
    interpreter spends seconds importing torch; the kill is just as real: the child's open files, its
    half-written temporary files and its run folder are what a ``kill -9`` leaves."""
    proc = multiprocessing.get_context("fork").Process(target=target, args=args)
    proc.start()
    proc.join()
    return proc.exitcode


def _train_until_killed(kind: str, nth: int, args: list[str]) -> None:
    """The CLI with a hook that SIGKILLs the process at the ``nth`` checkpoint file write (before it,
    in its middle — leaving a partial temporary file — or after it) or right after the ``nth`` log line.
    Run in a forked child only (it patches the modules of that process)."""
    count = {"save": 0, "log": 0}
    real_save, real_log = checkpoint.atomic_torch_save, io.JsonlLogger.log

    def save(obj, path):
        count["save"] += 1
        hit = count["save"] == nth
        if hit and kind == "before-save":
            _die()
        if hit and kind == "inside-save":
            path.parent.mkdir(parents=True, exist_ok=True)
            (path.parent / f".{path.name}.killed.tmp").write_bytes(b"half a checkpoint")
            _die()
        real_save(obj, path)
        if hit and kind == "after-save":
            _die()

    def log(self, **record):
        real_log(self, **record)
        count["log"] += 1
        if kind == "after-log" and count["log"] == nth:
            _die()

    checkpoint.atomic_torch_save, io.JsonlLogger.log = save, log
    sys.exit(main(args))


def _args(recipe, run, cache):
    if recipe == "rl-procgen":  # the real ProcGen games (the optional extra)
        return ["rl", "train", "--preset", "smoke-procgen", "--run-dir", str(run), "train.threads=1"]
    data = [] if recipe == "rl" else [f"data.cache_dir={cache}"]  # rl's environments have no data cache
    return [recipe, "train", "--preset", "smoke", "--run-dir", str(run), *data, "train.threads=1"]


def _killed(args, kind, nth):
    code = _in_fork(_train_until_killed, kind, nth, args)
    assert code == -signal.SIGKILL, (kind, nth, code)


def _log(run):
    lines = (run / "metrics.jsonl").read_text().splitlines()
    return [{k: v for k, v in json.loads(line).items() if k != "minutes"} for line in lines]


def _assert_same_run(ref, run):
    for which in ("latest", "best"):
        a = torch.load(ref / "checkpoints" / f"{which}.pt", weights_only=False)
        b = torch.load(run / "checkpoints" / f"{which}.pt", weights_only=False)
        assert a["step"] == b["step"] and a["best"] == b["best"], which
        assert a["model"].keys() == b["model"].keys()
        for k, v in a["model"].items():
            assert torch.equal(v, b["model"][k]), (which, k)
    assert _log(run) == _log(ref)
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["best.pt", "latest.pt"]


# Writes of a fresh smoke run (6 steps, validation every 3, checkpoint every 2): step 0 latest (1),
# step 2 latest (2), step 3 log line (1), best (3), latest (4), step 4 latest (5), step 6 log line (2) …
# Each kill below is counted from the start of that (resumed) process.
_CHAINS = {
    "acl": [
        ("after-log", 1),  # step-3 line written, its checkpoints not: resumes at 2, the line is redone
        ("after-save", 1),  # step-3 best.pt written, latest.pt not (between the two writes)
        ("inside-save", 2),  # killed in the middle of the step-3 latest.pt
        ("before-save", 3),  # step-4 latest.pt not written: resumes at 3
        ("after-log", 1),  # step-6 line written, its checkpoints not: resumes at 4
    ],
    "fewshot": [("after-save", 3), ("after-log", 1), ("inside-save", 1)],
    # the environments, the carried core state and the action generator are in every checkpoint
    "rl": [("after-log", 1), ("inside-save", 2), ("before-save", 3), ("after-log", 1)],
    # smoke-procgen (4 steps, validation and checkpoints every 2): ProcGen's own state serialisation
    "rl-procgen": [("after-log", 1), ("before-save", 2)],
}


@pytest.mark.slow
@pytest.mark.parametrize("recipe", ["acl", "fewshot", "rl", "rl-procgen"])
def test_kill_at_any_point_then_resume_equals_the_uninterrupted_run(tmp_path, recipe, data_cache):
    if recipe == "rl-procgen":
        pytest.importorskip("procgen", reason="procgen2 (the optional extra .[rl]) is not installed")
    cache = data_cache
    ref, run = tmp_path / "ref", tmp_path / "run"
    assert main(_args(recipe, ref, cache)) == 0
    for i, (kind, nth) in enumerate(_CHAINS[recipe]):
        _killed([*_args(recipe, run, cache), *(["--resume"] if i else [])], kind, nth)
    assert main([*_args(recipe, run, cache), "--resume"]) == 0
    _assert_same_run(ref, run)


# cl-baselines: SIGKILL at the n-th cell write (before it, in its middle — a partial temporary file —
# or after it); the resumed run ends with the uninterrupted run's numbers.
def _run_until_cell_kill(kind: str, nth: int, args: list[str]) -> None:
    """``fastweights cl-baselines run`` that SIGKILLs itself at the ``nth`` cell write (forked child only)."""
    count = [0]
    real = cl_baselines.atomic_write_json

    def write(path, obj):
        count[0] += 1
        if count[0] == nth and kind == "before":
            _die()
        if count[0] == nth and kind == "inside":
            (path.parent / f".{path.name}.killed.tmp").write_text("half a cell")
            _die()
        real(path, obj)
        if count[0] == nth and kind == "after":
            _die()

    cl_baselines.atomic_write_json = write
    sys.exit(main(args))


_CB_SMALL = ["methods=[sgd,l2]", "runs=2", "scenarios=[domain,class-2task]", "budgets=[fewshot,full]"]


def _cb_args(run, *extra):
    return ["cl-baselines", "run", "--preset", "smoke", "--run-dir", str(run), *_CB_SMALL, *extra]


def _cb_numbers(run):
    res = json.loads((run / "results.json").read_text())
    return {
        k: {m: {f: v for f, v in c.items() if f != "seconds"} for m, c in row.items()}
        for k, row in res["cells"].items()
    }


def _no_plots(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests compare numbers: the runs in this process skip drawing the report's plots (most of a
    smoke run's time; the plots are tested in tests/recipes/cl_baselines/test_cl_baselines.py)."""
    monkeypatch.setattr(cb_report, "_plots", lambda results, plots: [])


@pytest.fixture(scope="module")
def cb_reference(tmp_path_factory):
    """The numbers of an uninterrupted cl-baselines run in one process (``workers=2`` gives the same
    numbers: tests/recipes/cl_baselines/test_cl_baselines.py), shared by the two kill tests below."""
    ref = tmp_path_factory.mktemp("cb") / "ref"
    with pytest.MonkeyPatch.context() as mp:
        _no_plots(mp)
        assert main(_cb_args(ref)) == 0
    return _cb_numbers(ref)


@pytest.mark.slow
def test_cl_baselines_killed_at_cell_writes_then_resumed_equals_the_uninterrupted_run(
    tmp_path, cb_reference, monkeypatch
):
    run = tmp_path / "run"
    _no_plots(monkeypatch)
    for i, (kind, nth) in enumerate([("after", 3), ("inside", 2), ("before", 4)]):
        code = _in_fork(_run_until_cell_kill, kind, nth, _cb_args(run, *(["--resume"] if i else [])))
        assert code == -signal.SIGKILL, (kind, nth, code)
    assert main([*_cb_args(run), "--resume"]) == 0
    assert _cb_numbers(run) == cb_reference
    assert not list(run.rglob(".*.tmp"))


def _children(pid: int) -> list[int]:
    path = Path(f"/proc/{pid}/task/{pid}/children")
    return [int(c) for c in path.read_text().split()] if path.exists() else []


def _alive(pids: list[int]) -> list[int]:
    """The processes of ``pids`` still running (neither gone nor a zombie waiting to be reaped)."""
    alive = []
    for pid in pids:
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except (FileNotFoundError, ProcessLookupError):
            continue
        if "zombie" not in status:
            alive.append(pid)
    return alive


def _cli(args: list[str]) -> None:
    sys.exit(main(args))


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc and PR_SET_PDEATHSIG are Linux")
def test_cl_baselines_workers_die_with_a_killed_run_and_resume_matches(tmp_path, cb_reference, monkeypatch):
    import time

    run = tmp_path / "run"
    # the run's parent process is forked from this one (as in _in_fork: no interpreter start-up); its
    # workers are spawned interpreters as always
    proc = multiprocessing.get_context("fork").Process(target=_cli, args=(_cb_args(run, "workers=2"),))
    proc.start()
    deadline = time.time() + 120
    while not list((run / "cells").glob("*/*/*/[!_]*.json")) and time.time() < deadline:
        time.sleep(0.05)
    workers = _children(proc.pid)
    proc.kill()
    proc.join()
    assert proc.exitcode == -signal.SIGKILL
    deadline = time.time() + 10
    while _alive(workers) and time.time() < deadline:  # dead: gone, or a zombie its new parent reaps later
        time.sleep(0.05)
    assert workers and not _alive(workers)
    _no_plots(monkeypatch)
    # in this process (workers=1, which a resume may change): the cells the workers wrote are kept
    assert main([*_cb_args(run), "--resume", "workers=1"]) == 0
    assert _cb_numbers(run) == cb_reference
