"""Sequential multi-task recipe: delayed-label in-context learning of two tasks from two domains in one
stream (Irie et al. 2022, §4.2).

``train``: per step, one N-way K-shot task from each domain's meta-training pool, each trimmed at the
end by a random ``0..max_trim`` demonstrations, concatenated in random order (per batch), delayed
labels, cross-entropy at every position. ``evaluate``: untrimmed streams in both orders (A→B and
B→A) on the meta-test pools: overall / per-task accuracy, accuracy by the k-th occurrence of a class
and by position → ``results.json``, ``report.md``, ``plots/``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from fastweights.cl.sequential import (
    OCCURRENCES,
    delayed_label_stream,
    evaluate_sequential,
    sequential_loss,
)
from fastweights.cl.tasks import TaskSource
from fastweights.data.episodes import EpisodeSampler
from fastweights.data.registry import load_pools_for
from fastweights.io import atomic_save_figure
from fastweights.models.classifier_config import build_classifier
from fastweights.models.in_context import InContextClassifier
from fastweights.recipes.classifier import fit_classifier, sampling_streams, validation_sampling
from fastweights.recipes.compare import Score
from fastweights.recipes.contract import RECIPE_MEMBERS, Selection
from fastweights.recipes.plots import integer_ticks, learning_curve_section, new_figure
from fastweights.recipes.reporting import run_header, write_report_files
from fastweights.recipes.run import (
    RecipeRun,
    evaluate_verb,
    export_verb,
    train_verb,
)
from fastweights.recipes.sequential.config import SequentialConfig

__all__ = [*RECIPE_MEMBERS, "plot_occurrence_curves"]  # the recipe contract + extras

NAME = "sequential"  # the registry / CLI name (recipes.contract.RECIPES)
CONFIG = SequentialConfig
SELECTION = Selection(  # the best checkpoint: meta-validation accuracy on both tasks
    "val_acc", data="meta-validation classes of both domains (disjoint from their meta-test classes)"
)
DOMAINS = ("domain_a", "domain_b")  # the config sections of the two domains
MODEL_KEY = "model.sequence_layer"  # what `compare` varies


def build_model(cfg: SequentialConfig) -> InContextClassifier:
    """The in-context classifier of ``cfg.model`` (both domains share image size and channels)."""
    a = cfg.domain_a  # the config checks that domain_b's images have the same format
    return build_classifier(cfg.model, image_size=a.image_size, in_channels=a.channels)


def _fit(run: RecipeRun) -> dict[str, Any]:
    """Meta-train ``cfg`` into ``run_dir``; the best checkpoint maximises the overall validation
    accuracy of untrimmed A→B streams. Resume/interruption as in :func:`fastweights.train.loop.fit`.
    """
    cfg, device = run.cfg, run.device
    rng, synth_gen = sampling_streams(run)
    t = cfg.train
    model = build_model(cfg).to(device)
    domains = list(zip(_domains(cfg), run.data, strict=True))
    train_samplers = [EpisodeSampler(pools["train"], rotations=d.rotations) for d, pools in domains]
    val_samplers = [EpisodeSampler(pools["val"]) for _, pools in domains]

    source = TaskSource(train_samplers, t, rng, synth_gen, label_space=cfg.model.num_classes)

    def step_fn(step: int) -> tuple[torch.Tensor, dict[str, Any]]:
        n_way, k_shot = source.stage(step)
        full = n_way * k_shot
        tasks = source.tasks(model, step, device)
        if rng.random() < 0.5:
            tasks = tasks[::-1]
        lengths = [full - int(rng.integers(0, min(t.max_trim, full - 1) + 1)) for _ in tasks]
        stream = delayed_label_stream(tasks, lengths=lengths, unknown_label=model.unknown_label)
        loss, logits = sequential_loss(model, stream)
        acc = (logits.argmax(-1) == stream.targets).float().mean().item()
        return loss, {"n_way": n_way, "k_shot": k_shot, "train_acc": acc}

    def validate() -> dict[str, float]:
        res = evaluate_sequential(
            model,
            val_samplers,
            n_way=t.n_way,
            k_shot=t.k_shot,
            episodes=t.val_episodes,
            **validation_sampling(t.val_episodes),
            device=device,
        )
        return {"val_acc": res["accuracy"], "val_task1": res["per_task"][0], "val_task2": res["per_task"][1]}

    return fit_classifier(
        run,
        model,
        step_fn,
        validate,
        description=f"sequential {t.n_way}-way {t.k_shot}-shot ({cfg.model.sequence_layer})",
        selection=SELECTION,
    )


def _domains(cfg: SequentialConfig) -> list[Any]:
    return [cfg.domain_a, cfg.domain_b]


def _measure(
    cfg: SequentialConfig, state: dict[str, Any], model: InContextClassifier, device: Any
) -> dict[str, Any]:
    """Both stream orders (A→B, B→A) of the meta-test pools, untrimmed (SRWM paper §4.2)."""
    e, t = cfg.eval, cfg.train
    names = [d.source for d in _domains(cfg)]
    samplers = [
        EpisodeSampler(load_pools_for(d, key)["test"]) for key, d in zip(DOMAINS, _domains(cfg), strict=True)
    ]
    orders = {}
    for order in ((0, 1), (1, 0)):
        key = " -> ".join(names[i] for i in order)
        orders[key] = {
            "tasks": [names[i] for i in order],
            **evaluate_sequential(
                model,
                [samplers[i] for i in order],
                n_way=t.n_way,
                k_shot=t.k_shot,
                episodes=e.episodes,
                batch_size=e.batch_size,
                seed=e.seed,
                device=device,
            ),
        }
    return {"sequential": {"n_way": t.n_way, "k_shot": t.k_shot, "orders": orders}}


def plot_occurrence_curves(curves: dict[str, dict[str, Any]], path: Path, *, title: str) -> Path:
    """Accuracy vs k-th occurrence of a class, one colour per ``label``, solid for task 1 and dashed for
    task 2 (paper Fig. 6 style).

    Args:
        curves: label (e.g. the sequence layer) → one stream order's evaluation (``tasks`` and
            ``by_occurrence``).
    """
    fig = new_figure(figsize=(6.4, 4.0))
    ax = fig.subplots()
    for j, (label, res) in enumerate(curves.items()):
        for i, (task, occ) in enumerate(zip(res["tasks"], res["by_occurrence"], strict=True)):
            ax.plot(
                range(1, len(occ) + 1),
                [100 * a for a in occ],
                marker="o",
                markersize=3,
                linestyle="-" if i == 0 else "--",
                color=f"C{j}",  # one colour per model; solid = task 1, dashed = task 2
                label=f"{label}: task {i + 1} ({task})",
            )
    integer_ticks(ax.xaxis)
    ax.set_xlabel("k-th occurrence of the class in its task")
    ax.set_ylabel("accuracy (%)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_save_figure(fig, path)
    return path


def write_report(results: dict[str, Any], out_dir: Path) -> Path:
    """``report.md`` (+ ``report.html``), ``plots/occurrence_<order>.png`` and, from
    ``out_dir/metrics.jsonl``, ``plots/learning_curve.png`` (the selection metric ``val_acc`` with the
    evaluated checkpoint starred, per-task accuracies, chance = 1/n_way) of one evaluation; returns the
    report's path."""
    run, seq = results["run"], results["sequential"]
    ks = [k for k in OCCURRENCES if k <= seq["k_shot"]]
    lines = [
        f"# Sequential multi-task report: {run['preset']} ({run['sequence_layer']})",
        "",
        *run_header(run, f"; {seq['n_way']}-way {seq['k_shot']}-shot tasks, delayed labels, untrimmed"),
        "",
        "| order | episodes | overall (%) | task 1 (%) | task 2 (%) | "
        + " | ".join(f"T{i} k={k}" for i in (1, 2) for k in ks)
        + " |",
        "|---|---|---|---|---|" + "---|" * (2 * len(ks)),
    ]
    for key, res in seq["orders"].items():
        occ_cells = [f"{100 * res['by_occurrence'][i][k - 1]:.1f}" for i in (0, 1) for k in ks]
        lines.append(
            f"| {key} | {res['episodes']} | {100 * res['accuracy']:.2f} ± {100 * res['ci95']:.2f} | "
            f"{100 * res['per_task'][0]:.2f} | {100 * res['per_task'][1]:.2f} | "
            + " | ".join(occ_cells)
            + " |"
        )
    lines.append("")
    for key, res in seq["orders"].items():
        slug = key.replace(" -> ", "_to_")
        png = plot_occurrence_curves(
            {run["sequence_layer"]: res}, out_dir / "plots" / f"occurrence_{slug}.png", title=key
        )
        lines += [f"![{key}]({png.relative_to(out_dir)})", ""]
    lines.append(
        "T1/T2 k=…: accuracy at the k-th occurrence of a class within task 1/2. "
        "± is 1.96·std/√n over episodes."
    )
    lines += [""] + learning_curve_section(
        out_dir,
        run,
        default_metric="val_acc",
        others=("val_task1", "val_task2"),
        labels={"val_acc": "both tasks (val_acc)", "val_task1": "task 1", "val_task2": "task 2"},
        ylabel="meta-validation accuracy (%)",
        scale=100.0,
        unit=" %",
        chance=100.0 / seq["n_way"],
        chance_label=f"chance ({100.0 / seq['n_way']:.0f} %)",
        title="sequential multi-task meta-validation accuracy",
    )
    return write_report_files(out_dir / "report.md", "\n".join(lines).rstrip("\n") + "\n")


