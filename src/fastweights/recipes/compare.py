"""One command compares runs of one recipe preset that differ in one config key: the sequence layer
(``--models srwm,deltanet``: the recipe's ``MODEL_KEY``) or any key (``--vary train.acl_loss=true,false``),
optionally once per training seed (``--seeds 0,1,2``). Every run has the same seeds, data and step/token
budget; each is trained (or resumed), evaluated, and one table and the recipe's comparison plot(s) are
written.

Seeds: each variant is trained once per seed (``train.seed``); each recipe's headline numbers (its
``headline(results)``: :class:`Score` values in the units of its tables) are reported as the mean ± 95%
CI over seeds (Student t, :func:`fastweights.cl.metrics.t_ci95`) beside the per-seed values and,
separately, the spread inside one run (its 95% CI over evaluation episodes or demonstration draws); every
variant is compared with the first one on the same seeds by the paired difference
(:func:`fastweights.cl.metrics.paired_difference`: mean ± 95% CI, verdict better / worse / not
distinguishable).
"""

from __future__ import annotations

import json
import logging
import math
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from fastweights.checks import MAX_SEED
from fastweights.cl.metrics import paired_difference, t_ci95
from fastweights.config import load_config, preset_path
from fastweights.io import atomic_write_json, atomic_write_text, read_jsonl
from fastweights.layers import SEQUENCE_LAYERS
from fastweights.recipes.contract import eval_command, get_recipe
from fastweights.recipes.plots import plot_bars
from fastweights.recipes.reporting import md_table
from fastweights.train.checkpoint import CheckpointManager
from fastweights.train.run_folder import OutputClaims, run_lock

__all__ = [
    "compare",
    "earlier_evaluation",
    "parse_vary",
    "variants",
    "Score",
    "parse_seeds",
    "summarize_seeds",
    "seed_markdown",
    "MAX_SEED",
]

log = logging.getLogger(__name__)

SEED_FIELD = "{seed}"  # in a compare override: the run's training seed (with --seeds)


@dataclass(frozen=True)
class Score:
    """One headline number of one run.

    Attributes:
        value: in the recipe table's units (e.g. accuracy in percent).
        spread: the run's own 95% CI half-width over its evaluation episodes / demonstration draws, same
            units; ``None`` where the evaluation has none (e.g. bits per byte of a fixed text).
        higher_is_better: ``False`` for losses (bits per byte).
    """

    value: float
    spread: float | None = None
    higher_is_better: bool = True


def parse_seeds(text: str) -> list[int]:
    """``"0,1,2"`` → ``[0, 1, 2]``.

    Raises:
        ValueError: naming ``--seeds`` for an empty list, a non-integer, a negative or too large seed
            (> 2^31 - 1) or a repeated seed.
    """
    parts = [p.strip() for p in text.split(",")]
    try:
        seeds = [int(p) for p in parts]
    except ValueError:
        raise ValueError(f"--seeds: expected comma-separated integers (e.g. 0,1,2), got {text!r}") from None
    if not seeds or any(not 0 <= s <= MAX_SEED for s in seeds) or len(set(seeds)) != len(seeds):
        raise ValueError(f"--seeds: expected distinct integers in [0, {MAX_SEED}], got {text!r}")
    return seeds


def _check_scores(
    scores: Mapping[str, Mapping[int, Mapping[str, Score]]],
) -> tuple[list[str], list[int], dict[str, list[str]]]:
    """Labels, seeds and each variant's metrics; every variant has the same seeds and, within a variant,
    every seed the same metrics (variants may differ: e.g. presets with other domains)."""
    labels = list(scores)
    if not labels or not scores[labels[0]]:
        raise ValueError("scores: expected at least one variant with at least one seed, given none")
    seeds = list(scores[labels[0]])
    metrics: dict[str, list[str]] = {}
    for label in labels:
        if list(scores[label]) != seeds:
            raise ValueError(f"scores[{label!r}]: expected the seeds {seeds}, given {list(scores[label])}")
        metrics[label] = list(scores[label][seeds[0]])
        for seed in seeds:
            if list(scores[label][seed]) != metrics[label]:
                raise ValueError(
                    f"scores[{label!r}][{seed}]: expected the metrics of its seed {seeds[0]}, "
                    f"{metrics[label]}, given {list(scores[label][seed])}"
                )
    return labels, seeds, metrics


