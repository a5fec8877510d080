"""The report plots every recipe uses, each written atomically as a PNG: the accuracy-matrix heatmap
(one matrix, or several side by side; cells above the diagonal hatched, below-chance cells outlined,
long task names as ``T1..Tn`` with a legend), learning curves (the checkpoint selection metric
emphasised, the selected checkpoint starred) and the grouped bars of the recipes' comparisons, with
chance drawn where it is given. Inputs are fractions in [0, 1] (shown in percent where the axis says
so). The ACL report's
own plots (in-context forgetting bars, accuracy vs number of tasks) are in
:mod:`fastweights.recipes.acl.plots`.

Plots use matplotlib's object API with the Agg canvas (no pyplot, no global backend switch), so this
module is safe to import anywhere; matplotlib itself is imported at the first plot (:func:`new_figure`),
which keeps it out of every process that only trains (0.6 s of each start).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from fastweights.io import PathLike, atomic_save_figure, read_jsonl
from fastweights.recipes.reporting import (
    as_matrix,
    below_chance_cells,
    readable_name,
    short_task_labels,
    task_labels,
)

__all__ = [
    "curve_points",
    "integer_ticks",
    "learning_curve_section",
    "new_figure",
    "plot_accuracy_matrices",
    "plot_accuracy_matrix",
    "plot_bars",
    "plot_learning_curves",
    "selection_metric",
]


def new_figure(*, figsize: tuple[float, float], layout: str | None = None) -> Any:
    """A matplotlib ``Figure`` of ``figsize`` inches (width, height), not tied to pyplot; ``layout``
    as matplotlib's (e.g. ``"constrained"``: axes, labels and outside legends fitted at draw time)."""
    from matplotlib.figure import Figure

    return Figure(figsize=figsize, layout=layout)


def integer_ticks(axis: Any) -> None:
    """Put the major ticks of a matplotlib ``axis`` (e.g. ``ax.xaxis``) on integers only."""
    from matplotlib.ticker import MaxNLocator

    axis.set_major_locator(MaxNLocator(integer=True))


def plot_accuracy_matrix(
    R: Any,
    task_names: Sequence[str] | None,
    path: PathLike,
    title: str = "accuracy matrix",
    *,
    chance: float | None = None,
    flag_unseen: bool = False,
) -> Path:
    """Heatmap of an accuracy matrix with the percentage written in every cell.

    Drawn: the matrix (colour = accuracy in %, colour bar beside it), the cells above the diagonal
    (tasks not learned yet) washed out and hatched, the cells below ``chance`` outlined in red
    (:func:`~fastweights.recipes.reporting.below_chance_cells`) and chance as a red line on the
    colour bar. Task names longer than a few characters (e.g. Split-Emoji's class names) label the axes
    as ``T1..Tn`` with a legend of the names under the matrix
    (:func:`~fastweights.recipes.reporting.short_task_labels`), so the matrix keeps most of the
    figure.

    Args:
        R: ``[T, T]`` fractions (nested lists or array); ``R[i, j]`` = accuracy on task ``j`` after
            learning tasks ``0..i``. NaN/None cells (not measured) are left blank.
        task_names: ``T`` labels (e.g. ``"0/1"``); ``None`` → ``"1".."T"``.
        path: output PNG (parent folders created; written atomically).
        title: figure title.
        chance: chance accuracy as a fraction (``1 / #classes`` of the scenario); None → not drawn.
        flag_unseen: also outline below-chance cells above the diagonal (domain-incremental tasks share
            their labels, so chance applies before a task is learned).

    Returns:
        ``Path(path)``.

    Raises:
        ValueError: if ``R`` is not a non-empty square matrix or ``task_names`` has the wrong length.
    """
    arr = as_matrix(R)
    T = arr.shape[0]
    names = task_labels(task_names, T)
    labels = short_task_labels(names)
    legend_names = names if labels != names else None
    flagged = below_chance_cells(arr, chance, include_unseen=flag_unseen)
    side = max(3.0, 0.7 * T + 1.6)
    legend_lines = (T if legend_names else 0) + (T > 1) + (chance is not None)
    fig = new_figure(figsize=(side + 1.5, side + 0.2 * legend_lines + 0.3), layout="constrained")
    ax = fig.subplots()
    im = _draw_matrix(ax, arr, labels, title, fontsize=9, flagged=flagged)
    cbar = fig.colorbar(im, ax=ax, label="accuracy (%)", fraction=0.046, pad=0.04)
    if chance is not None:
        cbar.ax.axhline(100.0 * float(chance), color="red", linewidth=2.0)
    _matrix_legend(fig, T, chance, labels, legend_names, colorbar=True)
    return atomic_save_figure(fig, path)


