"""``fastweights cl-baselines compare``: ACL models and continual-learning baselines in one table per
scenario (the layout of the ACL paper's Split-MNIST table, Irie et al. 2025, Table 3), on the same
streams: the baselines' run fixes the benchmarks, ``k_shot``, runs and Split-Emoji settings, and every
ACL model is evaluated with exactly those (``fastweights.recipes.acl.evaluation.split_results``), or its
``results.json`` is read when it was evaluated with them.

Output folder: ``comparison.md``, ``comparison.json``, ``plots/compare_<variant>.png`` and the ACL
evaluations in ``acl/<name>.json`` (reused by a later compare into the same folder).
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
from pathlib import Path
from typing import Any

from fastweights.cl.metrics import crossed_paired_difference, paired_difference, t_ci95
from fastweights.config import load_config
from fastweights.io import atomic_write_json, atomic_write_text, read_json
from fastweights.recipes.cl_baselines.data import BENCHMARK_NAMES
from fastweights.recipes.cl_baselines.report import (
    BUDGET_TITLES,
    VARIANT_TITLES,
    method_title,
    reference_block,
)
from fastweights.recipes.plots import plot_bars
from fastweights.recipes.reporting import md_table, pm
from fastweights.train.model_files import is_export
from fastweights.train.run_folder import (
    CLAIMS_NAME,
    STAGING_PREFIX,
    OutputClaims,
    check_output_dir,
    folder_contents,
    run_lock,
)
from fastweights.train.safe_state import check_safe

__all__ = [
    "compare",
    "acl_names",
    "acl_split_results",
    "comparison_rows",
    "paired_rows",
    "SEEDS_ONLY",
    "seed_groups",
    "seed_rows",
]

log = logging.getLogger(__name__)


def _baseline_results(run_dir: Path) -> dict[str, Any]:
    path = Path(run_dir) / "results.json"
    if not path.is_file():
        raise FileNotFoundError(
            f"run_dir: {path} not found; expected a finished `fastweights cl-baselines run` folder"
        )
    res = read_json(path, "the results.json of `fastweights cl-baselines run`")
    if not isinstance(res, dict) or "cells" not in res or "config" not in res:
        raise ValueError(f"run_dir: {path} is not the results of `fastweights cl-baselines run`")
    return res


def _eval_overrides(cfg: dict[str, Any]) -> list[str]:
    d = cfg["data"]
    scen = sorted({"domain" if v == "domain" else "class" for v in cfg["scenarios"]})
    out = [
        f"eval.split_benchmarks=[{','.join(d['benchmarks'])}]",
        f"eval.scenarios=[{','.join(scen)}]",
        f"eval.split_runs={cfg['runs']}",
        f"eval.split_k_shot={d['k_shot']}",
        f"eval.split_query_per_class={d['query_per_class']}",
        f"eval.seed={d['seed']}",
        f"data.fashion_mnist_dir={d['fashion_mnist_dir']}",
    ]
    if d.get("mnist_dir"):
        out.append(f"data.mnist_dir={d['mnist_dir']}")
    return out


def _streams(cfg: dict[str, Any]) -> dict[str, Any]:
    """The baselines' stream definition in the form an ACL evaluation records it (``split_streams``)."""
    from fastweights.recipes.acl.config import ACLConfig
    from fastweights.recipes.acl.evaluation import split_streams

    return split_streams(load_config(ACLConfig, None, _eval_overrides(cfg)))


def _recorded_split(path: Path, wanted: dict[str, Any]) -> dict[str, Any] | None:
    """The ``split`` section of ``path`` (an ACL ``results.json`` or an earlier compare's cache) when its
    recorded ``split_streams`` equal ``wanted``; ``None`` when the file is missing, unreadable, older
    than the record (no ``split_streams``) or measured on other streams (logged: what differs)."""
    if not path.is_file():
        return None
    try:
        res = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    recorded = res.get("split_streams") if isinstance(res, dict) else None
    if recorded != wanted:
        differ = sorted(k for k in wanted if not isinstance(recorded, dict) or recorded.get(k) != wanted[k])
        log.info("%s: not measured on these streams (%s differ); evaluating again", path, ", ".join(differ))
        return None
    return res.get("split") or None


