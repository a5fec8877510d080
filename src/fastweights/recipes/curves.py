"""The learning curve of a run report: the validation metric the evaluated checkpoint was selected on
(``results["run"]["selected_on"]``, recorded from the recipe's
:class:`~fastweights.recipes.contract.Selection`) against training progress, drawn thick with the
evaluated checkpoint starred, beside the run's other validation metrics (thin), from the run's
``metrics.jsonl``. Every recipe's report draws its curve through :func:`learning_curve_section`, so the
curve shown is always the one the checkpoint was chosen on.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from fastweights.io import read_jsonl
from fastweights.recipes.plots import plot_learning_curves

__all__ = ["curve_points", "learning_curve_section", "selection_metric"]


def _number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


def selection_metric(
    run: Mapping[str, Any], defaults: Sequence[str], records: Sequence[Mapping[str, Any]] = ()
) -> tuple[str, str]:
    """``(metric, mode)`` of ``run["selected_on"]`` (``mode``: ``"max"``, ``"min"`` or ``"latest"``). For
    results written before the selection was recorded: the first of ``defaults`` that some record of
    ``records`` has (else the first), mode ``"max"``."""
    sel = run.get("selected_on")
    if isinstance(sel, Mapping) and isinstance(sel.get("metric"), str):
        return sel["metric"], str(sel.get("mode", "max"))
    logged = [d for d in defaults if any(_number(r.get(d)) for r in records)]
    return (logged or list(defaults))[0], "max"


def curve_points(records: Sequence[Mapping[str, Any]], key: str, x: str) -> list[tuple[float, float]]:
    """``(record[x], record[key])`` of every record with numeric, finite values of both."""
    return [(float(r[x]), float(r[key])) for r in records if _number(r.get(x)) and _number(r.get(key))]


def _checkpoint_point(
    records: Sequence[Mapping[str, Any]], run: Mapping[str, Any], key: str, x: str
) -> tuple[float, float] | None:
    """``(x, key)`` of the (last) record at the evaluated checkpoint's step ``run["steps"]``."""
    step = run.get("steps")
    hits = [r for r in records if r.get("step") == step and _number(r.get(x)) and _number(r.get(key))]
    return (float(hits[-1][x]), float(hits[-1][key])) if step is not None and hits else None


def learning_curve_section(
    out_dir: Path,
    run: Mapping[str, Any],
    *,
    default_metric: str | Sequence[str],
    ylabel: str,
    others: Sequence[str] | Callable[[str], bool] = (),
    labels: Mapping[str, str] | Callable[[str], str] | None = None,
    x: str = "step",
    xlabel: str = "training step",
    scale: float = 1.0,
    unit: str = "",
    chance: float | None = None,
    chance_label: str = "chance",
    title: str = "learning curve",
    heading: str = "## Learning curve",
) -> list[str]:
    """Draw ``out_dir/plots/learning_curve.png`` from ``out_dir/metrics.jsonl`` and return its Markdown
    lines (heading, a sentence naming the selection metric and the starred checkpoint, the image).

    Drawn: the selection metric (:func:`selection_metric`; ``default_metric``, or the first of several
    present in the log, for results that do not record it; thick, black) and the ``others`` metrics
    present in the log (thin; names, or a predicate on record keys; a metric identical to one already
    drawn is left out), each times ``scale`` against ``x``, the evaluated checkpoint (the record at step
    ``run["steps"]``) starred, and the ``chance`` line (in scaled units) when given. ``labels`` (a dict
    or a function) renames metrics in the legend.

    Returns:
        The Markdown lines; ``[]`` when there is no log or no record of the selection metric.
    """
    log = Path(out_dir) / "metrics.jsonl"
    records = read_jsonl(log) if log.is_file() else []
    defaults = [default_metric] if isinstance(default_metric, str) else list(default_metric)
    metric, mode = selection_metric(run, defaults, records)
    main = curve_points(records, metric, x)
    if not main:
        return []

    def name(key: str) -> str:
        if callable(labels):
            return labels(key)
        return (labels or {}).get(key, key)

    keys = dict.fromkeys(k for r in records for k in r if k not in (metric, x) and _number(r.get(k)))
    drawn = {metric: main}
    for k in keys:
        if others(k) if callable(others) else k in others:
            pts = curve_points(records, k, x)
            if pts not in drawn.values():
                drawn[k] = pts
    chosen = [k for k in drawn if k != metric]
    main_label = f"{name(metric)} (selection metric)"
    curves = {main_label: [(a, scale * b) for a, b in main]}
    for k in chosen:
        curves[name(k)] = [(a, scale * b) for a, b in drawn[k]]
    point = _checkpoint_point(records, run, metric, x)
    which = run.get("checkpoint", "best")
    mark = None
    if point is not None:
        what = "selected" if mode != "latest" else "evaluated (latest)"
        mark = (point[0], scale * point[1], f"{what} checkpoint (step {run['steps']})")
    png = plot_learning_curves(
        curves,
        Path(out_dir) / "plots" / "learning_curve.png",
        xlabel=xlabel,
        ylabel=ylabel,
        chance=chance,
        chance_label=chance_label,
        title=title,
        selected=main_label,
        mark=mark,
    )
    direction = {"max": "the highest", "min": "the lowest"}.get(mode)
    if direction is not None:
        sentence = (
            f"The evaluated checkpoint ({which}, step {run.get('steps', '?')}) is the one with {direction} "
            f"`{metric}` in the log: the thick black line"
        )
        if point is not None:
            sentence += f", {scale * point[1]:.2f}{unit} at the star"
    else:
        sentence = (
            f"The evaluated checkpoint is the latest (step {run.get('steps', '?')}), not a selected one; "
            f"the thick black line is `{metric}`, the metric the run's best checkpoint is selected on"
        )
    sel = run.get("selected_on")
    data = sel.get("data") if isinstance(sel, Mapping) else None
    sentence += f". Selection data: {data}." if data else "."
    if chosen:
        sentence += " Thin lines: the run's other validation metrics, for context."
    return [heading, "", sentence, "", f"![learning curve](plots/{png.name})", ""]
