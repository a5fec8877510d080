"""Configuration of the continual-learning baselines (presets in ``fastweights/configs/cl_baselines/``).

One run measures ``methods`` × ``data.benchmarks`` × ``scenarios`` × ``budgets`` on the split streams
the ACL evaluation uses (same tasks, order and test queries; ``data.k_shot``, ``data.query_per_class``
and ``data.seed`` equal ACL's ``eval.split_k_shot``, ``eval.split_query_per_class`` and ``eval.seed``).
Training settings and each method's hyper-parameters are chosen by the grids of ``search`` on a
validation split carved from training data only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from fastweights.checks import (
    check_choice,
    check_choices,
    check_int,
    check_ints,
    check_real,
    check_seed,
    check_threads,
)
from fastweights.cl.baselines.learners import LEARNERS
from fastweights.cl.baselines.trainer import OPTIMIZERS
from fastweights.data.registry import FASHION_MNIST_DEBIAN

__all__ = [
    "BENCHMARKS",
    "BUDGETS",
    "METHODS",
    "SCENARIO_VARIANTS",
    "BaselinesConfig",
    "BaselinesDataConfig",
    "BaselinesTrainGrid",
    "BaselinesSearchConfig",
    "method_optimizer",
    "method_strategy",
]

BENCHMARKS = ("digits", "fashion_mnist", "emoji", "mnist")
#: the columns of the ACL paper's Split-MNIST table (the keys of ACL's results.json ``split`` entries):
#: name -> (scenario, number of tasks)
SCENARIO_VARIANTS = {"domain": ("domain", 5), "class-2task": ("class", 2), "class": ("class", 5)}
#: "fewshot": the K demonstrations per class an in-context learner sees (run r: the r-th block);
#: "full": the task's whole training split (Hsu et al. 2018)
BUDGETS = ("fewshot", "full")
#: method name -> (strategy registry name, optimizer); optimizer None = ``train.optimizer``
METHODS: dict[str, tuple[str, str | None]] = {
    "sgd": ("finetune", "sgd"),
    "adam": ("finetune", "adam"),
    "l2": ("l2", None),
    "ewc": ("ewc", None),
    "online_ewc": ("online_ewc", None),
    "si": ("si", None),
    "mas": ("mas", None),
    "lwf": ("lwf", None),
    "replay": ("replay", None),
    "agem": ("agem", None),
    "joint": ("joint", None),
}


def method_strategy(method: str) -> str:
    """The :data:`fastweights.cl.baselines.STRATEGIES` name of a method."""
    return METHODS[method][0]


def method_optimizer(method: str, default: str) -> str:
    """The optimizer a method trains with: fine-tuning has one row per optimizer (Hsu et al. 2018), every
    other method uses ``default`` (``train.optimizer``)."""
    return METHODS[method][1] or default


@dataclass
class BaselinesDataConfig:
    """The split benchmarks and where their data lives (the same files the ACL evaluation reads)."""

    benchmarks: list[str] = field(default_factory=lambda: ["digits", "fashion_mnist"])
    image_size: int = 32
    fashion_mnist_dir: str = FASHION_MNIST_DEBIAN
    mnist_dir: str | None = None
    k_shot: int = 5  # the few-shot budget: demonstrations per class (ACL eval.split_k_shot)
    query_per_class: int = (
        10  # Split-Emoji: held-out examples per class as queries (ACL eval.split_query_per_class)
    )
    seed: int = 1234  # Split-Emoji class order (ACL eval.seed)

    def __post_init__(self) -> None:
        check_choices("benchmarks", self.benchmarks, BENCHMARKS)
        if len(set(self.benchmarks)) != len(self.benchmarks):
            raise ValueError(f"benchmarks: expected distinct names, got {list(self.benchmarks)!r}")
        check_int("image_size", self.image_size, low=16, high=512)
        if self.image_size % 16:
            raise ValueError(
                f"image_size: expected a multiple of 16 (the Conv-4 learner), got {self.image_size}"
            )
        check_ints(self, ("k_shot", "query_per_class"))
        check_int("seed", self.seed, low=0)
        if "mnist" in self.benchmarks and not self.mnist_dir:
            raise ValueError(
                "mnist_dir: expected the folder holding the MNIST IDX files for 'mnist', got null"
            )


@dataclass
class BaselinesTrainGrid:
    """The training settings searched for one budget (every combination; a single value = fixed)."""

    epochs: list[int] = field(default_factory=lambda: [1])
    batch_size: list[int] = field(default_factory=lambda: [128])
    lr: list[float] = field(default_factory=lambda: [1e-3])  # Adam
    sgd_lr: list[float] = field(default_factory=lambda: [0.05])  # SGD (the "sgd" fine-tuning row)
    #: at least this many optimizer steps per task (more epochs on small training sets, e.g. Digits' 180
    #: images per task); 0 = exactly ``epochs``
    min_steps: int = 0

    def __post_init__(self) -> None:
        check_int("min_steps", self.min_steps, low=0)
        for key in ("epochs", "batch_size", "lr", "sgd_lr"):
            values = getattr(self, key)
            if not values:
                raise ValueError(f"{key}: expected at least one value, got []")
            for v in values:
                if key in ("epochs", "batch_size"):
                    check_int(key, v)
                else:
                    check_real(key, v, 0.0, low_open=True)


@dataclass
class BaselinesTrainConfig:
    """Per-budget grids of the training settings (chosen with fine-tuning, then shared by every method
    that uses the same optimizer)."""

    optimizer: str = "adam"  # the optimizer of every method except the "sgd" fine-tuning row
    fewshot: BaselinesTrainGrid = field(
        default_factory=lambda: BaselinesTrainGrid(epochs=[20], batch_size=[10])
    )
    full: BaselinesTrainGrid = field(default_factory=BaselinesTrainGrid)

    def __post_init__(self) -> None:
        check_choice("optimizer", self.optimizer, OPTIMIZERS)


@dataclass
class BaselinesSearchConfig:
    """The validation protocol of the grid search: streams built from training data only
    (:func:`fastweights.data.streams.holdout_split` / ``holdout_pool``)."""

    runs: int = 3  # demonstration draws / seeds per grid point
    val_fraction: float = 0.2  # of each class's training images, held out as validation queries
    #: method -> hyper-parameter -> values (every combination; one value = fixed, not searched)
    grids: dict[str, dict[str, list[Any]]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        check_int("runs", self.runs)
        check_real("val_fraction", self.val_fraction, 0.0, 0.5, low_open=True)
        check_choices("grids", list(self.grids), METHODS, nonempty=False)
        for method, grid in self.grids.items():
            for name, values in grid.items():
                if not values or not all(
                    isinstance(v, int | float) and not isinstance(v, bool) for v in values
                ):
                    raise ValueError(
                        f"grids.{method}.{name}: expected a non-empty list of numbers, got {values!r}"
                    )


@dataclass
class BaselinesConfig:
    name: str = "cl_baselines"
    learner: str = "mlp"
    methods: list[str] = field(default_factory=lambda: list(METHODS))
    scenarios: list[str] = field(default_factory=lambda: list(SCENARIO_VARIANTS))
    budgets: list[str] = field(default_factory=lambda: list(BUDGETS))
    runs: int = 10  # evaluation runs (the r-th block of demonstrations / the r-th seed)
    seed: int = 0  # run r initialises and shuffles with seed * 1000 + r
    #: torch threads per process (0 = torch's default). 1: these learners' matrices are small, and two
    #: threads on a busy 2-core machine were measured 20x slower than one; use ``workers`` instead
    threads: int = 1
    #: processes measuring cells in parallel (one benchmark × scenario × budget each); the numbers do not
    #: depend on it
    workers: int = 1
    data: BaselinesDataConfig = field(default_factory=BaselinesDataConfig)
    train: BaselinesTrainConfig = field(default_factory=BaselinesTrainConfig)
    search: BaselinesSearchConfig = field(default_factory=BaselinesSearchConfig)

    def __post_init__(self) -> None:
        check_choice("learner", self.learner, LEARNERS)
        for key, choices in (("methods", METHODS), ("scenarios", SCENARIO_VARIANTS), ("budgets", BUDGETS)):
            values = getattr(self, key)
            check_choices(key, values, choices)
            if len(set(values)) != len(values):
                raise ValueError(f"{key}: expected distinct names, got {list(values)!r}")
        check_int("runs", self.runs)
        check_seed("seed", self.seed)
        check_threads("threads", self.threads)
        check_int("workers", self.workers)
