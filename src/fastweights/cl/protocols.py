"""Evaluation protocols for in-context continual learners.

- :func:`evaluate_task_pairs`: few-shot accuracy and the in-context forgetting table of the ACL paper
  (Irie et al. 2025, §4.1; queries only, nothing re-learned): for each pair of held-out tasks (A, B),
  acc(A|A), acc(B|A→B), acc(A|A→B), and the same with the order reversed; A and B from one pool
  (disjoint classes) or from two (cross-domain).
- :func:`evaluate_task_sequence`: the accuracy matrix ``R[e, i, j]`` of ``T``-task sequences from one or
  several domains, domain- or class-incremental (ACL paper §4.3, App. B.1: 5-task meta-validation and report).
- The 5-task split benchmarks (Split-MNIST, Hsu et al. 2018; van de Ven & Tolias 2019) are in
  :mod:`fastweights.cl.split_protocol`.

All queries are independent reads from the state after the demonstrations (see
``InContextClassifier.query_features``); the model is put in eval mode and no gradients are kept.
Both take ``replay``: in-context replay (:mod:`fastweights.cl.context_replay`), later tasks read with
the stored demonstrations of earlier ones, its ``"mixed"`` permutations drawn from
``replay_generator(seed)``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import torch

from fastweights.cl.context_replay import ContextReplay, replay_generator
from fastweights.cl.metrics import mean_ci95
from fastweights.cl.objective import sequence_query_logits
from fastweights.cl.tasks import TaskTensors, sample_task_sequences
from fastweights.data.episodes import EpisodeSampler
from fastweights.data.task_augment import TaskAugment
from fastweights.models.in_context import InContextClassifier
from fastweights.train.modes import eval_mode

__all__ = [
    "evaluate_task_pairs",
    "evaluate_task_sequence",
    "FORGETTING_KEYS",
]


FORGETTING_KEYS = ("A|A", "B|A->B", "A|A->B", "B|B", "A|B->A", "B|B->A")


def _check_view(view: TaskAugment | None) -> None:
    if view is not None and any(0 < p < 1 for p in (view.grayscale, view.low_res)):
        raise ValueError(
            "view: expected probabilities 0 or 1 (a fixed view of every task), "
            f"given grayscale={view.grayscale}, low_res={view.low_res}"
        )


def _check_counts(episodes: int, batch_size: int) -> None:
    if episodes < 1 or batch_size < 1:
        raise ValueError(f"episodes, batch_size: expected >= 1, got {episodes}, {batch_size}")


def _accuracy(logits: torch.Tensor, targets: torch.Tensor) -> np.ndarray:
    """Per-sequence fraction of queries whose argmax over all outputs is the target: float64 ``[B]``."""
    return (logits.argmax(-1) == targets).float().mean(dim=1).cpu().numpy().astype(np.float64)


def _sequence_batches(
    model: InContextClassifier,
    samplers: Sequence[EpisodeSampler],
    order: Sequence[int],
    *,
    episodes: int,
    batch_size: int,
    seed: int,
    progress: Callable[[int], None] | None,
    **sampling: Any,
) -> Iterator[tuple[int, list[TaskTensors]]]:
    """``(first episode index, tasks)`` per batch of ``episodes`` sequences drawn with
    :func:`~fastweights.cl.tasks.sample_task_sequences` from ``np.random.default_rng(seed)``, the model
    in eval mode meanwhile (its mode restored afterwards); ``progress(b)`` after each batch."""
    _check_counts(episodes, batch_size)
    rng = np.random.default_rng(seed)
    with eval_mode(model):
        for done in range(0, episodes, batch_size):
            b = min(batch_size, episodes - done)
            yield done, sample_task_sequences(model, samplers, order, rng, batch_size=b, **sampling)
            if progress is not None:
                progress(b)


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
    sampler_b: EpisodeSampler | None = None,
    label_space: int | None = None,
    device: torch.device | str = "cpu",
    progress: Callable[[int], None] | None = None,
    replay: ContextReplay | None = None,
    view: TaskAugment | None = None,
) -> dict[str, np.ndarray]:
    """Per-episode accuracies of two-task sequences (A then B, and B then A when ``reverse``; ACL paper
    §4.1; queries only, nothing re-learned).

    Each episode draws an ``n_way``-way ``k_shot``-shot task A from ``sampler`` and a task B from
    ``sampler_b`` (default: ``sampler``, classes disjoint from A's), ``n_query`` queries per class, each
    task normalised with its own pool's statistics, labels in ``0..label_space-1`` (default ``n_way``);
    sampled with :func:`~fastweights.cl.tasks.sample_task_sequences`. The reverse order reuses the
    same episodes. Predictions are the argmax over all the model's outputs. Episodes are reproducible
    for ``seed``. ``replay``: the second task is read with the first's stored demonstrations
    (``None``: off). ``view``: every task shown in this view (probabilities 0 or 1, e.g.
    ``TaskAugment(grayscale=1)``: the same episodes, seen differently; ``None``: as drawn).

    Returns:
        ``{key: float64 [episodes]}`` for the keys of :data:`FORGETTING_KEYS` (first three only when
        ``reverse`` is False); ``"A|A"`` is the plain few-shot accuracy.

    Raises:
        ValueError: if ``episodes`` or ``batch_size`` is below 1, ``view`` has a probability in (0, 1),
            or from the sampling (a pool too small for two tasks, a label space too small or larger
            than the model's outputs).
    """
    _check_view(view)
    samplers = [sampler] if sampler_b is None else [sampler, sampler_b]
    order = [0, 0] if sampler_b is None else [0, 1]
    out: dict[str, list[np.ndarray]] = {k: [] for k in FORGETTING_KEYS[: 6 if reverse else 3]}
    batches = _sequence_batches(
        model,
        samplers,
        order,
        episodes=episodes,
        batch_size=batch_size,
        seed=seed,
        progress=progress,
        n_way=n_way,
        k_shot=k_shot,
        n_query=n_query,
        label_space=label_space,
        device=device,
        augment=view,
    )
    generator = replay_generator(seed) if replay is not None else None
    for _, (a, bb) in batches:
        orders = [((a, bb), ("A|A", "B|A->B", "A|A->B"))]
        if reverse:
            orders.append(((bb, a), ("B|B", "A|B->A", "B|B->A")))
        for tasks, (k00, k11, k10) in orders:
            logits, _ = sequence_query_logits(
                model, list(tasks), backward=True, replay=replay, generator=generator
            )
            for key, (i, j) in ((k00, (0, 0)), (k11, (1, 1)), (k10, (1, 0))):
                out[key].append(_accuracy(logits[(i, j)], tasks[j].query_labels))
    return {k: np.concatenate(v) for k, v in out.items()}


@torch.no_grad()
def evaluate_task_sequence(
    model: InContextClassifier,
    samplers: Sequence[EpisodeSampler],
    *,
    order: Sequence[int],
    episodes: int,
    n_way: int,
    k_shot: int,
    n_query: int,
    scenario: str = "domain",
    label_space: int | None = None,
    batch_size: int = 50,
    seed: int = 0,
    device: torch.device | str = "cpu",
    progress: Callable[[int], None] | None = None,
    replay: ContextReplay | None = None,
    view: TaskAugment | None = None,
) -> np.ndarray:
    """Accuracy matrices of ``len(order)``-task sequences learned in context (ACL paper §4.3: the 5-task
    meta-validation and report; queries only, nothing re-learned).

    Each episode is one sequence from :func:`~fastweights.cl.tasks.sample_task_sequences`: position
    ``t`` an ``n_way``-way ``k_shot``-shot task of ``samplers[order[t]]`` (the classes of one sampler's
    positions distinct), ``n_query`` queries per class, domain- or class-incremental labels as in
    training (``scenario``, ``label_space``: see :func:`~fastweights.cl.tasks.task_label_space`).
    After the support set of task ``i`` every task ``j <= i`` is queried from that state
    (:func:`~fastweights.cl.objective.sequence_query_logits`); predictions are the argmax over all
    the model's outputs, targets the (class-incremental: shifted) labels. Reproducible for ``seed``.
    ``replay``: tasks ``i >= 1`` read with the stored demonstrations of tasks ``< i`` (``None``: off).
    ``view``: as in :func:`evaluate_task_pairs`.

    Returns:
        float64 ``R [episodes, T, T]``, ``T = len(order)``: ``R[e, i, j]`` the fraction of task ``j``'s
        queries classified correctly after the support sets of tasks ``0..i`` of episode ``e``
        (``j <= i``; NaN for ``j > i``). The mean of row ``T - 1`` is the 5-task selection measure.

    Raises:
        ValueError: if ``episodes`` or ``batch_size`` is below 1, ``view`` has a probability in (0, 1),
            or from the sampling (bad ``order``,
            ``scenario`` or label space, pools too small).
    """
    _check_counts(episodes, batch_size)
    _check_view(view)
    if n_query < 1:
        raise ValueError(f"n_query: expected >= 1 query per class, got {n_query}")
    num = len(order)
    R = np.full((episodes, num, num), np.nan)
    batches = _sequence_batches(
        model,
        samplers,
        order,
        episodes=episodes,
        batch_size=batch_size,
        seed=seed,
        progress=progress,
        n_way=n_way,
        k_shot=k_shot,
        n_query=n_query,
        label_space=label_space,
        scenario=scenario,
        device=device,
        augment=view,
    )
    generator = replay_generator(seed) if replay is not None else None
    for done, tasks in batches:
        logits, _ = sequence_query_logits(model, tasks, backward=True, replay=replay, generator=generator)
        for (i, j), lg in logits.items():
            R[done : done + len(lg), i, j] = _accuracy(lg, tasks[j].query_labels)
    return R


def summarize_task_pairs(accs: dict[str, np.ndarray]) -> dict[str, dict[str, float]]:
    """``{key: {"mean", "ci95"}}`` with the 95% CI ``1.96·std/sqrt(n)`` over episodes."""
    table = {}
    for key, values in accs.items():
        m, ci = mean_ci95(values)
        table[key] = {"mean": m, "ci95": ci}
    return table
