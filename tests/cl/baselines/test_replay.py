from __future__ import annotations

import pytest
import torch

from fastweights.cl.baselines import STRATEGIES
from fastweights.cl.baselines.replay import Replay
from fastweights.cl.baselines.trainer import fit_stream
from tests.cl.baselines._tiny import FAST, check_runs_and_deterministic, tiny_learner, tiny_tasks


def rows_of(x, pool):
    """For each row of ``x``, the index of the identical row of ``pool`` (−1 if none)."""
    eq = (x.flatten(1)[:, None] == pool.flatten(1)[None]).all(-1)
    return torch.where(eq.any(1), eq.float().argmax(1), -1)


class Watched(Replay):
    """Keeps a copy of the memory at the start of each task and the size of every mini-batch."""

    def __init__(self, per_class):
        super().__init__(per_class)
        self.at_start, self.sizes = [], []

    def before_task(self, model, t, x, y):
        super().before_task(model, t, x, y)
        self.at_start.append(
            (None, None) if len(self.memory) == 0 else (self.memory.x.clone(), self.memory.y)
        )

    def batch(self, t, x, y, generator):
        xb, yb = super().batch(t, x, y, generator)
        self.sizes.append((t, len(x), len(xb)))
        return xb, yb


@pytest.mark.parametrize("scenario", ["class", "domain"])
def test_memory_holds_only_past_tasks_with_the_configured_size(scenario):
    tasks = tiny_tasks(num_tasks=4, scenario=scenario)
    strategy = Watched(per_class=3)
    fit_stream(tiny_learner("mlp", n_out=8), tasks, strategy, FAST, seed=0)
    assert strategy.at_start[0] == (None, None)
    for t in range(1, 4):
        x, y = strategy.at_start[t]
        assert len(x) == len(y) == 3 * 2 * t  # per_class × two classes per past task
        past_x, past_y = torch.cat([k.x for k in tasks[:t]]), torch.cat([k.y for k in tasks[:t]])
        idx = rows_of(x, past_x)
        assert torch.all(idx >= 0) and len(set(idx.tolist())) == len(idx)  # distinct past examples
        assert torch.equal(past_y[idx], y)
        assert torch.all(rows_of(x, torch.cat([k.x for k in tasks[t:]])) < 0)
    for t, n, m in strategy.sizes:  # task 0 alone; later: as many memory examples as it has, <= n
        assert m == n + min(n, 6 * t)


def test_batch_is_capped_by_the_memory():
    strategy = Replay(per_class=1)
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(10, 1, 4, 4), torch.arange(10) % 2
    assert strategy.batch(0, x, y, g) == (x, y)  # task 0: nothing to replay
    strategy.after_task(None, 0, x, y)
    assert len(strategy.memory) == 2
    xb, yb = strategy.batch(1, x[:5], y[:5], g)
    assert xb.shape == (7, 1, 4, 4) and torch.equal(yb[:5], y[:5])
    assert torch.all(rows_of(xb[5:], x) >= 0)


def test_registered_and_hparams():
    assert STRATEGIES["replay"] is Replay
    assert Replay(per_class=7).hparams() == {"per_class": 7}


@pytest.mark.parametrize("bad", [0, -1, 2.5, True])
def test_bad_per_class(bad):
    with pytest.raises(ValueError, match="per_class: expected an int >= 1"):
        Replay(per_class=bad)


@pytest.mark.parametrize("kind", ["mlp", "conv4"])
def test_runs_with_both_learners_deterministically(kind):
    check_runs_and_deterministic(lambda: Replay(per_class=2), kind)
