"""ACL recipe: metalearn an in-context continual learner, then evaluate it.

``train``: sequences of ``train.num_tasks`` few-shot tasks from the meta-training pools of the domains
``data.sources`` (FontGlyphs by default; with several domains each task comes from one, the order
alternating from batch to batch, ACL paper §4.1), ACL loss (ACL paper §3, Eq. 6 generalised to T tasks),
Adam with warm-up, periodic validation on the meta-validation classes of every domain, atomic best/latest
checkpoints, resumable. ``train.init_from`` + ``train.num_tasks: 5`` + ``train.scenario`` is the 5-task
meta-finetuning stage (domain- or class-incremental, ACL paper §4.3).
``evaluate``: few-shot accuracy and the in-context forgetting table for every pair of meta-test domains,
the split benchmarks (5-task domain-incremental, 2-/5-task class-incremental: Split-Digits,
Split-FashionMNIST, Split-Emoji, Split-MNIST) and the long-span Split-FontGlyphs tasks (see
:mod:`fastweights.recipes.acl.evaluation`), written to ``results.json``, ``report.md`` and ``plots/``.
"""

from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fastweights.cl.context_replay import ContextReplay, replay_generator, replay_record
from fastweights.cl.objective import acl_loss
from fastweights.cl.protocols import evaluate_task_pairs, evaluate_task_sequence
from fastweights.cl.tasks import TaskSource
from fastweights.data.episodes import EpisodeSampler
from fastweights.data.sources.base import ClassPool
from fastweights.data.task_augment import TaskAugment
from fastweights.io import read_jsonl
from fastweights.models.classifier_config import build_classifier
from fastweights.models.in_context import InContextClassifier
from fastweights.models.transfer import load_classifier_weights
from fastweights.recipes.acl.config import ACLConfig, ACLTrainConfig
from fastweights.recipes.acl.evaluation import (
    domain_name,
    domain_pools,
    forgetting_pairs,
    load_split_benchmarks,
    long_span_pool,
    long_span_results,
    split_results,
    split_streams,
)
from fastweights.recipes.acl.frozen import (
    check_trained_encoder,
    encoder_label,
    feature_pools,
    frozen_encoder,
    load_mini_benchmarks,
    mini_results,
)
from fastweights.recipes.acl.learner import ContinualLearner
from fastweights.recipes.acl.paper_tables import forgetting_rows
from fastweights.recipes.acl.report import write_report
from fastweights.recipes.classifier import fit_classifier, sampling_streams, validation_sampling
from fastweights.recipes.compare import Score
from fastweights.recipes.contract import RECIPE_MEMBERS, Selection
from fastweights.recipes.plots import plot_bars, plot_learning_curves
from fastweights.recipes.reporting import pm
from fastweights.recipes.run import (
    RecipeRun,
    evaluate_verb,
    export_verb,
    load_run,
    train_verb,
)
from fastweights.train.checkpoint import read_checkpoint
from fastweights.train.model_files import CONFIG_FILE, WEIGHTS_FILE, is_export

__all__ = [*RECIPE_MEMBERS, "compare_curves", "ContinualLearner"]  # the recipe contract + extras

NAME = "acl"  # the registry / CLI name (recipes.contract.RECIPES)
CONFIG = ACLConfig


