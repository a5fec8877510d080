from __future__ import annotations

import json

import pytest
import torch
from torch import nn

from fastweights.io import JsonlLogger
from fastweights.train import checkpoint
from fastweights.train.checkpoint import CheckpointManager
from fastweights.train.loop import LoopConfig, fit
from fastweights.train.run_folder import RunFolderError


def _run(tmp_path, name, accumulation_steps, batch):
    torch.manual_seed(0)
    model = nn.Linear(3, 1).double()
    x = torch.randn(8, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    y = x.sum(-1, keepdim=True)
    calls = {"n": 0}

    def step_fn(step):
        i = calls["n"] % (8 // batch)
        calls["n"] += 1
        part = slice(i * batch, (i + 1) * batch)
        return nn.functional.mse_loss(model(x[part]), y[part]), {}

    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
    loop = LoopConfig(max_steps=3, val_every_steps=3, accumulation_steps=accumulation_steps)
    fit(
        tmp_path / name,
        model=model,
        optimizer=opt,
        scheduler=sched,
        step_fn=step_fn,
        validate_fn=lambda: {"obj": 0.0},
        loop=loop,
        objective="obj",
    )
    return model.weight.detach().clone(), calls["n"]


def test_accumulated_micro_batches_equal_one_full_batch(tmp_path):
    full, n_full = _run(tmp_path, "full", 1, 8)
    accumulated, n_acc = _run(tmp_path, "acc", 4, 2)
    assert (n_full, n_acc) == (3, 12)
    torch.testing.assert_close(accumulated, full, rtol=0, atol=1e-14)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("checkpoint_every_steps", 0),
        ("val_every_steps", 0),
        ("accumulation_steps", 0),
        ("grad_clip", -1.0),
        ("max_steps", -1),
        ("max_minutes", float("nan")),
        ("seed", -1),
        ("threads", 1.5),
        ("precision", "fp16"),
    ],
)
def test_loop_config_names_the_bad_field(field, value):
    with pytest.raises(ValueError, match=f"^{field}: expected"):
        LoopConfig(**{"max_steps": 1, field: value})


class _Crash(BaseException):
    """Stands in for a kill: not an Exception, so nothing on the way catches it."""


def _fit_objective(run_dir, *, resume=False, objectives=None, max_steps=6, records=None):
    """A tiny deterministic run validating every 2 steps (objective by step: 1, 3, 2 — the best is the
    middle one); checkpoints only at validations."""
    torch.manual_seed(0)
    model = nn.Linear(3, 1).double()
    gen = torch.Generator().manual_seed(1)
    objectives = objectives or {2: 1.0, 4: 3.0, 6: 2.0}
    state = {"step": 0}

    def step_fn(step):
        state["step"] = step + 1
        x = torch.randn(4, 3, dtype=torch.float64, generator=gen)
        return nn.functional.mse_loss(model(x), x.sum(-1, keepdim=True)), {"seen": step}

    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
    loop = LoopConfig(max_steps=max_steps, val_every_steps=2, checkpoint_every_steps=1000)
    fit(
        run_dir,
        model=model,
        optimizer=opt,
        scheduler=sched,
        step_fn=step_fn,
        validate_fn=lambda: {"obj": objectives[state["step"]]},
        loop=loop,
        objective="obj",
        resume=resume,
        extra_state={"gen": (gen.get_state, gen.set_state)},
        records=records,
    )


def _records(run_dir):
    return [
        {k: v for k, v in json.loads(line).items() if k != "minutes"}
        for line in (run_dir / "metrics.jsonl").read_text().splitlines()
    ]


def _crash_at(monkeypatch, nth, *, when):
    """Make the nth checkpoint file write crash before it starts, in its middle, or after it."""
    real = checkpoint.atomic_torch_save
    calls = {"n": 0}

    def save(obj, path):
        calls["n"] += 1
        if calls["n"] == nth and when == "before":
            raise _Crash
        if calls["n"] == nth and when == "inside":
            path.parent.mkdir(parents=True, exist_ok=True)
            (path.parent / f".{path.name}.crash.tmp").write_bytes(b"partial")
            raise _Crash
        real(obj, path)
        if calls["n"] == nth and when == "after":
            raise _Crash

    monkeypatch.setattr(checkpoint, "atomic_torch_save", save)


# the saves of _fit_objective: step 0 latest (1); step 2 best (2), latest (3); step 4 best (4), latest (5);
# step 6 latest (6)
@pytest.mark.parametrize("nth", [1, 2, 3, 4, 5, 6])
@pytest.mark.parametrize("when", ["before", "inside", "after"])
def test_best_and_latest_stay_consistent_under_a_crash_at_any_write(tmp_path, monkeypatch, nth, when):
    _fit_objective(tmp_path / "ref")
    _crash_at(monkeypatch, nth, when=when)
    with pytest.raises(_Crash):
        _fit_objective(tmp_path / "run")
    monkeypatch.undo()
    _fit_objective(tmp_path / "run", resume=True)
    ref, run = CheckpointManager(tmp_path / "ref"), CheckpointManager(tmp_path / "run")
    latest, best = run.load("latest"), run.load("best")
    assert latest["best"] == best["best"] == 3.0 and best["step"] == 4  # latest's best score has its best.pt
    for which in ("latest", "best"):
        for k, v in ref.load(which)["model"].items():
            assert torch.equal(v, run.load(which)["model"][k]), (which, k)
    assert _records(tmp_path / "run") == _records(tmp_path / "ref")


