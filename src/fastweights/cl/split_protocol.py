"""Split-benchmark evaluation of in-context continual learners (ACL paper, Irie et al. 2025, §4.3;
the protocols of automated-cl's ``--eval_splitmnist*`` evaluation).

A stream of tasks is learned in context, one task's demonstrations after another, and after each task
every task of the stream is queried: ``R[i, j]`` is the accuracy on task ``j`` from the state after the
demonstrations of tasks ``0..i`` (``j > i`` included: tasks not seen yet). Repeated over runs with
different demonstrations and summarised with ACC / BWT / forgetting (Lopez-Paz & Ranzato 2017; Chaudhry
et al. 2018; :func:`fastweights.cl.metrics.summarize_runs`).

- :func:`evaluate_split_tasks`: any stream, given as the tasks of each run.
- :func:`evaluate_split_benchmark`: Split-MNIST-style benchmarks from a train/test data set (class pairs
  (0, 1), (2, 3), …; Hsu et al. 2018; van de Ven & Tolias 2019).
- :func:`evaluate_tasks_alone`: each task of a stream learned in isolation (from the slow weights).
- :func:`evaluate_pool_split`: long-span streams of disjoint classes from a few-shot class pool (the
  paper's 5/10/20-task Split-Omniglot; here Split-FontGlyphs, Split-Emoji).

Queries are independent reads from the state (``InContextClassifier.query_features``); the model is in
eval mode and no gradients are kept. With ``replay`` (in-context replay,
:mod:`fastweights.cl.context_replay`) task ``i >= 1`` is read as its extended support: the stored
demonstrations of tasks ``< i`` with its own.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from fastweights.checks import check_choice, check_int
from fastweights.cl.context_replay import ContextReplay, replay_generator, replay_record, replay_supports
from fastweights.cl.metrics import summarize_runs
from fastweights.cl.tasks import to_model_images
from fastweights.data.sources.base import ClassPool, SplitDataset, Stat
from fastweights.data.streams import SCENARIOS, Task, pool_split_tasks, split_benchmark
from fastweights.models.in_context import InContextClassifier
from fastweights.train.modes import eval_mode

__all__ = [
    "evaluate_split_tasks",
    "evaluate_split_benchmark",
    "evaluate_pool_split",
    "evaluate_tasks_alone",
    "ImageEmbedder",
    "read_queries",
    "EMBED_BATCH",
    "QUERY_BATCH",
]

#: images per backbone call of :class:`ImageEmbedder`
EMBED_BATCH = 1000
#: queries per ``query_features`` call of :func:`read_queries`
QUERY_BATCH = 2048


class ImageEmbedder:
    """Backbone features ``[N, F]`` of uint8 images in the data sets' layout (grayscale ``[N, S, S]``, RGB
    ``[N, 3, S, S]``), normalised with the data's statistics (:func:`~fastweights.cl.tasks.to_model_images`);
    grayscale images fed to a 3-channel backbone are repeated to 3 channels after normalisation
    (automated-cl's Split-MNIST transform). ``channels=0``: the examples already are features (a frozen
    encoder's), passed through. The one image transform of the split benchmarks' evaluation and of
    :class:`fastweights.recipes.acl.ContinualLearner`.

    Raises:
        ValueError: for ``channels`` other than 0, 1 or 3, or RGB images for a 1-channel backbone.
    """

    def __init__(self, model: InContextClassifier, mean: Stat, std: Stat, channels: int, device: Any):
        if channels not in (0, 1, 3):
            raise ValueError(f"channels: expected 0 (features), 1 (grayscale) or 3 (RGB), got {channels!r}")
        model_channels = getattr(model.backbone, "in_channels", channels)
        if channels == 3 and model_channels != 3:
            raise ValueError(
                f"channels: expected grayscale images (channels=1) for the model's {model_channels}-channel "
                "backbone, got RGB images (channels=3)"
            )
        self.model, self.repeat = model, channels == 1 and model_channels == 3
        self.norm = dict(
            mean=mean, std=std, device=device, dtype=next(model.parameters()).dtype, channels=channels
        )

    def __call__(self, images: np.ndarray, batch: int = EMBED_BATCH) -> torch.Tensor:
        chunks = []
        for i in range(0, len(images), batch):
            x = to_model_images(images[i : i + batch], **self.norm)
            if self.repeat:
                x = x.expand(*x.shape[:-3], 3, *x.shape[-2:])
            chunks.append(self.model.embed(x))
        return torch.cat(chunks, dim=0)


def read_queries(
    model: InContextClassifier, features: torch.Tensor, state: Any, query_batch: int = QUERY_BATCH
) -> torch.Tensor:
    """Logits ``[Q, N]`` of the queries ``features [Q, F]``, each an independent read from ``state``
    (``query_features``, ``query_batch`` queries per call): how the split benchmarks read a task's queries.
    """
    chunks = [
        model.query_features(features[s : s + query_batch].unsqueeze(0), state)[0]
        for s in range(0, len(features), query_batch)
    ]
    if not chunks:
        return features.new_zeros((0, model.num_classes))
    return torch.cat(chunks, dim=0)


def _check_tasks(tasks: object, r: int, n_out: int, num_tasks: int | None) -> list[Task]:
    where = f"tasks_for_run({r})"
    if not isinstance(tasks, list) or len(tasks) < 2 or not all(isinstance(t, Task) for t in tasks):
        got = f"a list of {len(tasks)}" if isinstance(tasks, list) else type(tasks).__name__
        raise ValueError(f"{where}: expected a list of >= 2 Task objects, got {got}")
    if num_tasks is not None and len(tasks) != num_tasks:
        raise ValueError(f"{where}: expected {num_tasks} tasks like run 0, got {len(tasks)}")
    for i, t in enumerate(tasks):
        for field in ("support_labels", "query_labels"):
            labels = getattr(t, field)
            if len(labels) and (labels.min() < 0 or labels.max() >= n_out):
                raise ValueError(
                    f"{where}[{i}].{field}: expected labels in [0, n_out={n_out}), "
                    f"got range [{int(labels.min())}, {int(labels.max())}]"
                )
        if len(t.query_labels) == 0:
            raise ValueError(f"{where}[{i}].query_labels: expected at least one query, got none")
    return tasks


def _same_queries(a: list[Task], b: list[Task]) -> bool:
    if len(a) != len(b):
        return False
    return all(np.array_equal(x.query_images, y.query_images) for x, y in zip(a, b, strict=True))


@torch.no_grad()
def evaluate_split_tasks(
    model: InContextClassifier,
    tasks_for_run: Callable[[int], list[Task]],
    *,
    runs: int,
    n_out: int,
    mean: Stat,
    std: Stat,
    channels: int,
    device: torch.device | str = "cpu",
    query_batch: int = 2048,
    replay: ContextReplay | None = None,
    replay_seed: int = 0,
) -> dict[str, Any]:
    """Accuracy matrices ``R[i, j]`` of the streams ``tasks_for_run(0..runs-1)`` learned in context.

    For each run the demonstrations of task ``i`` (``support_images``/``support_labels``, in their order)
    continue the state reached after tasks ``0..i-1`` (``forward_features``, from the slow weights for
    ``i = 0``); then every query of every task is an independent read from that state
    (``query_features``), predicted as the argmax over the first ``n_out`` logits.

    Args:
        tasks_for_run: run index → its tasks (>= 2, the same number every run), uint8 images as
            :class:`fastweights.data.streams.Task` holds them, int64 labels in ``[0, n_out)``. Query
            features are reused while a run's query images equal the previous run's.
        n_out: logits compared (2 for domain-incremental, all classes seen for class-incremental).
        mean, std, channels: the data's pixel statistics and channels (1 grayscale, 3 RGB). Grayscale
            images for a 3-channel backbone (``model.backbone.in_channels``) are repeated to 3 channels
            after normalisation (as automated-cl's Split-MNIST transform).
        query_batch: queries per ``query_features`` call.
        replay: in-context replay: task ``i >= 1``'s demonstrations read with the stored demonstrations
            of tasks ``< i`` (:func:`~fastweights.cl.context_replay.replay_supports`; their original
            labels); ``None`` (default): off.
        replay_seed: run ``r``'s ``"mixed"`` permutations come from ``replay_generator(replay_seed, r)``.

    Returns:
        :func:`fastweights.cl.metrics.summarize_runs` of the ``runs`` matrices ``[T, T]`` (``R``, ``R_std``,
        ``ACC``, ``BWT``, ``forgetting``, ``learning_accuracy``, ``runs``) plus ``task_names`` (run 0's),
        ``n_out``, ``chance = 1 / n_out`` and ``context_replay`` (``{"per_class", "order"}``, per_class 0
        when off).

    Raises:
        ValueError: for bad ``runs``/``n_out``/``query_batch``/``channels``, RGB images for a 1-channel
            backbone, a run with fewer than 2 tasks, another number of tasks than run 0, a task without
            queries or with labels outside ``[0, n_out)``; from the model for images of the wrong size.
    """
    check_int("runs", runs)
    check_int("n_out", n_out, 2)
    if n_out > model.num_classes:
        raise ValueError(f"n_out: expected <= the model's {model.num_classes} outputs, got {n_out}")
    check_int("query_batch", query_batch)
    embed = ImageEmbedder(model, mean, std, channels, device)
    with eval_mode(model):
        matrices: list[np.ndarray] = []
        names: list[str] = []
        previous: list[Task] = []
        query_feats: list[torch.Tensor] = []
        for r in range(runs):
            tasks = _check_tasks(tasks_for_run(r), r, n_out, len(names) if r else None)
            if r == 0:
                names = [t.name for t in tasks]
            if not _same_queries(tasks, previous):
                query_feats = [embed(t.query_images) for t in tasks]
            previous = tasks
            support = embed(np.concatenate([t.support_images for t in tasks]))
            support = torch.split(support, [len(t.support_images) for t in tasks])
            labels = [
                torch.from_numpy(t.support_labels).to(device=device, dtype=torch.long).unsqueeze(0)
                for t in tasks
            ]
            generator = replay_generator(replay_seed, r) if replay is not None else None
            read = replay_supports([f.unsqueeze(0) for f in support], labels, replay, generator)
            R = np.zeros((len(tasks), len(tasks)))
            state = None
            for i in range(len(tasks)):
                _, state = model.forward_features(read[i].features, read[i].labels, state)
                for j, t in enumerate(tasks):
                    target = torch.from_numpy(t.query_labels).to(device)
                    logits = read_queries(model, query_feats[j], state, query_batch)
                    R[i, j] = (logits[:, :n_out].argmax(-1) == target).sum().item() / len(target)
            matrices.append(R)
    summary = summarize_runs(matrices)
    summary.update(task_names=names, n_out=n_out, chance=1.0 / n_out, context_replay=replay_record(replay))
    return summary


def evaluate_split_benchmark(
    model: InContextClassifier,
    dataset: SplitDataset,
    *,
    k_shot: int,
    runs: int,
    scenario: str = "domain",
    num_tasks: int | None = None,
    device: torch.device | str = "cpu",
    query_batch: int = 2048,
    replay: ContextReplay | None = None,
    replay_seed: int = 0,
) -> dict[str, Any]:
    """Split benchmark of ``dataset`` (tasks = class pairs (0, 1), (2, 3), …, learned in that order, as in
    automated-cl's Split-MNIST evaluation) by :func:`evaluate_split_tasks`.

    Run ``r``'s demonstrations are the ``r``-th block of ``k_shot`` training images per class (shot-major,
    :func:`fastweights.data.streams.split_benchmark`), the queries all test images of a task.
    Domain-incremental: labels {0, 1} and the first 2 logits; class-incremental: the original class
    labels and the first ``2 * num_tasks`` logits.

    Args:
        num_tasks: the first ``num_tasks`` pairs. Default: every pair for ``"domain"``; for ``"class"`` as
            many as the model's outputs allow (``num_classes // 2``): the 10-output model gets the 5-task
            and the 5-way ACL model the 2-task class-incremental benchmark of the ACL paper (Table 3;
            ``num_tasks=2`` gives the 2-task column for any model).

        replay, replay_seed: in-context replay, as in :func:`evaluate_split_tasks`.

    Returns:
        :func:`evaluate_split_tasks`'s dict plus ``k_shot``, ``scenario`` and ``num_tasks``.

    Raises:
        ValueError: for an unknown ``scenario``, a ``num_tasks`` outside ``[2, #pairs]``, a model with too
            few outputs, or from :func:`~fastweights.data.streams.split_benchmark` (e.g. too few images).
    """
    check_choice("scenario", scenario, SCENARIOS)
    pairs = tuple((c, c + 1) for c in range(0, dataset.num_classes - 1, 2))
    if num_tasks is None:
        count = len(pairs) if scenario == "domain" else min(len(pairs), model.num_classes // 2)
    else:
        check_int("num_tasks", num_tasks, 2)
        if num_tasks > len(pairs):
            raise ValueError(
                f"num_tasks: expected <= the {len(pairs)} class pairs of {dataset.name!r}, got {num_tasks}"
            )
        count = num_tasks
    groups = pairs[:count]
    n_out = 2 if scenario == "domain" else 2 * len(groups)
    if len(groups) < 2 or n_out > model.num_classes:
        key = "scenario" if num_tasks is None else "num_tasks"
        raise ValueError(
            f"{key}: {scenario!r} with {len(groups)} tasks needs >= 2 tasks and {n_out} outputs; the model "
            f"has {model.num_classes}"
        )
    summary = evaluate_split_tasks(
        model,
        lambda r: split_benchmark(dataset, k_shot=k_shot, run=r, scenario=scenario, class_groups=groups),
        runs=runs,
        n_out=n_out,
        mean=dataset.mean,
        std=dataset.std,
        channels=dataset.channels,
        device=device,
        query_batch=query_batch,
        replay=replay,
        replay_seed=replay_seed,
    )
    summary.update(k_shot=k_shot, scenario=scenario, num_tasks=len(groups))
    return summary


def evaluate_pool_split(
    model: InContextClassifier,
    pool: ClassPool,
    *,
    num_tasks: int,
    k_shot: int,
    runs: int,
    scenario: str = "domain",
    n_query_per_class: int,
    seed: int = 0,
    n_way: int = 2,
    device: torch.device | str = "cpu",
    query_batch: int = 2048,
    replay: ContextReplay | None = None,
    replay_seed: int = 0,
) -> dict[str, Any]:
    """Long-span split stream of ``num_tasks`` ``n_way``-way tasks with disjoint classes of ``pool``
    (:func:`fastweights.data.streams.pool_split_tasks`: classes fixed by ``seed``, the last
    ``n_query_per_class`` examples of each class as queries, run ``r``'s demonstrations drawn from the
    others) by :func:`evaluate_split_tasks`. The ACL paper's Split-Omniglot with 5/10/20 two-way tasks.
    Logits compared: the first ``n_way`` (domain-incremental) or ``n_way * num_tasks``
    (class-incremental). ``replay``, ``replay_seed``: in-context replay, as in :func:`evaluate_split_tasks`.

    Returns:
        :func:`evaluate_split_tasks`'s dict plus ``dataset`` (``pool.name``), ``num_tasks``, ``scenario``,
        ``k_shot``, ``n_way``, ``n_query_per_class`` and ``seed``.

    Raises:
        ValueError: for an unknown ``scenario``, a model with fewer outputs than the logits compared, or
            from :func:`~fastweights.data.streams.pool_split_tasks` (bad argument, too few classes or
            examples).
    """
    check_choice("scenario", scenario, SCENARIOS)
    check_int("num_tasks", num_tasks, 2)
    check_int("n_way", n_way, 2)
    n_out = n_way if scenario == "domain" else n_way * num_tasks
    if n_out > model.num_classes:
        raise ValueError(
            f"num_tasks: scenario {scenario!r} with {num_tasks} tasks of {n_way} classes needs {n_out} "
            f"outputs; the model has {model.num_classes}"
        )
    kw = dict(num_tasks=num_tasks, n_way=n_way, k_shot=k_shot, n_query_per_class=n_query_per_class)
    summary = evaluate_split_tasks(
        model,
        lambda r: pool_split_tasks(pool, run=r, scenario=scenario, seed=seed, **kw),
        runs=runs,
        n_out=n_out,
        mean=pool.mean,
        std=pool.std,
        channels=pool.channels,
        device=device,
        query_batch=query_batch,
        replay=replay,
        replay_seed=replay_seed,
    )
    summary.update(dataset=pool.name, scenario=scenario, seed=seed, **kw)
    return summary


def task_alone(task: Task) -> Task:
    """``task`` as a stream of its own: labels renumbered ``0..n-1`` in the order of their values (a
    class-incremental task's ``2t, 2t+1`` become ``0, 1``)."""
    values = np.unique(task.support_labels)
    lut = {int(v): i for i, v in enumerate(values)}

    def relabel(labels: np.ndarray) -> np.ndarray:
        return np.array([lut.get(int(v), -1) for v in labels], dtype=np.int64)

    return Task(
        task.name,
        task.support_images,
        relabel(task.support_labels),
        task.query_images,
        relabel(task.query_labels),
    )


@torch.no_grad()
def evaluate_tasks_alone(
    model: InContextClassifier,
    tasks_for_run: Callable[[int], list[Task]],
    *,
    runs: int,
    mean: Stat,
    std: Stat,
    channels: int,
    device: torch.device | str = "cpu",
) -> dict[str, Any]:
    """Accuracy of every task of the streams ``tasks_for_run(0..runs-1)`` learned *in isolation*: its
    demonstrations from the slow weights (no earlier task), labels renumbered ``0..n-1``
    (:func:`task_alone`), queries predicted as the argmax over the first ``n`` logits. The ACL paper
    (§4.3, Table 4) reports that some tasks fail even alone; this measures it.

    Returns:
        ``{"tasks": {name: {"mean", "std"}}, "runs"}`` (population std over runs), tasks in stream order.

    Raises:
        ValueError: for ``runs < 1``, a task whose queries hold a label its demonstrations do not, or
            from the model.
    """
    check_int("runs", runs)
    embed = ImageEmbedder(model, mean, std, channels, device)
    accs: dict[str, list[float]] = {}
    with eval_mode(model):
        for r in range(runs):
            for task in map(task_alone, tasks_for_run(r)):
                if (task.query_labels < 0).any():
                    raise ValueError(
                        f"tasks_for_run({r}): task {task.name!r} has query labels without demonstrations"
                    )
                n = int(task.support_labels.max()) + 1
                labels = torch.from_numpy(task.support_labels).to(device=device, dtype=torch.long)
                _, state = model.forward_features(
                    embed(task.support_images).unsqueeze(0), labels.unsqueeze(0)
                )
                logits = model.query_features(embed(task.query_images).unsqueeze(0), state)[0]
                pred = logits[:, :n].argmax(-1).cpu().numpy()
                accs.setdefault(task.name, []).append(float((pred == task.query_labels).mean()))
    return {
        "tasks": {name: {"mean": float(np.mean(a)), "std": float(np.std(a))} for name, a in accs.items()},
        "runs": runs,
    }