# the best checkpoint: the mean meta-validation accuracy of the in-context terms (``_validate``)
def selection_data(cfg: ACLConfig) -> str:
    """The meta-validation data behind ``val_objective`` for the run configured by ``cfg``, in words
    (``results.json``: ``run.selected_on.data``): which domains' meta-validation classes, in which task
    sequences (:func:`_validate`), how many fixed episodes."""
    t, sources = cfg.train, cfg.data.domains
    n = len(sources)
    if t.num_tasks == 2 and t.scenario == "domain":
        what = (
            f"task pairs {sources[0]} -> {sources[1]} and {sources[1]} -> {sources[0]}"
            if n > 1
            else f"task pairs A -> B of {sources[0]}"
        )
    elif t.sequence_domains == "single" or n == 1:
        what = f"{t.num_tasks}-task {t.scenario}-incremental sequences within one domain: " + " and ".join(
            sources[: min(n, 2)]
        )
    else:
        what = (
            f"{t.num_tasks}-task {t.scenario}-incremental sequences alternating over "
            + ", ".join(sources)
            + f", starting from {' and '.join(sources[: min(n, 2)])}"
        )
    if not t.acl_loss:
        what += " (the score leaves out the backward-transfer terms: train.acl_loss false)"
    if list(t.val_views) != ["original"]:
        what += f", each episode in the views {', '.join(t.val_views)} (the objective their mean)"
    if t.context_replay_per_class:
        what += (
            f", read with in-context replay ({t.context_replay_per_class} stored demonstrations per class, "
            f"{t.context_replay_order})"
        )
    return (
        f"meta-validation classes, {what} ({t.n_way}-way {t.k_shot}-shot; {t.val_episodes} fixed episodes); "
        "disjoint from every test benchmark's classes and concepts (fastweights.data.concepts)"
    )


SELECTION = Selection("val_objective", data=selection_data)
MODEL_KEY = "model.sequence_layer"  # what `compare --models` varies

log = logging.getLogger(__name__)


def build_model(cfg: ACLConfig) -> InContextClassifier:
    """The in-context classifier of the ACL paper (Conv-4 → 2 × [SRWM, FF] → head), §3; with
    ``model.backbone: frozen:<name>`` the encoder's cached features replace Conv-4 (App. A.8)."""
    encoder = frozen_encoder(cfg.model)
    return build_classifier(
        cfg.model,
        image_size=cfg.data.image_size,
        in_channels=cfg.data.channels,
        feature_dim=None if encoder is None else encoder.feature_dim,
        encoder_sha256=None if encoder is None else encoder.weights_sha256,
    )


def _domain_pools(cfg: ACLConfig) -> list[dict[str, ClassPool]]:
    """The pools of every domain, as a frozen encoder's features when ``model.backbone`` is one (the
    encoder is built first, so its errors come before any data is rendered)."""
    frozen_encoder(cfg.model)
    return [feature_pools(p, cfg.model, cfg.data.cache_dir) for p in domain_pools(cfg.data)]


def _validate(
    model: InContextClassifier,
    samplers: list[EpisodeSampler],
    t: ACLTrainConfig,
    episodes: int,
    device: Any,
    replay: ContextReplay | None = None,
) -> dict[str, float]:
    """Meta-validation on the meta-val classes of the first two domains of ``data.sources``
    (``val_objective`` selects the best checkpoint; with a third domain, e.g. ``quick-3domain``, the
    validation episodes are those of the two-domain presets, so the objectives of both are comparable).
    Two domain-incremental tasks: the forgetting table of the two domains in both orders (one domain: A
    then B from it); otherwise ``train.num_tasks``-task sequences in the domain orders of training's first
    two steps, scored by the mean accuracy over all tasks after the last one (the reference's Split-MNIST
    selection criterion, on meta-validation classes instead of MNIST training images). ``replay``: the
    in-context replay of training (part of the learner, so checkpoints are selected like for like).
    ``train.val_views`` other than ``["original"]``: the same episodes once per view, ``val_objective``
    (and ``val_acc``) the mean over views, each view's objective as ``val_objective[VIEW]``."""
    if list(t.val_views) == ["original"]:
        return _validate_view(model, samplers, t, episodes, device, replay, None)
    per = {
        v: _validate_view(model, samplers, t, episodes, device, replay, t.val_view(v)) for v in t.val_views
    }
    out = {f"{k}[{v}]": x for v, d in per.items() for k, x in d.items()}
    for k in per[t.val_views[0]]:
        out[k] = float(np.mean([d[k] for d in per.values()]))
    return out


