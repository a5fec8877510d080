"""Report pieces every recipe uses (the run header lines, :func:`save_evaluation`, bar and curve
plots, Markdown tables) and the ACL run's report (``runs/<name>/plots/*.png`` and ``report.md``).

Input of :func:`write_report` is the ``results.json`` dict written by the ACL evaluation (all
accuracies are fractions in [0, 1]; the report shows percentages)::

    {"run":        {"preset", "run_dir", "steps", "train_minutes", "command", "stage"?, "sources"?},
     "fewshot":    {"dataset", "n_way", "k_shot", "episodes", "accuracy", "ci95"},
     "forgetting": {"n_way", "k_shot", "episodes", "task_a", "task_b", "table": TABLE,
                    "pairs"?: [{"task_a", "task_b", "table": TABLE}, ...]},
     "split":      {"<benchmark>/<scenario>": SUMMARY},
     "long_span":  {"dataset", "n_way", "k_shot", "runs", "scenario", "tasks": {"<T>": SUMMARY}}}

    TABLE   = {"A|A" | "B|A->B" | "A|A->B" | "B|B" | "A|B->A" | "B|B->A": {"mean", "ci95"}}
    SUMMARY = {"R", "R_std", "ACC", "BWT", "forgetting", "learning_accuracy" ({"mean", "std"}),
               "runs", "k_shot", "task_names", "chance", "scenario", "num_tasks"?}

Forgetting-table keys read "evaluated task | tasks learned, in order": ``"A|A->B"`` is the accuracy on
task A after learning A then B (the in-context forgetting measure, Irie et al. 2025, §4.1). With
``pairs`` (one entry per unordered pair of meta-test domains, same-domain pairs included) the report
shows the paper's table, one row per ordered domain pair (:func:`forgetting_rows`); without it, the
single-pair layout of ``table``. Split scenarios are ``domain``, ``class`` and ``class-2task``; their
paper-layout table (ACL paper Table 3) is :func:`split_table`. ``long_span`` is the domain-incremental
protocol with 5/10/20 tasks (:func:`long_span_table`, next to the ACL paper's Split-Omniglot numbers).
Every top-level section is optional. Plots use matplotlib's object API with the Agg canvas (no
pyplot, no global backend switch), so this module is safe to import anywhere.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from fastweights.io import atomic_save_figure, atomic_write_json, atomic_write_text, read_jsonl

__all__ = [
    "OMNIGLOT_REFERENCE",
    "SPLIT_BENCHMARKS",
    "SPLIT_COLUMNS",
    "ForgettingRow",
    "forgetting_rows",
    "forgetting_table",
    "long_span_table",
    "md_table",
    "plot_accuracy_matrix",
    "plot_bars",
    "plot_forgetting",
    "plot_forgetting_rows",
    "plot_learning_curves",
    "plot_long_span",
    "run_header",
    "save_evaluation",
    "split_table",
    "write_report",
]

PathLike = str | os.PathLike[str]

# (key, evaluated task, tasks learned) for the two task orders of the 2-task forgetting protocol.
FORGETTING_ORDERS: tuple[tuple[str, tuple[tuple[str, str, str], ...]], ...] = (
    ("A→B", (("A|A", "A", "A"), ("B|A->B", "B", "A→B"), ("A|A->B", "A", "A→B"))),
    ("B→A", (("B|B", "B", "B"), ("A|B->A", "A", "B→A"), ("B|B->A", "B", "B→A"))),
)
_BAR_ROLES = ("first task, after learning it", "second task, after both", "first task, after both")
_BAR_COLORS = ("#4C72B0", "#55A868", "#C44E52")


# ----------------------------------------------------------------------------------------------- helpers
def _as_float(x: Any) -> float:
    """None → NaN; numbers → float."""
    return math.nan if x is None else float(x)


def _pct(x: Any, digits: int = 2) -> str:
    """Fraction → percent string (``0.61 → '61.00'``); None/NaN → '—'."""
    v = _as_float(x)
    return "—" if not math.isfinite(v) else f"{100.0 * v:.{digits}f}"


def _pm(mean: Any, spread: Any, digits: int = 2) -> str:
    """``'61.00 ± 1.20'`` from fractions; the spread is omitted when missing."""
    if spread is None or not math.isfinite(_as_float(spread)):
        return _pct(mean, digits)
    return f"{_pct(mean, digits)} ± {_pct(spread, digits)}"


def _slug(name: str) -> str:
    return re.sub(r"[^a-z0-9._-]+", "_", name.lower()).strip("_") or "unnamed"


def _md_cell(x: Any) -> str:
    """Escape a value for a markdown table cell."""
    return str(x).replace("|", "\\|").replace("\n", " ")


def md_table(header: Sequence[Any], rows: Sequence[Sequence[Any]]) -> list[str]:
    """Lines of a Markdown table (cells formatted as in the reports; ``|`` escaped)."""
    out = ["| " + " | ".join(_md_cell(h) for h in header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in rows]
    return out


def _matrix(R: Any, name: str = "R") -> np.ndarray:
    """Nested lists (None = not measured) → float array [T, T]."""
    try:
        arr = np.array(R, dtype=np.float64)
    except (TypeError, ValueError) as e:
        raise ValueError(f"{name}: expected a square matrix of numbers/None, given {R!r:.80}") from e
    if arr.ndim != 2 or arr.shape[0] != arr.shape[1] or arr.shape[0] == 0:
        raise ValueError(f"{name}: expected a non-empty square 2-D matrix [T, T], given shape {arr.shape}")
    return arr


def _task_names(task_names: Sequence[str] | None, T: int) -> list[str]:
    if task_names is None:
        return [str(j + 1) for j in range(T)]
    names = [str(n) for n in task_names]
    if len(names) != T:
        raise ValueError(f"task_names: expected {T} names (one per task of R), given {len(names)}")
    return names


# ------------------------------------------------------------------------------------------ paper tables
class ForgettingRow(NamedTuple):
    """One row of the in-context forgetting table: tasks A then B from the domains of ``order``.

    ``first`` = acc(A|A), ``second`` = acc(B|A→B), ``first_after`` = acc(A|A→B), each a
    ``{"mean", "ci95"}`` dict of fractions (ACL paper §4.1, Tables 1/2)."""

    order: str
    first: Mapping[str, Any]
    second: Mapping[str, Any]
    first_after: Mapping[str, Any]

    @property
    def drop(self) -> float:
        """acc(A|A) − acc(A|A→B) as a fraction (positive = forgetting)."""
        return _as_float(self.first["mean"]) - _as_float(self.first_after["mean"])


def _pair_rows(task_a: str, task_b: str, table: Any, where: str) -> list[ForgettingRow]:
    """The rows of one unordered domain pair: A→B, and B→A unless both domains are the same."""
    if not isinstance(table, Mapping):
        raise ValueError(f"{where}['table']: expected a dict, given {type(table).__name__}")
    orders = FORGETTING_ORDERS if task_a != task_b else FORGETTING_ORDERS[:1]
    rows = []
    for (_, bars), (first, second) in zip(orders, ((task_a, task_b), (task_b, task_a)), strict=False):
        if any(k not in table for k, _, _ in bars):
            raise ValueError(
                f"{where}['table']: expected keys {[k for k, _, _ in bars]}, given {sorted(table)}"
            )
        stats = [_entry(table[k], f"{where}['table'][{k!r}]") for k, _, _ in bars]
        rows.append(ForgettingRow(f"{first} → {second}", *stats))
    return rows


def forgetting_rows(results: Mapping[str, Any]) -> list[ForgettingRow]:
    """The paper's in-context forgetting table of an ACL ``results`` dict, one row per ordered pair of
    meta-test domains ("A-domain → B-domain"; a same-domain pair gives only its A→B row), in the order
    of ``results["forgetting"]["pairs"]`` (each pair A→B, then B→A). Results without ``pairs`` (one
    pair: ``task_a``, ``task_b``, ``table``) give that pair's rows. Used by the report and ``compare``.

    Raises:
        ValueError: naming the key, if ``forgetting``, a pair, its domains or a needed table entry is
            missing or malformed.
    """
    fg = results.get("forgetting")
    if not isinstance(fg, Mapping):
        raise ValueError(f"results['forgetting']: expected a dict, given {type(fg).__name__}")
    if "pairs" not in fg:
        return _pair_rows(
            str(fg.get("task_a", "A")), str(fg.get("task_b", "B")), fg.get("table"), "results['forgetting']"
        )
    pairs = fg["pairs"]
    if not isinstance(pairs, Sequence) or isinstance(pairs, str) or not pairs:
        raise ValueError(f"results['forgetting']['pairs']: expected a non-empty list, given {pairs!r:.80}")
    rows = []
    for i, pair in enumerate(pairs):
        where = f"results['forgetting']['pairs'][{i}]"
        if not isinstance(pair, Mapping) or any(
            not isinstance(pair.get(k), str) for k in ("task_a", "task_b")
        ):
            raise ValueError(
                f"{where}: expected a dict with string keys 'task_a' and 'task_b', given {pair!r:.80}"
            )
        rows += _pair_rows(pair["task_a"], pair["task_b"], pair.get("table"), where)
    return rows


def forgetting_table(rows: Sequence[ForgettingRow]) -> tuple[list[str], list[list[str]]]:
    """Header and formatted rows (mean ± 95% CI in %, drop in points) of :func:`forgetting_rows`."""
    header = ["tasks A → B", "acc(A|A) (%)", "acc(B|A→B) (%)", "acc(A|A→B) (%)", "drop A|A − A|A→B (points)"]
    body = [
        [
            r.order,
            *(_pm(e["mean"], e.get("ci95")) for e in (r.first, r.second, r.first_after)),
            _pct(r.drop),
        ]
        for r in rows
    ]
    return header, body


# (scenario kind, number of tasks, column) of the ACL paper's Split-MNIST table (Table 3), in its order.
SPLIT_COLUMNS: tuple[tuple[str, int, str], ...] = (
    ("domain", 5, "5-task domain-incremental"),
    ("class", 2, "2-task class-incremental"),
    ("class", 5, "5-task class-incremental"),
)
SPLIT_BENCHMARKS = ("Split-MNIST", "Split-FashionMNIST", "Split-Digits", "Split-Emoji")  # row order
_SCENARIO_KINDS = {"domain": "domain", "class": "class", "class-2task": "class"}


def _split_cell(key: str, res: Any) -> tuple[str, str, int]:
    """``(benchmark, scenario kind, number of tasks)`` of the split entry ``key``."""
    where = f"results['split'][{key!r}]"
    if not isinstance(res, Mapping) or "R" not in res:
        given = sorted(res) if isinstance(res, Mapping) else type(res).__name__
        raise ValueError(f"{where}: expected key 'R', given {given}")
    benchmark, _, scenario = key.rpartition("/")
    if not benchmark:
        benchmark, scenario = key, str(res.get("scenario", ""))
    if scenario not in _SCENARIO_KINDS:
        raise ValueError(f"{where}: expected the scenario {sorted(_SCENARIO_KINDS)}, given {scenario!r}")
    T = _matrix(res["R"], name=f"{where}['R']").shape[0]
    if res.get("num_tasks", T) != T:
        raise ValueError(f"{where}['num_tasks']: expected {T} (the size of R), given {res['num_tasks']!r}")
    if scenario == "class-2task" and T != 2:
        raise ValueError(f"{where}['R']: expected 2 tasks for the scenario 'class-2task', given {T}")
    return benchmark, _SCENARIO_KINDS[scenario], T


def split_table(results: Mapping[str, Any]) -> tuple[list[str], list[list[str]]]:
    """The split benchmarks in the ACL paper's Table 3 layout: rows = benchmarks (Split-MNIST,
    Split-FashionMNIST, Split-Digits, Split-Emoji, then others in the order of ``results["split"]``),
    columns = 5-task domain-incremental, 2-task class-incremental, 5-task class-incremental (then any
    other task count present); cells = ACC mean ± std over runs (%), "—" where not evaluated. Used by
    the report and ``compare``.

    Raises:
        ValueError: naming the key, if ``split`` is not a dict, an entry lacks ``R``/``ACC`` or has an
            unknown scenario or a task count other than its ``R``'s, or two entries fill one cell.
    """
    split = results.get("split")
    if not isinstance(split, Mapping):
        raise ValueError(f"results['split']: expected a dict, given {type(split).__name__}")
    cells: dict[tuple[str, str, int], tuple[str, str]] = {}
    for key, res in split.items():
        cell = _split_cell(str(key), res)
        if cell in cells:
            raise ValueError(f"results['split'][{key!r}]: the same cell as {cells[cell][0]!r}")
        acc = _entry(res.get("ACC"), f"results['split'][{key!r}]['ACC']")
        cells[cell] = (str(key), _pm(acc["mean"], acc.get("std")))
    present = list(dict.fromkeys(b for b, _, _ in cells))
    benchmarks = [b for b in SPLIT_BENCHMARKS if b in present] + [
        b for b in present if b not in SPLIT_BENCHMARKS
    ]
    columns = list(SPLIT_COLUMNS)
    extra = sorted({(k, T) for _, k, T in cells} - {(k, T) for k, T, _ in SPLIT_COLUMNS})
    columns += [(k, T, f"{T}-task {k}-incremental") for k, T in extra]
    header = ["benchmark", *(label for _, _, label in columns)]
    rows = [[b, *(cells.get((b, k, T), ("", "—"))[1] for k, T, _ in columns)] for b in benchmarks]
    return header, rows


# The ACL paper's text (shared/spec/srwm_acl.md §5.7): Split-Omniglot domain-incremental with the Split-MNIST
# ACL model, ACC mean ± std (%/100) by number of tasks.
OMNIGLOT_REFERENCE: dict[int, tuple[float, float]] = {
    5: (0.923, 0.004),
    10: (0.820, 0.004),
    20: (0.676, 0.011),
}


def _long_span_tasks(results: Mapping[str, Any]) -> list[tuple[int, Mapping[str, Any]]]:
    """``results["long_span"]["tasks"]`` as ``(T, summary)`` sorted by ``T``, checked."""
    ls = results.get("long_span")
    if not isinstance(ls, Mapping):
        raise ValueError(f"results['long_span']: expected a dict, given {type(ls).__name__}")
    tasks = ls.get("tasks")
    if not isinstance(tasks, Mapping) or not tasks:
        raise ValueError(f"results['long_span']['tasks']: expected a non-empty dict, given {tasks!r:.80}")
    out = []
    for key, res in tasks.items():
        where = f"results['long_span']['tasks'][{key!r}]"
        try:
            T = int(key)
        except (TypeError, ValueError):
            T = 0
        if T < 1 or str(T) != str(key).strip():
            raise ValueError(
                f"results['long_span']['tasks']: expected positive task counts as keys, given {key!r}"
            )
        _entry(res.get("ACC") if isinstance(res, Mapping) else res, f"{where}['ACC']")
        if "R" in res and _matrix(res["R"], name=f"{where}['R']").shape[0] != T:
            raise ValueError(f"{where}['R']: expected a {T}×{T} matrix, given {len(res['R'])} rows")
        out.append((T, res))
    return sorted(out, key=lambda x: x[0])


def long_span_table(results: Mapping[str, Any]) -> tuple[list[str], list[list[str]]]:
    """The long-span domain-incremental table: one row per number of tasks with ACC and BWT ± std over
    runs (%) and the ACL paper's Split-Omniglot ACC (92.3 ± 0.4 / 82.0 ± 0.4 / 67.6 ± 1.1 at 5 / 10 /
    20 tasks, from the paper's text; another data set, "—" for other task counts).

    Raises:
        ValueError: naming the key, if ``long_span`` or ``tasks`` is missing, a key is not a task
            count, or an entry lacks ``ACC`` or has an ``R`` of another size.
    """
    rows = []
    for T, res in _long_span_tasks(results):
        bwt = res.get("BWT")
        ref = OMNIGLOT_REFERENCE.get(T)
        rows.append(
            [
                str(T),
                _pm(res["ACC"]["mean"], res["ACC"].get("std")),
                _pm(bwt["mean"], bwt.get("std")) if isinstance(bwt, Mapping) and "mean" in bwt else "—",
                _pm(*ref, digits=1) if ref else "—",
            ]
        )
    dataset = results["long_span"].get("dataset", "this run")
    header = [
        "tasks",
        f"ACC (%), {dataset}",
        "BWT (%)",
        "ACL paper: Split-Omniglot ACC (%) (a different data set)",
    ]
    return header, rows


# ------------------------------------------------------------------------------------------------- plots
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
    arr = _matrix(R)
    T = arr.shape[0]
    names = _task_names(task_names, T)
    pct = 100.0 * arr
    size = max(3.5, 0.75 * T + 2.0)
    fig = Figure(figsize=(size + 1.0, size))
    ax = fig.subplots()
    im = ax.imshow(np.ma.masked_invalid(pct), vmin=0.0, vmax=100.0, cmap="viridis")
    fig.colorbar(im, ax=ax, label="accuracy (%)", fraction=0.046, pad=0.04)
    for i in range(T):
        for j in range(T):
            v = pct[i, j]
            if math.isfinite(v):
                ax.text(
                    j,
                    i,
                    f"{v:.1f}",
                    ha="center",
                    va="center",
                    fontsize=9,
                    color="black" if v > 60.0 else "white",
                )
    ax.set_xticks(range(T), names)
    ax.set_yticks(range(T), [f"after {n}" for n in names])
    ax.set_xlabel("evaluated on task j")
    ax.set_ylabel("after learning task i")
    ax.set_title(title)
    return atomic_save_figure(fig, path)


def _entry(entry: Any, where: str) -> Mapping[str, Any]:
    """A ``{"mean", ...}`` entry of a results table, or a ValueError naming ``where``."""
    if not isinstance(entry, Mapping) or "mean" not in entry:
        given = sorted(entry) if isinstance(entry, Mapping) else type(entry).__name__
        raise ValueError(f"{where}: expected a dict with key 'mean', given {given}")
    return entry


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
            mean = 100.0 * _as_float(entry["mean"])
            ci = entry.get("ci95")
            x = g + (b - 1) * width
            ticks.append((x, tick))
            ax.bar(
                x,
                mean,
                width,
                yerr=None if ci is None else [100.0 * _as_float(ci)],
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
        table: key → ``{"mean": fraction, "ci95": fraction}`` (see module docstring for the keys).
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
                (k.replace("->", "→"), _entry(table[k], f"table[{k!r}]") if k in table else None)
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
    (:func:`forgetting_rows`) with acc(A|A), acc(B|A→B) and acc(A|A→B) ± 95% CI.

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
        ValueError: as :func:`long_span_table` for a malformed section.
    """
    tasks = _long_span_tasks({"long_span": long_span})
    with_r = [(T, res) for T, res in tasks if "R" in res]
    fig = Figure(figsize=(11.0 if with_r else 6.0, 4.2))
    axes = fig.subplots(1, 2 if with_r else 1, squeeze=False)[0]
    ax = axes[0]
    ts = [T for T, _ in tasks]
    acc = [100.0 * _as_float(res["ACC"]["mean"]) for _, res in tasks]
    std = [100.0 * _as_float(res["ACC"].get("std", 0.0)) for _, res in tasks]
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
            final = 100.0 * _matrix(res["R"])[-1]
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


