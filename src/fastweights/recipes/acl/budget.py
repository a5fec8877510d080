"""``fastweights acl budget``: budget curves — the split-benchmark accuracy of evaluated ACL runs against
their meta-training steps, one line per setting (the meta-training domains, and the sequence layer and
training stage where runs differ in them), mean ± 95% CI over the training seeds at each budget. A run
started from another run's checkpoint (``train.init_from``, e.g. the 5-task meta-finetuning) counts that
run's steps in its budget.

This is the evidence of whether more meta-training compute closes a gap (e.g. to a classic baseline):
it reads each run's ``results.json`` (written by ``acl train --eval``, ``acl eval`` or ``acl compare``)
and trains nothing. The metrics are each split benchmark's ACC after the last task per scenario
(``Split-Digits/domain``: 5-task domain-incremental; ``…/class-2task``, ``…/class``: 2- and 5-task
class-incremental) and the meta-validation objective the checkpoint was selected on (ACL paper, Irie,
Csordás & Schmidhuber, TMLR 2025, §4.3 for the split benchmarks; the CI is Student t over seeds,
:func:`fastweights.cl.metrics.t_ci95`).

Outputs, in ``out_dir`` (replacing only files an earlier ``acl budget`` wrote there, unless ``force``):
``budget.json``, ``budget.md`` (one table per metric) and ``plots/budget_<benchmark>.png`` (one figure
per benchmark, one panel per scenario, the chance level dashed).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from fastweights.cl.metrics import t_ci95
from fastweights.io import atomic_write_json, atomic_write_text, read_json, read_jsonl
from fastweights.recipes.reporting import md_table
from fastweights.train.run_folder import OutputClaims, run_lock

__all__ = ["budget_report", "read_budget_run"]

SELECTION_KEY = "selection objective"  # the metric name of the meta-validation objective
_SCENARIOS = {
    "domain": "5-task domain-incr.",
    "class-2task": "2-task class-incr.",
    "class": "5-task class-incr.",
}


def read_budget_run(run_dir: Path) -> dict[str, Any]:
    """One evaluated ACL run: ``{"run_dir", "setting", "parts", "steps", "seed", "metrics", "chance"}``.

    ``parts`` are the meta-training domains joined by `` + `` (e.g. ``FontGlyphs + EmojiImages``), the
    sequence layer and the training stage (e.g. ``5-task meta-finetuning (domain-incremental)``);
    ``setting`` joins them (:func:`budget_report` keeps only the parts in which the runs differ).
    ``steps`` is the meta-training budget: the run's trained steps plus, for a run started from another
    run's checkpoint (``train.init_from``), that run's budget, recursively. ``seed`` is the training seed
    (None when the run's ``config.yaml`` does not say); ``metrics`` maps ``"<benchmark>/<scenario>"``
    and :data:`SELECTION_KEY` to fractions in [0, 1]; ``chance`` maps the split metrics to their chance
    level.

    Raises:
        FileNotFoundError: ``run_dir/results.json`` is missing (the run was not evaluated), or the run's
            ``train.init_from`` checkpoint has no run folder with a ``metrics.jsonl`` (naming both).
        ValueError: ``results.json`` is damaged or not an ACL run's results (naming the file and field).
    """
    path = Path(run_dir) / "results.json"
    res = read_json(path, "the results of an evaluated ACL run (`fastweights acl eval DIR`)")
    try:
        run = res["run"]
        steps = int(run["trained_steps"])
        sources = [str(s) for s in run["sources"]]
        parts = [" + ".join(sources), str(run["sequence_layer"]), str(run.get("stage", ""))]
        split = res["split"]
        metrics = {name: float(r["ACC"]["mean"]) for name, r in split.items()}
        chance = {name: float(r["chance"]) for name, r in split.items()}
    except (KeyError, TypeError, ValueError) as err:
        raise ValueError(
            f"{path}: expected an ACL run's results (run.trained_steps, run.sources, run.sequence_layer, "
            f"split.<benchmark>/<scenario>.ACC.mean and .chance), missing or malformed: {err}"
        ) from None
    selected = run.get("selected_on")
    if isinstance(selected, dict) and isinstance(selected.get("value"), (int, float)):
        metrics[SELECTION_KEY] = float(selected["value"])
    train = _train_config(Path(run_dir))
    return {
        "run_dir": str(run_dir),
        "setting": " · ".join(p for p in parts if p),
        "parts": parts,
        "steps": steps + _init_budget(Path(run_dir), train.get("init_from")),
        "seed": train.get("seed") if isinstance(train.get("seed"), int) else None,
        "metrics": metrics,
        "chance": chance,
    }


def _train_config(run_dir: Path) -> dict[str, Any]:
    """The ``train`` section of the run's ``config.yaml`` (empty when there is none to read)."""
    import yaml

    try:
        train = yaml.safe_load((run_dir / "config.yaml").read_text(encoding="utf-8"))["train"]
    except (OSError, TypeError, KeyError, yaml.YAMLError):
        return {}
    return train if isinstance(train, dict) else {}


def _init_budget(run_dir: Path, init_from: Any, depth: int = 0) -> int:
    """The meta-training steps behind ``init_from`` (a checkpoint in another run's ``checkpoints/``): the
    last step of that run's ``metrics.jsonl``, plus its own ``init_from``'s, recursively; 0 without one."""
    if not init_from or depth > 16:
        return 0
    ckpt = Path(str(init_from))
    source = ckpt.parent.parent if ckpt.parent.name == "checkpoints" else ckpt.parent
    log = source / "metrics.jsonl"
    if not log.is_file():
        raise FileNotFoundError(
            f"{run_dir}/config.yaml: train.init_from={init_from}: no {log}; the steps of the run a model "
            "starts from are part of its budget (run from the folder the path is relative to)"
        )
    records = [r for r in read_jsonl(log) if isinstance(r.get("step"), int)]
    own = records[-1]["step"] if records else 0
    return own + _init_budget(source, _train_config(source).get("init_from"), depth + 1)


def _shorten_settings(runs: list[dict[str, Any]]) -> None:
    """Keep in each run's setting only the parts in which the runs differ (the domains always)."""
    varying = [i == 0 or len({r["parts"][i] for r in runs}) > 1 for i in range(3)]
    for r in runs:
        r["setting"] = " · ".join(p for p, keep in zip(r["parts"], varying, strict=True) if keep and p)


def _aggregate(runs: list[dict[str, Any]]) -> dict[str, dict[str, dict[int, dict[str, Any]]]]:
    """``{metric: {setting: {steps: {"mean", "ci95", "values", "seeds", "runs"}}}}`` in percent."""
    cells: dict[str, dict[str, dict[int, list[dict[str, Any]]]]] = defaultdict(
        lambda: defaultdict(lambda: defaultdict(list))
    )
    for r in runs:
        for metric, value in r["metrics"].items():
            cells[metric][r["setting"]][r["steps"]].append({"value": 100 * value, **r})
    out: dict[str, dict[str, dict[int, dict[str, Any]]]] = {}
    for metric in sorted(cells, key=_metric_order):
        out[metric] = {}
        for setting, by_steps in cells[metric].items():
            out[metric][setting] = {}
            for steps in sorted(by_steps):
                group = by_steps[steps]
                mean, ci = t_ci95([g["value"] for g in group])
                out[metric][setting][steps] = {
                    "mean": mean,
                    "ci95": None if math.isnan(ci) else ci,
                    "values": [g["value"] for g in group],
                    "seeds": [g["seed"] for g in group],
                    "runs": [g["run_dir"] for g in group],
                }
    return out


def _metric_order(metric: str) -> tuple[int, str, int]:
    """The selection objective first, then by benchmark name and scenario (domain, 2-task, 5-task class)."""
    if metric == SELECTION_KEY:
        return (0, "", 0)
    bench, _, scenario = metric.rpartition("/")
    order = list(_SCENARIOS)
    return (1, bench, order.index(scenario) if scenario in order else len(order))


def _check_seeds(runs: list[dict[str, Any]]) -> None:
    """Two runs of one setting and budget must be different seeds (else one run was given twice)."""
    seen: dict[tuple[str, int, int], str] = {}
    for r in runs:
        if r["seed"] is None:
            continue
        key = (r["setting"], r["steps"], r["seed"])
        if key in seen:
            raise ValueError(
                f"run_dirs: {seen[key]} and {r['run_dir']} are the same setting, budget and seed "
                f"({r['setting']}, {r['steps']} steps, seed {r['seed']}); expected one run per seed"
            )
        seen[key] = r["run_dir"]


def _cell(c: dict[str, Any]) -> str:
    if c["ci95"] is None:
        return f"{c['mean']:.1f} (1 seed)"
    per = ", ".join(f"{v:.1f}" for v in c["values"])
    return f"{c['mean']:.1f} ± {c['ci95']:.1f} ({len(c['values'])} seeds: {per})"


def _budgets(by_setting: dict[str, dict[int, Any]]) -> list[int]:
    """The budgets (steps) measured for one metric, over every setting, ascending."""
    return sorted({n for cells in by_setting.values() for n in cells})


def _markdown(table: dict[str, Any], benches: list[str], command: str | None) -> str:
    lines = ["# ACL budget curves", ""]
    if command:
        lines += [f"Command: `{command}`", ""]
    lines += [
        "Accuracy (%) of each setting's best checkpoint (selected on meta-validation) after each "
        "meta-training budget (steps, those of the run a model started from included): mean ± 95% CI "
        "over the training seeds (Student t), the per-seed values in parentheses. Split benchmarks: ACC "
        "after the last task, averaged over the demonstration draws.",
        "",
    ]
    for metric, by_setting in table.items():
        budgets = _budgets(by_setting)
        header = ["setting", *[f"{s:,} steps" for s in budgets]]
        rows = [
            [setting, *[_cell(cells[s]) if s in cells else "—" for s in budgets]]
            for setting, cells in by_setting.items()
        ]
        lines += [f"## {_title(metric)}", "", *md_table(header, rows), ""]
    lines += ["## Plots", "", *[f"![{b}](plots/{_plot_name(b)})" for b in benches], ""]
    return "\n".join(lines)


def _title(metric: str) -> str:
    if metric == SELECTION_KEY:
        return "Selection objective (meta-validation)"
    bench, _, scenario = metric.rpartition("/")
    return f"{bench}, {_SCENARIOS.get(scenario, scenario)}"


def _plot_name(bench: str) -> str:
    return f"budget_{bench.lower().replace('-', '_')}.png"


def _plot(table: dict[str, Any], chance: dict[str, float], bench: str, path: Path) -> None:
    """One figure for ``bench``: a panel per scenario, accuracy vs steps (log x), one line per setting
    with the 95% CI over seeds as error bars, chance dashed."""
    from fastweights.io import atomic_save_figure
    from fastweights.recipes.plots import new_figure

    metrics = [m for m in table if m.rpartition("/")[0] == bench]
    fig = new_figure(figsize=(4.2 * len(metrics) + 1.0, 3.8), layout="constrained")
    axes = fig.subplots(1, len(metrics), squeeze=False)[0]
    for ax, metric in zip(axes, metrics, strict=True):
        for setting, cells in table[metric].items():
            steps = sorted(cells)
            ax.errorbar(
                steps,
                [cells[s]["mean"] for s in steps],
                yerr=[cells[s]["ci95"] or 0.0 for s in steps],
                marker="o",
                capsize=4,
                label=setting,
            )
        if metric in chance:
            ax.axhline(100 * chance[metric], color="gray", linestyle="--", linewidth=1.0, label="chance")
        ax.set_xscale("log")
        budgets = _budgets(table[metric])
        ax.set_xticks(budgets, [f"{n:,}" for n in budgets])  # the budgets measured, not powers of 10
        ax.minorticks_off()
        ax.set_xlabel("meta-training steps")
        ax.set_ylabel("ACC (%)")
        ax.set_title(_title(metric), fontsize=10)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    atomic_save_figure(fig, path)


def budget_report(
    run_dirs: Sequence[Path], out_dir: Path, *, force: bool = False, command: str | None = None
) -> dict[str, Any]:
    """Write the budget curves of the evaluated ACL runs ``run_dirs`` into ``out_dir``; returns
    ``{"table", "markdown", "files"}`` with ``table[metric][setting][steps]`` = ``{"mean", "ci95",
    "values", "seeds", "runs"}`` (percent; ``ci95`` None for one seed).

    Raises:
        ValueError: no run given; a run given twice (same setting, steps and seed); a damaged or
            non-ACL ``results.json`` (naming it).
        FileNotFoundError: a run without ``results.json``.
        RunFolderError: ``out_dir`` holds output files that ``acl budget`` did not write (without
            ``force``), or is locked by another command.
    """
    if not run_dirs:
        raise ValueError("run_dirs: expected at least one evaluated ACL run folder, given none")
    runs = [read_budget_run(Path(d)) for d in run_dirs]  # bad input fails before anything is written
    _shorten_settings(runs)
    _check_seeds(runs)
    table = _aggregate(runs)
    chance: dict[str, float] = {}
    for r in runs:
        chance.update(r["chance"])
    benches = sorted({m.rpartition("/")[0] for m in table if m != SELECTION_KEY})
    markdown = _markdown(table, benches, command)
    as_json = {m: {s: {str(n): v for n, v in c.items()} for s, c in t.items()} for m, t in table.items()}
    names = ["budget.json", "budget.md", *[f"plots/{_plot_name(b)}" for b in benches]]
    out_dir = Path(out_dir)
    claims = OutputClaims(out_dir, "acl budget")
    with run_lock(out_dir):
        claims.check(names, force=force)  # before anything is staged
        with claims.staging() as stage:
            atomic_write_json(stage / "budget.json", {"command": command, "table": as_json})
            atomic_write_text(stage / "budget.md", markdown)
            for bench in benches:
                _plot(table, chance, bench, stage / "plots" / _plot_name(bench))
            files = claims.publish(stage, force=force)
    return {"table": table, "markdown": markdown, "files": files}