def summarize_seeds(scores: Mapping[str, Mapping[int, Mapping[str, Score]]]) -> dict[str, Any]:
    """Aggregate ``scores[variant][seed][metric]`` (every variant with the same seeds; within a variant
    every seed with the same metrics).

    Returns:
        ``{"seeds", "metrics", "reference", "variants": {variant: {metric: {"mean", "ci95", "per_seed",
        "within_run"}}}, "paired": {variant: {metric: paired_difference(...)}}}``. ``metrics`` lists every
        variant's metrics in first-seen order; a variant's entry holds the metrics it has. ``ci95`` is over
        seeds (NaN for one seed); ``within_run`` is the mean over seeds of each run's own spread (None
        when the recipe reports none); ``paired`` holds every variant but the first (``reference``),
        differences taken as variant − reference seed by seed, on the metrics both have.

    Raises:
        ValueError: for no variants, variants with different seeds, or seeds of one variant with
            different metrics.
    """
    labels, seeds, own = _check_scores(scores)
    metrics = list(dict.fromkeys(m for label in labels for m in own[label]))
    variants: dict[str, Any] = {}
    for label in labels:
        variants[label] = {}
        for m in own[label]:
            runs = [scores[label][s][m] for s in seeds]
            mean, ci = t_ci95([r.value for r in runs])
            spreads = [r.spread for r in runs if r.spread is not None]
            variants[label][m] = {
                "mean": mean,
                "ci95": ci,
                "per_seed": {str(s): r.value for s, r in zip(seeds, runs, strict=True)},
                "within_run": float(np.mean(spreads)) if len(spreads) == len(runs) else None,
            }
    ref = labels[0]
    paired = {
        label: {
            m: paired_difference(
                [scores[ref][s][m].value for s in seeds],
                [scores[label][s][m].value for s in seeds],
                higher_is_better=scores[ref][seeds[0]][m].higher_is_better,
            )
            for m in own[ref]
            if m in own[label]
        }
        for label in labels[1:]
    }
    return {"seeds": seeds, "metrics": metrics, "reference": ref, "variants": variants, "paired": paired}


def _pm(mean: float, ci: float | None, digits: int = 2) -> str:
    if ci is None or math.isnan(ci):
        return f"{mean:.{digits}f}"
    return f"{mean:.{digits}f} ± {ci:.{digits}f}"


def seed_markdown(summary: Mapping[str, Any]) -> list[str]:
    """The Markdown of :func:`summarize_seeds`, one row per headline number: the mean ± 95% CI over seeds
    and the paired difference of every variant against the reference with its verdict, then the
    per-seed values and the within-run spread, each table with a line saying what its ± is."""
    seeds, metrics, v = summary["seeds"], summary["metrics"], summary["variants"]
    n, ref, paired = len(seeds), summary["reference"], summary["paired"]
    header = ["metric", *v, *(f"{k} − {ref}" for k in paired)]
    rows = [
        [
            m,
            *(_pm(v[k][m]["mean"], v[k][m]["ci95"]) if m in v[k] else "—" for k in v),
            *(
                f"{_pm(d[m]['mean'], d[m]['ci95'])} ({d[m]['verdict']})" if m in d else "—"
                for d in paired.values()
            ),
        ]
        for m in metrics
    ]
    per_seed = [
        [m, *(f"{v[k][m]['per_seed'][str(s)]:.2f}" if m in v[k] else "—" for k in v for s in seeds)]
        for m in metrics
    ]
    within = [
        [
            m,
            *(
                "—" if m not in v[k] or v[k][m]["within_run"] is None else f"± {v[k][m]['within_run']:.2f}"
                for k in v
            ),
        ]
        for m in metrics
    ]
    return [
        f"Training seeds: {', '.join(map(str, seeds))} (n = {n}). ± is the 95% CI over seeds "
        f"(Student t, {n - 1} degrees of freedom)"
        + (": none with one seed." if n == 1 else ".")
        + (
            f" Differences: variant − {ref} seed by seed, mean ± 95% CI, and the verdict for the variant "
            "(better / worse / not distinguishable when the CI holds 0)."
            if paired
            else ""
        ),
        "",
        *md_table(header, rows),
        "",
        "Per seed:",
        "",
        *md_table(["metric", *(f"{k} seed {s}" for k in v for s in seeds)], per_seed),
        "",
        "Within one run (mean over seeds of each run's 95% CI over its evaluation episodes or "
        "demonstration draws; — where the evaluation has none):",
        "",
        *md_table(["metric", *v], within),
    ]