# ------------------------------------------------------------------------------------- every recipe
def command_markdown(command: str) -> str:
    """A recorded command (possibly several lines, e.g. a resumed run) as Markdown."""
    if "\n" not in command.strip():
        return f"`{command.strip()}`"
    return "\n\n```\n" + command.strip() + "\n```\n"


def run_header(run: Mapping[str, Any], details: str = "") -> list[str]:
    """The two run lines of every recipe's report from ``results["run"]`` (see
    :func:`fastweights.recipes.common.run_summary`): ``- trained: <steps> steps: <command>`` and
    ``- evaluated: the <checkpoint> checkpoint (step, minutes of training), in <minutes> min<details>``."""
    return [
        f"- trained: {run.get('trained_steps', run['steps'])} steps: {command_markdown(run['command'])}",
        f"- evaluated: the {run['checkpoint']} checkpoint (step {run['steps']}, "
        f"{run['train_minutes']:.1f} min of training), in {run.get('eval_minutes', 0.0):.2f} min{details}",
    ]


def save_evaluation(
    results: dict[str, Any],
    run_dir: PathLike,
    out_dir: PathLike | None,
    write: Any,
) -> dict[str, Any]:
    """Finish an evaluation of ``run_dir``: into ``out_dir`` (default ``run_dir``, created) copy the
    training log ``metrics.jsonl`` (for the learning curve) when it is another folder, write
    ``results.json`` atomically and call ``write(results, out_dir)`` (the recipe's report writer:
    ``report.md`` + ``plots/``). Returns ``results``."""
    run_dir = Path(run_dir)
    out = Path(out_dir) if out_dir is not None else run_dir
    out.mkdir(parents=True, exist_ok=True)
    if out.resolve() != run_dir.resolve() and (run_dir / "metrics.jsonl").exists():
        atomic_write_text(out / "metrics.jsonl", (run_dir / "metrics.jsonl").read_text())
    atomic_write_json(out / "results.json", results)
    write(results, out)
    return results


