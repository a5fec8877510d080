"""Synchronous-label N-way K-shot in-context learning (Irie et al. 2022, §4.1; modern-srwm ``eval_sync.py``).

An episode is ``N·K`` demonstrations ``(x_i, y_i)`` (label of the same step, classes interleaved at
random) followed by a query fed with the "unknown" label; the prediction is read at the query. The
query is an independent one-step continuation of the state after the demonstrations
(``InContextClassifier.query_features``), so several queries of one support set cost one call and
each equals the last position of its own ``N·K + 1``-long sequence.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch import Tensor
from torch.nn import functional as F

from fastweights.cl.metrics import mean_ci95
from fastweights.cl.tasks import TaskTensors, embed_tasks
from fastweights.data.episodes import EpisodeSampler
from fastweights.models.in_context import InContextClassifier
from fastweights.train.modes import eval_mode

__all__ = ["fewshot_loss", "evaluate_fewshot"]


def fewshot_loss(model: InContextClassifier, task: TaskTensors) -> tuple[Tensor, float]:
    """Cross-entropy of the queries of ``task`` after its support set (one sequence per batch row).

    Args:
        task: features ``support [B, N*K, F]``, ``query [B, Q, F]`` and their int64 labels.

    Returns:
        ``(loss, accuracy)``: the mean query cross-entropy (a scalar tensor) and the query accuracy.
    """
    _, state = model.forward_features(task.support_features, task.support_labels)
    logits = model.query_features(task.query_features, state)
    loss = F.cross_entropy(logits.flatten(0, 1), task.query_labels.flatten())
    acc = (logits.argmax(-1) == task.query_labels).float().mean().item()
    return loss, acc


@torch.no_grad()
def evaluate_fewshot(
    model: InContextClassifier,
    sampler: EpisodeSampler,
    *,
    n_way: int,
    k_shot: int,
    episodes: int = 1000,
    runs: int = 5,
    batch_size: int = 50,
    seed: int = 0,
    device: torch.device | str = "cpu",
    progress: Callable[[int], None] | None = None,
) -> dict[str, Any]:
    """Few-shot accuracy over ``runs × episodes`` test episodes with one query each (Irie et al. 2022, §4.1).

    Every episode draws ``n_way`` classes of ``sampler``'s pool, a fresh label permutation, ``k_shot``
    support examples per class and one query from a random class (the first of the shuffled query
    set); episodes are reproducible for ``seed`` (run ``r`` uses seed ``seed + r``). Eval mode.

    Returns:
        ``{"accuracy", "ci95", "episodes", "runs", "run_accuracies"}``: mean over all episodes with the
        95% CI ``1.96·std/sqrt(n)`` over the ``runs·episodes`` episode outcomes, and the accuracy of
        each run.

    Raises:
        ValueError: if ``episodes``, ``runs`` or ``batch_size`` is < 1 (or from the sampler).
    """
    if min(episodes, runs, batch_size) < 1:
        raise ValueError(f"episodes, runs, batch_size: expected >= 1, got {episodes}, {runs}, {batch_size}")
    outcomes, pool = [], sampler.pool
    with eval_mode(model):
        for r in range(runs):
            rng = np.random.default_rng(seed + r)
            run, done = [], 0
            while done < episodes:
                b = min(batch_size, episodes - done)
                (batch,) = sampler.sample(
                    rng, batch_size=b, num_tasks=1, n_way=n_way, k_shot=k_shot, n_query=1
                )
                (task,) = embed_tasks(model, [batch], pool.mean, pool.std, device, channels=pool.channels)
                _, state = model.forward_features(task.support_features, task.support_labels)
                logits = model.query_features(task.query_features[:, :1], state)
                run.append((logits[:, 0].argmax(-1) == task.query_labels[:, 0]).cpu().numpy())
                done += b
                if progress is not None:
                    progress(b)
            outcomes.append(np.concatenate(run).astype(np.float64))
    mean, ci = mean_ci95(np.concatenate(outcomes))
    return {
        "accuracy": mean,
        "ci95": ci,
        "episodes": episodes,
        "runs": runs,
        "run_accuracies": [float(o.mean()) for o in outcomes],
    }
