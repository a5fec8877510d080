"""The ACL run's report (:func:`write_report`: ``runs/<name>/plots/*.png``, ``report.md`` and its
one-page ``report.html``). The paper layouts it shows are in :mod:`fastweights.recipes.acl.paper_tables`,
its plots in :mod:`fastweights.recipes.acl.plots` and :mod:`fastweights.recipes.plots`.

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
shows the paper's table, one row per ordered domain pair (``paper_tables.forgetting_rows``); without
it, the single-pair layout of ``table``. Split scenarios are ``domain``, ``class`` and ``class-2task``;
their paper-layout table (ACL paper Table 3) is ``paper_tables.split_table``. ``long_span`` is the
domain-incremental protocol with 5/10/20 tasks (``paper_tables.long_span_table``, next to the ACL
paper's Split-Omniglot numbers). Every top-level section is optional.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from fastweights.io import PathLike
from fastweights.recipes.acl.paper_tables import (
    FORGETTING_ORDERS,
    forgetting_rows,
    forgetting_table,
    long_span_table,
    split_table,
)
from fastweights.recipes.acl.plots import plot_forgetting, plot_forgetting_rows, plot_long_span
from fastweights.recipes.plots import learning_curve_section, plot_accuracy_matrix
from fastweights.recipes.reporting import (
    as_float,
    as_matrix,
    below_chance_cells,
    benchmark_notes,
    matrix_cells,
    matrix_notes,
    md_table,
    pct,
    pm,
    short_task_labels,
    task_labels,
    unseen_flagged,
    write_report_files,
)

__all__ = ["write_report"]


def _slug(name: str) -> str:
    """A file-name slug of a split entry name (``"Split-MNIST/domain"`` → ``"split-mnist_domain"``)."""
    return re.sub(r"[^a-z0-9._-]+", "_", name.lower()).strip("_") or "unnamed"


def _validation_chance(run_dir: Path, run: Mapping[str, Any]) -> float | None:
    """Chance of the meta-validation accuracies from the run's ``config.yaml`` (in ``run_dir``, else in
    ``run["run_dir"]``): ``1/n_way`` for domain-incremental tasks, ``1/(n_way * num_tasks)`` for
    class-incremental ones; None when no config is found."""
    import yaml

    folders = [run_dir] + ([Path(str(run["run_dir"]))] if run.get("run_dir") else [])
    path = next((f / "config.yaml" for f in folders if (f / "config.yaml").is_file()), None)
    if path is None:
        return None
    try:
        t = (yaml.safe_load(path.read_text(encoding="utf-8")) or {}).get("train") or {}
        n_way = int(t["n_way"])
        tasks = 1 if t.get("scenario", "domain") == "domain" else int(t.get("num_tasks", 2))
    except (OSError, ValueError, TypeError, KeyError, AttributeError, yaml.YAMLError):
        return None
    return 1.0 / (n_way * tasks) if n_way > 0 and tasks > 0 else None


def _curve_label(key: str) -> str:
    """Legend name of an ACL meta-validation metric (``val_task3|all`` → ``task 3 after all tasks``)."""
    if key == "val_objective":
        return "val_objective"
    if key == "val_acc":
        return "first task right after learning it (val_acc)"
    m = re.fullmatch(r"val_task(\d+)\|all", key)
    if m:
        return f"task {m.group(1)} after all tasks"
    return key.removeprefix("val_").replace("->", "→")


def _section_learning_curve(run_dir: Path, results: Mapping[str, Any]) -> list[str]:
    """The learning curve: the selection metric (``val_objective``; ``val_acc`` in logs without it)
    and every other meta-validation accuracy, in percent, against the training step."""
    run = results.get("run") or {}
    chance = _validation_chance(run_dir, run)
    return learning_curve_section(
        run_dir,
        run,
        default_metric=("val_objective", "val_acc"),
        others=lambda k: k.startswith("val_"),
        labels=_curve_label,
        scale=100.0,
        unit=" %",
        ylabel="meta-validation accuracy (%)",
        chance=None if chance is None else 100.0 * chance,
        chance_label=f"chance ({100.0 * chance:.0f} %)" if chance else "chance",
        title="meta-validation during training",
    )


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
        f"**{pm(fs['accuracy'], fs.get('ci95'))} %** (mean ± 95% CI).",
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
                rows.append((order, task, learned, pm(e.get("mean"), e.get("ci95"))))
    lines += md_table(("order", "evaluated on", "after learning", "accuracy (%)"), rows) + [""]
    drops = []
    for first, after in (("A|A", "A|A->B"), ("B|B", "B|B->A")):
        if first in table and after in table:
            d = as_float(table[first].get("mean")) - as_float(table[after].get("mean"))
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
    R = as_matrix(res["R"], name=f"results['split'][{name!r}]['R']")
    T = R.shape[0]
    names = task_labels(res.get("task_names"), T)
    labels = short_task_labels(names)
    scenario = str(res.get("scenario") or name.rsplit("/", 1)[-1])
    chance = res.get("chance")
    flagged = below_chance_cells(R, chance, include_unseen=unseen_flagged(scenario))
    lines = [f"### {name}", ""]
    info = [f"{T} tasks"]
    if res.get("k_shot") is not None:
        info.append(f"{res['k_shot']} demonstrations per class")
    if res.get("runs") is not None:
        n = int(res["runs"])
        info.append(f"{n} runs (mean ± population std over runs)" if n > 1 else "1 run (no spread)")
    if chance is not None:
        info.append(f"chance = {pct(chance, 1)} %")
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
            rows.append((label, pm(m["mean"], m.get("std"))))
    if rows:
        lines += md_table(("metric", "value (%)"), rows) + [""]
    lines += ["Mean accuracy matrix (%), row i = after learning task i, column j = task j:", ""]
    lines += md_table(["after \\ task", *labels], matrix_cells(R, labels, flagged))
    lines.append("")
    png = plot_accuracy_matrix(
        R,
        names,
        plots / f"accuracy_matrix_{_slug(name)}.png",
        title=name,
        chance=None if chance is None else float(chance),
        flag_unseen=unseen_flagged(scenario),
    )
    lines += [f"![{name} accuracy matrix](plots/{png.name})", ""]
    lines += matrix_notes(name, R, names, chance=chance, scenario=scenario)
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
    lines += md_table(*split_table(results)) + [""]
    notes = benchmark_notes(list(results["split"]))
    return lines + ([" ".join(notes), ""] if notes else [])


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


def _section_mini(name: str, res: Mapping[str, Any]) -> list[str]:
    """One "mini" class-incremental sequence (ACL paper §4.3, Table 4): per task, the ACL model and the
    nearest-class-mean classifier on the same frozen features, after the whole sequence and alone."""
    acl, ncm = res["acl"], res["ncm"]
    n_way, tasks = int(res["n_way"]), int(res["num_tasks"])
    desc = (
        f"Encoder: {res['encoder']}. {tasks} tasks of {n_way} classes, class-incremental ({n_way * tasks} "
        f"outputs), {res['k_shot']} demonstrations per class, {res['runs']} runs: accuracy (%) of each task "
        f"after the whole sequence and when learned alone ({n_way}-way), mean ± population std over runs; "
        "the last row is the average (ACC after the sequence). NCM: nearest class mean on the same "
        "features (L2-normalised)."
    )
    header = ["task", "queries", "ACL, after all", "ACL, alone", "NCM, after all", "NCM, alone"]
    rows = []
    for j, task in enumerate(acl["task_names"]):
        rows.append(
            [
                task,
                res["queries"][j],
                pm(acl["R"][-1][j], acl["R_std"][-1][j]),
                pm(acl["alone"][task]["mean"], acl["alone"][task]["std"]),
                pm(ncm["R"][-1][j], ncm["R_std"][-1][j]),
                pm(ncm["alone"][task]["mean"], ncm["alone"][task]["std"]),
            ]
        )

    def avg_alone(r: Mapping[str, Any]) -> float:
        return sum(v["mean"] for v in r["alone"].values()) / len(r["alone"])

    rows.append(
        [
            "**average**",
            "",
            pm(acl["ACC"]["mean"], acl["ACC"]["std"]),
            pct(avg_alone(acl)),
            pm(ncm["ACC"]["mean"], ncm["ACC"]["std"]),
            pct(avg_alone(ncm)),
        ]
    )
    return [f"## {name}: ACL vs nearest class mean", "", desc, ""] + md_table(header, rows) + [""]


def write_report(results: Mapping[str, Any], run_dir: PathLike) -> Path:
    """Write ``run_dir/plots/*.png``, ``run_dir/report.md`` and its one-page ``report.html`` (plots
    embedded) from an ACL ``results.json`` dict.

    Plots: one accuracy-matrix heatmap per split benchmark (``accuracy_matrix_<slug>.png``: long task
    names as ``T1..Tn`` with a legend, cells above the diagonal hatched, below-chance cells outlined,
    chance on the colour bar), the forgetting bars (``forgetting.png``, chance dashed) and, when
    ``run_dir/metrics.jsonl`` has meta-validation records, a learning curve (``learning_curve.png``: the
    checkpoint selection metric ``run.selected_on`` — ``val_objective``; ``val_acc`` in older logs —
    thick, the evaluated checkpoint starred, the other meta-validation accuracies thin, chance from the
    run's ``config.yaml``). The markdown lists run info, few-shot accuracy ± 95% CI, the forgetting
    table, and per split benchmark ACC/BWT/forgetting ± std, the mean accuracy matrix (``(…)`` = task not
    learned yet, ``↓`` = below chance), the task-label legend, what the cells above the diagonal mean
    and the below-chance cells, all in percent with two decimals, and links the PNGs by relative path.
    Absent sections are skipped. All files are written atomically.

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
    for name, res in (results.get("mini") or {}).items():
        lines += _section_mini(name, res)

    lines += _section_learning_curve(run_dir, results)

    if len(lines) == 2:
        lines += ["No results.", ""]
    return write_report_files(run_dir / "report.md", "\n".join(lines))
