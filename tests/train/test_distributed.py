"""Data-parallel training on CPU with Gloo (2 processes): one step on 2 ranks x batch B/2 equals one
single-process step on batch B (same examples), ranks start from rank 0's weights, a 2-rank recipe run
resumes exactly, only rank 0 writes; plus the rank bookkeeping and its errors."""

from __future__ import annotations

import json
import multiprocessing
import os
import socket
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from fastweights.cli import main
from fastweights.layers import SRWMLayer
from fastweights.train import distributed
from fastweights.train.distributed import World
from fastweights.train.loop import LoopConfig, fit

SRC = Path(__file__).resolve().parents[2] / "src"


def _one_step(out: Path) -> None:
    """One optimiser step (SGD, lr 1) of a small SRWM classifier in float64 through ``fit``, on this
    rank's rows of a fixed batch; rank r initialises with seed r (fit must start every rank from rank
    0's weights)."""
    torch.set_num_threads(1)
    rank, size = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    g = torch.Generator().manual_seed(123)
    x = torch.randn(8, 7, 16, generator=g, dtype=torch.float64)
    y = torch.randint(0, 5, (8, 7), generator=g)

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.seq, self.head = SRWMLayer(16, 4), torch.nn.Linear(16, 5)

        def forward(self, v):
            return self.head(self.seq(v)[0])

    torch.manual_seed(rank)
    model = Model().double()
    per = 8 // size
    rows = slice(rank * per, (rank + 1) * per)
    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)

    def step_fn(step):
        return F.cross_entropy(model(x[rows]).reshape(-1, 5), y[rows].reshape(-1)), {}

    fit(
        out / "run",
        model=model,
        optimizer=opt,
        scheduler=sched,
        step_fn=step_fn,
        validate_fn=lambda: {"v": float(rank)},
        loop=LoopConfig(max_steps=1, val_every_steps=1),
        objective="v",
    )
    torch.save(model.state_dict(), out / f"final-{rank}.pt")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _as_rank(rank: int, size: int, port: int, target, args) -> None:
    if size > 1:  # the variables torchrun sets (fastweights.train.distributed reads them)
        os.environ.update(
            RANK=str(rank),
            WORLD_SIZE=str(size),
            LOCAL_RANK=str(rank),
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=str(port),
        )
    result = target(*args)
    sys.exit(result if isinstance(result, int) else 0)


def _preload() -> None:
    """Import here what every rank would otherwise import on its own first steps: ``torch._dynamo``
    (optimisers and the ``meta``-device model count load it, about a second), the recipes, matplotlib
    (whose fonts the glyph renderer looks up) and the CPU kernel where it is enabled. The forked ranks
    inherit them."""
    import matplotlib  # noqa: F401
    import torch._dynamo  # noqa: F401

    import fastweights.recipes.fewshot  # noqa: F401
    from fastweights.ops import srwm_cpu

    srwm_cpu.enabled()  # loads the kernel (FASTWEIGHTS_CPU_KERNEL=0: left unloaded, as in the ranks)


def _run_ranks(target, args: tuple, size: int) -> list[int]:
    """``target(*args)`` on ``size`` ranks, each a child forked from this test process with torchrun's
    environment variables (a fork starts in milliseconds where torchrun and its fresh interpreters spend
    seconds importing torch; ``_torchrun`` below launches the real thing), after :func:`_preload`.
    Returns the exit codes."""
    _preload()
    port = _free_port()
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_as_rank, args=(rank, size, port, target, args)) for rank in range(size)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=300)
    return [p.exitcode for p in procs]


@pytest.mark.slow
def test_two_ranks_with_half_batches_equal_one_process_with_the_whole_batch(tmp_path):
    one, two = tmp_path / "one", tmp_path / "two"
    one.mkdir()
    two.mkdir()
    assert _run_ranks(_one_step, (one,), 1) == [0]
    assert _run_ranks(_one_step, (two,), 2) == [0, 0]
    single = torch.load(one / "final-0.pt")
    rank0, rank1 = torch.load(two / "final-0.pt"), torch.load(two / "final-1.pt")
    for key, value in single.items():
        torch.testing.assert_close(rank0[key], value, rtol=1e-12, atol=1e-12)  # the same update
        torch.testing.assert_close(rank1[key], rank0[key], rtol=0, atol=0)  # identical on every rank
    # rank 0 wrote the log and the checkpoints, with both ranks' random streams; validation was rank 0's
    ckpt = torch.load(two / "run" / "checkpoints" / "latest.pt", weights_only=False)
    assert ckpt["world_size"] == 2 and len(ckpt["ranks"]) == 2
    records = [json.loads(line) for line in (two / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["v"] for r in records] == [0.0]


def _torchrun(args: list[str]) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
    cmd += ["-m", "fastweights.cli", *args]
    env = {**os.environ, "PYTHONPATH": str(SRC), "OMP_NUM_THREADS": "1"}
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)


def _log(run: Path) -> list[dict]:
    lines = (run / "metrics.jsonl").read_text().splitlines()
    return [{k: v for k, v in json.loads(line).items() if k != "minutes"} for line in lines]


