"""ACL on a frozen pretrained encoder (ACL paper, Irie et al. 2025, §4.3 "going beyond" and App. A.8).

With ``model.backbone: frozen:<name>`` the encoder of :mod:`fastweights.models.frozen` turns every image
of the meta-training / validation / test pools into features once (cached on disk,
:mod:`fastweights.data.features`) and the SRWM model learns on those features
(:class:`~fastweights.models.backbones.FeatureInput`); the encoder never trains.

Evaluation (``eval.mini_benchmarks``): the paper's "mini" class-incremental sequences, two classes per
task, five tasks, ten outputs:

- ``five_datasets``: the first two classes of each data set of ``eval.mini_datasets`` — offline
  analogues of 5-datasets (CIFAR-10, MNIST, Fashion-MNIST, SVHN, notMNIST): ``digits`` (scikit-learn's
  8 × 8 digits; MNIST's role), ``fashion_mnist``, ``font_letters`` (A–J drawn from fonts; notMNIST's),
  ``emoji`` (two held-out EmojiImages classes; CIFAR-10's role as the colour-object set) and
  ``colour_digits`` (printed digits in colour; SVHN's). Demonstrations from a set's train split (the
  first ``eval.mini_demos_per_class`` images of a class), queries from its test split (the first
  ``eval.mini_query_per_class`` at most); for emoji the first / last examples of the class.
- ``emoji``: mini Split-Emoji — ten held-out EmojiImages classes (a fixed permutation), five tasks (the
  paper's first five tasks of Split-CIFAR100, two classes each).

Each is measured for the ACL model and a nearest-class-mean classifier on the same features
(:mod:`fastweights.cl.ncm`), after the whole sequence and with each task learned alone, over
``eval.split_runs`` demonstration draws of ``eval.split_k_shot`` examples per class.
"""

from __future__ import annotations

import functools
import logging
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fastweights.cl.ncm import evaluate_ncm_tasks, ncm_task_alone
from fastweights.cl.split_protocol import evaluate_split_tasks, evaluate_tasks_alone
from fastweights.data.features import encode_cached, feature_pool
from fastweights.data.registry import load_pools_for, load_split_dataset
from fastweights.data.sources.base import ClassPool, SplitDataset
from fastweights.data.streams import ClassExamples, class_sequence_tasks
from fastweights.models.classifier_config import ClassifierConfig
from fastweights.models.frozen import FrozenEncoder, build_frozen_encoder, parse_backbone
from fastweights.models.in_context import InContextClassifier
from fastweights.recipes.acl.config import MINI_BENCHMARKS

__all__ = [
    "frozen_encoder",
    "encoder_label",
    "feature_pools",
    "load_mini_benchmarks",
    "mini_results",
]

log = logging.getLogger(__name__)

MINI_TASKS = 5  # tasks of the mini sequences
MINI_WAYS = 2  # classes per task


@functools.lru_cache(maxsize=2)
def _encoder(name: str, weights: str) -> FrozenEncoder:
    # on the CPU even when the caller builds its model on another default device (the `meta` device of
    # resources.model_memory): the cached encoder is the real one
    with torch.device("cpu"):
        return build_frozen_encoder(name, weights or None)


def frozen_encoder(m: ClassifierConfig) -> FrozenEncoder | None:
    """The frozen encoder of ``model.backbone`` (built once per process), or ``None`` for Conv-4.

    Raises:
        ValueError / ImportError: from :func:`~fastweights.models.frozen.build_frozen_encoder`.
    """
    name = parse_backbone(m.backbone)
    if name is None:
        return None
    enc = _encoder(name, str(Path(m.backbone_weights).resolve()) if m.backbone_weights else "")
    enc.check_image_size(m.backbone_image_size)
    return enc


def check_trained_encoder(m: ClassifierConfig, model: InContextClassifier) -> None:
    """A trained model is evaluated on features of the encoder it was trained on.

    Raises:
        ValueError: naming ``model.backbone_weights`` when the encoder's weights hash differs from the one
            recorded in the model's checkpoint (``FeatureInput.encoder_sha256``).
    """
    enc = frozen_encoder(m)
    trained = getattr(model.backbone, "trained_encoder", lambda: None)()
    if enc is not None and trained is not None and trained != enc.weights_sha256:
        raise ValueError(
            f"model.backbone_weights: the {enc.name} weights now have sha256 {enc.weights_sha256[:12]}…, the "
            f"model was trained on features of weights {trained[:12]}…"
        )


