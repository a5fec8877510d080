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
from fastweights.train.model_files import CONFIG_FILE, is_export, read_export_info
from fastweights.train.run_folder import OutputClaims, run_lock

__all__ = ["budget_report", "read_budget_run", "train_section", "upstream_steps"]

SELECTION_KEY = "selection objective"  # the metric name of the meta-validation objective
_SCENARIOS = {
    "domain": "5-task domain-incr.",
    "class-2task": "2-task class-incr.",
    "class": "5-task class-incr.",
}


def read_budget_run(run_dir: Path) -> dict[str, Any]:
    """One evaluated ACL run: ``{"run_dir", "setting", "parts", "steps", "seed", "metrics", "chance"}``.

    ``parts`` are the meta-training domains joined by `` + `` (e.g. ``FontGlyphs + EmojiImages``), the
    sequence layer, the training stage (e.g. ``5-task meta-finetuning (domain-incremental)``) and
    ``no ACL loss`` for a run trained without the backward terms (else empty); ``setting`` joins them
    (:func:`budget_report` keeps only the parts in which the runs differ). ``steps`` is the
    meta-training budget, the compute spent: the run's trained steps (its last logged step, not the step
    of the checkpoint selected) plus, for a run started from another run's checkpoint
    (``train.init_from``), that run's budget counted the same way, recursively (``init_steps``). Training
    records ``init_steps`` when the run starts (``run.init_steps`` of ``results.json``; ``init_steps_from``
    = ``"recorded at training"``), so an upstream run trained further afterwards does not change it; for
    a run trained before that record existed the upstream logs are read now (``"upstream logs, read
    now"``: a run started from an unfinished run then counts that run's steps as they are now; an
    upstream run's own record, in its ``results.json``, is used where there is one; ``"no
    train.init_from"`` when there is none).
    ``seed`` is the training seed (None when ``config.yaml`` has none); ``metrics`` maps
    ``"<benchmark>/<scenario>"`` and :data:`SELECTION_KEY` to fractions in [0, 1]; ``chance`` maps the
    split metrics to their chance level.

    Raises:
        FileNotFoundError: ``run_dir/results.json`` or ``run_dir/config.yaml`` is missing, or the run's
            ``train.init_from`` checkpoint has no run folder with a ``metrics.jsonl`` (naming both).
        ValueError: ``results.json`` or ``config.yaml`` is damaged or not an ACL run's (naming the file and
            field, e.g. a ``run.init_steps`` that is not a whole number); an upstream ``metrics.jsonl``
            logs no step; ``train.init_from`` runs in a cycle.
    """
    path = Path(run_dir) / "results.json"
    res = read_json(path, "the results of an evaluated ACL run (`fastweights acl eval DIR`)")
    try:
        run = res["run"]
        steps = run["trained_steps"]
        if type(steps) is not int or steps < 0:
            raise ValueError(f"run.trained_steps={steps!r} is not a whole number of steps")
        recorded = run.get("init_steps")
        if recorded is not None and (type(recorded) is not int or recorded < 0):
            raise ValueError(f"run.init_steps={recorded!r} is not a whole number of steps")
        sources = [str(s) for s in run["sources"]]
        parts = [
            " + ".join(sources),
            str(run["sequence_layer"]),
            str(run.get("stage", "")),
            "no ACL loss" if run.get("acl_loss") is False else "",
        ]
        split = res["split"]
        metrics = {name: float(r["ACC"]["mean"]) for name, r in split.items()}
        chance = {name: float(r["chance"]) for name, r in split.items()}
    except (KeyError, TypeError, ValueError, AttributeError) as err:
        raise ValueError(
            f"{path}: expected an ACL run's results (run.trained_steps, run.sources, run.sequence_layer, "
            "run.init_steps (optional), "
            f"split.<benchmark>/<scenario>.ACC.mean and .chance), missing or malformed: {err}"
        ) from None
    bad = [f"split.{n}.ACC.mean" for n, v in metrics.items() if not 0.0 <= v <= 1.0]  # NaN included
    bad += [f"split.{n}.chance" for n, v in chance.items() if not 0.0 <= v <= 1.0]
    if bad:
        raise ValueError(f"{path}: {bad[0]}: expected a fraction in [0, 1], got a value outside it (or NaN)")
    selected = run.get("selected_on")
    if isinstance(selected, dict) and isinstance(selected.get("value"), (int, float)):
        metrics[SELECTION_KEY] = float(selected["value"])
    train = train_section(Path(run_dir))
    if not train.get("init_from"):
        init_steps, init_steps_from = 0, "no train.init_from"
    elif recorded is not None:
        init_steps, init_steps_from = recorded, "recorded at training"
    else:
        where = f"{run_dir}/config.yaml: train.init_from"
        init_steps = upstream_steps(train["init_from"], where=where, start=Path(run_dir))
        init_steps_from = "upstream logs, read now"
    return {
        "run_dir": str(run_dir),
        "setting": " · ".join(p for p in parts if p),
        "parts": parts,
        "steps": steps + init_steps,
        "init_steps": init_steps,
        "init_steps_from": init_steps_from,
        "seed": train.get("seed") if type(train.get("seed")) is int else None,
        "metrics": metrics,
        "chance": chance,
    }