def _matrix_legend(
    fig: Any,
    T: int,
    chance: float | None,
    labels: Sequence[str],
    names: Sequence[str] | None,
    *,
    colorbar: bool,
) -> None:
    """The legend under the matrices: the hatched cells, chance and the red outline (and the red line on
    the colour bar, ``colorbar``), and (``names`` given) what each short task label stands for."""
    from matplotlib.patches import Patch

    handles = []
    if T > 1:
        handles.append(
            Patch(label="not learned yet (above the diagonal)", **{**_UNSEEN_STYLE, "facecolor": "0.85"})
        )
    if chance is not None:
        handles.append(
            Patch(
                fill=False,
                edgecolor="red",
                linewidth=2.0,
                label=f"below chance ({100.0 * float(chance):.1f} %"
                + (", red line on the colour bar)" if colorbar else ")"),
            )
        )
    for label, name in zip(labels, names or [], strict=False):
        handles.append(Patch(visible=False, label=f"{label}: {readable_name(name)}"))
    if handles:
        fig.legend(handles=handles, loc="outside lower center", fontsize=8, frameon=False, handlelength=1.6)


_UNSEEN_STYLE = {"facecolor": (1.0, 1.0, 1.0, 0.45), "edgecolor": "0.3", "hatch": "//", "linewidth": 0.0}


def _draw_matrix(
    ax: Any,
    arr: np.ndarray,
    names: list[str],
    title: str,
    *,
    fontsize: int,
    flagged: Sequence[tuple[int, int]] = (),
) -> Any:
    """One accuracy-matrix heatmap on ``ax`` (percent in every measured cell; the cells above the
    diagonal washed out and hatched; ``flagged`` cells outlined in red); returns the image."""
    from matplotlib.patches import Rectangle

    T = arr.shape[0]
    pct = 100.0 * arr
    im = ax.imshow(np.ma.masked_invalid(pct), vmin=0.0, vmax=100.0, cmap="viridis")
    marked = set(flagged)
    for i in range(T):
        for j in range(T):
            if j > i:
                ax.add_patch(Rectangle((j - 0.5, i - 0.5), 1.0, 1.0, zorder=2, **_UNSEEN_STYLE))
            if (i, j) in marked:
                ax.add_patch(
                    Rectangle((j - 0.42, i - 0.42), 0.84, 0.84, fill=False, edgecolor="red", lw=2.0, zorder=3)
                )
            v = pct[i, j]
            if math.isfinite(v):
                color = "black" if v > 60.0 or j > i else "white"
                ax.text(j, i, f"{v:.1f}", ha="center", va="center", fontsize=fontsize, color=color, zorder=4)
    ax.set_xticks(range(T), names)
    ax.set_yticks(range(T), [f"after {n}" for n in names])
    ax.set_xlabel("evaluated on task j")
    ax.set_ylabel("after learning task i")
    ax.set_title(title)
    return im


