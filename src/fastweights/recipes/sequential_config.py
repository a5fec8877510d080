"""Configuration of the sequential multi-task recipe (presets in ``configs/sequential/``)."""

from __future__ import annotations

from dataclasses import dataclass, field

from fastweights.cl.tasks import CurriculumStage
from fastweights.data.registry import PoolConfig
from fastweights.models.classifier_config import ClassifierConfig
from fastweights.recipes.common import OptimConfig

__all__ = ["SequentialConfig", "SequentialTrainConfig", "SequentialEvalConfig"]


@dataclass
class SequentialTrainConfig(OptimConfig):
    n_way: int = 5
    k_shot: int = 15
    max_trim: int = 9  # each task's demonstrations are cut by 0..max_trim at the end (reference: K - 6)
    curriculum: list[CurriculumStage] = field(default_factory=list)  # easier tasks first (see few-shot)


@dataclass
class SequentialEvalConfig:
    episodes: int = 1000
    batch_size: int = 50
    seed: int = 1234


@dataclass
class SequentialConfig:
    name: str = "sequential"
    device: str = "auto"
    # the two domains whose tasks are concatenated (training: random order; evaluation: both orders)
    domain_a: PoolConfig = field(default_factory=PoolConfig)
    domain_b: PoolConfig = field(default_factory=lambda: PoolConfig(source="fashion_mnist", rotations=False))
    model: ClassifierConfig = field(default_factory=ClassifierConfig)
    train: SequentialTrainConfig = field(default_factory=SequentialTrainConfig)
    eval: SequentialEvalConfig = field(default_factory=SequentialEvalConfig)