def plot_bars(
    values: Mapping[str, Mapping[str, tuple[float, float]]], path: PathLike, *, ylabel: str, title: str
) -> Path:
    """Grouped bars with error bars: ``values[group][series] = (value, error)`` (one group per model),
    into the PNG ``path`` (written atomically); returns ``path``."""
    fig = Figure(figsize=(max(5.0, 1.2 * len(values) + 2.0), 3.8))
    ax = fig.subplots()
    groups = list(values)
    series = list(dict.fromkeys(s for g in values.values() for s in g))
    width = 0.8 / max(1, len(series))
    for i, name in enumerate(series):
        xs = [j + (i - (len(series) - 1) / 2) * width for j in range(len(groups))]
        v = [values[g].get(name, (math.nan, 0.0)) for g in groups]
        ax.bar(xs, [a for a, _ in v], width, yerr=[e for _, e in v], capsize=3, label=name, color=f"C{i}")
    ax.set_xticks(range(len(groups)), groups)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(axis="y", alpha=0.3)
    if len(series) > 1:
        ax.legend(fontsize=8)
    return atomic_save_figure(fig, Path(path))


# --------------------------------------------------------------------------------------- ACL report
def _learning_curves_from_log(log: Path) -> dict[str, list[tuple[float, float]]]:
    """Group ``metrics.jsonl`` records with numeric ``minutes`` and ``val_acc`` by ``variant``."""
    curves: dict[str, list[tuple[float, float]]] = {}
    for rec in read_jsonl(log):
        m, a = rec.get("minutes"), rec.get("val_acc")
        if not all(isinstance(v, int | float) and not isinstance(v, bool) for v in (m, a)):
            continue
        if not (math.isfinite(m) and math.isfinite(a)):
            continue
        curves.setdefault(str(rec.get("variant", "this run")), []).append((float(m), float(a)))
    return curves