def train_section(run_dir: Path) -> dict[str, Any]:
    """The ``train`` section of the run's ``config.yaml`` (e.g. its ``seed``, ``init_from`` and
    ``acl_loss``), or of an export folder's ``config.json``.

    Raises:
        FileNotFoundError: no ``config.yaml``; ValueError: it is not YAML with a ``train`` mapping.
    """
    import yaml

    path = run_dir / "config.yaml"
    if not path.is_file() and is_export(run_dir):  # an export folder: its config.json holds the config
        train = read_export_info(run_dir)["config"].get("train")
        if not isinstance(train, dict):
            raise ValueError(f"{run_dir / CONFIG_FILE}: config.train: expected a mapping")
        return train
    if not path.is_file():
        raise FileNotFoundError(
            f"{path}: not found; expected the run's config.yaml (its train.seed and train.init_from)"
        )
    try:
        train = yaml.safe_load(path.read_text(encoding="utf-8"))["train"]
    except (OSError, TypeError, KeyError, yaml.YAMLError) as err:
        why = " ".join(str(err).split())  # YAML's messages span lines
        raise ValueError(f"{path}: expected a run's config with a train section, unreadable: {why}") from None
    if not isinstance(train, dict):
        raise ValueError(f"{path}: train: expected a mapping, got {type(train).__name__}")
    return train


def _init_run_folder(where: str, init_from: str) -> Path:
    """The run folder of the checkpoint ``init_from`` names (``RUN/checkpoints/best.pt`` → ``RUN``; a run
    or export folder itself), as training finds it: relative to the working directory, else in the
    source checkout (the presets' ``pretrained/acl-cross``); ``where`` names the setting in the error."""
    from fastweights.recipes.acl import SOURCE_ROOT

    ckpt = Path(init_from)
    if ckpt.suffix != ".pt" and (ckpt.is_dir() or (SOURCE_ROOT / ckpt).is_dir()):
        source = ckpt
    else:
        source = ckpt.parent.parent if ckpt.parent.name == "checkpoints" else ckpt.parent
    for folder in (source, SOURCE_ROOT / source):
        if (folder / "metrics.jsonl").is_file():
            return folder
    raise FileNotFoundError(
        f"{where}={init_from}: no {source / 'metrics.jsonl'} (nor in the "
        f"source checkout {SOURCE_ROOT}); the steps of the run a model starts from are part of its budget "
        "(run from the folder the path is relative to)"
    )


