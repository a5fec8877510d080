"""Every report plot, each written atomically as a PNG: the accuracy-matrix heatmap, the in-context
forgetting bars (both task orders of one domain pair, or one group per ordered domain pair), accuracy vs
number of tasks, learning curves and the grouped bars of the recipes' comparisons. Inputs are fractions
in [0, 1] (shown in percent where the axis says so).

Plots use matplotlib's object API with the Agg canvas (no pyplot, no global backend switch), so this
module is safe to import anywhere.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from fastweights.io import PathLike, atomic_save_figure
from fastweights.recipes.paper_tables import (
    FORGETTING_ORDERS,
    OMNIGLOT_REFERENCE,
    ForgettingRow,
    long_span_tasks,
)
from fastweights.recipes.report_values import as_float, as_matrix, mean_entry, task_labels

__all__ = [
    "plot_accuracy_matrices",
    "plot_accuracy_matrix",
    "plot_bars",
    "plot_forgetting",
    "plot_forgetting_rows",
    "plot_learning_curves",
    "plot_long_span",
]

_BAR_ROLES = ("first task, after learning it", "second task, after both", "first task, after both")
_BAR_COLORS = ("#4C72B0", "#55A868", "#C44E52")


def plot_accuracy_matrix(
    R: Any, task_names: Sequence[str] | None, path: PathLike, title: str = "accuracy matrix"
) -> Path:
    """Heatmap of an accuracy matrix with the percentage written in every cell.

    Args:
        R: ``[T, T]`` fractions (nested lists or array); ``R[i, j]`` = accuracy on task ``j`` after
            learning tasks ``0..i``. NaN/None cells (not measured) are left blank.
        task_names: ``T`` labels (e.g. ``"0/1"``); ``None`` → ``"1".."T"``.
        path: output PNG (parent folders created; written atomically).
        title: figure title.

    Returns:
        ``Path(path)``.

    Raises:
        ValueError: if ``R`` is not a non-empty square matrix or ``task_names`` has the wrong length.
    """
    arr = as_matrix(R)
    T = arr.shape[0]
    names = task_labels(task_names, T)
    size = max(3.5, 0.75 * T + 2.0)
    fig = Figure(figsize=(size + 1.0, size))
    ax = fig.subplots()
    im = _draw_matrix(ax, arr, names, title, fontsize=9)
    fig.colorbar(im, ax=ax, label="accuracy (%)", fraction=0.046, pad=0.04)
    return atomic_save_figure(fig, path)


def _draw_matrix(ax: Any, arr: np.ndarray, names: list[str], title: str, *, fontsize: int) -> Any:
    """One accuracy-matrix heatmap (percent in every measured cell) on ``ax``; returns the image."""
    T = arr.shape[0]
    pct = 100.0 * arr
    im = ax.imshow(np.ma.masked_invalid(pct), vmin=0.0, vmax=100.0, cmap="viridis")
    for i in range(T):
        for j in range(T):
            v = pct[i, j]
            if math.isfinite(v):
                color = "black" if v > 60.0 else "white"
                ax.text(j, i, f"{v:.1f}", ha="center", va="center", fontsize=fontsize, color=color)
    ax.set_xticks(range(T), names)
    ax.set_yticks(range(T), [f"after {n}" for n in names])
    ax.set_xlabel("evaluated on task j")
    ax.set_ylabel("after learning task i")
    ax.set_title(title)
    return im


def plot_accuracy_matrices(
    matrices: Mapping[str, Any], path: PathLike, *, title: str, task_names: Sequence[str] | None = None
) -> Path:
    """Small multiples: one accuracy-matrix heatmap per entry of ``matrices`` (name → ``[T, T]``
    fractions, all the same ``T``; NaN/None cells blank), 4 per row, into the PNG ``path``.

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
    cols = min(4, len(arrs))
    rows = -(-len(arrs) // cols)
    cell = max(2.6, 0.6 * T + 1.4)
    fig = Figure(figsize=(cols * cell + 0.8, rows * cell + 0.6))
    axes = np.atleast_1d(fig.subplots(rows, cols, squeeze=False)).reshape(-1)
    for ax, (name, arr) in zip(axes, arrs.items(), strict=False):
        _draw_matrix(ax, arr, names, name, fontsize=7)
    for ax in axes[len(arrs) :]:
        ax.set_axis_off()
    fig.suptitle(title)
    fig.tight_layout()
    return atomic_save_figure(fig, path)


_ForgettingGroup = tuple[str, Sequence[tuple[str, Mapping[str, Any] | None]]]


def _forgetting_bars(
    groups: Sequence[_ForgettingGroup], path: PathLike, title: str, chance: float | None
) -> Path:
    """Grouped bars (three per group: first task after it, second task after both, first task after
    both) with 95% CI error bars; ``None`` entries are left out. Written atomically to ``path``."""
    fig = Figure(figsize=(max(7.0, 2.4 * len(groups) + 1.5), 4.4))
    ax = fig.subplots()
    width = 0.26
    labelled: set[int] = set()
    ticks: list[tuple[float, str]] = []
    for g, (_, bars) in enumerate(groups):
        for b, (tick, entry) in enumerate(bars):
            if entry is None:
                continue
            mean = 100.0 * as_float(entry["mean"])
            ci = entry.get("ci95")
            x = g + (b - 1) * width
            ticks.append((x, tick))
            ax.bar(
                x,
                mean,
                width,
                yerr=None if ci is None else [100.0 * as_float(ci)],
                capsize=4,
                color=_BAR_COLORS[b],
                label=_BAR_ROLES[b] if b not in labelled else None,
            )
            labelled.add(b)
            if math.isfinite(mean):
                ax.annotate(
                    f"{mean:.1f}",
                    (x, mean),
                    xytext=(0, -3),
                    textcoords="offset points",
                    ha="center",
                    va="top",
                    fontsize=8,
                    color="white",
                )
    ax.set_xticks([x for x, _ in ticks], [t for _, t in ticks], fontsize=8)
    for g, (label, _) in enumerate(groups):
        ax.text(g, -0.12, label, transform=ax.get_xaxis_transform(), ha="center", va="top", fontsize=9)
    if chance is not None:
        ax.axhline(
            100.0 * chance,
            color="gray",
            linestyle="--",
            linewidth=1.2,
            label=f"chance ({100.0 * chance:.0f}%)",
        )
    ax.set_ylim(0, 125)  # head room for the legend above the bars
    ax.set_ylabel("accuracy (%)")
    ax.set_title(title)
    ax.legend(fontsize=8, loc="upper center", ncol=3, framealpha=0.9)
    return atomic_save_figure(fig, path)


def plot_forgetting(
    table: Mapping[str, Mapping[str, Any]],
    path: PathLike,
    title: str = "in-context forgetting",
    *,
    chance: float | None = None,
) -> Path:
    """Grouped bars of the 2-task forgetting protocol with 95% CI error bars.

    Two groups, one per task order: (``A|A``, ``B|A->B``, ``A|A->B``) and (``B|B``, ``A|B->A``,
    ``B|B->A``). Keys absent from ``table`` are skipped.

    Args:
        table: key → ``{"mean": fraction, "ci95": fraction}`` (keys as in
            ``paper_tables.FORGETTING_ORDERS``).
        path: output PNG (written atomically).
        title: figure title.
        chance: chance accuracy as a fraction (``1/n_way``), drawn as a dashed line; None → no line.

    Returns:
        ``Path(path)``.

    Raises:
        ValueError: if no known key is present or an entry lacks ``"mean"``.
    """
    known = [k for _, bars in FORGETTING_ORDERS for k, _, _ in bars]
    if not any(k in table for k in known):
        raise ValueError(f"table: expected some of the keys {known}, given {sorted(table)}")
    groups = [
        (
            f"order {order}",
            [
                (k.replace("->", "→"), mean_entry(table[k], f"table[{k!r}]") if k in table else None)
                for k, _, _ in bars
            ],
        )
        for order, bars in FORGETTING_ORDERS
    ]
    return _forgetting_bars(groups, path, title, chance)


def plot_forgetting_rows(
    rows: Sequence[ForgettingRow],
    path: PathLike,
    title: str = "in-context forgetting",
    *,
    chance: float | None = None,
) -> Path:
    """Grouped bars of the paper's in-context forgetting table: one group per ordered domain pair
    (``paper_tables.forgetting_rows``) with acc(A|A), acc(B|A→B) and acc(A|A→B) ± 95% CI.

    Args:
        rows: the table rows (``order`` labels the group).
        path: output PNG (written atomically).
        title: figure title.
        chance: chance accuracy as a fraction (``1/n_way``), drawn as a dashed line; None → no line.

    Returns:
        ``Path(path)``.

    Raises:
        ValueError: if ``rows`` is empty.
    """
    if not rows:
        raise ValueError("rows: expected at least one ordered domain pair, given none")
    ticks = ("A|A", "B|A→B", "A|A→B")
    groups = [(r.order, list(zip(ticks, (r.first, r.second, r.first_after), strict=True))) for r in rows]
    return _forgetting_bars(groups, path, title, chance)


def plot_long_span(long_span: Mapping[str, Any], path: PathLike) -> Path:
    """Accuracy vs number of tasks of the long-span protocol (``results["long_span"]``): ACC ± std over
    runs against ``T`` beside the ACL paper's Split-Omniglot reference (another data set), and, when
    the summaries carry ``R``, a second panel with the final accuracy ``R[T-1, j]`` of every task ``j``,
    one line per ``T``. Written atomically to ``path``; returns ``Path(path)``.

    Raises:
        ValueError: as ``paper_tables.long_span_table`` for a malformed section.
    """
    tasks = long_span_tasks({"long_span": long_span})
    with_r = [(T, res) for T, res in tasks if "R" in res]
    fig = Figure(figsize=(11.0 if with_r else 6.0, 4.2))
    axes = fig.subplots(1, 2 if with_r else 1, squeeze=False)[0]
    ax = axes[0]
    ts = [T for T, _ in tasks]
    acc = [100.0 * as_float(res["ACC"]["mean"]) for _, res in tasks]
    std = [100.0 * as_float(res["ACC"].get("std", 0.0)) for _, res in tasks]
    ax.errorbar(ts, acc, yerr=std, marker="o", capsize=4, label=str(long_span.get("dataset", "this run")))
    ref = sorted(OMNIGLOT_REFERENCE.items())
    ax.errorbar(
        [T for T, _ in ref],
        [100.0 * m for _, (m, _) in ref],
        yerr=[100.0 * s for _, (_, s) in ref],
        marker="s",
        linestyle="--",
        capsize=4,
        color="gray",
        label="ACL paper, Split-Omniglot (another data set)",
    )
    n_way = long_span.get("n_way")
    if n_way:
        ax.axhline(100.0 / float(n_way), color="gray", linestyle=":", linewidth=1.0, label="chance")
    ax.set_xticks(sorted(set(ts) | {T for T, _ in ref}))
    ax.set_xlabel("number of tasks T")
    ax.set_ylabel("ACC after the last task (%)")
    ax.set_title("accuracy vs number of tasks")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    if with_r:
        ax = axes[1]
        for T, res in with_r:
            final = 100.0 * as_matrix(res["R"])[-1]
            ax.plot(range(1, T + 1), final, marker="o", markersize=3, label=f"T = {T}")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel("task j")
        ax.set_ylabel("accuracy on task j after the last task (%)")
        ax.set_title("final accuracy per task")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    return atomic_save_figure(fig, path)


def plot_learning_curves(
    curves: Mapping[str, Sequence[tuple[float, float]]],
    path: PathLike,
    *,
    xlabel: str = "wall-clock minutes",
    ylabel: str = "validation accuracy",
    chance: float | None = None,
    title: str | None = None,
) -> Path:
    """One line per variant, e.g. validation accuracy vs wall-clock minutes.

    Args:
        curves: variant name → list of ``(x, y)`` points (plotted as given, sorted by ``x``;
            non-finite points dropped). Variants with no points are skipped.
        path: output PNG (written atomically).
        xlabel, ylabel: axis labels (units in the label).
        chance: y value of a dashed chance line (same units as ``y``); None → no line.
        title: figure title; None → ``f"{ylabel} vs {xlabel}"``.

    Returns:
        ``Path(path)``.

    Raises:
        ValueError: if no variant has a finite point, or a point is not an ``(x, y)`` pair.
    """
    fig = Figure(figsize=(6.4, 4.0))
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
        ax.plot(arr[:, 0], arr[:, 1], marker="o" if len(arr) < 30 else None, markersize=3, label=str(name))
        drawn += 1
    if drawn == 0:
        raise ValueError(f"curves: expected at least one variant with finite points, given {list(curves)}")
    if chance is not None:
        ax.axhline(chance, color="gray", linestyle="--", linewidth=1.2, label="chance")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title if title is not None else f"{ylabel} vs {xlabel}")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return atomic_save_figure(fig, path)


