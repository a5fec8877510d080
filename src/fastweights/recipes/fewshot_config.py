"""Configuration of the few-shot and sequential recipes (presets in ``fastweights/configs/``)."""

from __future__ import annotations

from dataclasses import dataclass, field

from fastweights.recipes.acl_config import CurriculumStage, ModelConfig
from fastweights.recipes.common import OptimConfig

__all__ = [
    "PoolConfig",
    "FewShotConfig",
    "FewShotTrainConfig",
    "FewShotEvalConfig",
    "SequentialConfig",
    "SequentialTrainConfig",
    "SequentialEvalConfig",
]


@dataclass
class PoolConfig:
    """Where few-shot classes come from: ``source`` is a name of ``data.registry.CLASS_POOLS``
    (``fontglyphs`` embedded; ``omniglot``, ``mini_imagenet``, ``fc100``, ``cifar_fs`` from ``root``)
    or of ``SPLIT_DATASETS`` (e.g. ``fashion_mnist``: its classes become a pool)."""

    source: str = "fontglyphs"
    root: str | None = None  # local folder of a real benchmark (default $FASTWEIGHTS_DATA)
    image_size: int = 32
    channels: int = 1
    rotations: bool = True  # 0/90/180/270° copies as extra meta-training classes (Omniglot-style)
    # FontGlyphs rendering (ignored by the other sources)
    examples_per_class: int = 20
    max_classes_per_script: int = 80
    max_scripts: int | None = None
    seed: int = 0
    cache_dir: str | None = None


@dataclass
class FewShotTrainConfig(OptimConfig):
    n_way: int = 5
    k_shot: int = 1
    n_query: int = 1  # queries per class per episode, each an independent read of the state
    # e.g. [{until_step: 1500, n_way: 5, k_shot: 5}]: easier episodes first (they leave the
    # in-context-learning plateau sooner), then the target n_way/k_shot
    curriculum: list[CurriculumStage] = field(default_factory=list)


@dataclass
class FewShotEvalConfig:
    episodes: int = 1000
    runs: int = 5
    batch_size: int = 50
    seed: int = 1234


@dataclass
class FewShotConfig:
    name: str = "fewshot"
    device: str = "auto"
    data: PoolConfig = field(default_factory=PoolConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    train: FewShotTrainConfig = field(default_factory=FewShotTrainConfig)
    eval: FewShotEvalConfig = field(default_factory=FewShotEvalConfig)


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
    model: ModelConfig = field(default_factory=ModelConfig)
    train: SequentialTrainConfig = field(default_factory=SequentialTrainConfig)
    eval: SequentialEvalConfig = field(default_factory=SequentialEvalConfig)
