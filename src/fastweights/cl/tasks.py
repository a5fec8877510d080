"""The one source of meta-training (and evaluation) task sequences of the classifier recipes (``acl``,
``fewshot``, ``sequential``).

:func:`sample_task_sequences` draws a batch of task sequences whose position ``t`` comes from the
sampler (domain) ``order[t]``, each task embedded with its own pool's normalisation, with domain- or
class-incremental labels (ACL paper, Irie et al. 2025, §4.1 and §4.3). It is used for training
(:class:`TaskSource`) and evaluation (:mod:`fastweights.cl.protocols`).

Per training step :class:`TaskSource` returns embedded tasks (:class:`TaskTensors`):
synthetic feature-space tasks while ``step < synthetic_steps`` (this library's curriculum stage,
:func:`synthetic_feature_tasks`), else N-way K-shot episodes sampled from the
meta-training pools and embedded by the model's backbone. Both use the ``n_way``/``k_shot`` of the
curriculum stage of the step (:func:`curriculum_stage`), easier tasks first.

The task tensors themselves live here too: :class:`TaskTensors` (one task of a batch of sequences as
backbone features), :func:`to_model_images` (uint8 images → normalised model inputs),
:func:`embed_tasks` (episode batches → :class:`TaskTensors` through the backbone) and
:func:`synthetic_feature_tasks` (the synthetic feature-space tasks).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Protocol

import numpy as np
import torch
from torch import Tensor

from fastweights.checks import check_int
from fastweights.data.episodes import EpisodeBatch, EpisodeSampler
from fastweights.data.streams import SCENARIOS
from fastweights.data.task_augment import TaskAugment
from fastweights.models.in_context import InContextClassifier

__all__ = [
    "TaskTensors",
    "to_model_images",
    "embed_tasks",
    "synthetic_feature_tasks",
    "CurriculumStage",
    "TaskSchedule",
    "TaskSource",
    "curriculum_stage",
    "sample_task_sequences",
    "shift_class_labels",
    "task_label_space",
]


@dataclass
class TaskTensors:
    """Backbone features of one task of a batch of ``B`` task sequences (the in-context learners' input).

    Features are float (the model's dtype; float32 for synthetic tasks), labels int64, all on one
    device: support ``[B, N*K, F]`` / ``[B, N*K]``, queries ``[B, N*Q, F]`` / ``[B, N*Q]`` and, when the
    episodes were sampled with ``first_shot=True``, the first-shot demos ``[B, N, F]`` / ``[B, N]``
    (ACL paper App. A.6; otherwise ``None``). Built by :func:`embed_tasks` and
    :func:`synthetic_feature_tasks`; not to be confused with
    :class:`fastweights.cl.baselines.trainer.TaskInputs` (one unbatched task for gradient training).
    """

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
    first_shot: bool = False,
) -> list[TaskTensors]:
    """Few-shot tasks in *feature space*: every class is a fresh random prototype
    ``relu(N(0, I_F))`` and every example is ``relu(prototype_pre + noise · N(0, I_F))``.

    A curriculum stage of this library (not of the reference): it lets the sequence learner acquire
    in-context label binding without the cost of the vision backbone, whose features it replaces.
    Labels: a random injection of the ``n_way`` classes into ``0..label_space-1`` per task; demos are
    randomly interleaved; queries are fresh examples (``n_query`` per class); with ``first_shot`` one
    more fresh example per class, in random class order (the first-shot demos of ACL paper App. A.6),
    drawn after the queries, so the other tensors are those of ``first_shot=False``.

    Returns:
        ``num_tasks`` :class:`TaskTensors` with float32 features ``[B, *, feature_dim]`` (first-shot
        ``[B, N, feature_dim]`` / ``[B, N]`` with ``first_shot``, else ``None``).
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
        support, queries = draw(protos, labels, k_shot), draw(protos, labels, n_query)
        tasks.append(TaskTensors(*support, *queries, *(draw(protos, labels, 1) if first_shot else ())))
    return tasks


@dataclass
class CurriculumStage:
    """Use ``n_way``-way ``k_shot``-shot tasks while ``step < until_step`` (labels still drawn from
    the model's ``n_way`` outputs)."""

    until_step: int = 0
    n_way: int = 2
    k_shot: int = 1

    def __post_init__(self) -> None:
        check_int("until_step", self.until_step, low=0)
        check_int("n_way", self.n_way)
        check_int("k_shot", self.k_shot)


class TaskSchedule(Protocol):
    """The fields of a recipe's ``train`` section that decide which tasks a step gets."""

    batch_size: int
    n_way: int
    k_shot: int
    curriculum: list[CurriculumStage]
    synthetic_steps: int
    synthetic_noise: float


def curriculum_stage(t: TaskSchedule, step: int) -> tuple[int, int]:
    """``(n_way, k_shot)`` at ``step``: the first stage of ``t.curriculum`` with ``step < until_step``,
    else ``(t.n_way, t.k_shot)``."""
    for s in t.curriculum:
        if step < s.until_step:
            return s.n_way, s.k_shot
    return t.n_way, t.k_shot


def task_label_space(
    scenario: str, *, n_way: int, num_tasks: int, label_space: int | None, outputs: int
) -> int | None:
    """The label space each task draws its labels from, before :func:`shift_class_labels`.

    ``"domain"``: every task maps its ``n_way`` classes into ``0..label_space-1`` (``None``: ``n_way``).
    ``"class"`` (class-incremental, ACL paper §4.3): every task uses ``0..n_way-1``, shifted later by
    ``n_way * t``, so ``n_way * num_tasks`` labels are needed (``label_space``, default ``outputs``).

    Returns:
        ``label_space`` (``"domain"``) or ``n_way`` (``"class"``).

    Raises:
        ValueError: for an unknown ``scenario``, a ``label_space`` above the model's ``outputs`` or
            below ``n_way``, or (``"class"``) below ``n_way * num_tasks``.
    """
    if scenario not in SCENARIOS:
        raise ValueError(f"scenario: expected one of {SCENARIOS}, given {scenario!r}")
    space = label_space if label_space is not None else (n_way if scenario == "domain" else outputs)
    if space > outputs:
        raise ValueError(f"label_space: expected <= the model's {outputs} outputs, given {space}")
    need = n_way * num_tasks if scenario == "class" else n_way
    if space < need:
        what = f"n_way * num_tasks = {n_way} * {num_tasks}" if scenario == "class" else "n_way"
        source = "label_space" if label_space is not None else "the model's outputs"
        raise ValueError(
            f"label_space: scenario {scenario!r} needs {what} = {need} labels, given {space} ({source})"
        )
    return space if scenario == "domain" else n_way


def shift_class_labels(tasks: list[TaskTensors], n_way: int) -> list[TaskTensors]:
    """Class-incremental labels (ACL paper §4.3, App. A.1/A.7: +2(t−1) for 2-way tasks, 1-based): the support,
    query and first-shot labels of position ``t`` (0-based) shifted by ``n_way * t``. New tensors."""

    def shift(labels: torch.Tensor | None, t: int) -> torch.Tensor | None:
        return None if labels is None else labels + n_way * t

    return [
        replace(
            task,
            support_labels=shift(task.support_labels, t),
            query_labels=shift(task.query_labels, t),
            first_shot_labels=shift(task.first_shot_labels, t),
        )
        for t, task in enumerate(tasks)
    ]


def sample_task_sequences(
    model: InContextClassifier,
    samplers: Sequence[EpisodeSampler],
    order: Sequence[int],
    rng: np.random.Generator,
    *,
    batch_size: int,
    n_way: int,
    k_shot: int,
    n_query: int,
    label_space: int | None = None,
    scenario: str = "domain",
    first_shot: bool = False,
    device: torch.device | str = "cpu",
    augment: TaskAugment | None = None,
) -> list[TaskTensors]:
    """``batch_size`` sequences of ``len(order)`` tasks, position ``t`` from ``samplers[order[t]]``.

    The positions of one sampler are drawn in one ``sampler.sample(num_tasks=count)`` call (so their
    classes are distinct within a sequence), samplers in index order (a sampler absent from ``order``
    is not called), and embedded by ``model``'s backbone with that sampler's pool normalisation
    (``pool.mean``, ``pool.std``, ``pool.channels``). Labels: see :func:`task_label_space`; with
    ``scenario="class"`` position ``t``'s labels are shifted by ``n_way * t``
    (:func:`shift_class_labels`). The ACL paper's multi-domain sequences (§4.1: Omniglot and
    Mini-ImageNet tasks in alternating order) and 5-task sequences (§4.3). ``augment`` (training
    only): each task's view drawn after its sampler's episodes, from ``rng``
    (:meth:`~fastweights.data.task_augment.TaskAugment.apply`). Fully determined by ``rng``'s state
    (and torch's, if the backbone has dropout in training mode).

    Returns:
        ``len(order)`` :class:`TaskTensors` with features ``[B, N*K, F]``
        (support), ``[B, N*Q, F]`` (queries) and, with ``first_shot``, ``[B, N, F]`` (the model's
        dtype), labels int64.

    Raises:
        ValueError: for an empty ``order`` or an index outside ``0..len(samplers)-1``, from
            :func:`task_label_space`, or from the sampler (e.g. a pool with too few classes).
    """
    if len(order) == 0 or any(not 0 <= int(i) < len(samplers) for i in order):
        last = len(samplers) - 1
        raise ValueError(
            f"order: expected a non-empty list of sampler indices in 0..{last}, given {list(order)}"
        )
    space = task_label_space(
        scenario, n_way=n_way, num_tasks=len(order), label_space=label_space, outputs=model.num_classes
    )
    tasks: list[TaskTensors | None] = [None] * len(order)
    for index in sorted({int(i) for i in order}):
        positions = [t for t, i in enumerate(order) if int(i) == index]
        sampler = samplers[index]
        batches = sampler.sample(
            rng,
            batch_size=batch_size,
            num_tasks=len(positions),
            n_way=n_way,
            k_shot=k_shot,
            n_query=n_query,
            label_space=space,
            first_shot=first_shot,
        )
        pool = sampler.pool
        if augment is not None:
            batches = augment.apply(batches, rng, channels=pool.channels)
        embedded = embed_tasks(model, batches, pool.mean, pool.std, device, channels=pool.channels)
        for t, task in zip(positions, embedded, strict=True):
            tasks[t] = task
    placed = [task for task in tasks if task is not None]  # every position was filled
    return shift_class_labels(placed, n_way) if scenario == "class" else placed


@dataclass
class TaskSource:
    """Training tasks per step: sequences of ``num_tasks`` tasks, position ``t`` of step ``s`` from
    sampler :meth:`order` ``(s)[t]``.

    Args:
        samplers: the meta-training episode samplers (one per domain).
        schedule: the recipe's ``train`` section (batch size, target/curriculum ``n_way``/``k_shot``,
            ``synthetic_steps``, ``synthetic_noise``).
        rng: the episode-sampling stream (checkpointed by the training loop).
        synthetic: the stream of the synthetic stage (checkpointed by the training loop).
        label_space: labels of a task are an injection of its ``n_way`` classes into
            ``0..label_space-1`` (the model's outputs); with ``scenario="class"`` the ``n_way * num_tasks``
            labels the shifted tasks use (see :func:`task_label_space`).
        num_tasks: tasks per sequence (the ACL sequence length); default ``len(samplers)`` (one task per
            sampler), or ``len(samplers) * tasks_per_sampler``.
        alternate: position ``t`` of step ``s`` uses sampler ``(t - s) % len(samplers)`` (two domains:
            A,B at even steps, B,A at odd ones, as automated-cl's 2-task training; three: the cyclic
            rotations (A,B,C), (C,A,B), (B,C,A) of its 3-task training, not all 6 orders);
            otherwise ``t % len(samplers)``.
        single_domain: every position of step ``s`` uses sampler ``s % len(samplers)`` (all tasks of a
            sequence from one domain, the domain changing from batch to batch; the reference's 5-task
            meta-finetuning draws its 5 tasks from one data set, Omniglot); overrides ``alternate``.
        scenario: ``"domain"`` or ``"class"`` (class-incremental labels, ACL paper §4.3).
        n_query: queries per class per task (0: demonstrations only).
        first_shot: also sample the first-shot demos of ACL App. A.6 (image steps only).
        tasks_per_sampler: the former spelling of ``num_tasks = len(samplers) * tasks_per_sampler``
            (``None``: not given; an error together with ``num_tasks``).
        augment: per-task grayscale / low-resolution views of image tasks (``None``: none).

    Raises:
        ValueError: if ``samplers`` is empty, ``num_tasks`` is not an int >= 1, or both ``num_tasks``
            and ``tasks_per_sampler`` are given.
    """

    samplers: Sequence[EpisodeSampler]
    schedule: TaskSchedule
    rng: np.random.Generator
    synthetic: torch.Generator
    label_space: int
    num_tasks: int | None = None
    alternate: bool = False
    single_domain: bool = False
    scenario: str = "domain"
    n_query: int = 0
    first_shot: bool = False
    tasks_per_sampler: int | None = None
    augment: TaskAugment | None = None

    def __post_init__(self) -> None:
        if len(self.samplers) == 0:
            raise ValueError("samplers: expected at least one EpisodeSampler, given none")
        if self.tasks_per_sampler is not None:
            if self.num_tasks is not None:
                raise ValueError("num_tasks, tasks_per_sampler: expected one of them, given both")
            check_int("tasks_per_sampler", self.tasks_per_sampler)
            self.num_tasks = len(self.samplers) * self.tasks_per_sampler
        elif self.num_tasks is None:
            self.num_tasks = len(self.samplers)
        check_int("num_tasks", self.num_tasks)
        if self.scenario not in SCENARIOS:
            raise ValueError(f"scenario: expected one of {SCENARIOS}, given {self.scenario!r}")

    def stage(self, step: int) -> tuple[int, int]:
        """``(n_way, k_shot)`` of ``step`` (see :func:`curriculum_stage`)."""
        return curriculum_stage(self.schedule, step)

    def is_synthetic(self, step: int) -> bool:
        """Whether ``step`` uses synthetic feature-space tasks (``step < schedule.synthetic_steps``)."""
        return step < self.schedule.synthetic_steps

    def order(self, step: int) -> list[int]:
        """The sampler index of each position of ``step``'s sequences (synthetic steps use no sampler)."""
        n, count = len(self.samplers), int(self.num_tasks or 0)
        if self.single_domain:
            return [step % n] * count
        offset = step if self.alternate else 0
        return [(t - offset) % n for t in range(count)]

    def tasks(self, model: InContextClassifier, step: int, device: torch.device | str) -> list[TaskTensors]:
        """The embedded tasks of ``step``: ``num_tasks`` :class:`TaskTensors` with float32 features
        ``[B, N*K, F]`` (support) and ``[B, N*Q, F]`` (queries), ``N, K`` of the stage; see
        :func:`sample_task_sequences` (image steps) and
        :func:`synthetic_feature_tasks` (synthetic steps; labels as there).

        Raises:
            ValueError: from :func:`task_label_space`, or from the sampler, e.g. when the stage needs
                more classes or examples than a pool has.
        """
        n_way, k_shot = self.stage(step)
        s = self.schedule
        order = self.order(step)
        if not self.is_synthetic(step):
            return sample_task_sequences(
                model,
                self.samplers,
                order,
                self.rng,
                batch_size=s.batch_size,
                n_way=n_way,
                k_shot=k_shot,
                n_query=self.n_query,
                label_space=self.label_space,
                scenario=self.scenario,
                first_shot=self.first_shot,
                device=device,
                augment=self.augment,
            )
        space = task_label_space(
            self.scenario,
            n_way=n_way,
            num_tasks=len(order),
            label_space=self.label_space,
            outputs=model.num_classes,
        )
        tasks = synthetic_feature_tasks(
            self.synthetic,
            batch_size=s.batch_size,
            num_tasks=len(order),
            n_way=n_way,
            k_shot=k_shot,
            n_query=self.n_query,
            feature_dim=model.backbone.feature_dim,
            label_space=int(space),
            noise=s.synthetic_noise,
            device=device,
            first_shot=self.first_shot,
        )
        return shift_class_labels(tasks, n_way) if self.scenario == "class" else tasks
