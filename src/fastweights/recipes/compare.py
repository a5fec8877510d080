"""One command compares sequence layers: train and evaluate the same recipe preset once per model (same
seeds, same data, only ``model.sequence_layer`` differs), then write one table and one plot."""

from __future__ import annotations

import logging
from pathlib import Path
from types import ModuleType
from typing import Any

from fastweights.config import load_config
from fastweights.layers import SEQUENCE_LAYERS
from fastweights.recipes.fewshot_config import FewShotConfig, SequentialConfig
from fastweights.recipes.report import md_table
from fastweights.train.checkpoint import CheckpointManager
from fastweights.train.io import atomic_write_json, atomic_write_text

__all__ = ["compare", "RECIPES"]

log = logging.getLogger(__name__)


def _recipe(name: str) -> tuple[ModuleType, type]:
    from fastweights.recipes import fewshot, sequential

    table = {"fewshot": (fewshot, FewShotConfig), "sequential": (sequential, SequentialConfig)}
    if name not in table:
        raise ValueError(f"recipe: expected one of {sorted(table)}, got {name!r}")
    return table[name]


RECIPES = ("fewshot", "sequential")


def _row(recipe: str, model: str, res: dict[str, Any]) -> list[Any]:
    run = res["run"]
    head = [model, run["steps"], f"{run['train_minutes']:.1f}"]
    if recipe == "fewshot":
        fs = res["fewshot"]
        return head + [f"{100 * fs['accuracy']:.2f} ± {100 * fs['ci95']:.2f}"]
    cells = []
    for order in res["sequential"]["orders"].values():
        occ = order["by_occurrence"]
        firsts = [f"{100 * (o.get(1, o.get('1'))):.1f}" for o in occ]
        cells += [f"{100 * order['accuracy']:.2f} ± {100 * order['ci95']:.2f}", " / ".join(firsts)]
    return head + cells


def compare(
    recipe: str,
    preset: Path,
    models: list[str],
    run_root: Path,
    overrides: list[str] | None = None,
    *,
    command: str | None = None,
) -> dict[str, Any]:
    """Train (or resume) and evaluate ``preset`` once per sequence layer in ``models``.

    Runs go to ``run_root/<model>``; an existing finished run is resumed (nothing retrained) and
    re-evaluated. Writes ``run_root/comparison.json``, ``comparison.md`` and ``comparison.png``.

    Returns:
        ``{"rows": table rows, "results": {model: results.json content}, "markdown": table}``.

    Raises:
        ValueError: for an unknown recipe or model name.
    """
    module, cfg_cls = _recipe(recipe)
    unknown = [m for m in models if m not in SEQUENCE_LAYERS]
    if unknown or not models:
        raise ValueError(f"models: expected names from {SEQUENCE_LAYERS}, got {models}")
    run_root = Path(run_root)
    results = {}
    for name in models:
        cfg = load_config(cfg_cls, preset, [*(overrides or []), f"model.sequence_layer={name}"])
        run_dir = run_root / name
        resume = CheckpointManager(run_dir).exists("latest")
        log.info("%s: training %s in %s%s", recipe, name, run_dir, " (resume)" if resume else "")
        module.train(cfg, run_dir, resume=resume, command=command)
        results[name] = module.evaluate(run_dir, command=command)
    if recipe == "fewshot":
        fs = next(iter(results.values()))["fewshot"]
        header = ["model", "steps", "train min", f"{fs['n_way']}-way {fs['k_shot']}-shot accuracy (%)"]
    else:
        header = ["model", "steps", "train min"]
        for key in next(iter(results.values()))["sequential"]["orders"]:
            header += [f"{key}: overall (%)", f"{key}: 1st occurrence T1 / T2 (%)"]
    rows = [_row(recipe, m, r) for m, r in results.items()]
    markdown = "\n".join(md_table(header, rows))
    atomic_write_json(run_root / "comparison.json", {"header": header, "rows": rows, "results": results})
    atomic_write_text(run_root / "comparison.md", markdown + "\n")
    _plot(recipe, results, run_root)
    return {"rows": rows, "results": results, "markdown": markdown}


def _plot(recipe: str, results: dict[str, Any], run_root: Path) -> None:
    if recipe == "sequential":
        from fastweights.recipes.sequential import plot_occurrence_curves

        first = next(iter(results.values()))
        for key in first["sequential"]["orders"]:
            curves = {m: r["sequential"]["orders"][key] for m, r in results.items()}
            slug = key.replace(" -> ", "_to_")
            plot_occurrence_curves(curves, run_root / f"comparison_{slug}.png", title=key)
        return
    from matplotlib.figure import Figure

    fig = Figure(figsize=(5.0, 3.5))
    ax = fig.subplots()
    names = list(results)
    acc = [100 * results[m]["fewshot"]["accuracy"] for m in names]
    ci = [100 * results[m]["fewshot"]["ci95"] for m in names]
    ax.bar(names, acc, yerr=ci, capsize=4, color="tab:blue")
    fs = next(iter(results.values()))["fewshot"]
    ax.set_ylabel("meta-test accuracy (%)")
    ax.set_title(f"{fs['dataset']}: {fs['n_way']}-way {fs['k_shot']}-shot")
    ax.grid(axis="y", alpha=0.3)
    tmp = run_root / "comparison.tmp.png"
    fig.savefig(tmp, dpi=120, bbox_inches="tight")
    tmp.replace(run_root / "comparison.png")
