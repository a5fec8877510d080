"""The ACL meta-training objective (Irie, Csordás, Schmidhuber, TMLR 2025, §3, Eq. 6).

A training sequence presents tasks ``1..T`` one after another (support demos with their labels).
After the support set of task ``i`` has been read, the model is queried on task ``i`` (learning) and
— the ACL term — on every earlier task ``j < i`` (remembering), all from the same state. Queries are
independent one-step reads whose own updates are discarded (ACL paper §3, Eq. 6), so all
queries of one state are evaluated as one batch.

With in-context replay (this library's method, :mod:`fastweights.cl.context_replay`) every task
``i >= 1`` is read as its extended support (stored demonstrations of tasks ``< i`` with its own); the
queries are unchanged.
"""

from __future__ import annotations

import torch
from torch import Tensor
from torch.nn import functional as F

from fastweights.cl.context_replay import ContextReplay, ReplaySupport, replay_supports
from fastweights.cl.tasks import TaskTensors
from fastweights.models.in_context import InContextClassifier

__all__ = ["sequence_query_logits", "acl_loss"]


def _supports(
    tasks: list[TaskTensors], replay: ContextReplay | None, generator: torch.Generator | None
) -> list[ReplaySupport]:
    return replay_supports(
        [t.support_features for t in tasks], [t.support_labels for t in tasks], replay, generator
    )


def sequence_query_logits(
    model: InContextClassifier,
    tasks: list[TaskTensors],
    *,
    backward: bool = True,
    online: bool = False,
    replay: ContextReplay | None = None,
    generator: torch.Generator | None = None,
) -> tuple[dict[tuple[int, int], Tensor], list[Tensor]]:
    """Learn the tasks in order and query them.

    Args:
        replay: in-context replay (:mod:`fastweights.cl.context_replay`): task ``i >= 1`` is read as
            its extended support; ``None`` (default): each task's support as it is.
        generator: the random stream of ``replay.order == "mixed"`` (drawn from in task order).

    Returns:
        ``({(i, j): logits [B, N*Q, N]}, online)``: the queries of task ``j`` from the state after the
        support set of task ``i`` (``j = i`` always, every ``j < i`` when ``backward``), and when
        ``online`` the online predictions ``[B, N*K, N]`` of each task's demonstrations (each demo's
        label predicted before it is revealed; see ``InContextClassifier.forward_features_online``;
        with replay those of the task's own demonstrations in the extended support, in support order).

    Raises:
        ValueError: from :func:`~fastweights.cl.context_replay.replay_supports` or the model.
    """
    return _query_logits(model, tasks, _supports(tasks, replay, generator), backward, online)


def _query_logits(
    model: InContextClassifier,
    tasks: list[TaskTensors],
    supports: list[ReplaySupport],
    backward: bool,
    online: bool,
) -> tuple[dict[tuple[int, int], Tensor], list[Tensor]]:
    state = None
    out: dict[tuple[int, int], Tensor] = {}
    online_logits = []
    for i, support in enumerate(supports):
        if online:
            _, ol, state = model.forward_features_online(support.features, support.labels, state)
            if ol.shape[1] != tasks[i].support_labels.shape[1]:  # replayed: the task's own demos
                ol = ol.gather(1, support.positions.unsqueeze(-1).expand(-1, -1, ol.shape[-1]))
            online_logits.append(ol)
        else:
            _, state = model.forward_features(support.features, support.labels, state)
        for j in range(i + 1) if backward else (i,):
            out[(i, j)] = model.query_features(tasks[j].query_features, state)
    return out, online_logits


def _first_shot_losses(
    model: InContextClassifier, tasks: list[TaskTensors], supports: list[ReplaySupport]
) -> list[Tensor]:
    """The reference's auxiliary loss (ACL paper App. A.6): before task ``i``'s
    support set, read its ``N`` first-shot demos from the current state and query; state discarded."""
    losses, state = [], None
    for task, support in zip(tasks, supports, strict=True):
        if task.first_shot_features is None or task.first_shot_labels is None:
            raise ValueError("first_shot_loss: the episode batches were sampled without first_shot=True")
        _, fs_state = model.forward_features(task.first_shot_features, task.first_shot_labels, state)
        logits = model.query_features(task.query_features, fs_state)
        losses.append(F.cross_entropy(logits.flatten(0, 1), task.query_labels.flatten()))
        _, state = model.forward_features(support.features, support.labels, state)
    return losses


def acl_loss(
    model: InContextClassifier,
    tasks: list[TaskTensors],
    *,
    backward: bool = True,
    first_shot: bool = False,
    online_weight: float = 0.0,
    replay: ContextReplay | None = None,
    generator: torch.Generator | None = None,
) -> tuple[Tensor, dict[tuple[int, int], float]]:
    """ACL loss: mean cross-entropy over every query term of :func:`sequence_query_logits`.

    With two tasks and ``backward=True`` this is Eq. 6 of the ACL paper: CE(A|A) + CE(B|A,B) +
    CE(A|A,B) (averaged); ``backward=False`` is the no-ACL ablation (first two terms). ``first_shot``
    adds the first-shot auxiliary terms to the average. ``online_weight > 0`` adds that multiple of
    the mean cross-entropy of the online predictions of every demonstration (an auxiliary loss of
    this library, not of the reference: it rewards binding labels to classes at every shot).
    ``replay``/``generator``: in-context replay, as in :func:`sequence_query_logits` (the first-shot
    terms continue from the states of the extended supports; the online term covers each task's own
    demonstrations).

    Returns:
        ``(loss, accuracies)`` with the accuracy (fraction correct) of each ``(i, j)`` term.
    """
    supports = _supports(tasks, replay, generator)
    logits, online = _query_logits(model, tasks, supports, backward, online_weight > 0)
    losses, accs = [], {}
    for (i, j), lg in logits.items():
        target = tasks[j].query_labels
        losses.append(F.cross_entropy(lg.flatten(0, 1), target.flatten()))
        accs[(i, j)] = (lg.argmax(-1) == target).float().mean().item()
    if first_shot:
        losses.extend(_first_shot_losses(model, tasks, supports))
    loss = torch.stack(losses).mean()
    if online:
        online_ce = torch.stack(
            [
                F.cross_entropy(ol.flatten(0, 1), t.support_labels.flatten())
                for ol, t in zip(online, tasks, strict=True)
            ]
        ).mean()
        loss = loss + online_weight * online_ce
    return loss, accs
