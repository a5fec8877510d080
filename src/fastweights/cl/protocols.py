"""Evaluation protocols for in-context continual learners.

- :func:`evaluate_task_pairs`: few-shot accuracy and the in-context forgetting table of the ACL paper
  (Irie et al. 2025, §4.1; queries only, nothing re-learned): for each pair of held-out tasks (A, B),
  acc(A|A), acc(B|A→B), acc(A|A→B), and the same with the order reversed.
- :func:`evaluate_split_benchmark`: 5-task split benchmarks (Split-MNIST, Hsu et al. 2018; van de Ven &
  Tolias 2019; metrics of Lopez-Paz & Ranzato 2017): the accuracy matrix ``R[i, j]`` (task ``j`` after
  learning ``0..i`` in context) over several demonstration draws, with ACC / BWT / forgetting.

All queries are independent reads from the state after the demonstrations (see
``InContextClassifier.query_features``); the model is put in eval mode and no gradients are kept.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from fastweights.cl.metrics import mean_ci95
from fastweights.cl.objective import embed_tasks, sequence_query_logits
from fastweights.data.episodes import EpisodeSampler
from fastweights.models.in_context import InContextClassifier

__all__ = ["evaluate_task_pairs", "evaluate_split_benchmark", "FORGETTING_KEYS", "SCENARIOS"]

SCENARIOS = ("domain", "class")  # split-benchmark scenarios: domain- / class-incremental

FORGETTING_KEYS = ("A|A", "B|A->B", "A|A->B", "B|B", "A|B->A", "B|B->A")


@torch.no_grad()
def evaluate_task_pairs(
    model: InContextClassifier,
    sampler: EpisodeSampler,
    *,
    episodes: int,
    n_way: int,
    k_shot: int,
    n_query: int = 1,
    batch_size: int = 50,
    seed: int = 0,
    reverse: bool = True,
    device: torch.device | str = "cpu",
    progress: Callable[[int], None] | None = None,
) -> dict[str, np.ndarray]:
    """Per-episode accuracies of two-task sequences (A then B, and B then A when ``reverse``).

    Each episode draws two ``n_way``-way ``k_shot``-shot tasks with disjoint classes from
    ``sampler``'s pool, with ``n_query`` queries per class. Episodes are reproducible for ``seed``.

    Returns:
        ``{key: float64 [episodes]}`` for the keys of :data:`FORGETTING_KEYS` (first three only when
        ``reverse`` is False); ``"A|A"`` is the plain few-shot accuracy.
    """
    if episodes < 1 or batch_size < 1:
        raise ValueError(f"episodes, batch_size: expected >= 1, got {episodes}, {batch_size}")
    was_training = model.training
    model.eval()
    rng = np.random.default_rng(seed)
    mean, std = sampler.pool.mean, sampler.pool.std
    out: dict[str, list[np.ndarray]] = {k: [] for k in FORGETTING_KEYS[: 6 if reverse else 3]}
    done = 0
    while done < episodes:
        b = min(batch_size, episodes - done)
        batches = sampler.sample(rng, batch_size=b, num_tasks=2, n_way=n_way, k_shot=k_shot, n_query=n_query)
        a, bb = embed_tasks(model, batches, mean, std, device, channels=sampler.pool.channels)
        orders = [((a, bb), ("A|A", "B|A->B", "A|A->B"))]
        if reverse:
            orders.append(((bb, a), ("B|B", "A|B->A", "B|B->A")))
        for tasks, (k00, k11, k10) in orders:
            logits, _ = sequence_query_logits(model, list(tasks), backward=True)
            for key, (i, j) in ((k00, (0, 0)), (k11, (1, 1)), (k10, (1, 0))):
                correct = logits[(i, j)].argmax(-1) == tasks[j].query_labels
                out[key].append(correct.float().mean(dim=1).cpu().numpy().astype(np.float64))
        done += b
        if progress is not None:
            progress(b)
    model.train(was_training)
    return {k: np.concatenate(v) for k, v in out.items()}


def summarize_task_pairs(accs: dict[str, np.ndarray]) -> dict[str, dict[str, float]]:
    """``{key: {"mean", "ci95"}}`` with the 95% CI ``1.96·std/sqrt(n)`` over episodes."""
    table = {}
    for key, values in accs.items():
        m, ci = mean_ci95(values)
        table[key] = {"mean": m, "ci95": ci}
    return table


from fastweights.cl.split_protocol import evaluate_split_benchmark  # noqa: E402  (moved; re-exported)
