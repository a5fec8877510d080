"""The ACL report's own plots, each written atomically as a PNG: the in-context forgetting bars (both
task orders of one domain pair, or one group per ordered domain pair) and accuracy vs number of tasks
(the long-span protocol). Inputs are fractions in [0, 1], shown in percent.

Plots use matplotlib's object API with the Agg canvas (no pyplot, no global backend switch).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from fastweights.io import PathLike, atomic_save_figure
from fastweights.recipes.acl.paper_tables import (
    FORGETTING_ORDERS,
    OMNIGLOT_REFERENCE,
    ForgettingRow,
    long_span_tasks,
)
from fastweights.recipes.plots import integer_ticks, new_figure
from fastweights.recipes.reporting import as_float, as_matrix, mean_entry

__all__ = ["plot_forgetting", "plot_forgetting_rows", "plot_long_span"]

_BAR_ROLES = ("first task, after learning it", "second task, after both", "first task, after both")
_BAR_COLORS = ("#4C72B0", "#55A868", "#C44E52")
_ForgettingGroup = tuple[str, Sequence[tuple[str, Mapping[str, Any] | None]]]


def _forgetting_bars(
    groups: Sequence[_ForgettingGroup], path: PathLike, title: str, chance: float | None
) -> Path:
    """Grouped bars (three per group: first task after it, second task after both, first task after
    both) with 95% CI error bars; ``None`` entries are left out. Written atomically to ``path``."""
    fig = new_figure(figsize=(max(7.0, 2.4 * len(groups) + 1.5), 4.4))
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
    one line per ``T``; chance (``1/n_way``) dotted in both panels. Written atomically to ``path``;
    returns ``Path(path)``.

    Raises:
        ValueError: as ``paper_tables.long_span_table`` for a malformed section.
    """
    tasks = long_span_tasks({"long_span": long_span})
    with_r = [(T, res) for T, res in tasks if "R" in res]
    fig = new_figure(figsize=(11.0 if with_r else 6.0, 4.2))
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
        if n_way:
            ax.axhline(100.0 / float(n_way), color="gray", linestyle=":", linewidth=1.0, label="chance")
        integer_ticks(ax.xaxis)
        ax.set_xlabel("task j")
        ax.set_ylabel("accuracy on task j after the last task (%)")
        ax.set_title("final accuracy per task")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    return atomic_save_figure(fig, path)
