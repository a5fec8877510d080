"""Configuration of the sequential multi-task recipe (presets in ``configs/sequential/``)."""

from __future__ import annotations

from dataclasses import dataclass, field

from fastweights.checks import check_device, check_int
from fastweights.cl.tasks import CurriculumStage
from fastweights.data.registry import PoolConfig
from fastweights.models.classifier_config import ClassifierConfig, check_conv4_backbone, check_label_space
from fastweights.recipes.classifier import OptimConfig

__all__ = ["SequentialConfig", "SequentialTrainConfig", "SequentialEvalConfig"]


@dataclass
class SequentialTrainConfig(OptimConfig):
    n_way: int = 5
    k_shot: int = 15
    max_trim: int = 9  # each task's demonstrations are cut by 0..max_trim at the end (reference: K - 6)
    curriculum: list[CurriculumStage] = field(default_factory=list)  # easier tasks first (see few-shot)

    def __post_init__(self) -> None:
        super().__post_init__()
        check_int("n_way", self.n_way)
        check_int("k_shot", self.k_shot)
        check_int("max_trim", self.max_trim, low=0, high=self.n_way * self.k_shot - 1)


@dataclass
class SequentialEvalConfig:
    episodes: int = 1000
    batch_size: int = 50
    seed: int = 1234

    def __post_init__(self) -> None:
        check_int("episodes", self.episodes)
        check_int("batch_size", self.batch_size)
        check_int("seed", self.seed, low=0)


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

    def __post_init__(self) -> None:
        """Checks across sections (each section checks its own fields)."""
        check_device("device", self.device)
        check_conv4_backbone(self.model, "sequential")
        t = self.train
        check_label_space(
            self.model.num_classes,
            {"train.n_way": [t.n_way], "train.curriculum n_way": [s.n_way for s in t.curriculum]},
        )
        a, b = self.domain_a, self.domain_b
        if (a.image_size, a.channels) != (b.image_size, b.channels):
            raise ValueError(
                f"domain_b: expected image_size/channels {a.image_size}/{a.channels} like domain_a, "
                f"got {b.image_size}/{b.channels}"
            )