def encoder_label(m: ClassifierConfig) -> str:
    """How results name the encoder actually used: e.g. ``efficientnet_lite0 (frozen; weights sha256
    1a2b3c4d5e6f, 64 px)``."""
    enc = frozen_encoder(m)
    if enc is None:
        return "conv4 (trained)"
    return f"{enc.name} (frozen; weights sha256 {enc.weights_sha256[:12]}, {m.backbone_image_size} px)"


def feature_pools(pools: dict[str, ClassPool], m: ClassifierConfig, cache_dir: str | None) -> dict[str, Any]:
    """``pools`` (split name → image pool) as :class:`FeaturePool` of the frozen encoder of ``m`` (cached),
    or unchanged for Conv-4."""
    enc = frozen_encoder(m)
    if enc is None:
        return pools
    return {
        k: feature_pool(p, enc, image_size=m.backbone_image_size, cache_dir=cache_dir)
        for k, p in pools.items()
    }


def _encoded_classes(
    enc: FrozenEncoder,
    m: ClassifierConfig,
    cache_dir: str | None,
    source: str,
    groups: list[tuple[np.ndarray, np.ndarray]],
    names: list[str],
) -> list[ClassExamples]:
    """Features of ``(demos, queries)`` image groups (one per class, named ``names``), encoded in one
    cached call keyed by ``source``."""
    images = np.concatenate([np.concatenate([d, q]) for d, q in groups])
    feats = encode_cached(enc, images, source=source, image_size=m.backbone_image_size, cache_dir=cache_dir)
    out, start = [], 0
    for name, (d, q) in zip(names, groups, strict=True):
        f = feats[start : start + len(d) + len(q)]
        out.append(ClassExamples(name, f[: len(d)], f[len(d) :]))
        start += len(d) + len(q)
    return out


def _dataset_classes(
    ds: SplitDataset, demos: int, queries: int, key: str
) -> list[tuple[np.ndarray, np.ndarray]]:
    """``(demos, queries)`` of the first two classes of ``ds``: its first ``demos`` train images and first
    (at most) ``queries`` test images per class."""
    groups = []
    for c in range(MINI_WAYS):
        train, test = ds.train.images[ds.train.labels == c], ds.test.images[ds.test.labels == c]
        if len(train) < demos or len(test) == 0:
            raise ValueError(
                f"{key}: {ds.name} class {c} has {len(train)} train / {len(test)} test images; expected >= "
                f"eval.mini_demos_per_class={demos} / >= 1"
            )
        groups.append((train[:demos], test[:queries]))
    return groups


def _emoji_pool(cfg: Any, test_pools: list[ClassPool]) -> ClassPool:
    """The held-out EmojiImages pool: the meta-test domain's (features) when EmojiImages is one, else the
    image pool."""
    for p in test_pools:
        if p.name.split("/")[0] == "EmojiImages":
            return p
    return load_pools_for(replace(cfg.data, source="emoji", sources=[], channels=3), "data")["test"]


def _emoji_classes(pool: ClassPool, classes: np.ndarray, queries: int) -> list[tuple[np.ndarray, np.ndarray]]:
    m = pool.examples_per_class
    return [(pool.images[c, : m - queries], pool.images[c, m - queries :]) for c in classes]


