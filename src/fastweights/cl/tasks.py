"""The one source of meta-training tasks of the classifier recipes (``acl``, ``fewshot``, ``sequential``).

Per training step :class:`TaskSource` returns embedded tasks (:class:`~fastweights.cl.objective.TaskTensors`):
synthetic feature-space tasks while ``step < synthetic_steps`` (this library's curriculum stage,
:func:`~fastweights.cl.objective.synthetic_feature_tasks`), else N-way K-shot episodes sampled from the
meta-training pools and embedded by the model's backbone. Both use the ``n_way``/``k_shot`` of the
curriculum stage of the step (:func:`curriculum_stage`), easier tasks first.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import torch

from fastweights.checks import check_int
from fastweights.cl.objective import TaskTensors, embed_tasks, synthetic_feature_tasks
from fastweights.data.episodes import EpisodeSampler
from fastweights.models.in_context import InContextClassifier

__all__ = ["CurriculumStage", "TaskSchedule", "TaskSource", "curriculum_stage"]


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


@dataclass
class TaskSource:
    """Training tasks per step: ``tasks_per_sampler`` tasks from each sampler (domain), in sampler order.

    Args:
        samplers: the meta-training episode samplers (one per domain).
        schedule: the recipe's ``train`` section (batch size, target/curriculum ``n_way``/``k_shot``,
            ``synthetic_steps``, ``synthetic_noise``).
        rng: the episode-sampling stream (checkpointed by the training loop).
        synthetic: the stream of the synthetic stage (checkpointed by the training loop).
        label_space: labels of a task are an injection of its ``n_way`` classes into
            ``0..label_space-1`` (the model's outputs).
        tasks_per_sampler: tasks drawn from each sampler in one call (the ACL sequence length).
        n_query: queries per class per task (0: demonstrations only).
        first_shot: also sample the first-shot demos of ACL App. A.6 (image steps only).
    """

    samplers: Sequence[EpisodeSampler]
    schedule: TaskSchedule
    rng: np.random.Generator
    synthetic: torch.Generator
    label_space: int
    tasks_per_sampler: int = 1
    n_query: int = 0
    first_shot: bool = False

    def stage(self, step: int) -> tuple[int, int]:
        """``(n_way, k_shot)`` of ``step`` (see :func:`curriculum_stage`)."""
        return curriculum_stage(self.schedule, step)

    def is_synthetic(self, step: int) -> bool:
        """Whether ``step`` uses synthetic feature-space tasks (``step < schedule.synthetic_steps``)."""
        return step < self.schedule.synthetic_steps

    def tasks(self, model: InContextClassifier, step: int, device: torch.device | str) -> list[TaskTensors]:
        """The embedded tasks of ``step``: ``len(samplers) * tasks_per_sampler`` :class:`TaskTensors` with
        float32 features ``[B, N*K, F]`` (support) and ``[B, N*Q, F]`` (queries), ``N, K`` of the stage.

        Raises:
            ValueError: from the sampler, e.g. when the stage needs more classes or examples than a pool has.
        """
        n_way, k_shot = self.stage(step)
        s = self.schedule
        if self.is_synthetic(step):
            return synthetic_feature_tasks(
                self.synthetic,
                batch_size=s.batch_size,
                num_tasks=len(self.samplers) * self.tasks_per_sampler,
                n_way=n_way,
                k_shot=k_shot,
                n_query=self.n_query,
                feature_dim=model.backbone.feature_dim,
                label_space=self.label_space,
                noise=s.synthetic_noise,
                device=device,
            )
        tasks: list[TaskTensors] = []
        for sampler in self.samplers:
            batches = sampler.sample(
                self.rng,
                batch_size=s.batch_size,
                num_tasks=self.tasks_per_sampler,
                n_way=n_way,
                k_shot=k_shot,
                n_query=self.n_query,
                label_space=self.label_space,
                first_shot=self.first_shot,
            )
            pool = sampler.pool
            tasks += embed_tasks(model, batches, pool.mean, pool.std, device, channels=pool.channels)
        return tasks