def parse_vary(text: str) -> tuple[str, list[str]]:
    """``"KEY=v1,v2"`` → ``("KEY", ["v1", "v2"])``.

    Raises:
        ValueError: naming ``--vary`` for a missing ``=``, key or value, a repeated value, or a value with
            ``/`` (values name the run folders).
    """
    key, sep, rest = text.partition("=")
    values = [v.strip() for v in rest.split(",") if v.strip()]
    if not sep or not key.strip() or not values:
        raise ValueError(f"--vary: expected KEY=value1,value2 (e.g. train.acl_loss=true,false), got {text!r}")
    if len(set(values)) != len(values) or any("/" in v for v in values):
        raise ValueError(
            f"--vary: expected distinct values without '/' (they name run folders), got {values}"
        )
    return key.strip(), values


def parse_presets(text: str, recipe: str) -> list[Path]:
    """``"quick,quick-3domain"`` → the preset files (names or ``.yaml`` paths, as ``--preset`` takes).

    Raises:
        ValueError: naming ``--presets`` for fewer than two, repeated or unknown presets, or two whose
            file names (the run folders) coincide.
    """
    names = [n.strip() for n in text.split(",") if n.strip()]
    if len(names) < 2 or len(set(names)) != len(names):
        raise ValueError(
            f"--presets: expected two or more distinct presets (e.g. quick,quick-3domain), got {text!r}"
        )
    paths = []
    for n in names:
        try:
            paths.append(preset_path(recipe, n))
        except FileNotFoundError as err:
            raise ValueError(f"--presets: {str(err).removeprefix('preset: ')}") from None
    if len({p.stem for p in paths}) != len(paths):
        raise ValueError(
            f"--presets: expected presets with distinct file names (they name the run folders), got {names}"
        )
    return paths


def variants(
    model_key: str,
    models: list[str] | None,
    vary: tuple[str, list[str]] | None,
    known: tuple[str, ...] = SEQUENCE_LAYERS,
) -> list[tuple[str, str]]:
    """``(run label = folder name, override)`` per run: ``(<model>, MODEL_KEY=<model>)`` for ``models``,
    ``(<last key part>=<value>, KEY=<value>)`` for ``vary``.

    Raises:
        ValueError: unless exactly one of ``models`` / ``vary`` is given, or for a model name not in
            ``known`` (the recipe's ``MODELS``; default the sequence layers).
    """
    if (models is None) == (vary is None):
        raise ValueError(
            "compare: expected one of --models or --vary, got " + ("both" if models else "neither")
        )
    if vary is not None:
        key, values = vary
        return [(f"{key.rsplit('.', 1)[-1]}={v}", f"{key}={v}") for v in values]
    unknown = [m for m in models or [] if m not in known]
    if unknown or not models:
        raise ValueError(f"models (--models): expected names from {known}, got {models}")
    return [(m, f"{model_key}={m}") for m in models]


def _same_evaluation(recorded: Any, command: str) -> bool:
    """Whether two ``fastweights <recipe> eval DIR …`` commands evaluate alike: equal but for ``DIR``, so
    a run folder that was moved or copied (``cp -a``) keeps its evaluation."""
    if not isinstance(recorded, str):
        return False
    try:
        a, b = shlex.split(recorded), shlex.split(command)
    except ValueError:
        return False
    return len(a) == len(b) >= 4 and a[:3] == b[:3] and a[4:] == b[4:]


