"""Evaluation of an ACL model (ACL paper §4): the pieces of ``results.json``.

- :func:`domain_pools`: the meta-train/val/test pools of every domain of ``data`` (``data.domains``).
- :func:`forgetting_pairs`: the in-context forgetting table (§4.1) for every pair of meta-test domains,
  same-domain pairs included, both orders (acc(A|A), acc(B|A→B), acc(A|A→B) and reversed).
- :func:`split_results`: the split benchmarks in the layout of the paper's Split-MNIST table —
  5-task domain-incremental, 2-task and 5-task class-incremental — on Split-Digits, Split-FashionMNIST,
  Split-MNIST (user folder) and Split-Emoji (held-out subgroups).
- :func:`long_span_results`: long-span domain-incremental Split-FontGlyphs (5/10/20 two-way tasks of
  held-out classes; the paper's Split-Omniglot experiment).

Every sequence is read with the evaluation's in-context replay, ``cfg.eval_replay()``
(``eval.context_replay_*``, by default those of training; :mod:`fastweights.cl.context_replay`), and
each section records it (``context_replay``: ``{"per_class", "order"}``, per_class 0 = off).
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Any

from tqdm.auto import tqdm

import fastweights
from fastweights.cl.context_replay import replay_record
from fastweights.cl.protocols import evaluate_task_pairs, summarize_task_pairs
from fastweights.cl.split_protocol import evaluate_pool_split, evaluate_split_benchmark
from fastweights.data.episodes import EpisodeSampler
from fastweights.data.registry import load_pools_for, load_split_dataset
from fastweights.data.sources.base import ClassPool, SplitDataset
from fastweights.data.streams import pool_split_tasks
from fastweights.models.in_context import InContextClassifier
from fastweights.recipes.acl.config import ACLConfig, ACLDataConfig

__all__ = [
    "domain_pools",
    "domain_name",
    "domain_pairs",
    "forgetting_pairs",
    "load_split_benchmarks",
    "split_results",
    "split_streams",
    "long_span_pool",
    "long_span_results",
    "SPLIT_NAMES",
]

log = logging.getLogger(__name__)

#: eval.split_benchmarks name -> benchmark name in results.json / the report
SPLIT_NAMES = {
    "mnist": "Split-MNIST",
    "fashion_mnist": "Split-FashionMNIST",
    "digits": "Split-Digits",
    "emoji": "Split-Emoji",
}
SPLIT_TASKS = 5  # tasks of the split benchmarks (class pairs 0/1, ..., 8/9)


def domain_pools(d: ACLDataConfig, key: str = "data") -> list[dict[str, ClassPool]]:
    """``[{"train", "val", "test"} -> ClassPool]`` for each domain of ``d.domains``, in that order.

    Every domain is loaded with the section's shared options (``root``, ``image_size``, ``channels``,
    rendering options). Raises ``ValueError``/``FileNotFoundError`` from the loaders, naming ``key``.
    """
    return [load_pools_for(replace(d, source=name, sources=[]), key) for name in d.domains]


def domain_name(pool: ClassPool) -> str:
    """The domain of a pool named ``"<domain>/<split>"`` (e.g. ``FontGlyphs``)."""
    return pool.name.split("/")[0]


def domain_pairs(n: int) -> list[tuple[int, int]]:
    """Unordered pairs of ``n`` domains, same-domain pairs first: ``(0,0), (1,1), …, (0,1), …``."""
    return [(i, i) for i in range(n)] + [(i, j) for i in range(n) for j in range(i + 1, n)]


def forgetting_pairs(
    cfg: ACLConfig, pools: list[ClassPool], model: InContextClassifier, device: Any
) -> dict[str, Any]:
    """The ``forgetting`` section: for each pair of :func:`domain_pairs` of the meta-test ``pools``,
    ``eval.episodes`` task pairs (A from the first domain, B from the second; disjoint classes), both
    orders, mean ± 95% CI. ``table``/``task_a``/``task_b`` repeat the first pair (the single-domain
    layout of older results)."""
    e = cfg.eval
    replay = cfg.eval_replay()
    pairs = domain_pairs(len(pools))
    out = []
    with tqdm(
        total=e.episodes * len(pairs), desc="held-out task pairs", unit="ep", dynamic_ncols=True
    ) as bar:
        for i, j in pairs:
            accs = evaluate_task_pairs(
                model,
                EpisodeSampler(pools[i]),
                sampler_b=None if i == j else EpisodeSampler(pools[j]),
                episodes=e.episodes,
                n_way=e.n_way,
                k_shot=e.k_shot,
                n_query=e.n_query,
                batch_size=e.batch_size,
                seed=e.seed,
                device=device,
                progress=bar.update,
                replay=replay,
            )
            table = summarize_task_pairs(accs)
            out.append({"task_a": domain_name(pools[i]), "task_b": domain_name(pools[j]), "table": table})
    first = out[0]
    return {
        "n_way": e.n_way,
        "k_shot": e.k_shot,
        "episodes": e.episodes,
        "table": first["table"],
        "task_a": first["task_a"],
        "task_b": first["task_b"],
        "pairs": out,
        "context_replay": replay_record(replay),
    }


def _split_dataset(cfg: ACLConfig, name: str) -> SplitDataset:
    """The train/test data set of a split benchmark (:func:`load_split_dataset`); Fashion-MNIST and MNIST
    from ``data.fashion_mnist_dir`` / ``data.mnist_dir`` (errors name that key)."""
    if name not in SPLIT_NAMES or name == "emoji":
        raise ValueError(f"eval.split_benchmarks: expected one of {sorted(SPLIT_NAMES)}, got {name!r}")
    if name == "digits":
        return load_split_dataset(name, image_size=cfg.data.image_size)
    key = f"{name}_dir"
    try:
        return load_split_dataset(
            name, str(getattr(cfg.data, key)), image_size=cfg.data.image_size, cache_dir=cfg.data.cache_dir
        )
    except (FileNotFoundError, ValueError) as err:
        raise type(err)(f"data.{key}: {err}") from None


def _variants(scenarios: list[str], num_classes: int) -> list[tuple[str, str, int]]:
    """``(results key suffix, scenario, tasks)`` of the paper's Split-MNIST table columns that the model's
    outputs allow: 5-task domain-incremental, 2-task class-incremental (>= 4 outputs), 5-task
    class-incremental (>= 10 outputs)."""
    out = []
    if "domain" in scenarios:
        out.append(("domain", "domain", SPLIT_TASKS))
    if "class" in scenarios:
        if num_classes >= 4:
            out.append(("class-2task", "class", 2))
        if num_classes >= 2 * SPLIT_TASKS:
            out.append(("class", "class", SPLIT_TASKS))
    return out


def load_split_benchmarks(cfg: ACLConfig, test_pools: list[ClassPool]) -> dict[str, SplitDataset | ClassPool]:
    """The data of every ``eval.split_benchmarks`` entry, by benchmark name (loaded before anything is
    measured, so a missing folder fails fast): a train/test data set, or for Split-Emoji the held-out
    EmojiImages pool — taken from the meta-test ``test_pools`` when EmojiImages is a domain."""
    out: dict[str, SplitDataset | ClassPool] = {}
    loaded = {domain_name(p): p for p in test_pools}
    for bench in cfg.eval.split_benchmarks:
        if bench == "emoji":
            pool = loaded.get("EmojiImages")
            if pool is None:
                pool = load_pools_for(replace(cfg.data, source="emoji", sources=[]), "data")["test"]
            out[SPLIT_NAMES[bench]] = pool
        else:
            out[SPLIT_NAMES[bench]] = _split_dataset(cfg, bench)
    return out


def split_streams(cfg: ACLConfig) -> dict[str, Any]:
    """What defines the split-benchmark streams of ``split_results`` (recorded in ``results.json`` as
    ``split_streams``; ``cl-baselines compare`` reuses an ACL evaluation only when it matches): the
    benchmarks, scenarios, demonstration draws (runs) and demonstrations per class, the queries per class
    and class-order seed of the pool benchmarks (Split-Emoji), the benchmark data folders and this
    package's version (the code that builds the streams)."""
    e, d = cfg.eval, cfg.data
    return {
        "benchmarks": list(e.split_benchmarks),
        "scenarios": sorted(e.scenarios),
        "runs": e.split_runs,
        "k_shot": e.split_k_shot,
        "query_per_class": e.split_query_per_class,
        "seed": e.seed,
        "fashion_mnist_dir": d.fashion_mnist_dir,
        "mnist_dir": d.mnist_dir,
        "version": fastweights.__version__,
    }


