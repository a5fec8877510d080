"""The ACL report's own plots, each written atomically as a PNG: the in-context forgetting bars (both
task orders of one domain pair, or one group per ordered domain pair), accuracy vs number of tasks
(the long-span protocol) and the meta-validation forgetting curves of several models on the same
measures (:func:`plot_forgetting_curves`). Inputs are fractions in [0, 1], shown in percent.

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

__all__ = [
    "FORGETTING_MEASURES",
    "forgetting_measures",
    "plot_forgetting",
    "plot_forgetting_curves",
    "plot_forgetting_rows",
    "plot_long_span",
]

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


# --- meta-validation curves on the same measures for every 2-task run ---------------------------------
# Every 2-task domain-incremental run logs the six in-context terms of its meta-validation episodes
# (``val_A|A``, ``val_B|A->B``, ``val_A|A->B``, ``val_B|B``, ``val_A|B->A``, ``val_B|B->A`` in
# ``metrics.jsonl``, ACL paper §4.1), whatever its ``train.acl_loss``; only ``val_objective`` differs:
# with ``train.acl_loss false`` it leaves out the two backward terms (A|A->B, B|B->A), so the two
# models' objectives are not one measure. These curves recompute the same quantities for every run.

#: (title, role) of each measure: role ``None`` = the mean of all logged terms (the ACL objective,
#: ``val_objective`` of a run with ``train.acl_loss true``); else the index of the term in each task
#: order of :data:`~fastweights.recipes.acl.paper_tables.FORGETTING_ORDERS` (0: acc(A|A), the first
#: task right after learning it; 1: acc(B|A→B), the second task after both; 2: acc(A|A→B), the first
#: task after both), averaged over the task orders logged.
FORGETTING_MEASURES: tuple[tuple[str, int | None], ...] = (
    ("ACL objective: mean of all six terms", None),
    ("acc(A|A): first task, just learned", 0),
    ("acc(B|A→B): second task, after both", 1),
    ("acc(A|A→B): first task, after both", 2),
)


def _logged_orders(record: Mapping[str, Any]) -> list[tuple[str, ...]]:
    """The ``val_*`` keys of each task order of :data:`FORGETTING_ORDERS` whose three terms are all
    numbers in ``record``."""
    orders = [tuple(f"val_{k}" for k, _, _ in bars) for _, bars in FORGETTING_ORDERS]
    return [keys for keys in orders if all(_is_number(record.get(k)) for k in keys)]


def _is_number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


def forgetting_measures(record: Mapping[str, Any]) -> dict[str, float]:
    """The :data:`FORGETTING_MEASURES` of one ``metrics.jsonl`` record (fractions), computed from its
    in-context terms, so that they are the same quantity for an ACL and a no-ACL run (unlike
    ``val_objective``); ``{}`` for a record without a complete task order (a training-only record, or
    a log of another protocol)."""
    orders = _logged_orders(record)
    if not orders:
        return {}
    out = {}
    for title, role in FORGETTING_MEASURES:
        keys = [k for keys in orders for k in keys] if role is None else [keys[role] for keys in orders]
        out[title] = float(sum(float(record[k]) for k in keys) / len(keys))
    return out


def _measure_curves(
    records: Sequence[Mapping[str, Any]], x: str, where: str
) -> tuple[dict[str, dict[float, float]], int]:
    """``{measure: {x: value}}`` of one run's records and the number of task orders its log holds."""
    curves: dict[str, dict[float, float]] = {title: {} for title, _ in FORGETTING_MEASURES}
    n_orders = set()
    for r in records:
        values = forgetting_measures(r)
        if not values or not _is_number(r.get(x)):
            continue
        n_orders.add(len(_logged_orders(r)))
        for title, v in values.items():
            curves[title][float(r[x])] = v
    if not n_orders:
        terms = ", ".join(f"val_{k}" for k, _, _ in FORGETTING_ORDERS[0][1])
        raise ValueError(f"{where}: no record with {x!r} and the in-context terms {terms} (a 2-task log)")
    if len(n_orders) > 1:
        raise ValueError(f"{where}: the records log different task orders ({sorted(n_orders)})")
    return curves, n_orders.pop()


