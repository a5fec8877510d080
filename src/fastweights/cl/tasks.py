"""The one source of meta-training (and evaluation) task sequences of the classifier recipes (``acl``,
``fewshot``, ``sequential``).

:func:`sample_task_sequences` draws a batch of task sequences whose position ``t`` comes from the
sampler (domain) ``order[t]``, each task embedded with its own pool's normalisation, with domain- or
class-incremental labels (ACL paper, Irie et al. 2025, §4.2 and §4.4). It is used for training
(:class:`TaskSource`) and evaluation (:mod:`fastweights.cl.protocols`).

Per training step :class:`TaskSource` returns embedded tasks (:class:`~fastweights.cl.objective.TaskTensors`):
synthetic feature-space tasks while ``step < synthetic_steps`` (this library's curriculum stage,
:func:`~fastweights.cl.objective.synthetic_feature_tasks`), else N-way K-shot episodes sampled from the
meta-training pools and embedded by the model's backbone. Both use the ``n_way``/``k_shot`` of the
curriculum stage of the step (:func:`curriculum_stage`), easier tasks first.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Protocol

import numpy as np
import torch

from fastweights.checks import check_int
from fastweights.cl.objective import TaskTensors, embed_tasks, synthetic_feature_tasks
from fastweights.data.episodes import EpisodeSampler
from fastweights.data.streams import SCENARIOS
from fastweights.data.task_augment import TaskAugment
from fastweights.models.in_context import InContextClassifier

__all__ = [
    "CurriculumStage",
    "TaskSchedule",
    "TaskSource",
    "curriculum_stage",
    "sample_task_sequences",
    "shift_class_labels",
    "task_label_space",
]


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
    ``"class"`` (class-incremental, ACL paper §4.4): every task uses ``0..n_way-1``, shifted later by
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
    """Class-incremental labels (ACL paper §4.4: +2(t−1) for 2-way tasks, 1-based): the support,
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
    (:func:`shift_class_labels`). The ACL paper's multi-domain sequences (§4.2: Omniglot and
    Mini-ImageNet tasks in alternating order) and 5-task sequences (§4.4). ``augment`` (training
    only): each task's view drawn after its sampler's episodes, from ``rng``
    (:meth:`~fastweights.data.task_augment.TaskAugment.apply`). Fully determined by ``rng``'s state
    (and torch's, if the backbone has dropout in training mode).

    Returns:
        ``len(order)`` :class:`~fastweights.cl.objective.TaskTensors` with features ``[B, N*K, F]``
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
            A,B at even steps, B,A at odd ones, ACL spec §4.2 step 2; three: the cyclic rotations
            (A,B,C), (C,A,B), (B,C,A) of spec §4.3); otherwise ``t % len(samplers)``.
        single_domain: every position of step ``s`` uses sampler ``s % len(samplers)`` (all tasks of a
            sequence from one domain, the domain changing from batch to batch; the reference's 5-task
            meta-finetuning draws its 5 tasks from one data set, spec §4.4); overrides ``alternate``.
        scenario: ``"domain"`` or ``"class"`` (class-incremental labels, ACL paper §4.4).
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
        :func:`~fastweights.cl.objective.synthetic_feature_tasks` (synthetic steps; labels as there).

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
        )
        return shift_class_labels(tasks, n_way) if self.scenario == "class" else tasks