def split_results(
    cfg: ACLConfig, benchmarks: dict[str, SplitDataset | ClassPool], model: InContextClassifier, device: Any
) -> dict[str, Any]:
    """``{"<benchmark>/<domain|class-2task|class>": summary}`` for the :func:`load_split_benchmarks` data ×
    ``eval.scenarios`` (see :func:`_variants`), each over ``eval.split_runs`` demonstration draws of
    ``eval.split_k_shot`` images per class. Split-Emoji: the first 10 classes of a fixed permutation of
    the held-out EmojiImages subgroups, the last ``eval.split_query_per_class`` examples of each class as
    queries. Each summary records the in-context replay it was read with (``context_replay``)."""
    e = cfg.eval
    out: dict[str, Any] = {}
    for name, data in benchmarks.items():
        for suffix, scenario, tasks in _variants(e.scenarios, model.num_classes):
            log.info("evaluating %s/%s", name, suffix)
            common = dict(
                k_shot=e.split_k_shot,
                runs=e.split_runs,
                scenario=scenario,
                device=device,
                replay=cfg.eval_replay(),
                replay_seed=e.seed,
            )
            if isinstance(data, ClassPool):
                res = evaluate_pool_split(
                    model,
                    data,
                    num_tasks=tasks,
                    n_query_per_class=e.split_query_per_class,
                    seed=e.seed,
                    **common,
                )
            else:
                res = evaluate_split_benchmark(model, data, num_tasks=tasks, **common)
            out[f"{name}/{suffix}"] = res
    return out


