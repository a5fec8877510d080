"""Reports of the continual-learning baselines: ``report.md`` + ``plots/`` of one ``cl-baselines run``,
and the tables of ``cl-baselines compare`` (baselines and ACL models side by side, one table per
scenario in the layout of the ACL paper's Split-MNIST table, Irie et al. 2025, Table 3).

Hsu et al. 2018's Split-MNIST numbers (the ACL paper's baseline rows) are shown as a separate, labelled
reference block — never mixed with the numbers measured here.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from fastweights.io import PathLike
from fastweights.recipes.cl_baselines.config import SCENARIO_VARIANTS
from fastweights.recipes.plots import plot_accuracy_matrices, plot_bars, plot_learning_curves
from fastweights.recipes.reporting import benchmark_notes, md_table, pm, unseen_flagged, write_report_files

__all__ = [
    "HSU_2018",
    "HSU_SOURCE",
    "VARIANT_TITLES",
    "BUDGET_TITLES",
    "method_title",
    "seen_task_curve",
    "variant_chance",
    "method_rows",
    "reference_block",
    "write_report",
]

VARIANT_TITLES = {
    "domain": "5-task domain-incremental",
    "class-2task": "2-task class-incremental",
    "class": "5-task class-incremental",
}
BUDGET_TITLES = {"fewshot": "few-shot budget", "full": "full budget"}
HSU_SOURCE = (
    "Hsu, Liu, Ramasamy & Kira 2018, 'Re-evaluating Continual Learning Scenarios: A Categorization and "
    "Case for Strong Baselines' (NeurIPS Continual Learning Workshop), Table 2: Split-MNIST, MLP 2 × 400, "
    "full training data; quoted by the ACL paper (Irie et al. 2025, Table 3)."
)
#: variant -> [(method, ACC %)] as published (class-incremental: the regularisation methods as a range)
HSU_2018: dict[str, list[tuple[str, str]]] = {
    "domain": [
        ("Adam", "55.2"),
        ("SGD", "63.2"),
        ("L2", "66.0"),
        ("EWC", "58.9"),
        ("online EWC", "57.3"),
        ("SI", "64.8"),
        ("MAS", "68.6"),
        ("LwF", "71.0"),
        ("naive rehearsal", "95.2"),
        ("offline (upper bound)", "98.6"),
    ],
    "class": [
        ("every regularisation method (Adam, SGD, L2, EWC, online EWC, SI, MAS, LwF)", "≈ 19.5–24.2"),
        ("naive rehearsal", "90.8"),
        ("offline (upper bound)", "97.5"),
    ],
}
_METHOD_TITLES = {
    "sgd": "fine-tune (SGD)",
    "adam": "fine-tune (Adam)",
    "l2": "L2",
    "ewc": "EWC",
    "online_ewc": "online EWC",
    "si": "SI",
    "mas": "MAS",
    "lwf": "LwF",
    "replay": "replay",
    "agem": "A-GEM",
    "joint": "joint (upper bound)",
}


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", text.lower()).strip("_")


def method_title(method: str) -> str:
    """The report's name of a method (``"online_ewc"`` → ``"online EWC"``)."""
    return _METHOD_TITLES.get(method, method)


def seen_task_curve(R: Any) -> list[float]:
    """Average accuracy on the tasks learned so far after each task: ``mean_{j<=i} R[i, j]``, ``i = 0..T-1``
    (the accuracy-vs-task curve of the continual-learning literature)."""
    arr = np.asarray(R, dtype=np.float64)
    return [float(arr[i, : i + 1].mean()) for i in range(arr.shape[0])]


def variant_chance(variant: str) -> float | None:
    """Chance accuracy of a scenario variant's single head: 1/2 (domain-incremental: the tasks share two
    labels), 1/(2 × tasks) (class-incremental: every class of the sequence); None for an unknown one."""
    if variant not in SCENARIO_VARIANTS:
        return None
    scenario, tasks = SCENARIO_VARIANTS[variant]
    return 1.0 / (2 if scenario == "domain" else 2 * tasks)


def _split_key(key: str) -> tuple[str, str, str]:
    bench, variant, budget = key.split("/")
    return bench, variant, budget


def method_rows(cells: Mapping[str, Any], variant: str, budget: str) -> tuple[list[str], list[list[str]]]:
    """Header and rows (one per method) of ACC ± std and BWT ± std (percent) per benchmark for one
    scenario variant and budget of a run's ``results["cells"]``."""
    benches = [
        b for b in dict.fromkeys(_split_key(k)[0] for k in cells) if f"{b}/{variant}/{budget}" in cells
    ]
    methods = list(dict.fromkeys(m for b in benches for m in cells[f"{b}/{variant}/{budget}"]))
    header = ["method"] + [f"{b} {what}" for b in benches for what in ("ACC", "BWT")]
    rows = []
    for m in methods:
        row = [method_title(m)]
        for b in benches:
            cell = cells[f"{b}/{variant}/{budget}"].get(m)
            if cell is None:
                row += ["—", "—"]
                continue
            t = cell["test"]
            row += [pm(t["ACC"]["mean"], t["ACC"]["std"], 1), pm(t["BWT"]["mean"], t["BWT"]["std"], 1)]
        rows.append(row)
    return header, rows


def reference_block(variant: str) -> list[str]:
    """Markdown lines of Hsu et al. 2018's Split-MNIST numbers for a variant (empty for 2-task CI)."""
    ref = HSU_2018.get(variant)
    if not ref:
        return []
    return [
        f"Reference (not measured here): {HSU_SOURCE}",
        "",
        *md_table(["method", "Split-MNIST ACC (%)"], [list(r) for r in ref]),
        "",
    ]