@pytest.mark.slow
def test_a_two_rank_recipe_run_resumes_exactly(tmp_path, data_cache):
    cache = data_cache
    base = ["fewshot", "train", "--preset", "smoke", f"data.cache_dir={cache}", "train.threads=1"]
    full, split = tmp_path / "full", tmp_path / "split"
    res = _torchrun([*base, "--run-dir", str(full)])
    assert res.returncode == 0, res.stderr[-3000:]
    assert res.stdout.count("trained 6 steps") == 1  # rank 0 alone reports
    # the interrupted run and its resumption on forked ranks (the full run above used torchrun itself)
    assert _run_ranks(main, ([*base, "--run-dir", str(split), "train.max_steps=3"],), 2) == [0, 0]
    assert _run_ranks(main, ([*base, "--run-dir", str(split), "--resume", "train.max_steps=6"],), 2) == [0, 0]
    a = torch.load(full / "checkpoints" / "latest.pt", weights_only=False)
    b = torch.load(split / "checkpoints" / "latest.pt", weights_only=False)
    assert a["step"] == b["step"] == 6 and a["world_size"] == 2
    for key, value in a["model"].items():
        assert torch.equal(value, b["model"][key]), key
    assert _log(full) == _log(split)
    # the saved config keeps the global batch; the folder holds what rank 0 wrote and nothing else
    assert "batch_size: 4" in (full / "config.yaml").read_text()
    assert sorted(p.name for p in full.iterdir()) == [
        "checkpoints",
        "command.txt",
        "config.yaml",
        "metrics.jsonl",
    ]
    # resuming with another number of ranks is refused with one line
    code = main([*base, "--run-dir", str(full), "--resume", "train.max_steps=8"])
    assert code == 2


@dataclass
class _Train:
    batch_size: int = 8
    seed: int = 5


@dataclass
class _Env:
    num_envs: int = 8
    games: list = field(default_factory=lambda: ["a", "b"])


@dataclass
class _Cfg:
    train: _Train = field(default_factory=_Train)


@dataclass
class _RLTrain:
    seed: int = 5


@dataclass
class _RLCfg:
    train: _RLTrain = field(default_factory=_RLTrain)
    env: _Env = field(default_factory=_Env)


def test_rank_config_splits_the_batch_and_offsets_the_seed():
    cfg = _Cfg()
    assert distributed.rank_config(cfg, World()) is cfg
    local = distributed.rank_config(cfg, World(rank=1, size=4, local_rank=1))
    assert (local.train.batch_size, local.train.seed) == (2, 6) and cfg.train.batch_size == 8
    rl = distributed.rank_config(_RLCfg(), World(rank=1, size=2, local_rank=1))
    assert (rl.env.num_envs, rl.train.seed) == (4, 6)


@pytest.mark.parametrize(
    ("cfg", "size", "message"),
    [
        (_Cfg(), 3, "train.batch_size: expected a multiple of the 3 ranks"),
        (_RLCfg(), 3, "env.num_envs: expected a multiple of the 3 ranks"),
        (_RLCfg(), 8, "env.num_envs: expected at least 2 environments per rank"),
    ],
)
def test_rank_config_refuses_an_uneven_split(cfg, size, message):
    with pytest.raises(ValueError, match=message):
        distributed.rank_config(cfg, World(rank=0, size=size))


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"WORLD_SIZE": "two"}, "WORLD_SIZE: expected an integer"),
        ({"WORLD_SIZE": "2", "RANK": "2"}, r"RANK / WORLD_SIZE: expected 0 <= RANK < WORLD_SIZE, got 2 / 2"),
        ({"WORLD_SIZE": "0"}, "RANK / WORLD_SIZE"),
    ],
)
def test_bad_torchrun_variables_are_named(monkeypatch, env, message):
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    with pytest.raises(ValueError, match=message):
        distributed.world()


def test_without_torchrun_everything_is_single_process(monkeypatch):
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(key, raising=False)
    w = distributed.setup(torch.device("cpu"))
    assert w == World() and w.main and not w.distributed
    model = torch.nn.Linear(2, 2)
    model(torch.ones(1, 2)).sum().backward()
    grad = model.weight.grad.clone()
    distributed.average_gradients(model, w)
    distributed.broadcast_module(model, w)
    assert torch.equal(model.weight.grad, grad)
    assert distributed.all_mean([1.5], w) == [1.5]
    assert distributed.broadcast_object({"a": 1}, w) == {"a": 1}
    assert distributed.gather_objects(3, w) == [3]


def test_a_bad_global_batch_stops_every_rank_with_one_line(tmp_path):
    run = tmp_path / "run"
    args = ["fewshot", "train", "--preset", "smoke", "--run-dir", str(run), f"data.cache_dir={tmp_path}"]
    res = _torchrun([*args, "train.batch_size=3"])
    assert res.returncode != 0
    errors = [line for line in res.stderr.splitlines() if line.startswith("fastweights: error:")]
    assert errors == [
        "fastweights: error: train.batch_size: expected a multiple of the 2 ranks (torchrun --nproc_per_node "
        "x nodes), got 3"
    ]
    assert "[rank1]" not in res.stderr and "SIGABRT" not in res.stderr  # rank 1 leaves quietly
    assert not run.exists()