def _section_run(run: Mapping[str, Any]) -> list[str]:
    lines = ["## Run", ""]
    rows = [(k, run[k]) for k in ("preset", "run_dir") if run.get(k) is not None]
    if run.get("stage") is not None:
        rows.append(("training stage", run["stage"]))
    sources = run.get("sources")
    if sources is not None:
        if isinstance(sources, str) or not isinstance(sources, Sequence):
            raise ValueError(
                f"results['run']['sources']: expected a list of domain names, given {sources!r:.80}"
            )
        rows.append(("meta-training domains", ", ".join(str(x) for x in sources) or "—"))
    if run.get("steps") is not None:
        rows.append(("training step of the evaluated checkpoint", run["steps"]))
    if run.get("train_minutes") is not None:
        rows.append(("training time at that checkpoint (min)", f"{float(run['train_minutes']):.1f}"))
    rows += [
        (k, f"{v:.2f}" if isinstance(v, float) else v)
        for k, v in run.items()
        if k not in ("preset", "run_dir", "steps", "train_minutes", "command", "stage", "sources")
    ]
    if rows:
        lines += md_table(("field", "value"), rows) + [""]
    if run.get("command"):
        lines += ["Command:", "", "```", str(run["command"]), "```", ""]
    return lines


def _section_fewshot(fs: Mapping[str, Any]) -> list[str]:
    if "accuracy" not in fs:
        raise ValueError(f"results['fewshot']: expected key 'accuracy', given {sorted(fs)}")
    desc = f"{fs.get('n_way', '?')}-way {fs.get('k_shot', '?')}-shot"
    return [
        "## Few-shot accuracy",
        "",
        f"{fs.get('dataset', 'test set')}, {desc}, {fs.get('episodes', '?')} episodes: "
        f"**{_pm(fs['accuracy'], fs.get('ci95'))} %** (mean ± 95% CI).",
        "",
    ]


