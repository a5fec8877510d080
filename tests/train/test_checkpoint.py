import random

import numpy as np
import pytest
import torch
from torch import nn

from fastweights.train.checkpoint import CheckpointManager, capture_rng_state, restore_rng_state


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
