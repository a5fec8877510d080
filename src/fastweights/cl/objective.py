"""The ACL meta-training objective (Irie, Csordás, Schmidhuber, TMLR 2025, §3, Eq. 6).

A training sequence presents tasks ``1..T`` one after another (support demos with their labels).
After the support set of task ``i`` has been read, the model is queried on task ``i`` (learning) and
— the ACL term — on every earlier task ``j < i`` (remembering), all from the same state. Queries are
independent one-step reads whose own updates are discarded (ACL paper §3, Eq. 6), so all
queries of one state are evaluated as one batch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch
from torch import Tensor
from torch.nn import functional as F

from fastweights.models.in_context import InContextClassifier

if TYPE_CHECKING:
    from fastweights.data.episodes import EpisodeBatch

__all__ = [
    "TaskTensors",
    "embed_tasks",
    "synthetic_feature_tasks",
    "sequence_query_logits",
    "acl_loss",
    "to_model_images",
]


@dataclass
class TaskTensors:
    """Backbone features of one task of a batch of sequences (``B`` sequences)."""

    support_features: Tensor  # [B, N*K, F]
    support_labels: Tensor  # [B, N*K] int64
    query_features: Tensor  # [B, N*Q, F]
    query_labels: Tensor  # [B, N*Q] int64
    first_shot_features: Tensor | None = None  # [B, N, F]
    first_shot_labels: Tensor | None = None


def to_model_images(
    images: np.ndarray,
    mean: float | Sequence[float],
    std: float | Sequence[float],
    device: torch.device | str,
    dtype: torch.dtype = torch.float32,
    *,
    channels: int = 1,
) -> Tensor:
    """uint8 images → normalised ``[..., channels, S, S]`` (``dtype``, default float32) on ``device``.

    ``channels=1``: grayscale ``[..., S, S]`` gets a channel axis; ``channels=3``: RGB
    ``[..., 3, S, S]`` (channels first) is kept; ``channels=0``: float features ``[..., F]`` of a
    frozen encoder (:class:`~fastweights.data.features.FeaturePool`), returned unnormalised. Output
    ``(images / 255 - mean) / std`` with ``mean`` and ``std`` floats or one value per channel (a pool's /
    data set's ``mean``, ``std``).

    Raises:
        ValueError: if ``channels`` is not 0, 1 or 3, RGB images lack the channel axis -3 of size 3, or
            ``mean``/``std`` have a number of values other than 1 or ``channels``.
    """
    if channels == 0:  # precomputed features (a FeaturePool's examples): used as they are
        return torch.from_numpy(np.ascontiguousarray(images)).to(device=device, dtype=dtype)
    if channels not in (1, 3):
        raise ValueError(f"channels: expected 0 (features), 1 or 3, given {channels!r}")
    if channels == 3 and (images.ndim < 3 or images.shape[-3] != 3):
        raise ValueError(
            f"images: expected RGB images [..., 3, S, S] for channels=3, given shape {images.shape}"
        )
    stats: list[float | Tensor] = []
    for name, value in (("mean", mean), ("std", std)):
        v = np.asarray(value, dtype=np.float64).reshape(-1)
        if v.size not in (1, channels):
            raise ValueError(f"{name}: expected 1 or {channels} values, given {v.size}")
        # one value: a Python scalar (computed at the op's precision); per channel: a [C, 1, 1] tensor
        stats.append(float(v[0]) if v.size == 1 else torch.from_numpy(v).to(device, dtype).reshape(-1, 1, 1))
    t = torch.from_numpy(np.ascontiguousarray(images)).to(device=device, dtype=dtype)
    if channels == 1:
        t = t.unsqueeze(-3)
    return (t / 255.0 - stats[0]) / stats[1]


def embed_tasks(
    model: InContextClassifier,
    batches: list[EpisodeBatch],
    mean: float | Sequence[float],
    std: float | Sequence[float],
    device: torch.device | str,
    *,
    channels: int = 1,
) -> list[TaskTensors]:
    """Run the backbone once over every image of a list of task batches and split the features.

    Args:
        batches: one :class:`EpisodeBatch` per task position (same batch size ``B``).
        mean, std: pixel normalisation of the source (``images/255``; floats or one per channel).
        channels: 1 for grayscale, 3 for RGB episode images (the pool's ``channels``).

    Returns:
        One :class:`TaskTensors` per task, features ``[B, *, F]`` float32.
    """
    parts, sizes = [], []
    for eb in batches:
        for arr in (eb.support_images, eb.query_images, eb.first_shot_images):
            if arr is not None:
                parts.append(arr)
                sizes.append(arr.shape[1])
    dtype = next(model.parameters()).dtype
    images = to_model_images(np.concatenate(parts, axis=1), mean, std, device, dtype, channels=channels)
    features = model.embed(images)
    chunks = iter(torch.split(features, sizes, dim=1))

    def labels(a: np.ndarray) -> Tensor:
        return torch.from_numpy(np.ascontiguousarray(a)).to(device=device, dtype=torch.long)

    out = []
    for eb in batches:
        sf, qf = next(chunks), next(chunks)
        ff = next(chunks) if eb.first_shot_images is not None else None
        fl = labels(eb.first_shot_labels) if eb.first_shot_labels is not None else None
        out.append(TaskTensors(sf, labels(eb.support_labels), qf, labels(eb.query_labels), ff, fl))
    return out


def synthetic_feature_tasks(
    generator: torch.Generator,
    *,
    batch_size: int,
    num_tasks: int,
    n_way: int,
    k_shot: int,
    n_query: int,
    feature_dim: int,
    label_space: int,
    noise: float = 0.5,
    device: torch.device | str = "cpu",
) -> list[TaskTensors]:
    """Few-shot tasks in *feature space*: every class is a fresh random prototype
    ``relu(N(0, I_F))`` and every example is ``relu(prototype_pre + noise · N(0, I_F))``.

    A curriculum stage of this library (not of the reference): it lets the sequence learner acquire
    in-context label binding without the cost of the vision backbone, whose features it replaces.
    Labels: a random injection of the ``n_way`` classes into ``0..label_space-1`` per task; demos are
    randomly interleaved; queries are fresh examples (``n_query`` per class).

    Returns:
        ``num_tasks`` :class:`TaskTensors` with float32 features ``[B, *, feature_dim]``.
    """
    b, f = batch_size, feature_dim

    def draw(protos: Tensor, labels: Tensor, per_class: int) -> tuple[Tensor, Tensor]:
        order = torch.argsort(torch.rand(b, n_way * per_class, generator=generator), dim=1) % n_way
        pre = protos.gather(1, order.unsqueeze(-1).expand(-1, -1, f))
        feats = torch.relu(pre + noise * torch.randn(pre.shape, generator=generator))
        return feats.to(device), labels.gather(1, order).to(device)

    tasks = []
    for _ in range(num_tasks):
        protos = torch.randn(b, n_way, f, generator=generator)
        labels = torch.argsort(torch.rand(b, label_space, generator=generator), dim=1)[:, :n_way]
        tasks.append(TaskTensors(*draw(protos, labels, k_shot), *draw(protos, labels, n_query)))
    return tasks


def sequence_query_logits(
    model: InContextClassifier, tasks: list[TaskTensors], *, backward: bool = True, online: bool = False
) -> tuple[dict[tuple[int, int], Tensor], list[Tensor]]:
    """Learn the tasks in order and query them.

    Returns:
        ``({(i, j): logits [B, N*Q, N]}, online)``: the queries of task ``j`` from the state after the
        support set of task ``i`` (``j = i`` always, every ``j < i`` when ``backward``), and when
        ``online`` the online predictions ``[B, N*K, N]`` of each task's demonstrations (each demo's
        label predicted before it is revealed; see ``InContextClassifier.forward_features_online``).
    """
    state = None
    out: dict[tuple[int, int], Tensor] = {}
    online_logits = []
    for i, task in enumerate(tasks):
        if online:
            _, ol, state = model.forward_features_online(task.support_features, task.support_labels, state)
            online_logits.append(ol)
        else:
            _, state = model.forward_features(task.support_features, task.support_labels, state)
        for j in range(i + 1) if backward else (i,):
            out[(i, j)] = model.query_features(tasks[j].query_features, state)
    return out, online_logits


def _first_shot_losses(model: InContextClassifier, tasks: list[TaskTensors]) -> list[Tensor]:
    """The reference's auxiliary loss (ACL paper App. A.6): before task ``i``'s
    support set, read its ``N`` first-shot demos from the current state and query; state discarded."""
    losses, state = [], None
    for task in tasks:
        if task.first_shot_features is None or task.first_shot_labels is None:
            raise ValueError("first_shot_loss: the episode batches were sampled without first_shot=True")
        _, fs_state = model.forward_features(task.first_shot_features, task.first_shot_labels, state)
        logits = model.query_features(task.query_features, fs_state)
        losses.append(F.cross_entropy(logits.flatten(0, 1), task.query_labels.flatten()))
        _, state = model.forward_features(task.support_features, task.support_labels, state)
    return losses


def acl_loss(
    model: InContextClassifier,
    tasks: list[TaskTensors],
    *,
    backward: bool = True,
    first_shot: bool = False,
    online_weight: float = 0.0,
) -> tuple[Tensor, dict[tuple[int, int], float]]:
    """ACL loss: mean cross-entropy over every query term of :func:`sequence_query_logits`.

    With two tasks and ``backward=True`` this is Eq. 6 of the ACL paper: CE(A|A) + CE(B|A,B) +
    CE(A|A,B) (averaged); ``backward=False`` is the no-ACL ablation (first two terms). ``first_shot``
    adds the first-shot auxiliary terms to the average. ``online_weight > 0`` adds that multiple of
    the mean cross-entropy of the online predictions of every demonstration (an auxiliary loss of
    this library, not of the reference: it rewards binding labels to classes at every shot).

    Returns:
        ``(loss, accuracies)`` with the accuracy (fraction correct) of each ``(i, j)`` term.
    """
    logits, online = sequence_query_logits(model, tasks, backward=backward, online=online_weight > 0)
    losses, accs = [], {}
    for (i, j), lg in logits.items():
        target = tasks[j].query_labels
        losses.append(F.cross_entropy(lg.flatten(0, 1), target.flatten()))
        accs[(i, j)] = (lg.argmax(-1) == target).float().mean().item()
    if first_shot:
        losses.extend(_first_shot_losses(model, tasks))
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