def _section_forgetting_pairs(results: Mapping[str, Any], plots: Path) -> tuple[list[str], Path]:
    """The paper's layout: one row per ordered pair of meta-test domains, and its bar plot."""
    fg = results["forgetting"]
    rows = forgetting_rows(results)
    n_way = fg.get("n_way")
    chance = 1.0 / float(n_way) if n_way else None
    lines = [
        "## In-context forgetting (2 tasks)",
        "",
        f"Task A from the first domain, then task B from the second: two {n_way or '?'}-way "
        f"{fg.get('k_shot', '?')}-shot tasks with disjoint classes (same domain: disjoint classes of it), "
        f"{fg.get('episodes', '?')} episodes per domain pair, both orders on the same episodes. "
        "acc(A|A→B) is task A's accuracy after learning A then B (the forgetting measure); accuracy in %, "
        "mean ± 95% CI; drop = acc(A|A) − acc(A|A→B) in points"
        + (f"; chance = {100.0 * chance:.1f} %." if chance else "."),
        "",
    ]
    lines += md_table(*forgetting_table(rows)) + [""]
    png = plot_forgetting_rows(rows, plots / "forgetting.png", "in-context forgetting", chance=chance)
    lines += [f"![in-context forgetting per domain order](plots/{png.name})", ""]
    return lines, png