def _check_acl_dir(acl_dir: Path) -> None:
    """``acl_dir`` holds results, a run's config or an export, else a one-line ``FileNotFoundError``; a
    run's best checkpoint that would need code to load is refused here, before anything is written
    (:class:`~fastweights.train.safe_state.UnsafeFileError`)."""
    if not (acl_dir / "results.json").is_file() and not _evaluable(acl_dir):
        raise FileNotFoundError(
            f"--acl: {acl_dir} has no config.yaml; expected an ACL run or `fastweights acl export` folder"
        )
    best = acl_dir / "checkpoints" / "best.pt"
    if (acl_dir / "config.yaml").is_file() and best.is_file():
        check_safe(best, what="--acl")


def _evaluable(acl_dir: Path) -> bool:
    """Whether ``acl_dir`` holds a model to evaluate: a run's ``config.yaml`` or an export."""
    return (acl_dir / "config.yaml").is_file() or is_export(acl_dir)


def acl_split_results(acl_dir: Path, cfg: dict[str, Any], cache: Path) -> dict[str, Any]:
    """``{"<benchmark>/<variant>": summary}`` of an ACL run or export folder on the baselines' streams.

    Read from ``acl_dir/results.json`` when it records the baselines' whole stream definition
    (``split_streams``: benchmarks, scenarios, runs, demonstrations and queries per class, seed, data
    folders, package version); else from ``cache`` (an earlier compare) on the same condition; else the
    best checkpoint is evaluated (``acl.evaluation.split_results``) and written to ``cache`` with it.

    Raises:
        FileNotFoundError: if ``acl_dir`` has neither such results nor ``config.yaml`` + a checkpoint.
    """
    acl_dir = Path(acl_dir)
    wanted = _streams(cfg)
    for path in (acl_dir / "results.json", cache):
        split = _recorded_split(path, wanted)
        if split is not None:
            return split
    if not _evaluable(acl_dir):
        raise FileNotFoundError(
            f"--acl: {acl_dir} has no config.yaml to evaluate, and its results.json was not measured on "
            f"these streams ({wanted})"
        )
    from fastweights.recipes import acl
    from fastweights.recipes.acl.config import ACLConfig
    from fastweights.recipes.acl.evaluation import load_split_benchmarks, split_results
    from fastweights.recipes.run import load_trained

    log.info("evaluating %s on the baselines' split streams", acl_dir)
    acl_cfg, _, model, device = load_trained(
        acl_dir, ACLConfig, acl.build_model, "best", _eval_overrides(cfg)
    )
    model.eval()
    split = split_results(acl_cfg, load_split_benchmarks(acl_cfg, []), model, device)
    cache.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_json(cache, {"acl_dir": str(acl_dir), "split": split, "split_streams": wanted})
    return split


def comparison_rows(
    variant: str,
    baselines: dict[str, Any],
    acl_models: dict[str, dict[str, Any]],
) -> tuple[list[str], list[list[str]]]:
    """Header and rows of one scenario's table: ACC ± std (%) per benchmark, ACL models first, then
    every baseline method per budget. ACL models of a seed group (:func:`seed_groups`) are left out:
    :func:`seed_rows` shows them."""
    cells = baselines["cells"]
    benches = [BENCHMARK_NAMES[b] for b in baselines["config"]["data"]["benchmarks"]]
    header = ["model", "budget", *benches]
    rows = []
    grouped = {n for members in seed_groups(acl_models).values() for n in members}
    for name, split in acl_models.items():
        if name in grouped:
            continue  # shown by its group's row (seed_rows)
        vals = [split.get(f"{b}/{variant}") for b in benches]
        if all(v is None for v in vals):
            continue  # e.g. a 2-task model has no 5-task class-incremental column
        k = baselines["config"]["data"]["k_shot"]
        rows.append(
            [f"ACL: {name}", f"{k} demonstrations per class (in context)"]
            + ["—" if v is None else pm(v["ACC"]["mean"], v["ACC"]["std"], 1) for v in vals]
        )
    for budget in baselines["config"]["budgets"]:
        for m in _methods(cells, variant, budget, benches):
            row = [method_title(m), BUDGET_TITLES.get(budget, budget)]
            for b in benches:
                cell = cells.get(f"{b}/{variant}/{budget}", {}).get(m)
                row.append(
                    "—" if cell is None else pm(cell["test"]["ACC"]["mean"], cell["test"]["ACC"]["std"], 1)
                )
            rows.append(row)
    return header, rows


def _methods(cells: dict[str, Any], variant: str, budget: str, benches: list[str]) -> list[str]:
    return list(dict.fromkeys(m for b in benches for m in cells.get(f"{b}/{variant}/{budget}", {})))