def plot_forgetting_curves(
    models: Mapping[str, Sequence[Sequence[Mapping[str, Any]]]],
    path: PathLike,
    *,
    x: str = "step",
    xlabel: str = "training step",
    chance: float | None = None,
) -> Path:
    """Meta-validation curves of several 2-task models on the same measures: one panel per entry of
    :data:`FORGETTING_MEASURES` (2 × 2), each recomputed from the logged in-context terms
    (:func:`forgetting_measures`), so an ACL model and its no-ACL twin are drawn on one scale — which
    their own ``val_objective`` curves are not.

    Drawn, per model (one colour): each run (e.g. each training seed) as a thin line and the mean over
    its runs, at the ``x`` values all of them log, as a thick line, labelled with the number of runs;
    ``chance`` (a fraction, e.g. ``1 / n_way``) dashed in every panel; one y scale for all panels.

    Args:
        models: model label → the ``metrics.jsonl`` records of each of its runs.
        path: output PNG (written atomically).
        x: the record field on the x axis (``"step"`` or ``"minutes"``).
        xlabel: its axis label.
        chance: chance accuracy as a fraction; None → no line.

    Returns:
        ``Path(path)``.

    Raises:
        ValueError: no model or a model without runs; a run whose log has no record with ``x`` and a
            complete task order of in-context terms; runs that log different task orders (one domain
            pair in both orders vs one order only), whose measures would not be the same quantity.
    """
    if not models or any(len(runs) == 0 for runs in models.values()):
        given = {label: len(runs) for label, runs in models.items()}
        raise ValueError(f"models: expected at least one model with at least one run, given {given} runs")
    drawn: dict[str, list[dict[str, dict[float, float]]]] = {}
    orders: dict[str, int] = {}
    for label, runs in models.items():
        drawn[label] = []
        for i, records in enumerate(runs):
            curves, n = _measure_curves(records, x, f"models[{label!r}][{i}]")
            drawn[label].append(curves)
            orders[f"{label} run {i}"] = n
    if len(set(orders.values())) > 1:
        raise ValueError(f"models: the runs log different task orders, so their measures differ: {orders}")
    fig = new_figure(figsize=(10.0, 7.2), layout="constrained")
    axes = fig.subplots(2, 2, sharex=True, sharey=True).reshape(-1)
    for ax, (title, _) in zip(axes, FORGETTING_MEASURES, strict=True):
        for c, (label, runs) in enumerate(drawn.items()):
            colour = f"C{c}"
            for curves in runs:
                pts = sorted(curves[title].items())
                ax.plot(
                    [a for a, _ in pts], [100.0 * b for _, b in pts], color=colour, linewidth=0.8, alpha=0.4
                )
            common = sorted(set.intersection(*(set(curves[title]) for curves in runs)))
            mean = [100.0 * sum(curves[title][a] for curves in runs) / len(runs) for a in common]
            what = f"mean of {len(runs)} runs (thin: each)" if len(runs) > 1 else "one run"
            ax.plot(common, mean, color=colour, linewidth=2.2, label=f"{label}: {what}")
        if chance is not None:
            ax.axhline(100.0 * chance, color="gray", linestyle="--", linewidth=1.0, label="chance")
        ax.set_title(title, fontsize=10)
        ax.grid(alpha=0.3)
    for ax in axes[::2]:
        ax.set_ylabel("meta-validation accuracy (%)")
    for ax in axes[2:]:
        ax.set_xlabel(xlabel)
    axes[0].legend(fontsize=8, loc="lower right")
    n = next(iter(orders.values()))
    fig.suptitle(
        "the same measures for every model, from the logged in-context terms"
        + (" (mean of both task orders)" if n > 1 else ""),
        fontsize=11,
    )
    return atomic_save_figure(fig, path)
