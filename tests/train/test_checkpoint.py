import errno
import random

import numpy as np
import pytest
import torch
from torch import nn

from fastweights.train import checkpoint
from fastweights.train.checkpoint import CheckpointManager, capture_rng_state, restore_rng_state
from fastweights.train.run_folder import RunFolderError


def _draw():
    return (random.random(), np.random.rand(3).tolist(), torch.rand(3).tolist())


def _train_step(model, opt):
    x = torch.randn(8, 4)
    loss = model(x).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()


def test_save_load_roundtrip(tmp_path):
    torch.manual_seed(0)
    model = nn.Linear(4, 3)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    _train_step(model, opt)
    mgr = CheckpointManager(tmp_path / "run")
    assert mgr.load() is None and not mgr.exists("latest") and not mgr.exists("best")
    path = mgr.save(
        {"model": model.state_dict(), "optimizer": opt.state_dict(), "step": 1, "metrics": {"val_acc": 0.5}},
        is_best=True,
    )
    assert path == tmp_path / "run" / "checkpoints" / "latest.pt"
    assert mgr.exists("latest") and mgr.exists("best")

    state = mgr.load("latest")
    model2 = nn.Linear(4, 3)
    opt2 = torch.optim.Adam(model2.parameters(), lr=1e-2)
    model2.load_state_dict(state["model"])
    opt2.load_state_dict(state["optimizer"])
    assert state["step"] == 1 and state["metrics"] == {"val_acc": 0.5}
    for a, b in zip(model.parameters(), model2.parameters(), strict=True):
        assert torch.equal(a, b)
    # the restored optimiser continues identically
    torch.manual_seed(1)
    _train_step(model, opt)
    torch.manual_seed(1)
    _train_step(model2, opt2)
    for a, b in zip(model.parameters(), model2.parameters(), strict=True):
        assert torch.equal(a, b)


def test_best_only_updated_when_best(tmp_path):
    mgr = CheckpointManager(tmp_path)
    mgr.save({"step": 1}, is_best=True)
    mgr.save({"step": 2}, is_best=False)
    assert mgr.load("latest")["step"] == 2
    assert mgr.load("best")["step"] == 1


def test_invalid_arguments(tmp_path):
    mgr = CheckpointManager(tmp_path)
    with pytest.raises(ValueError, match="which: expected one of"):
        mgr.load("newest")
    with pytest.raises(TypeError, match="state: expected a dict"):
        mgr.save([1, 2], is_best=False)


def test_resume_gives_identical_random_numbers(tmp_path):
    random.seed(3)
    np.random.seed(3)
    torch.manual_seed(3)
    mgr = CheckpointManager(tmp_path)
    mgr.save({"rng": capture_rng_state()}, is_best=False)
    expected = _draw()
    _draw()  # advance further, as a crashed run would have
    restore_rng_state(mgr.load()["rng"])
    assert _draw() == expected


def test_restore_requires_keys():
    with pytest.raises(ValueError, match="missing"):
        restore_rng_state({"python": random.getstate()})


def test_best_is_written_before_latest(tmp_path, monkeypatch):
    """A kill between the two writes must leave a latest.pt whose recorded best has its best.pt."""
    order = []
    real = checkpoint.atomic_torch_save
    monkeypatch.setattr(checkpoint, "atomic_torch_save", lambda obj, p: (order.append(p.name), real(obj, p)))
    CheckpointManager(tmp_path).save({"step": 1}, is_best=True)
    assert order == ["best.pt", "latest.pt"]


def _damage(path, how):
    data = path.read_bytes()
    path.write_bytes({"empty": b"", "truncated": data[: len(data) // 2], "zeros": bytes(len(data))}[how])


@pytest.mark.parametrize("how", ["empty", "truncated", "zeros"])
def test_damaged_checkpoint_names_the_file_and_the_usable_other(tmp_path, how):
    mgr = CheckpointManager(tmp_path)
    mgr.save({"model": {"w": torch.ones(64, 64)}, "step": 3}, is_best=True)
    _damage(mgr.path("latest"), how)
    with pytest.raises(RunFolderError) as info:
        mgr.load("latest")
    msg = str(info.value)
    assert "\n" not in msg and f"{mgr.path('latest')} is damaged" in msg
    assert f"{mgr.path('best')} exists and reads fine: use it with --checkpoint best" in msg
    hint = mgr.load("best")  # the other one still loads
    assert hint["step"] == 3
    _damage(mgr.path("best"), how)
    with pytest.raises(RunFolderError, match="best.pt is damaged too"):
        mgr.load("latest")
    mgr.path("best").unlink()
    with pytest.raises(RunFolderError, match="there is no best.pt to fall back on"):
        mgr.load("latest")


@pytest.mark.parametrize(
    "error",
    [
        OSError(errno.ENOSPC, "No space left on device"),
        PermissionError(errno.EACCES, "Permission denied"),
        RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 512 vs 448"),
    ],
)
def test_failed_write_is_a_clear_error_and_keeps_the_previous_checkpoint(tmp_path, monkeypatch, error):
    mgr = CheckpointManager(tmp_path)
    mgr.save({"step": 1}, is_best=True)

    def failing_save(obj, f):
        f.write(b"half a checkpoint")
        raise error

    monkeypatch.setattr(torch, "save", failing_save)  # inside the real atomic writer
    with pytest.raises(RunFolderError, match=r"cannot write .*latest.pt .*the previous latest.pt is intact"):
        mgr.save({"step": 2}, is_best=False)
    monkeypatch.undo()
    assert mgr.load("latest")["step"] == 1 and mgr.load("best")["step"] == 1
    assert sorted(p.name for p in mgr.dir.iterdir()) == ["best.pt", "latest.pt"]  # no temporary left


def test_unrelated_runtime_errors_are_not_disguised(tmp_path, monkeypatch):
    def failing_save(obj, f):
        raise RuntimeError("something else")

    monkeypatch.setattr(torch, "save", failing_save)
    with pytest.raises(RuntimeError, match="something else"):
        CheckpointManager(tmp_path).save({"step": 2}, is_best=False)


@pytest.mark.parametrize("damage", ["truncate", "zero", "flip"])
def test_verify_finds_damage_without_loading(tmp_path, damage):
    ckpt = CheckpointManager(tmp_path)
    ckpt.save({"model": {"w": torch.arange(4096.0)}, "step": 3}, is_best=True)
    ckpt.verify("latest")  # intact
    p = ckpt.path("latest")
    data = bytearray(p.read_bytes())
    if damage == "truncate":
        data = data[: len(data) // 2]
    elif damage == "zero":
        data = bytearray(len(data))
    else:  # one flipped byte inside the tensor data: only the CRC shows it
        i = data.find(bytes(torch.arange(4096.0).numpy().tobytes()[:64]))
        assert i > 0
        data[i + 100] ^= 0xFF
    p.write_bytes(bytes(data))
    with pytest.raises(RunFolderError, match=r"latest\.pt is damaged.*best\.pt exists and reads fine"):
        ckpt.verify("latest")
    CheckpointManager(tmp_path / "none").verify("latest")  # a missing file is not damage