def _validate_view(
    model: InContextClassifier,
    samplers: list[EpisodeSampler],
    t: ACLTrainConfig,
    episodes: int,
    device: Any,
    replay: ContextReplay | None,
    view: TaskAugment | None,
) -> dict[str, float]:
    """:func:`_validate` in one fixed view (``None``: the original images)."""
    common = dict(n_way=t.n_way, k_shot=t.k_shot, n_query=t.n_query, device=device, replay=replay, view=view)
    if t.num_tasks == 2 and t.scenario == "domain":
        two = len(samplers) > 1
        accs = evaluate_task_pairs(
            model,
            samplers[0],
            sampler_b=samplers[1] if two else None,
            episodes=episodes,
            **validation_sampling(episodes),
            reverse=two,
            **common,
        )
        out = {f"val_{k}": float(v.mean()) for k, v in accs.items()}
        terms = [k for k in accs if t.acl_loss or k not in ("A|A->B", "B|B->A")]
        out["val_objective"] = float(np.mean([accs[k].mean() for k in terms]))
        out["val_acc"] = out["val_A|A"]
        return out
    n = len(samplers)  # the domain orders of training's first two steps (one for one domain)
    if t.sequence_domains == "single":
        orders = sorted({(s % n,) * t.num_tasks for s in range(min(n, 2))})
    else:
        orders = sorted({tuple((i - s) % n for i in range(t.num_tasks)) for s in range(min(n, 2))})
    R = np.concatenate(
        [
            evaluate_task_sequence(
                model,
                samplers,
                order=order,
                episodes=max(1, episodes // len(orders)),
                scenario=t.scenario,
                **validation_sampling(episodes, seed_offset=k),
                **common,
            )
            for k, order in enumerate(orders)
        ]
    )
    last = R[:, -1, :].mean(axis=0)  # accuracy of every task after learning all of them
    out = {f"val_task{j + 1}|all": float(a) for j, a in enumerate(last)}
    out["val_objective"] = float(last.mean())
    out["val_acc"] = float(R[:, 0, 0].mean())
    return out


#: the source checkout (holding the shipped models in ``pretrained/``) of an editable install
SOURCE_ROOT = Path(__file__).resolve().parents[4]


def init_checkpoint_path(init_from: str) -> Path:
    """The checkpoint named by ``train.init_from`` — a checkpoint file, a run folder (its
    ``checkpoints/best.pt``) or an export folder (``model.safetensors`` + ``config.json``): the path as
    given (relative paths from the working directory), else — for a relative path such as the presets'
    ``pretrained/acl-cross`` — the same path in the source checkout, so the 5-task presets find the
    shipped model from any folder.

    Raises:
        FileNotFoundError: naming ``train.init_from``, the path and both places looked in.
    """
    given = Path(init_from)
    for place in [given] if given.is_absolute() else [given, SOURCE_ROOT / given]:
        if place.exists():
            if place is not given:
                log.info("train.init_from: %s not in %s; using %s", init_from, Path.cwd(), place)
            return place
        if _exported(place):  # RUN/checkpoints/best.pt of a folder exported since (e.g. the shipped ones)
            log.info("train.init_from: %s is now the export folder %s; using it", init_from, place.parents[1])
            return place.parents[1]
    if given.is_absolute():
        return given  # the reader names the missing file
    raise FileNotFoundError(
        f"train.init_from: expected a checkpoint file, run folder or export folder (e.g. "
        f"pretrained/acl-cross), got {init_from!r}: not in the working directory {Path.cwd()} nor in the "
        f"source checkout {SOURCE_ROOT}; pass train.init_from=PATH to the 2-task model to start from"
    )


def _exported(path: Path) -> bool:
    """Whether ``path`` is a missing ``FOLDER/checkpoints/best.pt`` whose ``FOLDER`` is an export."""
    return (
        path.name == "best.pt"
        and path.parent.name == "checkpoints"
        and not path.exists()
        and (is_export(path.parents[1]))
    )


def read_init(path: Path) -> dict[str, Any]:
    """The checkpoint (``model``, ``step``, ``records``, …) of ``train.init_from`` = ``path`` (as
    :func:`init_checkpoint_path` found it); nothing read runs code.

    Raises:
        FileNotFoundError, RunFolderError, UnsafeFileError, ValueError: naming ``train.init_from``.
    """
    if path.is_dir():
        if not (path / "checkpoints" / "best.pt").is_file() and not is_export(path):
            raise FileNotFoundError(
                f"train.init_from: {path} is a folder without checkpoints/best.pt or {WEIGHTS_FILE} + "
                f"{CONFIG_FILE}; expected a run or export folder"
            )
        try:
            return load_run(path, ACLConfig)[1]
        except ValueError as err:
            raise ValueError(f"train.init_from: {err}") from None
    return read_checkpoint(path, key="train.init_from")


def _train_data(
    cfg: ACLConfig, continuing: bool
) -> tuple[list[dict[str, ClassPool]], dict[str, Any] | None, int | None]:
    """The pools of every domain and, for a new run with ``train.init_from``, the checkpoint whose model
    weights start it, checked against this run's model (read before the run folder is written, so a bad
    file leaves nothing behind), and the meta-training steps behind it (:func:`_init_steps`)."""
    init, init_path = None, None
    if cfg.train.init_from and not continuing:
        init_path = init_checkpoint_path(cfg.train.init_from)
        init = read_init(init_path)
        if not isinstance(init.get("model"), dict):
            raise ValueError(
                f"train.init_from: expected a checkpoint with model weights, got {cfg.train.init_from}"
            )
        try:
            load_classifier_weights(build_model(cfg), init["model"])
        except ValueError as err:
            raise ValueError(f"train.init_from: {cfg.train.init_from}: {err}") from None
    return _domain_pools(cfg), init, _init_steps(cfg, init, init_path)


def _init_steps(cfg: ACLConfig, init: dict[str, Any] | None, init_path: Path | None) -> int | None:
    """The meta-training budget behind ``train.init_from`` as it stands when a new run starts: the
    steps logged by the checkpoint's run plus those behind that run's own start, as its checkpoint
    recorded them, else counted from the logs
    (:func:`~fastweights.recipes.acl.budget.upstream_steps`); 0 without ``train.init_from``. Kept in
    the run's checkpoints, its export and ``results.json`` (``run.init_steps``), so ``acl budget`` does
    not depend on what the upstream runs train later. None on resume (the checkpoint's value is
    restored) and when it cannot be counted (no ``metrics.jsonl`` beside the checkpoint, a stepless log,
    a damaged ``config.yaml`` upstream; a log line says which)."""
    if not cfg.train.init_from:
        return 0
    if init is None or init_path is None:  # resuming
        return None
    from fastweights.recipes.acl.budget import upstream_steps

    recorded = (init.get("records") or {}).get("init_steps")
    try:  # the run folder of the checkpoint training loads, wherever init_checkpoint_path found it
        return upstream_steps(str(init_path), recorded=recorded)
    except (FileNotFoundError, ValueError) as err:
        log.warning("the meta-training steps behind train.init_from are unknown, not recorded: %s", err)
        return None


def _fit(run: RecipeRun) -> dict[str, Any]:
    """Meta-train ``cfg`` into ``run_dir`` (``config.yaml``, ``metrics.jsonl``, ``checkpoints/``).

    Each training sequence holds ``train.num_tasks`` tasks; with several domains (``data.sources``)
    task ``t`` of step ``s`` comes from domain ``(t - s) mod #domains`` (the order alternates from
    batch to batch, as in automated-cl's 2- and 3-task training), or with ``train.sequence_domains:
    single`` every task of step ``s`` from domain ``s mod #domains``. ``train.init_from`` starts from
    another run's weights (5-task meta-finetuning, ACL paper §4.3; label columns and output rows mapped
    by class index).
    Stops at ``train.max_steps`` or after ``train.max_minutes`` of wall-clock time (validation
    included), whichever comes first. With ``resume`` the latest checkpoint continues exactly
    (model, optimiser, schedule, step, elapsed time and every random state); Ctrl-C saves it first.
    """
    cfg, device = run.cfg, run.device
    rng, synth_gen = sampling_streams(run)
    domains, init, init_steps = run.data
    t = cfg.train
    run.records["init_steps"] = init_steps  # replaced by the checkpoint's on resume
    train_samplers = [EpisodeSampler(p["train"], rotations=cfg.data.rotations) for p in domains]
    val_samplers = [EpisodeSampler(p["val"]) for p in domains]
    model = build_model(cfg).to(device)
    if init is not None:  # meta-finetuning from another run's weights (not on resume)
        for note in load_classifier_weights(model, init["model"]):
            log.info("train.init_from: %s", note)
        log.info("initialised the model from %s (step %s)", t.init_from, init.get("step"))
    source = TaskSource(
        train_samplers,
        t,
        rng,
        synth_gen,
        label_space=t.label_space or cfg.model.num_classes,
        num_tasks=t.num_tasks,
        alternate=True,
        single_domain=t.sequence_domains == "single",
        scenario=t.scenario,
        n_query=t.n_query,
        first_shot=t.first_shot_loss,
        augment=t.augment,
    )

    replay = cfg.train_replay()

    def step_fn(step: int) -> tuple[torch.Tensor, dict[str, Any]]:
        n_way, k_shot = source.stage(step)
        tasks = source.tasks(model, step, device)
        # the "mixed" replay permutations of a step: their own stream, a function of (seed, step) only
        generator = replay_generator(t.seed, step) if replay is not None else None
        loss, accs = acl_loss(
            model,
            tasks,
            backward=t.acl_loss,
            first_shot=t.first_shot_loss,
            online_weight=t.online_weight,
            replay=replay,
            generator=generator,
        )
        return loss, {"n_way": n_way, "k_shot": k_shot, **{f"train_{i}|{j}": a for (i, j), a in accs.items()}}

    return fit_classifier(
        run,
        model,
        step_fn,
        lambda: _validate(model, val_samplers, t, t.val_episodes, device, replay),
        description="ACL meta-finetuning" if t.init_from else "ACL meta-training",
        postfix=("n_way", "k_shot"),
        selection=SELECTION,
    )


def _stage(cfg: ACLConfig) -> str:
    t = cfg.train
    what = "meta-finetuning" if t.init_from else "meta-training"
    return f"{t.num_tasks}-task {what} ({t.scenario}-incremental)"


def _measure(
    cfg: ACLConfig, state: dict[str, Any], model: InContextClassifier, device: Any
) -> dict[str, Any]:
    """Few-shot accuracy and the in-context forgetting table for every pair of meta-test domains,
    the split benchmarks of ``eval.split_benchmarks`` × ``eval.scenarios`` and the long-span
    Split-FontGlyphs tasks (ACL paper §4)."""
    e = cfg.eval
    check_trained_encoder(cfg.model, model)
    test_pools = [p["test"] for p in _domain_pools(cfg)]
    # all data loaded (and encoded) and checked before anything is measured
    benchmarks = load_split_benchmarks(cfg, test_pools)
    mini = load_mini_benchmarks(cfg, test_pools)
    span_pool = long_span_pool(cfg, test_pools)
    forgetting = forgetting_pairs(cfg, test_pools, model, device)
    fewshot = {
        name: {"accuracy": pair["table"]["A|A"]["mean"], "ci95": pair["table"]["A|A"]["ci95"]}
        for pair in forgetting["pairs"]
        if (name := pair["task_a"]) == pair["task_b"]
    }
    first = fewshot[domain_name(test_pools[0])]
    results: dict[str, Any] = {
        "run": {
            "acl_loss": cfg.train.acl_loss,
            "stage": _stage(cfg),
            "sources": [domain_name(p) for p in test_pools],
            # in-context replay of meta-training/-validation and of this evaluation (per_class 0: off)
            "context_replay": {
                "train": replay_record(cfg.train_replay()),
                "eval": replay_record(cfg.eval_replay()),
            },
        },
        "fewshot": {
            "dataset": test_pools[0].name,
            "n_way": e.n_way,
            "k_shot": e.k_shot,
            "episodes": e.episodes,
            **first,
            "domains": fewshot,
        },
        "forgetting": forgetting,
        "split": split_results(cfg, benchmarks, model, device),
        "split_streams": split_streams(cfg),
    }
    if frozen_encoder(cfg.model) is not None:
        results["run"]["backbone"] = encoder_label(cfg.model)
    init_steps = (state.get("records") or {}).get("init_steps")
    if type(init_steps) is int:  # recorded when the run started (not by checkpoints of older versions)
        results["run"]["init_steps"] = init_steps
    if mini:
        results["mini"] = mini_results(cfg, mini, model, device)
    if span_pool is not None:
        results["long_span"] = long_span_results(cfg, span_pool, model, device)
    return results


def compare_curves(
    run_dirs: list[Path],
    out: Path,
    *,
    labels: list[str] | None = None,
    key: str = SELECTION.metric,
    x: str = "minutes",
    forgetting: bool = False,
) -> Path:
    """Plot ``key`` (default: ``val_objective``, the meta-validation metric the best checkpoint is
    selected on; ``val_acc`` = accuracy on the first task right after learning it) against ``x``
    (``"minutes"`` of training wall-clock time, validation included, or ``"step"``) for several run
    folders in one PNG (``out``).

    ``val_objective`` is each run's own selection objective: a run with ``train.acl_loss false`` leaves
    the backward-transfer terms out of it, so runs that differ in ``train.acl_loss`` are refused on that
    key. ``forgetting`` draws instead, for 2-task runs, the same measures for every run, recomputed from
    the logged in-context terms (:func:`~fastweights.recipes.acl.plots.plot_forgetting_curves`: the ACL
    objective of all six terms, acc(A|A), acc(B|A→B), acc(A|A→B)); runs with the same label are the runs
    (e.g. seeds) of one model, drawn thin beside their mean (``key`` unused).

    Raises:
        FileNotFoundError: if a run folder has no ``metrics.jsonl``.
        ValueError: if ``labels`` does not match ``run_dirs``, a run's log has no record of ``key`` (with
            ``forgetting``: no 2-task in-context terms), or ``key`` is ``val_objective`` for runs whose
            ``config.yaml`` differ in ``train.acl_loss``.
    """
    labels = labels or [Path(d).name for d in run_dirs]
    if x not in ("minutes", "step"):
        raise ValueError(f"x: expected 'minutes' or 'step', got {x!r}")
    if len(labels) != len(run_dirs):
        raise ValueError(f"labels: expected {len(run_dirs)} labels, got {len(labels)}")
    logs = {}
    for d in run_dirs:
        log_path = Path(d) / "metrics.jsonl"
        if not log_path.exists():
            raise FileNotFoundError(f"run_dirs: no {log_path}")
        logs[Path(d)] = read_jsonl(log_path)
    xlabel = "training wall-clock minutes" if x == "minutes" else "training step"
    if forgetting:
        from fastweights.recipes.acl.plots import plot_forgetting_curves

        models: dict[str, list[list[dict[str, Any]]]] = {}
        for label, d in zip(labels, run_dirs, strict=True):
            models.setdefault(label, []).append(logs[Path(d)])
        n_way = {r["n_way"] for records in logs.values() for r in records if isinstance(r.get("n_way"), int)}
        chance = 1.0 / n_way.pop() if len(n_way) == 1 else None
        return plot_forgetting_curves(models, out, x=x, xlabel=xlabel, chance=chance)
    if key == SELECTION.metric:
        _check_same_objective(run_dirs)
    curves = {}
    for label, d in zip(labels, run_dirs, strict=True):
        curves[label] = [(r[x], r[key]) for r in logs[Path(d)] if key in r]
        if not curves[label]:
            log_path = Path(d) / "metrics.jsonl"
            raise ValueError(f"--key: no record of {log_path} has {key!r} (an older log? try --key val_acc)")
    names = {
        "val_acc": "meta-validation accuracy, first task right after learning it",
        SELECTION.metric: f"meta-validation {SELECTION.metric} (checkpoint selection metric)",
    }
    ylabel = names.get(key, key)
    return plot_learning_curves(curves, out, xlabel=xlabel, ylabel=ylabel, title=f"{key} vs {xlabel}")


def _check_same_objective(run_dirs: list[Path]) -> None:
    """Refuse ``val_objective`` curves of runs that differ in ``train.acl_loss`` (read from each run's
    ``config.yaml``; a folder without one is not checked): their objectives are different measures.

    Raises:
        ValueError: naming a run of each kind and the way to plot them on the same measures.
    """
    from fastweights.recipes.acl.budget import train_section

    kinds: dict[bool, Path] = {}
    for d in run_dirs:
        try:
            kinds.setdefault(bool(train_section(Path(d)).get("acl_loss", True)), Path(d))
        except FileNotFoundError:
            continue
    if len(kinds) > 1:
        raise ValueError(
            f"--key {SELECTION.metric}: not the same measure for {kinds[True]} (train.acl_loss true) and "
            f"{kinds[False]} (train.acl_loss false: the score leaves out the backward-transfer terms); "
            "plot them on the same measures with --forgetting, or give another --key (e.g. val_acc)"
        )


def summary(results: dict[str, Any]) -> str:
    """One line for the terminal: held-out few-shot accuracy, the first task after learning a second
    (per ordered domain pair) and each split benchmark's ACC."""
    fs = results["fewshot"]
    acc = f"{100 * fs['accuracy']:.2f} ± {100 * fs['ci95']:.2f} %"
    line = f"{fs['n_way']}-way {fs['k_shot']}-shot accuracy {acc}"
    forgetting = [f"A after {r.order} {100 * r.first_after['mean']:.2f} %" for r in forgetting_rows(results)]
    split = [f"{name} ACC {100 * r['ACC']['mean']:.2f} %" for name, r in results.get("split", {}).items()]
    return "; ".join([line, *forgetting, *split])


def comparison_table(results: dict[str, dict[str, Any]]) -> tuple[list[str], list[list[Any]]]:
    """Header and rows of ``compare`` (e.g. ACL vs no-ACL, ``--vary train.acl_loss=true,false``): one row
    per run: few-shot accuracy, acc(A|A→B) for every ordered pair of meta-test domains (ACL paper §4.1
    tables) and each split benchmark's ACC (± std over runs)."""
    first = next(iter(results.values()))
    fs = first["fewshot"]
    orders = [r.order for r in forgetting_rows(first)]
    header = ["run", "steps", "train min", f"{fs['n_way']}-way {fs['k_shot']}-shot (%)"]
    header += [f"A after A→B, {order} (%)" for order in orders]
    splits = list(first.get("split", {}))
    header += [f"{name} ACC (%)" for name in splits]
    rows = []
    for name, res in results.items():
        run, f = res["run"], res["fewshot"]
        after = {r.order: r.first_after for r in forgetting_rows(res)}
        rows.append(
            [
                name,
                run["steps"],
                f"{run['train_minutes']:.1f}",
                pm(f["accuracy"], f["ci95"]),
                *(pm(after[o]["mean"], after[o]["ci95"]) for o in orders),
                *(
                    pm(res["split"][k]["ACC"]["mean"], res["split"][k]["ACC"]["std"])
                    for k in first.get("split", {})
                ),
            ]
        )
    return header, rows


def headline(results: dict[str, Any]) -> dict[str, Score]:
    """The numbers ``compare --seeds`` aggregates over training seeds (percent): the held-out few-shot
    accuracy, acc(A|A), acc(B|A→B) and acc(A|A→B) of every ordered pair of meta-test domains (the paper's
    forgetting table) and each split benchmark's ACC, each
    with its 95% CI inside the run (over episodes; over the split benchmark's demonstration draws,
    ``1.96·std/√runs``)."""
    fs = results["fewshot"]
    out = {f"{fs['n_way']}-way {fs['k_shot']}-shot (%)": Score(100 * fs["accuracy"], 100 * fs["ci95"])}
    for r in forgetting_rows(results):
        for what, entry in (
            ("A after A", r.first),
            ("B after A→B", r.second),
            ("A after A→B", r.first_after),
        ):
            out[f"{what}, {r.order} (%)"] = Score(100 * entry["mean"], 100 * entry["ci95"])
    for name, split in results.get("split", {}).items():
        acc = split["ACC"]
        out[f"{name} ACC (%)"] = Score(100 * acc["mean"], 100 * 1.96 * acc["std"] / math.sqrt(split["runs"]))
    return out


def plot_comparison(results: dict[str, dict[str, Any]], run_root: Path) -> None:
    """``run_root/comparison.png``: per run and ordered domain pair, acc(A|A), acc(B|A→B) and
    acc(A|A→B) (± 95% CI), chance (1/n_way) dashed."""
    values = {}
    for name, res in results.items():
        rows = forgetting_rows(res)
        for r in rows:
            label = name if len(rows) == 1 else f"{name}\n{r.order}"
            values[label] = {
                series: (100 * e["mean"], 100 * e["ci95"])
                for series, e in (
                    ("A after A", r.first),
                    ("B after A→B", r.second),
                    ("A after A→B", r.first_after),
                )
            }
    fs = next(iter(results.values()))["fewshot"]
    plot_bars(
        values,
        Path(run_root) / "comparison.png",
        ylabel="accuracy (%)",
        title=f"in-context forgetting: {fs['n_way']}-way {fs['k_shot']}-shot, two tasks",
        chance=100.0 / fs["n_way"],
    )


train = train_verb(_fit, load_data=_train_data, build=build_model)

evaluate = evaluate_verb(
    _measure,
    config_cls=ACLConfig,
    build=build_model,
    write_report=write_report,
    selection=SELECTION,
    doc="""Evaluate the ``which`` checkpoint of ``run_dir``: few-shot accuracy and the in-context
    forgetting table on the held-out classes, and the 5-task split benchmarks.""",
)


def card_sections(cfg: ACLConfig) -> list[tuple[str, str]]:
    """The ACL parts of an export's model card: the meta-training data with its concept exclusions,
    and the intended use and limits (scenario, label space, task shape, input)."""
    from fastweights.data.concepts import EXCLUSION_RULES

    d, t, m = cfg.data, cfg.train, cfg.model
    domains = []
    for source in d.domains:
        rule = EXCLUSION_RULES.get(source)
        left_out = (
            f"left out of its meta-training and meta-validation classes: {rule}"
            if rule
            else (
                "no concept exclusion applies (a user folder or a split data set: check its classes yourself)"
            )
        )
        domains.append(f"- `{source}`: meta-training classes of its `train` pool; {left_out}.")
    incremental = (
        f"class-incremental: task `t`'s labels are shifted by {t.n_way}·t, so the model learns up to "
        f"{m.num_classes} classes in all (labels 0..{m.num_classes - 1})"
        if t.scenario == "class"
        else f"domain-incremental: every task uses the labels 0..{t.n_way - 1} again (its own classes)"
    )
    use = (
        f"An in-context continual learner (ACL paper, Irie, Csordás & Schmidhuber, TMLR 2025): it learns "
        f"{t.n_way}-way tasks from {t.k_shot} labelled demonstrations per class, fed as a sequence, task "
        f"after task, with no gradient step (its fast weights change, its slow weights never); "
        f"meta-trained on {t.num_tasks}-task sequences, {incremental}. Input: {d.channels}-channel images "
        f"resized to {d.image_size} x {d.image_size}.\n\n"
        "Limits: measured only on the benchmarks of the evaluation table (small grayscale / emoji images, "
        "5-way tasks); outside that setting (other image kinds, more classes than its outputs, longer task "
        "sequences than meta-training) nothing is claimed. Its accuracy falls as tasks accumulate, "
        "most in the class-incremental setting."
    )
    data = (
        "\n".join(domains)
        + "\n\nMeta-validation (checkpoint choice): the meta-validation classes of the same domains, "
        "disjoint from every test benchmark's classes and concepts (fastweights.data.concepts)."
    )
    return [("Meta-training data", data), ("Intended use and limits", use)]


export = export_verb(
    NAME, config_cls=ACLConfig, selection=SELECTION, headline=headline, card_sections=card_sections
)
