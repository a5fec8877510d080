"""Delayed-label sequential multi-task in-context learning (Irie et al. 2022, §4.2; modern-srwm
``eval_delay_multi_sequential.py``).

Two N-way K-shot tasks from different domains are concatenated into one stream; the model sees
``(x_t, y_{t-1})`` — the label of the *previous* step (the first step gets the "unknown" label) — and
predicts ``y_t`` at every step, so it must keep learning as the stream switches task. Training
trims each task's demonstrations at the end by a random amount and puts the tasks in random order.
Reported: overall accuracy, per-task accuracy, accuracy by the k-th occurrence of a class within its
task, and accuracy by position.

Deviation from the reference (modern-srwm ``main_few_shot_delayed_multi_sequential.py``): its first
step gets label index 0; here it gets the unknown label, so no step is fed a label it was not shown.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
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

__all__ = [
    "DelayedLabelStream",
    "delayed_label_stream",
    "sample_task_features",
    "sequential_loss",
    "evaluate_sequential",
    "OCCURRENCES",
]

OCCURRENCES = (1, 2, 3, 5, 10)  # the k-th occurrences the summary reports


@dataclass
class DelayedLabelStream:
    """One batch of streams: ``features [B, L, F]``; int64 ``[B, L]``: ``input_labels`` (``y_{t-1}``,
    unknown label at ``t = 0``), ``targets`` (``y_t``), ``task_index`` (position of the task in the
    stream) and ``occurrence`` (1-based count of ``y_t`` so far within its task)."""

    features: Tensor
    input_labels: Tensor
    targets: Tensor
    task_index: Tensor
    occurrence: Tensor


def _occurrence(labels: Tensor, n_classes: int) -> Tensor:
    """``[B, L]`` labels → how many times each label has appeared up to and including ``t``."""
    onehot = F.one_hot(labels, n_classes)
    return onehot.cumsum(1).gather(2, labels.unsqueeze(-1)).squeeze(-1)


def delayed_label_stream(
    tasks: Sequence[TaskTensors], *, lengths: Sequence[int], unknown_label: int
) -> DelayedLabelStream:
    """Concatenate the first ``lengths[i]`` demonstrations of each task (in the given order).

    Args:
        tasks: tasks whose ``support_features [B, N*K, F]`` / ``support_labels`` form the stream.
        lengths: demonstrations kept per task (``N*K`` minus the trim), each in ``[1, N*K]``.
        unknown_label: the label index fed at the first step.

    Raises:
        ValueError: if ``lengths`` does not match ``tasks`` or a length is out of range.
    """
    if len(lengths) != len(tasks):
        raise ValueError(f"lengths: expected one length per task ({len(tasks)}), got {list(lengths)}")
    feats, targets, index, occ = [], [], [], []
    for i, (task, n) in enumerate(zip(tasks, lengths, strict=True)):
        full = task.support_labels.shape[1]
        if not 1 <= n <= full:
            raise ValueError(f"lengths[{i}]: expected 1..{full} demonstrations, got {n}")
        labels = task.support_labels[:, :n]
        feats.append(task.support_features[:, :n])
        targets.append(labels)
        index.append(torch.full_like(labels, i))
        occ.append(_occurrence(labels, unknown_label + 1))
    y = torch.cat(targets, dim=1)
    first = torch.full_like(y[:, :1], unknown_label)
    return DelayedLabelStream(
        features=torch.cat(feats, dim=1),
        input_labels=torch.cat([first, y[:, :-1]], dim=1),
        targets=y,
        task_index=torch.cat(index, dim=1),
        occurrence=torch.cat(occ, dim=1),
    )


def sample_task_features(
    model: InContextClassifier,
    samplers: Sequence[EpisodeSampler],
    rng: np.random.Generator,
    *,
    batch_size: int,
    n_way: int,
    k_shot: int,
    device: torch.device | str,
    label_space: int | None = None,
) -> list[TaskTensors]:
    """One ``n_way``-way ``k_shot``-shot task per sampler (domain), embedded by the model's backbone;
    labels drawn from ``0..label_space-1`` (default ``n_way``)."""
    tasks = []
    for sampler in samplers:
        (batch,) = sampler.sample(
            rng,
            batch_size=batch_size,
            num_tasks=1,
            n_way=n_way,
            k_shot=k_shot,
            n_query=0,
            label_space=label_space,
        )
        pool = sampler.pool
        tasks.extend(embed_tasks(model, [batch], pool.mean, pool.std, device, channels=pool.channels))
    return tasks


def sequential_loss(model: InContextClassifier, stream: DelayedLabelStream) -> tuple[Tensor, Tensor]:
    """Mean cross-entropy over every position of the stream; returns ``(loss, logits [B, L, N])``."""
    logits, _ = model.forward_features(stream.features, stream.input_labels)
    loss = F.cross_entropy(logits.flatten(0, 1), stream.targets.flatten())
    return loss, logits


@torch.no_grad()
def evaluate_sequential(
    model: InContextClassifier,
    samplers: Sequence[EpisodeSampler],
    *,
    n_way: int,
    k_shot: int,
    episodes: int = 1000,
    batch_size: int = 50,
    seed: int = 0,
    device: torch.device | str = "cpu",
    progress: Callable[[int], None] | None = None,
) -> dict[str, Any]:
    """Accuracy of untrimmed streams ``samplers[0]`` task → ``samplers[1]`` task → … (Irie et al. 2022, §4.2).

    Returns:
        ``{"accuracy", "ci95", "per_task": [acc of task i], "by_occurrence": [[acc at the k-th occurrence,
        k = 1..k_shot] per task] (index ``k - 1``; a list, so it survives a JSON round trip unchanged),
        "by_position": [acc at each of the L = tasks·N·K positions], "episodes"}``; the CI is
        ``1.96·std/sqrt(n)`` over the per-episode accuracies. Episodes are reproducible for ``seed``.
    """
    if min(episodes, batch_size) < 1:
        raise ValueError(f"episodes, batch_size: expected >= 1, got {episodes}, {batch_size}")
    rng = np.random.default_rng(seed)
    correct, task_index, occurrence = [], [], []
    done = 0
    with eval_mode(model):
        while done < episodes:
            b = min(batch_size, episodes - done)
            tasks = sample_task_features(
                model, samplers, rng, batch_size=b, n_way=n_way, k_shot=k_shot, device=device
            )
            stream = delayed_label_stream(
                tasks, lengths=[n_way * k_shot] * len(tasks), unknown_label=model.unknown_label
            )
            _, logits = sequential_loss(model, stream)
            correct.append((logits.argmax(-1) == stream.targets).cpu().numpy())
            task_index.append(stream.task_index.cpu().numpy())
            occurrence.append(stream.occurrence.cpu().numpy())
            done += b
            if progress is not None:
                progress(b)
    ok, ti, oc = (np.concatenate(a).astype(np.float64) for a in (correct, task_index, occurrence))
    mean, ci = mean_ci95(ok.mean(axis=1))
    per_task, by_occ = [], []
    for i in range(len(samplers)):
        sel = ti == i
        per_task.append(float(ok[sel].mean()))
        by_occ.append([float(ok[sel & (oc == k)].mean()) for k in range(1, k_shot + 1)])
    return {
        "accuracy": mean,
        "ci95": ci,
        "per_task": per_task,
        "by_occurrence": by_occ,
        "by_position": [float(v) for v in ok.mean(axis=0)],
        "episodes": episodes,
    }
