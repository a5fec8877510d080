"""What a report says beside an accuracy matrix ``R[i, j]`` (accuracy on task ``j`` after learning tasks
``0..i``): short task labels for the axes and tables with a legend of the full names, which cells lie
above the diagonal (tasks not learned yet) and what they mean in the scenario, which cells are below
chance, and notes on the benchmarks (e.g. Split-Digits is not MNIST).

The plots (:func:`fastweights.recipes.plots.plot_accuracy_matrix`) and the Markdown of the reports use
the same helpers, so a flagged cell is flagged in both.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Any

import numpy as np

from fastweights.recipes.reporting import as_float, md_table, pct

__all__ = [
    "BENCHMARK_NOTES",
    "MAX_LABEL_CHARS",
    "below_chance_cells",
    "benchmark_notes",
    "matrix_cells",
    "matrix_notes",
    "readable_name",
    "short_task_labels",
    "unseen_flagged",
]

#: task names up to this many characters label the axes as they are; longer ones become T1..Tn
MAX_LABEL_CHARS = 6
#: benchmark name → what a reader could mistake it for
BENCHMARK_NOTES = {
    "Split-Digits": (
        "Split-Digits is scikit-learn's 8×8 handwritten digits (1,797 images, "
        "`sklearn.datasets.load_digits`) enlarged bilinearly to the model's input size — not MNIST."
    ),
}
_CODE_POINTS = re.compile(r"\s*\(U\+[0-9A-Fa-f]{4,6}(?:\s+U\+[0-9A-Fa-f]{4,6})*\)")


def short_task_labels(names: Sequence[str], max_chars: int = MAX_LABEL_CHARS) -> list[str]:
    """Axis labels of the tasks: ``names`` themselves when every one has at most ``max_chars``
    characters (e.g. Split-Digits' ``"0/1"``), otherwise ``"T1".."Tn"`` (e.g. Split-Emoji's class names,
    which need a legend: :func:`matrix_notes`)."""
    if all(len(str(n)) <= max_chars for n in names):
        return [str(n) for n in names]
    return [f"T{j + 1}" for j in range(len(names))]


def readable_name(name: str, max_chars: int = 60) -> str:
    """A task name for a legend inside a figure: code points such as ``" (U+1F4E9)"`` dropped, ``"/"``
    spaced, cut to ``max_chars`` characters (``…``)."""
    text = _CODE_POINTS.sub("", str(name)).replace("/", " / ")
    text = re.sub(r"\s+", " ", text).strip()
    return text if len(text) <= max_chars else text[: max_chars - 1].rstrip() + "…"


def below_chance_cells(R: Any, chance: float | None, *, include_unseen: bool) -> list[tuple[int, int]]:
    """The cells ``(i, j)`` of ``R`` (fractions; NaN = not measured) whose value is below ``chance``, row
    by row: the learned tasks (``j <= i``) and, with ``include_unseen``, the tasks not learned yet too
    (``j > i``: meaningful when the tasks share their labels, as in domain-incremental learning). None
    for ``chance`` → no cell."""
    if chance is None or not math.isfinite(as_float(chance)):
        return []
    arr = np.asarray(R, dtype=np.float64)
    T = arr.shape[0]
    return [
        (i, j)
        for i in range(T)
        for j in range(T)
        if (include_unseen or j <= i) and math.isfinite(arr[i, j]) and arr[i, j] < float(chance)
    ]


def _scenario_of(name: str, scenario: str | None) -> str:
    """``scenario`` or the part of a split entry name after its last ``/`` (``"Split-MNIST/domain"``)."""
    return str(scenario) if scenario else name.rsplit("/", 1)[-1]


def unseen_flagged(scenario: str) -> bool:
    """Whether below-chance cells above the diagonal are flagged: in domain-incremental learning the
    tasks share their labels (chance applies before a task is learned); in class-incremental learning a
    task's classes have not been shown yet (near 0 is expected)."""
    return scenario == "domain"


def matrix_cells(R: Any, labels: Sequence[str], flagged: Sequence[tuple[int, int]]) -> list[list[str]]:
    """The rows of an accuracy matrix as a Markdown table shows them: percent with two decimals, ``—``
    not measured, ``(…)`` above the diagonal (task not learned yet), ``↓`` after a flagged cell (below
    chance)."""
    arr = np.asarray(R, dtype=np.float64)
    T = arr.shape[0]
    marked = set(flagged)
    rows = []
    for i in range(T):
        row = [f"after {labels[i]}"]
        for j in range(T):
            cell = pct(arr[i, j])
            if cell != "—" and j > i:
                cell = f"({cell})"
            row.append(cell + (" ↓" if (i, j) in marked else ""))
        rows.append(row)
    return rows


def matrix_notes(
    name: str,
    R: Any,
    names: Sequence[str],
    *,
    chance: float | None,
    scenario: str | None = None,
) -> list[str]:
    """Markdown lines under an accuracy matrix: the legend of short task labels (when the names are
    long), what the cells above the diagonal mean in the scenario (``scenario`` or taken from ``name``,
    e.g. ``"Split-Emoji/domain"``), and the cells below ``chance`` (listed, or "none")."""
    labels = short_task_labels(names)
    lines: list[str] = []
    if labels != [str(n) for n in names]:
        lines += ["Task labels:", ""]
        lines += md_table(("label", "classes of the task"), list(zip(labels, names, strict=True))) + [""]
    scen = _scenario_of(name, scenario)
    if scen == "domain":
        above = (
            "Cells above the diagonal (in parentheses; hatched in the plot) are tasks not learned yet: the "
            "tasks share their labels, so the model answers them anyway, and a value there is transfer from "
            "the tasks learned so far or guessing, not memory"
        )
    elif scen.startswith("class"):
        above = (
            "Cells above the diagonal (in parentheses; hatched in the plot) are tasks whose classes have not "
            "been shown yet: values near 0 are expected there"
        )
    else:
        above = "Cells above the diagonal (in parentheses; hatched in the plot) are tasks not learned yet"
    lines += [above + "; ACC, BWT and forgetting use only the cells on and below the diagonal.", ""]
    if chance is None or not math.isfinite(as_float(chance)):
        return lines
    include_unseen = unseen_flagged(scen)
    cells = below_chance_cells(R, chance, include_unseen=include_unseen)
    arr = np.asarray(R, dtype=np.float64)
    where = "" if include_unseen else " among the learned tasks (on or below the diagonal)"
    if not cells:
        lines += [f"No cell is below chance ({pct(chance, 1)} %){where}.", ""]
        return lines
    listed = ", ".join(
        f"task {labels[j]} after {labels[i]}: {pct(arr[i, j])} %" + (" (not learned yet)" if j > i else "")
        for i, j in cells
    )
    lines += [
        f"**Below chance** ({pct(chance, 1)} %){where}, marked ↓ here and outlined in red in the plot: "
        f"{listed}.",
        "",
    ]
    return lines


def benchmark_notes(names: Sequence[str]) -> list[str]:
    """Markdown lines of :data:`BENCHMARK_NOTES` for the benchmarks among ``names`` (split entry names
    such as ``"Split-Digits/domain"`` or benchmark names), each once."""
    benches = dict.fromkeys(str(n).split("/", 1)[0] for n in names)
    return [f"Note: {BENCHMARK_NOTES[b]}" for b in benches if b in BENCHMARK_NOTES]