def long_span_pool(cfg: ACLConfig, pools: list[ClassPool]) -> ClassPool | None:
    """The pool of the long-span tasks (``eval.long_span_tasks``): FontGlyphs' meta-test pool when it is a
    domain, else the first domain's; ``None`` when ``eval.long_span_tasks`` is empty.

    Raises:
        ValueError: naming ``eval.long_span_tasks`` when the pool has too few classes or examples for
            the longest sequence and ``eval.split_runs`` demonstration draws.
    """
    e = cfg.eval
    if not e.long_span_tasks:
        return None
    names = [domain_name(p) for p in pools]
    pool = pools[names.index("FontGlyphs")] if "FontGlyphs" in names else pools[0]
    n = max(e.long_span_tasks)
    try:
        pool_split_tasks(
            pool,
            num_tasks=n,
            k_shot=e.split_k_shot,
            run=e.split_runs - 1,
            n_query_per_class=e.split_query_per_class,
            seed=e.seed,
        )
    except ValueError as err:  # e.g. more tasks than the pool's classes allow
        raise ValueError(f"eval.long_span_tasks: {n} tasks: {err}") from None
    return pool


def long_span_results(
    cfg: ACLConfig, pool: ClassPool, model: InContextClassifier, device: Any
) -> dict[str, Any]:
    """Long-span domain-incremental evaluation of :func:`long_span_pool`: ``eval.long_span_tasks``
    (e.g. 5/10/20) two-way tasks of its held-out classes, ``eval.split_runs`` demonstration draws."""
    e = cfg.eval
    tasks = {}
    for n in e.long_span_tasks:
        log.info("evaluating long-span Split-%s with %d tasks", domain_name(pool), n)
        tasks[str(n)] = evaluate_pool_split(
            model,
            pool,
            num_tasks=n,
            k_shot=e.split_k_shot,
            runs=e.split_runs,
            scenario="domain",
            n_query_per_class=e.split_query_per_class,
            seed=e.seed,
            device=device,
            replay=cfg.eval_replay(),
            replay_seed=e.seed,
        )
    return {
        "dataset": pool.name,
        "n_way": 2,
        "k_shot": e.split_k_shot,
        "runs": e.split_runs,
        "scenario": "domain",
        "tasks": tasks,
        "context_replay": replay_record(cfg.eval_replay()),
    }
