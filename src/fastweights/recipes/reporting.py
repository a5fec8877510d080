"""Report pieces every recipe uses: values of a results dict as the reports show them (fractions as
percent strings, ``0.61 → '61.00'``, ``'61.00 ± 1.20'``; ``{"mean", ...}`` table entries; accuracy
matrices ``R[i, j]`` = accuracy on task ``j`` after learning tasks ``0..i``, Irie et al. 2025, §4, and
their task labels), Markdown tables (:func:`md_table`), the run header lines (:func:`run_header`),
:func:`write_report_files` (``report.md`` + its one-page ``report.html``) and :func:`save_evaluation`
(``results.json`` + report + training-log copy). A malformed value raises a
one-line ValueError naming its key.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from fastweights.io import PathLike, atomic_write_json, atomic_write_text

__all__ = [
    "as_float",
    "as_matrix",
    "command_markdown",
    "mean_entry",
    "md_table",
    "pct",
    "pm",
    "run_header",
    "save_evaluation",
    "task_labels",
    "write_report_files",
]


def as_float(x: Any) -> float:
    """None → NaN; numbers → float."""
    return math.nan if x is None else float(x)


def pct(x: Any, digits: int = 2) -> str:
    """Fraction → percent string (``0.61 → '61.00'``); None/NaN → '—'."""
    v = as_float(x)
    return "—" if not math.isfinite(v) else f"{100.0 * v:.{digits}f}"


def pm(mean: Any, spread: Any, digits: int = 2) -> str:
    """``'61.00 ± 1.20'`` from fractions; the spread is omitted when missing."""
    if spread is None or not math.isfinite(as_float(spread)):
        return pct(mean, digits)
    return f"{pct(mean, digits)} ± {pct(spread, digits)}"


def mean_entry(entry: Any, where: str) -> Mapping[str, Any]:
    """``entry`` if it is a ``{"mean", ...}`` entry of a results table.

    Raises:
        ValueError: naming ``where``, if ``entry`` is not a dict with key ``"mean"``.
    """
    if not isinstance(entry, Mapping) or "mean" not in entry:
        given = sorted(entry) if isinstance(entry, Mapping) else type(entry).__name__
        raise ValueError(f"{where}: expected a dict with key 'mean', given {given}")
    return entry


def as_matrix(R: Any, name: str = "R") -> np.ndarray:
    """An accuracy matrix ``R`` (nested lists or array, None = not measured) as a float64 array
    ``[T, T]`` (None → NaN).

    Raises:
        ValueError: naming ``name``, if ``R`` is not a non-empty square matrix of numbers/None.
    """
    try:
        arr = np.array(R, dtype=np.float64)
    except (TypeError, ValueError) as e:
        raise ValueError(f"{name}: expected a square matrix of numbers/None, given {R!r:.80}") from e
    if arr.ndim != 2 or arr.shape[0] != arr.shape[1] or arr.shape[0] == 0:
        raise ValueError(f"{name}: expected a non-empty square 2-D matrix [T, T], given shape {arr.shape}")
    return arr


def task_labels(task_names: Sequence[str] | None, T: int) -> list[str]:
    """The ``T`` task labels of an accuracy matrix: ``task_names`` as strings, ``None`` → ``"1".."T"``.

    Raises:
        ValueError: if ``task_names`` does not have ``T`` names.
    """
    if task_names is None:
        return [str(j + 1) for j in range(T)]
    names = [str(n) for n in task_names]
    if len(names) != T:
        raise ValueError(f"task_names: expected {T} names (one per task of R), given {len(names)}")
    return names


def _md_cell(x: Any) -> str:
    """Escape a value for a markdown table cell."""
    return str(x).replace("|", "\\|").replace("\n", " ")


def md_table(header: Sequence[Any], rows: Sequence[Sequence[Any]]) -> list[str]:
    """Lines of a Markdown table (cells formatted as in the reports; ``|`` escaped)."""
    out = ["| " + " | ".join(_md_cell(h) for h in header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in rows]
    return out


def command_markdown(command: str) -> str:
    """A recorded command (possibly several lines, e.g. a resumed run) as Markdown."""
    if "\n" not in command.strip():
        return f"`{command.strip()}`"
    return "\n\n```\n" + command.strip() + "\n```\n"


def run_header(run: Mapping[str, Any], details: str = "") -> list[str]:
    """The two run lines of every recipe's report from ``results["run"]`` (see
    :func:`fastweights.recipes.run.run_summary`): ``- trained: <steps> steps: <command>`` and
    ``- evaluated: the <checkpoint> checkpoint (step, minutes of training), in <minutes> min<details>``."""
    return [
        f"- trained: {run.get('trained_steps', run['steps'])} steps: {command_markdown(run['command'])}",
        f"- evaluated: the {run['checkpoint']} checkpoint (step {run['steps']}, "
        f"{run['train_minutes']:.1f} min of training), in {run.get('eval_minutes', 0.0):.2f} min{details}",
    ]


def write_report_files(path: PathLike, text: str) -> Path:
    """Write the Markdown report ``path`` (``report.md``) and, beside it, its one-page HTML version
    (``report.html``: the same text with every linked plot embedded;
    :func:`fastweights.recipes.html_report.write_html_report`), both atomically; returns ``Path(path)``."""
    from fastweights.recipes.html_report import write_html_report

    atomic_write_text(path, text)
    write_html_report(path)
    return Path(path)


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