def _verdict_cell(d: dict[str, Any]) -> str:
    return f"{100 * d['mean']:+.1f} ± {100 * d['ci95']:.1f} ({d['verdict']})"


#: the mark of a seed group's cell without per-run values on either side (:func:`paired_rows`)
SEEDS_ONLY = "†"


def _group_cell(theirs: dict[str, Any], ours: list[dict[str, Any]]) -> str:
    """A seed group's paired cell: seeds × runs (:func:`crossed_paired_difference`) where the method and
    every seed have per-run ACC of the same length, else over the seeds' means, marked
    :data:`SEEDS_ONLY`."""
    runs = [theirs.get("per_run"), *(v.get("per_run") for v in ours)]
    if all(r is not None for r in runs) and len({len(r) for r in runs}) == 1:
        return _verdict_cell(crossed_paired_difference(runs[0], runs[1:]))
    seeds = paired_difference([theirs["mean"]] * len(ours), [v["mean"] for v in ours])
    return f"{_verdict_cell(seeds)} {SEEDS_ONLY}"


def paired_rows(
    variant: str, baselines: dict[str, Any], acl_models: dict[str, dict[str, Any]]
) -> tuple[list[str], list[list[str]]]:
    """Header and rows of one scenario's paired comparison, ACL − method in ACC points per benchmark
    with a 95% CI (Student t) and the verdict for ACL (better / worse / not distinguishable;
    :func:`fastweights.cl.metrics.paired_difference`), for every ACL model and baseline method (per
    budget):

    - a seed group (:func:`seed_groups`, ``ACL: <group>, N seeds``): the differences ``d[s, r]`` = seed
      s's ACC on run r minus the method's on run r (run r of both is the same stream), a crossed layout
      of N seeds × the runs; its grand mean and the CI of
      :func:`fastweights.cl.metrics.crossed_paired_difference`, which holds both the seed-to-seed and the
      run-to-run (draw-to-draw) variability of the difference. Where a seed or the method has no per-run
      values (results written before they were recorded) or the run counts differ, the cell falls back to
      the seed-level interval — each seed's mean over the runs minus the method's mean, t over the N
      seeds, the method's run-to-run spread left out — marked :data:`SEEDS_ONLY`;
    - any other ACL model: the unit is the run r (run r of both is the same stream: tasks, order,
      demonstrations and queries); "—" where either side has no per-run values or the run counts differ.

    Full-budget baselines train on every image whatever the run (run r differs only in its training
    seed), so there the pairing by run shares only the queries; the intervals stay valid, without the
    gain of a shared draw.
    """
    cells = baselines["cells"]
    benches = [BENCHMARK_NAMES[b] for b in baselines["config"]["data"]["benchmarks"]]
    header = ["ACL model", "vs method", "budget", *benches]
    rows = []
    groups = seed_groups(acl_models)
    grouped = {n for members in groups.values() for n in members}
    for group, members in groups.items():
        ours = {b: [acl_models[n].get(f"{b}/{variant}") for n in members] for b in benches}
        if all(any(v is None for v in vals) for vals in ours.values()):
            continue
        for budget in baselines["config"]["budgets"]:
            for m in _methods(cells, variant, budget, benches):
                row = [f"{group}, {len(members)} seeds", method_title(m), BUDGET_TITLES.get(budget, budget)]
                for b in benches:
                    cell = cells.get(f"{b}/{variant}/{budget}", {}).get(m)
                    if cell is None or any(v is None for v in ours[b]):
                        row.append("—")
                        continue
                    row.append(_group_cell(cell["test"]["ACC"], [v["ACC"] for v in ours[b]]))
                rows.append(row)
    for name, split in acl_models.items():
        if name in grouped:
            continue
        ours_run = {b: (split.get(f"{b}/{variant}") or {}).get("ACC", {}).get("per_run") for b in benches}
        if all(v is None for v in ours_run.values()):
            continue
        for budget in baselines["config"]["budgets"]:
            for m in _methods(cells, variant, budget, benches):
                row = [name, method_title(m), BUDGET_TITLES.get(budget, budget)]
                for b in benches:
                    cell = cells.get(f"{b}/{variant}/{budget}", {}).get(m)
                    theirs_run = None if cell is None else cell["test"]["ACC"].get("per_run")
                    if ours_run[b] is None or theirs_run is None or len(ours_run[b]) != len(theirs_run):
                        row.append("—")
                        continue
                    row.append(_verdict_cell(paired_difference(theirs_run, ours_run[b])))
                rows.append(row)
    return header, rows


