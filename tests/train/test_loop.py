from __future__ import annotations

import pytest
import torch
from torch import nn

from fastweights.train.loop import LoopSettings, fit


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
    settings = LoopSettings(max_steps=3, val_every_steps=3, accumulation_steps=accumulation_steps)
    fit(
        tmp_path / name,
        model=model,
        optimizer=opt,
        scheduler=sched,
        step_fn=step_fn,
        validate_fn=lambda: {"obj": 0.0},
        settings=settings,
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
    [("checkpoint_every_steps", 0), ("val_every_steps", 0), ("accumulation_steps", 0), ("grad_clip", -1.0)],
)
def test_loop_settings_name_the_bad_train_key(field, value):
    with pytest.raises(ValueError, match=f"train.{field}"):
        LoopSettings(max_steps=1, **{field: value})