def plot_accuracy_matrices(
    matrices: Mapping[str, Any],
    path: PathLike,
    *,
    title: str,
    task_names: Sequence[str] | None = None,
    chance: float | None = None,
    flag_unseen: bool = False,
) -> Path:
    """Small multiples: one accuracy-matrix heatmap per entry of ``matrices`` (name → ``[T, T]``
    fractions, all the same ``T``; NaN/None cells blank), 4 per row, into the PNG ``path``; cells above
    the diagonal hatched, cells below ``chance`` outlined in red (as :func:`plot_accuracy_matrix`), long
    task names shortened to ``T1..Tn`` with a legend.

    Raises:
        ValueError: for no matrices, a malformed one, matrices of different sizes or a wrong number of
            ``task_names``.
    """
    arrs = {name: as_matrix(R, f"matrices[{name!r}]") for name, R in matrices.items()}
    sizes = {a.shape[0] for a in arrs.values()}
    if len(sizes) != 1:
        raise ValueError(f"matrices: expected one size [T, T] for all, given sizes {sorted(sizes)}")
    T = sizes.pop()
    names = task_labels(task_names, T)
    labels = short_task_labels(names)
    cols = min(4, len(arrs))
    rows = -(-len(arrs) // cols)
    cell = max(2.6, 0.6 * T + 1.4)
    legend_lines = (T if labels != names else 0) + 2
    fig = new_figure(
        figsize=(cols * cell + 0.8, rows * cell + 0.8 + 0.2 * legend_lines), layout="constrained"
    )
    axes = np.atleast_1d(fig.subplots(rows, cols, squeeze=False)).reshape(-1)
    for ax, (name, arr) in zip(axes, arrs.items(), strict=False):
        flagged = below_chance_cells(arr, chance, include_unseen=flag_unseen)
        _draw_matrix(ax, arr, labels, name, fontsize=7, flagged=flagged)
    for ax in axes[len(arrs) :]:
        ax.set_axis_off()
    fig.suptitle(title)
    _matrix_legend(fig, T, chance, labels, names if labels != names else None, colorbar=False)
    return atomic_save_figure(fig, path)


def plot_learning_curves(
    curves: Mapping[str, Sequence[tuple[float, float]]],
    path: PathLike,
    *,
    xlabel: str = "wall-clock minutes",
    ylabel: str = "validation accuracy",
    chance: float | None = None,
    title: str | None = None,
    selected: str | None = None,
    mark: tuple[float, float, str] | None = None,
    chance_label: str = "chance",
) -> Path:
    """One line per variant, e.g. validation accuracy vs wall-clock minutes.

    Args:
        curves: variant name → list of ``(x, y)`` points (plotted as given, sorted by ``x``;
            non-finite points dropped). Variants with no points are skipped.
        path: output PNG (written atomically).
        xlabel, ylabel: axis labels (units in the label).
        chance: y value of a dashed chance line (same units as ``y``); None → no line.
        title: figure title; None → ``f"{ylabel} vs {xlabel}"``.
        selected: the name of the curve the checkpoint was selected on: drawn thick and black above the
            others (which are drawn thinner).
        mark: ``(x, y, label)`` of a point to mark with a star and a dotted vertical line (e.g. the
            selected checkpoint), labelled in the legend.
        chance_label: the legend label of the chance line.

    Returns:
        ``Path(path)``.

    Raises:
        ValueError: if no variant has a finite point, or a point is not an ``(x, y)`` pair.
    """
    fig = new_figure(figsize=(7.2, 4.4) if selected is not None else (6.4, 4.0))
    ax = fig.subplots()
    drawn = 0
    for name, pts in curves.items():
        try:
            arr = np.array(list(pts), dtype=np.float64).reshape(-1, 2)
        except (TypeError, ValueError) as e:
            raise ValueError(f"curves[{name!r}]: expected a list of (x, y) pairs, given {pts!r:.80}") from e
        arr = arr[np.all(np.isfinite(arr), axis=1)]
        if len(arr) == 0:
            continue
        arr = arr[np.argsort(arr[:, 0], kind="stable")]
        style: dict[str, Any] = {"marker": "o" if len(arr) < 30 else None, "markersize": 3}
        if selected is not None:
            style = (
                {**style, "color": "black", "linewidth": 2.4, "zorder": 5}
                if name == selected
                else {**style, "linewidth": 1.0, "markersize": 2, "alpha": 0.75}
            )
        ax.plot(arr[:, 0], arr[:, 1], label=str(name), **style)
        drawn += 1
    if drawn == 0:
        raise ValueError(f"curves: expected at least one variant with finite points, given {list(curves)}")
    if mark is not None:
        x, y, label = mark
        ax.axvline(x, color="black", linestyle=":", linewidth=1.0)
        ax.plot(
            [x], [y], marker="*", markersize=14, color="gold", markeredgecolor="black", zorder=6, label=label
        )
    if chance is not None:
        ax.axhline(chance, color="gray", linestyle="--", linewidth=1.2, label=chance_label)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title if title is not None else f"{ylabel} vs {xlabel}")
    ax.grid(alpha=0.3)
    if selected is not None:  # many lines: the legend goes beside the plot
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0)
        fig.set_layout_engine("constrained")
    else:
        ax.legend(fontsize=8)
    return atomic_save_figure(fig, path)


def plot_bars(
    values: Mapping[str, Mapping[str, tuple[float, float]]],
    path: PathLike,
    *,
    ylabel: str,
    title: str,
    chance: float | None = None,
) -> Path:
    """Grouped bars with error bars: ``values[group][series] = (value, error)`` (one group per model),
    and a dashed line at ``chance`` (in the units of the values; None → none), into the PNG ``path``
    (written atomically); returns ``path``."""
    many = len(values) > 6  # long label lists are rotated below the axis
    fig = new_figure(figsize=(max(5.0, (0.55 if many else 1.2) * len(values) + 2.0), 5.6 if many else 3.8))
    ax = fig.subplots()
    groups = list(values)
    series = list(dict.fromkeys(s for g in values.values() for s in g))
    width = 0.8 / max(1, len(series))
    for i, name in enumerate(series):
        xs = [j + (i - (len(series) - 1) / 2) * width for j in range(len(groups))]
        v = [values[g].get(name, (math.nan, 0.0)) for g in groups]
        ax.bar(xs, [a for a, _ in v], width, yerr=[e for _, e in v], capsize=3, label=name, color=f"C{i}")
    if chance is not None:
        ax.axhline(chance, color="gray", linestyle="--", linewidth=1.2, label=f"chance ({chance:.3g})")
    if many:
        ax.set_xticks(range(len(groups)), groups, rotation=40, ha="right", fontsize=8)
    else:
        ax.set_xticks(range(len(groups)), groups)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(axis="y", alpha=0.3)
    if len(series) > 1 or chance is not None:
        ax.legend(fontsize=8)
    if many:
        fig.subplots_adjust(bottom=0.38)
    return atomic_save_figure(fig, Path(path))


# --- the learning curve of a run report: the validation metric the evaluated checkpoint was selected on
# (results["run"]["selected_on"], recorded from the recipe's contract.Selection) against training
# progress, thick, with the evaluated checkpoint starred, beside the run's other validation metrics
# (thin), from the run's metrics.jsonl. Every recipe's report draws its curve through
# learning_curve_section, so the curve shown is always the one the checkpoint was chosen on.


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