def _bars(header: list[str], rows: list[list[str]]) -> dict[str, dict[str, tuple[float, float]]]:
    out: dict[str, dict[str, tuple[float, float]]] = {}
    for row in rows:
        label = row[0] if row[0].startswith("ACL") else f"{row[0]} ({row[1].split()[0]})"
        vals = {}
        for bench, cell in zip(header[2:], row[2:], strict=True):
            if cell != "—":
                mean, _, spread = cell.partition(" ± ")
                vals[bench] = (float(mean), float(spread.split()[0]) if spread else 0.0)
        out[label] = vals
    return out


def _earlier_comparison(out_dir: Path, run_dir: Path) -> bool:
    """Whether ``out_dir`` holds only an earlier comparison of ``run_dir`` (which may be replaced)."""
    markers, others = folder_contents(out_dir)
    if markers or not (out_dir / "comparison.json").is_file():
        return False
    try:
        recorded = json.loads((out_dir / "comparison.json").read_text())["run_dir"]
    except (OSError, ValueError, KeyError, TypeError):
        return False
    known = {"comparison.json", "comparison.md", "plots", "acl", CLAIMS_NAME}
    others = [o for o in others if not o.startswith(STAGING_PREFIX)]  # left by a killed compare
    return set(others) <= known and Path(recorded).resolve() == run_dir.resolve()


_SEED_NAME = re.compile(r"^(.*)/seed(\d+)$")
_SEED_FOLDER = re.compile(r"^seed\d+$")


def acl_names(acl_dirs: list[Path]) -> list[str]:
    """A name per ACL folder: the shortest path tail that tells them apart (``acl-cross``; for the run
    folders of ``compare --seeds``, e.g. ``acl_loss=true/seed0`` and ``acl_loss=false/seed0``).

    Raises:
        ValueError: naming ``--acl`` when a folder is given twice.
    """
    paths = [Path(a).resolve() for a in acl_dirs]
    if not paths:
        return []
    if len(set(paths)) != len(paths):
        raise ValueError(f"--acl: expected distinct folders, given {[str(a) for a in acl_dirs]}")
    for n in range(1, max(len(p.parts) for p in paths) + 1):
        # a seed folder keeps its group's name (``srwm/seed0``, not ``seed0``): seed_groups needs it
        names = ["/".join(p.parts[-(n + 1 if n == 1 and _SEED_FOLDER.match(p.name) else n) :]) for p in paths]
        if len(set(names)) == len(names):
            return names
    return [str(p) for p in paths]


def seed_groups(acl_models: dict[str, Any]) -> dict[str, list[str]]:
    """The ACL models trained with several seeds: names ``<group>/seed<k>`` (the run folders of
    ``compare --seeds``) grouped by ``<group>``, in the given order; groups of one seed are left out."""
    groups: dict[str, list[str]] = {}
    for name in acl_models:
        m = _SEED_NAME.match(name)
        if m:
            groups.setdefault(m.group(1), []).append(name)
    return {g: members for g, members in groups.items() if len(members) >= 2}


def seed_rows(
    variant: str, baselines: dict[str, Any], acl_models: dict[str, dict[str, Any]]
) -> list[list[str]]:
    """Rows of ACL models trained with several seeds (:func:`seed_groups`): per benchmark, the mean ±
    95% CI over seeds (Student t) of each seed's ACC (itself the mean over the runs), then the per-seed
    values in brackets; one row per group."""
    benches = [BENCHMARK_NAMES[b] for b in baselines["config"]["data"]["benchmarks"]]
    rows = []
    for group, members in seed_groups(acl_models).items():
        row = [f"ACL: {group}, {len(members)} seeds", "mean ± 95% CI over seeds [per seed]"]
        for b in benches:
            vals = [acl_models[n].get(f"{b}/{variant}") for n in members]
            if any(v is None for v in vals):
                row.append("—")
                continue
            means = [v["ACC"]["mean"] for v in vals]
            mean, ci = t_ci95(means)
            row.append(f"{pm(mean, ci, 1)} [{', '.join(f'{100 * x:.1f}' for x in means)}]")
        if any(c != "—" for c in row[2:]):
            rows.append(row)
    return rows


