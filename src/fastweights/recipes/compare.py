"""One command compares runs of one recipe preset that differ in one config key: the sequence layer
(``--models srwm,deltanet``: the recipe's ``MODEL_KEY``) or any key (``--vary train.acl_loss=true,false``).
Every run has the same seeds, data and step/token budget; each is trained (or resumed), evaluated, and
one table and the recipe's comparison plot(s) are written.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from fastweights.config import load_config
from fastweights.io import atomic_write_json, atomic_write_text
from fastweights.layers import SEQUENCE_LAYERS
from fastweights.recipes.contract import eval_command, get_recipe
from fastweights.recipes.reporting import md_table

__all__ = ["compare", "parse_vary", "variants"]

log = logging.getLogger(__name__)


def parse_vary(text: str) -> tuple[str, list[str]]:
    """``"KEY=v1,v2"`` → ``("KEY", ["v1", "v2"])``.

    Raises:
        ValueError: naming ``--vary`` for a missing ``=``, key or value, a repeated value, or a value with
            ``/`` (values name the run folders).
    """
    key, sep, rest = text.partition("=")
    values = [v.strip() for v in rest.split(",") if v.strip()]
    if not sep or not key.strip() or not values:
        raise ValueError(f"--vary: expected KEY=value1,value2 (e.g. train.acl_loss=true,false), got {text!r}")
    if len(set(values)) != len(values) or any("/" in v for v in values):
        raise ValueError(
            f"--vary: expected distinct values without '/' (they name run folders), got {values}"
        )
    return key.strip(), values


def variants(
    model_key: str,
    models: list[str] | None,
    vary: tuple[str, list[str]] | None,
    known: tuple[str, ...] = SEQUENCE_LAYERS,
) -> list[tuple[str, str]]:
    """``(run label = folder name, override)`` per run: ``(<model>, MODEL_KEY=<model>)`` for ``models``,
    ``(<last key part>=<value>, KEY=<value>)`` for ``vary``.

    Raises:
        ValueError: unless exactly one of ``models`` / ``vary`` is given, or for a model name not in
            ``known`` (the recipe's ``MODELS``; default the sequence layers).
    """
    if (models is None) == (vary is None):
        raise ValueError(
            "compare: expected one of --models or --vary, got " + ("both" if models else "neither")
        )
    if vary is not None:
        key, values = vary
        return [(f"{key.rsplit('.', 1)[-1]}={v}", f"{key}={v}") for v in values]
    unknown = [m for m in models or [] if m not in known]
    if unknown or not models:
        raise ValueError(f"models (--models): expected names from {known}, got {models}")
    return [(m, f"{model_key}={m}") for m in models]


def compare(
    recipe: str,
    preset: Path,
    models: list[str] | None,
    run_root: Path,
    overrides: list[str] | None = None,
    *,
    command: str | None = None,
    vary: tuple[str, list[str]] | None = None,
) -> dict[str, Any]:
    """Train (or resume) and evaluate ``preset`` once per sequence layer in ``models`` or once per value of
    ``vary = (key, values)``.

    Runs go to ``run_root/<label>`` (see :func:`variants`); an existing finished run is resumed (nothing
    retrained) and re-evaluated. ``eval.*`` overrides also apply to the evaluation of runs that already
    existed. Writes ``run_root/comparison.json``, ``comparison.md`` and the recipe's plot(s).

    Returns:
        ``{"rows": table rows, "results": {label: results.json content}, "markdown": table}``.

    Raises:
        ValueError: for an unknown recipe, model name or config key, or a bad value.
    """
    module = get_recipe(recipe)
    runs = variants(module.MODEL_KEY, models, vary, getattr(module, "MODELS", SEQUENCE_LAYERS))
    configs = {label: load_config(module.CONFIG, preset, [*(overrides or []), o]) for label, o in runs}
    run_root = Path(run_root)
    eval_overrides = [o for o in overrides or [] if o.startswith("eval.")]
    results = {}
    for label, cfg in configs.items():
        run_dir = run_root / label
        resume = (run_dir / "config.yaml").exists()  # also a run killed before its first checkpoint
        log.info("%s: training %s in %s%s", recipe, label, run_dir, " (resume)" if resume else "")
        module.train(cfg, run_dir, resume=resume, command=command)
        results[label] = module.evaluate(
            run_dir, overrides=eval_overrides, command=eval_command(recipe, run_dir, overrides=eval_overrides)
        )
    header, rows = module.comparison_table(results)
    markdown = "\n".join(md_table(header, rows))
    atomic_write_json(run_root / "comparison.json", {"header": header, "rows": rows, "results": results})
    atomic_write_text(run_root / "comparison.md", markdown + "\n")
    module.plot_comparison(results, run_root)
    return {"rows": rows, "results": results, "markdown": markdown}