def _section_forgetting(fg: Mapping[str, Any], plots: Path) -> tuple[list[str], Path | None]:
    """The single-pair layout (results without ``pairs``): both task orders of one table."""
    table = fg.get("table")
    if not isinstance(table, Mapping):
        raise ValueError(f"results['forgetting']: expected a 'table' dict, given {type(table).__name__}")
    n_way = fg.get("n_way")
    chance = 1.0 / float(n_way) if n_way else None
    lines = ["## In-context forgetting (2 tasks)", ""]
    lines.append(
        f"Tasks A and B: two {n_way or '?'}-way tasks with disjoint classes, drawn from "
        f"{fg.get('task_a', '?')} (A) and {fg.get('task_b', '?')} (B); the B→A rows use the same episodes in "
        f"the other order. {n_way or '?'}-way "
        f"{fg.get('k_shot', '?')}-shot, {fg.get('episodes', '?')} episodes; accuracy in %, mean ± 95% CI"
        + (f"; chance = {100.0 * chance:.1f} %." if chance else ".")
    )
    lines.append("")
    rows = []
    for order, bars in FORGETTING_ORDERS:
        for key, task, learned in bars:
            if key in table:
                e = table[key]
                rows.append((order, task, learned, _pm(e.get("mean"), e.get("ci95"))))
    lines += md_table(("order", "evaluated on", "after learning", "accuracy (%)"), rows) + [""]
    drops = []
    for first, after in (("A|A", "A|A->B"), ("B|B", "B|B->A")):
        if first in table and after in table:
            d = _as_float(table[first].get("mean")) - _as_float(table[after].get("mean"))
            drops.append(f"{first[0]}: {100.0 * d:.2f} points")
    if drops:
        lines += ["Drop on the first task after learning the second: " + ", ".join(drops) + ".", ""]
    png = None
    if any(k in table for _, bars in FORGETTING_ORDERS for k, _, _ in bars):
        png = plot_forgetting(table, plots / "forgetting.png", "in-context forgetting", chance=chance)
        lines += [f"![in-context forgetting](plots/{png.name})", ""]
    return lines, png


