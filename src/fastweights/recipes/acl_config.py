"""Configuration of the ACL recipe (presets in ``fastweights/configs/acl/*.yaml``)."""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["ACLConfig", "DataConfig", "ModelConfig", "TrainConfig", "EvalConfig", "CurriculumStage"]


@dataclass
class DataConfig:
    """FontGlyphs meta-training data (see ``fastweights.data.sources.glyphs``)."""

    image_size: int = 32
    examples_per_class: int = 20
    max_classes_per_script: int = 80
    max_scripts: int | None = None
    rotations: bool = True  # 0/90/180/270° copies as extra meta-training classes (Omniglot-style)
    seed: int = 0
    cache_dir: str | None = None
    fashion_mnist_dir: str = "/usr/share/datasets/fashion-mnist"


@dataclass
class ModelConfig:
    sequence_layer: str = "srwm"
    num_classes: int = 5  # output units N (labels 0..N-1; N is the "unknown" query label)
    d_model: int = 256
    num_layers: int = 2
    num_heads: int = 16
    ff_factor: int = 2
    dropout: float = 0.0
    vision_dropout: float = 0.0
    channels: int = 32
    norm: str = "instance"
    pool_before_norm: bool = False


@dataclass
class CurriculumStage:
    """Use ``n_way``-way ``k_shot``-shot tasks while ``step < until_step`` (labels still drawn from
    the model's ``n_way`` outputs)."""

    until_step: int = 0
    n_way: int = 2
    k_shot: int = 1


@dataclass
class TrainConfig:
    n_way: int = 5
    k_shot: int = 5
    n_query: int = 1  # queries per class per task; each is an independent read of the state
    label_space: int = 0  # labels of a task are drawn from 0..label_space-1; 0 = model.num_classes
    init_from: str = ""  # checkpoint whose model weights initialise this run (ACL paper's meta-finetuning)
    num_tasks: int = 2
    batch_size: int = 16
    acl_loss: bool = True  # False: the no-ACL ablation (no backward-transfer terms)
    first_shot_loss: bool = False  # the reference's auxiliary loss (ACL App. A.6), off by default
    synthetic_steps: int = 0  # first steps on synthetic feature-space tasks (no backbone); 0 = off
    synthetic_noise: float = 0.5
    online_weight: float = 0.0  # weight of the online-prediction auxiliary loss (0 = off)
    lr: float = 1e-3
    warmup_steps: int = 100
    schedule: str = "constant"  # "constant" after linear warmup, or "noam" (reference; Vaswani et al. 2017)
    adam_betas: tuple[float, float] = (0.9, 0.995)
    adam_eps: float = 1e-9
    grad_clip: float = 0.0
    max_steps: int = 1000
    max_minutes: float = 0.0  # wall-clock budget incl. validation; 0 = none
    val_every_steps: int = 100
    val_episodes: int = 100
    checkpoint_every_steps: int = 100
    curriculum: list[CurriculumStage] = field(default_factory=list)
    seed: int = 1
    threads: int = 0  # 0 = torch default


@dataclass
class EvalConfig:
    fewshot_episodes: int = 1000
    n_way: int = 5
    k_shot: int = 5
    n_query: int = 1
    split_runs: int = 5
    split_k_shot: int = 5
    split_benchmarks: list[str] = field(default_factory=lambda: ["digits", "fashion_mnist"])
    scenarios: list[str] = field(default_factory=lambda: ["domain"])
    batch_size: int = 50
    seed: int = 1234


@dataclass
class ACLConfig:
    name: str = "acl"
    device: str = "auto"
    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
