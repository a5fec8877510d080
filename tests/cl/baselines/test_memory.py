from __future__ import annotations

import pytest
import torch

from fastweights.cl.baselines.agem import AGEM
from fastweights.cl.baselines.memory import Memory, per_class_choice
from fastweights.cl.baselines.replay import Replay


def offered(n, start=0):
    """Examples that are their own ids: ``x [n, 1]`` = ``y [n]`` = ``start .. start + n − 1``."""
    y = torch.arange(start, start + n)
    return y.float().unsqueeze(1), y


def test_reservoir_size_contents_and_count():
    g = torch.Generator().manual_seed(0)
    mem = Memory()
    mem.reservoir(*offered(5), capacity=8, generator=g)
    assert len(mem) == 5 and mem.seen == 5 and sorted(mem.y.tolist()) == [0, 1, 2, 3, 4]
    mem.reservoir(*offered(30, 5), capacity=8, generator=g)
    assert len(mem) == 8 and mem.seen == 35
    assert len(set(mem.y.tolist())) == 8 and all(0 <= v < 35 for v in mem.y.tolist())
    torch.testing.assert_close(mem.x[:, 0], mem.y.float())  # rows stay paired
    mem.reservoir(*offered(10, 35), capacity=12, generator=g)  # a grown memory fills its new slots
    assert len(mem) == 12 and mem.seen == 45
    with pytest.raises(ValueError, match="capacity: expected >= the 12 stored examples, given 4"):
        mem.reservoir(*offered(1), capacity=4, generator=g)


def test_reservoir_is_uniform_for_a_fixed_capacity():
    g = torch.Generator().manual_seed(1)
    counts = torch.zeros(200)
    trials = 300
    for _ in range(trials):
        mem = Memory()
        for chunk in range(4):  # four tasks of 50 examples
            mem.reservoir(*offered(50, 50 * chunk), capacity=20, generator=g)
        counts[mem.y] += 1
    per_task = counts.view(4, 50).sum(1) / trials  # expected 5 examples of each task
    assert torch.all((per_task - 5).abs() < 0.6), per_task


def test_reservoir_copies_and_is_reproducible():
    x, y = offered(10)
    a, b = Memory(), Memory()
    a.reservoir(x, y, 4, torch.Generator().manual_seed(2))
    b.reservoir(x, y, 4, torch.Generator().manual_seed(2))
    assert torch.equal(a.y, b.y)
    x += 100
    assert torch.all(a.x < 100)  # stored rows are copies


def test_sample_draws_distinct_rows_and_refuses_an_empty_memory():
    g = torch.Generator().manual_seed(0)
    with pytest.raises(ValueError, match="memory: expected stored examples to sample, given an empty memory"):
        Memory().sample(3, g)
    mem = Memory()
    mem.add(*offered(6))
    x, y = mem.sample(4, g)
    assert len(set(y.tolist())) == 4 and torch.equal(x[:, 0], y.float())
    assert sorted(mem.sample(50, g)[1].tolist()) == list(range(6))


def test_per_class_choice():
    y = torch.tensor([0, 1, 0, 1, 0, 1, 0, 2])
    idx = per_class_choice(y, 2, torch.Generator().manual_seed(0))
    assert len(set(idx.tolist())) == len(idx) == 5
    assert sorted(y[idx].tolist()) == [0, 0, 1, 1, 2]


def test_rehearsal_needs_the_trainers_generator():
    x, y = offered(4)
    with pytest.raises(RuntimeError, match=r"generator: expected batch\(\) to have been called"):
        AGEM().after_task(None, 0, x, y)
    strategy = Replay(per_class=1)
    g = torch.Generator().manual_seed(0)
    strategy.batch(0, x, y, g)
    assert strategy.generator is g
    strategy.after_task(None, 0, x, y)
    assert len(strategy.memory) == 4  # four labels, one slot each
    strategy.before_task(None, 0, x, y)  # a new stream empties the memory
    assert len(strategy.memory) == 0 and strategy.classes_seen == 0