def compare(
    run_dir: Path, acl_dirs: list[Path], out_dir: Path, *, force: bool = False, command: str | None = None
) -> dict[str, Any]:
    """Write the comparison of the baselines in ``run_dir`` and the ACL models ``acl_dirs`` into
    ``out_dir``; returns ``{"markdown", "tables"}``.

    ``out_dir`` must be new or empty or hold an earlier comparison of ``run_dir``; the files compare
    writes there replace only files it wrote before (:class:`~fastweights.train.run_folder.OutputClaims`:
    not a ``comparison.md`` of the user's, or one edited since), unless ``force``.

    Raises:
        FileNotFoundError / ValueError: a folder that is not what it should be (naming it), or a damaged
            ``results.json`` (naming it).
        RunFolderError: ``out_dir`` holds a run or other files, or a file in the way that compare did not
            write (without ``force``), or is locked.
    """
    baselines = _baseline_results(Path(run_dir))
    cfg = baselines["config"]
    out_dir = Path(out_dir)
    names = acl_names(acl_dirs)
    for a in acl_dirs:  # bad input fails before anything is written
        _check_acl_dir(Path(a))
    claims = OutputClaims(out_dir, "cl-baselines compare")
    plots = [f"plots/compare_{v.replace('-', '_')}.png" for v in cfg["scenarios"]]
    with run_lock(out_dir), contextlib.ExitStack() as stack:
        if not _earlier_comparison(out_dir, Path(run_dir)):
            check_output_dir(out_dir, source=Path(run_dir), force=force, purpose="eval")
        claims.check(["comparison.json", "comparison.md", *plots], force=force)  # before anything is written
        # claim the folder first, so a compare killed while evaluating can be run again into it
        with claims.staging() as stage:
            atomic_write_json(
                stage / "comparison.json", {"run_dir": str(run_dir), "acl": names, "tables": None}
            )
            claims.publish(stage, force=force)
        acl_models = {
            n: acl_split_results(Path(a), cfg, out_dir / "acl" / f"{n}.json")
            for n, a in zip(names, acl_dirs, strict=True)
        }
        lines = ["# ACL vs continual-learning baselines", ""]
        if command:
            lines += [f"Command: `{command}`", ""]
        lines += [
            f"Baselines: `{run_dir}` (learner {cfg['learner']}, {cfg['runs']} runs); ACL models evaluated "
            f"on the same streams (the same tasks, order, {cfg['data']['k_shot']} demonstrations per class "
            "of run r, test queries). ACC after the last task, % (mean ± std over runs; rows "
            "'ACL: …, N seeds': mean ± 95% CI over the meta-training seeds, Student t).",
            "",
        ]
        tables = {}
        stage = stack.enter_context(claims.staging())  # written aside, then moved into out_dir
        for variant in cfg["scenarios"]:
            header, rows = comparison_rows(variant, baselines, acl_models)
            rows = seed_rows(variant, baselines, acl_models) + rows
            tables[variant] = {"header": header, "rows": rows}
            title = VARIANT_TITLES.get(variant, variant)
            lines += [f"## {title}", "", *md_table(header, rows), ""]
            name = f"compare_{variant.replace('-', '_')}.png"
            plot_bars(_bars(header, rows), stage / "plots" / name, ylabel="ACC (%)", title=title)
            lines += [f"![{title}](plots/{name})", ""]
            p_header, p_rows = paired_rows(variant, baselines, acl_models)
            tables[variant]["paired"] = {"header": p_header, "rows": p_rows}
            if p_rows:
                lines += [
                    "ACL − method on the same streams (ACC points, mean ± 95% CI, Student t; the verdict "
                    "is for ACL). Rows 'N seeds': the differences of every seed and run (run r of both "
                    "sides is the same demonstration draw), their mean and the CI of the seeds × runs "
                    "layout (the unbiased two-way random-effects variance of the mean, Student t with "
                    "Satterthwaite's df), which holds "
                    "the seed-to-seed and the draw-to-draw spread of the difference; "
                    f"{SEEDS_ONLY}: no per-run values, CI over the seeds only, the method entering as its "
                    "mean. Other rows: over the runs, run by run:",
                    "",
                    *md_table(p_header, p_rows),
                    "",
                ]
            lines += reference_block(variant)
        markdown = "\n".join(lines)
        atomic_write_text(stage / "comparison.md", markdown)
        atomic_write_json(
            stage / "comparison.json", {"run_dir": str(run_dir), "acl": names, "tables": tables}
        )
        claims.publish(stage, force=force)
    return {"markdown": markdown, "tables": tables}