def comparison_table(results: dict[str, dict[str, Any]]) -> tuple[list[str], list[list[Any]]]:
    """Header and rows of ``compare``: per order, overall accuracy and first-occurrence accuracies."""
    header = ["model", "steps", "train min"]
    for key in next(iter(results.values()))["sequential"]["orders"]:
        header += [f"{key}: overall (%)", f"{key}: 1st occurrence T1 / T2 (%)"]
    rows = []
    for name, res in results.items():
        run = res["run"]
        cells: list[Any] = [name, run["steps"], f"{run['train_minutes']:.1f}"]
        for order in res["sequential"]["orders"].values():
            firsts = [f"{100 * o[0]:.1f}" for o in order["by_occurrence"]]
            cells += [f"{100 * order['accuracy']:.2f} ± {100 * order['ci95']:.2f}", " / ".join(firsts)]
        rows.append(cells)
    return header, rows


def headline(results: dict[str, Any]) -> dict[str, Score]:
    """The numbers ``compare --seeds`` aggregates over training seeds: each stream order's overall
    accuracy (percent) with its 95% CI over episodes."""
    return {
        f"{key}: overall (%)": Score(100 * order["accuracy"], 100 * order["ci95"])
        for key, order in results["sequential"]["orders"].items()
    }


def plot_comparison(results: dict[str, dict[str, Any]], run_root: Path) -> None:
    """``run_root/comparison_<order>.png``: accuracy by occurrence, one curve per sequence layer."""
    first = next(iter(results.values()))
    for key in first["sequential"]["orders"]:
        curves = {m: r["sequential"]["orders"][key] for m, r in results.items()}
        slug = key.replace(" -> ", "_to_")
        plot_occurrence_curves(curves, Path(run_root) / f"comparison_{slug}.png", title=key)


def summary(results: dict[str, Any]) -> str:
    """One line for the terminal: the overall accuracy of each stream order."""
    orders = results["sequential"]["orders"]
    return "; ".join(
        f"{key}: {100 * r['accuracy']:.2f} ± {100 * r['ci95']:.2f} %" for key, r in orders.items()
    )


train = train_verb(
    _fit,
    load_data=lambda c, _: [load_pools_for(d, key) for key, d in zip(DOMAINS, _domains(c), strict=True)],
    build=build_model,
)

evaluate = evaluate_verb(
    _measure,
    config_cls=SequentialConfig,
    build=build_model,
    write_report=write_report,
    selection=SELECTION,
    doc="""Evaluate the ``which`` checkpoint of ``run_dir`` on both stream orders of the meta-test pools:
    overall / per-task accuracy, by occurrence and by position.""",
)

export = export_verb(NAME, config_cls=CONFIG, selection=SELECTION, headline=headline)