def upstream_steps(
    init_from: Any,
    *,
    where: str = "train.init_from",
    start: Path | None = None,
    recorded: Any = None,
) -> int:
    """The meta-training steps behind ``init_from`` (a checkpoint in another run's ``checkpoints/``, or
    an exported copy's, e.g. ``pretrained/acl-cross/checkpoints/best.pt``): the last step of that run's
    ``metrics.jsonl`` plus the steps behind that run's own start — as it recorded them (``recorded``,
    else its ``results.json``'s ``run.init_steps``), else counted the same way from its
    ``train.init_from`` (in its ``config.yaml``), recursively; 0 for an empty ``init_from``. ACL training
    records the result when a run starts (``run.init_steps``).

    Args:
        init_from: the ``train.init_from`` value.
        where: how errors name the setting (e.g. ``RUN/config.yaml: train.init_from``).
        start: the run folder that starts from ``init_from``, if any (a chain back to it is a cycle).
        recorded: the ``init_steps`` the ``init_from`` checkpoint holds, if known (a whole number).

    Raises:
        FileNotFoundError: a run in the chain has no ``metrics.jsonl`` (working directory and source
            checkout both looked in) or no ``config.yaml``.
        ValueError: a stepless ``metrics.jsonl``, a damaged ``config.yaml``, a cycle (naming the file).
    """
    total, seen = 0, [Path(start).resolve()] if start is not None else []
    run_dir: Path | None = start
    while init_from:
        source = _init_run_folder(where, str(init_from))
        if source.resolve() in seen:
            chain = " -> ".join(str(p) for p in [*seen, source.resolve()])
            raise ValueError(f"{where} runs in a cycle: {chain}")
        seen.append(source.resolve())
        log = source / "metrics.jsonl"
        records = [r for r in read_jsonl(log) if type(r.get("step")) is int]
        if not records:
            whose = f"the run {run_dir} started from" if run_dir is not None else "the model's run"
            raise ValueError(f"{log}: expected the logged steps of {whose}, found none")
        total += records[-1]["step"]
        known = recorded if recorded is not None else _recorded_init_steps(source)
        if type(known) is int and known >= 0:
            return total + known
        recorded = None
        run_dir, init_from = source, train_section(source).get("init_from")
        where = f"{source}/config.yaml: train.init_from"
    return total


def _recorded_init_steps(run_dir: Path) -> Any:
    """``records.init_steps`` of an export's ``config.json``, else ``run.init_steps`` of
    ``run_dir/results.json`` (None when absent or unreadable: then the steps are counted from the logs)."""
    if is_export(run_dir):
        try:
            return read_export_info(run_dir)["records"]["init_steps"]
        except (OSError, ValueError, KeyError, TypeError):
            pass
    try:
        return read_json(run_dir / "results.json", "an evaluated run's results")["run"]["init_steps"]
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _shorten_settings(runs: list[dict[str, Any]]) -> None:
    """Keep in each run's setting only the parts in which the runs differ (the domains always)."""
    varying = [i == 0 or len({r["parts"][i] for r in runs}) > 1 for i in range(len(runs[0]["parts"]))]
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


def _check_runs(runs: list[dict[str, Any]]) -> None:
    """One folder once; two runs of one setting and budget must be different seeds (else one run was
    given twice); a metric has one chance level across the runs (else their evaluations differ)."""
    folders: dict[Path, str] = {}
    for r in runs:
        folder = Path(r["run_dir"]).resolve()
        if folder in folders:
            raise ValueError(
                f"run_dirs: {folders[folder]} and {r['run_dir']} are the same folder; expected each run once"
            )
        folders[folder] = r["run_dir"]
    chance: dict[str, tuple[float, str]] = {}
    for r in runs:
        for metric, level in r["chance"].items():
            first = chance.setdefault(metric, (level, r["run_dir"]))
            if not math.isclose(first[0], level, abs_tol=1e-9):
                raise ValueError(
                    f"run_dirs: {metric} has chance {first[0]:g} in {first[1]} but {level:g} in "
                    f"{r['run_dir']}; expected runs evaluated alike (eval.n_way and the benchmarks' tasks)"
                )
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
        "meta-training budget: the steps trained (each run's last logged step, not the selected "
        "checkpoint's), those of the run a model started from (`train.init_from`) included (as recorded "
        "when the run started; `budget.json` says, per run, where they were read otherwise). Mean ± 95% "
        "CI over the training seeds (Student t), the per-seed values in parentheses; a budget with one "
        "seed has no CI (a hollow marker in the plots). Split benchmarks: ACC after the last task, "
        "averaged over the demonstration draws.",
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
    lines += ["## Plots", "", *[f"![{b}]({_plot_path(b)})" for b in benches], ""]
    return "\n".join(lines)


