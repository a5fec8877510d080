"""ACL recipe: metalearn an in-context continual learner, then evaluate it.

``train``: sequences of ``num_tasks`` few-shot tasks from the meta-training pools of ``data`` (FontGlyphs
by default), ACL loss (ACL paper §3, Eq. 6 generalised to T tasks), Adam with
warm-up, periodic validation on the meta-validation classes, atomic best/latest checkpoints, resumable.
``evaluate``: few-shot accuracy and the in-context forgetting table on the held-out classes, and the
5-task split benchmarks (Split-Digits, Split-FashionMNIST), written to ``results.json``,
``report.md`` and ``plots/``.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from fastweights.cl.objective import acl_loss
from fastweights.cl.protocols import evaluate_split_benchmark, evaluate_task_pairs, summarize_task_pairs
from fastweights.cl.tasks import TaskSource
from fastweights.data.episodes import EpisodeSampler
from fastweights.data.registry import load_pools_for
from fastweights.data.sources.base import ClassPool, SplitDataset
from fastweights.data.sources.digits import load_digits_split
from fastweights.data.sources.idx import load_idx_dataset
from fastweights.io import atomic_write_text, read_jsonl
from fastweights.models.classifier_config import build_classifier
from fastweights.models.in_context import InContextClassifier
from fastweights.recipes.acl_config import ACLConfig, DataConfig, TrainConfig
from fastweights.recipes.common import (
    RecipeRun,
    evaluate_verb,
    fit_run,
    train_verb,
)
from fastweights.recipes.contract import RECIPE_MEMBERS
from fastweights.recipes.report import plot_bars, plot_learning_curves, write_report
from fastweights.train.checkpoint import CheckpointManager, read_checkpoint
from fastweights.train.run_folder import output_folder

__all__ = [*RECIPE_MEMBERS, "compare_curves", "load_glyph_pools"]  # the recipe contract + extras

NAME = "acl"  # the registry / CLI name (recipes.contract.RECIPES)
CONFIG = ACLConfig
MODEL_KEY = "model.sequence_layer"  # what `compare --models` varies

log = logging.getLogger(__name__)


def build_model(cfg: ACLConfig) -> InContextClassifier:
    """The in-context classifier of the ACL paper (Conv-4 → 2 × [SRWM, FF] → head), §3."""
    return build_classifier(cfg.model, image_size=cfg.data.image_size, in_channels=cfg.data.channels)


def load_glyph_pools(d: DataConfig) -> dict[str, ClassPool]:
    """Meta-train / meta-val / meta-test pools of ``data`` (FontGlyphs: rendered once, then cached)."""
    return load_pools_for(d, "data")


def _validate(model, sampler: EpisodeSampler, t: TrainConfig, episodes: int, device) -> dict[str, float]:
    accs = evaluate_task_pairs(
        model,
        sampler,
        episodes=episodes,
        n_way=t.n_way,
        k_shot=t.k_shot,
        n_query=t.n_query,
        batch_size=min(50, episodes),
        seed=12345,
        reverse=False,
        device=device,
    )
    out = {f"val_{k}": float(v.mean()) for k, v in accs.items()}
    terms = ["A|A", "B|A->B", "A|A->B"] if t.acl_loss else ["A|A", "B|A->B"]
    out["val_objective"] = float(np.mean([accs[k].mean() for k in terms]))
    out["val_acc"] = out["val_A|A"]
    return out


def _train_data(cfg: ACLConfig, continuing: bool) -> tuple[dict[str, ClassPool], dict[str, Any] | None]:
    """The meta-training pools and, for a new run with ``train.init_from``, the checkpoint whose model
    weights start it (read before the run folder is written, so a bad file leaves nothing behind)."""
    init = None
    if cfg.train.init_from and not continuing:
        init = read_checkpoint(cfg.train.init_from, key="train.init_from")
        if not isinstance(init.get("model"), dict):
            raise ValueError(
                f"train.init_from: expected a checkpoint with model weights, got {cfg.train.init_from}"
            )
    return load_glyph_pools(cfg.data), init


def _fit(run: RecipeRun) -> dict[str, Any]:
    """Meta-train ``cfg`` into ``run_dir`` (``config.yaml``, ``metrics.jsonl``, ``checkpoints/``).

    Stops at ``train.max_steps`` or after ``train.max_minutes`` of wall-clock time (validation
    included), whichever comes first. With ``resume`` the latest checkpoint continues exactly
    (model, optimiser, schedule, step, elapsed time and every random state); Ctrl-C saves it first.
    """
    cfg, device, rng, synth_gen = run.cfg, run.device, run.rng, run.synthetic
    pools, init = run.data
    t = cfg.train
    train_sampler = EpisodeSampler(pools["train"], rotations=cfg.data.rotations)
    val_sampler = EpisodeSampler(pools["val"])
    model = build_model(cfg).to(device)
    if init is not None:  # meta-finetuning from another run's weights (not on resume)
        model.load_state_dict(init["model"])
        log.info("initialised the model from %s (step %s)", t.init_from, init.get("step"))
    source = TaskSource(
        [train_sampler],
        t,
        rng,
        synth_gen,
        label_space=t.label_space or cfg.model.num_classes,
        tasks_per_sampler=t.num_tasks,
        n_query=t.n_query,
        first_shot=t.first_shot_loss,
    )

    def step_fn(step: int) -> tuple[torch.Tensor, dict[str, Any]]:
        n_way, k_shot = source.stage(step)
        tasks = source.tasks(model, step, device)
        loss, accs = acl_loss(
            model, tasks, backward=t.acl_loss, first_shot=t.first_shot_loss, online_weight=t.online_weight
        )
        return loss, {"n_way": n_way, "k_shot": k_shot, **{f"train_{i}|{j}": a for (i, j), a in accs.items()}}

    return fit_run(
        run,
        model,
        step_fn,
        lambda: _validate(model, val_sampler, t, t.val_episodes, device),
        description="ACL meta-training",
        postfix=("n_way", "k_shot"),
        objective="val_objective",
    )


def _split_datasets(cfg: ACLConfig) -> dict[str, SplitDataset]:
    out = {}
    for name in cfg.eval.split_benchmarks:
        if name == "digits":
            out["Split-Digits"] = load_digits_split(image_size=cfg.data.image_size)
        elif name == "fashion_mnist":
            out["Split-FashionMNIST"] = load_idx_dataset(
                cfg.data.fashion_mnist_dir, name="Fashion-MNIST", image_size=cfg.data.image_size
            )
        else:
            raise ValueError(f"eval.split_benchmarks: expected 'digits' or 'fashion_mnist', got {name!r}")
    return out


def _measure(
    cfg: ACLConfig, state: dict[str, Any], model: InContextClassifier, device: Any
) -> dict[str, Any]:
    """Few-shot accuracy and the in-context forgetting table on the held-out classes, then the split
    benchmarks of ``eval.split_benchmarks`` × ``eval.scenarios`` (ACL paper §4)."""
    e = cfg.eval
    test_pool = load_glyph_pools(cfg.data)["test"]
    with tqdm(total=e.episodes, desc="held-out task pairs", unit="ep", dynamic_ncols=True) as bar:
        accs = evaluate_task_pairs(
            model,
            EpisodeSampler(test_pool),
            episodes=e.episodes,
            n_way=e.n_way,
            k_shot=e.k_shot,
            n_query=e.n_query,
            batch_size=e.batch_size,
            seed=e.seed,
            device=device,
            progress=bar.update,
        )
    table = summarize_task_pairs(accs)
    task = {"n_way": e.n_way, "k_shot": e.k_shot, "episodes": e.episodes}
    results: dict[str, Any] = {
        "run": {"acl_loss": cfg.train.acl_loss},
        "fewshot": {
            "dataset": test_pool.name,
            **task,
            "accuracy": table["A|A"]["mean"],
            "ci95": table["A|A"]["ci95"],
        },
        "forgetting": {**task, "table": table, "task_a": test_pool.name, "task_b": test_pool.name},
        "split": {},
    }
    for name, ds in _split_datasets(cfg).items():
        for scenario in e.scenarios:
            key = f"{name}/{scenario}"
            log.info("evaluating %s", key)
            results["split"][key] = evaluate_split_benchmark(
                model, ds, k_shot=e.split_k_shot, runs=e.split_runs, scenario=scenario, device=device
            )
    return results


def export(run_dir: Path, out_dir: Path, *, which: str = "best", force: bool = False) -> Path:
    """Write a slim, shareable copy of a run: ``config.yaml``, ``command.txt``, ``metrics.jsonl`` and
    ``checkpoints/best.pt`` holding only the model weights and training step/time (no optimiser).

    ``out_dir`` must be new or empty (``force``: overwrite whatever it holds, even ``run_dir`` itself);
    it is locked while written.

    Raises:
        FileNotFoundError: if ``run_dir`` has no such checkpoint.
        RunFolderError: if ``out_dir`` holds a run or other files (without ``force``), another process
            holds it, or the checkpoint is damaged.
    """
    run_dir, out_dir = Path(run_dir), Path(out_dir)
    with output_folder(out_dir, source=run_dir, force=force, purpose="export"):
        state = CheckpointManager(run_dir).load(which)  # type: ignore[arg-type]
        if state is None:
            raise FileNotFoundError(f"checkpoint: no {which} checkpoint in {run_dir}/checkpoints")
        names = [n for n in ("config.yaml", "command.txt", "metrics.jsonl") if (run_dir / n).exists()]
        files = {n: (run_dir / n).read_text() for n in names}
        slim = {k: state[k] for k in ("model", "step", "elapsed_seconds", "best")}
        for name, text in files.items():
            atomic_write_text(out_dir / name, text)
        out = CheckpointManager(out_dir)
        path = out.write("best", slim)
        out.path("latest").unlink(missing_ok=True)  # only with force: a latest.pt of what was there
    return path


def compare_curves(
    run_dirs: list[Path],
    out: Path,
    *,
    labels: list[str] | None = None,
    key: str = "val_acc",
    x: str = "minutes",
) -> Path:
    """Plot ``key`` (default: meta-validation accuracy A|A) against ``x`` (``"minutes"`` of training
    wall-clock time, validation included, or ``"step"``) for several run folders in one PNG (``out``).

    Raises:
        FileNotFoundError: if a run folder has no ``metrics.jsonl``.
        ValueError: if ``labels`` does not match ``run_dirs``.
    """
    labels = labels or [Path(d).name for d in run_dirs]
    if x not in ("minutes", "step"):
        raise ValueError(f"x: expected 'minutes' or 'step', got {x!r}")
    if len(labels) != len(run_dirs):
        raise ValueError(f"labels: expected {len(run_dirs)} labels, got {len(labels)}")
    curves = {}
    for label, d in zip(labels, run_dirs, strict=True):
        log_path = Path(d) / "metrics.jsonl"
        if not log_path.exists():
            raise FileNotFoundError(f"run_dirs: no {log_path}")
        curves[label] = [(r[x], r[key]) for r in read_jsonl(log_path) if key in r]
    ylabel = "meta-validation accuracy A|A" if key == "val_acc" else key
    xlabel = "training wall-clock minutes" if x == "minutes" else "training step"
    return plot_learning_curves(curves, out, xlabel=xlabel, ylabel=ylabel, title=f"{ylabel} vs {xlabel}")


def summary(results: dict[str, Any]) -> str:
    """One line for the terminal: held-out few-shot accuracy and the first task after learning a second."""
    fs, table = results["fewshot"], results["forgetting"]["table"]
    acc = f"{100 * fs['accuracy']:.2f} ± {100 * fs['ci95']:.2f} %"
    forgetting = f"A after A→B {100 * table['A|A->B']['mean']:.2f} %"
    line = f"{fs['n_way']}-way {fs['k_shot']}-shot accuracy {acc}; {forgetting}"
    split = [f"{name} ACC {100 * r['ACC']['mean']:.2f} %" for name, r in results.get("split", {}).items()]
    return "; ".join([line, *split])


def _split_acc(res: dict[str, Any]) -> str:
    return f"{100 * res['ACC']['mean']:.2f} ± {100 * res['ACC']['std']:.2f}"


def comparison_table(results: dict[str, dict[str, Any]]) -> tuple[list[str], list[list[Any]]]:
    """Header and rows of ``compare``: one row per run (sequence layer or ``--vary`` value): few-shot
    accuracy, the forgetting measure A|A→B and each split benchmark's ACC (± std over runs)."""
    first = next(iter(results.values()))
    fs = first["fewshot"]
    header = ["run", "steps", "train min", f"{fs['n_way']}-way {fs['k_shot']}-shot (%)", "A after A→B (%)"]
    header += [f"{name} ACC (%)" for name in first.get("split", {})]
    rows = []
    for name, res in results.items():
        run, f, table = res["run"], res["fewshot"], res["forgetting"]["table"]
        a = table["A|A->B"]
        rows.append(
            [
                name,
                run["steps"],
                f"{run['train_minutes']:.1f}",
                f"{100 * f['accuracy']:.2f} ± {100 * f['ci95']:.2f}",
                f"{100 * a['mean']:.2f} ± {100 * a['ci95']:.2f}",
                *(_split_acc(res["split"][k]) for k in first.get("split", {})),
            ]
        )
    return header, rows


def plot_comparison(results: dict[str, dict[str, Any]], run_root: Path) -> None:
    """``run_root/comparison.png``: per run, the forgetting-table accuracies A|A, B|A→B and A|A→B
    (± 95% CI)."""
    terms = (("A|A", "A after A"), ("B|A->B", "B after A→B"), ("A|A->B", "A after A→B"))
    values = {
        name: {
            label: (100 * res["forgetting"]["table"][k]["mean"], 100 * res["forgetting"]["table"][k]["ci95"])
            for k, label in terms
        }
        for name, res in results.items()
    }
    fs = next(iter(results.values()))["fewshot"]
    plot_bars(
        values,
        Path(run_root) / "comparison.png",
        ylabel="accuracy (%)",
        title=f"{fs['dataset']}: {fs['n_way']}-way {fs['k_shot']}-shot, two tasks",
    )


train = train_verb(_fit, load_data=_train_data)

evaluate = evaluate_verb(
    _measure,
    config_cls=ACLConfig,
    build=build_model,
    write_report=write_report,
    doc="""Evaluate the ``which`` checkpoint of ``run_dir``: few-shot accuracy and the in-context
    forgetting table on the held-out classes, and the 5-task split benchmarks.""",
)
