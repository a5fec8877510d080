"""The report plots every recipe uses, each written atomically as a PNG: the accuracy-matrix heatmap
(one matrix, or several side by side), learning curves and the grouped bars of the recipes'
comparisons. Inputs are fractions in [0, 1] (shown in percent where the axis says so). The ACL report's
own plots (in-context forgetting bars, accuracy vs number of tasks) are in
:mod:`fastweights.recipes.acl.plots`.

Plots use matplotlib's object API with the Agg canvas (no pyplot, no global backend switch), so this
module is safe to import anywhere; matplotlib itself is imported at the first plot (:func:`new_figure`),
which keeps it out of every process that only trains (0.6 s of each start).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from fastweights.io import PathLike, atomic_save_figure
from fastweights.recipes.reporting import as_matrix, task_labels

__all__ = [
    "integer_ticks",
    "new_figure",
    "plot_accuracy_matrices",
    "plot_accuracy_matrix",
    "plot_bars",
    "plot_learning_curves",
]


def new_figure(*, figsize: tuple[float, float]) -> Any:
    """A matplotlib ``Figure`` of ``figsize`` inches (width, height), not tied to pyplot."""
    from matplotlib.figure import Figure

    return Figure(figsize=figsize)


def integer_ticks(axis: Any) -> None:
    """Put the major ticks of a matplotlib ``axis`` (e.g. ``ax.xaxis``) on integers only."""
    from matplotlib.ticker import MaxNLocator

    axis.set_major_locator(MaxNLocator(integer=True))


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
    fig = new_figure(figsize=(size + 1.0, size))
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
    fig = new_figure(figsize=(cols * cell + 0.8, rows * cell + 0.6))
    axes = np.atleast_1d(fig.subplots(rows, cols, squeeze=False)).reshape(-1)
    for ax, (name, arr) in zip(axes, arrs.items(), strict=False):
        _draw_matrix(ax, arr, names, name, fontsize=7)
    for ax in axes[len(arrs) :]:
        ax.set_axis_off()
    fig.suptitle(title)
    fig.tight_layout()
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
    fig = new_figure(figsize=(6.4, 4.0))
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
    fig = new_figure(figsize=(max(5.0, (0.55 if many else 1.2) * len(values) + 2.0), 5.6 if many else 3.8))
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
