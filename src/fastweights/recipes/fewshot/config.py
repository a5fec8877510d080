"""Configuration of the few-shot recipe (presets in ``fastweights/configs/fewshot/``); the ``data``
section is a :class:`~fastweights.data.registry.PoolConfig`."""

from __future__ import annotations

from dataclasses import dataclass, field

from fastweights.checks import check_device, check_int, check_ints
from fastweights.cl.tasks import CurriculumStage
from fastweights.data.registry import PoolConfig
from fastweights.models.classifier_config import ClassifierConfig, check_conv4_backbone, check_label_space
from fastweights.recipes.classifier import OptimConfig

__all__ = ["FewShotConfig", "FewShotTrainConfig", "FewShotEvalConfig"]


@dataclass
class FewShotTrainConfig(OptimConfig):
    n_way: int = 5
    k_shot: int = 1
    n_query: int = 1  # queries per class per episode, each an independent read of the state
    # e.g. [{until_step: 1500, n_way: 5, k_shot: 5}]: easier episodes first (they leave the
    # in-context-learning plateau sooner), then the target n_way/k_shot
    curriculum: list[CurriculumStage] = field(default_factory=list)

    def __post_init__(self) -> None:
        super().__post_init__()
        check_ints(self, ("n_way", "k_shot", "n_query"))


@dataclass
class FewShotEvalConfig:
    episodes: int = 1000
    runs: int = 5
    batch_size: int = 50
    seed: int = 1234

    def __post_init__(self) -> None:
        check_ints(self, ("episodes", "runs", "batch_size"))
        check_int("seed", self.seed, low=0)


@dataclass
class FewShotConfig:
    name: str = "fewshot"
    device: str = "auto"
    data: PoolConfig = field(default_factory=PoolConfig)
    model: ClassifierConfig = field(default_factory=ClassifierConfig)
    train: FewShotTrainConfig = field(default_factory=FewShotTrainConfig)
    eval: FewShotEvalConfig = field(default_factory=FewShotEvalConfig)

    def __post_init__(self) -> None:
        """Checks across sections (each section checks its own fields)."""
        check_device("device", self.device)
        check_conv4_backbone(self.model, "fewshot")
        check_label_space(
            self.model.num_classes,
            {
                "train.n_way": [self.train.n_way],
                "train.curriculum n_way": [s.n_way for s in self.train.curriculum],
            },
        )
