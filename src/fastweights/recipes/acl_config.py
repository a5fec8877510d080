"""Configuration of the ACL recipe (presets in ``fastweights/configs/acl/*.yaml``).

The sections reuse the shared configs: ``data`` is a :class:`~fastweights.data.registry.PoolConfig`
(plus the Fashion-MNIST folder of the split benchmarks), ``model`` the classifier's
:class:`~fastweights.models.classifier_config.ClassifierConfig` (re-exported as ``ModelConfig``) and
``train`` an :class:`~fastweights.recipes.common.OptimConfig` with ACL's own fields and defaults.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from fastweights.checks import check_choices, check_device, check_int, check_ints, check_real
from fastweights.cl.protocols import SCENARIOS
from fastweights.cl.tasks import CurriculumStage
from fastweights.data.registry import FASHION_MNIST_DEBIAN, PoolConfig
from fastweights.models.classifier_config import ClassifierConfig, check_label_space
from fastweights.recipes.common import OptimConfig

__all__ = ["ACLConfig", "DataConfig", "ModelConfig", "TrainConfig", "EvalConfig", "CurriculumStage"]

ModelConfig = ClassifierConfig  # the classifier's config (kept under its old name)
SPLIT_BENCHMARKS = ("digits", "fashion_mnist")  # eval.split_benchmarks: Split-Digits, Split-FashionMNIST


@dataclass
class DataConfig(PoolConfig):
    """Meta-training pools (FontGlyphs by default, any ``data.registry`` source) and the Fashion-MNIST
    folder of the Split-FashionMNIST benchmark."""

    fashion_mnist_dir: str = FASHION_MNIST_DEBIAN


@dataclass
class TrainConfig(OptimConfig):
    """ACL meta-training; optimiser/loop fields and defaults from :class:`OptimConfig` except
    ``val_episodes`` (100)."""

    n_way: int = 5
    k_shot: int = 5
    n_query: int = 1  # queries per class per task; each is an independent read of the state
    label_space: int = 0  # labels of a task are drawn from 0..label_space-1; 0 = model.num_classes
    init_from: str = ""  # checkpoint whose model weights initialise this run (ACL paper's meta-finetuning)
    num_tasks: int = 2
    acl_loss: bool = True  # False: the no-ACL ablation (no backward-transfer terms)
    first_shot_loss: bool = False  # the reference's auxiliary loss (ACL App. A.6), off by default
    online_weight: float = 0.0  # weight of the online-prediction auxiliary loss (0 = off)
    val_episodes: int = 100
    curriculum: list[CurriculumStage] = field(default_factory=list)

    def __post_init__(self) -> None:
        super().__post_init__()
        check_ints(self, ("n_way", "k_shot", "n_query", "num_tasks"))
        check_int("label_space", self.label_space, low=0)
        check_real("online_weight", self.online_weight, 0)


@dataclass
class EvalConfig:
    episodes: int = 1000  # held-out few-shot task pairs
    n_way: int = 5
    k_shot: int = 5
    n_query: int = 1
    split_runs: int = 5
    split_k_shot: int = 5
    split_benchmarks: list[str] = field(default_factory=lambda: ["digits", "fashion_mnist"])
    scenarios: list[str] = field(default_factory=lambda: ["domain"])
    batch_size: int = 50
    seed: int = 1234

    def __post_init__(self) -> None:
        check_ints(self, ("episodes", "n_way", "k_shot", "n_query", "split_runs", "split_k_shot"))
        check_int("batch_size", self.batch_size)
        check_int("seed", self.seed, low=0)
        check_choices("split_benchmarks", self.split_benchmarks, SPLIT_BENCHMARKS, nonempty=False)
        check_choices("scenarios", self.scenarios, SCENARIOS)


@dataclass
class ACLConfig:
    #: deprecated dotted key → new key (presets, run folders' ``config.yaml``, overrides; one release)
    DEPRECATED_KEYS: ClassVar[dict[str, str]] = {"eval.fewshot_episodes": "eval.episodes"}

    name: str = "acl"
    device: str = "auto"
    data: DataConfig = field(default_factory=DataConfig)
    model: ClassifierConfig = field(default_factory=ClassifierConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)

    def __post_init__(self) -> None:
        """Checks across sections (each section checks its own fields)."""
        check_device("device", self.device)
        t = self.train
        check_label_space(
            self.model.num_classes,
            {
                "train.n_way": [t.n_way],
                "train.label_space": [t.label_space],
                "train.curriculum n_way": [s.n_way for s in t.curriculum],
                "eval.n_way": [self.eval.n_way],
            },
        )