def _section_split(name: str, res: Mapping[str, Any], plots: Path) -> tuple[list[str], Path]:
    if "R" not in res:
        raise ValueError(f"results['split'][{name!r}]: expected key 'R', given {sorted(res)}")
    R = _matrix(res["R"], name=f"results['split'][{name!r}]['R']")
    T = R.shape[0]
    names = _task_names(res.get("task_names"), T)
    lines = [f"### {name}", ""]
    info = [f"{T} tasks"]
    if res.get("k_shot") is not None:
        info.append(f"{res['k_shot']} demonstrations per class")
    if res.get("runs") is not None:
        n = int(res["runs"])
        info.append(f"{n} runs (mean ± population std over runs)" if n > 1 else "1 run (no spread)")
    if res.get("chance") is not None:
        info.append(f"chance = {_pct(res['chance'], 1)} %")
    lines += ["; ".join(info) + ".", ""]
    rows = []
    for key, label in (
        ("ACC", "ACC (average accuracy after the last task)"),
        ("BWT", "BWT (backward transfer)"),
        ("forgetting", "forgetting (Chaudhry et al. 2018)"),
        ("learning_accuracy", "learning accuracy (R[j, j])"),
    ):
        m = res.get(key)
        if isinstance(m, Mapping) and "mean" in m:
            rows.append((label, _pm(m["mean"], m.get("std"))))
    if rows:
        lines += md_table(("metric", "value (%)"), rows) + [""]
    lines += ["Mean accuracy matrix (%), row i = after learning task i, column j = task j:", ""]
    lines += md_table(
        ["after \\ task", *names],
        [[f"after {names[i]}", *(_pct(R[i, j]) for j in range(T))] for i in range(T)],
    )
    lines.append("")
    png = plot_accuracy_matrix(R, names, plots / f"accuracy_matrix_{_slug(name)}.png", title=name)
    lines += [f"![{name} accuracy matrix](plots/{png.name})", ""]
    return lines, png