def load_mini_benchmarks(cfg: Any, test_pools: list[ClassPool]) -> dict[str, list[list[ClassExamples]]]:
    """The classes of every ``eval.mini_benchmarks`` entry as encoder features, by report name: five
    tasks of two :class:`ClassExamples` each (loaded and encoded before anything is measured).

    Raises:
        ValueError / FileNotFoundError: naming the config key of a missing data set or too few images.
    """
    e, m = cfg.eval, cfg.model
    enc = frozen_encoder(m)
    if enc is None or not e.mini_benchmarks:
        return {}
    cache = cfg.data.cache_dir
    emoji = _emoji_pool(cfg, test_pools)
    order = np.random.default_rng(e.seed).permutation(emoji.num_classes)
    q_emoji = e.split_query_per_class
    out: dict[str, list[list[ClassExamples]]] = {}

    def emoji_classes(chosen: np.ndarray) -> list[ClassExamples]:
        names, groups = [emoji.class_names[c] for c in chosen], _emoji_classes(emoji, chosen, q_emoji)
        if emoji.channels == 0:  # the meta-test domain's pool, already features
            return [ClassExamples(n, d, q) for n, (d, q) in zip(names, groups, strict=True)]
        return _encoded_classes(enc, m, cache, emoji.name, groups, names)

    for bench in e.mini_benchmarks:
        if bench == "emoji":
            classes = emoji_classes(order[: MINI_TASKS * MINI_WAYS])
        else:
            classes = []
            for name in e.mini_datasets:
                if name == "emoji":  # two held-out classes after the ten of mini Split-Emoji
                    start = MINI_TASKS * MINI_WAYS
                    classes += emoji_classes(order[start : start + MINI_WAYS])
                    continue
                ds = _mini_dataset(cfg, name)
                pairs = _dataset_classes(
                    ds, e.mini_demos_per_class, e.mini_query_per_class, "eval.mini_datasets"
                )
                names = [f"{ds.name} {c}" for c in range(MINI_WAYS)]
                classes += _encoded_classes(enc, m, cache, f"{ds.name} classes 0-1", pairs, names)
        out[MINI_BENCHMARKS[bench]] = [classes[i : i + MINI_WAYS] for i in range(0, len(classes), MINI_WAYS)]
    return out


def _mini_dataset(cfg: Any, name: str) -> SplitDataset:
    size = cfg.data.image_size
    if name == "fashion_mnist":
        try:
            return load_split_dataset(
                name, str(cfg.data.fashion_mnist_dir), image_size=size, cache_dir=cfg.data.cache_dir
            )
        except (FileNotFoundError, ValueError) as err:
            raise type(err)(f"data.fashion_mnist_dir: {err}") from None
    try:
        return load_split_dataset(name, image_size=size, cache_dir=cfg.data.cache_dir)
    except (FileNotFoundError, ValueError) as err:
        raise type(err)(f"eval.mini_datasets: {name}: {err}") from None


def mini_results(
    cfg: Any, benchmarks: dict[str, list[list[ClassExamples]]], model: InContextClassifier, device: Any
) -> dict[str, Any]:
    """``{benchmark: {"acl": …, "ncm": …, …}}``: for the ACL model and the nearest-class-mean classifier on
    the same features, the class-incremental accuracy matrices over ``eval.split_runs`` demonstration
    draws (:func:`~fastweights.cl.split_protocol.evaluate_split_tasks` /
    :func:`~fastweights.cl.ncm.evaluate_ncm_tasks`; ``R[-1]`` = each task after the whole sequence,
    ``ACC`` its mean) and each task learned alone (``alone``)."""
    e = cfg.eval
    out: dict[str, Any] = {}
    for name, tasks in benchmarks.items():
        log.info("evaluating %s", name)

        def stream(r: int, tasks: list[list[ClassExamples]] = tasks) -> list:
            return class_sequence_tasks(tasks, k_shot=e.split_k_shot, run=r, scenario="class", seed=e.seed)

        n_out = MINI_WAYS * len(tasks)
        acl = evaluate_split_tasks(
            model,
            stream,
            runs=e.split_runs,
            n_out=n_out,
            mean=0.0,
            std=1.0,
            channels=0,
            device=device,
            replay=cfg.eval_replay(),  # the evaluation's in-context replay (recorded in acl.context_replay)
            replay_seed=e.seed,
        )
        acl["alone"] = evaluate_tasks_alone(
            model, stream, runs=e.split_runs, mean=0.0, std=1.0, channels=0, device=device
        )["tasks"]
        ncm = evaluate_ncm_tasks(stream, runs=e.split_runs)
        alone: dict[str, list[float]] = {}
        for r in range(e.split_runs):
            for t in stream(r):
                alone.setdefault(t.name, []).append(ncm_task_alone(t))  # label values do not matter
        ncm["alone"] = {k: {"mean": float(np.mean(v)), "std": float(np.std(v))} for k, v in alone.items()}
        out[name] = {
            "encoder": encoder_label(cfg.model),
            "n_way": MINI_WAYS,
            "num_tasks": len(tasks),
            "k_shot": e.split_k_shot,
            "runs": e.split_runs,
            "scenario": "class",
            "queries": [sum(len(c.queries) for c in group) for group in tasks],
            "acl": acl,
            "ncm": ncm,
        }
    return out
