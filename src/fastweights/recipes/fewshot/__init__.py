"""Few-shot recipe: N-way K-shot in-context learning with synchronous labels (SRWM paper §4.1).

``train``: episodes from the meta-training classes of ``data.source`` (FontGlyphs by default, or a real
benchmark from a local folder), one support sequence + independent queries per episode, Adam with
warm-up, validation on the meta-validation classes, atomic best/latest checkpoints, resumable.
``evaluate``: ``eval.runs × eval.episodes`` meta-test episodes with one query each → mean ± 95% CI,
``results.json``, ``report.md`` and a learning-curve plot.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import torch
from tqdm.auto import tqdm

from fastweights.cl.fewshot import evaluate_fewshot, fewshot_loss
from fastweights.cl.tasks import TaskSource
from fastweights.data.episodes import EpisodeSampler
from fastweights.data.registry import load_pools_for
from fastweights.models.classifier_config import build_classifier
from fastweights.models.in_context import InContextClassifier
from fastweights.recipes.classifier import fit_classifier, sampling_streams, validation_sampling
from fastweights.recipes.compare import Score
from fastweights.recipes.contract import RECIPE_MEMBERS, Selection
from fastweights.recipes.fewshot.config import FewShotConfig
from fastweights.recipes.plots import learning_curve_section, plot_bars
from fastweights.recipes.reporting import run_header, write_report_files
from fastweights.recipes.run import (
    RecipeRun,
    evaluate_verb,
    export_verb,
    train_verb,
)

__all__ = [*RECIPE_MEMBERS]  # the recipe contract + extras

NAME = "fewshot"  # the registry / CLI name (recipes.contract.RECIPES)
CONFIG = FewShotConfig
SELECTION = Selection(  # the best checkpoint: meta-validation few-shot accuracy
    "val_acc",
    data="meta-validation classes of data.source (disjoint from its meta-test classes), fixed episodes",
)
MODEL_KEY = "model.sequence_layer"  # what `compare` varies

log = logging.getLogger(__name__)


def build_model(cfg: FewShotConfig) -> InContextClassifier:
    """The in-context classifier of ``cfg.model`` for ``cfg.data``'s images."""
    return build_classifier(cfg.model, image_size=cfg.data.image_size, in_channels=cfg.data.channels)


def _fit(run: RecipeRun) -> dict[str, Any]:
    """Meta-train ``cfg`` into ``run_dir`` (``config.yaml``, ``metrics.jsonl``, ``checkpoints/``).

    Stops at ``train.max_steps`` or ``train.max_minutes``; the best checkpoint maximises the
    meta-validation accuracy. See :func:`fastweights.train.loop.fit` for resume and interruption.
    """
    cfg, device, pools = run.cfg, run.device, run.data
    rng, synth_gen = sampling_streams(run)
    t = cfg.train
    train_sampler = EpisodeSampler(pools["train"], rotations=cfg.data.rotations)
    val_sampler = EpisodeSampler(pools["val"])
    model = build_model(cfg).to(device)
    source = TaskSource(
        [train_sampler], t, rng, synth_gen, label_space=cfg.model.num_classes, n_query=t.n_query
    )

    def step_fn(step: int) -> tuple[torch.Tensor, dict[str, Any]]:
        (task,) = source.tasks(model, step, device)
        loss, acc = fewshot_loss(model, task)
        n_way, k_shot = source.stage(step)
        return loss, {"n_way": n_way, "k_shot": k_shot, "train_acc": acc}

    def validate() -> dict[str, float]:
        res = evaluate_fewshot(
            model,
            val_sampler,
            n_way=t.n_way,
            k_shot=t.k_shot,
            episodes=t.val_episodes,
            runs=1,
            **validation_sampling(t.val_episodes),
            device=device,
        )
        return {"val_acc": res["accuracy"]}

    return fit_classifier(
        run,
        model,
        step_fn,
        validate,
        description=f"few-shot {t.n_way}-way {t.k_shot}-shot ({cfg.model.sequence_layer})",
        selection=SELECTION,
    )


def _measure(
    cfg: FewShotConfig, state: dict[str, Any], model: InContextClassifier, device: Any
) -> dict[str, Any]:
    """``eval.runs`` × ``eval.episodes`` meta-test episodes (SRWM paper §4.1)."""
    e, t = cfg.eval, cfg.train
    sampler = EpisodeSampler(load_pools_for(cfg.data)["test"])
    with tqdm(total=e.runs * e.episodes, desc="meta-test episodes", unit="ep", dynamic_ncols=True) as bar:
        res = evaluate_fewshot(
            model,
            sampler,
            n_way=t.n_way,
            k_shot=t.k_shot,
            episodes=e.episodes,
            runs=e.runs,
            batch_size=e.batch_size,
            seed=e.seed,
            device=device,
            progress=bar.update,
        )
    return {"fewshot": {"dataset": f"{cfg.data.source}/test", "n_way": t.n_way, "k_shot": t.k_shot, **res}}