def _title(metric: str) -> str:
    if metric == SELECTION_KEY:
        return "Selection objective (meta-validation)"
    bench, _, scenario = metric.rpartition("/")
    return f"{bench}, {_SCENARIOS.get(scenario, scenario)}"


def _plot_path(bench: str) -> str:
    """The figure of ``bench`` relative to the output folder: both the path :func:`budget_report` writes
    it to and the link ``budget.md`` gives it, so the page's images resolve wherever the folder is
    copied whole (e.g. ``plots/budget_split_digits.png``)."""
    return f"plots/budget_{bench.lower().replace('-', '_')}.png"


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
            line = ax.errorbar(
                steps,
                [cells[s]["mean"] for s in steps],
                yerr=[cells[s]["ci95"] or 0.0 for s in steps],
                marker="o",
                capsize=4,
                label=setting,
            )
            one = [s for s in steps if cells[s]["ci95"] is None]  # one seed: no CI, a hollow marker
            colour = line.lines[0].get_color()
            ax.plot(
                one, [cells[s]["mean"] for s in one], "o", color=colour, markerfacecolor="white", zorder=3
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
        ValueError: no run given; a run given twice (the same folder, or the same setting, steps and
            seed); runs whose chance levels differ; a damaged or non-ACL ``results.json`` or
            ``config.yaml``, a stepless upstream log or an ``init_from`` cycle (naming the file).
        FileNotFoundError: a run without ``results.json`` or ``config.yaml``; an ``init_from`` without its
            run's ``metrics.jsonl``.
        RunFolderError: ``out_dir`` holds output files that ``acl budget`` did not write (without
            ``force``), or is locked by another command.
    """
    if not run_dirs:
        raise ValueError("run_dirs: expected at least one evaluated ACL run folder, given none")
    runs = [read_budget_run(Path(d)) for d in run_dirs]  # bad input fails before anything is written
    _shorten_settings(runs)
    _check_runs(runs)
    table = _aggregate(runs)
    chance: dict[str, float] = {}
    for r in runs:
        chance.update(r["chance"])
    benches = sorted({m.rpartition("/")[0] for m in table if m != SELECTION_KEY})
    markdown = _markdown(table, benches, command)
    as_json = {m: {s: {str(n): v for n, v in c.items()} for s, c in t.items()} for m, t in table.items()}
    names = ["budget.json", "budget.md", *[_plot_path(b) for b in benches]]
    out_dir = Path(out_dir)
    claims = OutputClaims(out_dir, "acl budget")
    with run_lock(out_dir):
        claims.check(names, force=force)  # before anything is staged
        with claims.staging() as stage:
            keys = ("run_dir", "setting", "seed", "steps", "init_steps", "init_steps_from")
            per_run = [{k: r[k] for k in keys} for r in runs]
            atomic_write_json(stage / "budget.json", {"command": command, "table": as_json, "runs": per_run})
            atomic_write_text(stage / "budget.md", markdown)
            for bench in benches:
                _plot(table, chance, bench, stage / _plot_path(bench))
            files = claims.publish(stage, force=force)
    return {"table": table, "markdown": markdown, "files": files}