def test_crash_after_a_log_line_does_not_repeat_it_and_loss_average_continues(tmp_path, monkeypatch):
    _fit_objective(tmp_path / "ref")
    real = JsonlLogger.log
    calls = {"n": 0}

    def log(self, **record):
        real(self, **record)
        calls["n"] += 1
        if calls["n"] == 2:  # the step-4 line is written, its checkpoint is not
            raise _Crash

    monkeypatch.setattr(JsonlLogger, "log", log)
    with pytest.raises(_Crash):
        _fit_objective(tmp_path / "run")
    monkeypatch.undo()
    assert len(_records(tmp_path / "run")) == 2
    _fit_objective(tmp_path / "run", resume=True)
    assert [r["step"] for r in _records(tmp_path / "run")] == [2, 4, 6]
    assert _records(tmp_path / "run") == _records(tmp_path / "ref")  # train_loss (EMA) included


def test_fresh_fit_refuses_a_log_without_checkpoint(tmp_path):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "metrics.jsonl").write_text('{"step": 2}\n')
    with pytest.raises(RunFolderError, match="already has records but there is no checkpoint"):
        _fit_objective(tmp_path / "run", resume=True)


def test_resume_from_a_damaged_latest_points_to_best(tmp_path):
    _fit_objective(tmp_path / "run", max_steps=4, objectives={2: 1.0, 4: 0.5})
    latest = tmp_path / "run" / "checkpoints" / "latest.pt"
    latest.write_bytes(latest.read_bytes()[:100])
    with pytest.raises(
        RunFolderError,
        match=r"latest.pt is damaged .*best.pt exists and reads fine: to resume "
        r"from it, copy it over .*latest.pt",
    ):
        _fit_objective(tmp_path / "run", resume=True)


def test_resume_refuses_a_checkpoint_without_a_recipe_state_it_needs(tmp_path):
    _fit_objective(tmp_path / "run", max_steps=4)
    ckpt = CheckpointManager(tmp_path / "run")
    state = ckpt.load("latest")
    del state["extra"]["gen"]
    ckpt.save(state, is_best=False)
    with pytest.raises(RunFolderError, match=r"latest\.pt holds no 'gen' state, which this run needs"):
        _fit_objective(tmp_path / "run", resume=True)


def test_records_are_checkpointed_and_restored_on_resume(tmp_path):
    """Records fixed at the start are saved in every checkpoint; a resume takes the checkpoint's values
    and keeps given ones for keys an older checkpoint lacks."""
    records = {"init_steps": 7}
    _fit_objective(tmp_path / "run", max_steps=4, records=records)
    ckpt = CheckpointManager(tmp_path / "run")
    assert ckpt.load("latest")["records"] == ckpt.load("best")["records"] == {"init_steps": 7}
    resumed = {"init_steps": None, "new_key": 1}
    _fit_objective(tmp_path / "run", resume=True, records=resumed)
    assert resumed == {"init_steps": 7, "new_key": 1}
    assert ckpt.load("latest")["records"] == {"init_steps": 7, "new_key": 1}


def test_resume_refuses_a_model_only_checkpoint(tmp_path):
    CheckpointManager(tmp_path / "run").save({"model": {}, "step": 3}, is_best=True)
    with pytest.raises(RunFolderError, match=r"cannot be resumed \(no optimizer"):
        _fit_objective(tmp_path / "run", resume=True)


def test_bf16_precision_autocasts_the_step_and_keeps_fp32_weights(tmp_path):
    torch.manual_seed(0)
    model = nn.Linear(4, 1)
    seen = []

    def step_fn(step):
        out = model(torch.randn(8, 4))
        seen.append(out.dtype)
        return out.float().square().mean(), {}

    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
    fit(
        tmp_path / "run",
        model=model,
        optimizer=opt,
        scheduler=sched,
        step_fn=step_fn,
        validate_fn=lambda: {"obj": float(model(torch.ones(1, 4)).dtype == torch.float32)},
        loop=LoopConfig(max_steps=2, val_every_steps=2, precision="bf16"),
        objective="obj",
    )
    assert seen == [torch.bfloat16, torch.bfloat16]
    assert model.weight.dtype == torch.float32 and model.weight.grad.dtype == torch.float32
    record = json.loads((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()[-1])
    assert record["obj"] == 1.0  # validation runs outside autocast


def test_loop_config_names_a_bad_precision():
    with pytest.raises(ValueError, match=r"precision: expected one of \['fp32', 'bf16'\], got 'fp16'"):
        LoopConfig(max_steps=1, precision="fp16")
