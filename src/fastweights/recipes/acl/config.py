"""Configuration of the ACL recipe (presets in ``fastweights/configs/acl/*.yaml``).

The sections reuse the shared configs: ``data`` is a :class:`~fastweights.data.registry.PoolConfig`
(plus the Fashion-MNIST folder of the split benchmarks), ``model`` the classifier's
:class:`~fastweights.models.classifier_config.ClassifierConfig` and
``train`` an :class:`~fastweights.recipes.classifier.OptimConfig` with ACL's own fields and defaults.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from fastweights.checks import check_choice, check_choices, check_device, check_int, check_ints, check_real
from fastweights.cl.context_replay import REPLAY_ORDERS, ContextReplay, context_replay
from fastweights.cl.tasks import CurriculumStage
from fastweights.data.registry import CLASS_POOLS, FASHION_MNIST_DEBIAN, SPLIT_DATASETS, PoolConfig
from fastweights.data.streams import SCENARIOS
from fastweights.data.task_augment import TaskAugment
from fastweights.models.classifier_config import ClassifierConfig, check_label_space
from fastweights.models.frozen import parse_backbone
from fastweights.recipes.classifier import OptimConfig

__all__ = [
    "ACLConfig",
    "ACLDataConfig",
    "ACLTrainConfig",
    "ACLEvalConfig",
    "MINI_BENCHMARKS",
    "MINI_DATASETS",
]

#: eval.mini_benchmarks name -> name in results.json / the report
MINI_BENCHMARKS = {"five_datasets": "mini 5-datasets (offline analogue)", "emoji": "mini Split-Emoji"}
#: eval.mini_datasets: the data sets whose first two classes make the mini 5-datasets sequence
MINI_DATASETS = ("digits", "fashion_mnist", "font_letters", "emoji", "colour_digits")
#: eval.split_benchmarks: Split-Digits, Split-FashionMNIST, Split-Emoji (held-out subgroups), Split-MNIST
#: (needs ``data.mnist_dir``)
SPLIT_BENCHMARKS = ("digits", "fashion_mnist", "emoji", "mnist")
MINI_BENCHMARK_NAMES = tuple(MINI_BENCHMARKS)  # eval.mini_benchmarks
VAL_VIEWS = ("original", "grayscale", "low_res")  # train.val_views


@dataclass
class ACLDataConfig(PoolConfig):
    """Meta-training domains and the folders of the split benchmarks.

    ``sources`` lists the meta-training domains by registry name (ACL paper §4.1: e.g.
    ``[fontglyphs, emoji]`` offline, ``[omniglot, mini_imagenet]`` from ``root``); each task of a
    training sequence comes from one domain, the order alternating from batch to batch. Empty: the
    single domain ``source``. The other fields (``root``, ``image_size``, ``channels``, rendering
    options) apply to every domain; with an RGB domain ``channels`` must be 3 (grayscale domains are
    repeated to 3 channels).
    """

    sources: list[str] = field(default_factory=list)
    fashion_mnist_dir: str = FASHION_MNIST_DEBIAN
    mnist_dir: str | None = None  # MNIST IDX files for Split-MNIST (eval.split_benchmarks: mnist)

    def __post_init__(self) -> None:
        super().__post_init__()
        check_choices("sources", self.sources, CLASS_POOLS + SPLIT_DATASETS, nonempty=False)
        if len(set(self.sources)) != len(self.sources):
            raise ValueError(f"sources: expected distinct domain names, got {list(self.sources)!r}")

    @property
    def domains(self) -> list[str]:
        """The meta-training domains: ``sources``, or ``[source]`` when it is empty."""
        return list(self.sources) or [self.source]


@dataclass
class ACLTrainConfig(OptimConfig):
    """ACL meta-training; optimiser/loop fields and defaults from :class:`OptimConfig` except
    ``val_episodes`` (100)."""

    n_way: int = 5
    k_shot: int = 5
    n_query: int = 1  # queries per class per task; each is an independent read of the state
    label_space: int = 0  # labels of a task are drawn from 0..label_space-1; 0 = model.num_classes
    init_from: str = ""  # checkpoint whose model weights initialise this run (ACL paper's meta-finetuning)
    num_tasks: int = 2
    #: "domain": every task uses labels from ``label_space`` (domain-incremental); "class": the labels of
    #: task t (0-based) are shifted by ``n_way * t`` (class-incremental, ACL paper §4.3)
    scenario: str = "domain"
    #: with several domains: "alternate" — task t of step s from domain (t - s) mod D (the 2-/3-task
    #: protocol of automated-cl); "single" — all tasks of a sequence from domain s mod D (the reference's
    #: 5-task meta-finetuning draws all its tasks from one data set, Omniglot)
    sequence_domains: str = "alternate"
    acl_loss: bool = True  # False: the no-ACL ablation (no backward-transfer terms)
    first_shot_loss: bool = False  # the reference's auxiliary loss (ACL App. A.6), off by default
    online_weight: float = 0.0  # weight of the online-prediction auxiliary loss (0 = off)
    val_episodes: int = 100
    curriculum: list[CurriculumStage] = field(default_factory=list)
    #: per-task grayscale / low-resolution views of meta-training tasks (this library's domain
    #: randomisation; all 0 = off, the reference's setting)
    augment: TaskAugment = field(default_factory=TaskAugment)
    #: in-context replay (this library's method, fastweights.cl.context_replay): every task i >= 1 of a
    #: training (and meta-validation) sequence is read with the first ``context_replay_per_class``
    #: demonstrations of each class of every earlier task (their support order; all of them when
    #: >= k_shot) — the episodic memory of the replay baselines (Hsu et al. 2018; Chaudhry et al. 2019)
    #: re-read in context; 0 = off (the ACL paper's setting)
    context_replay_per_class: int = 0
    #: "before": the stored demonstrations first, then the task's; "mixed": shuffled together (per step
    #: from a stream seeded by train.seed and the step, so resuming continues it exactly)
    context_replay_order: str = "mixed"
    #: the views meta-validation shows every task in ("original"; "grayscale": RGB domains in BT.601 luma;
    #: "low_res": at train.augment.low_res_size pixels, enlarged back): the same fixed episodes once per
    #: view, ``val_objective`` their mean, so a choice of training views is judged on meta-validation
    #: classes seen as the test benchmarks look, never on test data
    val_views: list[str] = field(default_factory=lambda: ["original"])

    def __post_init__(self) -> None:
        super().__post_init__()
        check_choices("val_views", self.val_views, VAL_VIEWS)
        if len(set(self.val_views)) != len(self.val_views):
            raise ValueError(f"val_views: expected distinct views, given {list(self.val_views)}")
        check_ints(self, ("n_way", "k_shot", "n_query", "num_tasks"))
        check_int("context_replay_per_class", self.context_replay_per_class, low=0)
        check_choice("context_replay_order", self.context_replay_order, REPLAY_ORDERS)
        check_int("label_space", self.label_space, low=0)
        check_choice("scenario", self.scenario, SCENARIOS)
        check_choice("sequence_domains", self.sequence_domains, ("alternate", "single"))
        check_real("online_weight", self.online_weight, 0)

    def val_view(self, name: str) -> TaskAugment | None:
        """The fixed view ``name`` of :data:`VAL_VIEWS` (``None`` for ``"original"``)."""
        if name == "original":
            return None
        if name == "grayscale":
            return TaskAugment(grayscale=1.0)
        return TaskAugment(low_res=1.0, low_res_size=self.augment.low_res_size)


@dataclass
class ACLEvalConfig:
    episodes: int = 1000  # held-out few-shot task pairs
    n_way: int = 5
    k_shot: int = 5
    n_query: int = 1
    split_runs: int = 5
    split_k_shot: int = 5
    split_benchmarks: list[str] = field(default_factory=lambda: ["digits", "fashion_mnist"])
    #: "domain": 5-task domain-incremental; "class": 2-task class-incremental and, with >= 10 outputs,
    #: 5-task class-incremental (ACL paper Table 3 columns)
    scenarios: list[str] = field(default_factory=lambda: ["domain"])
    split_query_per_class: int = 10  # Split-Emoji / long-span: held-out examples per class used as queries
    #: long-span domain-incremental Split-FontGlyphs (2-way held-out classes): numbers of tasks; [] = off
    long_span_tasks: list[int] = field(default_factory=list)
    batch_size: int = 50
    seed: int = 1234
    #: the ACL paper's "mini" class-incremental sequences (§4.3, Table 4; frozen backbones only): five 2-way
    #: tasks, "five_datasets" (the first two classes of each of ``mini_datasets``) and/or "emoji" (mini
    #: Split-Emoji); split_runs / split_k_shot / split_query_per_class (emoji queries) apply
    mini_benchmarks: list[str] = field(default_factory=list)
    mini_datasets: list[str] = field(default_factory=lambda: list(MINI_DATASETS))  # their order = task order
    mini_demos_per_class: int = 50  # demonstration candidates per class: the first train images
    mini_query_per_class: int = 100  # queries per class: the first test images (fewer if a class has fewer)
    #: in-context replay of the evaluation (forgetting pairs, split benchmarks, long-span and mini
    #: sequences): stored demonstrations per class of every earlier task read with each later one (see
    #: train.context_replay_per_class); null = train.context_replay_per_class (a model meta-trained with
    #: replay is evaluated with it), 0 = off, > 0 also for a model trained without (an evaluation-only arm)
    context_replay_per_class: int | None = None
    #: "before" | "mixed" (see train.context_replay_order); null = train.context_replay_order; the
    #: "mixed" permutations of split run r come from a stream seeded by eval.seed and r
    context_replay_order: str | None = None

    def __post_init__(self) -> None:
        check_ints(
            self,
            (
                "episodes",
                "n_way",
                "k_shot",
                "n_query",
                "split_runs",
                "split_k_shot",
                "split_query_per_class",
                "mini_demos_per_class",
                "mini_query_per_class",
            ),
        )
        check_choices("mini_benchmarks", self.mini_benchmarks, MINI_BENCHMARK_NAMES, nonempty=False)
        check_choices("mini_datasets", self.mini_datasets, MINI_DATASETS)
        if len(self.mini_datasets) != 5 or len(set(self.mini_datasets)) != 5:
            raise ValueError(
                f"mini_datasets: expected 5 distinct data sets, got {list(self.mini_datasets)!r}"
            )
        if self.mini_benchmarks and self.split_k_shot > self.mini_demos_per_class:
            raise ValueError(
                f"mini_demos_per_class: expected >= split_k_shot={self.split_k_shot}, "
                f"got {self.mini_demos_per_class}"
            )
        for n in self.long_span_tasks:
            check_int("long_span_tasks", n, low=2)
        check_int("batch_size", self.batch_size)
        check_int("seed", self.seed, low=0)
        check_choices("split_benchmarks", self.split_benchmarks, SPLIT_BENCHMARKS, nonempty=False)
        check_choices("scenarios", self.scenarios, SCENARIOS)
        if self.context_replay_per_class is not None:
            check_int("context_replay_per_class", self.context_replay_per_class, low=0)
        if self.context_replay_order is not None:
            check_choice("context_replay_order", self.context_replay_order, REPLAY_ORDERS)


@dataclass
class ACLConfig:
    #: deprecated dotted key → new key (presets, run folders' ``config.yaml``, overrides; one release)
    DEPRECATED_KEYS: ClassVar[dict[str, str]] = {"eval.fewshot_episodes": "eval.episodes"}

    name: str = "acl"
    device: str = "auto"
    data: ACLDataConfig = field(default_factory=ACLDataConfig)
    model: ClassifierConfig = field(default_factory=ClassifierConfig)
    train: ACLTrainConfig = field(default_factory=ACLTrainConfig)
    eval: ACLEvalConfig = field(default_factory=ACLEvalConfig)

    def __post_init__(self) -> None:
        """Checks across sections (each section checks its own fields)."""
        check_device("device", self.device)
        t = self.train
        shift = t.num_tasks if t.scenario == "class" else 1  # class-incremental: n_way new labels per task
        check_label_space(
            self.model.num_classes,
            {
                "train.n_way": [t.n_way],
                "train.label_space": [t.label_space],
                "train.n_way * train.num_tasks (scenario class)": [t.n_way * shift],
                "train.curriculum n_way": [s.n_way * shift for s in t.curriculum],
                "eval.n_way": [self.eval.n_way],
            },
        )
        if "emoji" in self.eval.split_benchmarks and self.data.channels != 3:
            raise ValueError(
                "eval.split_benchmarks: 'emoji' (Split-Emoji, RGB) needs an RGB model (data.channels: 3), "
                f"got data.channels={self.data.channels}"
            )
        e = self.eval
        if ("emoji" in e.split_benchmarks or e.long_span_tasks or e.mini_benchmarks) and (
            e.split_k_shot + e.split_query_per_class > self.data.examples_per_class
        ):
            raise ValueError(
                "eval.split_query_per_class: Split-Emoji / long-span / mini tasks need eval.split_k_shot + "
                f"eval.split_query_per_class <= data.examples_per_class={self.data.examples_per_class}, "
                f"got {e.split_k_shot} + {e.split_query_per_class}"
            )
        self._check_backbone()
        if "mnist" in self.eval.split_benchmarks and not self.data.mnist_dir:
            raise ValueError(
                "data.mnist_dir: expected the folder holding the MNIST IDX files for eval.split_benchmarks "
                "'mnist' (Split-MNIST), got null"
            )

    def train_replay(self) -> ContextReplay | None:
        """The in-context replay of meta-training and meta-validation (``train.context_replay_*``;
        ``None``: off)."""
        return context_replay(self.train.context_replay_per_class, self.train.context_replay_order)

    def eval_replay(self) -> ContextReplay | None:
        """The in-context replay of the evaluation: ``eval.context_replay_*``, each ``null`` taken from
        ``train.context_replay_*`` (``None``: off)."""
        e, t = self.eval, self.train
        per_class = e.context_replay_per_class
        per_class = t.context_replay_per_class if per_class is None else per_class
        order = t.context_replay_order if e.context_replay_order is None else e.context_replay_order
        return context_replay(per_class, order)

    def _check_backbone(self) -> None:
        """A frozen encoder learns on cached features: no pixel-level options, no image split benchmarks;
        the mini sequences need one."""
        frozen = parse_backbone(self.model.backbone) is not None
        e, t = self.eval, self.train
        if not frozen:
            if e.mini_benchmarks:
                raise ValueError(
                    "eval.mini_benchmarks: expected [] for model.backbone 'conv4' (the mini sequences are "
                    f"measured on a frozen encoder's features), got {list(e.mini_benchmarks)!r}"
                )
            return
        problems = []
        if e.mini_benchmarks and self.model.num_classes < 10:
            problems.append(
                "eval.mini_benchmarks: the mini sequences (5 tasks x 2 classes, class-incremental) need "
                f"model.num_classes >= 10, got {self.model.num_classes}"
            )
        refused = {
            "data.rotations": (self.data.rotations, False),
            "train.augment.grayscale": (t.augment.grayscale, 0),
            "train.augment.low_res": (t.augment.low_res, 0),
            "eval.split_benchmarks": (list(e.split_benchmarks), []),
        }
        problems += [
            f"{key}: expected {allowed!r} with model.backbone {self.model.backbone!r} (features are "
            f"computed once per image; use eval.mini_benchmarks), got {value!r}"
            for key, (value, allowed) in refused.items()
            if value != allowed
        ]
        if problems:
            self._check_encoder_weights()  # a weights file that cannot work is the problem to fix first
            raise ValueError(problems[0])

    def _check_encoder_weights(self) -> None:
        """The frozen encoder of ``model.backbone`` loads from ``model.backbone_weights``.

        Raises:
            ValueError: naming ``model.backbone_weights`` for a missing, unreadable or wrong-layout
                weights file (an encoder whose optional package is missing is left to the run's start).
        """
        from fastweights.recipes.acl.frozen import frozen_encoder

        try:
            frozen_encoder(self.model)
        except ImportError:
            pass