def earlier_evaluation(run_dir: Path, command: str) -> dict[str, Any] | None:
    """The run's ``results.json`` when it is still the evaluation ``command`` would make: the same eval
    command (checkpoint and ``eval.*`` overrides; the run folder's path may differ, e.g. a copied
    folder), written after the best checkpoint, and no training logged since (``run.trained_steps`` is
    the last step of ``metrics.jsonl``); ``None`` otherwise (the run is evaluated again)."""
    path, best = run_dir / "results.json", CheckpointManager(run_dir).path("best")
    if not path.is_file() or not best.is_file() or path.stat().st_mtime < best.stat().st_mtime:
        return None
    try:
        results = json.loads(path.read_text(encoding="utf-8"))
        records = read_jsonl(run_dir / "metrics.jsonl")
    except (OSError, ValueError):
        return None
    run = results.get("run", {}) if isinstance(results, dict) else {}
    if (
        not _same_evaluation(run.get("eval_command"), command)
        or not records
        or run.get("trained_steps") != records[-1].get("step")
    ):
        return None
    log.info("%s: reusing its evaluation (results.json is newer than best.pt, same eval command)", run_dir)
    return results


def compare(
    recipe: str,
    preset: Path,
    models: list[str] | None,
    run_root: Path,
    overrides: list[str] | None = None,
    *,
    command: str | None = None,
    vary: tuple[str, list[str]] | None = None,
    seeds: list[int] | None = None,
    force: bool = False,
    presets: list[Path] | None = None,
) -> dict[str, Any]:
    """Train (or resume) and evaluate ``preset`` once per sequence layer in ``models`` or once per value of
    ``vary = (key, values)``, or each preset file of ``presets`` (``preset`` unused; run folders named by
    the files' stems, e.g. ``quick`` and ``quick-3domain``) with the same overrides.

    Runs go to ``run_root/<label>`` (see :func:`variants`); an existing finished run is resumed (nothing
    retrained) and re-evaluated. ``eval.*`` overrides also apply to the evaluation of runs that already
    existed; a run whose ``results.json`` is still current (:func:`earlier_evaluation`) is not evaluated
    again. Writes ``run_root/comparison.json``, ``comparison.md`` and the recipe's plot(s)
    (``comparison*.png``), holding the lock of ``run_root``: files it wrote before are replaced, any other
    file of those names (the user's own, or one edited since) is refused before anything is trained
    (:class:`~fastweights.train.run_folder.OutputClaims`), unless ``force``.

    With ``seeds``, every variant is trained once per seed (``train.seed=<seed>``) into
    ``run_root/<label>/seed<seed>``; the table lists every run (``<label> seed <seed>``), and
    ``comparison.md/.json`` add the recipe's headline numbers (``headline``) as the mean ± 95% CI over
    seeds, per seed, within one run, and the paired difference of every variant against the first with
    its verdict (:func:`fastweights.recipes.compare.summarize_seeds`); ``comparison_seeds.png`` plots the
    means ± CI. A ``train.seed`` override cannot be combined with ``seeds``; ``{seed}`` in an override
    stands for the run's seed (e.g. ``train.init_from=runs/base/seed{seed}/checkpoints/best.pt``: each
    seed meta-finetunes its own base model).

    Returns:
        ``{"rows": table rows, "results": {label: results.json content}, "markdown": table}`` and, with
        ``seeds``, ``"seeds"``: the summary.

    Raises:
        ValueError: for an unknown recipe, model name or config key, or a bad value.
        RunFolderError: if ``run_root`` holds a ``comparison*`` file that compare did not write (without
            ``force``), or another process holds ``run_root``.
    """
    module = get_recipe(recipe)
    if presets is not None:
        if models is not None or vary is not None:
            raise ValueError("compare: expected one of --models, --vary or --presets, got several")
        runs = [(p.stem, []) for p in presets]
        preset_of = {p.stem: p for p in presets}
    else:
        runs = [
            (label, [o])
            for label, o in variants(
                module.MODEL_KEY, models, vary, getattr(module, "MODELS", SEQUENCE_LAYERS)
            )
        ]
        preset_of = {label: preset for label, _ in runs}
    given: dict[str, list[str]] = {}  # the user's overrides of each run ({seed} filled in)
    if seeds is not None:
        if (vary is not None and vary[0] == "train.seed") or any(
            o.startswith("train.seed=") for o in overrides or []
        ):
            raise ValueError("--seeds: train.seed is set by --seeds; remove it from --vary and the overrides")
        given = {
            f"{label}/seed{s}": [x.replace(SEED_FIELD, str(s)) for x in overrides or []]
            for label, _ in runs
            for s in seeds
        }
        runs = [(f"{label}/seed{s}", [*o, f"train.seed={s}"]) for label, o in runs for s in seeds]
        preset_of = {f"{label}/seed{s}": p for label, p in preset_of.items() for s in seeds}
    elif any(SEED_FIELD in o for o in overrides or []):
        raise ValueError(f"overrides: {SEED_FIELD} stands for the training seed of --seeds; give --seeds")
    else:
        given = {label: list(overrides or []) for label, _ in runs}
    configs = {label: load_config(module.CONFIG, preset_of[label], [*given[label], *o]) for label, o in runs}
    run_root = Path(run_root)
    claims = OutputClaims(run_root, f"{recipe} compare")
    with run_lock(run_root):
        fixed = ["comparison.json", "comparison.md", *(["comparison_seeds.png"] if seeds is not None else [])]
        plots = sorted(p.name for p in run_root.glob("comparison*.png") if p.name not in fixed)
        claims.check([*fixed, *plots], force=force)  # before anything is trained
        return _compare_runs(module, recipe, configs, given, run_root, claims, command, seeds, force)


