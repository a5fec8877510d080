"""The ACL paper's table layouts of an ACL ``results`` dict (the ``results.json`` of
:mod:`fastweights.recipes.reporting`), used by the report and ``compare``; cells are formatted strings in
percent.

- In-context forgetting (Irie et al. 2025, §4.1, Tables 1/2): :func:`forgetting_rows` gives one
  :class:`ForgettingRow` per ordered pair of meta-test domains, :func:`forgetting_table` formats them.
  Keys of a forgetting table read "evaluated task | tasks learned, in order": ``"A|A->B"`` is the
  accuracy on task A after learning A then B (the forgetting measure).
- Split benchmarks (Table 3): :func:`split_table`, rows :data:`SPLIT_BENCHMARKS`, columns
  :data:`SPLIT_COLUMNS`; scenarios ``domain``, ``class`` and ``class-2task``.
- Long task sequences: :func:`long_span_table`, the domain-incremental protocol with 5/10/20 tasks next
  to the paper's Split-Omniglot numbers (:data:`OMNIGLOT_REFERENCE`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from fastweights.recipes.reporting import as_float, as_matrix, mean_entry, pct, pm

__all__ = [
    "FORGETTING_ORDERS",
    "OMNIGLOT_REFERENCE",
    "SPLIT_BENCHMARKS",
    "SPLIT_COLUMNS",
    "ForgettingRow",
    "forgetting_rows",
    "forgetting_table",
    "long_span_table",
    "long_span_tasks",
    "split_table",
]

# (key, evaluated task, tasks learned) for the two task orders of the 2-task forgetting protocol.
FORGETTING_ORDERS: tuple[tuple[str, tuple[tuple[str, str, str], ...]], ...] = (
    ("A→B", (("A|A", "A", "A"), ("B|A->B", "B", "A→B"), ("A|A->B", "A", "A→B"))),
    ("B→A", (("B|B", "B", "B"), ("A|B->A", "A", "B→A"), ("B|B->A", "B", "B→A"))),
)


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
        return as_float(self.first["mean"]) - as_float(self.first_after["mean"])


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
        stats = [mean_entry(table[k], f"{where}['table'][{k!r}]") for k, _, _ in bars]
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
            *(pm(e["mean"], e.get("ci95")) for e in (r.first, r.second, r.first_after)),
            pct(r.drop),
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
    T = as_matrix(res["R"], name=f"{where}['R']").shape[0]
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
        acc = mean_entry(res.get("ACC"), f"results['split'][{key!r}]['ACC']")
        cells[cell] = (str(key), pm(acc["mean"], acc.get("std")))
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


# Stated in the ACL paper's text (Irie et al. 2025): Split-Omniglot domain-incremental with the Split-MNIST
# ACL model, ACC mean ± std (%/100) by number of tasks.
OMNIGLOT_REFERENCE: dict[int, tuple[float, float]] = {
    5: (0.923, 0.004),
    10: (0.820, 0.004),
    20: (0.676, 0.011),
}


def long_span_tasks(results: Mapping[str, Any]) -> list[tuple[int, Mapping[str, Any]]]:
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
        mean_entry(res.get("ACC") if isinstance(res, Mapping) else res, f"{where}['ACC']")
        if "R" in res and as_matrix(res["R"], name=f"{where}['R']").shape[0] != T:
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
    for T, res in long_span_tasks(results):
        bwt = res.get("BWT")
        ref = OMNIGLOT_REFERENCE.get(T)
        rows.append(
            [
                str(T),
                pm(res["ACC"]["mean"], res["ACC"].get("std")),
                pm(bwt["mean"], bwt.get("std")) if isinstance(bwt, Mapping) and "mean" in bwt else "—",
                pm(*ref, digits=1) if ref else "—",
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
