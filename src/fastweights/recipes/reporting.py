"""Report pieces every recipe uses: values of a results dict as the reports show them (fractions as
percent strings, ``0.61 → '61.00'``, ``'61.00 ± 1.20'``; ``{"mean", ...}`` table entries; accuracy
matrices ``R[i, j]`` = accuracy on task ``j`` after learning tasks ``0..i``, Irie et al. 2025, §4, and
their task labels), Markdown tables (:func:`md_table`), the run header lines (:func:`run_header`), what
a report says beside an accuracy matrix (:func:`short_task_labels` for the axes with a legend of the
full names, :func:`matrix_cells` / :func:`matrix_notes`: cells above the diagonal = tasks not learned
yet, cells below chance; :func:`benchmark_notes`, e.g. Split-Digits is not MNIST),
:func:`write_report_files` (``report.md`` + its one-page ``report.html``, plots embedded:
:func:`markdown_to_html`) and :func:`save_evaluation` (``results.json`` + report + training-log copy). A
malformed value raises a one-line ValueError naming its key.
"""

from __future__ import annotations

import base64
import html
import math
import re
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from fastweights.io import PathLike, atomic_write_json, atomic_write_text

__all__ = [
    "BENCHMARK_NOTES",
    "MAX_LABEL_CHARS",
    "as_float",
    "below_chance_cells",
    "benchmark_notes",
    "markdown_to_html",
    "matrix_cells",
    "matrix_notes",
    "readable_name",
    "short_task_labels",
    "unseen_flagged",
    "write_html_report",
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


# --- what a report says beside an accuracy matrix: short task labels with a legend of the full names,
# the cells above the diagonal (tasks not learned yet), the cells below chance, benchmark notes. The
# plots (fastweights.recipes.plots) use the same helpers, so a flagged cell is flagged in both.

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


# --- the one-page HTML of a report: report.md as report.html beside it, every plot embedded as a base64
# data: URI (no external file, style sheet, font or script). The converter covers the Markdown the
# reports write: # headings, paragraphs, pipe tables (\| escapes), -/* lists, fenced code blocks,
# images, links, **bold**, *italics* and `code` spans; anything else is shown as text (escaped).

_STYLE = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; max-width: 1100px; margin: 2em auto;
       padding: 0 1em; line-height: 1.45; color: #222; }
table { border-collapse: collapse; margin: 0.8em 0; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: left; vertical-align: top; }
th { background: #f0f0f0; }
tr:nth-child(even) td { background: #fafafa; }
img { max-width: 100%; height: auto; display: block; margin: 0.6em 0; }
pre { background: #f5f5f5; padding: 0.6em; overflow-x: auto; white-space: pre-wrap; }
code { font-family: ui-monospace, "SFMono-Regular", Menlo, monospace; font-size: 0.9em; }
h1, h2, h3 { margin-top: 1.4em; }
"""
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
_RULE = re.compile(r"^\|?(\s*:?-{3,}:?\s*\|)+\s*:?-*:?\s*$")
_ITEM = re.compile(r"^\s*[-*]\s+(.*)$")
_IMAGE = re.compile(r"!\[([^\]]*)\]\(([^)\s]+)\)")
_LINK = re.compile(r"\[([^\]]+)\]\(([^)\s]+)\)")
_MIME = {
    ".png": "image/png",
    ".jpg": "image/jpeg",
    ".jpeg": "image/jpeg",
    ".gif": "image/gif",
    ".svg": "image/svg+xml",
}


def _image(alt: str, src: str, base: Path) -> str:
    """``<img>`` with the file ``base/src`` as a data URI; the alt text in italics when it cannot be read
    (a missing plot, a remote address)."""
    path = base / html.unescape(src)
    mime = _MIME.get(path.suffix.lower())
    if mime is None or "://" in src or not path.is_file():
        return f"<em>[{alt}: {src} not embedded]</em>"
    data = base64.b64encode(path.read_bytes()).decode("ascii")
    return f'<img alt="{alt}" src="data:{mime};base64,{data}">'


def _inline(text: str, base: Path) -> str:
    """Inline Markdown → HTML: code spans verbatim (escaped), then images, links, bold, italics."""
    out = []
    for k, part in enumerate(re.split(r"(`[^`]+`)", text)):
        if k % 2:
            out.append(f"<code>{html.escape(part[1:-1])}</code>")
            continue
        s = html.escape(part, quote=False)
        s = _IMAGE.sub(lambda m: _image(m.group(1), m.group(2), base), s)
        s = _LINK.sub(
            lambda m: (
                f'<a href="{m.group(2)}">{m.group(1)}</a>'
                if m.group(2).startswith("#")
                else f"{m.group(1)} ({m.group(2)})"
            ),
            s,
        )
        s = re.sub(r"\*\*(.+?)\*\*", r"<strong>\1</strong>", s)
        s = re.sub(r"(?<![\w*])\*(?=\S)(.+?)(?<=\S)\*(?![\w*])", r"<em>\1</em>", s)
        out.append(s)
    return "".join(out)


def _cells(line: str) -> list[str]:
    """The cells of a pipe-table row (``\\|`` is a literal ``|``)."""
    body = line.strip()
    body = body[1:] if body.startswith("|") else body
    body = body[:-1] if body.endswith("|") and not body.endswith("\\|") else body
    return [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", body)]


def _blocks(lines: list[str], base: Path) -> Iterator[str]:
    """The HTML blocks of Markdown ``lines``."""
    i, para = 0, []

    def flush() -> Iterator[str]:
        if para:
            yield f"<p>{_inline(' '.join(para), base)}</p>"
            para.clear()

    while i < len(lines):
        line = lines[i]
        if line.strip().startswith("```"):
            yield from flush()
            end = next(
                (k for k in range(i + 1, len(lines)) if lines[k].strip().startswith("```")), len(lines)
            )
            yield f"<pre><code>{html.escape(chr(10).join(lines[i + 1 : end]))}</code></pre>"
            i = end + 1
        elif not line.strip():
            yield from flush()
            i += 1
        elif m := _HEADING.match(line):
            yield from flush()
            n = len(m.group(1))
            yield f"<h{n}>{_inline(m.group(2), base)}</h{n}>"
            i += 1
        elif line.lstrip().startswith("|") and i + 1 < len(lines) and _RULE.match(lines[i + 1].strip()):
            yield from flush()
            head = "".join(f"<th>{_inline(c, base)}</th>" for c in _cells(line))
            rows, i = [], i + 2
            while i < len(lines) and lines[i].lstrip().startswith("|"):
                rows.append(
                    "<tr>" + "".join(f"<td>{_inline(c, base)}</td>" for c in _cells(lines[i])) + "</tr>"
                )
                i += 1
            yield f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"
        elif _ITEM.match(line):
            yield from flush()
            items = []
            while i < len(lines) and (m := _ITEM.match(lines[i])):
                items.append(f"<li>{_inline(m.group(1), base)}</li>")
                i += 1
            yield f"<ul>{''.join(items)}</ul>"
        else:
            para.append(line.strip())
            i += 1
    yield from flush()


def markdown_to_html(text: str, base: PathLike, title: str | None = None) -> str:
    """A complete HTML page of the Markdown ``text``; images are read from paths relative to ``base``
    and embedded. ``title`` (default: the first heading) names the page."""
    lines = text.splitlines()
    if title is None:
        first = next((m.group(2) for ln in lines if (m := _HEADING.match(ln))), "report")
        title = first
    body = "\n".join(_blocks(lines, Path(base)))
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f"<title>{html.escape(title)}</title>\n<style>{_STYLE}</style>\n</head>\n<body>\n{body}\n</body>\n</html>\n"
    )


def write_html_report(md_path: PathLike) -> Path:
    """Write ``report.html`` beside the Markdown report ``md_path`` (same stem, plots embedded),
    atomically; returns its path."""
    md_path = Path(md_path)
    out = md_path.with_suffix(".html")
    atomic_write_text(out, markdown_to_html(md_path.read_text(encoding="utf-8"), md_path.parent))
    return out


def write_report_files(path: PathLike, text: str) -> Path:
    """Write the Markdown report ``path`` (``report.md``) and, beside it, its one-page HTML version
    (``report.html``: the same text with every linked plot embedded;
    :func:`write_html_report`), both atomically; returns ``Path(path)``."""
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
