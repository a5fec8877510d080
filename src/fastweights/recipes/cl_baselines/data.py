"""The task streams of the continual-learning baselines: the split benchmarks of the ACL evaluation
(``fastweights.recipes.acl.evaluation``) as model-input tensors, for both data budgets, on the test
split or on a validation split carved from training data.

- Split-Digits / Split-FashionMNIST / Split-MNIST: class pairs (0, 1), (2, 3), …
  (:func:`fastweights.data.streams.split_benchmark`); few-shot run ``r`` = the ``r``-th block of
  ``k_shot`` train images per class (the demonstrations ACL's run ``r`` sees), full = every train image
  of the task's classes; queries = every test image of the task's classes.
- Split-Emoji: 2-way tasks of the held-out EmojiImages subgroups in the order of ``data.seed``
  (:func:`fastweights.data.streams.pool_split_tasks`), queries the last ``data.query_per_class``
  examples of each class.
"""

from __future__ import annotations

from typing import Any

from fastweights.cl.baselines.trainer import TaskInputs, task_inputs
from fastweights.data.registry import PoolConfig, load_pools_for, load_split_dataset
from fastweights.data.sources.base import ClassPool, SplitDataset
from fastweights.data.streams import (
    SPLIT_PAIRS,
    holdout_pool,
    holdout_split,
    pool_split_tasks,
    split_benchmark,
)
from fastweights.recipes.cl_baselines.config import SCENARIO_VARIANTS, BaselinesDataConfig

__all__ = ["BENCHMARK_NAMES", "Benchmark", "Streams", "load_benchmark", "validation_copy", "n_outputs"]

#: data.benchmarks name -> the benchmark's name in results (as in ACL's results.json)
BENCHMARK_NAMES = {
    "mnist": "Split-MNIST",
    "fashion_mnist": "Split-FashionMNIST",
    "digits": "Split-Digits",
    "emoji": "Split-Emoji",
}

Benchmark = SplitDataset | ClassPool


def load_benchmark(d: BaselinesDataConfig, name: str) -> Benchmark:
    """The data of benchmark ``name`` (``data.benchmarks``): a train/test data set, or for ``"emoji"``
    the held-out (meta-test) EmojiImages pool ACL's Split-Emoji uses.

    Raises:
        FileNotFoundError / ValueError: from the loaders, naming ``data.<name>_dir`` for a missing folder.
    """
    if name == "emoji":
        return load_pools_for(PoolConfig(source="emoji", image_size=d.image_size, channels=3), "data")["test"]
    if name == "digits":
        return load_split_dataset(name, image_size=d.image_size)
    key = f"{name}_dir"
    try:
        return load_split_dataset(name, str(getattr(d, key)), image_size=d.image_size)
    except (FileNotFoundError, ValueError) as err:
        raise type(err)(f"data.{key}: {err}") from None


def validation_copy(data: Benchmark, d: BaselinesDataConfig, val_fraction: float) -> Benchmark:
    """``data`` with its test queries replaced by held-out *training* examples (``val_fraction`` of each
    class's, at least 1): what the grid search runs on."""
    if isinstance(data, ClassPool):
        return holdout_pool(data, d.query_per_class)
    counts = [int((data.train.labels == c).sum()) for c in range(data.num_classes)]
    return holdout_split(data, max(1, int(val_fraction * min(counts))))


def _val_queries(data: ClassPool, val_fraction: float) -> int:
    """Queries per class of a validation pool stream."""
    return max(1, int(val_fraction * data.examples_per_class))


def n_outputs(variant: str) -> int:
    """The single head's outputs of a scenario variant: 2 (domain-incremental) or 2 × tasks (class)."""
    scenario, tasks = SCENARIO_VARIANTS[variant]
    return 2 if scenario == "domain" else 2 * tasks


class Streams:
    """The task streams of one benchmark, on its test split and on its :func:`validation_copy`.

    ``get(variant, budget, run, validation)`` → the tasks of run ``run`` as tensors (``variant`` a key of
    ``SCENARIO_VARIANTS``, ``budget`` ``"fewshot"`` or ``"full"``). Full-budget streams do not depend on
    ``run`` and are kept (one per variant and split) while the object lives.
    """

    def __init__(self, data: Benchmark, d: BaselinesDataConfig, val_fraction: float) -> None:
        self.data, self.d, self.frac = data, d, val_fraction
        self.val = validation_copy(data, d, val_fraction)
        self._full: dict[tuple[str, bool], list[TaskInputs]] = {}

    def get(self, variant: str, budget: str, run: int, validation: bool = False) -> list[TaskInputs]:
        if budget == "full":
            key = (variant, validation)
            if key not in self._full:
                self._full[key] = self._make(variant, None, 0, validation)
            return self._full[key]
        return self._make(variant, self.d.k_shot, run, validation)

    def _make(self, variant: str, k: int | None, run: int, validation: bool) -> list[TaskInputs]:
        data = self.val if validation else self.data
        return _tensors(data, _tasks(data, self.d, variant, k, run, validation, self.frac))


def _tasks(
    data: Benchmark,
    d: BaselinesDataConfig,
    variant: str,
    k: int | None,
    run: int,
    validation: bool,
    frac: float,
) -> list[Any]:
    scenario, num_tasks = SCENARIO_VARIANTS[variant]
    if isinstance(data, ClassPool):
        nq = _val_queries(data, frac) if validation else d.query_per_class
        return pool_split_tasks(
            data, num_tasks=num_tasks, k_shot=k, run=run, n_query_per_class=nq, scenario=scenario, seed=d.seed
        )
    return split_benchmark(data, k_shot=k, run=run, scenario=scenario, class_groups=SPLIT_PAIRS[:num_tasks])


def _tensors(data: Benchmark, tasks: list[Any]) -> list[TaskInputs]:
    return task_inputs(tasks, mean=data.mean, std=data.std, channels=data.channels)
