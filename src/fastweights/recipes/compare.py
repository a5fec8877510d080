"""One command compares sequence layers: train and evaluate the same recipe preset once per model (same
seeds, same data, same step/token budget; only the model key of the recipe differs), then write one
table and one plot.

A recipe module taking part provides ``train``, ``evaluate``, ``MODEL_KEY`` (the config key that
names the layer, e.g. ``model.sequence_layer``), ``comparison_table(results) -> (header, rows)`` and
``plot_comparison(results, run_root)``.
"""

from __future__ import annotations

import logging
from pathlib import Path
from types import ModuleType
from typing import Any

from fastweights.config import load_config
from fastweights.io import atomic_write_json, atomic_write_text
from fastweights.layers import SEQUENCE_LAYERS
from fastweights.recipes.report import md_table

__all__ = ["compare", "RECIPES", "recipe_module"]

log = logging.getLogger(__name__)

RECIPES = ("fewshot", "sequential", "lm")


def recipe_module(name: str) -> tuple[ModuleType, type]:
    """``(module, config class)`` of a recipe that ``compare`` and the CLI drive.

    Raises:
        ValueError: for an unknown recipe name.
    """
    if name == "fewshot":
        from fastweights.recipes import fewshot
        from fastweights.recipes.fewshot_config import FewShotConfig

        return fewshot, FewShotConfig
    if name == "sequential":
        from fastweights.recipes import sequential
        from fastweights.recipes.fewshot_config import SequentialConfig

        return sequential, SequentialConfig
    if name == "lm":
        from fastweights.recipes import lm
        from fastweights.recipes.lm_config import LMRecipeConfig

        return lm, LMRecipeConfig
    raise ValueError(f"recipe: expected one of {list(RECIPES)}, got {name!r}")


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
    re-evaluated. ``eval.*`` overrides also apply to the evaluation of runs that already existed.
    Writes ``run_root/comparison.json``, ``comparison.md`` and the recipe's plot(s).

    Returns:
        ``{"rows": table rows, "results": {model: results.json content}, "markdown": table}``.

    Raises:
        ValueError: for an unknown recipe or model name.
    """
    module, cfg_cls = recipe_module(recipe)
    unknown = [m for m in models if m not in SEQUENCE_LAYERS]
    if unknown or not models:
        raise ValueError(f"models (--models / --mixers): expected names from {SEQUENCE_LAYERS}, got {models}")
    run_root = Path(run_root)
    results = {}
    for name in models:
        cfg = load_config(cfg_cls, preset, [*(overrides or []), f"{module.MODEL_KEY}={name}"])
        run_dir = run_root / name
        resume = (run_dir / "config.yaml").exists()  # also a run killed before its first checkpoint
        log.info("%s: training %s in %s%s", recipe, name, run_dir, " (resume)" if resume else "")
        module.train(cfg, run_dir, resume=resume, command=command)
        eval_overrides = [o for o in overrides or [] if o.startswith("eval.")]
        results[name] = module.evaluate(run_dir, overrides=eval_overrides, command=command)
    header, rows = module.comparison_table(results)
    markdown = "\n".join(md_table(header, rows))
    atomic_write_json(run_root / "comparison.json", {"header": header, "rows": rows, "results": results})
    atomic_write_text(run_root / "comparison.md", markdown + "\n")
    module.plot_comparison(results, run_root)
    return {"rows": rows, "results": results, "markdown": markdown}