def plot_bars(
    values: Mapping[str, Mapping[str, tuple[float, float]]], path: PathLike, *, ylabel: str, title: str
) -> Path:
    """Grouped bars with error bars: ``values[group][series] = (value, error)`` (one group per model),
    into the PNG ``path`` (written atomically); returns ``path``."""
    many = len(values) > 6  # long label lists are rotated below the axis
    fig = Figure(figsize=(max(5.0, (0.55 if many else 1.2) * len(values) + 2.0), 5.6 if many else 3.8))
    ax = fig.subplots()
    groups = list(values)
    series = list(dict.fromkeys(s for g in values.values() for s in g))
    width = 0.8 / max(1, len(series))
    for i, name in enumerate(series):
        xs = [j + (i - (len(series) - 1) / 2) * width for j in range(len(groups))]
        v = [values[g].get(name, (math.nan, 0.0)) for g in groups]
        ax.bar(xs, [a for a, _ in v], width, yerr=[e for _, e in v], capsize=3, label=name, color=f"C{i}")
    if many:
        ax.set_xticks(range(len(groups)), groups, rotation=40, ha="right", fontsize=8)
    else:
        ax.set_xticks(range(len(groups)), groups)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(axis="y", alpha=0.3)
    if len(series) > 1:
        ax.legend(fontsize=8)
    if many:
        fig.subplots_adjust(bottom=0.38)
    return atomic_save_figure(fig, Path(path))