def _settings_rows(cells: Mapping[str, Any]) -> list[list[str]]:
    rows = []
    for key, row in cells.items():
        for m, cell in row.items():
            s = cell["settings"]
            hp = ", ".join(
                f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in cell["hparams"].items()
            )
            searched = f"{len(cell['search'])} points" if cell["search"] else "fixed"
            rows.append(
                [
                    key,
                    method_title(m),
                    f"{s['optimizer']} lr={s['lr']:g} epochs={s['epochs']} batch={s['batch_size']}"
                    + (f" min_steps={s['min_steps']}" if s.get("min_steps") else ""),
                    hp or "—",
                    searched,
                ]
            )
    return rows


def _plots(results: Mapping[str, Any], plots: Path) -> list[str]:
    cells = results["cells"]
    lines = []
    variants = list(dict.fromkeys(_split_key(k)[1] for k in cells))
    budgets = list(dict.fromkeys(_split_key(k)[2] for k in cells))
    for variant in variants:
        for budget in budgets:
            keys = [k for k in cells if _split_key(k)[1:] == (variant, budget)]
            if not keys:
                continue
            bars = {
                method_title(m): {
                    _split_key(k)[0]: (
                        100 * cells[k][m]["test"]["ACC"]["mean"],
                        100 * cells[k][m]["test"]["ACC"]["std"],
                    )
                    for k in keys
                    if m in cells[k]
                }
                for m in dict.fromkeys(m for k in keys for m in cells[k])
            }
            name = f"acc_{_slug(variant)}_{budget}.png"
            title = f"{VARIANT_TITLES.get(variant, variant)}, {BUDGET_TITLES.get(budget, budget)}"
            chance = variant_chance(variant)
            chance_pct = None if chance is None else 100.0 * chance
            plot_bars(
                bars, plots / name, ylabel="ACC after the last task (%)", title=title, chance=chance_pct
            )
            lines += [f"![{title}](plots/{name})", ""]
            for k in keys:
                curves = {
                    method_title(m): [
                        (i + 1, 100 * v) for i, v in enumerate(seen_task_curve(cells[k][m]["test"]["R"]))
                    ]
                    for m in cells[k]
                }
                mname = f"matrices_{_slug(k)}.png"
                plot_accuracy_matrices(
                    {method_title(m): cells[k][m]["test"]["R"] for m in cells[k]},
                    plots / mname,
                    title=f"{_split_key(k)[0]}, {title}: mean accuracy matrices R[i, j]",
                    chance=chance,
                    flag_unseen=unseen_flagged(SCENARIO_VARIANTS.get(variant, (variant, 0))[0]),
                )
                lines += [f"![{k} accuracy matrices](plots/{mname})", ""]
                cname = f"curve_{_slug(k)}.png"
                plot_learning_curves(
                    curves,
                    plots / cname,
                    xlabel="tasks learned",
                    ylabel="mean accuracy on tasks seen (%)",
                    title=f"{_split_key(k)[0]}: {title}",
                    chance=chance_pct,
                )
                lines += [f"![{k}](plots/{cname})", ""]
    return lines


def write_report(results: Mapping[str, Any], run_dir: PathLike) -> Path:
    """``report.md`` and ``plots/`` (ACC bars per method and scenario, each cell's mean accuracy matrices,
    accuracy-vs-task curves) of a
    ``cl-baselines run``'s results, written atomically into ``run_dir``; returns the report's path."""
    run_dir = Path(run_dir)
    cfg, cells = results["config"], results["cells"]
    lines = [
        f"# Continual-learning baselines ({cfg['name']})",
        "",
        f"Learner: {cfg['learner']} (single head, no task identity); {cfg['runs']} runs per cell (mean ± std "
        f"over runs); few-shot budget = the {cfg['data']['k_shot']} demonstrations per class an in-context "
        "learner sees (run r: the r-th block), full budget = each task's whole training split. Settings and "
        f"hyper-parameters chosen on validation streams carved from training data (runs per grid point: "
        f"{cfg['search']['runs']}, {100 * cfg['search']['val_fraction']:g}% of each class's training images "
        "as queries). ACC, BWT in %.",
        "",
        *(line for note in benchmark_notes(list(cells)) for line in (note, "")),
    ]
    variants = list(dict.fromkeys(_split_key(k)[1] for k in cells))
    budgets = list(dict.fromkeys(_split_key(k)[2] for k in cells))
    for variant in variants:
        lines += [f"## {VARIANT_TITLES.get(variant, variant)}", ""]
        for budget in budgets:
            header, rows = method_rows(cells, variant, budget)
            if rows:
                lines += [f"### {BUDGET_TITLES.get(budget, budget)}", "", *md_table(header, rows), ""]
        lines += reference_block(variant)
    lines += [
        "## Chosen settings",
        "",
        *md_table(["cell", "method", "training", "hyper-parameters", "search"], _settings_rows(cells)),
        "",
        "## Plots",
        "",
        "Dashed lines: chance (1/2 in domain-incremental scenarios, 1 / the number of classes in "
        "class-incremental ones). In the accuracy matrices the cells above the diagonal (hatched) are tasks "
        "not learned yet (domain-incremental: answered with the shared labels, transfer or guessing; "
        "class-incremental: classes not shown yet, near 0 expected), and cells below chance are outlined "
        "in red (above the diagonal only in domain-incremental scenarios).",
        "",
        *_plots(results, run_dir / "plots"),
    ]
    return write_report_files(run_dir / "report.md", "\n".join(lines))