def _section_split_table(results: Mapping[str, Any]) -> list[str]:
    """The ACL paper's Table 3 layout of every split entry."""
    runs = sorted(
        {int(r["runs"]) for r in results["split"].values() if isinstance(r, Mapping) and "runs" in r}
    )
    k_shot = sorted(
        {int(r["k_shot"]) for r in results["split"].values() if isinstance(r, Mapping) and "k_shot" in r}
    )
    info = "ACC (%) after the last task, mean ± population std over runs"
    if runs:
        info += f" ({'/'.join(map(str, runs))} runs"
        info += f", {'/'.join(map(str, k_shot))} demonstrations per class)" if k_shot else ")"
    lines = ["Paper layout (ACL paper Table 3): " + info + "; — = not evaluated.", ""]
    return lines + md_table(*split_table(results)) + [""]


def _section_long_span(results: Mapping[str, Any], plots: Path) -> tuple[list[str], Path]:
    ls = results["long_span"]
    header, rows = long_span_table(results)
    desc = (
        f"{ls.get('dataset', '?')}, {ls.get('scenario', 'domain')}-incremental, {ls.get('n_way', '?')}-way "
        f"tasks with {ls.get('k_shot', '?')} demonstrations per class, {ls.get('runs', '?')} runs: ACC (%) "
        "after the last task, mean ± population std over runs. The paper's column is Split-Omniglot "
        "(numbers from the ACL paper's text, its Split-MNIST ACL model), **a different data set**: a "
        "reference for the trend with the number of tasks, not the same measurement."
    )
    lines = ["## Long task sequences", "", desc, ""] + md_table(header, rows) + [""]
    png = plot_long_span(ls, plots / "long_span.png")
    lines += [f"![accuracy vs number of tasks](plots/{png.name})", ""]
    return lines, png


def write_report(results: Mapping[str, Any], run_dir: PathLike) -> Path:
    """Write ``run_dir/plots/*.png`` and ``run_dir/report.md`` from an ACL ``results.json`` dict.

    Plots: one accuracy-matrix heatmap per split benchmark (``accuracy_matrix_<slug>.png``), the
    forgetting bars (``forgetting.png``) and, when ``run_dir/metrics.jsonl`` has records with numeric
    ``minutes`` and ``val_acc`` keys, a learning curve (``learning_curve.png``; one line per
    ``variant`` value when records carry one). The markdown lists run info, few-shot accuracy ± 95% CI,
    the forgetting table, and per split benchmark ACC/BWT/forgetting ± std and the mean accuracy
    matrix, all in percent with two decimals, and links the PNGs by relative path. Absent sections
    are skipped. All files are written atomically.

    Args:
        results: the results dict (see module docstring).
        run_dir: the run folder (created if missing).

    Returns:
        Path of ``report.md``.

    Raises:
        ValueError: if ``results`` is not a dict or a present section lacks its essential data
            (few-shot ``accuracy``, forgetting ``table``, split ``R``).
    """
    if not isinstance(results, Mapping):
        raise ValueError(f"results: expected a dict (results.json), given {type(results).__name__}")
    run_dir = Path(run_dir)
    plots = run_dir / "plots"
    preset = (results.get("run") or {}).get("preset")
    lines = [f"# ACL run report{f' ({preset})' if preset else ''}", ""]

    if results.get("run"):
        lines += _section_run(results["run"])
    if results.get("fewshot"):
        lines += _section_fewshot(results["fewshot"])
    if results.get("forgetting"):
        fg = results["forgetting"]
        if not isinstance(fg, Mapping):
            raise ValueError(f"results['forgetting']: expected a dict, given {type(fg).__name__}")
        if "pairs" in fg:
            lines += _section_forgetting_pairs(results, plots)[0]
        else:
            lines += _section_forgetting(fg, plots)[0]
    if results.get("split"):
        lines += ["## Split benchmarks", ""] + _section_split_table(results)
        for name, res in results["split"].items():
            lines += _section_split(name, res, plots)[0]
    if results.get("long_span"):
        lines += _section_long_span(results, plots)[0]

    log = run_dir / "metrics.jsonl"
    if log.is_file():
        curves = _learning_curves_from_log(log)
        if curves:
            chance = None
            fs = results.get("fewshot") or {}
            if fs.get("n_way"):
                chance = 1.0 / float(fs["n_way"])
            png = plot_learning_curves(
                curves,
                plots / "learning_curve.png",
                ylabel="meta-validation accuracy A|A (fraction)",
                chance=chance,
            )
            lines += ["## Learning curve", "", f"![learning curve](plots/{png.name})", ""]

    if len(lines) == 2:
        lines += ["No results.", ""]
    out = run_dir / "report.md"
    atomic_write_text(out, "\n".join(lines))
    return out