def _compare_runs(
    module: Any,
    recipe: str,
    configs: dict[str, Any],
    given: dict[str, list[str]],
    run_root: Path,
    claims: OutputClaims,
    command: str | None,
    seeds: list[int] | None,
    force: bool,
) -> dict[str, Any]:
    """The body of :func:`compare` under the lock of ``run_root``: every run trained (or resumed) and
    evaluated, then the table and plots written through ``claims``."""
    results = {}
    for label, cfg in configs.items():
        eval_overrides = [o for o in given[label] if o.startswith("eval.")]
        run_dir = run_root / label
        resume = (run_dir / "config.yaml").exists()  # also a run killed before its first checkpoint
        log.info("%s: training %s in %s%s", recipe, label, run_dir, " (resume)" if resume else "")
        module.train(cfg, run_dir, resume=resume, command=command)
        evaluation = eval_command(recipe, run_dir, overrides=eval_overrides)
        results[label] = earlier_evaluation(run_dir, evaluation) or module.evaluate(
            run_dir, overrides=eval_overrides, command=evaluation
        )
    shown = {label.replace("/seed", " seed "): r for label, r in results.items()}
    header, rows = module.comparison_table(shown)
    lines = md_table(header, rows)
    out: dict[str, Any] = {"header": header, "rows": rows, "results": results}
    if seeds is not None:
        by_variant: dict[str, dict[int, Any]] = {}
        for label, res in results.items():
            variant, seed = label.rsplit("/seed", 1)
            by_variant.setdefault(variant, {})[int(seed)] = module.headline(res)
        summary = summarize_seeds(by_variant)
        out["seeds"] = summary
        lines = [*seed_markdown(summary), "", "Every run:", "", *lines]
    markdown = "\n".join(lines)
    with claims.staging() as stage:  # written aside, then moved into run_root only if nothing is in the way
        if seeds is not None:
            plot_bars(
                {
                    k: {m: (e["mean"], 0.0 if math.isnan(e["ci95"]) else e["ci95"]) for m, e in v.items()}
                    for k, v in out["seeds"]["variants"].items()
                },
                stage / "comparison_seeds.png",
                ylabel="mean over training seeds",
                title=f"{recipe}: mean ± 95% CI over seeds {', '.join(map(str, seeds))}",
            )
        atomic_write_json(stage / "comparison.json", out)
        atomic_write_text(stage / "comparison.md", markdown + "\n")
        module.plot_comparison(shown, stage)
        claims.publish(stage, force=force)
    return {
        "rows": rows,
        "results": results,
        "markdown": markdown,
        **({"seeds": out["seeds"]} if seeds else {}),
    }
