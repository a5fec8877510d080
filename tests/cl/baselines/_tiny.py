"""Small shared pieces of the regularisation strategies' tests: learnable synthetic tasks, tiny
learners, fast settings, the run-twice determinism check and the Split-Digits stream."""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache

import numpy as np
import torch
from torch import Tensor, nn

from fastweights.cl.baselines.base import Strategy
from fastweights.cl.baselines.learners import build_learner
from fastweights.cl.baselines.trainer import TaskInputs, TrainSettings, fit_stream, task_inputs
from fastweights.data.registry import load_split_dataset
from fastweights.data.streams import split_benchmark

SIZE = 16  # the smallest image size of Conv-4
FAST = TrainSettings(optimizer="adam", lr=1e-3, epochs=2, batch_size=8)


def tiny_tasks(
    num_tasks: int = 3, n: int = 24, q: int = 10, scenario: str = "class", seed: int = 0
) -> list[TaskInputs]:
    """Learnable synthetic tasks of two classes each: every class is a fixed random image plus noise;
    labels ``2t, 2t+1`` (``"class"``) or ``0, 1`` (``"domain"``). Inputs float32 ``[n, 1, 16, 16]``."""
    g = torch.Generator().manual_seed(seed)
    protos = torch.randn(2 * num_tasks, 1, SIZE, SIZE, generator=g)
    tasks = []
    for t in range(num_tasks):
        labels = torch.tensor([2 * t, 2 * t + 1] if scenario == "class" else [0, 1])
        (x, y), (qx, qy) = (_draw(protos[2 * t : 2 * t + 2], labels, k, g) for k in (n, q))
        tasks.append(TaskInputs(f"task{t}", x, y, qx, qy))
    return tasks


def _draw(protos: Tensor, labels: Tensor, k: int, g: torch.Generator) -> tuple[Tensor, Tensor]:
    c = torch.arange(k) % 2
    return protos[c] + 0.5 * torch.randn(k, 1, SIZE, SIZE, generator=g), labels[c]


def tiny_learner(kind: str, n_out: int = 6, seed: int = 0) -> nn.Module:
    """A learner of 1 × 16 × 16 inputs (``"mlp"``: 2 × 400; ``"conv4"``: Conv-4 with instance norm)."""
    torch.manual_seed(seed)
    return build_learner(kind, channels=1, image_size=SIZE, n_out=n_out)


def flat_weights(model: nn.Module) -> Tensor:
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def check_runs_and_deterministic(make: Callable[[], Strategy], kind: str) -> np.ndarray:
    """``make()``'s strategy trains a learner of ``kind`` on :func:`tiny_tasks`; a second run with the
    same seed gives the identical accuracy matrix and weights, a third with another seed other weights.
    Returns ``R``."""
    tasks = tiny_tasks()
    runs = []
    for seed in (0, 0, 1):
        model = tiny_learner(kind, seed=seed)
        R = fit_stream(model, tasks, make(), FAST, seed=seed)
        runs.append((R, flat_weights(model)))
    (R0, w0), (R1, w1), (_, w2) = runs
    assert R0.shape == (3, 3) and np.all((R0 >= 0) & (R0 <= 1))
    np.testing.assert_array_equal(R0, R1)
    assert torch.equal(w0, w1)
    assert not torch.equal(w0, w2)
    return R0


@lru_cache(maxsize=1)
def digits_domain_tasks() -> tuple[TaskInputs, ...]:
    """Split-Digits (sklearn digits, 32 × 32), domain-incremental (labels 0/1 in each of the 5 tasks),
    full training data of every task."""
    ds = load_split_dataset("digits")
    tasks = split_benchmark(ds, k_shot=None, run=0, scenario="domain")
    return tuple(task_inputs(tasks, mean=ds.mean, std=ds.std, channels=1))


def perturbed(model: nn.Module, delta: float) -> dict[str, Tensor]:
    """Add ``delta`` to every parameter in place; return the offsets ``{name: θ − θ_before}``."""
    with torch.no_grad():
        for p in model.parameters():
            p.add_(delta)
    return {n: torch.full_like(p, delta) for n, p in model.named_parameters()}


def assert_one_line_error(make: Callable[[], object], match: str) -> None:
    import pytest

    with pytest.raises(ValueError, match=match) as err:
        make()
    assert "\n" not in str(err.value)


DIGITS_SETTINGS = TrainSettings(optimizer="adam", lr=1e-3, epochs=20, batch_size=64)


def digits_acc_bwt(strategy: Strategy, seed: int = 0) -> tuple[float, float]:
    """ACC and BWT of the 2 × 400 MLP trained on domain-incremental Split-Digits (full data, Adam
    ``1e-3``, 20 epochs of batches of 64 per task) with ``strategy``."""
    from fastweights.cl.metrics import average_accuracy, backward_transfer

    torch.manual_seed(seed)
    model = build_learner("mlp", channels=1, image_size=32, n_out=2)
    R = fit_stream(model, digits_domain_tasks(), strategy, DIGITS_SETTINGS, seed=seed)
    return average_accuracy(R), backward_transfer(R)


@lru_cache(maxsize=1)
def digits_finetune_acc_bwt() -> tuple[float, float]:
    """:func:`digits_acc_bwt` of plain fine-tuning (same optimizer)."""
    return digits_acc_bwt(Strategy())