def write_report(results: dict[str, Any], out_dir: Path) -> Path:
    """``report.md`` (+ ``report.html``) and ``plots/learning_curve.png`` (from ``out_dir/metrics.jsonl``:
    the selection metric ``val_acc`` with the evaluated checkpoint starred, chance = 1/n_way) of one
    few-shot evaluation; returns the report's path."""
    run, fs = results["run"], results["fewshot"]
    lines = [
        f"# Few-shot report: {run['preset']} ({run['sequence_layer']})",
        "",
        *run_header(run),
        "",
        "| data | task | episodes | accuracy (%) | per run (%) |",
        "|---|---|---|---|---|",
        f"| {fs['dataset']} | {fs['n_way']}-way {fs['k_shot']}-shot | {fs['runs']} × {fs['episodes']} | "
        f"{100 * fs['accuracy']:.2f} ± {100 * fs['ci95']:.2f} | "
        + ", ".join(f"{100 * a:.2f}" for a in fs["run_accuracies"])
        + " |",
        "",
        "± is the 95% CI 1.96·std/√n over all episodes (one query each).",
    ]
    lines += [""] + learning_curve_section(
        out_dir,
        run,
        default_metric="val_acc",
        ylabel="meta-validation accuracy (%)",
        scale=100.0,
        unit=" %",
        chance=100.0 / fs["n_way"],
        chance_label=f"chance ({100.0 / fs['n_way']:.0f} %)",
        title="few-shot meta-validation accuracy",
    )
    return write_report_files(out_dir / "report.md", "\n".join(lines).rstrip("\n") + "\n")


def comparison_table(results: dict[str, dict[str, Any]]) -> tuple[list[str], list[list[Any]]]:
    """Header and rows of ``compare``: one row per sequence layer."""
    fs = next(iter(results.values()))["fewshot"]
    header = ["model", "steps", "train min", f"{fs['n_way']}-way {fs['k_shot']}-shot accuracy (%)"]
    rows = []
    for name, res in results.items():
        run, f = res["run"], res["fewshot"]
        rows.append(
            [
                name,
                run["steps"],
                f"{run['train_minutes']:.1f}",
                f"{100 * f['accuracy']:.2f} ± {100 * f['ci95']:.2f}",
            ]
        )
    return header, rows


def headline(results: dict[str, Any]) -> dict[str, Score]:
    """The number ``compare --seeds`` aggregates over training seeds: the meta-test accuracy (percent)
    with its 95% CI over episodes."""
    fs = results["fewshot"]
    return {
        f"{fs['n_way']}-way {fs['k_shot']}-shot accuracy (%)": Score(100 * fs["accuracy"], 100 * fs["ci95"])
    }


def plot_comparison(results: dict[str, dict[str, Any]], run_root: Path) -> None:
    """``run_root/comparison.png``: meta-test accuracy ± 95% CI per run, chance (1/n_way) dashed."""
    fs = next(iter(results.values()))["fewshot"]
    plot_bars(
        {
            m: {"accuracy": (100 * r["fewshot"]["accuracy"], 100 * r["fewshot"]["ci95"])}
            for m, r in results.items()
        },
        Path(run_root) / "comparison.png",
        ylabel="meta-test accuracy (%)",
        title=f"{fs['dataset']}: {fs['n_way']}-way {fs['k_shot']}-shot",
        chance=100.0 / fs["n_way"],
    )


def summary(results: dict[str, Any]) -> str:
    """One line for the terminal: the meta-test accuracy ± 95% CI."""
    fs = results["fewshot"]
    return (
        f"{fs['dataset']} {fs['n_way']}-way {fs['k_shot']}-shot accuracy "
        f"{100 * fs['accuracy']:.2f} ± {100 * fs['ci95']:.2f} %"
    )


train = train_verb(_fit, load_data=lambda c, _: load_pools_for(c.data), build=build_model)

evaluate = evaluate_verb(
    _measure,
    config_cls=FewShotConfig,
    build=build_model,
    write_report=write_report,
    selection=SELECTION,
    doc="""Evaluate the ``which`` checkpoint of ``run_dir`` on ``eval.runs`` × ``eval.episodes`` meta-test
    episodes with one query each (mean ± 95% CI); the report has the learning curve.""",
)

export = export_verb(NAME, config_cls=CONFIG, selection=SELECTION, headline=headline)
